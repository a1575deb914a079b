"""Norms from the other exporters (tests/fixtures/exporters): tf2onnx (Keras), jax2onnx (Flax),
paddle2onnx (Paddle), torch.var_mean/std_mean under both torch exporters.

Ground truth is the source framework's module list (manifest); reference outputs are the source
framework's own, saved beside each model (make_exporter_fixtures.py).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
import onnx
import pytest

import fusion

from .builders import run

DIR = Path(__file__).resolve().parent / "fixtures" / "exporters"
RECORDS = json.loads((DIR / "manifest.json").read_text())
TOLERANCE = 2e-4  # fp32, relative to max(1, |output|)


def _id(r) -> str:
    return r["file"].removesuffix(".onnx")


def _load(record):
    path = DIR / record["file"]
    data = np.load(path.with_suffix(".npz"))
    feeds = {k[3:]: data[k] for k in data.files if k.startswith("in_")}
    ref = [data["out_" + n] for n in record["outputs"]]
    return path, feeds, ref


def _close(got, want) -> float:
    worst = 0.0
    for a, b in zip(got, want):
        a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
        worst = max(worst, float(np.abs(a64 - b64).max()) / max(1.0, float(np.abs(b64).max())))
    return worst


@pytest.mark.parametrize("record", RECORDS, ids=_id)
def test_fixture_is_the_source_model(record):
    """The exported model is valid and computes what the source framework did."""
    path, feeds, ref = _load(record)
    data = path.read_bytes()
    assert hashlib.sha256(data).hexdigest() == record["sha256"]
    onnx.checker.check_model(onnx.load_from_string(data), full_check=True)
    assert _close(run(onnx.load_from_string(data), feeds), ref) <= TOLERANCE


@pytest.mark.parametrize("record", RECORDS, ids=_id)
def test_every_norm_fuses_and_nothing_else(record):
    path, feeds, ref = _load(record)
    result = fusion.run(str(path), ["layernorm", "rmsnorm"])
    counts = result.counts()
    # jax2onnx computes nnx.LayerNorm(use_fast_variance=False)'s variance in float64: recognised,
    # and left by the plugin target, which has no fp64 (target onnx fuses it: see below).
    double = [m.reason for m in result.near_misses if "computes in DOUBLE" in m.reason]
    assert len(double) == DOUBLE_VARIANCE.get(record["family"], 0), double
    want_ln = record["expected_layernorm_fusions"] - len(double)
    assert counts.get("layernorm", 0) == want_ln, (counts, [m.reason for m in result.near_misses])
    assert counts.get("rmsnorm", 0) == record["expected_rmsnorm_fusions"], (counts, [m.reason for m in result.near_misses])
    if result.modified:
        got = run(result.model, feeds)
        assert _close(got, run(onnx.load(str(path)), feeds)) <= TOLERANCE
        assert _close(got, ref) <= TOLERANCE
        other = _other_shape(record, feeds)  # the dynamic dims at other sizes
        assert _close(run(result.model, other), run(onnx.load(str(path)), other)) <= TOLERANCE


def _other_shape(record, feeds: dict) -> dict:
    rng = np.random.default_rng(7)
    out = {}
    for name, value in feeds.items():
        shape = list(value.shape)
        for axis in record["dynamic_dims"].get(name, []):
            shape[axis] += 1 + axis
        out[name] = (rng.standard_normal(shape) * 2 + 0.5).astype(value.dtype)
    return out


DOUBLE_VARIANCE = {"flax_norms": 1}


@pytest.mark.parametrize("record", [r for r in RECORDS if r["opset"] >= 23], ids=_id)
def test_every_norm_fuses_on_target_onnx(record):
    """At opset 23 target onnx has LayerNormalization and RMSNormalization, in any float type."""
    path, feeds, ref = _load(record)
    result = fusion.run(str(path), ["layernorm", "rmsnorm"], target="onnx")
    counts = result.counts()
    assert counts.get("layernorm", 0) == record["expected_layernorm_fusions"], [m.reason for m in result.near_misses]
    assert counts.get("rmsnorm", 0) == record["expected_rmsnorm_fusions"], [m.reason for m in result.near_misses]
    assert _close(run(result.model, feeds), ref) <= TOLERANCE


@pytest.mark.parametrize("record", RECORDS, ids=_id)
def test_dense_layers_fuse_without_false_positives(record):
    """Every Dense / Linear / EinsumDense of the source model fuses, and nothing else."""
    path, feeds, ref = _load(record)
    result = fusion.run(str(path), ["gemm"])
    got = result.counts().get("gemm", 0)
    assert got == record["linear_modules"], [m.reason for m in result.near_misses]
    if result.modified:
        assert _close(run(result.model, feeds), run(onnx.load(str(path)), feeds)) <= TOLERANCE
        assert _close(run(result.model, feeds), ref) <= TOLERANCE


# Keras MultiHeadAttention's output projection (EinsumDense "abcd,cde->abe", one per layer): at
# opset 17 tf2onnx writes it as Gemm(x, Reshape(W, Concat([-1], ReduceProd(Gather(Shape(W))))),
# whose weight the gemm rule folds; at opset 13 it stays an Einsum node, which einsum_fc reads
# as x.reshape(B, S, 32) @ W.reshape(32, 32).
FOLDED = {
    "keras_bert_tf2onnx_op17.onnx": "= Reshape",
    "keras_bert_tf2onnx_op13.onnx": "kernel of Einsum",
}


@pytest.mark.parametrize("name", sorted(FOLDED))
def test_keras_einsum_dense_weight_is_folded(name):
    """The attention output projections fuse through their reshaped kernel, on both targets."""
    record = next(r for r in RECORDS if r["file"] == name)
    path, feeds, ref = _load(record)
    for target in ("plugin", "trt"):
        result = fusion.run(str(path), ["gemm"], target=target)
        assert result.counts() == {"gemm": record["linear_modules"]}, [m.reason for m in result.near_misses]
        notes = [n for f in result.fusions for n in f.notes]
        assert len(notes) == 2 and all(FOLDED[name] in n and "folded when fusing to [32, 32]" in n for n in notes), notes
        assert _close(run(result.model, feeds), ref) <= TOLERANCE
    # The attention scores Einsum (btnh,bsnh->bnts) is no FC, and says why.
    if "op13" in name:
        assert any(r.startswith("Einsum ") and "both operands are computed" in r for r in (m.reason for m in result.near_misses))


def test_one_pass_variance_is_said_in_the_record():
    record = next(r for r in RECORDS if r["family"] == "flax_norms" and r["opset"] >= 23)
    result = fusion.run(str(DIR / record["file"]), ["layernorm", "rmsnorm"], target="onnx")
    notes = [n for f in result.fusions for n in f.notes]
    assert any("one-pass variance" in n and "more accurate" in n for n in notes), notes
    assert any("constant rows" in n for n in notes), notes
    assert "note: one-pass variance" in str(result)


@pytest.mark.parametrize("record", RECORDS, ids=_id)
@pytest.mark.parametrize("target", ["plugin", "onnx"])
def test_residual_norm_sites_fuse_as_skip_norms(record, target):
    """Every residual + norm site of the source model (manifest ``residual_norm_sites``: the Keras
    encoder's 4, TensorFlow's LayerNorm after each residual Add) fuses as a skip norm, and no other
    Add does; the outputs stay the source framework's."""
    if target == "onnx" and record["opset"] < 17:
        pytest.skip("target onnx writes LayerNormalization, opset 17")
    path, feeds, ref = _load(record)
    result = fusion.run(str(path), ["skipnorm", "layernorm", "rmsnorm"], target=target)
    counts = result.counts()
    sites = record["residual_norm_sites"]
    assert counts.get("skiplayernorm", 0) + counts.get("skiprmsnorm", 0) == sites, (counts, [m.reason for m in result.near_misses])
    if not sites:
        return
    assert counts.get("layernorm", 0) == record["expected_layernorm_fusions"] - sites, counts
    got = run(result.model, feeds)
    assert _close(got, run(onnx.load(str(path)), feeds)) <= TOLERANCE
    assert _close(got, ref) <= TOLERANCE
    other = _other_shape(record, feeds)
    assert _close(run(result.model, other), run(onnx.load(str(path)), other)) <= TOLERANCE
