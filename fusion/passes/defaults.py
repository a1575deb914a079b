"""Which passes a target runs when the caller names none: chosen by measurement.

A pass is on by default unless ``OFF_BY_DEFAULT`` lists it for the target, with the
measurement that says why.  Naming the pass opts in (``passes=[..., "gemm"]``,
``fusion.fuse_gemm(..., target="trt")``, ``--passes layernorm,rmsnorm,gemm``); left out by
default, each subgraph it would have fused is reported as a near-miss quoting the reason.

Measured on an H100 with TensorRT 8.5.3, fp32, batch 8, median of back-to-back enqueues on
device buffers, models with random weights exported by torch's TorchScript exporter at
opset 13 (../shared/trt/README.md, 2026-11-23; bench/trt_engines.py regenerates them):

=========  =========  ======================  ===============================
model      unfused    trt target: LayerNorm   trt target: LayerNorm + FC
=========  =========  ======================  ===============================
BERT-base  9.83 ms    8.16 ms (1.20x faster)  13.0 ms (0.76x: slower)
ViT-base   8.83 ms    10.16 ms (0.87x)        19.85 ms (0.44x)
=========  =========  ======================  ===============================

Re-measured with bench/trt_engines.py on its own BERT-base export (bench/results/trt_engines.json):
unfused 5.37 ms, LayerNorm only 0.88x, LayerNorm + FC 0.43x.

``fusion.tune`` / ``fuse --tune`` decides per model instead, by building and timing engines.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..rewrite.editor import Reject
from ..rewrite.rules import Rule

# (target, pass) -> why it is off unless named.  One line per decision: change it here.
OFF_BY_DEFAULT: dict[tuple[str, str], str] = {
    ("trt", "gemm"): "TensorRT's CustomFCPluginDynamic made whole engines slower than TensorRT's own MatMul + bias "
                     "(H100, TensorRT 8.5.3, fp32, batch 8: BERT-base 0.76x, ViT-base 0.44x)",  # fmt: skip
    ("trt", "layernorm"): "TensorRT's LayerNorm plugin made whole engines slower than TensorRT's own handling of the "
                          "decomposed chain (H100, TensorRT 8.5.3, fp32, batch 8: BERT-base 0.88x in "
                          "bench/results/trt_engines.json, ViT-base 0.87x)",  # fmt: skip
    ("trt", "groupnorm"): "TensorRT's GroupNormalizationPlugin is unmeasured against TensorRT's own handling of the "
                          "decomposed chain, and the other TensorRT plugins made engines slower; off until measured",  # fmt: skip
    ("plugin", "groupnorm"): "our FusedGroupNorm kernel has not run on a GPU yet (tests/gpu/test_groupnorm_kernel.py "
                             "waits for one) and no engine with it is measured; off until both are",  # fmt: skip
    ("trt", "skipnorm"): "TensorRT's CustomSkipLayerNormPluginDynamic is not measured yet, and the trt target's other "
                         "TensorRT plugins made whole engines slower (see layernorm)",  # fmt: skip
    # Issue 12: the skip-norm kernels have not run on a GPU yet (tests/gpu/test_skipnorm_kernels.py)
    # and no engine is measured; until then a norm after a residual fuses as the plain norm.
    ("plugin", "skipnorm"): "the skip-norm plugins are not yet tested on a GPU nor measured in engines (issue 12)",
    ("onnx", "skipnorm"): "Add + LayerNormalization is what the layernorm pass already gives, less the Add; not yet "
                          "measured (issue 12)",  # fmt: skip
}


# Of those, the ones off because their kernels have not run on a GPU yet, not for speed.  Tuning
# measures speed only, so it does not try them either unless they are named.
UNVERIFIED: frozenset[tuple[str, str]] = frozenset({("plugin", "groupnorm"), ("plugin", "skipnorm")})


def off_reason(target: str, pass_name: str) -> str | None:
    return OFF_BY_DEFAULT.get((target, pass_name))


def default_passes(target: str, all_passes: Iterable[str]) -> list[str]:
    return [p for p in all_passes if (target, p) not in OFF_BY_DEFAULT]


class OffByDefault(Rule):
    """A rule the target leaves out by default: it still matches and checks, so each subgraph it
    would fuse becomes a near-miss that says why and how to opt in."""

    def __init__(self, inner: Rule, reason: str):
        self.inner = inner
        self.reason = reason
        for attr in ("name", "pass_name", "pattern", "min_progress", "signature", "anchors", "doc", "variants",
                     "defers_misses"):
            setattr(self, attr, getattr(inner, attr))

    def check(self, m: Any, ctx: Any) -> Any:
        self.inner.check(m, ctx)  # a subgraph that would not fuse anyway says its own reason
        raise Reject(f"off by default for target {ctx.target}: {self.reason}; name the pass to fuse it "
                     f"(passes=[..., {self.pass_name!r}] / --passes ...,{self.pass_name})")  # fmt: skip

    def exported(self, m: Any) -> frozenset[int]:
        return self.inner.exported(m)

    def rewrite(self, desc: Any, em: Any, ctx: Any) -> None:  # pragma: no cover - check always rejects
        raise Reject(self.reason)


def rules_for(pass_names: Sequence[str] | None, target: str) -> list[Rule]:
    """The rules to run: those of the named passes, or (none named) the target's defaults, with
    the passes it leaves out kept as reporters of what they would have fused."""
    from .driver import rules_for as all_rules

    rules = all_rules(pass_names)
    if pass_names is not None:
        return rules
    return [OffByDefault(r, why) if (why := off_reason(target, r.pass_name)) else r for r in rules]
