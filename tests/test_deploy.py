"""Issue 15 on the CPU: one option vocabulary (fusion/options.py), --tactic-sources and its
errors, and ``deploy`` (fusion/deployment.py) against the stand-in TensorRT (tests/trt_fake.py).

The stand-in builds "engines"; TensorRT's runner is replaced by onnxruntime on the fused model
(what an exact engine would compute), and the CUDA timing by fixed latencies.
"""

from __future__ import annotations

import json
import os
import sys
from collections import OrderedDict
from pathlib import Path

import onnx
import pytest

import fusion
from fusion.cli import commands as cli
from fusion import deployment, options
from fusion.trt import run as trt_run, timing as trt_timing
from fusion.trt import build as ftrt
from fusion.errors import EngineBuildError, FusionError
from tests import trt_fake

from .builders import NORM_FC_CLI, NORM_FC_PASSES
from .norm_models import LAYER, build

PROFILE = ["B=1,2,4", "S=1,4,8"]


@pytest.fixture
def model(tmp_path) -> Path:
    d = tmp_path / "models"
    d.mkdir()
    p = d / "m.onnx"
    onnx.save(build(LAYER), str(p))
    return p


@pytest.fixture
def fake_trt(monkeypatch):
    """tests/trt_fake.py as ``tensorrt`` (fusion.trt.build's caches restored afterwards); cuBLAS and
    cuDNN count as loadable unless a test says otherwise."""

    def install(**kw):
        mod = trt_fake.make(**kw)
        monkeypatch.setitem(sys.modules, "tensorrt", mod)
        return mod

    monkeypatch.setattr(ftrt, "_PLUGIN_LOGGER", None)
    monkeypatch.setattr(ftrt, "_LOGGER_CLASS", None)
    monkeypatch.setattr(ftrt, "_LOADED_PLUGINS", set())
    monkeypatch.setattr(ftrt, "_library_problem", lambda source, major: None)
    return install


class _OrtRunner:
    """What polygraphy's TrtRunner would do for one profile, on onnxruntime (an exact engine)."""

    def __init__(self, model_path: str):
        import onnxruntime as ort

        self.sess = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])

    def activate(self):
        pass

    def deactivate(self):
        pass

    def infer(self, feed, check_inputs=True):
        return OrderedDict(zip([o.name for o in self.sess.get_outputs()], self.sess.run(None, dict(feed))))

    def last_inference_time(self):
        return 0.0


@pytest.fixture
def engine_on_ort(fake_trt, monkeypatch):
    """The stand-in TensorRT whose engines run as onnxruntime on the fused model beside them, and
    whose timing gives the unfused engine 2 ms and the fused one 1 ms at every shape."""
    trt = fake_trt()

    class Engine:
        num_io_tensors = 2

        def get_tensor_name(self, i):
            return ["x", "y"][i]

        def get_tensor_dtype(self, name):
            return trt.DataType.FLOAT

    class Runtime:
        def __init__(self, logger):
            pass

        def deserialize_cuda_engine(self, data):
            return Engine()

    trt.Runtime = Runtime
    # deploy writes NAME.fused.onnx beside NAME.fused.engine
    monkeypatch.setattr(trt_run.ProfiledTrtRunner, "_sub_runner",
                        lambda self, profile: _OrtRunner(self.built.path[: -len(".engine")] + ".onnx"))  # fmt: skip
    monkeypatch.setattr(trt_timing, "probe", lambda built, feed: None)

    def time_engines(builts, feeds, **kw):
        return [[trt_timing.summarize([2.0 if k == 0 else 1.0] * 3, 10, "execute_async_v2") for _ in feeds]
                for k in range(len(builts))]  # fmt: skip

    monkeypatch.setattr(trt_timing, "time_engines", time_engines)
    return trt


def _parse(*argv: str):
    return cli.make_parser().parse_args(list(argv))


def _leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if ".partial-" in p.name or p.name.endswith(".tmp")]


# -- one vocabulary ------------------------------------------------------------------------------


def test_the_same_profile_text_means_the_same_in_every_command():
    want = [{"B": (1, 2, 4), "S": (1, 4, 8)}, {"B": (8,)}]
    cmds = [
        ["build", "m.onnx", "-o", "m.engine"],
        ["verify", "a.onnx", "b.onnx", "--trt"],
        ["deploy", "m.onnx", "-o", "out"],
        ["fuse", "m.onnx", "-o", "f.onnx", "--tune"],
    ]
    for cmd in cmds:
        args = _parse(*cmd, "--profile", *PROFILE, "--profile", "B=8", "--tactic-sources", "cublas,cublas_lt",
                      "--precision", "fp16")  # fmt: skip
        assert options.profiles(args) == want, cmd
        assert options.engine_options(args) == {"plugins": [], "precision": "fp16", "tactic_sources": ["cublas", "cublas_lt"]}
        assert options.deprecation_warnings(args) == []


def test_shapes_are_points_and_profiles_are_ranges():
    args = _parse("verify", "a.onnx", "b.onnx", "--shapes", "B=2,S=16", "x:1x3x16")
    assert options.shape_points(args.shapes) == [{"B": 2, "S": 16}, {"x": [1, 3, 16]}]
    with pytest.raises(FusionError, match=r"bad shape point 'x:1x1x16,2x8x16': use dim=value or input:AxBxC "
                                          r"\(ranges are --profile\)$"):
        options.shape_points(["x:1x1x16,2x8x16"])  # a range given as a point


def test_old_spellings_still_work_and_warn(fake_trt, model, tmp_path, caplog):
    trt = fake_trt()
    out = tmp_path / "m.engine"
    rc = cli.main(["build", str(model), "-o", str(out), "--shapes", *PROFILE, "--no-tactic-sources", "--json"])
    assert rc == 0 and out.exists()
    err = caplog.text
    caplog.clear()
    assert "--shapes is deprecated and will be removed in the next release: use --profile" in err
    assert "--no-tactic-sources is deprecated and will be removed in the next release: use --tactic-sources none" in err
    (p,) = trt.calls["profiles"]
    assert p.shapes == {"x": ((1, 1, 16), (2, 4, 16), (4, 8, 16))}
    assert trt.calls["tactics"] == 0
    # the new spelling: the same engine, no warning
    rc = cli.main(["build", str(model), "-o", str(out), "--profile", *PROFILE, "--tactic-sources", "none", "--json"])
    assert rc == 0 and "deprecated" not in caplog.text
    assert trt.calls["profiles"][1].shapes == p.shapes and trt.calls["tactics"] == 0


def test_the_warning_reaches_stderr(model, tmp_path):
    import subprocess

    r = subprocess.run([sys.executable, "-m", "fusion", "build", str(model), "-o", str(tmp_path / "e"), "--shapes",
                        *PROFILE], capture_output=True, text=True, timeout=120)  # fmt: skip
    lines = r.stderr.strip().splitlines()
    assert lines[0] == ("WARNING fusion: --shapes is deprecated and will be removed in the next release: use --profile "
                        "(--shapes takes shape points, as in verify)")  # fmt: skip
    assert r.returncode == 2 and lines[1:] == ["error: TensorRT is not installed: pip install tensorrt (or run where it is)"]


# -- tactic sources -----------------------------------------------------------------------------


def test_tactic_sources_list_becomes_the_mask(fake_trt, model):
    trt = fake_trt()
    fusion.build_engine(model, shapes={"B": (1, 4), "S": (1, 8)}, tactic_sources=["cublas", "cublas_lt"])
    assert trt.calls["tactics"] == (1 << int(trt.TacticSource.CUBLAS)) | (1 << int(trt.TacticSource.CUBLAS_LT))
    fusion.build_engine(model, shapes={"B": (1, 4), "S": (1, 8)}, tactic_sources=["jit_convolutions"])
    assert trt.calls["tactics"] == 1 << int(trt.TacticSource.JIT_CONVOLUTIONS)
    assert ftrt.tactic_source_names(trt) == ["cublas", "cublas_lt", "cudnn", "edge_mask_convolutions", "jit_convolutions"]


def test_unknown_tactic_source_is_refused_with_the_installed_names(fake_trt, model, tmp_path, capsys):
    fake_trt()
    rc = cli.main(["build", str(model), "-o", str(tmp_path / "e"), "--profile", *PROFILE, "--tactic-sources", "cublas,cudart"])
    assert rc == 2 and not (tmp_path / "e").exists()
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["error: unknown tactic source 'cudart': TensorRT 8.5.3.1 has cublas, cublas_lt, cudnn, "
                   "edge_mask_convolutions, jit_convolutions (or none)"]  # fmt: skip
    # a TensorRT without cuBLAS/cuDNN tactic sources (as announced for after 10): cudnn is refused there
    fake_trt(version="11.0.0", tactic_sources=("CUBLAS_LT", "EDGE_MASK_CONVOLUTIONS", "JIT_CONVOLUTIONS"))
    with pytest.raises(EngineBuildError, match=r"^unknown tactic source 'cudnn': TensorRT 11.0.0 has cublas_lt, "
                                               r"edge_mask_convolutions, jit_convolutions \(or none\)$"):
        fusion.build_engine(model, shapes={"B": 1, "S": 1}, tactic_sources=["cudnn"])
    with pytest.raises(FusionError, match="give comma-separated names"):
        options.tactic_sources("cublas,none")


def test_a_missing_tactic_library_is_named_before_building(fake_trt, model, monkeypatch, capsys, tmp_path):
    trt = fake_trt()
    monkeypatch.undo()  # the real probe: _library_problem and the sys.modules entry restored ...
    monkeypatch.setitem(sys.modules, "tensorrt", trt)  # ... and the stand-in back in place
    monkeypatch.setattr(ftrt, "_PLUGIN_LOGGER", None)
    monkeypatch.setattr(ftrt, "_LOGGER_CLASS", None)
    libs = dict(ftrt._TACTIC_LIBRARIES)
    libs["cudnn"] = ("cuDNN", {8: ("libcudnn_absent_here.so.8",), 10: ("libcudnn_absent_here.so.9",)}, ("cudnnGetVersion",))
    libs["cublas"] = ("cuBLAS", {8: ("libm.so.6",), 10: ("libm.so.6",)}, ("cos", "cublasGetProperty"))  # loads, but a "stub"
    monkeypatch.setattr(ftrt, "_TACTIC_LIBRARIES", libs)
    with pytest.raises(EngineBuildError, match=r"^tactic source cudnn needs cuDNN, which is not usable here: "
                                               r"libcudnn_absent_here.so.8: not found: install it or leave cudnn out "
                                               r"\(--tactic-sources edge_mask_convolutions\)$"):
        ftrt.check_tactic_libraries(trt, ["edge_mask_convolutions", "cudnn"])
    with pytest.raises(EngineBuildError, match=r"^tactic source cublas needs cuBLAS, which is not usable here: libm.so.6 "
                                               r"\(.*\) is a stub: it lacks cublasGetProperty: install it"):
        ftrt.check_tactic_libraries(trt, ["cublas"])
    ftrt.check_tactic_libraries(trt, ["edge_mask_convolutions"])  # no library behind it
    ftrt.check_tactic_libraries(trt, [])
    rc = cli.main(["build", str(model), "-o", str(tmp_path / "e"), "--profile", *PROFILE, "--tactic-sources", "cudnn"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: tactic source cudnn needs cuDNN, which is not usable here")
    assert trt.calls["profiles"] == []  # refused before building


def test_default_sources_warn_about_a_missing_library(fake_trt, model, monkeypatch, caplog):
    trt = fake_trt()
    monkeypatch.setattr(ftrt, "_library_problem", lambda source, major: "cuDNN, which is not usable here: x" if source == "cudnn" else None)
    trt_config = trt.Builder(None).create_builder_config().__class__
    monkeypatch.setattr(trt_config, "get_tactic_sources", lambda self: 0b111, raising=False)  # cublas, cublas_lt, cudnn
    fusion.build_engine(model, shapes={"B": (1, 4), "S": (1, 8)})
    assert ("TensorRT's default tactic sources include cudnn, which needs cuDNN, which is not usable here: x; if the build "
            "fails, pass --tactic-sources cublas,cublas_lt") in caplog.text
    assert trt.calls["tactics"] is None  # still TensorRT's default: a warning, not a refusal


def test_tensorrts_own_library_error_names_the_library(fake_trt, model):
    trt = fake_trt()
    trt.calls["fail_build"] = "cudnn"
    with pytest.raises(EngineBuildError, match=r"could not build the engine: .*Cudnn \(CUDNN_STATUS_MAPPING_ERROR\) "
                                               r"\(cuDNN failed: the tactic source cudnn needs a working cuDNN library; "
                                               r"build without it: --tactic-sources cublas,cublas_lt\)$"):
        fusion.build_engine(model, shapes={"B": (1, 4), "S": (1, 8)})


# -- deploy ---------------------------------------------------------------------------------------


def test_deploy_writes_the_model_engine_report_and_summary(engine_on_ort, model, tmp_path, capsys):
    out = tmp_path / "out"
    rc = cli.main(["deploy", str(model), "-o", str(out), *NORM_FC_CLI, "--profile", *PROFILE, "--tactic-sources",
                   "cublas,cublas_lt"])  # fmt: skip
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert sorted(p.name for p in out.iterdir()) == ["m.deploy.json", "m.fused.engine", "m.fused.onnx", "m.report.html"]
    assert _leftovers(tmp_path) == [] and ".timing.cache" not in os.listdir(out)
    umask = os.umask(0)
    os.umask(umask)
    assert out.stat().st_mode & 0o777 == 0o777 & ~umask  # a folder like any other, not mkdtemp's 0700
    assert [n.op_type for n in onnx.load(str(out / "m.fused.onnx")).graph.node] == ["FusedLayerNorm"]
    summary = json.loads((out / "m.deploy.json").read_text())
    assert summary["passed"] is True and summary["fusions"] == {"layernorm": 1}
    assert [c["shape"] for c in summary["verify"]["checks"]] == [[1, 1, 16], [2, 4, 16], [4, 8, 16]]
    rows = summary["verify"]["latency"]["rows"]
    assert [(r["label"], r["speedup"]) for r in rows] == [("min", 2.0), ("opt", 2.0), ("max", 2.0)]
    assert engine_on_ort.calls["tactics"] == 0b11 and len(engine_on_ort.calls["profiles"]) == 2  # fused + unfused
    html = (out / "m.report.html").read_text()
    for part in ("Fusions (1)", 'id="verify"', "PASSED", 'id="latency"', "2.000×", 'id="engine"', "TensorRT",
                 str(out / "m.fused.onnx")):
        assert part in html, part
    assert ".partial-" not in html and ".partial-" not in json.dumps(summary)  # final paths only
    assert summary["engine"]["path"] == str(out / "m.fused.engine")
    # stdout: the result; stderr: progress with elapsed seconds
    assert "PASSED" in captured.out and "speed-up" in captured.out
    progress = captured.err.strip().splitlines()
    assert all(line.startswith("[") and "s] " in line for line in progress), progress
    assert any("building the fused engine" in line for line in progress)
    assert any("timed: min 2.00x" in line for line in progress)
    assert not any("nothing is fused by default" in line for line in progress)  # passes named


def test_deploy_without_passes_says_the_plugin_target_fuses_nothing_and_deploys_unfused(engine_on_ort, model, tmp_path,
                                                                                        capsys):  # fmt: skip
    out = tmp_path / "out"
    rc = cli.main(["deploy", str(model), "-o", str(out), "--profile", *PROFILE, "--json"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    said = [line for line in captured.err.splitlines() if "fused by default" in line]
    assert len(said) == 1 and said[0].startswith("[")
    assert "nothing is fused by default on target plugin for this model" in said[0]
    assert "name --passes or use --tune" in said[0]
    summary = json.loads(captured.out)
    assert summary["passed"] is True and summary["fusions"] == {} and summary["near_misses"] == 1
    unfused = [n.op_type for n in onnx.load(str(out / "m.fused.onnx")).graph.node]
    assert unfused == [n.op_type for n in onnx.load(str(model)).graph.node]
    assert "off by default for target plugin" in (out / "m.report.html").read_text()
    # target trt leaves LayerNorm out too: the same line; with the pass named, none
    rc = cli.main(["deploy", str(model), "-o", str(tmp_path / "trt"), "--target", "trt", "--profile", *PROFILE])
    assert rc == 0 and "nothing is fused by default on target trt for this model" in capsys.readouterr().err
    rc = cli.main(["deploy", str(model), "-o", str(tmp_path / "named"), "--passes", "layernorm", "--profile", *PROFILE])
    assert rc == 0 and "fused by default" not in capsys.readouterr().err


def test_deploy_as_a_python_function(engine_on_ort, model, tmp_path):
    said: list[str] = []
    res = fusion.deploy(model, tmp_path / "out", profile={"B": (1, 2, 4), "S": (1, 4, 8)}, passes=NORM_FC_PASSES,
                        latency=False, progress=said.append)  # fmt: skip
    assert isinstance(res, fusion.DeployResult) and res.passed
    assert res.files["engine"] == tmp_path / "out" / "m.fused.engine" and res.files["engine"].is_file()
    assert res.check.latency is None and len(engine_on_ort.calls["profiles"]) == 1  # no unfused engine
    assert "Not measured (--no-latency)" in res.files["report"].read_text()
    assert set(res.seconds) >= {"fuse", "build", "verify", "report"} and len(said) >= 4
    assert res.to_dict()["engine"]["trt_version"] == "8.5.3.1"


def test_failing_verification_exits_1_and_still_writes_the_report(engine_on_ort, model, tmp_path, monkeypatch, capsys):
    from fusion import api

    real = api.fuse_file

    def wrong_epsilon(src, dst, *a, **kw):  # a fused model that computes something else
        result = real(src, dst, *a, **kw)
        m = onnx.load(str(dst))
        for attr in m.graph.node[0].attribute:
            if attr.name == "epsilon":
                attr.f = 1.0
        onnx.save(m, str(dst))
        return result

    monkeypatch.setattr(api, "fuse_file", wrong_epsilon)
    out = tmp_path / "out"
    rc = cli.main(["deploy", str(model), "-o", str(out), *NORM_FC_CLI, "--profile", *PROFILE, "--json"])
    assert rc == 1
    summary = json.loads(capsys.readouterr().out)
    assert summary["passed"] is False and json.loads((out / "m.deploy.json").read_text())["passed"] is False
    assert "FAILED" in (out / "m.report.html").read_text()


@pytest.mark.parametrize(
    "case,message",
    [
        ("no_trt", "error: TensorRT is not installed: pip install tensorrt (or run where it is)"),
        ("bad_profile", "error: bad profile item 'B=x': 'x' is not an integer"),
        ("unknown_dim", "error: 'batch' is neither an input nor a dim of the model (inputs: x; dims: B, S)"),
        ("no_profile", "error: input 'x' dim 0 ('B') is dynamic and has no range: give B=MIN,OPT,MAX or x:MIN,OPT,MAX; "
                       "dynamic inputs need an optimization profile"),
        ("outdir_is_a_file", "error: -o {out}: exists and is not a directory"),
        ("no_parent", "error: -o {out}: {out_parent} does not exist"),
        ("model_folder_clobbers", "error: -o {out} is the model's folder and m.report.html exists there: "
                                  "choose another OUTDIR"),
        ("build_fails", "error: TensorRT could not build the engine: Could not find any implementation for node "
                        "{{ForeignNode[MatMul_3]}}"),
    ],
)
def test_deploy_bad_input_is_one_line_exit_2_and_writes_nothing(case, message, fake_trt, model, tmp_path, monkeypatch,
                                                                capsys):  # fmt: skip
    trt = fake_trt()
    out = tmp_path / "out"
    profile = ["--profile", *PROFILE]
    if case == "no_trt":
        monkeypatch.setitem(sys.modules, "tensorrt", None)
    elif case == "bad_profile":
        profile = ["--profile", "B=x", "S=1,4"]
    elif case == "unknown_dim":
        profile = ["--profile", "batch=1,4", "S=1,4"]
    elif case == "no_profile":
        profile = []
    elif case == "outdir_is_a_file":
        out.write_text("not a folder")
    elif case == "no_parent":
        out = tmp_path / "a" / "b"
    elif case == "model_folder_clobbers":
        out = model.parent
        (out / "m.report.html").write_text("the user's own report")
    elif case == "build_fails":
        trt.calls["fail_build"] = True
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    rc = cli.main(["deploy", str(model), "-o", str(out), *profile])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2
    errors = [line for line in err if not line.startswith("[")]  # (progress lines before a late error)
    assert errors == [message.format(out=out, out_parent=out.parent)]
    after = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert after == before  # nothing written, nothing changed
    assert _leftovers(tmp_path) == [] and _leftovers(model.parent) == []


def test_deploy_into_an_existing_folder_replaces_only_its_own_files(engine_on_ort, model, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    (out / "m.fused.engine").write_bytes(b"old engine")
    res = fusion.deploy(model, out, profile={"B": (1, 2, 4), "S": (1, 4, 8)}, passes=NORM_FC_PASSES, latency=False,
                        progress=lambda m: None)  # fmt: skip
    assert res.passed and (out / "keep.txt").read_text() == "mine"
    assert (out / "m.fused.engine").read_bytes().startswith(b"ENGINE:")
    assert _leftovers(tmp_path) == []


def test_notebook_02_runs_deploy_or_says_it_skipped():
    nb = json.loads((Path(__file__).resolve().parent.parent / "notebooks" / "02_plugins.ipynb").read_text())
    code = ["".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code"]
    cell = next(c for c in code if "fusion.deploy(" in c)
    assert "skipped fusion.deploy" in cell


def test_run_deploy_script_uses_cublas_only(tmp_path):
    script = (Path(__file__).resolve().parent.parent / "bench" / "run_deploy.sh").read_text()
    assert "-m fusion deploy" in script and "--tactic-sources cublas,cublas_lt" in script and "$OUT" in script



def test_deploy_tune_fuses_what_tuning_keeps(engine_on_ort, model, tmp_path, monkeypatch):
    from fusion import tuning

    fast, slow = (trt_timing.summarize([ms] * 3, 10, "execute_async_v2") for ms in (1.0, 2.0))
    seen = {}

    class Bench:  # the fused LayerNorm engine is twice as fast at every shape
        def __init__(self, original, *, profiles, **options):
            seen.update(options, profiles=profiles)

        def labels(self):
            return ["min", "opt", "max"]

        def baseline(self):
            return 1.0, [slow] * 3

        def measure(self, model, name):
            return 1.0, [slow] * 3, [fast] * 3

    monkeypatch.setattr(tuning, "EngineBench", Bench)
    res = fusion.deploy(model, tmp_path / "out", profile={"B": (1, 2, 4), "S": (1, 4, 8)}, tune=True, latency=False,
                        tactic_sources=["cublas"], progress=lambda m: None)  # fmt: skip
    assert res.passed and res.fusion.counts() == {"layernorm": 1}
    assert res.to_dict()["tuning"]["kept"] == ["layernorm"] and "tune" in res.seconds
    assert seen["tactic_sources"] == ["cublas"] and seen["profiles"] == {"B": (1, 2, 4), "S": (1, 4, 8)}
    assert [n.op_type for n in onnx.load(str(res.files["fused"])).graph.node] == ["FusedLayerNorm"]


def test_the_probe_finds_a_library_in_nvidias_pip_wheel_layout(tmp_path, monkeypatch):
    import ctypes
    import importlib
    import shutil

    libm = ftrt._where(ctypes.CDLL("libm.so.6"))  # a real library to stand for one from a wheel
    lib_dir = tmp_path / "nvidia" / "cudnn" / "lib"
    lib_dir.mkdir(parents=True)
    shutil.copy(libm, lib_dir / "libh9_wheel_only.so.8")
    libs = dict(ftrt._TACTIC_LIBRARIES)
    libs["cudnn"] = ("cuDNN", {8: ("libh9_wheel_only.so.8",), 10: ("libh9_wheel_only.so.8",)}, ("cos",))
    monkeypatch.setattr(ftrt, "_TACTIC_LIBRARIES", libs)
    assert "libh9_wheel_only.so.8: not found" in ftrt._library_problem("cudnn", 8)  # not on the search path ...
    monkeypatch.syspath_prepend(str(tmp_path))
    importlib.invalidate_caches()
    assert ftrt._library_problem("cudnn", 8) is None  # ... but where pip puts NVIDIA's libraries
