"""The command line: subcommands, one-line errors, exit codes, no half-written outputs."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import onnx
import pytest

from fusion.cli.commands import main

from .builders import NORM_FC_CLI
from .norm_models import LAYER, RMS, build


def _cli(*args: str, cwd=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fusion", *args], capture_output=True, text=True, cwd=cwd, timeout=120)


@pytest.fixture
def model_path(tmp_path):
    path = tmp_path / "m.onnx"
    onnx.save(build(LAYER), str(path))
    return path


def test_fuse_then_verify(model_path, tmp_path):
    out = tmp_path / "f.onnx"
    r = _cli("fuse", str(model_path), "-o", str(out), *NORM_FC_CLI)
    assert r.returncode == 0, r.stderr
    assert "fused 1 layernorm" in r.stdout
    assert [n.op_type for n in onnx.load(str(out)).graph.node] == ["FusedLayerNorm"]
    r = _cli("verify", str(model_path), str(out))
    assert r.returncode == 0, r.stderr
    assert "PASSED (onnxruntime)" in r.stdout


def test_verify_fails_with_exit_1_when_outputs_differ(model_path, tmp_path):
    fused_path = tmp_path / "f.onnx"
    assert main(["fuse", str(model_path), "-o", str(fused_path), *NORM_FC_CLI]) == 0
    bad = onnx.load(str(fused_path))
    for a in bad.graph.node[0].attribute:
        if a.name == "epsilon":
            a.f = 1.0
    onnx.save(bad, str(fused_path))
    r = _cli("verify", str(model_path), str(fused_path), "--json")
    assert r.returncode == 1
    assert json.loads(r.stdout)["passed"] is False


def test_dry_run_lists_matches_and_near_misses(tmp_path):
    m = build(LAYER)
    sub = next(n for n in m.graph.node if n.op_type == "Sub")
    m.graph.output.append(onnx.helper.make_tensor_value_info(sub.output[0], onnx.TensorProto.FLOAT, None))
    path = tmp_path / "m.onnx"
    onnx.save(m, str(path))
    r = _cli("fuse", str(path), "--dry-run")
    assert r.returncode == 0
    assert "would fuse nothing" in r.stdout
    assert f"intermediate {sub.output[0]!r} is a graph output" in r.stdout
    r = _cli("fuse", str(path), "--dry-run", "--json")
    data = json.loads(r.stdout)
    assert data["near_misses"][0]["rule"] == "layernorm"


def test_passes_and_targets_are_selectable(tmp_path):
    path = tmp_path / "rms.onnx"
    onnx.save(build(RMS), str(path))
    out = tmp_path / "o.onnx"
    assert main(["fuse", str(path), "-o", str(out), "--passes", "layernorm"]) == 0
    assert "FusedRMSNorm" not in [n.op_type for n in onnx.load(str(out)).graph.node]
    assert main(["fuse", str(path), "-o", str(out), "--passes", "rmsnorm", "--no-functions"]) == 0
    fused = onnx.load(str(out))
    assert [n.op_type for n in fused.graph.node] == ["FusedRMSNorm"] and not fused.functions


def test_list(capsys):
    assert main(["list", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {"layernorm", "rmsnorm"} <= set(data["passes"])
    assert any(s["op_type"] == "FusedLayerNorm" for s in data["specs"])


@pytest.mark.parametrize(
    "args,message",
    [
        (["fuse", "/nonexistent/m.onnx", "-o", "x.onnx"], "no such file"),
        (["fuse", "{model}", "-o", "/nonexistent/dir/x.onnx"], "does not exist"),
        (["fuse", "{model}", "-o", "{tmp}/x.onnx", "--passes", "nope"], "unknown pass 'nope'"),
        (["fuse", "{model}"], "needs -o OUTPUT"),
        (["fuse", "{garbage}", "-o", "{tmp}/x.onnx"], "not an ONNX model"),
        (["verify", "{model}", "{model}", "--shapes", "batch=x"], "is not an integer"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(model_path, tmp_path, args, message):
    garbage = tmp_path / "g.onnx"
    garbage.write_bytes(b"not a model")
    args = [a.format(model=model_path, tmp=tmp_path, garbage=garbage) for a in args]
    r = _cli(*args, cwd=tmp_path)
    assert r.returncode == 2, (r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and message in lines[0], r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "x.onnx").exists()
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_demo_names_its_passes_and_fuses_and_verifies_both_examples(tmp_path, capsys):
    """README set-up command 1 ends with the demo: it must fuse, so it names its passes."""
    assert main(["demo", "-o", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "target plugin, passes named: layernorm, rmsnorm, gemm" in out
    note = next(line for line in out.splitlines() if line.startswith("note: "))
    assert "leaves layernorm, rmsnorm, gemm out unless passes are named" in note and "slower" in note
    assert "--tune" in note
    assert "fused 13 gemm, 5 layernorm" in out and "fused 14 gemm, 5 rmsnorm" in out
    assert out.count("PASSED (onnxruntime)") == 2
    fused = [onnx.load(str(tmp_path / f"{name}.fused.onnx")) for name in ("bert_tiny", "llama_tiny")]
    assert {"FusedLayerNorm", "FusedRMSNorm", "FusedFC"} <= {n.op_type for m in fused for n in m.graph.node}


def test_console_script_entry_point_exists():
    from importlib.metadata import entry_points

    eps = entry_points(group="console_scripts")
    assert any(ep.name == "onnx-fusion" and ep.value == "fusion.cli:main" for ep in eps)
