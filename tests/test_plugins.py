"""The plugin library on a CPU machine: generated spec header, build, contract check against
fusion.rewrite.specs (and that a wrong spec is caught), exports, launch policy, the C++ harness's
GPU-free steps, and NVRTC compatibility of the kernel sources.

Needs nvcc (skipped without it), the TensorRT 10 headers (pip: kernel-lens) and cublasLt.h
(pip: nvidia-cublas).  Set FUSION_PLUGIN_BUILD_DIR to reuse one build across runs.
"""

from __future__ import annotations

import ctypes
import dataclasses
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fusion.plugins import library as pl
from fusion.errors import PluginBuildError
from fusion.rewrite.specs import Field, FieldType, fusion_specs

HAVE_NVCC = shutil.which("nvcc") is not None or Path("/usr/local/cuda/bin/nvcc").is_file()
needs_nvcc = pytest.mark.skipif(not HAVE_NVCC, reason="nvcc not found: the plugin library cannot be built here")


def _wheel_lib(name: str) -> Path | None:
    """A library shipped in an nvidia-* wheel (nvidia/cu13/lib), if installed."""
    spec = importlib.util.find_spec("nvidia")
    for d in spec.submodule_search_locations if spec else []:
        p = Path(d) / "cu13" / "lib" / name
        if p.is_file():
            return p
    return None


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    if not HAVE_NVCC:
        pytest.skip("nvcc not found: the plugin library cannot be built here")
    out = Path(os.environ.get("FUSION_PLUGIN_BUILD_DIR") or tmp_path_factory.mktemp("plugin_build"))
    return pl.build_library(out, with_harness=True)


# ------------------------------------------------------------------ spec header


def test_committed_spec_header_is_current():
    committed = (pl.plugin_src_dir() / pl.SPEC_HEADER_REL).read_text()
    assert committed == pl.render_spec_header(), "run: python -m fusion.plugins.library header"


def test_spec_header_carries_every_field():
    text = pl.render_spec_header()
    for spec in fusion_specs():
        assert f'"{spec.op_type}", "{spec.version}", "{spec.namespace}"' in text
        for f in spec.fields:
            assert f'{{"{f.name}", nvinfer1::PluginFieldType::{f.type.trt_name}' in text


def test_spec_header_refuses_unmapped_field_types():
    spec = dataclasses.replace(fusion_specs()[0], fields=(Field("w", FieldType.TENSOR, "weights"),))
    with pytest.raises(ValueError, match="no C\\+\\+ mapping"):
        pl.render_spec_header([spec])


def test_plugin_readmes_document_every_parameter():
    for spec in fusion_specs():
        text = (pl.plugin_src_dir() / spec.source_dir / "README.md").read_text()
        assert f"# {spec.op_type}" in text
        for name in [f.name for f in spec.fields] + [p.name for p in spec.inputs + spec.outputs]:
            assert f"| `{name}` |" in text, f"{spec.source_dir}/README.md lacks {name}"
        for f in spec.fields:
            assert f"`{f.type.trt_name}`" in text


# ------------------------------------------------------------------ build and contract


@needs_nvcc
def test_library_agrees_with_specs(built):
    assert pl.check_library(built) == []


@needs_nvcc
def test_describe_reports_each_creator(built):
    creators = pl.describe_library(built)
    assert [(c["name"], c["version"], c["namespace"]) for c in creators] == [s.key for s in fusion_specs()]
    for c in creators:
        assert (c["interface"]["kind"], c["interface"]["major"]) == ("PLUGIN CREATOR_V3ONE", 1)
        assert c["plugin"]["created"] and c["plugin"]["roundtrip"] and c["plugin"]["clone"]


def _mutations():
    ln, rms, fc, *rest = fusion_specs()  # rest: the specs added since (GroupNorm, skip norms), passed unchanged
    extra = Field("extra", FieldType.INT, "not in the library", default=0)
    yield "version", [dataclasses.replace(ln, version="2"), rms, fc, *rest], "FusedLayerNorm: no creator with version '2'"
    yield "namespace", [ln, dataclasses.replace(rms, namespace="other"), fc, *rest], "FusedRMSNorm: no creator"
    yield "extra field", [ln, dataclasses.replace(rms, fields=rms.fields + (extra,)), fc, *rest], "missing field 'extra'"
    yield "field type", [ln, rms, dataclasses.replace(fc, fields=(
        dataclasses.replace(fc.fields[0], type=FieldType.FLOAT),) + fc.fields[1:]), *rest], "field 'out_features' is"
    yield "dropped field", [dataclasses.replace(ln, fields=ln.fields[:1]), rms, fc, *rest], "extra field 'axis'"
    yield "field order", [ln, rms, dataclasses.replace(fc, fields=fc.fields[::-1]), *rest], "field order"
    yield "missing creator", [ln, fc, *rest], "creator FusedRMSNorm version '1' namespace 'fusion' is in the library"
    yield "renamed op", [dataclasses.replace(ln, op_type="FusedLayerNorm2"), rms, fc, *rest], "FusedLayerNorm2: no creator"


@needs_nvcc
@pytest.mark.parametrize("what,specs,expected", list(_mutations()), ids=[m[0] for m in _mutations()])
def test_wrong_spec_is_reported(built, what, specs, expected):
    problems = pl.check_library(built, specs)
    assert problems, f"a changed {what} went unnoticed"
    assert any(expected in p for p in problems), problems


@needs_nvcc
def test_exports_and_dependencies(built):
    if not shutil.which("nm") or not shutil.which("readelf"):
        pytest.skip("binutils not installed")
    nm = subprocess.run(["nm", "-D", "--defined-only", str(built)], capture_output=True, text=True, check=True)
    exported = {ln.split()[-1] for ln in nm.stdout.splitlines() if ln.split()[1:2] == ["T"]}
    assert exported == set(pl.EXPORTS)  # static cudart stays private
    needed = subprocess.run(["readelf", "-d", str(built)], capture_output=True, text=True, check=True).stdout
    for lib in ("libnvinfer", "libcudart", "libcublas"):
        assert lib not in needed


@needs_nvcc
def test_rebuild_is_skipped(built):
    before = built.stat().st_mtime_ns
    t = time.monotonic()
    assert pl.build_library(built.parent, with_harness=True) == built
    assert built.stat().st_mtime_ns == before
    assert time.monotonic() - t < 10


@needs_nvcc
def test_compile_error_is_one_line(tmp_path, monkeypatch):
    src = tmp_path / "plugin_src"
    shutil.copytree(pl.plugin_src_dir(), src)
    first = pl.library_sources(src)[0]
    first.write_text("#error fusion-test-breakage\n" + first.read_text())
    monkeypatch.setenv("FUSION_PLUGIN_SRC", str(src))
    with pytest.raises(PluginBuildError, match="fusion-test-breakage") as e:
        pl.build_library(tmp_path / "out")
    assert "\n" not in str(e.value)


def test_missing_nvcc_is_reported(tmp_path):
    with pytest.raises(PluginBuildError, match="nvcc not found"):
        pl.build_library(tmp_path, nvcc=str(tmp_path / "no-nvcc"))


@needs_nvcc
def test_missing_tensorrt_headers_are_reported(tmp_path, monkeypatch):
    monkeypatch.setenv("TENSORRT_INCLUDE", str(tmp_path))
    monkeypatch.setattr(pl, "_package_dirs", lambda name: [])
    if any((Path(d) / "NvInferRuntime.h").is_file() for d in ("/usr/include/x86_64-linux-gnu", "/usr/include",
                                                             "/usr/local/tensorrt/include")):  # fmt: skip
        pytest.skip("system TensorRT headers present")
    with pytest.raises(PluginBuildError, match="kernel-lens"):
        pl.build_library(tmp_path / "out")


def test_missing_library_is_reported(tmp_path):
    with pytest.raises(PluginBuildError, match="not found"):
        pl.check_library(tmp_path / "libnothing.so")


# ------------------------------------------------------------------ launch policy


SHAPES = [(r, c) for r in (1, 7, 4099) for c in (1, 3, 255, 256, 768, 1023, 1024, 1025, 1536, 2048, 3072, 4096, 4097, 8192,
                                                 16384, 32768, 65536, 100000)]  # fmt: skip


@needs_nvcc
def test_python_launch_policy_matches_library(built):
    for op in pl.NORM_OPS:
        for dtype in ("float32", "float16", "bfloat16"):
            for rows, cols in SHAPES:
                for vec in (True, False):
                    want = pl.library_norm_plan(built, op, dtype, rows, cols, vec)
                    assert pl.norm_launch_config(op, dtype, rows, cols, vec) == want, (op, dtype, rows, cols, vec)


def test_launch_policy_paths():
    assert pl.norm_launch_config("layernorm", "float16", 8192, 768) == ("fusion_layernorm_warp_f16_v8_n3", 2048, 128)
    assert pl.norm_launch_config("rmsnorm", "float32", 10, 8192)[0] == "fusion_rmsnorm_block_f32_v4_n8"
    assert pl.norm_launch_config("layernorm", "bfloat16", 10, 1025)[0].startswith("fusion_layernorm_block_bf16_v1")
    assert pl.norm_launch_config("layernorm", "float32", 10, 1 << 20)[0] == "fusion_layernorm_loop_f32_v4"
    with pytest.raises(ValueError):
        pl.norm_launch_config("layernorm", "int8", 1, 1)


# (stage_sms, smem_optin, stream_ctas): no extras; an H100 (sm_90, 9 stream CTAs an SM); an A100 (sm_80,
# 163 KB opt-in, 9 an SM); an RTX 3090 (99 KB, 5 an SM in its 100 KB); an sm_90 part with 195 KB (the
# fp16 pair's K = 64, the fp32 wide path's K = 32 only); an H100 given as (stage_sms, smem_optin).
DEVICES = ((0, 0, 0), (132, 232448, 1188), (0, 166912, 972), (0, 101376, 410), (114, 200000, 1026), (132, 232448))
GN_COLS = (1, 4, 42, 128, 255, 256, 2048, 2560, 4096, 6144, 8192, 8193, 10240, 12500, 16384, 20480, 24576, 24577, 25025, 28672, 32768,
           36864, 40960, 40961, 40964, 41984, 81920, 82432, 82436, 86016, 131072, 163840, 294912, 327680, 327684, 524288, 655360,
           655368)  # fmt: skip


@needs_nvcc
def test_python_groupnorm_policy_matches_library(built):
    for dtype in pl.GROUPNORM_DTYPES:
        for rows in (1, 64, 4096):
            for cols in GN_COLS:
                for vec in (True, False):
                    for device in DEVICES:
                        want = pl.library_groupnorm_plan(built, dtype, rows, cols, vec, *device)
                        plan = pl.groupnorm_plan(dtype, rows, cols, vec, *device)
                        got = (*plan, pl.groupnorm_smem(plan[0], dtype, cols, plan[2]),
                               pl.groupnorm_workspace(plan[0], rows, cols))
                        assert got == want, (dtype, rows, cols, vec, device)


@needs_nvcc
def test_library_groupnorm_plan_refuses_bf16_and_empty(built):
    assert pl.library_groupnorm_plan(built, "bfloat16", 8, 128) is None  # no bf16 GroupNorm kernel
    assert pl.library_groupnorm_plan(built, "float32", 0, 128) is None


def test_groupnorm_launch_policy_paths():
    cfg = pl.groupnorm_launch_config
    # The SD-UNet groups (32 groups): the smallest K whose CTA has at most 256 threads (several
    # CTAs share an SM), else the largest K, in up to 1024 threads; x read once.
    assert cfg("float32", 16, 320, 32, 64 * 64) == ("fusion_groupnorm_reg_f32_v4_k40", 512, 1024)
    assert cfg("float32", 8, 640, 32, 32 * 32) == ("fusion_groupnorm_reg_f32_v4_k40", 256, 512)
    assert cfg("float32", 8, 1280, 32, 16 * 16) == ("fusion_groupnorm_reg_f32_v4_k40", 256, 256)
    assert cfg("float16", 16, 320, 32, 64 * 64) == ("fusion_groupnorm_reg_f16_v8_k80", 512, 512)
    assert cfg("float16", 8, 640, 32, 32 * 32) == ("fusion_groupnorm_reg_f16_v8_k80", 256, 256)
    assert cfg("float16", 128, 1280, 32, 16 * 16) == ("fusion_groupnorm_reg_f16_v8_k48", 4096, 224)
    # Small groups: the fewest packs per thread that keep the CTA within 256 threads.
    assert cfg("float32", 2, 64, 32, 8 * 8) == ("fusion_groupnorm_reg_f32_v4_k4", 64, 32)
    assert cfg("float16", 1, 320, 32, 16 * 16) == ("fusion_groupnorm_reg_f16_v8_k16", 32, 160)
    # Scalar packs: cols not a multiple of the vector, or unaligned pointers (at most K = 24).
    assert cfg("float32", 3, 30, 5, 7) == ("fusion_groupnorm_reg_f32_v1_k8", 15, 32)
    assert cfg("float16", 2, 64, 32, 64, vec_ok=False) == ("fusion_groupnorm_reg_f16_v1_k8", 64, 32)
    assert cfg("float32", 1, 96, 1, 256, vec_ok=False) == ("fusion_groupnorm_reg_f32_v1_k24", 1, 1024)
    # Too large for the registers: the three-pass loop.
    assert cfg("float32", 1, 96, 1, 257, vec_ok=False) == ("fusion_groupnorm_loop_f32_v1", 1, 1024)
    assert cfg("float32", 16, 320, 32, 64 * 64, vec_ok=False)[0] == "fusion_groupnorm_loop_f32_v1"
    assert cfg("float32", 1, 4, 1, 10241) == ("fusion_groupnorm_loop_f32_v4", 1, 1024)  # 40964 > 1024 x 40
    assert cfg("float16", 1, 1, 1, 81928)[0] == "fusion_groupnorm_loop_f16_v8"  # > 1024 x 80
    assert cfg("float16", 1, 1, 1, 81920) == ("fusion_groupnorm_reg_f16_v8_k80", 1, 1024)
    # The device's extras, (stage_sms, smem_optin).  Staging (sm_90+): fp32 K = 40 where a CTA
    # fills the SM (> 512 threads), on one CTA per SM; the rest stay as they were.
    h100, a100 = (132, 232448), (0, 166912)
    assert cfg("float32", 16, 320, 32, 64 * 64, True, *h100) == ("fusion_groupnorm_staged_f32_v4_k40", 132, 1024)
    assert cfg("float32", 1, 320, 32, 64 * 64, True, *h100) == ("fusion_groupnorm_staged_f32_v4_k40", 32, 1024)
    assert cfg("float32", 16, 320, 32, 64 * 64, True, *a100) == ("fusion_groupnorm_reg_f32_v4_k40", 512, 1024)
    assert cfg("float32", 16, 320, 32, 64 * 64, True, 132, 101376) == ("fusion_groupnorm_reg_f32_v4_k40", 512, 1024)
    # fp16 where a register-path CTA would fill the SM (> 512 threads at K = 80): the wide kernel
    # in 512-thread CTAs, two an SM, one a group (SDXL's 640x64x64: 81920 - 32768 in 96 KB each);
    # where the groups outnumber the pairs the SMs hold, K = 48, its statistics starting on the
    # head (81920 - 24576 in 112 KB each), if two of those fit.
    assert cfg("float16", 1, 1, 1, 81920, True, *h100) == ("fusion_groupnorm_wide_f16_v8_k64", 1, 512)
    assert cfg("float16", 16, 640, 32, 64 * 64, True, *h100) == ("fusion_groupnorm_wide_f16_v8_k48", 512, 512)
    assert pl.groupnorm_smem("fusion_groupnorm_wide_f16_v8_k64", "float16", 81920, 512) == 98304
    assert pl.groupnorm_smem("fusion_groupnorm_wide_f16_v8_k48", "float16", 81920, 512) == 114688
    assert cfg("float16", 8, 352, 32, 64 * 64, True, *h100) == ("fusion_groupnorm_wide_f16_v8_k64", 256, 512)
    assert cfg("float16", 9, 352, 32, 64 * 64, True, *h100) == ("fusion_groupnorm_wide_f16_v8_k48", 288, 512)
    assert cfg("float16", 16, 640, 32, 64 * 64, True, 132, 200000) == ("fusion_groupnorm_wide_f16_v8_k64", 512, 512)
    assert cfg("float16", 8, 320, 32, 64 * 64, True, *h100) == ("fusion_groupnorm_reg_f16_v8_k80", 256, 512)
    assert cfg("float16", 16, 640, 32, 64 * 64, True, *a100) == ("fusion_groupnorm_reg_f16_v8_k80", 512, 1024)
    assert cfg("float16", 16, 640, 32, 64 * 64, True, 132, 101376) == ("fusion_groupnorm_reg_f16_v8_k80", 512, 1024)
    assert cfg("float32", 8, 640, 32, 32 * 32, True, *h100) == ("fusion_groupnorm_reg_f32_v4_k40", 256, 512)
    assert cfg("float16", 16, 320, 32, 64 * 64, True, *h100) == ("fusion_groupnorm_reg_f16_v8_k80", 512, 512)
    assert cfg("float32", 16, 320, 32, 64 * 64, False, *h100)[0] == "fusion_groupnorm_loop_f32_v1"
    assert cfg("float32", 1, 96, 1, 256, False, *h100)[0] == "fusion_groupnorm_reg_f32_v1_k24"
    # Past the registers, sm_90+: fp32 takes the stream path (chunks of 512 packs on 9 CTAs of 128
    # threads an SM, at most one a chunk; a 64-bit partial a chunk of workspace), fp16 the wide
    # path, its tail in the opt-in shared memory (SDXL's 320x128x128: 163840 - 65536 in 192 KB), on
    # one CTA an SM taking rows in turn, loading the next head ahead (K = 48) where its tail fits
    # (groups of 164864: 226 KB, the most the opt-in leaves), else K = 64; fp16 past the wide path
    # the stream path too.  Before sm_90, the wide path (fp32 K = 32) on one CTA a group.
    stream32, stream16 = "fusion_groupnorm_stream_f32_v4", "fusion_groupnorm_stream_f16_v8"
    assert cfg("float32", 8, 640, 32, 64 * 64, True, *h100) == (stream32, 1188, 128)
    assert cfg("float32", 1, 41, 1, 32 * 32, True, *h100) == (stream32, 21, 128)  # 41984: 21 chunks
    assert cfg("float32", 2, 320, 32, 128 * 128, True, *h100) == (stream32, 1188, 128)
    assert pl.groupnorm_workspace(stream32, 64, 128 * 128 * 10) == 64 * 80 * 8
    assert pl.groupnorm_smem(stream32, "float32", 163840, 128) == 16384
    assert cfg("float32", 1, 1, 1, 327680, True, *h100) == (stream32, 160, 128)
    assert cfg("float32", 1, 1, 1, 327684, True, *h100) == (stream32, 161, 128)  # a last chunk of 1 pack
    assert cfg("float16", 8, 320, 32, 128 * 128, True, *h100) == ("fusion_groupnorm_wide_f16_v8_k48", 132, 1024)
    assert cfg("float16", 140, 1, 1, 164864, True, *h100) == ("fusion_groupnorm_wide_f16_v8_k48", 132, 1024)
    assert cfg("float16", 140, 1, 1, 164872, True, *h100) == ("fusion_groupnorm_wide_f16_v8_k64", 132, 1024)
    assert cfg("float16", 1, 320, 32, 128 * 128, True, *h100) == ("fusion_groupnorm_wide_f16_v8_k64", 32, 1024)
    assert pl.groupnorm_smem("fusion_groupnorm_wide_f16_v8_k64", "float16", 163840) == 196608
    assert cfg("float16", 1, 8, 1, 256 * 256, True, *h100) == (stream16, 128, 128)
    assert cfg("float16", 16, 8, 1, 256 * 256, True, *h100) == (stream16, 1188, 128)
    assert pl.groupnorm_workspace("fusion_groupnorm_wide_f16_v8_k64", 64, 163840) == 0
    assert cfg("float32", 1, 41, 1, 32 * 32, True, *a100) == ("fusion_groupnorm_wide_f32_v4_k32", 1, 1024)
    assert cfg("float32", 8, 41, 1, 32 * 32, True, *a100) == ("fusion_groupnorm_wide_f32_v4_k32", 8, 1024)
    assert pl.groupnorm_smem("fusion_groupnorm_wide_f32_v4_k32", "float32", 81920) == 196608
    assert cfg("float32", 8, 640, 32, 64 * 64, True, *a100)[0] == "fusion_groupnorm_loop_f32_v4"  # 192 KB tail
    assert cfg("float32", 2, 320, 32, 128 * 128, True, *a100)[0] == "fusion_groupnorm_loop_f32_v4"
    # Before sm_90 with the stream kernel's CTAs (the launcher asks the occupancy calculator: an
    # A100 holds 9 an SM, 972): past the wide path the stream path instead of the loop path, on
    # the CTAs the device holds (an SD VAE decoder's 128 x 512 x 512: 256 chunks a group); where
    # the wide tail fits, the wide path still, in fp32 too.
    a100s = (*a100, 108 * 9)
    assert cfg("float32", 8, 640, 32, 64 * 64, True, *a100s) == (stream32, 972, 128)
    assert cfg("float32", 8, 41, 1, 32 * 32, True, *a100s) == ("fusion_groupnorm_wide_f32_v4_k32", 8, 1024)
    assert cfg("float16", 8, 320, 32, 128 * 128, True, *a100s) == (stream16, 972, 128)
    assert cfg("float16", 1, 128, 32, 512 * 512, True, *a100s) == (stream16, 972, 128)
    assert pl.groupnorm_workspace(stream16, 32, 4 * 512 * 512) == 32 * 256 * 8
    assert cfg("float16", 1, 128, 32, 512 * 512, True, 0, 101376, 82 * 5) == (stream16, 410, 128)
    assert cfg("float16", 1, 128, 32, 512 * 512, False, *a100s)[0] == "fusion_groupnorm_loop_f16_v1"  # scalar packs
    assert cfg("float16", 8, 320, 32, 64 * 64, True, *a100s) == ("fusion_groupnorm_reg_f16_v8_k80", 256, 512)
    # (an sm_90 device with less shared memory: the stream path where the wide tail does not fit)
    assert cfg("float16", 8, 320, 32, 128 * 128, True, 132, 101376) == (stream16, 1188, 128)
    assert cfg("float32", 8, 640, 32, 64 * 64, False, *h100)[0] == "fusion_groupnorm_loop_f32_v1"  # scalar packs
    assert pl.groupnorm_smem("fusion_groupnorm_staged_f32_v4_k40", "float32", 40960) == 163840
    assert pl.groupnorm_smem("fusion_groupnorm_wide_f32_v4_k32", "float32", 81920) == 196608
    assert pl.groupnorm_smem("fusion_groupnorm_wide_f16_v8_k64", "float16", 163840) == 196608
    assert pl.groupnorm_smem("fusion_groupnorm_reg_f32_v4_k40", "float32", 40960) == 0
    with pytest.raises(ValueError, match="no groupnorm launch"):
        cfg("float32", 1, 30, 4, 7)  # 4 groups do not divide 30 channels
    with pytest.raises(ValueError, match="no groupnorm launch for bfloat16"):
        cfg("bfloat16", 1, 32, 4, 7)
    with pytest.raises(ValueError, match="no groupnorm kernel for bfloat16"):
        pl.groupnorm_plan("bfloat16", 1, 64)
    with pytest.raises(ValueError, match="nothing to launch"):
        pl.groupnorm_plan("float16", 4, 0)


def _groupnorm_instantiations() -> set[str]:
    """The kernel names groupNormKernels.cuh's X-macros instantiate."""
    text = (pl.plugin_src_dir() / "groupnorm" / "groupNormKernels.cuh").read_text()
    body = lambda name: re.search(rf"#define {name}\([^)]*\)((?:[^\n]*\\\n)*[^\n]*)", text).group(1)  # noqa: E731
    kernels = body("FUSION_GROUPNORM_KERNELS")
    names = set()
    for lists, tn in re.findall(r"(FUSION_GROUPNORM_FOR_K_\w+)\(XK, (\w+), \w+\)", kernels):
        for vec, k in re.findall(r"X\(TN, T, (\d+), (\d+)\)", body(lists)):
            names.add(f"fusion_groupnorm_reg_{tn}_v{vec}_k{k}")
    names |= {f"fusion_groupnorm_loop_{tn}_v{vec}" for tn, vec in re.findall(r"XL\((\w+), \w+, (\d+)\)", kernels)}
    for kind, x in (("staged", "XS"), ("wide", "XW")):
        listed = body(f"FUSION_GROUPNORM_{kind.upper()}_KERNELS")
        names |= {f"fusion_groupnorm_{kind}_{tn}_v{vec}_k{k}"
                  for tn, vec, k in re.findall(rf"{x}\((\w+), \w+, (\d+), (\d+)(?:, \w+)?\)", listed)}  # fmt: skip
    listed = body("FUSION_GROUPNORM_STREAM_KERNELS")
    names |= {f"fusion_groupnorm_stream_{tn}_v{vec}" for tn, vec in re.findall(r"XS\((\w+), \w+, (\d+)\)", listed)}
    return names


def test_groupnorm_policy_mirrors_the_instantiations():
    names = _groupnorm_instantiations()
    assert len(names) == 2 * (6 + 3 + 2 + 2 + 1) + 1 - 1, sorted(names)  # fp32 alone: staged; fp16 alone: wide k48
    picked = {pl.groupnorm_plan(dtype, rows, cols, vec, *device)[0] for dtype in pl.GROUPNORM_DTYPES
              for rows in (1, 4096) for cols in GN_COLS for vec in (True, False) for device in DEVICES}  # fmt: skip
    assert picked <= names, sorted(picked - names)  # the policy launches only what exists
    assert names <= picked, sorted(names - picked)  # and every instantiation is reachable


def test_groupnorm_gpu_cases_reach_every_kernel():
    """tests/gpu/test_groupnorm_kernel.py's cases (run on the GPU) cover each instantiation."""
    from tests.gpu.test_groupnorm_kernel import CASES, TOL, planned

    devices = ((0, 0), (132, 232448), (0, 166912))  # none, an H100, an A100 (the wide kernels)
    reached = {planned(dtype, case, device) for dtype in TOL for case in CASES for device in devices}
    assert reached == _groupnorm_instantiations(), sorted(_groupnorm_instantiations() ^ reached)


# ------------------------------------------------------------------ harness (GPU-free steps)


def _harness(built: Path, env: dict[str, str]) -> tuple[int, dict, str]:
    out = built.parent / "harness_cpu.json"
    proc = subprocess.run([str(built.parent / pl.HARNESS_NAME), str(built), "--cpu", "--json", str(out)],
                          capture_output=True, text=True, env={**os.environ, **env}, timeout=120)  # fmt: skip
    return proc.returncode, json.loads(out.read_text()), proc.stdout + proc.stderr


@needs_nvcc
def test_harness_cpu_steps(built):
    cublas = _wheel_lib("libcublasLt.so.13")
    if cublas is None:
        pytest.skip("nvidia-cublas not installed: FC configure cannot open cuBLASLt")
    rc, report, text = _harness(built, {"FUSION_CUBLASLT": str(cublas)})
    assert rc == 0, text[-3000:]
    assert report["failed"] == 0 and report["passed"] > 50
    plugins = {c["plugin"] for c in report["cases"]}
    assert plugins == {s.op_type for s in fusion_specs()}
    assert all(n["ok"] for n in report["negative"])


@needs_nvcc
def test_harness_reports_missing_cublaslt(built, tmp_path):
    rc, report, _ = _harness(built, {"FUSION_CUBLASLT": str(tmp_path / "libcublasLt.so.13")})
    assert rc == 1
    for case in report["cases"]:
        if case["plugin"] == "FusedFC":
            assert list(case["failures"]) and all(f.startswith("configure: FusedFC needs cuBLASLt") for f in case["failures"])
            assert "FUSION_CUBLASLT" in case["failures"][0]
        else:
            assert case["ok"], case


# ------------------------------------------------------------------ NVRTC (what cupy.RawModule does)


def _nvrtc():
    lib = _wheel_lib("libnvrtc.so.13")
    if lib is None:
        pytest.skip("NVRTC not installed (pip install nvidia-cuda-nvrtc)")
    for builtins in sorted(lib.parent.glob("libnvrtc-builtins.so.*")):
        ctypes.CDLL(str(builtins), mode=ctypes.RTLD_GLOBAL)  # found by soname from libnvrtc
    return ctypes.CDLL(str(lib))


@pytest.mark.parametrize("name", ["layernorm", "rmsnorm", "fc", "groupnorm"])
def test_kernel_sources_compile_with_nvrtc(name):
    nvrtc = _nvrtc()
    options = [*pl.kernel_compile_options(), "-arch=compute_90"]
    if not any(o.startswith("-I") and Path(o[2:], "cuda_bf16.h").is_file() for o in options):
        pytest.skip("CUDA headers not found")
    prog = ctypes.c_void_p()
    code = pl.kernel_code(name).encode()
    assert nvrtc.nvrtcCreateProgram(ctypes.byref(prog), code, name.encode(), 0, None, None) == 0
    opts = (ctypes.c_char_p * len(options))(*[o.encode() for o in options])
    rc = nvrtc.nvrtcCompileProgram(prog, len(options), opts)
    size = ctypes.c_size_t()
    nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetProgramLog(prog, log)
    nvrtc.nvrtcDestroyProgram(ctypes.byref(prog))
    assert rc == 0, log.value.decode()[:2000]


# ------------------------------------------------------------------ TensorRT 8 flavour (IPluginV2DynamicExt)


@pytest.fixture(scope="module")
def built8(tmp_path_factory) -> Path:
    if not HAVE_NVCC:
        pytest.skip("nvcc not found: the plugin library cannot be built here")
    out = Path(os.environ.get("FUSION_PLUGIN_BUILD_DIR") or tmp_path_factory.mktemp("plugin_build8"))
    return pl.build_library(out, trt=8)


@needs_nvcc
def test_trt8_library_agrees_with_specs(built8):
    assert built8.name == "libfusion_plugins_trt8.so"
    assert pl.library_flavour(built8).trt == 8
    assert pl.check_library(built8) == []


@needs_nvcc
def test_trt8_describe_reports_each_creator(built8):
    creators = pl.describe_library(built8)
    assert [(c["name"], c["version"], c["namespace"]) for c in creators] == [s.key for s in fusion_specs()]
    for c in creators:
        assert (c["interface"]["kind"], c["interface"]["major"]) == ("IPluginCreator", 8)
        assert c["registered_namespace"] == "fusion"
        p = c["plugin"]
        assert p["created"] and p["roundtrip"] and p["clone"] and p["rejects_foreign"]
        assert p["interface"]["kind"] == "IPluginV2DynamicExt"  # the top byte of getTensorRTVersion
        assert p["formats"] == {"float": True, "half": True, "int8": False}


@needs_nvcc
@pytest.mark.parametrize("what,specs,expected", list(_mutations()), ids=[m[0] for m in _mutations()])
def test_trt8_wrong_spec_is_reported(built8, what, specs, expected):
    problems = pl.check_library(built8, specs)
    assert problems, f"a changed {what} went unnoticed"
    assert any(expected in p for p in problems), problems


@needs_nvcc
def test_trt8_exports_and_dependencies(built8):
    if not shutil.which("nm") or not shutil.which("readelf"):
        pytest.skip("binutils not installed")
    nm = subprocess.run(["nm", "-D", "--defined-only", str(built8)], capture_output=True, text=True, check=True)
    exported = {ln.split()[-1] for ln in nm.stdout.splitlines() if ln.split()[1:2] == ["T"]}
    assert exported == set(pl.FLAVOURS[8].exports)
    undefined = subprocess.run(["nm", "-D", "--undefined-only", str(built8)], capture_output=True, text=True).stdout
    assert "getPluginRegistry" not in undefined  # looked up at load time, not linked
    needed = subprocess.run(["readelf", "-d", str(built8)], capture_output=True, text=True, check=True).stdout
    for lib in ("libnvinfer", "libcudart", "libcublas"):
        assert lib not in needed


@needs_nvcc
def test_trt8_library_loads_without_tensorrt(built8):
    """Loaded where no libnvinfer is: no crash, a one-line warning, nothing registered."""
    code = f"import ctypes; lib = ctypes.CDLL({str(built8)!r}); print(lib.fusion_trt8_register())"
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "-1"
    assert "TensorRT (libnvinfer.so.8) is not loaded" in proc.stderr


@needs_nvcc
def test_trt8_rebuild_is_skipped(built8):
    before = built8.stat().st_mtime_ns
    assert pl.build_library(built8.parent, trt=8) == built8
    assert built8.stat().st_mtime_ns == before


def _fake_headers(tmp_path: Path, major: int, minor: int) -> Path:
    d = tmp_path / f"trt{major}"
    d.mkdir()
    (d / "NvInferRuntime.h").write_text("#pragma once\n")
    (d / "NvInferVersion.h").write_text(
        f"#define NV_TENSORRT_MAJOR {major}\n#define NV_TENSORRT_MINOR {minor}\n#define NV_TENSORRT_PATCH 1\n"
    )
    return d


@pytest.mark.parametrize("trt,headers", [(8, (10, 3)), (10, (8, 5))])
def test_mismatched_tensorrt_headers_are_refused(tmp_path, trt, headers):
    inc = _fake_headers(tmp_path, *headers)
    with pytest.raises(PluginBuildError, match=f"are {headers[0]}.{headers[1]}.1, not for the TRT{trt} library") as e:
        pl.build_library(tmp_path / "out", trt=trt, tensorrt_include=inc)
    assert "\n" not in str(e.value)


def test_tensorrt_header_version_is_read(tmp_path):
    assert pl.trt_header_version(_fake_headers(tmp_path, 8, 6)) == (8, 6, 1)
    assert pl.trt_header_version(tmp_path) is None


def test_cli_refuses_mismatched_headers(tmp_path, capsys):
    from fusion.cli import commands as cli

    inc = _fake_headers(tmp_path, 10, 3)
    rc = cli.main(["plugins", "build", "--trt", "8", "--tensorrt-include", str(inc), "-o", str(tmp_path / "o")])
    assert rc != 0
    err = capsys.readouterr().err.strip()
    assert "not for the TRT8 library" in err and "\n" not in err


def test_flavour_sources_are_disjoint_glue():
    v3 = {p.relative_to(pl.plugin_src_dir()).as_posix() for p in pl.library_sources(trt=10)}
    v2 = {p.relative_to(pl.plugin_src_dir()).as_posix() for p in pl.library_sources(trt=8)}
    assert not any(p.startswith("trt8/") for p in v3)
    assert v3 - v2 == set(pl.V3_GLUE)
    assert v2 - v3 == {"trt8/PluginV2.cpp", "trt8/entry8.cpp"}
    # the kernels, launchers and cores are shared
    assert {"common/normCore.cpp", "fc/fcCore.cpp", "common/normLaunch.cu", "fc/FcGemm.cpp"} <= v3 & v2


def test_trt8_readme_table_is_current():
    text = (pl.plugin_src_dir() / "README.md").read_text()
    assert pl._readme_with_table(text) == text, "run: python -m fusion.plugins.library readme"
    for spec in fusion_specs():
        assert f"| `{spec.op_type}` | {spec.version} | `{spec.namespace}` |" in text


def _groupnorm_mutations():
    specs = list(fusion_specs())
    i = next(k for k, s in enumerate(specs) if s.op_type == "FusedGroupNorm")
    gn = specs[i]

    def swap(new):
        return specs[:i] + [new] + specs[i + 1:]

    yield "gn dropped silu", swap(dataclasses.replace(gn, fields=gn.fields[:2])), "extra field 'silu'"
    yield "gn num_groups type", swap(dataclasses.replace(gn, fields=(gn.fields[0], dataclasses.replace(
        gn.fields[1], type=FieldType.FLOAT), gn.fields[2]))), "field 'num_groups' is"  # fmt: skip
    yield "gn version", swap(dataclasses.replace(gn, version="2")), "FusedGroupNorm: no creator with version '2'"


@needs_nvcc
@pytest.mark.parametrize("what,specs,expected", list(_groupnorm_mutations()), ids=[m[0] for m in _groupnorm_mutations()])
def test_groupnorm_wrong_spec_is_reported(built, built8, what, specs, expected):
    for lib in (built, built8):
        problems = pl.check_library(lib, specs)
        assert any(expected in p for p in problems), (lib.name, problems)
