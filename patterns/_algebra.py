"""Arithmetic identities the norm patterns see through, as pattern combinators.

Exporters write a norm's statistics with whatever arithmetic their framework lowered to:

* a mean as ReduceMean, GlobalAveragePool (tf2onnx), or ReduceSum ÷ N or × (1/N), N a
  constant, folded from constants, or counted from the input's shape (Shape → Gather →
  ReduceProd → Cast, or Size); a mean of squares also as ReduceSumSquare ÷ N (jnp.var);
* the variance in two passes, E[(x − E[x])²], or in one, E[x²] − E[x]², perhaps clamped
  by Max(·, 0) or Relu; or behind jnp.var's Where(N − ddof > 0, ·, NaN);
* √v as Sqrt(v) or Pow(v, 0.5); 1/√v as Reciprocal(√v), Div(1, √v) or Pow(v, −0.5);
* x − m as Sub(x, m), Add(x, Neg(m)) or jax2onnx's exact Where(row constant, 0, x − m);
  −(m·s) as Neg(m·s) or Neg(m)·s;
* a reduced statistic (keepdims=0) put back as Reshape (+ Expand) or Unsqueeze, before or
  after the division by N.

:func:`rank_of` follows a tensor's rank where inference does not give it (GlobalAveragePool's
axes depend on it).

Options are ordered so that what matched before still matches first, and a failure that ties
keeps the message it had: options whose root op types differ can only match different graphs,
so the new ones go first (the last failure of a tie is the one reported); options of one op
type keep the old one first.  Structure is the matcher's business; what
structure cannot say (that N is the number of reduced elements, that a restore puts the reduced
dims back) is checked by :func:`check_means`, which raises Reject with the reason.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import numpy_helper

from fusion.ir.graph import FLOAT_TYPES, producer
from fusion.ir.view import Node, Tensor
from fusion.match.pattern import Alt, Const, Match, Op, Opt, Pattern, Var
from fusion.rewrite.editor import Reject

# The ops a reduced mean is taken with (rules list them as their signature).
REDUCTIONS = frozenset({"ReduceMean", "ReduceSum", "GlobalAveragePool"})
# Every norm divides by a root: Sqrt or Pow(·, ±0.5) is in every match (the rules' anchor).
ROOTS = frozenset({"Sqrt", "Pow"})


def reduced_mean(x: Pattern, name: str) -> Pattern:
    """A mean of ``x`` as its reduction wrote it (keepdims as the node says).

    Captures: ``name`` the reduction node; for a sum, ``name + "_scale"`` the Div/Mul and
    ``name + "_n"`` its other operand (N, or 1/N), checked by :func:`check_means`.
    """
    # torch's dynamo exporter puts the sum back to x's rank before it divides (var_mean).
    total = restored(Op("ReduceSum", x, Opt(Const()), name=name), name + "_sum")
    n = Var(name + "_n")
    return (
        Op("Div", total, n, name=name + "_scale", where=fed_by(total, 0))
        | Op("Mul", total, n, name=name + "_scale", where=fed_by(total))
        # tf2onnx writes a mean over the trailing axes from 2 on as GlobalAveragePool.
        | Op("GlobalAveragePool", x, name=name)
        | Op("ReduceMean", x, Opt(Const()), name=name)
    )


def sum_of_squares_mean(d: Pattern, name: str) -> Pattern:
    """mean(d²) as ReduceSumSquare(d) ÷ N (jnp.var under jax2onnx; N maybe computed from
    constants, N − ddof), perhaps put back before the division.  Captures as reduced_mean."""
    total = restored(Op("ReduceSumSquare", d, Opt(Const()), name=name), name + "_sum")
    return Op("Div", total, Var(name + "_n"), name=name + "_scale", where=fed_by(total, 0))


def nan_guarded(v: Pattern, name: str) -> Pattern:
    """Where(n > 0, v, ·) with n folding to a positive constant: always v (jnp.var's guard
    against ddof ≥ N).  Captures ``name + "_guard"`` (n) and ``name + "_where"``."""
    cond = Op("Greater", Var(name + "_guard"), Const(value=0.0))
    return Op("Where", cond, v, Var(), name=name + "_where")


def restored(p: Pattern, name: str, guard: bool = True) -> Pattern:
    """``p`` (a reduced statistic), or ``p`` put back to the input's rank (capture
    ``name + "_restore"``): Reshape (+ Expand) or Unsqueeze, as torch's dynamo and JAX write.

    ``guard=False`` keeps the restores unguarded, as they were where they existed before (their
    near-miss reasons then stay as they were)."""
    restore = name + "_restore"
    g = fed_by(p, 0) if guard else None
    reshape = Op("Reshape", p, Var(), name=restore + "_reshape", where=g)
    return (
        Op("Expand", reshape, Var(), name=restore, where=fed_by(reshape, 0) if guard else None)
        | Op("Reshape", p, Var(), name=restore, where=g)
        | Op("Unsqueeze", p, Opt(Const()), name=restore, where=g)
        | p
    )


def square(p: Pattern, name: str, q: Pattern | None = None) -> Pattern:
    """p²: Pow(p, 2) or Mul(p, q), ``q`` standing for p again (by default p itself)."""
    return Op("Pow", p, Const(value=2.0), name=name) | Op("Mul", p, p if q is None else q, name=name)


def one_pass_variance(mean_of_square: Pattern, mean: Pattern, wrap) -> Pattern:
    """E[x²] − E[x]², bare or clamped at 0 (Max(·, 0), Relu).  ``mean`` is the very pattern
    the norm centers x with: the variance must be about the same mean."""
    ex2, ex_sq = wrap(mean_of_square), wrap(square(wrap(mean), "variance_mean_sq"))
    diff = Op("Sub", ex2, ex_sq, name="variance_diff", where=_all(fed_by(ex2, 0), fed_by(ex_sq, 1)))
    return (
        Op("Max", diff, Const(value=0.0), name="variance_clamp", where=fed_by(diff))
        | Op("Relu", diff, name="variance_clamp", where=fed_by(diff, 0))
        | diff
    )


def centered(x: Pattern, mean: Pattern, name: str) -> Pattern:
    """x − mean: Sub(x, mean), or Add(x, Neg(mean))."""
    neg = Op("Neg", mean, name=name + "_neg")
    sub = Op("Sub", x, mean, name=name)
    return Op("Add", x, neg, name=name, where=fed_by(neg)) | _stable(x, mean, sub, name) | sub


def _stable(x: Pattern, mean: Pattern, sub: Pattern, name: str) -> Pattern:
    """jax2onnx's exact centering: Where(row constant and mean finite, 0, x − mean).

    The row test is ReduceMin(x) == ReduceMax(x) (over the norm's axes: captures
    ``name + "_row_min"`` / ``"_row_max"``, checked with the other reductions) and
    (mean − mean) == 0."""
    row_min = Op("ReduceMin", x, Opt(Const()), name=name + "_row_min")
    row_max = Op("ReduceMax", x, Opt(Const()), name=name + "_row_max")
    constant_row = Op("Equal", row_min, row_max)
    finite = Op("Equal", Op("Sub", mean, mean), Const(value=0.0))
    cond = Op("And", constant_row, finite, commute=True)
    return Op("Where", cond, Const(value=0.0), sub, name=name + "_stable")


def sqrt(v: Pattern, name: str) -> Pattern:
    """√v: Sqrt(v) or Pow(v, 0.5)."""
    return Op("Pow", v, Const(value=0.5), name=name, where=_root_exponent) | Op("Sqrt", v, name=name)


def rsqrt(v: Pattern, std: Pattern, name: str) -> Pattern:
    """1/√v: Reciprocal(std), Div(1, std) or Pow(v, −0.5), ``std`` being :func:`sqrt` of v."""
    return (
        Op("Reciprocal", std, name=name)
        | Op("Div", Const(value=1.0), std, name=name)
        | Op("Pow", v, Const(value=-0.5), name=name)
    )


def negated_product(a: Pattern, s: Pattern, name: str) -> Pattern:
    """−(a·s): Neg(Mul(a, s)) or Mul(Neg(a), s)."""
    neg = Op("Neg", a, name=name + "_neg")
    return Op("Neg", Op("Mul", a, s, name=name + "_product"), name=name) | Op("Mul", neg, s, name=name, where=fed_by(neg))


# -- guards: a new spelling fails at its root unless its own ops are there -------------------
# A guard is a necessary condition of the option matching, checked before it binds anything:
# it changes no match, only how far a failing one gets, so an option that was never going to
# match (a Mul that multiplies no ReduceSum) does not outrank the failures that say why the
# graph is not a norm.


def fed_by(p: Pattern, index: int | None = None):
    """A ``where`` test: input ``index`` (any input, if None) comes from an op ``p`` can start with."""
    ops = _root_ops(p)
    if ops is None:
        return None
    want = " or ".join(sorted(ops))

    def test(node: Node) -> str | None:
        inputs = node.inputs if index is None else node.inputs[index : index + 1]
        if any((q := producer(t)) is not None and q.op in ops for t in inputs):
            return None
        return f"{'no input' if index is None else f'input {index}'} comes from {want}"

    return test


def _all(*tests):
    tests = [t for t in tests if t is not None]

    def test(node: Node) -> str | None:
        return next((r for r in (t(node) for t in tests) if r), None)

    return test


def _root_ops(p: Pattern) -> frozenset[str] | None:
    """The op types a match of ``p`` can be rooted at; None if it can be any tensor."""
    if isinstance(p, Op):
        return frozenset({p.op_type})
    if isinstance(p, Alt):
        out: set[str] = set()
        for o in p.options:
            r = _root_ops(o)
            if r is None:
                return None
            out |= r
        return frozenset(out)
    return None


def _root_exponent(node: Node) -> str | None:
    """Pow(v, e) is a root only for a constant 0 < e < 1 (0.5 itself is checked by the pattern)."""
    e = _small_scalar(node.inputs[1])
    return None if e is not None and 0.0 < e < 1.0 else "the exponent is not a constant root"


def _small_scalar(t: Tensor) -> float | None:
    """A one-element constant's value, read as ModelGraph.constant_proto finds constants."""
    q = producer(t)
    while q is not None and q.op == "Identity" and q.inputs:  # (as constant_proto follows them)
        t, q = q.inputs[0], producer(q.inputs[0])
    proto = t.const
    if proto is None and q is not None and q.op == "Constant":
        proto = q.attrs.get("value")
    if not isinstance(proto, onnx.TensorProto) or int(np.prod(proto.dims, dtype=np.int64)) != 1:
        return None
    try:
        return float(numpy_helper.to_array(proto).reshape(()))
    except Exception:  # external data, odd types: not worth reading for a guard
        return None


# -- what structure cannot say -----------------------------------------------------------------


def check_means(g, m: Match, names, x: Tensor, xshape, axes: tuple[int, ...]) -> None:
    """Every ReduceSum-based mean in ``m`` divides by the number of elements it summed."""
    for name in names:
        node = m.get(name)
        if node is None or node.op not in ("ReduceSum", "ReduceSumSquare"):
            continue
        scale, n = m[name + "_scale"], m[name + "_n"]
        _check_count(g, node, scale, n, x, xshape, axes)
        where = m.get(name + "_where")
        if where is not None:
            k = fold(g, m[name + "_guard"])
            if k is None or not k > 0:
                raise Reject(f"Where {where.name!r} picks the variance only where {m[name + '_guard'].name!r} > 0, "
                             "which is not a positive constant")
            if not _keeps_shape(g, where):
                raise Reject(f"Where {where.name!r}: cannot tell that its other branch does not grow the variance")


# The ops the identities add whose constant operands broadcast into the result (the shared
# rank check, patterns/_constants.py, covers Add/Sub/Mul/Div/Pow).
_ALSO_BROADCASTING = frozenset({"Max", "Min", "Where", "Equal", "Greater", "And"})


def check_constant_ranks(g, m: Match, rank: int | None) -> None:
    """A one-element constant of higher rank than x still grows the result (Max(v, 0) with a
    0 of shape [1, 1, 1, 1]); so does a folded N.  ``rank``: x's, or None if unknown (then
    only ranks up to 1 are safe)."""
    limit = 1 if rank is None else rank
    for node in m.all_nodes:
        if node.op not in _ALSO_BROADCASTING:
            continue
        for t in node.inputs:
            shape = g.constant_shape(t) if t.name else None
            if shape is not None and len(shape) > limit:
                raise Reject(f"{node.op} {node.name!r}: constant {t.name!r} of shape {list(shape)} could grow the "
                             f"output past the input's rank")


def notes(m: Match) -> tuple[str, ...]:
    """What a fusion of ``m`` changes beyond rounding, for the fusion's record."""
    out = []
    if "variance_diff" in m:
        out.append("one-pass variance E[x²] − E[x]² in the original; the fused node computes it in two passes, "
                   "E[(x − E[x])²], which is more accurate (the outputs may differ where the original cancelled)")
    if "center_stable" in m:
        out.append("the original sets x − mean to exactly 0 on constant rows; the fused node computes x − mean "
                   "there (0 up to the rounding of the mean)")
    return tuple(out)


def one_pass(m: Match) -> bool:
    return "variance_diff" in m


def _check_count(g, node: Node, scale: Node, n: Tensor, x: Tensor, xshape, axes) -> None:
    what = f"{scale.op} {scale.name!r}"
    inverse = scale.op == "Mul"
    value = g.constant_value(n, max_elements=1)
    if value is None and fold(g, n) is not None:  # N − ddof computed from constants
        value = np.asarray(fold(g, n), dtype=helper_dtype(g, n))
    if value is not None:
        n_rank = _fold_rank(g, n)
        if xshape is not None and (n_rank is None or n_rank > len(xshape)):
            raise Reject(f"{what}: N {n.name!r} has a higher rank than the input: it would grow the output")
        if value.size != 1 or onnx.helper.np_dtype_to_tensor_dtype(value.dtype) not in FLOAT_TYPES:
            raise Reject(f"{what} scales the sum of {node.name!r} by {n.name!r}, not a float scalar")
        if xshape is None:
            raise Reject(f"{what}: the input's shape is unknown, so N cannot be checked")
        dims = [xshape[a] for a in axes]
        if not all(isinstance(d, int) for d in dims):
            raise Reject(f"{what} divides by a constant but the reduced dims {dims} are not all static")
        count = int(np.prod(dims))
        v = float(value.reshape(()).astype(np.float64))
        want = 1.0 / count if inverse else float(count)
        # Within an ulp of the constant's type: 1/N is rounded where it was computed.
        tol = float(np.finfo(value.dtype).eps) * abs(want)
        if abs(v - want) > tol:
            said = f"1/{1 / v:g}" if inverse and v else f"{v:g}"
            raise Reject(f"{what} divides the sum by {said}, but the reduced dims {dims} hold {count} elements")
        return
    # Counted from a shape: Cast(ReduceProd(Gather(Shape(t), idx))), Cast(Gather(...)), Size(t).
    t, idx, inv = _shape_count(g, n)
    if t is None:
        raise Reject(f"{what} divides the sum of {node.name!r} by {n.name!r}, which is neither a constant nor "
                     "a count of the input's dims")
    if inv != inverse:
        raise Reject(f"{what} {'multiplies' if inverse else 'divides'} the sum by N, not by its "
                     f"{'reciprocal' if inverse else 'value'}: the result is not a mean")
    if not _same_shape_as(t, x, node):
        raise Reject(f"{what} counts the dims of {t.name!r}, not of the tensor {node.name!r} sums")
    rank = len(xshape) if xshape is not None else None
    if idx is None:  # Size: every element
        if rank is None or tuple(range(-rank, 0)) != axes:
            raise Reject(f"{what} divides by the size of the whole tensor, but {node.name!r} reduces only axes {list(axes)}")
        return
    if any(i >= 0 for i in idx) and rank is None:
        raise Reject(f"{what} counts dims {idx} and the input rank is unknown")
    counted = tuple(sorted({i - rank if i >= 0 else i for i in idx}))
    if len(counted) != len(idx) or counted != axes:
        raise Reject(f"{what} counts the dims {idx}, but {node.name!r} reduces axes {list(axes)}")


def _shape_count(g, t: Tensor, depth: int = 8):
    """(tensor, gathered dims or None for all, inverted) if ``t`` counts elements of a tensor."""
    inverted, product = False, False
    for _ in range(depth):
        node = producer(t)
        if node is None or node.domain not in ("", "ai.onnx"):
            return None, None, False
        if node.op in ("Cast", "CastLike", "Identity") or (node.op == "Reshape" and _scalar_shape(g, node)):
            t = node.inputs[0]
        elif node.op == "Reciprocal":
            inverted, t = not inverted, node.inputs[0]
        elif node.op == "Div" and g.scalar(node.inputs[0]) == 1.0:
            inverted, t = not inverted, node.inputs[1]
        elif node.op == "ReduceProd":
            if _raw_axes_given(g, node):
                return None, None, False  # a product over some axes of the dims vector: not one count
            product, t = True, node.inputs[0]
        elif node.op == "Size":
            return node.inputs[0], None, inverted
        elif node.op == "Gather":
            src = producer(node.inputs[0])
            idx = g.constant_value(node.inputs[1])
            if src is None or src.op != "Shape" or idx is None or int(node.attrs.get("axis", 0)) != 0:
                return None, None, False
            if src.attrs.get("start") is not None or src.attrs.get("end") is not None:
                return None, None, False
            if idx.size != 1 and not product:
                return None, None, False  # several dims, not multiplied together: a vector, not a count
            return src.inputs[0], [int(i) for i in np.asarray(idx).reshape(-1)], inverted
        else:
            return None, None, False
    return None, None, False


def _scalar_shape(g, node: Node) -> bool:
    shape = g.constant_value(node.inputs[1]) if len(node.inputs) > 1 else None
    return shape is not None and int(np.prod(np.where(np.asarray(shape) == 0, 1, shape))) in (1, -1)


def _raw_axes_given(g, node: Node) -> bool:
    if len(node.inputs) > 1 and node.inputs[1].name:
        v = g.constant_value(node.inputs[1])
        return v is None or v.size > 0
    return bool(node.attrs.get("axes"))


def _same_shape_as(t: Tensor, x: Tensor, reduction: Node) -> bool:
    """``t`` is x, the reduced tensor, or either behind Casts (same shape by construction)."""
    seen = {id(x), id(reduction.inputs[0])}
    for start in (x, reduction.inputs[0]):
        node = producer(start)
        while node is not None and node.op == "Cast":
            seen.add(id(node.inputs[0]))
            node = producer(node.inputs[0])
    if id(t) in seen:
        return True
    node = producer(t)
    while node is not None and node.op == "Cast":
        t = node.inputs[0]
        if id(t) in seen:
            return True
        node = producer(t)
    return False


def is_mean(node: Node | None, sums: bool = False) -> bool:
    """Whether ``node`` (behind Casts and restores) is a mean: ReduceMean, or a scaled ReduceSum."""
    while node is not None and node.op in ("Cast", "Reshape", "Expand", "Unsqueeze"):
        node = producer(node.inputs[0])
    if node is None:
        return False
    if sums:  # the sum a Div/Mul scales
        return node.op == "ReduceSum"
    if node.op in ("Div", "Mul"):
        return any(is_mean(p, sums=True) for p in map(producer, node.inputs))
    return node.op in ("ReduceMean", "GlobalAveragePool")


_UNARY = frozenset("Abs Cast Ceil Elu Erf Exp Floor Gelu GlobalAveragePool HardSigmoid Identity LeakyRelu Log Neg "
                   "Reciprocal Relu Round Selu Sigmoid Sign Softplus Sqrt Tanh".split())
_BROADCAST = frozenset("Add Sub Mul Div Pow Max Min Where".split())


def rank_of(g, t: Tensor, depth: int = 32, memo: dict | None = None) -> int | None:
    """``t``'s rank where shape inference left it unknown: through elementwise ops up to a
    known shape, or a Reshape whose shape vector has a static length (tf2onnx's Dense)."""
    memo = {} if memo is None else memo
    if id(t) not in memo:
        memo[id(t)] = None  # (a cycle, in a malformed graph, gives up)
        memo[id(t)] = _rank(g, t, depth, memo)
    return memo[id(t)]


def _rank(g, t: Tensor, depth: int, memo: dict) -> int | None:
    shape = g.shape(t, infer=False)
    if shape is not None:
        return len(shape)
    node = producer(t)
    if node is None or depth == 0 or node.domain not in ("", "ai.onnx"):
        return None
    if node.op == "Reshape" and len(node.inputs) > 1:
        return _length(g, node.inputs[1], depth - 1, memo)
    if node.op.startswith("Reduce") and int(node.attrs.get("keepdims", 1)):
        return rank_of(g, node.inputs[0], depth - 1, memo)
    if node.op in ("Squeeze", "Unsqueeze") and len(node.inputs) > 1:
        axes, r = g.constant_value(node.inputs[1]), rank_of(g, node.inputs[0], depth - 1, memo)
        if axes is None or r is None:
            return None
        return r - axes.size if node.op == "Squeeze" else r + axes.size
    if node.op in _UNARY and node.inputs:
        return rank_of(g, node.inputs[0], depth - 1, memo)
    if node.op == "Transpose" and node.inputs:
        perm = node.attrs.get("perm")
        return len(perm) if perm else rank_of(g, node.inputs[0], depth - 1, memo)
    if node.op == "Einsum":  # the output's subscripts, when written out (tf2onnx's attention)
        eq = node.attrs.get("equation", "")
        eq = eq.decode() if isinstance(eq, bytes) else eq
        out = eq.split("->")[1].strip() if "->" in eq else None
        return len(out) if out is not None and "." not in out else None
    if node.op == "MatMul" and len(node.inputs) == 2:
        ranks = [rank_of(g, i, depth - 1, memo) for i in node.inputs]
        return max(ranks) if all(r is not None and r >= 2 for r in ranks) else None
    if node.op in _BROADCAST and node.outputs[0] is t:
        ranks = [rank_of(g, i, depth - 1, memo) for i in node.inputs]
        return None if any(r is None for r in ranks) else max(ranks)
    return None


def _length(g, t: Tensor, depth: int, memo: dict) -> int | None:
    """The static length of a 1-D shape vector (a Reshape's target): a Concat of pieces of
    static length, Shape(x) of a tensor of known rank."""
    dims = g.shape(t, infer=False)
    if dims is not None:
        return dims[0] if len(dims) == 1 and isinstance(dims[0], int) else None
    node = producer(t)
    if node is None or depth == 0:
        return None
    if node.op == "Concat":
        parts = [_length(g, i, depth - 1, memo) for i in node.inputs]
        return None if any(p is None for p in parts) else sum(parts)
    if node.op == "Shape" and not node.attrs.get("start") and node.attrs.get("end") is None:
        return rank_of(g, node.inputs[0], depth - 1, memo)
    if node.op in ("Cast", "Identity"):
        return _length(g, node.inputs[0], depth - 1, memo)
    if node.op == "Gather" and len(node.inputs) == 2:  # picked dims of a shape
        idx = g.constant_value(node.inputs[1])
        return idx.size if idx is not None and idx.ndim == 1 else None
    return None


_FOLD = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Div": np.divide}


def fold(g, t: Tensor, depth: int = 4) -> float | None:
    """The value of a one-element tensor computed from constants by Add/Sub/Mul/Div/Cast."""
    v = g.constant_value(t, max_elements=1)
    if v is not None:
        return float(v.reshape(()).astype(np.float64)) if v.size == 1 else None
    node = producer(t)
    if node is None or depth == 0 or node.domain not in ("", "ai.onnx"):
        return None
    if node.op in ("Cast", "Identity") and node.inputs:
        return fold(g, node.inputs[0], depth - 1)
    if node.op in _FOLD and len(node.inputs) == 2:
        a, b = (fold(g, i, depth - 1) for i in node.inputs)
        if a is None or b is None or (node.op == "Div" and b == 0):
            return None
        return float(_FOLD[node.op](a, b))
    return None


def _fold_rank(g, t: Tensor, depth: int = 4) -> int | None:
    """The highest rank among the constants ``t`` is folded from (None if not foldable)."""
    shape = g.constant_shape(t)
    if shape is not None:
        return len(shape)
    node = producer(t)
    if node is None or depth == 0:
        return None
    ranks = [_fold_rank(g, i, depth - 1) for i in node.inputs[: 1 if node.op in ("Cast", "Identity") else 2]]
    return None if not ranks or any(r is None for r in ranks) else max(ranks)


def helper_dtype(g, t: Tensor):
    """The numpy dtype of ``t`` (float32 if unknown)."""
    et = g.elem_type(t, infer=False)
    try:
        return onnx.helper.tensor_dtype_to_np_dtype(et) if et else np.float32
    except (KeyError, TypeError):
        return np.float32


def _keeps_shape(g, where: Node) -> bool:
    """Where(cond, v, other) has v's shape: inference says so, or cond and other are one value
    each (other perhaps Expand-ed to Shape(v)) of no higher rank than v."""
    cond, v, other = where.inputs
    vshape, out = g.shape(v), g.shape(where.outputs[0])
    if out is not None and out == vshape:
        return True
    if vshape is None:
        return False
    cshape = g.shape(cond)
    if cshape is None or len(cshape) > len(vshape) or any(d != 1 for d in cshape):
        return False
    q = producer(other)
    if q is not None and q.op == "Expand" and producer(q.inputs[1]) is not None:
        s = producer(q.inputs[1])
        if s.op == "Shape" and s.inputs[0] is v and not s.attrs.get("start") and s.attrs.get("end") is None:
            other = q.inputs[0]
    oshape = g.shape(other)
    return oshape is not None and len(oshape) <= len(vshape) and all(d == 1 for d in oshape)
