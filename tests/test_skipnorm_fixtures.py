"""Skip norms on the real-exporter fixtures: what fuses per family, nothing lost, same outputs.

Every norm still fuses (by the skip rule or, where it does not fit, the plain one): the total
equals the manifest's norm count, decomposed chains and native LayerNormalization nodes alike
(BERT/GPT-2/ViT at opset 17 and under the dynamo exporter, fused by the native rules,
patterns/native.py).  Every residual + norm chain whose operands have one shape fuses as a skip
norm, proven from the graph's structure (patterns/_shapes.py) where the export carries no
shapes: 4 per model (2 layers, 2 each).  What does not:

- the embeddings Add in BERT, GPT-2 and ViT: position embeddings of batch 1 broadcast over the
  batch, which the fused node cannot (refused, reason asserted below), in front of a decomposed
  chain or a native LayerNormalization alike;
- T5 fp16: the residual sum is clamped (Where/Clip against the fp16 range) before the norm: no
  Add feeds it, so the RMSNorm fuses alone;

The diffusers UNet2DConditionModel (unet_cond; 4 transformer blocks, 2 residual + norm sites
each) fuses all 8 in every export.  In the legacy ones the 4 after a cross-attention are proven
through a broadcast: the attention's batch is that of the latents' batch x heads and the text
states' batch x heads, two graph inputs whose named dims onnxruntime does not tie; with 2 heads
neither product can be 1, so they are equal wherever the model runs (``_shapes.never_one``).

(The no-op upcast Cast of the sum that HF LLaMA/T5 fp32 exports feed the next residual is
exported as the sum.)
"""

from __future__ import annotations

import onnx
import pytest

import fusion

from .builders import assert_fixture_outputs_match
from .fixtures.catalog import fixture_path, load_manifest

FAMILIES = ("bert", "gpt2", "vit", "llama", "t5", "unet_cond")
RECORDS = [r for r in load_manifest() if r["family"] in FAMILIES]



SKIP_RULES = ("skiplayernorm", "skiprmsnorm", "native_skiplayernorm", "native_skiprmsnorm")


def expected_skips(record: dict) -> int:
    """Skip-norm fusions in a fixture (see the module doc)."""
    if record["family"] == "t5" and record["dtype"] == "fp16":
        return 0
    if record["family"] == "unet_cond":
        return 8
    return 4


def expected_native_skips(record: dict) -> int:
    """Of those, the ones in front of a native norm node: every norm of the model is one."""
    native = record["native_layernorm_nodes"] + record["native_rmsnorm_nodes"]
    return expected_skips(record) if native else 0


@pytest.mark.parametrize("record", RECORDS, ids=lambda r: r["file"].removesuffix(".onnx"))
def test_skip_norms_on_real_exports(record):
    path = fixture_path(record["file"])
    result = fusion.run(str(path), ["skipnorm", "layernorm", "rmsnorm"])
    c = result.counts()
    skips = sum(c.get(r, 0) for r in SKIP_RULES)
    native = record["native_layernorm_nodes"] + record["native_rmsnorm_nodes"]
    norms = record["expected_layernorm_fusions"] + record["expected_rmsnorm_fusions"] + native
    assert sum(c.values()) == norms, c
    assert skips == expected_skips(record), (c, [m.reason for m in result.near_misses])
    assert c.get("native_skiplayernorm", 0) + c.get("native_skiprmsnorm", 0) == expected_native_skips(record), c
    if not skips:
        return
    if record["family"] in ("bert", "gpt2", "vit"):
        # The embeddings Add: position embeddings of batch 1 broadcast over the batch.
        misses = fusion.inspect(str(path), ["skipnorm"]).near_misses
        assert len(misses) == 1 and "cannot tell they agree on axis -3" in misses[0].reason, [m.reason for m in misses]
    if record["family"] == "unet_cond":
        misses = fusion.inspect(str(path), ["skipnorm"]).near_misses
        assert not misses, [m.reason for m in misses]
    assert_fixture_outputs_match(record, onnx.load(str(path)), result.model)
