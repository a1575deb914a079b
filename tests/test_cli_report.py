"""`fuse --report` and `verify` at the edges (issue 16, defect 9): in-place fusion, report
paths that name a model or cannot be written, fused models onnxruntime cannot load."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import onnx
import pytest
from onnx import helper

from fusion.cli import commands as cli

from .builders import NORM_FC_CLI, NORM_FC_PASSES
from .norm_models import LAYER, build

EXAMPLES = Path(__file__).resolve().parent.parent / "fusion" / "examples"


def _cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fusion", *args], capture_output=True, text=True, cwd=cwd, timeout=300)


def _summary(text: str) -> dict[str, str]:
    """The report's summary rows (model, nodes, verification, ...), tags stripped."""
    rows = re.findall(r"<tr><th>(.*?)</th><td>(.*?)</td></tr>", text.split('<section id="verify"')[0], re.DOTALL)
    return {k: re.sub(r"<[^>]+>", "", v) for k, v in rows}


def _before_ops(text: str) -> str:
    """The op types listed in the "Before" captions of the fusion sections."""
    return " ".join(re.findall(r"Before: the matched subgraph(?: \((.*?)\))?</figcaption>", text))


@pytest.fixture
def bert(tmp_path) -> Path:
    path = tmp_path / "m.onnx"
    shutil.copy(EXAMPLES / "bert_tiny.onnx", path)
    return path


def _external(src: Path, dst: Path) -> Path:
    model = onnx.load(str(src))
    onnx.save_model(model, str(dst), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=dst.name + ".data", size_threshold=0)  # fmt: skip
    return dst


@pytest.mark.parametrize("external", [False, True], ids=["embedded", "external-data"])
def test_in_place_report_is_built_from_the_original(bert, tmp_path, external, capsys):
    if external:
        bert = _external(bert, tmp_path / "ext.onnx")
    pristine = tmp_path / "pristine"
    pristine.mkdir()
    for p in tmp_path.glob(bert.name + "*"):
        shutil.copy(p, pristine / p.name)
    # The same fusion written elsewhere: what the in-place report must say.
    want_args = ["fuse", str(bert), "-o", str(tmp_path / "other.onnx"), *NORM_FC_CLI, "--report", str(tmp_path / "want.html")]
    assert cli.main(want_args) == 0
    assert cli.main(["fuse", str(bert), "-o", str(bert), *NORM_FC_CLI, "--report", str(tmp_path / "got.html")]) == 0
    capsys.readouterr()
    want = (tmp_path / "want.html").read_text(encoding="utf-8")
    got = (tmp_path / "got.html").read_text(encoding="utf-8")
    w, g = _summary(want), _summary(got)
    assert g["nodes"] == w["nodes"] and g["nodes"].split(" → ")[0] != g["nodes"].split(" → ")[1], g
    assert g["verification"] == w["verification"] and "PASSED" in g["verification"], g
    assert g["model"] == str(bert)  # named as the user named it, not as the snapshot
    assert "ReduceMean" in _before_ops(got) and "FusedLayerNorm" not in _before_ops(got)
    # The fused model was written in place and still runs like the original.
    assert cli.main(["verify", str(pristine / bert.name), str(bert)]) == 0
    capsys.readouterr()
    assert not [p for p in os.listdir(tmp_path) if p.startswith(".fusion-report")]  # the snapshot is gone


@pytest.mark.parametrize(
    "report",
    ["{model}", "{out}", "{tmp}/sub/../m.onnx", "{link}", "{tmp}/m.onnx.data"],
    ids=["input", "output", "dotdot", "symlink", "data-file"],
)
def test_report_path_naming_a_model_file_is_refused(tmp_path, report):
    model = tmp_path / "m.onnx"
    onnx.save(build(LAYER), str(model))
    (tmp_path / "sub").mkdir()
    link = tmp_path / "link.html"
    link.symlink_to(model)
    before = model.read_bytes()
    out = tmp_path / "f.onnx"
    report = report.format(model=model, out=out, tmp=tmp_path, link=link)
    for args in (["-o", str(out)], ["-o", str(model)], ["--dry-run"]):
        if report == str(out) and args != ["-o", str(out)]:
            continue
        r = _cli("fuse", str(model), *args, "--report", report)
        assert r.returncode == 2, (args, r.stdout, r.stderr)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and "--report" in lines[0] and "model" in lines[0], r.stderr
        assert model.read_bytes() == before
        assert not out.exists()


@pytest.mark.parametrize("where", ["under-a-file", "a-directory", "read-only-dir"])
def test_unwritable_report_path_exits_2_before_the_model_is_written(tmp_path, where):
    model = tmp_path / "m.onnx"
    onnx.save(build(LAYER), str(model))
    if where == "under-a-file":
        (tmp_path / "plain").write_text("x")
        report = tmp_path / "plain" / "r.html"
    elif where == "a-directory":
        report = tmp_path / "dir.html"
        report.mkdir()
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes into read-only directories")
        ro = tmp_path / "ro"
        ro.mkdir()
        ro.chmod(0o500)
        report = ro / "r.html"
    out = tmp_path / "f.onnx"
    r = _cli("fuse", str(model), "-o", str(out), "--report", str(report))
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and "--report" in lines[0] and "internal error" not in lines[0], r.stderr
    assert not out.exists()


def test_verify_of_a_fused_model_onnxruntime_cannot_load_reports_failed(tmp_path):
    model = tmp_path / "m.onnx"
    onnx.save(build(LAYER), str(model))
    broken = build(LAYER)
    # A custom op with no function body and no kernel: onnx loads it, onnxruntime cannot.
    broken.graph.node[-1].op_type, broken.graph.node[-1].domain = "NoKernelHere", "nowhere"
    broken.opset_import.append(helper.make_opsetid("nowhere", 1))
    onnx.save(broken, str(tmp_path / "f.onnx"))
    r = _cli("verify", str(model), str(tmp_path / "f.onnx"))
    assert r.returncode == 1, (r.stdout, r.stderr)
    assert "FAILED" in r.stdout and "NoKernelHere" in r.stdout, r.stdout
    assert "internal error" not in r.stderr


def test_verify_extra_checks_option(tmp_path, capsys):
    model = tmp_path / "m.onnx"
    onnx.save(build(LAYER), str(model))
    out = tmp_path / "f.onnx"
    assert cli.main(["fuse", str(model), "-o", str(out), *NORM_FC_CLI]) == 0
    capsys.readouterr()
    assert cli.main(["verify", str(model), str(out), "--extra-checks", "large mean"]) == 0
    shown = capsys.readouterr().out
    assert "large mean" in shown and "onnxruntime optimized" not in shown
    assert cli.main(["verify", str(model), str(out), "--extra-checks", "large mean,onnxruntime optimized"]) == 0
    shown = capsys.readouterr().out
    assert "large mean" in shown and "onnxruntime optimized: ORT_ENABLE_ALL" in shown
    assert cli.main(["verify", str(model), str(out)]) == 0  # a default check
    assert "onnxruntime optimized" in capsys.readouterr().out
    assert cli.main(["verify", str(model), str(out), "--extra-checks", "none"]) == 0
    shown = capsys.readouterr().out
    assert "large mean" not in shown and "onnxruntime optimized" not in shown
    assert cli.main(["verify", str(model), str(out), "--extra-checks", "bogus"]) == 2
    assert "unknown extra checks" in capsys.readouterr().err


def test_html_verify_table_names_each_check_and_the_fused_models_error(tmp_path):
    from fusion.report import html as html_report
    from fusion.compare.verify import verify

    model = tmp_path / "m.onnx"
    onnx.save(build(LAYER), str(model))
    result = __import__("fusion").fuse_file(model, tmp_path / "f.onnx", NORM_FC_PASSES)
    broken = onnx.load(str(tmp_path / "f.onnx"))
    del broken.functions[:]  # a custom node without its body: onnxruntime cannot load it
    onnx.save(broken, str(tmp_path / "f.onnx"))
    text = html_report.render_report(model, tmp_path / "f.onnx", result)
    assert "<th>check</th>" in text and "FAILED" in text
    assert "the fused model fails" in text and "FusedLayerNorm" in text.split("the fused model fails")[1][:400]
    ok = verify(model, model)
    assert {c.check.split(":")[0] for c in ok.checks} >= {"random", "large mean", "onnxruntime optimized"}
