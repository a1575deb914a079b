"""Bad input: the library raises a typed error, the CLI prints one line and exits 2, and no
output file is left behind (no temporary file either).  And writing over the input is atomic.

Each row of BAD is a case of the table: how to make it, the error class ``fusion.fuse_file``
raises, and what its message (the CLI's one line) says.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Callable

import numpy as np
import onnx
import pytest

import fusion
from fusion.ir import model_io
from fusion.errors import (
    FusionError,
    InvalidGraphError,
    ModelLoadError,
    OutputError,
    UnsupportedModelError,
)

from .builders import NORM_FC_CLI, NORM_FC_PASSES, run
from .norm_models import LAYER, build

ROOT = Path(__file__).resolve().parents[1]
FORM = LAYER.with_(shape=("B", 64))
IS_ROOT = hasattr(os, "geteuid") and os.geteuid() == 0


def _model() -> onnx.ModelProto:
    return build(FORM)


def _save_external(model: onnx.ModelProto, path: Path, location: str | None = None) -> None:
    copy = onnx.ModelProto()
    copy.CopyFrom(model)  # onnx.save_model moves the weights out of the proto it is given
    onnx.save_model(copy, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=location or path.name + ".data", size_threshold=0)


def _write(d: Path, data: bytes) -> Path:
    p = d / "m.onnx"
    p.write_bytes(data)
    return p


def _edited(edit: Callable[[onnx.ModelProto], None]) -> Callable[[Path], tuple[Path, Path]]:
    def make(d: Path) -> tuple[Path, Path]:
        m = _model()
        edit(m)
        return _write(d, m.SerializeToString()), d / "out.onnx"
    return make


def _good(d: Path) -> Path:
    return _write(d, _model().SerializeToString())


def _directory(d):
    (d / "m.onnx").mkdir()
    return d / "m.onnx", d / "out.onnx"


def _unreadable(d):
    p = _good(d)
    p.chmod(0)
    return p, d / "out.onnx"


def _missing_external(d):
    p = d / "m.onnx"
    _save_external(_model(), p)
    (d / "m.onnx.data").unlink()
    return p, d / "out.onnx"


def _short_external(d):
    p = d / "m.onnx"
    _save_external(_model(), p)
    data = d / "m.onnx.data"
    os.truncate(data, data.stat().st_size // 2)
    return p, d / "out.onnx"


def _escaping_external(d):
    m = _model()
    p = d / "m.onnx"
    _save_external(m, p)
    raw = onnx.load(str(p), load_external_data=False)
    for t in raw.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                e.value = "../m.onnx.data"
    p.write_bytes(raw.SerializeToString())
    return p, d / "out.onnx"


def _cycle(m):
    m.graph.node[0].input[0] = m.graph.node[2].output[0]  # ReduceMean reads the Pow after it


def _dangling(m):
    m.graph.node[1].input[0] = "nowhere"


def _duplicate_output(m):
    m.graph.node[1].output[0] = m.graph.node[0].output[0]


def _uncomputed_output(m):
    m.graph.output.append(onnx.helper.make_tensor_value_info("ghost", onnx.TensorProto.FLOAT, None))


def _unwritable(d):
    ro = d / "ro"
    ro.mkdir()
    ro.chmod(0o500)
    return _good(d), ro / "out.onnx"


def _output_is_directory(d):
    (d / "out.onnx").mkdir()
    return _good(d), d / "out.onnx"


def _set(field: str, value) -> Callable[[onnx.ModelProto], None]:
    def edit(m):
        if field == "ir_version":
            m.ir_version = value
        else:
            m.opset_import[0].version = value
    return edit


IR_MAX, OPSET_MAX = onnx.IR_VERSION, onnx.defs.onnx_opset_version()
# name -> (make(dir) -> (input, output), error class, message, skip reason or None)
BAD = {
    "input is a directory": (_directory, ModelLoadError, "m.onnx: not a file", None),
    "no such file": (lambda d: (d / "absent.onnx", d / "out.onnx"), ModelLoadError, "absent.onnx: no such file", None),
    "unreadable file": (_unreadable, ModelLoadError, "cannot read: Permission denied",
                        "running as root: file permissions do not block reads" if IS_ROOT else None),
    "empty file": (lambda d: (_write(d, b""), d / "out.onnx"), ModelLoadError, "empty file, not an ONNX model", None),
    "random bytes": (lambda d: (_write(d, np.random.default_rng(0).bytes(4096)), d / "out.onnx"), ModelLoadError,
                     "not an ONNX model (protobuf parse failed", None),
    "truncated model": (lambda d: (_write(d, _model().SerializeToString()[:700]), d / "out.onnx"), ModelLoadError,
                        "not an ONNX model (protobuf parse failed", None),
    "missing external data file": (_missing_external, ModelLoadError, "missing external data file 'm.onnx.data'", None),
    "external data file too short": (_short_external, ModelLoadError, "external data file 'm.onnx.data' is shorter than", None),
    "external data outside the model's directory": (_escaping_external, ModelLoadError,
                                                    "has an invalid external data location '../m.onnx.data'", None),
    "IR version 99": (_edited(_set("ir_version", 99)), UnsupportedModelError,
                      f"IR version 99 is not supported (this library handles 3..{IR_MAX})", None),
    "opset 5": (_edited(_set("opset", 5)), UnsupportedModelError,
                f"default-domain opset 5 is not supported (this library handles 7..{OPSET_MAX})", None),
    "opset 99": (_edited(_set("opset", 99)), UnsupportedModelError,
                 f"default-domain opset 99 is not supported (this library handles 7..{OPSET_MAX})", None),
    "cycle": (_edited(_cycle), InvalidGraphError, "the graph has a cycle through node", None),
    "dangling input": (_edited(_dangling), InvalidGraphError, "reads 'nowhere', which nothing defines", None),
    "duplicate output names": (_edited(_duplicate_output), InvalidGraphError, "is defined more than once", None),
    "graph output nothing computes": (_edited(_uncomputed_output), InvalidGraphError, "output 'ghost' is not computed by the graph", None),
    "empty graph": (_edited(lambda m: m.graph.ClearField("node")), InvalidGraphError, "the graph has no nodes", None),
    "output directory missing": (lambda d: (_good(d), d / "missing" / "out.onnx"), OutputError, "missing does not exist", None),
    "output directory unwritable": (_unwritable, OutputError, "is not writable",
                                    "running as root: directories are always writable" if IS_ROOT else None),
    "output path is a directory": (_output_is_directory, OutputError, "out.onnx: is a directory", None),
}


def _leftovers(d: Path, before: set[str]) -> list[str]:
    """Files the failed run left: an output, a data file, a temporary."""
    out = []
    for p in d.rglob("*"):
        rel = str(p.relative_to(d))
        if rel not in before and not p.is_dir():
            out.append(rel)
    return out


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "fusion", *args], capture_output=True, text=True, cwd=cwd, env=env, timeout=120)


@pytest.fixture
def case_dir(tmp_path):
    yield tmp_path
    for p in tmp_path.rglob("*"):  # undo chmods so pytest can clean up
        try:
            p.chmod(0o700 if p.is_dir() else 0o600)
        except OSError:
            pass


@pytest.mark.parametrize("name", list(BAD))
def test_library_raises_a_typed_error_and_leaves_nothing(case_dir, name):
    make, error, message, skip = BAD[name]
    if skip:
        pytest.skip(skip)
    src, dst = make(case_dir)
    before = {str(p.relative_to(case_dir)) for p in case_dir.rglob("*")}
    with pytest.raises(error) as info:
        fusion.fuse_file(src, dst, NORM_FC_PASSES)
    assert message in str(info.value)
    assert isinstance(info.value, FusionError) and info.value.exit_code == 2
    assert _leftovers(case_dir, before) == []


@pytest.mark.parametrize("name", list(BAD))
def test_cli_prints_one_line_and_exits_2(case_dir, name):
    make, error, message, skip = BAD[name]
    if skip:
        pytest.skip(skip)
    src, dst = make(case_dir)
    before = {str(p.relative_to(case_dir)) for p in case_dir.rglob("*")}
    r = _cli("fuse", str(src), "-o", str(dst), *NORM_FC_CLI, cwd=case_dir)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = r.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], r.stderr
    assert r.stdout == ""
    assert _leftovers(case_dir, before) == []


# -- output == input ---------------------------------------------------------------------


def _in_place_model(d: Path) -> tuple[Path, dict[str, bytes]]:
    """A model with its weights in m.onnx.data: the name its fused output's data would have."""
    p = d / "m.onnx"
    _save_external(_model(), p)
    return p, {f.name: f.read_bytes() for f in d.iterdir()}


def _feeds() -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(0).standard_normal((2, 64)).astype(np.float32)}


def test_output_equal_to_input_works(tmp_path):
    src, _ = _in_place_model(tmp_path)
    want = run(_model(), _feeds())[0]
    for _ in range(2):  # the second time over an already fused model
        assert _cli("fuse", str(src), "-o", str(src), *NORM_FC_CLI, cwd=tmp_path).returncode == 0
        fused = onnx.load(str(src))
        assert [n.op_type for n in fused.graph.node] == ["FusedLayerNorm"]
        np.testing.assert_allclose(run(fused, _feeds())[0], want, atol=1e-5)
        names = sorted(p.name for p in tmp_path.iterdir())
        assert len(names) == 2 and not any(n.endswith(".tmp") for n in names), names  # model + its one data file


class _Killed(BaseException):
    """Stands for the process dying: nothing converts it into an OutputError."""


def test_input_intact_when_killed_while_writing(tmp_path, monkeypatch):
    src, before = _in_place_model(tmp_path)
    real = os.fdopen

    def fdopen(fd, mode="r", *a, **kw):
        f = real(fd, mode, *a, **kw)
        if "w" not in mode:
            return f

        class HalfWriter:
            def __enter__(self):
                return self

            def __exit__(self, *exc):
                f.close()

            def write(self, b):
                f.write(b[: len(b) // 2])
                f.flush()
                raise _Killed("killed mid-write")

            def __getattr__(self, name):
                return getattr(f, name)

        return HalfWriter()

    monkeypatch.setattr(model_io.os, "fdopen", fdopen)
    with pytest.raises(_Killed):
        fusion.fuse_file(src, src, NORM_FC_PASSES)
    assert {f.name: f.read_bytes() for f in tmp_path.iterdir()} == before  # temporaries removed too


@pytest.mark.parametrize("rename", [1, 2])
def test_input_intact_when_killed_between_renames(tmp_path, monkeypatch, rename):
    """Data file first, model last; the new data never takes the name the input's data has."""
    src, before = _in_place_model(tmp_path)
    real, calls = os.replace, []

    def replace(a, b):
        calls.append(b)
        if len(calls) == rename:
            raise _Killed("killed between renames")
        return real(a, b)

    monkeypatch.setattr(model_io.os, "replace", replace)
    with pytest.raises(_Killed):
        fusion.fuse_file(src, src, NORM_FC_PASSES)
    after = {f.name: f.read_bytes() for f in tmp_path.iterdir()}
    assert {k: after[k] for k in before} == before
    assert set(after) - set(before) <= {"m.onnx.1.data"}  # the new data, renamed before the kill
    want = run(_model(), _feeds())[0]
    np.testing.assert_allclose(run(onnx.load(str(src)), _feeds())[0], want, atol=1e-6)


_KILL_MID_WRITE = """
import os, signal, sys
from fusion.ir import model_io
import fusion
real = os.fdopen
def fdopen(fd, mode="r", *a, **kw):
    f = real(fd, mode, *a, **kw)
    if "w" in mode:
        w = f.write
        def write(b):
            w(b[: len(b) // 2]); f.flush()
            os.kill(os.getpid(), signal.SIGKILL)
        f.write = write
    return f
model_io.os.fdopen = fdopen
fusion.fuse_file(sys.argv[1], sys.argv[1], sys.argv[2].split(","))
"""


def test_input_intact_when_sigkilled_while_writing(tmp_path):
    src, before = _in_place_model(tmp_path)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    argv = [sys.executable, "-c", _KILL_MID_WRITE, str(src), NORM_FC_CLI[1]]
    r = subprocess.run(argv, env=env, capture_output=True, timeout=120)
    assert r.returncode == -signal.SIGKILL, r.stderr
    after = {f.name: f.read_bytes() for f in tmp_path.iterdir()}
    assert {k: after[k] for k in before} == before
    # Nothing could clean up after SIGKILL: only hidden temporaries may be left.
    assert all(k.startswith(".") and k.endswith(".tmp") for k in set(after) - set(before)), after


def test_fusing_into_the_file_another_models_data_has_leaves_that_model_working(tmp_path):
    """a.onnx keeps its weights in b.onnx.data; fusing a.onnx into b.onnx must not overwrite it."""
    a = tmp_path / "a.onnx"
    _save_external(_model(), a, location="b.onnx.data")
    data = (tmp_path / "b.onnx.data").read_bytes()
    fusion.fuse_file(a, tmp_path / "b.onnx", NORM_FC_PASSES)
    assert (tmp_path / "b.onnx.data").read_bytes() == data
    want = run(_model(), _feeds())[0]
    np.testing.assert_allclose(run(onnx.load(str(a)), _feeds())[0], want, atol=1e-6)
    np.testing.assert_allclose(run(onnx.load(str(tmp_path / "b.onnx")), _feeds())[0], want, atol=1e-5)


# -- corrupted files: never anything but a typed error -------------------------------------


def test_every_prefix_of_a_model_is_a_typed_error_or_a_model(tmp_path):
    """Truncated anywhere: the library says so (or, cut at a field boundary, reads a smaller
    model and judges that one); it never raises anything else."""
    data = build(LAYER.with_(shape=("B", 16))).SerializeToString()
    for cut in range(0, len(data), max(1, len(data) // 150)):
        p = tmp_path / "t.onnx"
        p.write_bytes(data[:cut])
        try:
            fusion.fuse_file(p, tmp_path / "o.onnx", NORM_FC_PASSES)
        except FusionError as e:
            assert e.exit_code == 2, (cut, e)
