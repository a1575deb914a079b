"""The README stays true: generated tables current, set-up commands verbatim, examples run."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

import pytest
from fusion.patterns import RULES

from fusion.cli import commands as cli
from fusion import docs
from fusion.rewrite import specs

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
EXAMPLE = ROOT / "fusion" / "examples" / "bert_tiny.onnx"
SETUP = (
    'python3 -m venv .venv && . .venv/bin/activate && pip install -e ".[test]" && python -m fusion demo',
    ". .venv/bin/activate && python -m pytest -q",
)


def fenced(text: str, lang: str) -> list[str]:
    return re.findall(rf"^```{lang}\n(.*?)^```", text, re.DOTALL | re.MULTILINE)


def test_generated_tables_are_current():
    stale = docs.stale_sections(README.read_text(encoding="utf-8"))
    assert not stale, f"README sections {stale} are out of date: run `python -m fusion docs`"


def test_docs_check_cli(tmp_path, capsys):
    copy = tmp_path / "README.md"
    copy.write_text(README.read_text(encoding="utf-8"), encoding="utf-8")
    assert cli.main(["docs", "--check", "--readme", str(copy)]) == 0
    text = copy.read_text(encoding="utf-8").replace("`FusedRMSNorm`", "`FusedRmsNorm`", 1)
    copy.write_text(text, encoding="utf-8")
    assert cli.main(["docs", "--check", "--readme", str(copy)]) == 1
    assert "plugins" in capsys.readouterr().out
    assert cli.main(["docs", "--readme", str(copy)]) == 0
    assert copy.read_text(encoding="utf-8") == README.read_text(encoding="utf-8")


def test_missing_markers_are_an_error():
    with pytest.raises(Exception, match="GENERATED: plugins"):
        docs.render("# no markers here\n")


def test_setup_commands_verbatim():
    text = README.read_text(encoding="utf-8")
    setup = text.split("## Set up", 1)[1].split("\n## ", 1)[0]
    blocks = [b.strip() for b in fenced(setup, "sh")]
    assert blocks[:2] == list(SETUP), "the two set-up commands (CI runs the second) must stay verbatim"


def test_plugin_table_covers_every_spec_field():
    table = docs.plugin_table()
    for s in specs.SPECS:
        row = next(line for line in table.splitlines() if line.startswith(f"| `{s.op_type}` |"))
        for f in s.fields:
            assert f"`{f.name}` {f.type.onnx_name} → {f.type.trt_name}" in row
        for p in s.inputs:
            assert f"`{p.name}`" + (" (optional)" if p.optional else "") in row


def test_every_rule_declares_its_variants():
    for r in RULES:
        assert r.variants, f"{type(r).__name__} has no variants"
        for v in r.variants:
            assert ": " in v, f"{type(r).__name__}: variant {v!r} is not 'part: forms'"
    table = docs.variant_table()
    for r in RULES:
        for v in r.variants:
            assert v.partition(": ")[2].replace("|", "\\|") in table


def test_python_examples_run(tmp_path, monkeypatch, capsys):
    blocks = fenced(README.read_text(encoding="utf-8"), "python")
    assert blocks, "the README has no Python example"
    (tmp_path / "fusion" / "examples").mkdir(parents=True)
    shutil.copy(EXAMPLE, tmp_path / "fusion" / "examples" / EXAMPLE.name)
    monkeypatch.chdir(tmp_path)
    for i, code in enumerate(blocks):
        assert len(code.strip().splitlines()) <= 12, "keep the README example short"
        exec(compile(code, f"README.md python block {i}", "exec"), {"__name__": "__main__"})  # noqa: S102
    out = capsys.readouterr().out
    assert "PASSED" in out and "{'gemm': 13, 'layernorm': 5}" in out  # it fuses what its comment says


def test_cli_examples_run(tmp_path, monkeypatch, capsys):
    """Every `python -m fusion ...` line in the README's sh blocks that needs no GPU or TensorRT."""
    shutil.copy(EXAMPLE, tmp_path / "model.onnx")
    monkeypatch.chdir(tmp_path)
    ran = 0
    for block in fenced(README.read_text(encoding="utf-8"), "sh"):
        for line in block.splitlines():
            cmd = line.split("#", 1)[0].strip()
            needs_gpu = cmd.startswith(("python -m fusion build ", "python -m fusion deploy ")) or " --trt" in cmd
            if not cmd.startswith("python -m fusion ") or " plugins " in f" {cmd} " or needs_gpu:
                continue  # the set-up lines, the nvcc build and TensorRT are not run here
            args = shlex.split(cmd)[3:]
            assert cli.main(args) == 0, cmd
            ran += 1
    assert ran >= 4
    assert (tmp_path / "report.html").is_file()
    capsys.readouterr()
