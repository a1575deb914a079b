"""The fusion rules, in priority order (a rule earlier in the list wins at a shared root).

Shipped inside the package as ``fusion.patterns``.
"""

from __future__ import annotations

from fusion.rewrite.rules import Rule

from . import einsum_fc, gemm, groupnorm, layernorm, native, rmsnorm, skipnorm

# The skip norms come first: at a norm's root they take the residual Add in too; where they
# do not fit, the plain norm rules, next, fuse the norm alone.  The native rules (an exporter's
# own LayerNormalization / RMSNormalization) root at those nodes, the others at a chain's end.
RULES: list[Rule] = [
    skipnorm.LAYER_RULE, skipnorm.RMS_RULE, skipnorm.NATIVE_LAYER_RULE, skipnorm.NATIVE_RMS_RULE, skipnorm.TF_LAYER_RULE,
    layernorm.RULE, layernorm.TF_RULE, rmsnorm.RULE, native.LAYER_RULE, native.RMS_RULE, gemm.RULE, einsum_fc.RULE, groupnorm.RULE,
]
