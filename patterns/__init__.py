"""The fusion rules, in priority order (a rule earlier in the list wins at a shared root).

Shipped inside the package as ``fusion.patterns``.
"""

from __future__ import annotations

from fusion.rewrite.rules import Rule

from . import gemm, groupnorm, layernorm, rmsnorm

RULES: list[Rule] = [layernorm.RULE, layernorm.TF_RULE, rmsnorm.RULE, gemm.RULE, groupnorm.RULE]
