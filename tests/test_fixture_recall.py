"""Norm fusion on models from real exporters: every decomposed norm found, nothing else, same outputs.

Ground truth is the number of norm modules in the torch model minus those the exporter
already emitted as native LayerNormalization (tests/fixtures/manifest.json); those native
nodes fuse too (rule native_layernorm, patterns/native.py), one each.
"""

from __future__ import annotations

import pytest

import fusion

from .builders import assert_fixture_outputs_match
from .fixtures.catalog import fixture_path, load_manifest

RECORDS = load_manifest()


def _id(r) -> str:
    return r["file"].removesuffix(".onnx")


@pytest.mark.parametrize("record", RECORDS, ids=_id)
def test_recall_precision_and_numbers(record):
    path = fixture_path(record["file"])
    result = fusion.run(str(path), ["layernorm", "rmsnorm"])
    counts = result.counts()
    assert counts.get("layernorm", 0) == record["expected_layernorm_fusions"], (counts, result.near_misses)
    assert counts.get("rmsnorm", 0) == record["expected_rmsnorm_fusions"], (counts, result.near_misses)
    assert counts.get("native_layernorm", 0) == record["native_layernorm_nodes"], (counts, result.near_misses)
    assert counts.get("native_rmsnorm", 0) == record["native_rmsnorm_nodes"], (counts, result.near_misses)
    if not result.modified:
        return
    import onnx

    assert_fixture_outputs_match(record, onnx.load(str(path)), result.model)


TRT_CASES = [r for r in RECORDS if r["expected_layernorm_fusions"] and r["dtype"] in ("fp32", "fp16")]


@pytest.mark.parametrize("record", TRT_CASES[::3], ids=_id)
def test_trt_target_on_real_exports(record):
    """The fixtures' norms are 16 or 32 wide, where TensorRT's LayerNorm plugin is inaccurate:
    the trt target leaves every one of them, decomposed or native, saying why, and the model
    unchanged."""
    result = fusion.inspect(str(fixture_path(record["file"])), ["layernorm"], target="trt")
    assert not result.fusions
    reasons = [m.reason for m in result.near_misses]
    assert len(reasons) == record["expected_layernorm_fusions"] + record["native_layernorm_nodes"], reasons
    assert all("TensorRT's LayerNorm plugin is inaccurate below 48" in r for r in reasons), reasons
