"""GroupNorm fusion on models from real exporters (tests/fixtures: a diffusers-style ResNet
block and a diffusers UNet2DModel, TorchScript and dynamo exporters, fp32 and fp16): every
nn.GroupNorm fuses, SiLU with it where nn.SiLU follows, the outputs stay the same on
onnxruntime, and no other fixture gets a GroupNorm fusion."""

from __future__ import annotations

import onnx
import pytest
from onnx import helper

import fusion

from .builders import assert_fixture_outputs_match
from .fixtures.catalog import fixture_path, load_manifest

RECORDS = load_manifest()
GN_RECORDS = [r for r in RECORDS if "expected_groupnorm_fusions" in r]
OTHER_RECORDS = [r for r in RECORDS if "expected_groupnorm_fusions" not in r]


def _id(r) -> str:
    return r["file"].removesuffix(".onnx")


@pytest.mark.parametrize("record", GN_RECORDS, ids=_id)
def test_every_groupnorm_fuses_with_its_silu(record):
    path = fixture_path(record["file"])
    result = fusion.run(str(path), ["groupnorm"])
    assert result.counts() == {"groupnorm": record["expected_groupnorm_fusions"]}, result.near_misses
    silu = [helper.get_attribute_value(a) for n in result.model.graph.node if n.op_type == "FusedGroupNorm"
            for a in n.attribute if a.name == "silu"]  # fmt: skip
    assert sum(silu) == record["expected_groupnorm_silu_fusions"]
    assert not [n for n in result.model.graph.node if n.op_type in ("InstanceNormalization", "GroupNormalization")]
    assert_fixture_outputs_match(record, onnx.load(str(path)), result.model)


@pytest.mark.parametrize("record", [r for r in GN_RECORDS if r["dtype"] == "fp32"], ids=_id)
def test_onnx_target_on_real_exports(record):
    """Below opset 21 the exporters' InstanceNormalization form already is the onnx target's."""
    result = fusion.inspect(str(fixture_path(record["file"])), ["groupnorm"], target="onnx")
    assert not result.fusions
    assert len(result.near_misses) == record["expected_groupnorm_fusions"]
    assert all("already the standard InstanceNormalization form" in m.reason for m in result.near_misses)


@pytest.mark.parametrize("record", [r for r in GN_RECORDS if r["opset"] == 17], ids=_id)
def test_trt_target_on_real_exports(record):
    """The fixtures have a dynamic batch: TensorRT's plugin (static shapes only) is refused, saying why."""
    result = fusion.inspect(str(fixture_path(record["file"])), ["groupnorm"], target="trt")
    assert not result.fusions
    reasons = [m.reason for m in result.near_misses]
    assert len(reasons) == record["expected_groupnorm_fusions"], reasons
    want = "takes fp32 only" if record["dtype"] == "fp16" else "needs a static input shape"
    assert all(want in r for r in reasons), reasons


def test_no_groupnorm_in_other_fixtures():
    """0 false positives: none of the LayerNorm / RMSNorm / FC fixtures has a GroupNorm fusion."""
    found = {}
    for record in OTHER_RECORDS:
        result = fusion.inspect(str(fixture_path(record["file"])), ["groupnorm"])
        if result.fusions:
            found[record["file"]] = len(result.fusions)
    assert not found, found
