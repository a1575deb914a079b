"""The FC rule on models from the real exporters (tests/fixtures): recall, no false positives,
and the fused models compute what the originals did, on every target.

Ground truth comes from the torch models (manifest ``linear_modules`` = nn.Linear + GPT-2
Conv1D, ``linear_followed_by_activation``), not from the graphs this rule reads.
"""

from __future__ import annotations

from collections import Counter

import onnx
import pytest

import fusion
from fusion.rewrite import specs
from fusion.compare.verify import verify  # fusion.verify is the submodule once that is imported

from .fixtures.catalog import MANIFEST_PATH, fixture_path, load_manifest, random_feeds

if not MANIFEST_PATH.exists():  # pragma: no cover - the fixtures are generated, then committed
    pytest.skip("tests/fixtures/manifest.json is missing", allow_module_level=True)

RECORDS = [r for r in load_manifest() if fixture_path(r).exists()]
FC_FAMILIES = ("mlp2d", "mlp3d", "bert", "gpt2", "llama", "t5", "vit")
# Activation modules the FC node takes as its epilogue (BERT's / ViT's pooler Tanh is not one,
# nor LLaMA's SiLU-gated MLP).
FUSABLE = {
    "ReLU": "relu",
    "GELU": "gelu_erf",
    "GELU(approximate='none')": "gelu_erf",
    "GELUActivation": "gelu_erf",  # transformers "gelu": torch's erf GELU
    "GELU(approximate='tanh')": "gelu_tanh",
    "NewGELUActivation": "gelu_tanh",  # transformers "gelu_new" (GPT-2), written out with Pow(x, 3)
}


def _ids(records) -> list[str]:
    return [r["file"].removesuffix(".onnx") for r in records]


def _expected_activations(rec) -> Counter:
    """Activation kinds the plugin target fuses (none at opset 11: see the rule's doc)."""
    if rec["opset"] < 12:
        return Counter()
    return Counter(FUSABLE[a["activation"]] for a in rec["linear_followed_by_activation"] if a["activation"] in FUSABLE)


def _fc_nodes(model: onnx.ModelProto, op_type: str = "FusedFC") -> list[onnx.NodeProto]:
    out = []
    stack = [model.graph]
    while stack:
        g = stack.pop()
        for n in g.node:
            if n.op_type == op_type:
                out.append(n)
            stack.extend(a.g for a in n.attribute if a.type == onnx.AttributeProto.GRAPH)
    return out


def _feeds(rec) -> list[dict]:
    return [random_feeds(rec, "min"), random_feeds(rec, "max")]


def _verify(rec, fused):
    report = verify(str(fixture_path(rec)), fused, inputs=_feeds(rec))
    assert report.passed, report.table()
    return report


@pytest.mark.parametrize("rec", RECORDS, ids=_ids(RECORDS))
def test_recall_and_no_false_positives(rec):
    """Every linear module fuses, and nothing else: on every fixture, FC or not."""
    result = fusion.inspect(str(fixture_path(rec)), ["gemm"])
    assert len(result.fusions) == rec["linear_modules"], [m.reason for m in result.near_misses]
    assert all(f.rule == "gemm" for f in result.fusions)
    # What stays unfused among MatMuls is activation x activation (attention), said so.
    for miss in result.near_misses:
        assert "both operands are computed" in miss.reason or "activation" in miss.reason, miss


FC_RECORDS = [r for r in RECORDS if r["family"] in FC_FAMILIES]


@pytest.mark.parametrize("rec", FC_RECORDS, ids=_ids(FC_RECORDS))
def test_plugin_target_fuses_linears_and_activations(rec):
    fused = fusion.fuse_gemm(str(fixture_path(rec)))
    nodes = _fc_nodes(fused)
    assert len(nodes) == rec["linear_modules"]
    acts = Counter()
    for n in nodes:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        act = attrs["activation"].decode()
        assert act in specs.FC_ACTIVATIONS
        if act != "none":
            acts[act] += 1
        assert attrs["out_features"] > 0 and attrs["transpose_weight"] in (0, 1)
    assert acts == _expected_activations(rec)
    assert [f.name for f in fused.functions] == ["FusedFC"]
    _verify(rec, fused)


# One fp32 and one fp16 fixture per family and exporter for the other two targets.
TARGET_RECORDS = [
    r
    for r in FC_RECORDS
    if (r["exporter"], r["opset"], r["dtype"]) in {("legacy", 17, "fp32"), ("legacy", 13, "fp16"), ("dynamo", 18, "fp32")}
]


@pytest.mark.parametrize("rec", TARGET_RECORDS, ids=_ids(TARGET_RECORDS))
def test_trt_target_on_fixtures(rec):
    fused = fusion.fuse_gemm(str(fixture_path(rec)), target="trt")
    nodes = _fc_nodes(fused, "CustomFCPluginDynamic")
    assert len(nodes) == rec["linear_modules"]
    type_id = 1 if rec["dtype"] == "fp16" else 0
    for n in nodes:
        attrs = {a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}
        assert attrs["type_id"] == type_id and list(attrs["W"].dims)[1] == attrs["out_dims"]
    _verify(rec, fused)


@pytest.mark.parametrize("rec", TARGET_RECORDS, ids=_ids(TARGET_RECORDS))
def test_onnx_target_on_fixtures(rec):
    result = fusion.run(str(fixture_path(rec)), ["gemm"], target="onnx")
    # MatMul + Add becomes Gemm; existing Gemms (GPT-2 Conv1D, 2-D Linear) and bias-free
    # linears (LLaMA, T5) are already standard.
    assert len(result.fusions) == rec["linear_with_bias"] - rec["gemm_nodes"]
    if result.modified:
        assert not result.model.functions
        _verify(rec, result.model)
