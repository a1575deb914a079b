"""On real TensorRT and a GPU: engines with profiles, plugin layers from the fallback importer,
verify against onnxruntime, shapes outside the profiles, parser errors.  Skipped where
TensorRT or a GPU is absent (CI); bench/run_gpu_trt.sh runs them on the GPU machine."""

from __future__ import annotations

import ctypes
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

pytestmark = [pytest.mark.trt, pytest.mark.gpu]


def _gpu() -> bool:
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
        n = ctypes.c_int(0)
        return cuda.cuInit(0) == 0 and cuda.cuDeviceGetCount(ctypes.byref(n)) == 0 and n.value > 0
    except OSError:
        return False


trt = pytest.importorskip("tensorrt", reason="TensorRT is not installed")
if not _gpu():
    pytest.skip("no CUDA GPU", allow_module_level=True)

from fusion.cli import commands as cli
from fusion.errors import EngineBuildError, VerifyError
from fusion.trt.build import build_engine
from fusion.trt.run import setup_verify, time_engine
from fusion.compare.verify import _Model, verify
from fusion.rewrite import functions

F = TensorProto.FLOAT
D = 768  # the shipped LayerNorm plugin is fp32-exact at this width (not at 32: ~2e-3)
NO_TACTICS: list = []  # TensorRT 8.5 here has stub cuBLAS/cuDNN: no tactics from them
PROFILE = {"batch": (1, 2, 4), "seq": (1, 8, 16)}


def _save(tmp: Path, name: str, nodes, inputs, outputs, inits=(), domains=()) -> Path:
    g = helper.make_graph(nodes, name, inputs, outputs, list(inits))
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)] + [helper.make_opsetid(d, 1) for d in domains],
                          ir_version=8)  # fmt: skip
    p = tmp / f"{name}.onnx"
    onnx.save(m, p)
    return p


def _params(rng):
    return (onnx.numpy_helper.from_array((1 + 0.1 * rng.standard_normal(D)).astype(np.float32), "gamma"),
            onnx.numpy_helper.from_array((0.1 * rng.standard_normal(D)).astype(np.float32), "beta"))  # fmt: skip


def decomposed_ln(tmp: Path) -> Path:
    """x [batch, seq, 768] -> the decomposed LayerNorm chain -> y."""
    rng = np.random.default_rng(0)
    two = onnx.numpy_helper.from_array(np.array(2.0, np.float32), "two")
    eps = onnx.numpy_helper.from_array(np.array(1e-5, np.float32), "eps")
    nodes = [
        helper.make_node("ReduceMean", ["x"], ["m"], axes=[-1]),
        helper.make_node("Sub", ["x", "m"], ["d"]),
        helper.make_node("Pow", ["d", "two"], ["d2"]),
        helper.make_node("ReduceMean", ["d2"], ["v"], axes=[-1]),
        helper.make_node("Add", ["v", "eps"], ["ve"]),
        helper.make_node("Sqrt", ["ve"], ["s"]),
        helper.make_node("Div", ["d", "s"], ["n"]),
        helper.make_node("Mul", ["n", "gamma"], ["g"]),
        helper.make_node("Add", ["g", "beta"], ["y"]),
    ]
    io = [helper.make_tensor_value_info(n, F, ["batch", "seq", D]) for n in ("x", "y")]
    return _save(tmp, "ln", nodes, io[:1], io[1:], [two, eps, *_params(rng)])


def plugin_ln(tmp: Path, op: str = "LayerNorm") -> Path:
    """The node the trt target writes: LayerNorm (TensorRT's shipped plugin) on [batch, seq, 768]."""
    node = helper.make_node(op, ["x", "gamma", "beta"], ["y"], name="ln_plugin", domain="trt.plugins", epsilon=1e-5,
                            plugin_version="1", plugin_namespace="")  # fmt: skip
    io = [helper.make_tensor_value_info(n, F, ["batch", "seq", D]) for n in ("x", "y")]
    return _save(tmp, op, [node], io[:1], io[1:], _params(np.random.default_rng(0)), ["trt.plugins"])


def test_fallback_importer_makes_a_plugin_layer(tmp_path):
    built = build_engine(plugin_ln(tmp_path), shapes=PROFILE, tactic_sources=NO_TACTICS, out=tmp_path / "m.engine")
    assert [p.plugin for p in built.plugin_layers] == ["LayerNorm"]
    assert built.engine_plugin_layers in (None, 1)
    assert (tmp_path / "m.engine").stat().st_size == len(built.engine) > 0


def test_verify_plugin_against_decomposed_original(tmp_path):
    rep = verify(decomposed_ln(tmp_path), plugin_ln(tmp_path), backend="trt", profiles=PROFILE, tactic_sources=NO_TACTICS)
    assert rep.passed, rep.table()
    assert [s["x"] for s in rep.shapes] == [[1, 1, D], [2, 8, D], [4, 16, D]]  # min, opt, max


def test_two_profiles_each_used(tmp_path):
    orig, fused = _Model(str(decomposed_ln(tmp_path))), _Model(str(plugin_ln(tmp_path)))
    profiles = [{"batch": 1, "seq": (1, 16)}, {"batch": (2, 4), "seq": (1, 8, 16)}]
    runner, feeds, _, _ = setup_verify(orig, fused, inputs=None, shapes=None, atol=None, rtol=None, seed=0,
                                       profiles=profiles, tactic_sources=NO_TACTICS)  # fmt: skip
    with runner:
        for f in feeds:
            runner.infer(f)
    assert sorted(set(runner.profile_used)) == [0, 1]
    rep = verify(str(tmp_path / "ln.onnx"), str(tmp_path / "LayerNorm.onnx"), backend="trt", profiles=profiles,
                 tactic_sources=NO_TACTICS)  # fmt: skip
    assert rep.passed and len(rep.shapes) == 5  # profile 0's opt is its max (seq=1,16): one point fewer


def test_shape_outside_every_profile_is_a_verify_error(tmp_path):
    with pytest.raises(VerifyError, match="outside every optimization profile"):
        verify(decomposed_ln(tmp_path), plugin_ln(tmp_path), backend="trt", profiles=PROFILE,
               tactic_sources=NO_TACTICS, shapes=[{"batch": 8, "seq": 4}])  # fmt: skip


def test_parser_error_names_node_and_op(tmp_path):
    with pytest.raises(EngineBuildError, match=r"could not parse the model: node 'ln_plugin' \(NoSuchPlugin\)"):
        build_engine(plugin_ln(tmp_path, op="NoSuchPlugin"), shapes=PROFILE, tactic_sources=NO_TACTICS)


def test_missing_range_is_an_error(tmp_path):
    with pytest.raises(EngineBuildError, match=r"input 'x' dim 1 \('seq'\) is dynamic and has no range"):
        build_engine(plugin_ln(tmp_path), shapes={"batch": (1, 4)}, tactic_sources=NO_TACTICS)


def test_fp16_engine_and_latency(tmp_path):
    built = build_engine(plugin_ln(tmp_path), shapes=PROFILE, precision="fp16", tactic_sources=NO_TACTICS)
    rep = verify(decomposed_ln(tmp_path), plugin_ln(tmp_path), backend="trt", engine=built)
    assert rep.passed, rep.table()
    t = time_engine(built, {"x": np.random.default_rng(0).standard_normal((2, 8, D)).astype(np.float32)})
    assert 0 < t["ms"] < 100


def test_shape_tensor_input(tmp_path):
    """An int64 input used as Reshape's shape: TensorRT makes it a shape tensor with a value range."""
    nodes = [helper.make_node("Reshape", ["x", "shape"], ["r"]), helper.make_node("Relu", ["r"], ["y"])]
    ins = [helper.make_tensor_value_info("x", F, ["n", 8]), helper.make_tensor_value_info("shape", TensorProto.INT64, [2])]
    path = _save(tmp_path, "reshape", nodes, ins, [helper.make_tensor_value_info("y", F, None)])
    profile = {"n": (2, 4, 8), "shape": ([1, 16], [2, 16], [4, 16])}
    built = build_engine(path, shapes=profile, tactic_sources=NO_TACTICS)
    assert [i.name for i in built.inputs if i.shape_tensor] == ["shape"]
    rep = verify(path, path, backend="trt", engine=built)
    assert rep.passed and [s["x"] for s in rep.shapes] == [[2, 8], [4, 8], [8, 8]]


@pytest.mark.parametrize("opset", [11, 13])  # 11: the zeros found by Where; 13: by Max
@pytest.mark.parametrize("dims", [["batch", "seq", 8], [2, 8, 8]], ids=["dynamic", "static"])
def test_reshape_keeping_zeros_builds_and_gives_back_its_input(tmp_path, opset, dims):
    """The opset < 14 reshape of the function bodies (an Expand + Slice pad, Concat, Reshape, Slice; what
    TensorRT imports for a custom node with no plugin registered) parses, builds, and is exact."""
    nodes = [helper.make_node("Relu", ["x"], ["r"])]

    def op(op_type: str, *inputs: str, **attrs) -> str:
        out = f"t{len(nodes)}"
        nodes.append(helper.make_node(op_type, list(inputs), [out], **attrs))
        return out

    def ints(values: list[int]) -> str:
        return op("Constant", value=helper.make_tensor("c", TensorProto.INT64, [len(values)], values))

    y = functions.reshape_keeping_zeros(op, ints, op("Flatten", "r", axis=0), op("Shape", "x"), opset)
    nodes.append(helper.make_node("Identity", [y], ["y"]))
    io = [helper.make_tensor_value_info(n, F, dims) for n in ("x", "y")]
    paths = []
    for name, graph_nodes in (("relu", [helper.make_node("Relu", ["x"], ["y"])]), ("reshaped", nodes)):
        m = helper.make_model(helper.make_graph(graph_nodes, name, io[:1], io[1:]),
                              opset_imports=[helper.make_opsetid("", opset)], ir_version=8)  # fmt: skip
        onnx.checker.check_model(m, full_check=True)
        paths.append(tmp_path / f"{name}.onnx")
        onnx.save(m, paths[-1])
    rep = verify(paths[0], paths[1], backend="trt", tactic_sources=NO_TACTICS, latency=False, atol=0.0, rtol=0.0)
    assert rep.passed, rep.table()


def test_cli_build(tmp_path, capsys):
    out = tmp_path / "m.engine"
    rc = cli.main(["build", str(plugin_ln(tmp_path)), "-o", str(out), "--shapes", f"x:1x1x{D},2x8x{D},4x16x{D}",
                   "--no-tactic-sources"])  # fmt: skip
    assert rc == 0 and out.stat().st_size > 0
    assert "1 plugin layers" in capsys.readouterr().out


def test_verify_times_both_engines_at_every_profile_corner(tmp_path):
    """verify --trt's latency: the original's engine built like the fused one, both timed at
    min / opt / max with the API of this TensorRT (execute_async_v2 before 10, v3 from 10)."""
    rep = verify(decomposed_ln(tmp_path), plugin_ln(tmp_path), backend="trt", profiles=PROFILE, tactic_sources=NO_TACTICS)
    lat = rep.latency
    assert not lat.error, lat.error
    assert [r.label for r in lat.rows] == ["min", "opt", "max"]
    api = "execute_async_v2" if int(trt.__version__.split(".")[0]) < 10 else "execute_async_v3"
    assert all(r.fused.api == r.unfused.api == api for r in lat.rows)
    assert all(0 < r.fused.median_ms < 100 and 0 < r.speedup < 100 for r in lat.rows)
    assert "fused/unfused speed-up" in rep.table() and rep.to_dict()["latency"]["rows"][0]["label"] == "min"
