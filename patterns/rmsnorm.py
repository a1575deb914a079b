"""RMSNorm: x / sqrt(mean(x²) + eps) * γ (T5LayerNorm, LlamaRMSNorm and hand-written forms).

Covered: Pow(x, 2) or Mul(x, x); Div(x, rms), Mul(x, Reciprocal(rms)) (torch.rsqrt via the
dynamo exporter), Mul(x, Div(1, rms)) (torch.rsqrt via the TorchScript exporter),
Mul(x, Pow(ms + eps, -0.5)); float Casts anywhere (LLaMA/T5 upcast to fp32 inside); γ absent.
"""

from __future__ import annotations

from fusion.ir.graph import producer
from fusion.match.pattern import Const, Op, Pattern, Var
from fusion.rewrite.rules import Reject, Rule

from ._norm import analyze, cast, emit, kept_mean, plus_eps


def build(x: Pattern) -> Pattern:
    """The RMSNorm pattern over input ``x`` (a Var, or the residual Add of a skip norm)."""
    square = Op("Pow", cast(x), Const(value=2.0), name="square") | Op("Mul", cast(x), cast(x), name="square")
    mean_square = kept_mean(cast(square), "mean_square")
    ms_eps = plus_eps(mean_square)
    rms = Op("Sqrt", ms_eps, name="sqrt")
    normalized = (
        Op("Div", cast(x), cast(rms), name="normalize")
        | Op("Mul", cast(x), cast(Op("Reciprocal", rms, name="inverse")), name="normalize")
        | Op("Mul", cast(x), cast(Op("Div", Const(value=1.0), rms, name="inverse")), name="normalize")
        | Op("Mul", cast(x), cast(Op("Pow", ms_eps, Const(value=-0.5), name="inverse")), name="normalize")
    )
    return cast(Op("Mul", cast(normalized), cast(Const("gamma")), name="scale") | normalized)


PATTERN = build(Var("x"))


class RMSNormRule(Rule):
    name = "rmsnorm"
    pass_name = "rmsnorm"
    pattern = PATTERN
    min_progress = 4
    signature = frozenset({"ReduceMean"})
    doc = "Pow/Mul → ReduceMean → Add(eps) → Sqrt → Div or Reciprocal/Pow(-0.5) → Mul (→ Mul γ)"
    variants = (
        "square: Pow(x, 2) or Mul(x, x)",
        "mean: ReduceMean with axes as attribute or input; keepdims=0 put back by Reshape (+ Expand) or Unsqueeze",
        "epsilon: Add(ms, eps), or none (eps = 0)",
        (
            "normalize: Div(x, Sqrt(v)), Mul(x, Reciprocal(Sqrt(v))) (torch.rsqrt, dynamo), Mul(x, Div(1, Sqrt(v))) "
            "(torch.rsqrt, TorchScript) or Mul(x, Pow(v, -0.5)), v = ms + eps"
        ),
        "scale: Mul γ in either operand order (T5 and LLaMA put γ first), or none",
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
    if node is None or node.op != "Sub":
        return False
    mean = producer(node.inputs[1])
    while mean is not None and mean.op == "Cast":
        mean = producer(mean.inputs[0])
    return mean is not None and mean.op == "ReduceMean"


RULE = RMSNormRule()
