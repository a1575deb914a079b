"""LayerNorm: (x - mean(x)) / sqrt(var(x) + eps) * γ + β, in the forms exporters emit.

Covered: Pow(d, 2) or Mul(d, d); Div(d, std), Mul(d, Reciprocal(std)), Mul(d, Div(1, std)),
Mul(d, Pow(var + eps, -0.5)); float Casts anywhere in the chain (fp16 models that upcast to
fp32/fp64 inside it); ReduceMean axes as attribute or input, negative or positive, one or
several axes, trailing or not (channels-first ConvNeXt style); γ and/or β absent.

The arithmetic other exporters write (sums ÷ N, one-pass variance, Pow roots, Neg, restores,
GlobalAveragePool) comes from the combinators of patterns/_algebra.py.

A second rule covers TensorFlow's batch-norm style rewrite (tf2onnx/keras2onnx):
x * (γ / sqrt(var + eps)) + (β - mean * (γ / sqrt(var + eps))).
"""

from __future__ import annotations

from types import SimpleNamespace

from fusion.match.pattern import Const, Op, Pattern, Var
from fusion.rewrite.rules import Rule

from . import _algebra as alg
from ._norm import analyze, cast, emit, plus_eps


def build(x: Pattern) -> SimpleNamespace:
    """The LayerNorm pattern over input ``x`` (a Var, or the residual Add of a skip norm):
    ``.pattern``, with the mean and variance it reads (the TensorFlow form reuses them)."""
    # The mean as reduced (keepdims as written), then as broadcast against x.
    mean_reduced = alg.reduced_mean(cast(x), "mean")
    mean = alg.restored(mean_reduced, "mean")
    centered = alg.centered(cast(x), cast(mean), "center")
    # The variance may center x again with a mean of its own (older PyTorch, torch.var).
    var_mean = alg.restored(alg.reduced_mean(cast(x), "var_mean"), "var_mean")
    var_centered = alg.centered(cast(x), cast(var_mean), "var_center")
    square = alg.square(cast(var_centered), "square", cast(var_centered))
    # jnp.var under jax2onnx: Where(N − ddof > 0, ReduceSumSquare(d) ÷ (N − ddof), NaN).
    sum_squares = alg.sum_of_squares_mean(cast(var_centered), "variance")
    variance = alg.restored(
        # One pass (Flax's default): E[x²] − E[x]²; or two, E[(x − E[x])²].
        alg.one_pass_variance(alg.reduced_mean(cast(alg.square(cast(x), "x_square", cast(x))), "variance"), mean_reduced, cast)
        | alg.nan_guarded(sum_squares, "variance")
        | sum_squares
        | alg.reduced_mean(cast(square), "variance"),
        "variance",
        guard=False,
    )
    var_eps = plus_eps(variance)
    std = alg.sqrt(var_eps, "sqrt")
    inverse = alg.rsqrt(var_eps, std, "inverse")
    normalized = Op("Div", cast(centered), cast(std), name="normalize") | Op(
        "Mul", cast(centered), cast(inverse), name="normalize"
    )
    scaled = Op("Mul", cast(normalized), cast(Const("gamma")), name="scale") | Op(
        # γ folded into the inverse first (Flax, Keras): (x − mean)·(rsqrt(v)·γ)
        "Mul", cast(centered), cast(Op("Mul", cast(inverse), cast(Const("gamma")), name="scale")), name="normalize"
    )
    affine = (
        Op("Add", cast(scaled), cast(Const("beta")), name="shift")
        | scaled
        | Op("Add", cast(normalized), cast(Const("beta")), name="shift")
        | normalized
    )
    return SimpleNamespace(pattern=cast(affine), mean=mean, variance=variance)


x = Var("x")
_parts = build(x)
PATTERN = _parts.pattern
mean, variance = _parts.mean, _parts.variance


class LayerNormRule(Rule):
    name = "layernorm"
    pass_name = "layernorm"
    pattern = PATTERN
    min_progress = 3
    signature = alg.REDUCTIONS
    anchors = (alg.ROOTS,)
    doc = "ReduceMean → Sub → Pow/Mul → ReduceMean → Add(eps) → Sqrt → Div (→ Mul γ → Add β)"
    variants = (
        (
            "mean: ReduceMean with axes as attribute (opset < 18) or input (opset ≥ 18); one or several axes, "
            "negative or positive, trailing or not (channels-first ConvNeXt); ReduceSum ÷ N or × 1/N, N constant or "
            "counted from Shape/Gather/ReduceProd or Size and checked against the reduced dims (JAX, torch dynamo); "
            "GlobalAveragePool (tf2onnx)"
        ),
        (
            "variance: ReduceMean of the square of d = x − mean, reusing the mean or computing its own (torch.var); "
            "or one pass, E[x²] − E[x]², bare or clamped by Max(·, 0) / Relu (Flax, jax2onnx; the fused node is "
            "two-pass, the fusion's note says so); keepdims=0 put back by Reshape (+ Expand) or Unsqueeze, before "
            "or after ÷ N (dynamo's torch.var, var_mean)"
        ),
        "center: Sub(x, mean), Add(x, Neg(mean)), or jax2onnx's Where(row constant, 0, x − mean)",
        "square: Pow(d, 2) or Mul(d, d)",
        "epsilon: Add(variance, eps), eps a constant or CastLike(eps, x) (jax2onnx), or none (eps = 0)",
        (
            "normalize: Div(d, √v), Mul(d, Reciprocal(√v)), Mul(d, Div(1, √v)) or Mul(d, Pow(v, -0.5)), "
            "v = variance + eps, √v = Sqrt(v) or Pow(v, 0.5)"
        ),
        "affine: Mul γ then Add β, only one of them, or neither; either operand order; γ folded into the inverse "
        "first, d·(rsqrt(v)·γ) (Flax, Keras)",
        "casts: float-to-float Cast anywhere in the chain (fp16 models that compute in fp32)",
    )

    def check(self, m, ctx):
        return analyze(m, ctx, "layer", LN_REDUCTIONS)

    def rewrite(self, desc, em, ctx):
        emit(desc, em, ctx)


LN_REDUCTIONS = ("mean", "var_mean", "variance", "center_row_min", "center_row_max", "var_center_row_min", "var_center_row_max")
RULE = LayerNormRule()

# TensorFlow: the scale γ·rsqrt(var + eps) multiplies x and the mean separately.
var_eps = Op("Add", cast(variance), cast(Const("eps")), name="add_eps")
std = alg.sqrt(var_eps, "sqrt")
inv_std = alg.rsqrt(var_eps, std, "inverse")
tf_scale = Op("Mul", cast(inv_std), cast(Const("gamma")), name="scale") | inv_std
x_scaled = Op("Mul", cast(x), cast(tf_scale), name="x_scaled")
mean_scaled = Op("Mul", cast(mean), cast(tf_scale), name="mean_scaled")
# Keras 3 writes the offset as (−mean)·s + β; −(mean·s) + β is the same.
neg_mean_scaled = alg.negated_product(cast(mean), cast(tf_scale), "offset")
# One Add over the offset's spellings (not one Add per spelling: each would be tried at every Add).
offset = (
    Op("Sub", cast(Const("beta")), mean_scaled, name="offset")
    | Op("Neg", mean_scaled, name="offset")
    | Op("Add", neg_mean_scaled, cast(Const("beta")), name="offset_beta")
    | neg_mean_scaled
)
TF_PATTERN = cast(Op("Add", x_scaled, offset, name="shift") | Op("Sub", x_scaled, mean_scaled, name="shift"))


class LayerNormTFRule(LayerNormRule):
    pattern = TF_PATTERN
    doc = "TensorFlow form: x·(γ·rsqrt(var+eps)) + (β − mean·γ·rsqrt(var+eps))"
    variants = (
        "form: x·s + (β − mean·s) with s = γ·rsqrt(var + eps) (tf2onnx / keras2onnx)",
        "rsqrt: Reciprocal(√v), Div(1, √v) or Pow(v, -0.5), v = var + eps",
        "offset: β − mean·s or (−mean)·s + β (Keras 3); without β: x·s − mean·s, x·s + Neg(mean·s) or "
        "x·s + (−mean)·s; without γ: s = rsqrt(var + eps)",
        "mean: any spelling of the main rule's (GlobalAveragePool from tf2onnx)",
        "variance: ReduceMean of Pow(d, 2) or Mul(d, d), d = x − mean; Add(eps) present",
        "casts: float-to-float Cast anywhere in the chain",
    )


TF_RULE = LayerNormTFRule()
