"""Symbolic shapes: whether two tensors have one shape, whatever sizes the graph is fed.

The skip norms' plugins add x and skip elementwise, without broadcasting, so the rule must
prove that the residual Add's operands have one shape.  Legacy exports carry no shapes for
intermediates, and ONNX shape inference names every dynamic dim afresh (``unk__46``), so
equal sizes look unrelated.  This analysis derives shapes from the graph's structure instead:
each dim is a *term* that names a runtime size, and two tensors have one shape when their
terms are equal (or compatible, see below).

Terms: an ``int`` (a static size); ``("dim", id, axis, name)``: the size of a tensor the
analysis cannot see through (a graph input, an op it does not model) along an axis;
``("bcast", terms)``: the broadcast of sizes that may differ; ``("prod", factors, k)``: a
product (a Reshape's -1, a Flatten); ``("or0", e, c)``: a Reshape element ``e`` that is copied
from the input's size ``c`` where ``e`` is 0 (``allowzero=0``); ``("eq", terms)``: one size
that each of ``terms`` names (a broadcast of sizes none of which can be 1, see ``never_one``).

What makes it sound: a term names the same runtime value wherever it appears, because it is
derived only from the tensor's ancestors, assuming they ran (as ``_norm._proven_dim`` does:
"or the op fails").  A broadcast that succeeded gives the one size other than 1, so it equals
each of its sizes that can never be 1 (k*x with |k| >= 2 is 0 or >= 2: ``never_one``), and
those are equal to one another wherever it ran ("eq": a term downstream of the broadcast, so
the broadcast ran wherever it is used); a Concat the size its inputs share; a Reshape exactly
its shape vector's elements (0 copies, -1 divides); ``Shape(x)`` and ``Gather``/``Slice``/
``Concat`` of it give ``x``'s terms back as values.  Anything not modelled falls back to what
shape inference annotates (ints kept, every other dim a fresh opaque term), or to "unknown",
which proves nothing.  Graph inputs' named dims are not taken as equal across inputs
(onnxruntime does not check them).

Sizes of 0 need care: where a Reshape element ``e`` taken from a Shape is 0, ``allowzero=0``
copies the input's size instead, so the result is ``e`` only where ``e`` is not 0.  Such a
term is still *compatible* with ``e`` when, where ``e`` is 0, it is 0 or a size other than 1:
then a broadcast of the two (the residual Add itself) succeeds only if they are equal.

Computed once per scope in node order (no recursion over the graph's depth) and kept on the
``ModelGraph`` for the whole pass: a query after that is a dictionary lookup.
"""

from __future__ import annotations

import itertools
import logging

import numpy as np
import onnx

from fusion.ir.graph import producer
from fusion.ir.view import Node, Tensor
from fusion.rewrite import specs

log = logging.getLogger(__name__)

# Ops whose outputs have their first input's shape.
SAME_SHAPE = frozenset(
    "Abs Acos Acosh Asin Asinh Atan Atanh BatchNormalization Cast CastLike Ceil Celu Clip Cos Cosh CumSum Dropout "
    "Elu Erf Exp Floor Gelu GroupNormalization HardSigmoid HardSwish Hardmax Identity InstanceNormalization IsInf "
    "IsNaN LayerNormalization LeakyRelu Log LogSoftmax LpNormalization Mish Neg Not RMSNormalization Reciprocal "
    "Relu Round Selu Shrink Sigmoid Sign Sin Sinh Softmax Softplus Softsign Sqrt Tan Tanh ThresholdedRelu "
    "Trilu".split()
)
# Of these, the outputs besides the first have another shape (a norm's saved statistics).
_FIRST_ONLY = frozenset({"BatchNormalization", "LayerNormalization", "RMSNormalization"})
# Multidirectional broadcasting: the output has the broadcast of the inputs' shapes.
BROADCAST = frozenset(
    "Add And BitShift BitwiseAnd BitwiseOr BitwiseXor Div Equal Greater GreaterOrEqual Less LessOrEqual Max Mean "
    "Min Mod Mul Or PRelu Pow Sub Sum Where Xor".split()
)
# Our plugins (fusion.rewrite.specs): every output has the shape of input 0.
_PLUGIN_SAME = frozenset({s.op_type for s in (specs.FUSED_LAYER_NORM, specs.FUSED_RMS_NORM, specs.FUSED_GROUP_NORM,
                                              specs.FUSED_SKIP_LAYER_NORM, specs.FUSED_SKIP_RMS_NORM)})
_INT_TYPES = frozenset({onnx.TensorProto.INT64, onnx.TensorProto.INT32, onnx.TensorProto.INT16,
                        onnx.TensorProto.INT8, onnx.TensorProto.UINT64, onnx.TensorProto.UINT32,
                        onnx.TensorProto.UINT16, onnx.TensorProto.UINT8})
MAX_VALUE = 64  # elements of an int tensor followed as a value (shape vectors are short)
MAX_TERM = 2000  # characters of a term's repr: beyond, the size is taken as opaque


# -- terms --------------------------------------------------------------------------------


def _order(term) -> tuple:
    """Sort key of terms in a product or broadcast: by name (for messages), then identity."""
    return describe(term), repr(term)


def opaque(t: Tensor, axis: int) -> tuple:
    """The size of ``t`` along ``axis``, as a term the analysis cannot see into."""
    return ("dim", id(t), axis, t.name)


def _atoms(term) -> tuple[list, int]:
    """A product's symbolic factors and integer coefficient."""
    if isinstance(term, int):
        return [], term
    if term[0] == "prod":
        return list(term[1]), term[2]
    return [term], 1


def product(factors, k: int = 1):
    """The term for ``k`` times the product of ``factors``."""
    atoms, coeff = [], k
    for f in factors:
        a, c = _atoms(f)
        atoms += a
        coeff *= c
    if coeff == 0 or not atoms:
        return coeff
    if len(atoms) == 1 and coeff == 1:
        return atoms[0]
    return ("prod", tuple(sorted(atoms, key=_order)), coeff)


def equal(terms):
    """The term for one size that each of ``terms`` names (their "eq"; a single term itself)."""
    members: list = []
    for t in terms:
        for m in t[1] if isinstance(t, tuple) and t[0] == "eq" else [t]:
            if m not in members:
                members.append(m)
    known = [m for m in members if isinstance(m, int)]
    if known or len(members) == 1:
        return known[0] if known else members[0]  # (two ints: the model stops before here)
    return ("eq", tuple(sorted(members, key=_order)))


def alternatives(term, limit: int = 8) -> list:
    """Terms for the size ``term`` names: itself, an "eq"'s members, a product with an "eq"
    factor replaced by each member (at most ``limit``: fewer proves less, nothing false)."""
    if isinstance(term, int) or term[0] not in ("eq", "prod"):
        return [term]
    if term[0] == "eq":
        return list(term[1])
    choices = [f[1] if isinstance(f, tuple) and f[0] == "eq" else (f,) for f in term[1]]
    if all(len(c) == 1 for c in choices):
        return [term]
    return [term] + [product(fs, term[2]) for fs in itertools.islice(itertools.product(*choices), limit)]


def never_one(term) -> bool:
    """Whether the size ``term`` is 1 nowhere.  k times a product of sizes (integers) is a
    multiple of k: with |k| >= 2, it is 0 or at least 2 in magnitude, never 1."""
    if isinstance(term, int):
        return term != 1
    kind = term[0]
    if kind == "prod":
        return abs(term[2]) >= 2 and all(isinstance(f, tuple) and f[0] in ("dim", "bcast", "or0", "eq") for f in term[1])
    if kind == "or0":  # e where e is not 0, c where it is
        return never_one(term[1]) and never_one(term[2])
    if kind == "eq":  # one size: if one name of it is never 1, it is never 1
        return any(never_one(m) for m in term[1])
    return False


def nominal(term):
    """``term`` without its ``or0`` wrappers: where the nominal size is not 0, ``term`` has it."""
    while isinstance(term, tuple) and term[0] == "or0":
        term = term[1]
    return term


def zero_value(term, n) -> int | None:
    """The value of ``term`` where the size ``n`` is 0 (None when that does not fix it).  A
    broadcast involving a 0 is 0 (or fails); a product with a factor of 0 is 0."""
    if term == n:
        return 0
    if isinstance(term, int):
        return term
    if isinstance(n, tuple) and n[0] == "eq":  # where n is 0, so is each of its members
        return next((z for z in (zero_value(term, m) for m in n[1]) if z is not None), None)
    if isinstance(n, tuple) and n[0] == "prod" and list(n[1]) == [term]:
        return 0  # n is k times term (k not 0): 0 only where term is
    kind = term[0]
    if kind == "eq":  # each member is term: one fixed there fixes it
        return next((z for z in (zero_value(m, n) for m in term[1]) if z is not None), None)
    if kind == "or0":
        z = zero_value(term[1], n)
        return z if z is None or z != 0 else zero_value(term[2], n)
    if kind in ("bcast", "prod"):
        if isinstance(n, tuple) and n[0] == kind and set(n[1]) <= set(term[1]):
            return 0  # n broadcast (or multiplied) with more sizes
        parts = [zero_value(p, n) for p in term[1]]
        if 0 in parts:
            return 0
        if kind == "prod" and all(p is not None for p in parts):
            return int(np.prod(parts, dtype=np.int64)) * term[2]
        if kind == "bcast" and all(p is not None for p in parts):
            return broadcast(parts)
    return None


def compatible(x, y) -> bool:
    """Whether sizes ``x`` and ``y`` are equal wherever a broadcast of them succeeds.

    Equal terms are.  Terms with one nominal size ``n`` are equal where ``n`` is not 0; where it
    is, they take the values ``zero_value`` fixes, and unless exactly one of them is 1 a
    broadcast of the two succeeds only when they are equal.  Terms for one size (``equal``)
    are compared by each of their names."""
    if x == y:
        return True
    return any(_compatible(a, b) for a in alternatives(x) for b in alternatives(y))


def _compatible(x, y) -> bool:
    if x == y:
        return True
    n = nominal(x)
    if nominal(y) != n:
        return False
    zx, zy = zero_value(x, n), zero_value(y, n)
    return zx is not None and zy is not None and (zx == zy or 1 not in (zx, zy))


def broadcast(terms):
    """The size a successful broadcast of ``terms`` gives (None: it cannot succeed).

    That size is each term's that is not 1.  So where some of the terms can never be 1
    (``never_one``: B*2, heads folded into a batch), it is each of those: they are equal
    wherever the broadcast succeeds (sizes 0 and n >= 2 do not broadcast either), and the
    result names them all (``equal``), the others being 1 or that size."""
    flat = []
    for t in terms:
        flat += list(t[1]) if isinstance(t, tuple) and t[0] == "bcast" else [t]
    ints = {t for t in flat if isinstance(t, int) and t != 1}
    if len(ints) > 1:
        return None
    if ints:
        return ints.pop()  # the others are 1 or that size, or the op fails
    kept: list = []
    for t in flat:
        if t == 1:
            continue
        same = next((i for i, k in enumerate(kept) if compatible(k, t)), None)
        if same is None:
            kept.append(t)
        elif t == nominal(t):  # equal where the broadcast succeeds: prefer plain sizes, keep their names
            kept[same] = equal([kept[same], t]) if kept[same] == nominal(kept[same]) else t
    if not kept:
        return 1
    sure = [t for t in kept if never_one(t)]
    if sure:
        return equal(sure)
    if len(kept) == 1:
        return kept[0]
    return ("bcast", tuple(sorted(kept, key=_order)))


def broadcast_shapes(shapes):
    """Multidirectional broadcast of shapes (tuples of terms); None if one is unknown."""
    if any(s is None for s in shapes):
        return None
    rank = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(rank):
        d = broadcast([s[i - rank + len(s)] for s in shapes if i - rank + len(s) >= 0])
        if d is None:
            return None
        out.append(d)
    return tuple(out)


def _or_zero(e, c):
    """Reshape's element ``e`` (a size) with ``allowzero=0``: ``e``, or ``c`` where ``e`` is 0."""
    if c == e or zero_value(c, nominal(e)) == 0 == zero_value(e, nominal(e)):
        return e  # c is 0 too where e is: the copy changes nothing
    return ("or0", e, c)


def describe(term) -> str:
    """A term for messages: dims by tensor name and axis."""
    if isinstance(term, int):
        return str(term)
    kind = term[0]
    if kind == "dim":
        return f"{term[3]}[{term[2]}]"
    if kind == "bcast":
        return "bcast(" + ", ".join(describe(t) for t in term[1]) + ")"
    if kind == "prod":
        parts = [describe(t) for t in term[1]] + ([str(term[2])] if term[2] != 1 else [])
        return "*".join(parts)
    if kind == "eq":
        return "(" + " = ".join(describe(t) for t in term[1]) + ")"
    return f"{describe(term[1])} (or {describe(term[2])} where 0)"


# -- the analysis -------------------------------------------------------------------------


class ScopeShapes:
    """Terms for every tensor of one scope, computed in node order on creation."""

    def __init__(self, g, scope):
        self.g = g
        self.scope = scope
        self.shapes: dict[int, tuple | None] = {}
        self.values: dict[int, tuple | None] = {}
        for node in scope.ir.nodes:
            try:
                outs = self._node(node)
            except (TypeError, ValueError, IndexError, KeyError, AttributeError, ZeroDivisionError) as e:
                # (an attribute of an unexpected type, a function body's reference): unknown
                log.debug("symbolic shapes: %s %r: %s", node.op, node.name, e)
                outs = None
            for i, t in enumerate(node.outputs):
                if id(t) in self.shapes or not t.name:
                    continue
                s = outs[i] if outs is not None and i < len(outs) else None
                if s is not None:
                    s = _static(_bounded(s, t), t, self.g.shape(t, infer=False))
                self.shapes[id(t)] = self._leaf(t) if s is None else s

    # -- lookups ----------------------------------------------------------------------------
    def shape(self, t: Tensor) -> tuple | None:
        if id(t) not in self.shapes:
            self.shapes[id(t)] = self._leaf(t)
        return self.shapes[id(t)]

    def _leaf(self, t: Tensor) -> tuple | None:
        """What ONNX says: a constant's dims, a graph input's declared ones, an annotation
        (from inference where missing); static dims kept, the others opaque."""
        dims = self.g.shape(t)
        if dims is None:
            return None
        return tuple(d if isinstance(d, int) and d >= 0 else opaque(t, i) for i, d in enumerate(dims))

    def value(self, t: Tensor, depth: int = 32) -> tuple | None:
        """The elements of a small int tensor (flattened), as terms: ints, or sizes of tensors
        (read through Shape); None if unknown."""
        if id(t) in self.values:
            return self.values[id(t)]
        self.values[id(t)] = None  # (a cycle, in a malformed graph, gives up)
        v = self._value(t, depth)
        if v is not None and len(v) > MAX_VALUE:
            v = None
        self.values[id(t)] = v
        return v

    def _int_const(self, t: Tensor) -> list[int] | None:
        if not t.name:
            return None
        p = self.g.constant_proto(t)
        if p is None or p.data_type not in _INT_TYPES:
            return None
        v = self.g.constant_value(t, max_elements=MAX_VALUE)
        return None if v is None else [int(e) for e in np.asarray(v).reshape(-1)]

    def _value(self, t: Tensor, depth: int) -> tuple | None:
        const = self._int_const(t)
        if const is not None:
            return tuple(const)
        node = producer(t)
        if node is None or depth == 0 or node.domain not in ("", "ai.onnx") or node.outputs[0] is not t:
            return None
        op, ins = node.op, node.inputs
        if op == "Shape":
            s = self.shape(ins[0])
            if s is None:
                return None
            start, end = node.attrs.get("start", 0), node.attrs.get("end")
            return tuple(s[slice(start, end)])
        if op == "Cast" and int(node.attrs.get("to", 0)) not in (onnx.TensorProto.INT64, onnx.TensorProto.INT32):
            return None  # (a narrower type could wrap a size)
        if op in ("Cast", "Identity", "Squeeze", "Unsqueeze", "Reshape", "Flatten"):
            return self.value(ins[0], depth - 1)
        if op == "Concat":
            if any(self._rank(i) != 1 for i in ins):
                return None
            parts = [self.value(i, depth - 1) for i in ins]
            return None if any(p is None for p in parts) else sum(parts, ())
        if op == "Gather" and len(ins) == 2 and int(node.attrs.get("axis", 0)) == 0:
            v, idx = self.value(ins[0], depth - 1), self._int_const(ins[1])
            if v is None or idx is None or self._rank(ins[0]) != 1 or any(not -len(v) <= i < len(v) for i in idx):
                return None
            return tuple(v[i] for i in idx)
        if op == "ConstantOfShape":
            v, fill = self.value(ins[0], depth - 1), node.attrs.get("value")
            fill = 0 if fill is None else onnx.numpy_helper.to_array(fill).reshape(-1)
            if v is None or any(not isinstance(e, int) for e in v) or np.size(fill) != 1 or \
                    getattr(fill, "dtype", np.dtype(np.int64)).kind not in "iu":
                return None
            return (int(np.reshape(fill, -1)[0]),) * int(np.prod(v, dtype=np.int64)) if np.prod(v) <= MAX_VALUE else None
        if op in _ELEMENTWISE and all(self._rank(i) in (0, 1) for i in ins):
            vs = [self.value(i, depth - 1) for i in ins]
            n = max(len(v) for v in vs) if all(v is not None for v in vs) else 0
            if not n or any(len(v) not in (1, n) for v in vs):
                return None
            out = [_ELEMENTWISE[op](*(v[k if len(v) > 1 else 0] for v in vs)) for k in range(n)]
            return None if any(e is None for e in out) else tuple(out)
        if op == "ReduceProd" and self._rank(ins[0]) == 1:
            # tf2onnx's batched MatMul (Einsum) counts its batch as the product of the batch dims.
            axes, given = self._axes(node), len(ins) > 1 and bool(ins[1].name)
            v = self.value(ins[0], depth - 1)
            if v is None or (given and axes is None) or axes not in (None, [], [0], [-1]):
                return None
            if not axes and int(node.attrs.get("noop_with_empty_axes", 0)):
                return None
            return (product(v),)
        if op == "Slice" and self._rank(ins[0]) == 1:
            v, cut = self.value(ins[0], depth - 1), self._slice_args(node)
            if v is None or cut is None or len(cut[0]) != 1 or cut[2][0] not in (0, -1) or cut[3][0] <= 0:
                return None
            return tuple(v[slice(cut[0][0], cut[1][0], cut[3][0])])
        return None

    def _rank(self, t: Tensor) -> int | None:
        s = self.shape(t)
        return None if s is None else len(s)

    def _slice_args(self, node: Node) -> tuple[list, list, list, list] | None:
        """Slice's (starts, ends, axes, steps) as ints: attributes (opset < 10) or inputs whose
        values are known."""
        if len(node.inputs) == 1:
            a = node.attrs
            starts, ends = list(a.get("starts", [])), list(a.get("ends", []))
            return starts, ends, list(a.get("axes", range(len(starts)))), [1] * len(starts)
        args = []
        for i in range(1, 5):
            t = node.inputs[i] if i < len(node.inputs) and node.inputs[i].name else None
            v = None if t is None else self.value(t)
            if t is not None and (v is None or not all(isinstance(e, int) for e in v)):
                return None
            args.append(None if t is None else list(v))
        starts, ends, axes, steps = args
        if starts is None or ends is None or len(starts) != len(ends):
            return None
        axes = list(range(len(starts))) if axes is None else axes
        steps = [1] * len(starts) if steps is None else steps
        return (starts, ends, axes, steps) if len(axes) == len(steps) == len(starts) else None

    def _axes(self, node: Node, name: str = "axes") -> list[int] | None:
        """An axes list: the attribute, or a constant second input (None if absent/unknown)."""
        if len(node.inputs) > 1 and node.inputs[1].name:
            return self._int_const(node.inputs[1])
        a = node.attrs.get(name)
        return None if a is None else [int(x) for x in a]

    # -- per op -----------------------------------------------------------------------------
    def _node(self, node: Node) -> list | None:
        """The shapes of ``node``'s outputs (None where unknown: the annotations then)."""
        ins = node.inputs
        op = node.op
        if node.domain == specs.PLUGIN_DOMAIN and op in _PLUGIN_SAME and ins:
            return [self.shape(ins[0])] * len(node.outputs)
        if node.domain == specs.PLUGIN_DOMAIN and op == specs.FUSED_FC.op_type and ins:
            x, n = self.shape(ins[0]), node.attrs.get("out_features")
            return None if x is None or not x or not isinstance(n, int) else [x[:-1] + (n,)]
        if node.domain not in ("", "ai.onnx") or not ins:
            return None
        first = self.shape(ins[0]) if ins[0].name else None
        if op in SAME_SHAPE:
            return [first] if op in _FIRST_ONLY else [first] * len(node.outputs)
        if op in BROADCAST:
            return [broadcast_shapes([self.shape(i) for i in ins if i.name])]
        if first is None:
            return None
        handler = getattr(self, "_op_" + op, None)
        return None if handler is None else handler(node, first)

    def _op_Shape(self, node: Node, x) -> list | None:
        return [(len(x[slice(node.attrs.get("start", 0), node.attrs.get("end"))]),)]

    def _op_MatMul(self, node: Node, a) -> list | None:
        b = self.shape(node.inputs[1])
        if b is None or not a or not b:
            return None
        if len(a) == 1 and len(b) == 1:
            return [()]
        if len(a) == 1:
            return [b[:-2] + b[-1:]]
        if len(b) == 1:
            return [a[:-1]]
        batch = broadcast_shapes([a[:-2], b[:-2]])
        return None if batch is None else [batch + (a[-2], b[-1])]

    def _op_Gemm(self, node: Node, a) -> list | None:
        b = self.shape(node.inputs[1])
        if b is None or len(a) != 2 or len(b) != 2:
            return None
        m = a[1] if node.attrs.get("transA", 0) else a[0]
        n = b[0] if node.attrs.get("transB", 0) else b[1]
        return [(m, n)]

    def _op_Conv(self, node: Node, x) -> list | None:
        """[N, M, spatial...]: the input's batch, the weight's first dim (or the op fails), and
        the input's spatial sizes where stride 1 and the pads make up for the kernel (a
        "same" convolution: out = in + pads - dilation*(kernel-1)); other spatial sizes opaque."""
        w = self.shape(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1].name else None
        if w is None or len(w) != len(x) or len(x) < 3:
            return None
        n = len(x) - 2
        a = node.attrs
        strides, dilations = list(a.get("strides", [1] * n)), list(a.get("dilations", [1] * n))
        pads, auto_pad = list(a.get("pads", [0] * 2 * n)), a.get("auto_pad", "NOTSET")
        auto_pad = auto_pad.decode() if isinstance(auto_pad, bytes) else auto_pad
        out = [x[0], w[0]]
        for i in range(n):
            k = w[2 + i]
            if len(strides) != n or len(dilations) != n or len(pads) != 2 * n or strides[i] != 1 or not isinstance(k, int):
                same = False
            elif auto_pad in ("SAME_UPPER", "SAME_LOWER"):
                same = True
            else:
                same = auto_pad in ("NOTSET", "VALID") and (0 if auto_pad == "VALID" else pads[i] + pads[n + i]) == dilations[i] * (k - 1)
            out.append(x[2 + i] if same else opaque(node.outputs[0], 2 + i))
        return [tuple(out)]

    def _op_Resize(self, node: Node, x) -> list | None:
        """Opset 11 on, constant scales (an upsampler's [1, 1, 2, 2]): floor(size * scale), so
        the axes of scale 1 keep the input's size; the others get sizes of their own."""
        ins = node.inputs
        if len(ins) < 3 or not ins[2].name or (len(ins) > 3 and ins[3].name) or node.attrs.get("axes") is not None:
            return None
        scales = self.g.constant_value(ins[2])
        if scales is None or scales.size != len(x):
            return None
        return [tuple(d if float(k) == 1.0 else opaque(node.outputs[0], i) for i, (d, k) in enumerate(zip(x, scales.reshape(-1))))]

    def _op_Einsum(self, node: Node, x) -> list | None:
        """An explicit equation without ellipsis (tf2onnx's Keras EinsumDense and attention): each
        output letter has its inputs' size for that letter, their broadcast where it repeats."""
        eq = node.attrs.get("equation", "")
        eq = (eq.decode() if isinstance(eq, bytes) else eq).replace(" ", "")
        if "->" not in eq or "." in eq:
            return None
        lhs, out = eq.split("->")
        subs = lhs.split(",")
        shapes = [self.shape(i) for i in node.inputs]
        if len(subs) != len(shapes) or any(s is None or len(s) != len(sub) for s, sub in zip(shapes, subs)):
            return None
        sizes: dict[str, list] = {}
        for sub, s in zip(subs, shapes):
            for letter, d in zip(sub, s):
                sizes.setdefault(letter, []).append(d)
        if any(letter not in sizes for letter in out):
            return None
        dims = [broadcast(sizes[letter]) for letter in out]
        return None if any(d is None for d in dims) else [tuple(dims)]

    def _op_GlobalAveragePool(self, node: Node, x) -> list | None:
        """The mean over every axis from 2 on, kept as 1s (tf2onnx's mean over trailing axes)."""
        return None if len(x) < 2 else [x[:2] + (1,) * (len(x) - 2)]

    def _op_Transpose(self, node: Node, x) -> list | None:
        perm = node.attrs.get("perm")
        perm = list(range(len(x)))[::-1] if perm is None else [int(p) for p in perm]
        if sorted(perm) != list(range(len(x))):
            return None
        return [tuple(x[p] for p in perm)]

    def _unknown_dims(self, node: Node, rank: int | None) -> list | None:
        """Only the rank known: each dim the output's own (opaque) size."""
        return None if rank is None else [tuple(opaque(node.outputs[0], i) for i in range(rank))]

    def _length(self, t: Tensor) -> int | None:
        """The static length of a 1-D shape vector."""
        s = self.shape(t)
        return s[0] if s is not None and len(s) == 1 and isinstance(s[0], int) else None

    def _op_Reshape(self, node: Node, x) -> list | None:
        v = self.value(node.inputs[1])
        if v is None:
            return self._unknown_dims(node, self._length(node.inputs[1]))
        allowzero = int(node.attrs.get("allowzero", 0))
        out: list = []
        minus = None
        for i, e in enumerate(v):
            if isinstance(e, int):
                if e == -1 and minus is None:
                    minus = i
                    out.append(None)
                elif e < 0:
                    return None
                elif e == 0 and not allowzero:
                    if i >= len(x):
                        return None
                    out.append(x[i])
                else:
                    out.append(e)
            elif allowzero or i >= len(x):
                out.append(e)  # (beyond the input's rank a 0 fails)
            else:
                out.append(_or_zero(e, x[i]))
        if minus is not None:
            out[minus] = _quotient(x, [d for i, d in enumerate(out) if i != minus]) or opaque(node.outputs[0], minus)
        return [tuple(out)]

    def _op_Flatten(self, node: Node, x) -> list | None:
        axis = int(node.attrs.get("axis", 1))
        axis = axis + len(x) if axis < 0 else axis
        return [(product(x[:axis]), product(x[axis:]))]

    def _op_Expand(self, node: Node, x) -> list | None:
        v = self.value(node.inputs[1])
        if v is None:
            n = self._length(node.inputs[1])
            return None if n is None else self._unknown_dims(node, max(n, len(x)))
        if any(isinstance(e, int) and e < 0 for e in v):
            return None
        return [broadcast_shapes([x, v])]

    def _op_ConstantOfShape(self, node: Node, x) -> list | None:
        v = self.value(node.inputs[0])
        if v is None:
            return self._unknown_dims(node, self._length(node.inputs[0]))
        if any(isinstance(e, int) and e < 0 for e in v):
            return None
        return [tuple(v)]

    def _op_Range(self, node: Node, x) -> list | None:
        start, limit, delta = (self.value(i) for i in node.inputs[:3])
        if start is None or limit is None or delta is None or len(start) != 1 or len(limit) != 1 or len(delta) != 1:
            return None
        (s,), (l,), (d,) = start, limit, delta
        if all(isinstance(e, int) for e in (s, l, d)) and d != 0:
            return [(max(0, -(-(l - s) // d)),)]
        if s == 0 and d == 1 and not isinstance(l, int):
            return [(l,)]  # a size: 0..l-1
        return None

    def _op_Gather(self, node: Node, data) -> list | None:
        idx = self.shape(node.inputs[1])
        axis = int(node.attrs.get("axis", 0))
        axis = axis + len(data) if axis < 0 else axis
        if idx is None or not 0 <= axis < len(data):
            return None
        return [data[:axis] + idx + data[axis + 1:]]

    def _op_Unsqueeze(self, node: Node, x) -> list | None:
        axes = self._axes(node)
        if axes is None:
            return None
        rank = len(x) + len(axes)
        axes = {a + rank if a < 0 else a for a in axes}
        if len(axes) != rank - len(x) or not axes <= set(range(rank)):
            return None
        it = iter(x)
        return [tuple(1 if i in axes else next(it) for i in range(rank))]

    def _op_Squeeze(self, node: Node, x) -> list | None:
        axes = self._axes(node)
        if axes is None:
            if any(not isinstance(d, int) for d in x):
                return None  # which dims are 1 is not known
            return [tuple(d for d in x if d != 1)]
        axes = {a + len(x) if a < 0 else a for a in axes}
        return [tuple(d for i, d in enumerate(x) if i not in axes)]

    def _reduce(self, node: Node, x, axes_name: str = "axes") -> list | None:
        axes = self._axes(node, axes_name)
        if axes is None and len(node.inputs) > 1 and node.inputs[1].name:
            return None  # axes not constant
        if not axes:
            if int(node.attrs.get("noop_with_empty_axes", 0)):
                return [x]
            axes = list(range(len(x)))
        axes = {a + len(x) if a < 0 else a for a in axes}
        keep = int(node.attrs.get("keepdims", 1))
        return [tuple(1 if i in axes else d for i, d in enumerate(x) if keep or i not in axes)]

    _op_ReduceMean = _op_ReduceSum = _op_ReduceSumSquare = _op_ReduceMax = _op_ReduceMin = _op_ReduceProd = _reduce
    _op_ReduceL1 = _op_ReduceL2 = _op_ReduceLogSum = _op_ReduceLogSumExp = _reduce

    def _op_Concat(self, node: Node, x) -> list | None:
        shapes = [self.shape(i) for i in node.inputs]
        if any(s is None or len(s) != len(x) for s in shapes):
            return None
        axis = int(node.attrs.get("axis", 0))
        axis = axis + len(x) if axis < 0 else axis
        out = []
        for i in range(len(x)):
            dims = [s[i] for s in shapes]
            if i == axis:
                ints = [d for d in dims if isinstance(d, int)]
                rest = [d for d in dims if not isinstance(d, int)]
                out.append(sum(ints) if not rest else rest[0] if len(rest) == 1 and sum(ints) == 0
                           else opaque(node.outputs[0], i))
            else:  # the inputs agree there (or the Concat fails): any of them names it
                out.append(next((d for d in dims if isinstance(d, int)), dims[0]))
        return [tuple(out)]

    def _op_Split(self, node: Node, x) -> list | None:
        axis = int(node.attrs.get("axis", 0))
        axis = axis + len(x) if axis < 0 else axis
        if not 0 <= axis < len(x):
            return None
        sizes = self._int_const(node.inputs[1]) if len(node.inputs) > 1 and node.inputs[1].name else None
        if sizes is None and len(node.inputs) > 1 and node.inputs[1].name:
            return None
        sizes = sizes if sizes is not None else node.attrs.get("split")
        n = len(node.outputs)
        if sizes is None:
            d = x[axis]
            if not isinstance(d, int) or d % n:
                return [x[:axis] + (opaque(o, axis),) + x[axis + 1:] for o in node.outputs]
            sizes = [d // n] * n
        if len(sizes) != n:
            return None
        return [x[:axis] + (int(s),) + x[axis + 1:] for s in sizes]

    def _op_Slice(self, node: Node, x) -> list | None:
        cut = self._slice_args(node)
        if cut is None:  # bounds unknown: the axes sliced get sizes of their own
            axes = self._int_const(node.inputs[3]) if len(node.inputs) > 3 and node.inputs[3].name else None
            if axes is None:
                return None
            axes = {a + len(x) if a < 0 else a for a in axes}
            return [tuple(opaque(node.outputs[0], i) if i in axes else d for i, d in enumerate(x))]
        out = list(x)
        for start, end, axis, step in zip(*cut):
            axis = axis + len(x) if axis < 0 else axis
            if not 0 <= axis < len(x) or step == 0:
                return None
            d = x[axis]
            if isinstance(d, int):
                out[axis] = len(range(d)[slice(start, end, step)])
            elif start == 0 and step == 1 and end >= 2**31 - 1:
                out[axis] = d  # the whole axis
            else:
                out[axis] = opaque(node.outputs[0], axis)
        return [tuple(out)]


def _arith(op):
    """An int op on value elements; symbolic ones where it is the identity, a size times a
    positive int, or a product divided exactly by a positive int (diffusers' attention: heads
    folded into the batch as B*h, unfolded as (B*h)/h)."""
    unit = {"Add": 0, "Sub": 0, "Mul": 1, "Div": 1}[op]
    f = {"Add": lambda x, y: x + y, "Sub": lambda x, y: x - y, "Mul": lambda x, y: x * y,
         "Div": lambda x, y: None if y == 0 or x % y else x // y}[op]  # (exact only: no rounding to mimic)

    def apply(x, y):
        if isinstance(x, int) and isinstance(y, int):
            return f(x, y)
        if y == unit:
            return x
        if op in ("Add", "Mul") and x == unit:
            return y
        if op == "Mul" and (isinstance(x, int) or isinstance(y, int)):
            k, t = (x, y) if isinstance(x, int) else (y, x)
            return product([t], k) if k > 0 else None  # (a size is not negative: -1 stays unmodelled)
        if op == "Div" and isinstance(y, int) and y > 0:
            out = [product(atoms, k // y) for atoms, k in map(_atoms, alternatives(x)) if k > 0 and k % y == 0]
            return equal(out) if out else None
        return None
    return apply


def _equal(x, y):
    """Equal on value elements (1/0): a size is never negative."""
    if x == y:
        return 1
    if isinstance(x, int) and isinstance(y, int):
        return 0
    k = x if isinstance(x, int) else y if isinstance(y, int) else None
    return 0 if k is not None and k < 0 else None


def _max(x, y):
    """Max on value elements: equal sizes, or ints (Max(1, d) is not d where d is 0)."""
    if x == y:
        return x
    return max(x, y) if isinstance(x, int) and isinstance(y, int) else None


def _where(c, x, y):
    return None if not isinstance(c, int) else x if c else y


# Elementwise ops followed on shape vectors (TorchScript's Expand writes -1 as Where(v == -1, 1, v); tf2onnx's
# batched MatMul takes the broadcast batch shape as Max of the operands').
_ELEMENTWISE = {"Add": _arith("Add"), "Sub": _arith("Sub"), "Mul": _arith("Mul"), "Div": _arith("Div"), "Equal": _equal,
                "Where": _where, "Max": _max}


def _bounded(s: tuple, t: Tensor) -> tuple:
    """``s`` with terms grown past MAX_TERM (nested copies and broadcasts, layer after layer)
    replaced by ``t``'s own opaque sizes: what they proved is lost, nothing false is claimed."""
    return tuple(d if isinstance(d, int) or len(repr(d)) <= MAX_TERM else opaque(t, i) for i, d in enumerate(s))


def _static(s: tuple, t: Tensor, annotated) -> tuple:
    """``s`` with ``t``'s own opaque dims replaced by static ones its annotation gives."""
    if annotated is None or len(annotated) != len(s):
        return s
    return tuple(a if d == opaque(t, i) and isinstance(a, int) and a >= 0 else d for i, (d, a) in enumerate(zip(s, annotated)))


def _quotient(x, others) -> object | None:
    """Reshape's -1: the input's element count over the other dims (onnxruntime refuses a
    product of 0 there, so the division is exact); None where the terms do not cancel.  Each
    name of a size (``alternatives``) is tried: the quotients found are one size."""
    out = [q for num in alternatives(product(x)) for den in alternatives(product(others))
           if (q := _cancel(num, den)) is not None]
    return equal(out) if out else None


def _cancel(num, den) -> object | None:
    atoms, k = _atoms(num)
    den_atoms, d = _atoms(den)
    for a in den_atoms:
        if a not in atoms:
            return None
        atoms.remove(a)
    if d == 0 or k % d:
        return None
    return product(atoms, k // d)


# -- queries ------------------------------------------------------------------------------


def scope_shapes(g, scope) -> ScopeShapes:
    """The analysis of ``scope``, made once per graph (``ModelGraph.analyses``)."""
    cache = g.analyses.setdefault("symbolic_shapes", {})
    found = cache.get(id(scope))
    if found is None or found.scope is not scope:
        found = cache[id(scope)] = ScopeShapes(g, scope)
    return found


def terms(g, t: Tensor, scope) -> tuple | None:
    """``t``'s shape as terms (None when even its rank is unknown)."""
    return scope_shapes(g, scope).shape(t)


def static_dims(g, t: Tensor, scope) -> list | None:
    """``t``'s dims as ``ModelGraph.shape`` gives them: ints where static, None elsewhere."""
    s = terms(g, t, scope)
    return None if s is None else [d if isinstance(d, int) else None for d in s]


def same_shape(g, a: Tensor, b: Tensor, scope) -> bool:
    """Whether ``a`` and ``b`` have one shape wherever a broadcast of them succeeds: of one
    rank, with compatible terms on every axis."""
    sa, sb = terms(g, a, scope), terms(g, b, scope)
    return sa is not None and sb is not None and len(sa) == len(sb) and all(map(compatible, sa, sb))
