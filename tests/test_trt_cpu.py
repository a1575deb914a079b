"""TensorRT support without TensorRT: profile derivation, the CLI, the error surface, and the
build / verify wiring against a stand-in ``tensorrt`` module (tests/trt_fake.py)."""

from __future__ import annotations

import ast
import json
import sys
from collections import OrderedDict
from pathlib import Path
from typing import ClassVar

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import fusion
from fusion.cli import commands as cli
from fusion.trt import run as trt_run
from fusion.trt import build as ftrt
from fusion.errors import EngineBuildError, VerifyError
from fusion.trt.profiles import (
    InputInfo,
    ProfileShapes,
    derive_profiles,
    feed_key,
    find_profile,
    model_inputs,
    parse_profile,
    shape_tensor_inputs,
)
from tests import trt_fake

REPO = Path(__file__).resolve().parent.parent
F = TensorProto.FLOAT
I64 = TensorProto.INT64


def bert_like_inputs() -> list[InputInfo]:
    return [InputInfo("input_ids", ("batch", "seq"), I64), InputInfo("attention_mask", ("batch", "seq"), I64)]


# -- profile derivation ----------------------------------------------------------------------


def test_dim_ranges_give_every_input_its_shapes():
    (p,) = derive_profiles(bert_like_inputs(), {"batch": (1, 8, 32), "seq": (1, 128, 512)})
    assert p.ranges["input_ids"] == ((1, 1), (8, 128), (32, 512))
    assert p.ranges["attention_mask"] == p.ranges["input_ids"]
    assert p.point("opt") == {"input_ids": (8, 128), "attention_mask": (8, 128)}


def test_one_inputs_shapes_fix_the_dims_it_shares():
    (p,) = derive_profiles(bert_like_inputs(), parse_profile(["input_ids:1x1,8x128,32x512"]))
    assert p.ranges["attention_mask"] == ((1, 1), (8, 128), (32, 512))


def test_two_value_range_takes_max_as_opt_and_static_dims_stay():
    inputs = [InputInfo("x", ("batch", 3, 32, 32))]
    (p,) = derive_profiles(inputs, {"batch": (1, 4)})
    assert p.ranges["x"] == ((1, 3, 32, 32), (4, 3, 32, 32), (4, 3, 32, 32))


def test_several_profiles():
    profiles = derive_profiles(bert_like_inputs(), [{"batch": 1, "seq": (1, 16)}, {"batch": (2, 4), "seq": (1, 8, 16)}])
    assert [p.ranges["input_ids"] for p in profiles] == [((1, 1), (1, 16), (1, 16)), ((2, 1), (4, 8), (4, 16))]
    key = {"input_ids": (3, 5), "attention_mask": (3, 5)}
    assert find_profile(profiles, key) == 1
    assert find_profile(profiles, {"input_ids": (1, 5), "attention_mask": (1, 5)}) == 0
    assert find_profile(profiles, {"input_ids": (5, 5), "attention_mask": (5, 5)}) is None


def test_static_model_needs_no_profile():
    assert derive_profiles([InputInfo("x", (2, 32))], None) == []


def test_dynamic_input_without_range_is_an_error():
    with pytest.raises(EngineBuildError, match=r"input 'input_ids' dim 1 \('seq'\) is dynamic and has no range: give seq="):
        derive_profiles(bert_like_inputs(), {"batch": (1, 4)})
    with pytest.raises(EngineBuildError, match="dynamic inputs need an optimization profile"):
        derive_profiles(bert_like_inputs(), None)


def test_unnamed_dynamic_dim_asks_for_the_inputs_shapes():
    with pytest.raises(EngineBuildError, match=r"input 'x' dim 0 \(unnamed\) is dynamic and has no range: give x:MIN"):
        derive_profiles([InputInfo("x", (None, 32))], {})
    (p,) = derive_profiles([InputInfo("x", (None, 32))], {"x": ([1, 32], [2, 32], [4, 32])})
    assert p.ranges["x"][2] == (4, 32)


def test_inconsistent_ranges_are_errors():
    with pytest.raises(EngineBuildError, match=r"dim 'seq'.*inconsistent range min 8, opt 4, max 16"):
        derive_profiles(bert_like_inputs(), {"batch": 1, "seq": (8, 4, 16)})
    with pytest.raises(EngineBuildError, match=r"inconsistent ranges for dim 'seq': input 'attention_mask' gives"):
        derive_profiles(bert_like_inputs(), {"input_ids": ([1, 1], [2, 8], [4, 16]),
                                             "attention_mask": ([1, 1], [2, 4], [4, 16])})  # fmt: skip
    with pytest.raises(EngineBuildError, match=r"dim 1 \('seq'\): inconsistent range min 2, opt 1, max 4"):
        derive_profiles(bert_like_inputs(), {"input_ids": ([1, 2], [1, 1], [1, 4])})
    with pytest.raises(EngineBuildError, match=r"dim 1 \(unnamed\) is static 3, the profile gives min 3, opt 4"):
        derive_profiles([InputInfo("x", ("b", 3))], {"x": ([1, 3], [2, 4], [4, 3])})
    with pytest.raises(EngineBuildError, match="min shape \\[1\\] has rank 1, the input has rank 2"):
        derive_profiles(bert_like_inputs(), {"input_ids": ([1], [2, 2], [4, 4])})
    with pytest.raises(EngineBuildError, match="min -1 is negative"):
        derive_profiles(bert_like_inputs(), {"batch": (-1, 2), "seq": 4})


def test_unknown_names_and_bad_values():
    with pytest.raises(EngineBuildError, match=r"'sequence' is neither an input nor a dim .*dims: batch, seq"):
        derive_profiles(bert_like_inputs(), {"batch": 1, "sequence": 4})
    with pytest.raises(EngineBuildError, match="a range is N, \\(MIN, MAX\\) or \\(MIN, OPT, MAX\\)"):
        derive_profiles(bert_like_inputs(), {"batch": (1, 2, 3, 4), "seq": 1})
    with pytest.raises(EngineBuildError, match="give \\(MIN, OPT, MAX\\) shapes"):
        derive_profiles(bert_like_inputs(), {"input_ids": "big"})


def test_profile_error_names_the_profile_when_there_are_several():
    with pytest.raises(EngineBuildError, match="^profile 1: input 'input_ids' dim 1"):
        derive_profiles(bert_like_inputs(), [{"batch": 1, "seq": 2}, {"batch": 2}])


def test_shape_tensor_inputs_take_value_ranges():
    inputs = [InputInfo("x", ("n", 8)), InputInfo("shape", (2,), I64, shape_tensor=True)]
    (p,) = derive_profiles(inputs, parse_profile(["n=1,2,4", "shape:1x8,2x8,4x8"]))
    assert p.ranges["shape"] == ((1, 8), (2, 8), (4, 8))
    assert p.shape_tensors == {"shape"}
    assert p.contains({"x": (2, 8), "shape": (2, 8)}) and not p.contains({"x": (2, 8), "shape": (8, 8)})
    with pytest.raises(EngineBuildError, match="input 'shape' is a shape tensor .* has no range: give its values"):
        derive_profiles(inputs, {"n": (1, 4)})
    with pytest.raises(EngineBuildError, match="shape-tensor input 'shape': min values \\[1\\] have 1 elements"):
        derive_profiles(inputs, {"n": (1, 4), "shape": ([1], [2, 8], [4, 8])})
    with pytest.raises(EngineBuildError, match="shape-tensor input 'shape': inconsistent values"):
        derive_profiles(inputs, {"n": (1, 4), "shape": ([4, 8], [2, 8], [1, 8])})


def _reshape_model(shape_input: bool = True) -> onnx.ModelProto:
    nodes = [helper.make_node("Cast", ["shape"], ["s32"], to=TensorProto.INT64),
             helper.make_node("Reshape", ["x", "s32"], ["y"])]  # fmt: skip
    inputs = [helper.make_tensor_value_info("x", F, ["n", 8]), helper.make_tensor_value_info("shape", I64, [2])]
    if not shape_input:  # an int input used as data, not as a shape
        nodes = [helper.make_node("Cast", ["shape"], ["sf"], to=F), helper.make_node("Add", ["x", "sf"], ["y"])]
    g = helper.make_graph(nodes, "g", inputs, [helper.make_tensor_value_info("y", F, None)])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def test_shape_tensor_inputs_found_in_the_model():
    assert shape_tensor_inputs(_reshape_model()) == {"shape"}
    assert shape_tensor_inputs(_reshape_model(shape_input=False)) == set()
    infos = {i.name: i for i in model_inputs(_reshape_model())}
    assert infos["shape"].shape_tensor and infos["x"].dims == ("n", 8) and not infos["x"].shape_tensor
    # What TensorRT says overrides the guess.
    assert not {i.name: i for i in model_inputs(_reshape_model(), shape_tensors=[])}["shape"].shape_tensor


def test_parse_profile_forms_and_errors():
    assert parse_profile(["input_ids:1x1,8x128,32x512", "batch=1,8,32", "seq=1,512", "k=3"]) == {
        "input_ids": ((1, 1), (8, 128), (32, 512)),
        "batch": (1, 8, 32),
        "seq": (1, 512),
        "k": (3,),
    }
    assert parse_profile(["x:2x3"]) == {"x": ((2, 3), (2, 3), (2, 3))}
    for bad, msg in [
        (["x:1x1,2x2"], "use input:MIN,OPT,MAX"),
        (["x=1,2,3,4"], "use dim=MIN,OPT,MAX"),
        (["x:1xa,2x2,3x3"], "'a' is not an integer"),
        (["justaname"], "bad profile item 'justaname'"),
        (["b=1", "b=2"], "'b' is given twice"),
    ]:
        with pytest.raises(EngineBuildError, match=msg):
            parse_profile(bad)


def test_feed_key_reads_values_of_shape_tensors():
    feed = {"x": np.zeros((2, 8), np.float32), "shape": np.array([2, 8], np.int64)}
    assert feed_key(feed, ["shape"]) == {"x": (2, 8), "shape": (2, 8)}
    assert feed_key(feed, []) == {"x": (2, 8), "shape": (2,)}
    assert ProfileShapes({"x": ((1, 8), (2, 8), (4, 8))}).describe() == "x: [1, 8]..[4, 8]"


# -- without TensorRT -------------------------------------------------------------------------


@pytest.fixture
def no_trt(monkeypatch):
    monkeypatch.setitem(sys.modules, "tensorrt", None)  # import tensorrt -> ImportError


def _ln_model(tmp_path: Path, op: str = "LayerNorm", static: bool = False) -> Path:
    """x -> <op> (a plugin node, as the trt target writes it) -> Relu."""
    d = 16
    gamma = onnx.numpy_helper.from_array(np.ones(d, np.float32), "gamma")
    beta = onnx.numpy_helper.from_array(np.zeros(d, np.float32), "beta")
    dims = [2, 3, d] if static else ["batch", "seq", d]
    g = helper.make_graph(
        [helper.make_node(op, ["x", "gamma", "beta"], ["n"], name="ln_0", domain="trt.plugins", epsilon=1e-5,
                          plugin_version="1", plugin_namespace=""),
         helper.make_node("Relu", ["n"], ["y"], name="relu_0")],
        "g", [helper.make_tensor_value_info("x", F, dims)], [helper.make_tensor_value_info("y", F, dims)],
        [gamma, beta])  # fmt: skip
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("trt.plugins", 1)])
    p = tmp_path / f"{op}.onnx"
    onnx.save(m, p)
    return p


def test_build_without_tensorrt_says_so(no_trt, tmp_path):
    with pytest.raises(EngineBuildError, match=r"^TensorRT is not installed: pip install tensorrt \(or run where it is\)$"):
        fusion.build_engine(_ln_model(tmp_path), shapes={"batch": (1, 4), "seq": (1, 8)})
    assert ftrt.trt_version() is None


def test_verify_trt_without_tensorrt_says_so(no_trt, tmp_path):
    from fusion.compare.verify import verify

    path = _ln_model(tmp_path, op="Relu")  # an ordinary model: the error is TensorRT's absence
    with pytest.raises(EngineBuildError, match="TensorRT is not installed"):
        verify(path, path, backend="trt")


def test_cli_build_without_tensorrt_is_one_line_exit_2(no_trt, tmp_path, capsys):
    rc = cli.main(["build", str(_ln_model(tmp_path)), "-o", str(tmp_path / "m.engine"), "--shapes", "batch=1,4", "seq=1,8"])
    assert rc == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: TensorRT is not installed: pip install tensorrt (or run where it is)"]


def test_cli_verify_trt_without_tensorrt(no_trt, tmp_path, capsys):
    p = str(_ln_model(tmp_path, op="Relu"))
    assert cli.main(["verify", p, p, "--trt", "--profile", "batch=1,4", "seq=1,8", "--no-tactic-sources"]) == 2
    assert "TensorRT is not installed" in capsys.readouterr().err


# -- against the stand-in tensorrt ------------------------------------------------------------


@pytest.fixture
def fake_trt(monkeypatch):
    """Install tests/trt_fake.py as ``tensorrt``; fusion.trt.build's caches are restored afterwards."""

    def install(**kw):
        mod = trt_fake.make(**kw)
        monkeypatch.setitem(sys.modules, "tensorrt", mod)
        return mod

    monkeypatch.setattr(ftrt, "_PLUGIN_LOGGER", None)
    monkeypatch.setattr(ftrt, "_LOGGER_CLASS", None)
    monkeypatch.setattr(ftrt, "_LOADED_PLUGINS", set())
    # The tactic sources' libraries (cuBLAS, cuDNN) count as present; tests of the probe call it themselves.
    monkeypatch.setattr(ftrt, "_library_problem", lambda source, major: None)
    return install


def test_build_engine_profiles_flags_and_plugin_layers(fake_trt, tmp_path):
    trt = fake_trt()
    out = tmp_path / "m.engine"
    built = fusion.build_engine(_ln_model(tmp_path), shapes={"batch": (1, 2, 4), "seq": (1, 8, 16)}, precision="fp16",
                                out=out, tactic_sources=[], timing_cache=tmp_path / "t.cache")  # fmt: skip
    assert [(p.name, p.plugin) for p in built.plugin_layers] == [("ln_0", "LayerNorm")]
    assert built.network_layers == 2 and built.engine_plugin_layers is None  # the fake has no inspector
    assert out.read_bytes() == built.engine == b"ENGINE:ln_0,relu_0"
    assert (tmp_path / "t.cache").read_bytes().startswith(b"cache:")
    (p,) = trt.calls["profiles"]
    assert p.shapes == {"x": ((1, 1, 16), (2, 8, 16), (4, 16, 16))}
    assert trt.calls["flags"] == {trt.BuilderFlag.FP16} and trt.calls["cleared"] == {trt.BuilderFlag.TF32}
    assert trt.calls["tactics"] == 0
    assert trt.calls["network_flags"] == 1  # explicit batch before TensorRT 10
    assert trt.calls["verbosity"] == trt.ProfilingVerbosity.DETAILED
    assert built.summary()["plugin_layers"] == ["ln_0 (LayerNorm)"]


def test_build_engine_defaults_and_tensorrt_10(fake_trt, tmp_path):
    trt = fake_trt(version="10.8.0.43")
    built = fusion.build_engine(_ln_model(tmp_path), shapes=[{"batch": 1, "seq": (1, 8)}, {"batch": (2, 4), "seq": 8}],
                                tactic_sources=["cublas", "CUDNN"])  # fmt: skip
    assert len(built.profiles) == 2 and len(trt.calls["profiles"]) == 2
    assert trt.calls["network_flags"] == 0  # explicit batch is the only mode since 10
    assert trt.calls["tactics"] == (1 << 0) | (1 << 2)
    assert trt.calls["flags"] == set()  # fp32: TF32 cleared, nothing set
    with pytest.raises(EngineBuildError, match="unknown tactic source 'cudart'"):
        fusion.build_engine(_ln_model(tmp_path), shapes={"batch": 1, "seq": 1}, tactic_sources=["cudart"])


def test_build_engine_rejects_bad_precision_and_missing_ranges(fake_trt, tmp_path):
    fake_trt()
    with pytest.raises(EngineBuildError, match="precision must be one of fp32, tf32, fp16"):
        fusion.build_engine(_ln_model(tmp_path), precision="int8")
    with pytest.raises(EngineBuildError, match=r"input 'x' dim 1 \('seq'\) is dynamic and has no range"):
        fusion.build_engine(_ln_model(tmp_path), shapes={"batch": (1, 4)})


def test_parser_error_names_the_failing_node(fake_trt, tmp_path):
    fake_trt()
    with pytest.raises(EngineBuildError) as e:
        fusion.build_engine(_ln_model(tmp_path, op="NoSuchPlugin"), shapes={"batch": 1, "seq": 1})
    assert str(e.value).startswith("TensorRT 8.5.3.1 could not parse the model: node 'ln_0' (NoSuchPlugin): ")
    assert "Plugin not found" in str(e.value)


def test_build_failure_quotes_tensorrt(fake_trt, tmp_path):
    trt = fake_trt()
    trt.calls["fail_build"] = True
    with pytest.raises(EngineBuildError, match=r"could not build the engine: Could not find any implementation for node \{Foreign"):
        fusion.build_engine(_ln_model(tmp_path, static=True))


def test_shape_tensor_from_the_parser_gets_set_shape_input(fake_trt, tmp_path):
    trt = fake_trt(shape_tensors=("shape",))
    path = tmp_path / "r.onnx"
    onnx.save(_reshape_model(), path)
    fusion.build_engine(path, shapes=parse_profile(["n=1,2,4", "shape:1x8,2x8,4x8"]))
    (p,) = trt.calls["profiles"]
    assert p.values == {"shape": ((1, 8), (2, 8), (4, 8))} and p.shapes == {"x": ((1, 8), (2, 8), (4, 8))}


def test_plugin_libraries(fake_trt, tmp_path):
    fake_trt()
    with pytest.raises(EngineBuildError, match="plugin library .*nope.so does not exist"):
        ftrt.load_plugins([tmp_path / "nope.so"])
    lib = tmp_path / "libx.so"
    lib.write_bytes(b"not an ELF")
    with pytest.raises(EngineBuildError, match="cannot load plugin library"):
        ftrt.load_plugins([lib])  # TensorRT < 10: dlopen
    trt10 = fake_trt(version="10.0.1")
    ftrt.load_plugins([lib])  # TensorRT >= 10: through the registry
    assert trt10.calls["plugin_libs"] == [str(lib)]


def test_cli_build_with_fake_tensorrt(fake_trt, tmp_path, capsys):
    trt = fake_trt()
    out = tmp_path / "m.engine"
    rc = cli.main(["build", str(_ln_model(tmp_path)), "-o", str(out), "--shapes", "x:1x1x16,2x8x16,4x16x16",
                   "--shapes", "batch=8", "seq=1,16", "--no-tactic-sources", "--precision", "fp16", "--json"])  # fmt: skip
    assert rc == 0 and out.exists()
    info = json.loads(capsys.readouterr().out)
    assert info["plugin_layers"] == ["ln_0 (LayerNorm)"]
    assert info["profiles"] == [{"x": [[1, 1, 16], [2, 8, 16], [4, 16, 16]]}, {"x": [[8, 1, 16], [8, 16, 16], [8, 16, 16]]}]
    assert trt.calls["tactics"] == 0 and len(trt.calls["profiles"]) == 2
    rc = cli.main(["build", str(_ln_model(tmp_path)), "-o", str(out), "--shapes", "batch=1,4"])
    assert rc == 2 and "dim 1 ('seq') is dynamic and has no range" in capsys.readouterr().err
    rc = cli.main(["build", str(_ln_model(tmp_path)), "-o", str(out), "--shapes", "x:1x1"])
    assert rc == 2 and "has rank 2, the input has rank 3" in capsys.readouterr().err


# -- verify on the stand-in: TensorRT's runner replaced by onnxruntime on the fused model --------


class _OrtAsTrt:
    """What polygraphy's TrtRunner would do for one profile, on onnxruntime; records what it got."""

    seen: ClassVar[list] = []

    def __init__(self, model_path: str, profile):
        import onnxruntime as ort

        self.profile = profile
        self.sess = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])

    def activate(self):
        pass

    def deactivate(self):
        pass

    def infer(self, feed, check_inputs=True):
        _OrtAsTrt.seen.append((self.profile, {k: v.dtype for k, v in feed.items()}))
        feed = {k: v.astype(np.int64) if v.dtype == np.int32 else v for k, v in feed.items()}
        return OrderedDict(zip([o.name for o in self.sess.get_outputs()], self.sess.run(None, feed)))

    def last_inference_time(self):
        return 0.0


def _gather_model(tmp_path: Path) -> Path:
    """ids [batch, seq] int64 -> Gather from a table -> ReduceSum: an int64 input TensorRT 8.5 makes int32."""
    table = onnx.numpy_helper.from_array(np.random.default_rng(0).standard_normal((10, 4)).astype(np.float32), "t")
    g = helper.make_graph(
        [helper.make_node("Gather", ["t", "ids"], ["e"]), helper.make_node("Relu", ["e"], ["y"])], "g",
        [helper.make_tensor_value_info("ids", I64, ["batch", "seq"])],
        [helper.make_tensor_value_info("y", F, ["batch", "seq", 4])], [table])  # fmt: skip
    p = tmp_path / "gather.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8), p)
    return p


@pytest.fixture
def ort_as_trt(fake_trt, monkeypatch):
    trt = fake_trt()

    class Engine:
        num_io_tensors = 2
        names: ClassVar[list] = ["ids", "y"]

        def get_tensor_name(self, i):
            return self.names[i]

        def get_tensor_dtype(self, name):
            return trt.DataType.INT32 if name == "ids" else trt.DataType.FLOAT

    class Runtime:
        def __init__(self, logger):
            pass

        def deserialize_cuda_engine(self, data):
            return Engine()

    trt.Runtime = Runtime
    _OrtAsTrt.seen = []
    monkeypatch.setattr(trt_run.ProfiledTrtRunner, "_sub_runner",
                        lambda self, profile: _OrtAsTrt(self.model_path, profile))  # fmt: skip
    return trt


def test_verify_trt_runs_min_opt_max_of_every_profile(ort_as_trt, tmp_path, monkeypatch):
    from fusion.compare.verify import verify

    path = _gather_model(tmp_path)
    monkeypatch.setattr(trt_run.ProfiledTrtRunner, "model_path", str(path), raising=False)
    rep = verify(path, path, backend="trt", profiles=[{"batch": 1, "seq": (1, 4, 8)}, {"batch": (2, 3, 4), "seq": 8}])
    assert rep.passed and rep.max_abs == 0.0
    assert rep.shapes == [{"ids": s} for s in ([1, 1], [1, 4], [1, 8], [2, 8], [3, 8], [4, 8])]
    assert [p for p, _ in _OrtAsTrt.seen] == [0, 0, 0, 1, 1, 1]
    assert all(d["ids"] == np.int32 for _, d in _OrtAsTrt.seen)  # int64 fed as TensorRT's int32


def test_verify_trt_default_profile_spans_the_verify_shapes(ort_as_trt, tmp_path, monkeypatch):
    from fusion.compare.verify import verify

    path = _gather_model(tmp_path)
    monkeypatch.setattr(trt_run.ProfiledTrtRunner, "model_path", str(path), raising=False)
    rep = verify(path, path, backend="trt")  # every dynamic dim 1, 3, 8; one profile holds them all
    assert rep.passed and len(rep.shapes) == 3
    (p,) = ort_as_trt.calls["profiles"]
    assert p.shapes == {"ids": ((1, 1), (3, 3), (8, 8))}


def test_verify_trt_shape_outside_every_profile_is_an_error(ort_as_trt, tmp_path, monkeypatch):
    from fusion.compare.verify import verify

    path = _gather_model(tmp_path)
    monkeypatch.setattr(trt_run.ProfiledTrtRunner, "model_path", str(path), raising=False)
    with pytest.raises(VerifyError, match=r"shape point 0 \(ids=\[16, 2\]\) is outside every optimization profile "
                                          r"of the engine \(profile 0: ids: \[1, 1\]..\[4, 8\]\)"):
        verify(path, path, backend="trt", profiles={"batch": (1, 4), "seq": (1, 8)}, shapes=[{"batch": 16, "seq": 2}])


def test_fp16_engine_gets_fp16_tolerances(ort_as_trt, tmp_path, monkeypatch):
    from fusion.compare.verify import verify

    path = _gather_model(tmp_path)
    monkeypatch.setattr(trt_run.ProfiledTrtRunner, "model_path", str(path), raising=False)
    rep = verify(path, path, backend="trt", precision="fp16", profiles={"batch": (1, 2), "seq": (1, 2)})
    assert {(c.atol, c.rtol) for c in rep.checks} == {trt_run.FP16_TOLERANCE}
    rep = verify(path, path, backend="trt", precision="fp16", atol=1e-3, profiles={"batch": (1, 2), "seq": (1, 2)})
    assert {c.atol for c in rep.checks} == {1e-3}


def test_int_inputs_that_do_not_fit_int32_are_an_error():
    with pytest.raises(VerifyError, match="input 'ids' holds values outside int32"):
        trt_run._cast("ids", np.array([2**40], np.int64), np.dtype(np.int32))
    assert trt_run._cast("ids", np.array([7], np.int64), np.dtype(np.int32)).dtype == np.int32


# -- the benchmark scripts' CPU parts ---------------------------------------------------------


def test_layernorm_bench_grid_matches_the_kernel_grid():
    """bench_trt_layernorm.py times the same rows x cols as bench_kernels.py (fp32/fp16)."""

    def grid_of(path: Path) -> dict:
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.Assign, ast.AnnAssign)):
                target = node.targets[0] if isinstance(node, ast.Assign) else node.target
                if getattr(target, "id", None) == "GRID":
                    return ast.literal_eval(node.value)
        raise AssertionError(f"no GRID in {path}")

    kernels, ours = grid_of(REPO / "bench/bench_kernels.py"), grid_of(REPO / "bench/bench_trt_layernorm.py")
    assert ours["rows"] == kernels["rows"] and ours["cols"] == kernels["cols"]
    assert set(ours["dtypes"]) == set(kernels["dtypes"]) & {"float32", "float16"}


def test_layernorm_bench_model_is_what_the_trt_target_emits():
    sys.path.insert(0, str(REPO / "bench"))
    import bench_trt_layernorm as b

    m = b.ln_model(768, "float16")
    onnx.checker.check_model(m, full_check=True)
    (node,) = m.graph.node
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert (node.op_type, node.domain) == ("LayerNorm", "trt.plugins")
    assert attrs == {"epsilon": pytest.approx(1e-5), "plugin_version": b"1", "plugin_namespace": b""}
    assert b.rotations(1 << 20) == 256 and b.rotations(1 << 30) == 1


def test_trt_verify_profiles_and_order():
    sys.path.insert(0, str(REPO / "bench"))
    import trt_verify as tv

    recs = tv.ordered_records()
    assert recs[0]["file"].endswith("legacy_op13_fp32.onnx") and len(recs) == len(tv.load_manifest())
    rec = next(r for r in recs if r["file"] == "gpt2_legacy_op13_fp16.onnx")
    assert tv.profile_spec(rec) == [{"batch": (1, 2, 4), "seq": (1, 8, 16)}]
    two = tv.profile_spec(next(r for r in recs if r["file"] == tv.TWO_PROFILE_MODEL))
    assert [p["batch"] for p in two] == [(1, 1, 1), (2, 2, 4)]
    assert tv.trt_at_least("8.5.3.1", (8, 6)) is False and tv.trt_at_least("10.0.1", (8, 6)) is True
    assert tv.trt_at_least(None, (8, 6)) is False


def test_trt_verify_without_tensorrt_checks_onnxruntime(no_trt, tmp_path):
    sys.path.insert(0, str(REPO / "bench"))
    import trt_verify as tv

    assert tv.main(["--out", str(tmp_path), "--match", "^ln_module_legacy_op13_fp32"]) == 0
    rows = json.loads((tmp_path / "trt_verify.json").read_text())["rows"]
    assert [r["target"] for r in rows] == ["trt", "onnx"]
    # 32 wide: below what TensorRT's LayerNorm plugin computes exactly, so the trt target leaves it.
    assert rows[0]["fused_nodes"] == 0 and rows[0]["ort_passed"] is True and rows[0]["built"] is None
    assert "nothing fused for target onnx at opset 13" in rows[1]["note"]


# -- engine latency in verify --------------------------------------------------------------------


def test_verify_trt_adds_engine_latency(ort_as_trt, tmp_path, monkeypatch):
    from fusion.trt import timing as trt_timing
    from fusion.trt.timing import LatencyReport, LatencyRow, Timing
    from fusion.compare.verify import verify

    path = _gather_model(tmp_path)
    monkeypatch.setattr(trt_run.ProfiledTrtRunner, "model_path", str(path), raising=False)
    seen = {}

    def fake_latency(source, fused_built, feeds, options):
        seen.update(source=source, feeds=len(feeds), options=options, profiles=len(fused_built.profiles))
        t = Timing(2.0, 1.9, 2.1, 1.9, 2.2, 10, 15, "execute_async_v2")
        return LatencyReport([LatencyRow("min", {"ids": [1, 1]}, Timing(3.0, 2.9, 3.1, 2.9, 3.2, 10, 15, "v2"), t)])

    monkeypatch.setattr(trt_timing, "verify_latency", fake_latency)
    rep = verify(path, path, backend="trt", profiles={"batch": (1, 2, 4), "seq": (1, 4, 8)}, tactic_sources=[])
    assert rep.passed and seen["options"]["tactic_sources"] == [] and "latency" not in seen["options"]
    assert (seen["source"], seen["feeds"], seen["profiles"]) == (str(path), 3, 1)
    assert "1.500x faster" in rep.table() and rep.to_dict()["latency"]["rows"][0]["speedup"] == 1.5
    rep = verify(path, path, backend="trt", profiles={"batch": (1, 2, 4), "seq": (1, 4, 8)}, latency=False)
    assert rep.latency is None and rep.to_dict()["latency"] is None


def test_verify_trt_latency_that_cannot_run_is_reported(ort_as_trt, tmp_path, monkeypatch):
    """The stand-in engine cannot be timed: verify passes, the latency says why, and the
    original's engine is not built for nothing."""
    from fusion.compare.verify import verify

    path = _gather_model(tmp_path)
    monkeypatch.setattr(trt_run.ProfiledTrtRunner, "model_path", str(path), raising=False)
    rep = verify(path, path, backend="trt", profiles={"batch": (1, 2), "seq": (1, 2)})
    assert rep.passed and rep.latency.rows == [] and rep.latency.error
    assert "engine latency: not measured" in rep.table()
    assert len(ort_as_trt.calls["profiles"]) == 1


def test_cli_verify_no_latency(ort_as_trt, tmp_path, monkeypatch, capsys):
    from fusion.trt import timing as trt_timing

    path = _gather_model(tmp_path)
    monkeypatch.setattr(trt_run.ProfiledTrtRunner, "model_path", str(path), raising=False)
    monkeypatch.setattr(trt_timing, "verify_latency", lambda *a: pytest.fail("timed despite --no-latency"))
    assert cli.main(["verify", str(path), str(path), "--trt", "--profile", "batch=1,2", "seq=1,2", "--no-latency"]) == 0
    assert "engine latency" not in capsys.readouterr().out


def test_trt_engines_bench_arguments_and_rows(tmp_path):
    sys.path.insert(0, str(REPO / "bench"))
    import trt_engines as te

    from fusion.trt.timing import Timing

    args = te.make_parser().parse_args(["run", "--model", "bert", "--onnx", "b.onnx", "--engines", "trt_ln,plugin_ln"])
    assert args.engines == ["trt_ln", "plugin_ln"] and args.precision == "fp32" and args.plugins == []
    run, notes = te.engines_to_run(args.engines, args.plugins)
    assert run == ["unfused", "trt_ln"] and notes[0].startswith("plugin_ln: skipped (needs --plugins")
    assert te.engines_to_run(None, ["lib.so"])[0] == list(te.ENGINES)
    run, notes = te.engines_to_run(["plugin_gn", "trt_gn"], [])
    assert run == ["unfused", "trt_gn"] and len(notes) == 1 and notes[0].startswith("plugin_gn: skipped (needs --plugins")
    assert te.engines_to_run(["plugin_gn", "trt_gn"], ["lib.so"]) == (["unfused", "plugin_gn", "trt_gn"], [])
    with pytest.raises(SystemExit, match="unknown engine 'fc'"):
        te.engines_to_run(["fc"], [])
    assert te.profile_for("bert", None, None) == {"batch": 8, "seq": 128} and te.profile_for("vit", 4, None) == {"batch": 4}
    feed = te.make_feed("vit", None, {"batch": 2})
    assert feed["pixel_values"].shape == (2, 3, 224, 224) and feed["pixel_values"].dtype == np.float32
    assert te.make_feed("bert", None, {"batch": 8, "seq": 128})["input_ids"].dtype == np.int64

    t_unfused, t_ln = Timing(9.83, 9.8, 9.9, 9.7, 10, 3, 15, "execute_async_v2"), Timing(8.16, 8.1, 8.2, 8, 8.3, 4, 15, "v2")
    row = te.make_row("bert", "trt_ln", "fp32", timing=t_ln, unfused_timing=t_unfused, build_s=61.234, max_abs_err=1.23456e-5,
                      fused={"layernorm": 25}, plugin_layers=25, meta={"commit": "abc"})  # fmt: skip
    assert row["speedup"] == pytest.approx(1.2047, abs=1e-4) and row["target"] == "trt" and row["passes"] == ["layernorm"]
    assert (row["build_s"], row["max_abs_err"], row["median_ms"], row["commit"]) == (61.23, 1.23e-5, 8.16, "abc")
    out = tmp_path / "r.json"
    te.write(out, te.merge(out, [te.make_row("bert", "unfused", "fp32", timing=t_unfused, unfused_timing=t_unfused), row],
                           {"m": 1}))  # fmt: skip
    again = te.make_row("bert", "trt_ln", "fp32", error="RuntimeError: boom")
    data = te.merge(out, [again, te.make_row("vit", "unfused", "fp32", error="x")], {"m": 2})
    assert [(r["model"], r["engine"], "error" in r) for r in data["rows"]] == [
        ("bert", "unfused", False), ("bert", "trt_ln", True), ("vit", "unfused", True)]  # fmt: skip
    text = te.table(data["rows"])
    assert "bert   unfused" in text and "1.000x" in text and "error: RuntimeError: boom" in text
    # another batch adds its rows; the same shapes replace theirs
    te.write(out, data)
    b1 = te.make_row("bert", "trt_ln", "fp32", timing=t_ln, unfused_timing=t_unfused,
                     meta={"shapes": {"input_ids": [1, 128]}})  # fmt: skip
    data = te.merge(out, [b1], {"m": 3})
    assert [(r["engine"], r.get("shapes")) for r in data["rows"] if r["model"] == "bert"] == [
        ("unfused", None), ("trt_ln", None), ("trt_ln", {"input_ids": [1, 128]})]  # fmt: skip
    te.write(out, data)
    data = te.merge(out, [{**b1, "median_ms": 1.0}], {"m": 4})
    assert [r["median_ms"] for r in data["rows"] if r.get("shapes")] == [1.0]


def test_trt_engines_e2e_table_and_new_models():
    sys.path.insert(0, str(REPO / "bench"))
    import trt_engines as te

    for model in ("bert4", "gpt2", "llama"):
        prof = te.profile_for(model, None, None)
        ids = te.make_feed(model, None, prof)["input_ids"]
        assert ids.shape == (8, 128) and ids.max() < te.MODELS[model]["vocab"]
    assert te.make_row("bert", "plugin_default", "fp32")["passes"] == "default"
    assert te.profile_for("unet", None, None) == {"batch": 8} and te.profile_for("unet", 2, 64) == {"batch": 2}
    feed = te.make_feed("unet", None, {"batch": 3})
    assert feed["sample"].shape == (3, 4, 64, 64) and feed["timestep"].shape == (3,)
    assert feed["sample"].dtype == feed["timestep"].dtype == np.float32
    assert 0 <= feed["timestep"].min() and feed["timestep"].max() < 1000 and len(set(feed["timestep"])) > 1
    np.testing.assert_array_equal(te.make_feed("unet", None, {"batch": 3})["sample"], feed["sample"])  # seeded
    row = te.make_row("unet", "plugin_gn", "fp16", meta={"baseline": None})
    assert (row["target"], row["passes"]) == ("plugin", ["groupnorm"])
    assert te.make_row("unet", "trt_gn", "fp32")["target"] == "trt"
    rows = [
        {"model": "bert", "engine": "unfused", "target": None, "precision": "fp32", "passes": [], "fused": {},
         "plugin_layers": 0, "median_ms": 5.0, "unfused_ms": 5.0, "speedup": 1.0, "build_s": 14.0, "commit": "c"},
        {"model": "bert", "engine": "plugin_ln", "target": "plugin", "precision": "fp32", "passes": ["layernorm"],
         "fused": {"layernorm": 25}, "plugin_layers": 25, "median_ms": 6.0, "unfused_ms": 5.1, "speedup": 0.85},
        {"model": "bert", "engine": "trt_ln", "target": "trt", "precision": "fp32", "error": "boom"},
    ]  # fmt: skip
    out = te.e2e_rows(rows, {"model": "bert", "precision": "fp32", "target": "trt", "kept": [], "seconds": 212.5,
                             "commit": "t"})  # fmt: skip
    assert [(r["target"], r["ratio"]) for r in out] == [("none", 1.0), ("plugin", 0.85), ("tuned", 1.0)]
    assert "baseline" not in out[0]
    unet = [{**rows[0], "model": "unet", "baseline": "unfused baseline: its 36 InstanceNormalization ops ..."},
            {**rows[1], "model": "unet", "engine": "trt_gn", "target": "trt", "static_dims": {"batch": 8}}]  # fmt: skip
    assert [(r["engine"], r.get("baseline", "")[:15], r.get("static_dims")) for r in te.e2e_rows(unet)] == [
        ("unfused", "unfused baselin", None), ("trt_gn", "", {"batch": 8})]  # fmt: skip
    assert out[2]["engine_ms"] == 5.0 and out[2]["build_s"] == 212.5 and "kept no fusion" in out[2]["note"]
    assert te.e2e_rows(rows, {"model": "bert", "precision": "fp32", "target": "trt", "kept": ["layernorm"]})[-1][
        "target"] == "plugin"  # a tuning run that kept something has no row of its own here


def _gn_feed_outputs(model, feed):
    """onnxruntime without graph optimizations, as bench/trt_engines.py's reference (the fused
    models also run with them: tests/test_emit_soundness.py checks every level)."""
    from tests.builders import run

    return run(model, feed)[0]


def test_trt_engines_build_models_without_instancenormalization():
    """TensorRT 8.5 cannot build InstanceNormalization (cuDNN is a stub there): the unfused
    engine's model has each written as reductions, a fused one its leftovers, each row says so;
    GroupNorm fused to plugins needs no rewrite; trt_gn fixes the batch (the shipped plugin is
    static); every variant computes what the exported model does."""
    sys.path.insert(0, str(REPO / "bench"))
    import trt_engines as te

    from tests.groupnorm_models import GN, build, feeds

    spec = GN(shape=("batch", 16, 5, 6), silu="xs")
    model, feed = build(spec), feeds(spec, batch=2)
    want = _gn_feed_outputs(model, feed)
    ops = lambda m: sorted(n.op_type for n in m.graph.node if "Norm" in n.op_type)  # noqa: E731

    base, fused, extra = te.engine_model(model, "unfused", {"batch": 2})
    assert ops(base) == [] and fused == {} and "its 1 InstanceNormalization ops written as" in extra["baseline"]
    np.testing.assert_allclose(_gn_feed_outputs(base, feed), want, rtol=1e-5, atol=1e-5)
    left, fused, extra = te.engine_model(model, "trt_ln", {"batch": 2})  # a fused model with the GroupNorm left
    assert ops(left) == [] and fused == {} and extra["baseline"].startswith("the 1 InstanceNormalization ops left unfused")
    plug, fused, extra = te.engine_model(model, "plugin_gn", {"batch": 2})
    assert ops(plug) == ["FusedGroupNorm"] and fused == {"groupnorm": 1} and extra == {}
    gn = next(n for n in plug.graph.node if n.op_type == "FusedGroupNorm")
    assert next(a.i for a in gn.attribute if a.name == "silu") == 1  # the SiLU fused with it
    np.testing.assert_allclose(_gn_feed_outputs(plug, feed), want, rtol=1e-5, atol=1e-5)
    shipped, fused, extra = te.engine_model(model, "trt_gn", {"batch": 2})
    assert ops(shipped) == ["GroupNormalizationPlugin"] and extra == {"static_dims": {"batch": 2}}
    assert [d.dim_value for d in shipped.graph.input[0].type.tensor_type.shape.dim] == [2, 16, 5, 6]
    assert shipped.opset_import[0].version == 13 and model.graph.input[0].type.tensor_type.shape.dim[0].dim_param == "batch"
    np.testing.assert_allclose(_gn_feed_outputs(shipped, feed), want, rtol=1e-5, atol=1e-5)
    # Dynamic, trt_gn cannot fuse: the shipped plugin asserts static shapes.
    assert fusion.run(model, ["groupnorm"], target="trt").counts() == {}

    relu = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                                               [helper.make_tensor_value_info("x", F, ["batch", 4])],
                                               [helper.make_tensor_value_info("y", F, ["batch", 4])]))  # fmt: skip
    assert te.buildable(relu) == (relu, None) and te.engine_model(relu, "unfused", {"batch": 2}) == (relu, {}, {})
    assert te.with_static_dims(relu, {"seq": 8}) == (relu, {})  # no dim of that name: nothing to fix


def test_trt_engines_unet_config():
    """The UNet's config is what MODELS says (its parameters and GroupNorms), without exporting."""
    pytest.importorskip("diffusers")
    sys.path.insert(0, str(REPO / "bench"))
    import torch
    import trt_engines as te

    net = te.unet_module(te.MODELS["unet"])
    params = sum(p.numel() for p in net.parameters())
    norms = sum(isinstance(m, torch.nn.GroupNorm) and m.num_groups == 32 for m in net.modules())
    assert f"{norms} GroupNorms, {params / 1e6:.1f}M parameters" in te.MODELS["unet"]["what"]
    assert norms == 36 and 30e6 < params < 120e6


def test_build_engine_from_serialized_bytes(fake_trt, tmp_path):
    """A model given as bytes (what bench/trt_engines.py and tuning pass) builds: onnx's
    load_from_string takes no load_external_data keyword (seen on the H100, onnx 1.1x and 1.23)."""
    fake_trt()
    data = _ln_model(tmp_path).read_bytes()
    built = fusion.build_engine(data, shapes={"batch": (1, 2), "seq": (1, 8)})
    assert built.engine == b"ENGINE:ln_0,relu_0" and [i.name for i in built.inputs] == ["x"]
