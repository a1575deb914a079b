"""RMSNorm: x / sqrt(mean(x²) + eps) * γ (T5LayerNorm, LlamaRMSNorm and hand-written forms).

Covered: Pow(x, 2) or Mul(x, x); Div(x, rms), Mul(x, Reciprocal(rms)) (torch.rsqrt via the
dynamo exporter), Mul(x, Div(1, rms)) (torch.rsqrt via the TorchScript exporter),
Mul(x, Pow(ms + eps, -0.5)); float Casts anywhere (LLaMA/T5 upcast to fp32 inside); γ absent.

The arithmetic other exporters write (sums ÷ N, one-pass variance, Pow roots, Neg, restores,
GlobalAveragePool) comes from the combinators of patterns/_algebra.py.
"""

from __future__ import annotations

from fusion.ir.graph import producer
from fusion.match.pattern import Const, Op, Pattern, Var
from fusion.rewrite.rules import Reject, Rule

from . import _algebra as alg
from ._norm import analyze, cast, emit, plus_eps


def build(x: Pattern) -> Pattern:
    """The RMSNorm pattern over input ``x`` (a Var, or the residual Add of a skip norm)."""
    square = Op("Pow", cast(x), Const(value=2.0), name="square") | Op("Mul", cast(x), cast(x), name="square")
    mean_square = alg.restored(alg.reduced_mean(cast(square), "mean_square"), "mean_square", guard=False)
    ms_eps = plus_eps(mean_square)
    rms = alg.sqrt(ms_eps, "sqrt")
    inverse = alg.rsqrt(ms_eps, rms, "inverse")
    normalized = Op("Div", cast(x), cast(rms), name="normalize") | Op("Mul", cast(x), cast(inverse), name="normalize")
    return cast(
        Op("Mul", cast(normalized), cast(Const("gamma")), name="scale")
        | normalized
        # γ folded into the inverse first (Flax): x·(rsqrt(ms)·γ)
        | Op("Mul", cast(x), cast(Op("Mul", cast(inverse), cast(Const("gamma")), name="scale")), name="normalize")
    )


x = Var("x")
PATTERN = build(x)


class RMSNormRule(Rule):
    name = "rmsnorm"
    pass_name = "rmsnorm"
    pattern = PATTERN
    min_progress = 4
    signature = alg.REDUCTIONS
    anchors = (alg.ROOTS,)
    doc = "Pow/Mul → ReduceMean → Add(eps) → Sqrt → Div or Reciprocal/Pow(-0.5) → Mul (→ Mul γ)"
    variants = (
        "square: Pow(x, 2) or Mul(x, x)",
        "mean: ReduceMean with axes as attribute or input, ReduceSum ÷ N or × 1/N (N checked), GlobalAveragePool; "
        "keepdims=0 put back by Reshape (+ Expand) or Unsqueeze",
        "epsilon: Add(ms, eps), eps a constant or CastLike(eps, x) (jax2onnx), or none (eps = 0)",
        (
            "normalize: Div(x, Sqrt(v)), Mul(x, Reciprocal(Sqrt(v))) (torch.rsqrt, dynamo), Mul(x, Div(1, Sqrt(v))) "
            "(torch.rsqrt, TorchScript) or Mul(x, Pow(v, -0.5)), v = ms + eps; Sqrt(v) also as Pow(v, 0.5)"
        ),
        "scale: Mul γ in either operand order (T5 and LLaMA put γ first), or none; or folded into the inverse, "
        "x·(rsqrt(v)·γ) (Flax)",
        "casts: float-to-float Cast anywhere (LLaMA and T5 upcast to fp32 inside)",
    )

    def check(self, m, ctx):
        if _centered(m["x"]):
            raise Reject(f"{m['x'].name!r} is centered by a ReduceMean: a LayerNorm that did not fuse, not an RMSNorm")
        return analyze(m, ctx, "rms", ("mean_square",))

    def rewrite(self, desc, em, ctx):
        emit(desc, em, ctx)


def _centered(x) -> bool:
    """x = Sub(a, ReduceMean(a)), possibly behind Casts: the start of a LayerNorm."""
    node = producer(x)
    while node is not None and node.op == "Cast":
        node = producer(node.inputs[0])
    if node is not None and node.op == "Where" and len(node.inputs) == 3:  # jax2onnx's exact centering
        node = producer(node.inputs[2])
    if node is not None and node.op == "Sub":
        return alg.is_mean(producer(node.inputs[1]))
    if node is not None and node.op == "Add":  # x + Neg(mean)
        negs = [p for p in map(producer, node.inputs) if p is not None and p.op == "Neg"]
        return any(alg.is_mean(producer(n.inputs[0])) for n in negs)
    return False


RULE = RMSNormRule()
