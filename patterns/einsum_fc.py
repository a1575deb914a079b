"""A fully-connected layer written as Einsum (tf2onnx's Keras EinsumDense at opset 13, issue 13).

Keras MultiHeadAttention's projections are EinsumDense layers: ``abc,cde->abde`` (x [B, S, C]
times a kernel [C, heads, head_dim]) for query / key / value, ``abcd,cde->abe`` (x [B, S,
heads, head_dim] times [heads, head_dim, E]) for the output.  tf2onnx writes some of them as
``Gemm(x, Reshape(W))`` (the gemm rule's weight chain) and leaves others an ``Einsum`` node.

Covered: ``Einsum(x, W)`` or ``Einsum(W, x)`` with W a constant, whose equation is exactly a
dense layer: x's subscripts are leading axes L then contracted axes K (all of them at its end),
W's are K and kept axes R in any order, the output is L then R; then optionally an Add of a
constant bias that varies only along R.  That is ``x.reshape(L, C) @ W'.reshape(C, N)``
reshaped to [L, R], C = prod(K), N = prod(R), W' = W with its axes put in K, R order:

* plugin: FusedFC on x (Reshape'd to [L, C] first where K has several axes), its weight W
  itself where it is a matrix ([C, N] or [N, C]: transpose_weight), else the folded W' [C, N]
  (a new initializer), then a Reshape to [L, R] where R has several axes;
* trt / onnx: the gemm rule's emitters on the same input and weight (onnx: Gemm, C optional).

Both Reshapes copy L with 0 entries and write C or R out: exact because the equation fixes
the ranks (no ellipsis) and C, N > 0.  The product accumulates as the MatMul path's does.

Not fused, with the reason: an equation of another form (ellipsis, a subscript repeated in one
operand: a diagonal or trace, an axis summed away, a batch axis in W, contraction over axes
not at x's end, output axes out of order, no contracted axis), not two operands, a weight that
is computed or may be fed, a zero-size weight, a bias that varies along L or that a caller
may feed and that would need broadcasting.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
from onnx import TensorProto

from fusion.ir.graph import FLOAT_TYPES
from fusion.ir.view import Node, Tensor
from fusion.match.pattern import Const, Match, Op, Var
from fusion.rewrite.editor import Emitter, Reject
from fusion.rewrite.rules import Context, Rule

from . import gemm
from ._constants import check_overridable
from ._weight_chain import Chain, Step

_SUBSCRIPTS = re.compile(r"[A-Za-z]*")

einsum = Op("Einsum", Var("a"), Var("b"), name="einsum")
# The bias is a Const in the pattern, as in the gemm rule: Add(Einsum, residual) is no near-miss.
PATTERN = Op("Add", einsum, Const("bias"), name="bias_add") | einsum


@dataclass
class Equation:
    """A dense layer's equation: x = lead + contracted, w = some order of contracted + kept."""

    lead: str
    contracted: str  # in x's order
    kept: str  # in the output's order
    w_perm: tuple[int, ...]  # W's axes in contracted + kept order


@dataclass
class _Kernel(Chain):
    """W read by an Einsum as the [C, N] matrix of an FC: a transpose and a reshape, folded."""

    node: Node | None = None
    equation: str = ""

    def describe(self) -> str:
        perm = [s.perm for s in self.steps if s.perm is not None]
        moved = f", axes put in order {list(perm[0])}" if perm else ""
        return f"the {list(self.source_shape)} kernel of Einsum {self.node.name!r} ({self.equation}){moved}"


@dataclass
class EinsumDesc:
    fc: gemm.FCDesc
    equation: Equation
    in_shape: list[int] | None  # x's Reshape target (several contracted axes), 0s copy L
    out_shape: list[int] | None  # the FC output's Reshape target (several kept axes)

    @property
    def notes(self) -> list[str]:
        return self.fc.notes


def parse(equation: str, what: str) -> tuple[str, str, str]:
    """The (x, w, out) subscripts of a two-operand equation written with letters only."""
    eq = equation.replace(" ", "")
    if "." in eq:
        raise Reject(f"{what}: equation {equation!r} has an ellipsis; only written-out axes are read as an FC")
    lhs, arrow, out = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != 2:
        raise Reject(f"{what}: equation {equation!r} has {len(terms)} operands, not 2")
    if not arrow:  # implicit output: the letters seen once, in alphabetical order
        out = "".join(sorted(c for c in set(lhs) - {","} if lhs.count(c) == 1))
    for term in (*terms, out):
        if not _SUBSCRIPTS.fullmatch(term):
            raise Reject(f"{what}: equation {equation!r} is not written with letters only")
        repeated = sorted({c for c in term if term.count(c) > 1})
        if repeated:
            raise Reject(f"{what}: equation {equation!r} repeats {repeated[0]!r} in {term!r} (a diagonal or trace), not an FC")
    return terms[0], terms[1], out


def dense_form(xs: str, ws: str, out: str, what: str) -> Equation:
    """How ``xs, ws -> out`` is x @ W, or Reject with what makes it something else."""
    for c in xs:
        if c not in ws and c not in out:
            raise Reject(f"{what}: x's axis {c!r} is summed away, not contracted with the weight")
    for c in ws:
        if c in xs and c in out:
            raise Reject(f"{what}: weight axis {c!r} is also an axis of x and of the output (a batch axis), not an FC")
        if c not in xs and c not in out:
            raise Reject(f"{what}: weight axis {c!r} is summed away, not contracted with x")
    contracted = "".join(c for c in xs if c in ws)
    if not contracted:
        raise Reject(f"{what}: no axis is contracted (an outer product), not an FC")
    lead = xs[: len(xs) - len(contracted)]
    if xs[len(lead):] != contracted:
        raise Reject(f"{what}: it contracts {contracted!r} of x {xs!r}, not x's last axes")
    if not lead:
        raise Reject(f"{what}: x {xs!r} has no axis left besides the contracted ones; an FC needs [..., K] of rank >= 2")
    kept = "".join(c for c in out if c in ws)
    if out != lead + kept:
        raise Reject(f"{what}: output {out!r} is not x's leading axes {lead!r} then the weight's kept axes {kept!r}")
    return Equation(lead, contracted, kept, tuple(ws.index(c) for c in contracted + kept))


def analyze(m: Match, ctx: Context) -> EinsumDesc:
    g = ctx.graph
    node = m["einsum"]
    what = f"Einsum {node.name!r}"
    check_overridable(g, m, ("a", "b", "bias"))
    equation = node.attrs.get("equation", "")
    equation = equation.decode() if isinstance(equation, bytes) else str(equation)
    terms = parse(equation, what)
    a, b = m["a"], m["b"]
    const_a, const_b = (g.is_constant(t) or g.overridable(t) for t in (a, b))
    if const_a and const_b:
        raise Reject(f"{what}: both operands are constants (a constant-folding candidate, not an FC)")
    if not const_a and not const_b:
        raise Reject(
            f"{what}: both operands are computed ({a.name!r}, {b.name!r}): an activation x activation "
            "product such as attention scores is not a fully-connected layer"
        )
    (xt, xs), (wt, ws) = ((b, terms[1]), (a, terms[0])) if const_a else ((a, terms[0]), (b, terms[1]))
    form = dense_form(xs, ws, terms[2], what)
    if g.overridable(wt):  # the kernel is folded to [C, N]: its value must be the model's
        raise Reject(f"{what}: weight: {g.not_constant_reason(wt)}")

    wshape = g.constant_shape(wt)
    if len(wshape) != len(ws):
        raise Reject(f"{what}: weight {wt.name!r} has rank {len(wshape)}, the equation {len(ws)}")
    dims = dict(zip(ws, wshape))
    c, n = (int(np.prod([dims[s] for s in part], dtype=np.int64)) for part in (form.contracted, form.kept))
    if c == 0 or n == 0:
        raise Reject(f"{what}: weight {wt.name!r} has shape {list(wshape)}, a zero-size FC")
    xshape = g.shape(xt, infer=False)
    if xshape is not None:
        if len(xshape) != len(xs):
            raise Reject(f"{what}: input {xt.name!r} has rank {len(xshape)}, the equation {len(xs)}")
        for s, d in zip(xs, xshape):
            if s in dims and isinstance(d, int) and d != dims[s]:
                raise Reject(f"{what}: input {xt.name!r} has {d} along {s!r}, weight {wt.name!r} {dims[s]}")

    t = g.elem_type(wt)
    t_x = g.elem_type(xt, infer=False)
    if t not in FLOAT_TYPES:
        raise Reject(f"{what}: element type {TensorProto.DataType.Name(t)} is not a float type")
    if t_x is not None and t_x != t:
        raise Reject(f"{what}: weight type {TensorProto.DataType.Name(t)} differs from the input's {TensorProto.DataType.Name(t_x)}")

    kept_dims = tuple(int(dims[s]) for s in form.kept)
    bias = m.get("bias")
    if bias is not None:
        _check_bias(g, bias, kept_dims, len(terms[2]), f"Add {m['bias_add'].name!r}: operand")

    # A matrix W is the FC's weight as it is ([C, N], or [N, C]: transpose_weight), never copied;
    # any other is folded to [C, N] when rewriting.
    matrix = len(ws) == 2
    transpose_weight = int(matrix and form.w_perm == (1, 0))
    kernel = None
    if not matrix:
        moved = tuple(wshape[p] for p in form.w_perm)
        steps = [] if form.w_perm == tuple(range(len(ws))) else [Step(node, moved, form.w_perm)]
        steps.append(Step(node, (c, n)))
        kernel = _Kernel(wt, wt, tuple(wshape), steps, (c, n), t, node=node, equation=equation)
    lead = len(form.lead)
    fc = gemm.FCDesc(
        x=xt,
        y=m.root.outputs[0],
        w=wt,
        k=c,
        n=n,
        transpose_weight=transpose_weight,
        trans_a=False,
        alpha=1.0,
        bias=bias,
        beta=1.0,
        activation="none",
        kind="einsum",
        reshape=None,
        rank=lead + 1,
        elem_type=t,
        w_chain=kernel,
        w_in_graph=matrix,
        out_dims=kept_dims,
    )
    in_shape = [0] * lead + [c] if len(form.contracted) > 1 else None
    out_shape = [0] * lead + list(kept_dims) if len(form.kept) > 1 else None
    return EinsumDesc(fc, form, in_shape, out_shape)


def _check_bias(g, b: Tensor, kept: tuple[int, ...], out_rank: int, what: str) -> None:
    """A constant that varies only along the kept (trailing) axes, broadcasting to them."""
    shape = list(g.fixed_shape(b) or ())
    if g.fixed_shape(b) is None:
        raise Reject(f"{what}: {g.not_constant_reason(b)}, and its graph input does not pin its shape and type")
    if len(shape) > out_rank:
        raise Reject(f"{what} {b.name!r} has rank {len(shape)}, more than the output's {out_rank}: the output would grow")
    tail = shape[max(0, len(shape) - len(kept)):]
    head = shape[: len(shape) - len(tail)]
    if any(d != 1 for d in head):
        raise Reject(f"{what} {b.name!r} has shape {shape}: it varies along the input's axes, not only the output features")
    if any(d not in (1, k) for d, k in zip(tail, kept[len(kept) - len(tail):])):
        raise Reject(f"{what} {b.name!r} has shape {shape}, which does not broadcast to the output features {list(kept)}")
    size = int(np.prod(tail, dtype=np.int64))
    if g.overridable(b) and size not in (1, int(np.prod(kept, dtype=np.int64))):
        raise Reject(f"{what}: {g.not_constant_reason(b)}, and its shape {shape} would need broadcasting along {list(kept)}")


def emit(desc: EinsumDesc, em: Emitter, ctx: Context) -> None:
    fc = desc.fc
    if desc.in_shape is not None:
        fc.x_name = em.node("Reshape", [fc.x.name, em.const("fc_in_shape", np.array(desc.in_shape, np.int64))])[0]
    gemm.emit(fc, em, ctx)
    if desc.out_shape is None:
        return
    # The FC's last node writes the Einsum's output: it writes [L, N] now, the Reshape [L, R].
    last = next(n for n in reversed(em.nodes) if fc.y.name in n.output)
    rows = em.name("fc_rows")
    last.output[list(last.output).index(fc.y.name)] = rows
    em.node("Reshape", [rows, em.const("fc_out_shape", np.array(desc.out_shape, np.int64))], outputs=[fc.y.name])


class EinsumFCRule(Rule):
    name = "gemm"
    pass_name = "gemm"
    pattern = PATTERN
    min_progress = 1
    signature = frozenset({"Einsum"})
    doc = "Einsum(x, W) that is a dense layer (+ Add bias) → FusedFC, with Reshapes"
    variants = (
        "Einsum: x's trailing axes contracted with a constant W (any axis order), output = x's leading axes "
        "then W's kept axes (Keras EinsumDense: abc,cde->abde and abcd,cde->abe); either operand order",
        "bias: Add of a constant varying only along the kept axes ([heads, head_dim], [head_dim], scalar)",
        "rewrite: W folded to [C, N]; x Reshape'd to [..., C] and the output to [..., *kept] where several axes",
    )

    def check(self, m, ctx):
        return analyze(m, ctx)

    def rewrite(self, desc, em, ctx):
        emit(desc, em, ctx)


RULE = EinsumFCRule()
