"""Our TRT8 plugin library in real TensorRT 8 engines: for LayerNorm, RMSNorm and FC (none,
ReLU, erf-GELU), fp32 and fp16, a decomposed model fused with target ``plugin`` is parsed
(the fallback importer creates our plugins), built with a dynamic profile, run at the
profile's min/opt/max against onnxruntime on the original, serialized, and reloaded in a
fresh process that only loads the library.  The work is bench/trt8_plugins.py's; this runs
it case by case.  Skipped without TensorRT 8.x, a GPU or nvcc (the library is built here
unless $FUSION_TRT8_PLUGIN_LIB names one)."""

from __future__ import annotations

import ctypes
import importlib.util
import os
import shutil
from pathlib import Path

import onnx
import pytest

import fusion
from fusion.plugins import library as pl

pytestmark = [pytest.mark.trt, pytest.mark.gpu]


def _gpu() -> bool:
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        n = ctypes.c_int(0)
        return cuda.cuInit(0) == 0 and cuda.cuDeviceGetCount(ctypes.byref(n)) == 0 and n.value > 0
    except OSError:
        return False


trt = pytest.importorskip("tensorrt", reason="TensorRT is not installed")
if not trt.__version__.startswith("8."):
    pytest.skip(f"TensorRT {trt.__version__} loads the IPluginV3 library, not the TRT8 one", allow_module_level=True)
if not _gpu():
    pytest.skip("no CUDA GPU", allow_module_level=True)

_spec = importlib.util.spec_from_file_location("trt8_plugins", Path(__file__).resolve().parent.parent / "bench" / "trt8_plugins.py")
bench = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(bench)

CASES = [bench.case_name(k, a, d) for k, a in bench.CASES for d in ("fp32", "fp16")]


@pytest.fixture(scope="module")
def lib(tmp_path_factory) -> Path:
    given = os.environ.get("FUSION_TRT8_PLUGIN_LIB")
    if given:
        return Path(given)
    if shutil.which("nvcc") is None:
        pytest.skip("nvcc not found and $FUSION_TRT8_PLUGIN_LIB not set")
    return pl.build_library(tmp_path_factory.mktemp("trt8_build"), trt=8)


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("trt8_models")
    for kind, act in bench.CASES:
        for dtype in ("fp32", "fp16"):
            name = bench.case_name(kind, act, dtype)
            orig = bench.decomposed_model(kind, act, dtype)
            onnx.save(orig, str(out / f"{name}.orig.onnx"))
            onnx.save(fusion.fuse(orig, bench.PASSES, target="plugin"), str(out / f"{name}.fused.onnx"))
    return out


def test_library_registers_its_creators_on_load(lib):
    creators = bench.load_plugins(lib)
    assert creators == sorted(f"{s.op_type}/{s.version}/{s.namespace}" for s in fusion.rewrite.specs.fusion_specs())


@pytest.mark.parametrize("name", CASES)
def test_fused_model_runs_our_plugin(lib, models, tmp_path, name):
    bench.load_plugins(lib)
    row = bench.run_case(name, models, lib, tmp_path, trt.Logger(trt.Logger.WARNING))
    assert row["built"], row.get("parse_error", row)
    assert row["all_fused_nodes_are_our_plugins"], row["plugin_layers"]
    assert row["passed_build_process"], row["max_abs_err"]
    assert row.get("passed_reload"), row.get("reload_error", row.get("reload_max_abs_err"))
