"""LayerNorm: (x - mean(x)) / sqrt(var(x) + eps) * γ + β, in the forms exporters emit.

Covered: Pow(d, 2) or Mul(d, d); Div(d, std), Mul(d, Reciprocal(std)), Mul(d, Div(1, std)),
Mul(d, Pow(var + eps, -0.5)); float Casts anywhere in the chain (fp16 models that upcast to
fp32/fp64 inside it); ReduceMean axes as attribute or input, negative or positive, one or
several axes, trailing or not (channels-first ConvNeXt style); γ and/or β absent.

A second rule covers TensorFlow's batch-norm style rewrite (tf2onnx/keras2onnx):
x * (γ / sqrt(var + eps)) + (β - mean * (γ / sqrt(var + eps))).
"""

from __future__ import annotations

from fusion.match.pattern import Const, Op, Pattern, Var
from fusion.rewrite.rules import Rule

from ._norm import analyze, cast, emit, kept_mean, plus_eps, reduce_mean


def build(x: Pattern) -> tuple[Pattern, Pattern, Pattern]:
    """The LayerNorm pattern over input ``x`` (a Var, or the residual Add of a skip norm), with
    the mean and square it reads (the TensorFlow form reuses them)."""
    mean = reduce_mean(cast(x), "mean")
    centered = Op("Sub", cast(x), cast(mean), name="center")
    # The variance may center x again with a mean of its own (older PyTorch, torch.var).
    var_mean = reduce_mean(cast(x), "var_mean")
    var_centered = Op("Sub", cast(x), cast(var_mean), name="var_center")
    square = Op("Pow", cast(var_centered), Const(value=2.0), name="square") | Op(
        "Mul", cast(var_centered), cast(var_centered), name="square"
    )
    variance = kept_mean(cast(square), "variance")
    var_eps = plus_eps(variance)
    std = Op("Sqrt", var_eps, name="sqrt")
    normalized = (
        Op("Div", cast(centered), cast(std), name="normalize")
        | Op("Mul", cast(centered), cast(Op("Reciprocal", std, name="inverse")), name="normalize")
        | Op("Mul", cast(centered), cast(Op("Div", Const(value=1.0), std, name="inverse")), name="normalize")
        | Op("Mul", cast(centered), cast(Op("Pow", var_eps, Const(value=-0.5), name="inverse")), name="normalize")
    )
    scaled = Op("Mul", cast(normalized), cast(Const("gamma")), name="scale")
    affine = (
        Op("Add", cast(scaled), cast(Const("beta")), name="shift")
        | scaled
        | Op("Add", cast(normalized), cast(Const("beta")), name="shift")
        | normalized
    )
    return cast(affine), mean, square


x = Var("x")
PATTERN, mean, square = build(x)


class LayerNormRule(Rule):
    name = "layernorm"
    pass_name = "layernorm"
    pattern = PATTERN
    min_progress = 3
    signature = frozenset({"ReduceMean"})
    doc = "ReduceMean → Sub → Pow/Mul → ReduceMean → Add(eps) → Sqrt → Div (→ Mul γ → Add β)"
    variants = (
        (
            "mean: ReduceMean with axes as attribute (opset < 18) or input (opset ≥ 18); one or several axes, "
            "negative or positive, trailing or not (channels-first ConvNeXt)"
        ),
        (
            "variance: ReduceMean of the square of d = x − mean, reusing the mean or computing its own (torch.var); "
            "keepdims=0 put back by Reshape (+ Expand) or Unsqueeze (dynamo's torch.var)"
        ),
        "square: Pow(d, 2) or Mul(d, d)",
        "epsilon: Add(variance, eps), or none (eps = 0)",
        (
            "normalize: Div(d, Sqrt(v)), Mul(d, Reciprocal(Sqrt(v))), Mul(d, Div(1, Sqrt(v))) or Mul(d, Pow(v, -0.5)), "
            "v = variance + eps"
        ),
        "affine: Mul γ then Add β, only one of them, or neither; either operand order",
        "casts: float-to-float Cast anywhere in the chain (fp16 models that compute in fp32)",
    )

    def check(self, m, ctx):
        return analyze(m, ctx, "layer", ("mean", "var_mean", "variance"))

    def rewrite(self, desc, em, ctx):
        emit(desc, em, ctx)


RULE = LayerNormRule()

# TensorFlow: the scale γ·rsqrt(var + eps) multiplies x and the mean separately.
var_eps = Op("Add", cast(reduce_mean(cast(square), "variance")), cast(Const("eps")), name="add_eps")
std = Op("Sqrt", var_eps, name="sqrt")
inv_std = Op("Reciprocal", std, name="inverse") | Op("Pow", var_eps, Const(value=-0.5), name="inverse")
tf_scale = Op("Mul", cast(inv_std), cast(Const("gamma")), name="scale") | inv_std
x_scaled = Op("Mul", cast(x), cast(tf_scale), name="x_scaled")
mean_scaled = Op("Mul", cast(mean), cast(tf_scale), name="mean_scaled")
TF_PATTERN = cast(
    Op("Add", x_scaled, Op("Sub", cast(Const("beta")), mean_scaled, name="offset"), name="shift")
    | Op("Add", x_scaled, Op("Neg", mean_scaled, name="offset"), name="shift")
    | Op("Sub", x_scaled, mean_scaled, name="shift")
)


class LayerNormTFRule(LayerNormRule):
    pattern = TF_PATTERN
    doc = "TensorFlow form: x·(γ·rsqrt(var+eps)) + (β − mean·γ·rsqrt(var+eps))"
    variants = (
        "form: x·s + (β − mean·s) with s = γ·rsqrt(var + eps) (tf2onnx / keras2onnx)",
        "rsqrt: Reciprocal(Sqrt(var + eps)) or Pow(var + eps, -0.5)",
        "without β: x·s − mean·s or x·s + Neg(mean·s); without γ: s = rsqrt(var + eps)",
        "variance: ReduceMean of Pow(d, 2) or Mul(d, d), d = x − mean; Add(eps) present",
        "casts: float-to-float Cast anywhere in the chain",
    )


TF_RULE = LayerNormTFRule()
