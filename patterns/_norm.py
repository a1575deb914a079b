"""What LayerNorm and RMSNorm share: pattern pieces, the check, and the per-target rewrite."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from fusion.rewrite import specs
from fusion.ir.view import Node, Tensor
from fusion.ir.graph import FLOAT_TYPES, FLOAT_WIDTH, producer
from fusion.match.pattern import Const, Match, Op, Pattern, Var
from fusion.rewrite.editor import Emitter, Reject
from fusion.rewrite.rules import Context

from . import _algebra
from ._constants import check_constant_rank, check_overridable

_TYPE_NAME = {t: onnx.TensorProto.DataType.Name(t) for t in FLOAT_TYPES}
# TensorRT 8.5.3's shipped LayerNorm plugin on the H100, against NumPy: max error 9.4e-3 at 32
# and 3.6e-3 at 16 normalized elements, under 1e-6 (fp32) from 48 to 4096
# (bench/results/trt_layernorm_accuracy.json).  The trt target keeps to where it was exact.
TRT_LAYERNORM_MIN_SIZE = 48


def _float_cast(node: Node) -> str | None:
    to = node.attrs.get("to")
    return None if to in FLOAT_TYPES else f"casts to {onnx.TensorProto.DataType.Name(to)}, not a float type"


def cast(p: Pattern) -> Pattern:
    """``p``, optionally behind a float-to-float Cast (fp16 graphs upcast inside the chain)."""
    return Op("Cast", p, where=_float_cast, quiet=True) | p


def plus_eps(variance: Pattern) -> Pattern:
    """variance + eps; or the variance alone (an exporter drops an eps of 0).  jax2onnx
    writes eps as CastLike(eps, x)."""
    eps = Op("CastLike", Const("eps"), Var(), quiet=True) | Const("eps")
    return Op("Add", cast(variance), cast(eps), name="add_eps") | variance


@dataclass
class NormDesc:
    """What a matched norm computes; targets turn it into nodes."""

    kind: str  # "layer" | "rms"
    x: Tensor
    y: Tensor
    # Without Casts in the chain every tensor in it has one type, that of its constants.
    chain_type: int | None
    axes: tuple[int, ...]  # normalized axes, negative (counted from the end)
    rank: int | None
    epsilon: float
    gamma: Tensor | None
    beta: Tensor | None
    # Float types the chain computes in besides its input's: Casts' targets, constants read as they are.
    types: frozenset = frozenset()
    notes: tuple[str, ...] = ()  # said in the fusion's record (fusion.passes.Fusion.notes)

    @property
    def trailing(self) -> bool:
        return self.axes == tuple(range(-len(self.axes), 0))


def analyze(m: Match, ctx: Context, kind: str, reductions: tuple[str, ...]) -> NormDesc:
    """Check a structural match of a norm and describe it; raise Reject with the reason."""
    g = ctx.graph
    x = m["x"]
    _check_not_an_input_cast(m.root)
    # x, γ and β go to the fused node as inputs; everything else (eps, axes, exponents) is baked.
    check_overridable(g, m, ("x", "gamma", "beta"))
    # Shapes are annotated by most exporters; inference (once per model) only where needed.
    needs_rank = any(_raw_axes(g, m[n]) is None or min(_raw_axes(g, m[n])) >= 0 for n in reductions if n in m)
    restored = any(n + "_restore" in m or n + "_sum_restore" in m for n in reductions)
    summed = any(m[n].op in ("ReduceSum", "ReduceSumSquare") for n in reductions if n in m)  # N is checked against x's dims
    shape = g.shape(x, infer=needs_rank or restored or summed)
    rank = None if shape is None else len(shape)
    if rank is None and any(m[n].op == "GlobalAveragePool" for n in reductions if n in m):
        rank = _algebra.rank_of(g, x)  # GlobalAveragePool's axes depend on it (tf2onnx)
        shape = None if rank is None else [None] * rank  # the rank, no dims
    axes = None
    for name in reductions:
        if name not in m:
            continue
        # A ReduceSum may be put back before it is divided (name_sum_restore), or after.
        restores = [m[r] for r in (name + "_restore", name + "_sum_restore") if r in m]
        node_axes = _normalized_axes(g, m[name], rank, keepdims=0 if restores else 1)
        if axes is not None and node_axes != axes:
            raise Reject(f"{reductions[0]} reduces axes {list(axes)} but {name} reduces {list(node_axes)}")
        axes = node_axes
        for restore in restores:
            _check_restored(g, restore, shape, axes)
    assert axes is not None
    notes = _check_algebra(m, g, reductions, x, shape, axes)
    eps = g.scalar(m["eps"]) if "eps" in m else 0.0
    if eps is None:
        raise Reject(f"epsilon {m['eps'].name!r} is not a one-element constant")
    plain = not any(n.op in ("Cast", "CastLike") for n in m.all_nodes)
    consts = [m[c] for c in ("gamma", "beta", "eps") if c in m]
    chain_type = g.elem_type(consts[0]) if plain and consts else None
    desc = NormDesc(kind, x, m.root.outputs[0], chain_type, axes, rank, eps, m.get("gamma"), m.get("beta"), compute_types(g, m), notes)
    for param in ("gamma", "beta"):
        t = getattr(desc, param)
        if t is None:
            continue
        pshape = g.fixed_shape(t)
        if pshape is None and g.overridable(t):
            raise Reject(f"{'γ' if param == 'gamma' else 'β'}: {g.not_constant_reason(t)}, and its graph input "
                         "does not pin its shape and type to the initializer's")
        if shape is None and (any(d != 1 for d in pshape) or len(pshape) > -min(axes)):
            # Whether γ grows the output (a normalized dim of 1, or more dims than the input
            # has) depends on the input's shape.
            shape = g.shape(x)
        _check_affine(pshape, shape, axes, f"{'γ' if param == 'gamma' else 'β'} {t.name!r}", lambda a: _proven_dim(g, x, a, ctx.scope))
    known_min = len(shape) if shape is not None else -min(axes)
    check_constant_rank(g, m.all_nodes, None if shape is None else len(shape), known_min, lambda: _rank(g, x))
    return desc


def _check_algebra(m: Match, g, reductions, x: Tensor, shape, axes: tuple[int, ...]) -> tuple[str, ...]:
    """What the arithmetic identities (patterns/_algebra.py) need beyond structure."""
    _algebra.check_means(g, m, reductions, x, shape, axes)
    _algebra.check_constant_ranks(g, m, None if shape is None else len(shape))
    if _algebra.one_pass(m):
        # Both at x's rank (kept, or a sum put back before ÷ N), or both reduced.
        k_mean, k_var = (int(m[n].attrs.get("keepdims", 1)) or n + "_sum_restore" in m for n in ("mean", "variance"))
        if k_mean != k_var:
            raise Reject(f"E[x²] ({m['variance'].name!r}) and E[x] ({m['mean'].name!r}) differ in keepdims: "
                         "their difference is not the variance")
    return _algebra.notes(m)


def _rank(g, x: Tensor) -> int | None:
    shape = g.shape(x)
    return None if shape is None else len(shape)


# Ops whose output has their input's shape.
_SAME_SHAPE = frozenset({
    "Cast", "Identity", "Relu", "Erf", "Tanh", "Sigmoid", "Sqrt", "Neg", "Reciprocal", "Abs", "Exp", "Log", "Gelu",
    "Dropout", "Clip", "LeakyRelu", "Elu", "Softplus", "Softmax", "LogSoftmax", "LayerNormalization", "HardSigmoid",
})
_BROADCAST = frozenset({"Add", "Sub", "Mul", "Div", "Pow", "Where", "Max", "Min"})


def _proven_dim(g, t: Tensor, axis: int, scope, depth: int = 48, assume: dict | None = None, memo: dict | None = None) -> int | None:
    """The size of ``t`` (in ``scope``) along negative ``axis`` whatever the graph's inputs are,
    where the graph forces it: an annotation, a constant, an op broadcasting with an operand of
    that size (the residual Add with a bias before a LayerNorm), a MatMul or Gemm with a fixed
    weight; for a function's input, the same size at every call; for a Loop's carried value,
    its initial size if the body keeps it (by induction: ``assume`` holds the hypothesis).

    ``memo`` (per question) keeps what was proven and what could not be at a given depth, so
    that a chain of attention blocks, whose MatMuls each ask about both operands, costs time
    linear in the graph rather than exponential in ``depth``."""
    assume = assume or {}
    memo = {} if memo is None else memo
    key = (id(t), axis, tuple(sorted(assume.items())))
    hit = memo.get(key)
    if hit is not None and (hit[0] is not None or hit[1] >= depth):
        return hit[0]
    found = _prove_dim(g, t, axis, scope, depth, assume, memo)
    memo[key] = (found, depth)
    return found


def _prove_dim(g, t: Tensor, axis: int, scope, depth: int, assume: dict, memo: dict) -> int | None:
    if (id(t), axis) in assume:
        return assume[(id(t), axis)]
    shape = g.fixed_shape(t)
    if shape is None:
        shape = g.shape(t, infer=False)
    if shape is not None:
        if -axis > len(shape):
            return 1 if g.fixed_shape(t) is not None else None  # a constant broadcasts as size 1 there
        if isinstance(shape[axis], int):
            return shape[axis]
    if depth == 0:
        return None
    node = producer(t)
    if node is None:
        return _proven_at_calls(g, t, axis, scope, depth - 1, memo, assume)
    i = next((k for k, o in enumerate(node.outputs) if o is t), None)
    if node.domain not in ("", "ai.onnx"):
        # A call of a model-local function: what its body forces on that output.
        f = next((s for s in g.scopes if s.is_function and (s.proto.domain, s.proto.name) == (node.domain, node.op)), None)
        if f is None or i is None or i >= len(f.ir.outputs):
            return None
        return _proven_dim(g, f.ir.outputs[i], axis, f, depth - 1, assume, memo)
    if not node.inputs:
        return None
    if node.op in _SAME_SHAPE:
        return _proven_dim(g, node.inputs[0], axis, node.scope, depth - 1, assume, memo)
    if node.op in _BROADCAST:
        # The result has the one size other than 1 among the operands (or the op fails): the
        # first operand proven to have it settles the question, so a residual Add does not
        # walk back through every earlier layer when its bias already says the size.
        dims = []
        for operand in node.inputs:
            d = _proven_dim(g, operand, axis, node.scope, depth - 1, assume, memo)
            if d is not None and d != 1:
                return d
            dims.append(d)
        return 1 if all(d == 1 for d in dims) else None
    if axis == -1 and node.op in ("MatMul", "Gemm") and len(node.inputs) >= 2:
        w = g.fixed_shape(node.inputs[1])
        if w is not None and len(w) >= 2:
            trans = node.op == "Gemm" and int(node.attrs.get("transB", 0))
            return w[-2] if trans else w[-1]
        if node.op == "Gemm":  # 2-D operands: the columns are B's (B^T's with transB), however B is made
            trans = int(node.attrs.get("transB", 0))
            return _proven_dim(g, node.inputs[1], -2 if trans else -1, node.scope, depth - 1, assume, memo)
    if node.op == "Transpose" and node.attrs.get("perm") is not None:
        perm = list(node.attrs["perm"])
        if -axis > len(perm):
            return None
        return _proven_dim(g, node.inputs[0], perm[axis] - len(perm), node.scope, depth - 1, assume, memo)
    if node.op == "MatMul" and axis in (-1, -2) and len(node.inputs) == 2:
        # Operands of rank >= 2: rows come from a, columns from b (P @ V).
        a, b = node.inputs
        if all(_rank_at_least_2(g, v, depth - 1, memo, node.scope) for v in (a, b)):
            return _proven_dim(g, b if axis == -1 else a, axis, node.scope, depth - 1, assume, memo)
    if node.op == "Reshape" and len(node.inputs) > 1:
        # A target shape whose trailing pieces are constants (tf2onnx's Dense: Concat(Shape dims, [N]))
        # or sizes read off a tensor (diffusers' Transformer2DModel: [B, H*W, Shape(proj_in(x))[1]]).
        d = _trailing_shape_value(g, node.inputs[1], axis,
                                  lambda y, a: _proven_dim(g, y, a, node.scope, depth - 1, assume, memo))
        if d is not None and d > 0:
            return d
    if node.op == "Conv" and len(node.inputs) >= 2:
        # [N, M, spatial...] with M the weight's first dim (or the op fails): the channel axis.
        w = g.fixed_shape(node.inputs[1])
        if w is not None and len(w) >= 3 and axis == 1 - len(w):
            return w[0]
    if node.op == "If" and len(node.subgraphs) == 2:
        dims = {_proven_dim(g, b[0].outputs[i], axis, None, depth - 1, assume, memo) for b in node.subgraphs.values()}
        return dims.pop() if len(dims) == 1 else None
    if node.op == "Loop" and "body" in node.subgraphs and i < len(node.inputs) - 2:
        body = node.subgraphs["body"][0]
        d = _proven_dim(g, node.inputs[2 + i], axis, node.scope, depth - 1, assume, memo)
        if d is None or len(body.inputs) != len(node.inputs) or len(body.outputs) <= 1 + i:
            return None
        step = _proven_dim(g, body.outputs[1 + i], axis, None, depth - 1, {**assume, (id(body.inputs[2 + i]), axis): d}, memo)
        return d if step == d else None
    return None


def _rank_at_least_2(g, t: Tensor, depth: int, memo: dict, scope=None) -> bool:
    """Whether ``t`` has rank >= 2 whatever the graph's inputs are (its dims may be unknown: a
    symbolic sequence length is still a dim)."""
    key = ("rank", id(t))
    hit = memo.get(key)
    if hit is not None and (hit[0] or hit[1] >= depth):
        return hit[0]
    memo[key] = (False, depth)  # (a cycle proves nothing)
    found = _prove_rank_at_least_2(g, t, scope, depth, memo)
    memo[key] = (found, depth)
    return found


def _with_hypothesis(memo: dict, key: tuple, depth: int) -> dict:
    """A memo for a proof by induction: what is proven so far (not what failed before the
    hypothesis was made) and the hypothesis itself."""
    return {**{k: v for k, v in memo.items() if v[0]}, key: (True, depth)}


def _prove_rank_at_least_2(g, t: Tensor, scope, depth: int, memo: dict) -> bool:
    shape = g.fixed_shape(t)
    if shape is None:
        shape = g.shape(t, infer=False)
    if shape is not None:
        return len(shape) >= 2
    node = producer(t)
    if depth == 0:
        return False
    if node is None:  # a model-local function's input: what every caller passes
        if scope is None or not scope.is_function or t.name not in scope.proto.input:
            return False
        index = list(scope.proto.input).index(t.name)
        key = (scope.proto.domain, scope.proto.name)
        calls = [(n, s) for s in g.scopes for n in s.ir.nodes if (n.domain, n.op) == key]
        if not calls or any(index >= len(n.inputs) or not n.inputs[index].name for n, _ in calls):
            return False
        ranks = [_rank_at_least_2(g, n.inputs[index], depth - 1, memo, s) for n, s in calls]
        if not any(ranks):
            return False
        # Calls fed through earlier calls of the same function: by induction (see _proven_at_calls),
        # on a copy of the memo, so that nothing proven under the hypothesis outlives it.
        hypothesis = _with_hypothesis(memo, ("rank", id(t)), depth)
        return all(r or _rank_at_least_2(g, n.inputs[index], depth - 1, hypothesis, s) for r, (n, s) in zip(ranks, calls))
    if not node.inputs:
        return False
    i = next((k for k, o in enumerate(node.outputs) if o is t), 0)
    if node.domain not in ("", "ai.onnx"):  # a model-local function's call: its body's output
        f = next((s for s in g.scopes if s.is_function and (s.proto.domain, s.proto.name) == (node.domain, node.op)), None)
        return f is not None and i < len(f.ir.outputs) and _rank_at_least_2(g, f.ir.outputs[i], depth - 1, memo, f)
    if node.op in _SAME_SHAPE:
        return _rank_at_least_2(g, node.inputs[0], depth - 1, memo, node.scope)
    if node.op in _BROADCAST:  # the result has the largest rank among the operands
        return any(_rank_at_least_2(g, v, depth - 1, memo, node.scope) for v in node.inputs if v.name)
    if node.op == "MatMul" and len(node.inputs) == 2:
        return all(_rank_at_least_2(g, v, depth - 1, memo, node.scope) for v in node.inputs)
    if node.op == "Transpose" and node.attrs.get("perm") is not None:
        return len(node.attrs["perm"]) >= 2
    if node.op == "If" and len(node.subgraphs) == 2:
        return all(i < len(b[0].outputs) and _rank_at_least_2(g, b[0].outputs[i], depth - 1, memo) for b in node.subgraphs.values())
    if node.op == "Loop" and "body" in node.subgraphs and i < len(node.inputs) - 2:
        # A carried value: its initial value's, or after a pass, the body's output's.
        body = node.subgraphs["body"][0]
        if len(body.outputs) <= 1 + i or len(body.inputs) != len(node.inputs):
            return False
        if not _rank_at_least_2(g, node.inputs[2 + i], depth - 1, memo, node.scope):
            return False
        # By induction: the body keeps rank >= 2 if its carried input has it (a memo copy holds the hypothesis).
        hypothesis = _with_hypothesis(memo, ("rank", id(body.inputs[2 + i])), depth)
        return _rank_at_least_2(g, body.outputs[1 + i], depth - 1, hypothesis, node.scope)
    return False


def _trailing_shape_value(g, shape: Tensor, axis: int, size_of=None) -> int | None:
    """Element ``axis`` (negative) of a 1-D shape vector: a constant, or a Concat whose pieces
    from there to the end are constants or one-element sizes of a tensor (``Shape(y)[k]``),
    the one at ``axis`` proven by ``size_of(y, negative axis)``."""
    value = g.constant_value(shape)
    if value is not None:
        v = np.asarray(value).reshape(-1)
        return int(v[axis]) if -axis <= v.size else None
    node = producer(shape)
    while node is not None and node.op == "Cast":  # (int32 pieces cast to int64)
        node = producer(node.inputs[0])
    if node is None or node.op != "Concat":
        return None
    tail: list = []  # ints, or (tensor, negative axis) for a size read off a tensor
    for piece in reversed(node.inputs):
        if len(tail) >= -axis:
            break
        v = g.constant_value(piece)
        if v is not None:
            tail = [int(e) for e in np.asarray(v).reshape(-1)] + tail
            continue
        read = _size_read(g, piece) if size_of is not None else None
        if read is None:
            return None
        tail = [read] + tail
    if len(tail) < -axis:
        return None
    e = tail[axis]
    return e if isinstance(e, int) else size_of(*e)


def _size_read(g, piece: Tensor) -> tuple[Tensor, int] | None:
    """``(y, k)`` (k negative) when ``piece`` is one element, ``y``'s size along axis k: the
    TorchScript exporter's ``Unsqueeze(Gather(Shape(y), k))`` (a scalar index), or
    ``Gather(Shape(y), [k])``."""
    node = producer(piece)
    while node is not None and node.op == "Cast" and int(node.attrs.get("to", 0)) == onnx.TensorProto.INT64:
        node = producer(node.inputs[0])
    if node is not None and node.op == "Unsqueeze":
        axes = g.constant_value(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1].name else node.attrs.get("axes")
        if axes is None or np.size(axes) != 1:
            return None
        gather, want_rank = producer(node.inputs[0]), 0  # a scalar, made one element
    else:
        gather, want_rank = node, 1
    if gather is None or gather.op != "Gather" or len(gather.inputs) != 2 or int(gather.attrs.get("axis", 0)) != 0:
        return None
    idx = g.constant_value(gather.inputs[1])
    shape_node = producer(gather.inputs[0])
    if idx is None or np.ndim(idx) != want_rank or np.size(idx) != 1 or shape_node is None or shape_node.op != "Shape":
        return None
    if shape_node.attrs.get("start", 0) != 0 or shape_node.attrs.get("end") is not None:
        return None
    y, k = shape_node.inputs[0], int(np.reshape(idx, -1)[0])
    if k >= 0:
        rank = _conv_rank(g, y) or _rank(g, y)
        if rank is None or k >= rank:
            return None
        k -= rank
    return y, k


def _conv_rank(g, y: Tensor) -> int | None:
    """The rank of a Conv's output: its weight's."""
    node = producer(y)
    if node is None or node.op != "Conv" or len(node.inputs) < 2:
        return None
    w = g.fixed_shape(node.inputs[1])
    return None if w is None else len(w)


def _proven_at_calls(g, t: Tensor, axis: int, scope, depth: int, memo: dict, assume: dict | None = None) -> int | None:
    """A model-local function's input: the size its every caller passes, if they agree.

    A call whose argument comes (through earlier calls) from the function's own output, as in a
    stack of identical blocks, is proven by induction over the calls in data order: with the
    hypothesis that ``t`` has the size the other calls agree on.  The graph is acyclic, so the
    hypothesis is only ever used for calls before it."""
    if scope is None or not scope.is_function or t.name not in scope.proto.input:
        return None
    index = list(scope.proto.input).index(t.name)
    key = (scope.proto.domain, scope.proto.name)
    args = []
    for s in g.scopes:
        for n in s.ir.nodes:
            if (n.domain, n.op) != key:
                continue
            if index >= len(n.inputs) or not n.inputs[index].name:
                return None
            args.append((n.inputs[index], s))
    assume = assume or {}
    dims = [_proven_dim(g, a, axis, s, depth, assume, memo) for a, s in args]
    known = {d for d in dims if d is not None}
    if len(known) != 1:
        return None
    d = known.pop()
    hypothesis = {**assume, (id(t), axis): d}
    if all(x is not None or _proven_dim(g, a, axis, s, depth, hypothesis, memo) == d for x, (a, s) in zip(dims, args)):
        return d
    return None


def _check_restored(g, restore: Node, xshape, axes: tuple[int, ...]) -> None:
    """A keepdims=0 mean put back must have x's dims, with 1 (or x's size) on the reduced axes."""
    shape = g.shape(restore.outputs[0])
    if shape is None or xshape is None or len(shape) != len(xshape):
        raise Reject(f"cannot tell that {restore.op} {restore.name!r} restores the reduced dims (shapes unknown)")
    for i, (d, xd) in enumerate(zip(shape, xshape)):
        ok = d == xd and d is not None
        if i - len(shape) in axes:
            ok = ok or d == 1
        if not ok:
            raise Reject(f"{restore.op} {restore.name!r} makes shape {list(shape)}, not the input's {list(xshape)} with the reduced dims kept")


def _raw_axes(g, node: Node) -> list[int] | None:
    """ReduceMean's axes as written (attribute or constant input); None if absent or unknown."""
    if len(node.inputs) > 1 and node.inputs[1].name:
        value = g.constant_value(node.inputs[1])
        return None if value is None or value.size == 0 else [int(a) for a in np.asarray(value).reshape(-1)]
    axes = node.attrs.get("axes")
    return list(axes) if axes else None


def _normalized_axes(g, node: Node, rank: int | None, keepdims: int = 1) -> tuple[int, ...]:
    if node.op == "GlobalAveragePool":  # the mean over every axis from 2 on, dims kept
        if rank is None or rank < 3:
            raise Reject(f"GlobalAveragePool {node.name!r}: the input rank is {'unknown' if rank is None else rank}")
        if not keepdims:
            raise Reject(f"GlobalAveragePool {node.name!r} keeps its dims but is reshaped as if it did not")
        return tuple(range(2 - rank, 0))
    if int(node.attrs.get("keepdims", 1)) != keepdims:
        if keepdims:
            raise Reject(f"{node.op} {node.name!r} has keepdims=0, so its result does not broadcast back")
        raise Reject(f"{node.op} {node.name!r} keeps its dims but is reshaped as if it did not")
    axes = node.attrs.get("axes")
    if len(node.inputs) > 1 and node.inputs[1].name:
        value = g.constant_value(node.inputs[1])
        if value is None:
            raise Reject(f"ReduceMean {node.name!r} takes its axes from a non-constant tensor")
        axes = [int(a) for a in np.asarray(value).reshape(-1)]
    if axes is None or len(axes) == 0:
        if int(node.attrs.get("noop_with_empty_axes", 0)):
            raise Reject(f"ReduceMean {node.name!r} has no axes and noop_with_empty_axes=1")
        if rank is None:
            raise Reject(f"ReduceMean {node.name!r} reduces every axis and the input rank is unknown")
        axes = list(range(rank))
    if any(a >= 0 for a in axes):
        if rank is None:
            raise Reject(f"ReduceMean {node.name!r} has axes {list(axes)} and the input rank is unknown")
        axes = [a - rank if a >= 0 else a for a in axes]
    return tuple(sorted(set(axes)))


def _check_affine(pshape, xshape, axes: tuple[int, ...], what: str, proven=lambda axis: None) -> None:
    """γ/β must vary only along the normalized axes and broadcast against them; where γ/β is
    not 1, the input's size must be known to equal it (``proven(axis)`` when not annotated)."""
    if pshape is None:
        raise Reject(f"{what} has an unknown shape")
    if xshape is not None and len(pshape) > len(xshape):
        raise Reject(f"{what} has rank {len(pshape)}, more than the input's {len(xshape)}: the output would grow")
    if xshape is None and len(pshape) > -min(axes):
        # An input of lower rank would grow to γ/β's: the fused node would change the output's shape.
        raise Reject(f"{what} has rank {len(pshape)} and the input's rank is unknown: the output could grow")
    for j in range(1, len(pshape) + 1):
        d = pshape[-j]
        if -j not in axes:
            if d != 1:
                raise Reject(f"{what} shape {list(pshape)} varies along axis {-j}, which is not normalized")
        elif xshape is not None and isinstance(xshape[-j], int) and d not in (1, xshape[-j]):
            raise Reject(f"{what} shape {list(pshape)} does not broadcast to the input shape {list(xshape)}")
        elif d != 1 and (xshape is None or not isinstance(xshape[-j], int)) and proven(-j) != d:
            # Fed a size of 1 there, the original broadcasts to γ's size; a fused node cannot.
            dim = "unknown" if xshape is None else repr(xshape[-j])
            raise Reject(f"{what} has {d} along normalized axis {-j}, where the input's size is {dim}: "
                         f"cannot prove they are equal")


# -- rewrite ----------------------------------------------------------------------------


def _check_not_an_input_cast(root: Node) -> None:
    """A Cast read only by custom nodes of ours is how an earlier fusion fed its node (emit
    casts x to the type the node computes in): it belongs to that fusion.  Ending a chain
    there would fuse, on a second run, a chain the first run refused, and give it another type."""
    if root.op != "Cast" or root.scope is None or root.outputs[0].name in root.scope.output_names:
        return
    readers = root.outputs[0].outputs
    if readers and all((n.domain, n.op) in _OURS for n in readers):
        raise Reject(f"Cast {root.name!r} feeds fused node {readers[0].name!r}: it belongs to that fusion")


_OURS = {(s.domain, s.op_type) for s in specs.SPECS}


def compute_types(g, m: Match) -> frozenset:
    """The float types the matched nodes compute in, besides the input's.

    An arithmetic node computes in the type of its operands, each of which is the input, a
    Cast's result or a constant read as it is: so the Casts' targets and those constants'
    types cover every type in the chain.
    """
    types = set()
    for n in m.all_nodes:
        if n.op == "Cast":
            types.add(int(n.attrs["to"]))
            continue
        if n.op == "CastLike":  # (jax2onnx's eps): the type of what it is cast like
            types.add(g.elem_type(n.inputs[1]))
            continue
        for t in n.inputs:
            if t.name and g.is_constant(t):
                types.add(g.elem_type(t))
    return frozenset(t for t in types if t in FLOAT_TYPES)


def _widest(types) -> int:
    return max(types, key=lambda t: FLOAT_WIDTH[t])


def norm_types(desc: NormDesc, em: Emitter, ctx: Context) -> tuple[int, int, int, bool]:
    """The input and output types, the type the node computes in, and whether the input
    must be cast to it explicitly (untyped); sets ``em.compute_type``.  Raises Reject."""
    g = ctx.graph
    if desc.chain_type is not None:
        t_in = t_out = desc.chain_type
    else:
        t_in, t_out = g.elem_type(desc.x), g.elem_type(desc.y)
    if t_out is None:
        # Inside function bodies nothing is typed: the output has the type of the Cast that
        # ends the chain, or of the γ/β the last node reads (as read: perhaps through a Cast;
        # γ's own type is not the output's when a Cast comes between it and β).
        root = desc.y.inputs[0]
        t_out = int(root.attrs["to"]) if root.op == "Cast" else _read_type(g, root)
    if t_in is None and t_out is None:
        raise Reject(f"the element type of {desc.x.name!r} is unknown")
    # An untyped input (function bodies) of a chain with Casts: its type may not be the
    # output's, so it is cast explicitly to the type the node computes in, taken as the
    # chain's widest (a cast up loses nothing, whatever the input's type really is).
    cast_in = t_in is None and desc.chain_type is None
    if cast_in and t_out in FLOAT_TYPES:
        t_in = _widest(desc.types | {t_out})
    t_in, t_out = t_in or t_out, t_out or t_in
    for t in (t_in, t_out):
        if t not in FLOAT_TYPES:
            raise Reject(f"element type {onnx.TensorProto.DataType.Name(t)} is not a float type")
    # Compute in the wider of the two types: an upcast before is exact, a downcast after is
    # what the original did last anyway.
    t = t_out if FLOAT_WIDTH[t_in] < FLOAT_WIDTH[t_out] else t_in
    target = ctx.target
    # The node must also compute as wide as the chain's widest type (an fp32 model may compute
    # its variance in fp64).  The plugins and LayerNormalization's stash compute in fp32; fp64
    # is kept by computing the whole node in DOUBLE (target onnx) or refused.  One exception:
    # fp16 in and out (TorchScript's fp16 exports widen to fp64 inside), where fp32 holds every
    # fp16 value, square and sum exactly enough: the output differs by at most an fp16 rounding.
    compute = _widest(desc.types | {t, onnx.TensorProto.FLOAT})
    if compute == onnx.TensorProto.DOUBLE and t_in == t_out == onnx.TensorProto.FLOAT16:
        compute = onnx.TensorProto.FLOAT
    if compute == onnx.TensorProto.DOUBLE and target != "onnx":
        what = "the model is DOUBLE" if t_in == t_out == compute else "the chain computes in DOUBLE"
        plugin = "TensorRT's LayerNorm plugin" if target == "trt" else "the plugins"
        raise Reject(f"target {target}: {what}, and {plugin} (and TensorRT) have no fp64; target onnx keeps it")
    if compute == onnx.TensorProto.DOUBLE:
        t = compute
    em.compute_type = compute
    return t_in, t_out, t, cast_in


def emit(desc: NormDesc, em: Emitter, ctx: Context) -> None:
    """Emit ``desc`` for ``ctx.target``; the last node written produces ``desc.y``."""
    g = ctx.graph
    target = ctx.target
    t_in, t_out, t, cast_in = norm_types(desc, em, ctx)
    if target == "trt":
        if desc.kind != "layer":
            raise Reject("target trt: TensorRT ships no RMSNorm plugin")
        if t not in (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16):
            raise Reject(f"target trt: the LayerNorm plugin takes fp32/fp16, not {_TYPE_NAME[t]}")
    if target == "onnx":
        need = 17 if desc.kind == "layer" else 23
        op = "LayerNormalization" if desc.kind == "layer" else "RMSNormalization"
        if ctx.opset < need:
            raise Reject(f"target onnx: {op} needs opset {need}, the model has {ctx.opset}")

    k = len(desc.axes)
    xshape = g.shape(desc.x, infer=False)
    norm_shape = _normalized_shape(g, desc, xshape)
    if norm_shape is None and xshape is None:
        norm_shape = _normalized_shape(g, desc, g.shape(desc.x))
    perm = None
    if not desc.trailing:
        rank = desc.rank
        if rank is None:  # negative axes needed no rank to match; the transpose does (inference, once)
            shape = g.shape(desc.x)
            rank = None if shape is None else len(shape)
        if rank is None:
            raise Reject(f"normalized axes {list(desc.axes)} are not the trailing ones and the rank is unknown")
        axes = [a + rank for a in desc.axes]
        perm = [i for i in range(rank) if i not in axes] + axes

    x = desc.x.name
    if t != t_in or cast_in:
        x = em.node("Cast", [x], to=t)[0]
    if perm is not None:
        x = em.node("Transpose", [x], perm=perm)[0]

    flat = target == "trt" and not (desc.rank == 3 and k == 1)
    param_shape = norm_shape
    if target == "trt":
        if norm_shape is None or not all(isinstance(d, int) for d in norm_shape):
            raise Reject("target trt: the normalized size must be static (the plugin is exact only from "
                         f"{TRT_LAYERNORM_MIN_SIZE} elements)")
        size = int(np.prod(norm_shape))
        if size < TRT_LAYERNORM_MIN_SIZE:
            raise Reject(f"target trt: TensorRT's LayerNorm plugin is inaccurate below {TRT_LAYERNORM_MIN_SIZE} "
                         f"normalized elements (this norm has {size})")
        if flat:
            param_shape = [size]
    gamma = _affine(em, g, desc.gamma, desc, norm_shape, param_shape, t, 1.0, "gamma")
    beta = None
    if desc.kind == "layer" and not (target == "onnx" and desc.beta is None):
        beta = _affine(em, g, desc.beta, desc, norm_shape, param_shape, t, 0.0, "beta")

    if target == "plugin":
        spec = specs.FUSED_LAYER_NORM if desc.kind == "layer" else specs.FUSED_RMS_NORM
        inputs = [x, gamma] + ([beta] if beta else [])
        y = em.plugin(spec, inputs, em.name(spec.op_type + "_out"), t, epsilon=desc.epsilon, axis=-k)
    elif target == "trt":
        before = x
        if flat:
            x = em.node("Reshape", [x, em.const("shape3d", np.array([-1, 1, param_shape[0]], np.int64))])[0]
        y = em.plugin(specs.TRT_LAYER_NORM, [x, gamma, beta], em.name("LayerNorm_out"), t, epsilon=desc.epsilon)
        if flat:
            y = em.reshape(y, em.node("Shape", [before])[0])  # keeps an empty batch empty
    else:
        op = "LayerNormalization" if desc.kind == "layer" else "RMSNormalization"
        inputs = [x, gamma] + ([beta] if beta else [])
        y = em.node(op, inputs, axis=-k, epsilon=desc.epsilon, stash_type=em.compute_type)[0]

    if perm is not None:
        y = em.node("Transpose", [y], perm=[int(i) for i in np.argsort(perm)])[0]
    if t != t_out:
        y = em.node("Cast", [y], to=t_out)[0]
    em.nodes[-1].output[0] = desc.y.name


def _read_type(g, node: Node) -> int | None:
    """The element type of the first constant ``node`` reads (behind a Cast: the Cast's)."""
    for t in node.inputs:
        p = t.inputs[0] if len(t.inputs) == 1 else None
        if p is not None and p.op == "Cast" and p.inputs and g.is_constant(p.inputs[0]):
            return int(p.attrs["to"])
        if g.is_constant(t):
            return g.elem_type(t)
    return None


def _normalized_shape(g, desc: NormDesc, xshape) -> list | None:
    """Sizes of the normalized dims, static where known (from the input, else from γ/β)."""
    dims: list = [None] * len(desc.axes)
    if xshape is not None:
        dims = [xshape[a] if isinstance(xshape[a], int) else None for a in desc.axes]
    for t in (desc.gamma, desc.beta):
        if t is None:
            continue
        ps = g.fixed_shape(t)
        for i, a in enumerate(desc.axes):
            if -a <= len(ps) and ps[a] != 1 and dims[i] is None:
                dims[i] = int(ps[a])
    return None if any(d is None for d in dims) else dims


def _initializer_behind(g, t):
    """The initializer that ``t`` copies through Identity nodes, else ``t``.  Exporters share one
    initializer among equal parameters that way; read directly, it is a constant TensorRT folds
    into the plugin's input, not an Identity copy layer it runs on every inference."""
    src = t
    while src.const is None and len(src.inputs) == 1:
        node = src.inputs[0]
        if node.op != "Identity" or node.domain not in ("", "ai.onnx") or not node.inputs:
            break
        src = node.inputs[0]
    return src if src is not t and src.const is not None and not g.overridable(src) else t


def _affine(em: Emitter, g, param, desc: NormDesc, norm_shape, out_shape, t: int, fill: float, hint: str) -> str:
    """γ or β as a constant of exactly ``out_shape`` and type ``t`` (made when absent)."""
    np_type = helper.tensor_dtype_to_np_dtype(t)
    if param is None:
        if out_shape is None:
            raise Reject(f"{hint} is absent and the normalized size is not static")
        return em.const(hint, np.full(out_shape, fill, dtype=np_type))
    param = _initializer_behind(g, param)
    pshape = list(g.fixed_shape(param))
    if pshape == out_shape and g.elem_type(param) == t:
        return param.name  # already right: no copy, no read of the weights
    if norm_shape is None:
        raise Reject(f"{hint} {param.name!r} must be reshaped and the normalized size is not static")
    if g.overridable(param):
        # Its value may be fed: reshape and cast it in the graph, never bake it.
        if int(np.prod(pshape)) != int(np.prod(out_shape)):
            raise Reject(f"{hint} {param.name!r} of shape {pshape} must be broadcast to {out_shape}, which would bake "
                         f"its value: {g.not_constant_reason(param)}")
        name = param.name
        if pshape != out_shape:
            name = em.node("Reshape", [name, em.const(hint + "_shape", np.array(out_shape, np.int64))])[0]
        if g.elem_type(param) != t:
            name = em.node("Cast", [name], to=t)[0]
        return name
    value = g.constant_value(param)
    if value is None:
        raise Reject(f"{hint} {param.name!r} is too large to reshape")
    # Right-align with the input; the dims outside the normalized axes are all 1 (checked),
    # so keeping the normalized dims in order is a plain reshape.
    length = max(value.ndim, -min(desc.axes))
    value = value.reshape([1] * (length - value.ndim) + list(value.shape))
    value = value.reshape([value.shape[a] for a in desc.axes])
    value = np.broadcast_to(value, norm_shape).reshape(out_shape)
    return em.const(hint, value.astype(np_type))
