"""A weight written as data movement on a constant, folded when fusing (the FC rule's W).

tf2onnx writes some Keras Dense / EinsumDense kernels as ``Gemm(x, Reshape(W, shape))``: the
initializer is reshaped at run time, its target shape often computed from the initializer's
own shape (``Concat([-1], ReduceProd(Gather(Shape(W), [3, 4])))``).  Such a weight is a
constant all the same.  :func:`trace` follows a chain of Reshape, Transpose, Identity,
Squeeze, Unsqueeze and same-type Cast nodes back to the constant it starts from and works out
the shape it ends with, without reading the weight; :func:`fold` computes its value when the
rewrite needs it.

Sound only for a true constant: a chain that starts at an initializer a caller may feed (an
overridable one, see fusion.ir.graph) is refused, and so is a Reshape whose target shape is
not computed from constants and static shapes alone.  The chain's nodes are not part of the
match: the editor drops them (and their shape computation) once nothing reads them, and
keeps them where something else does.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import TensorProto

from fusion.ir.graph import ModelGraph, producer
from fusion.ir.view import AttributeRef, Node, Tensor
from fusion.rewrite.editor import Reject

# Ops that move or relabel a tensor's elements without changing any of them.
MOVES = frozenset({"Reshape", "Transpose", "Identity", "Squeeze", "Unsqueeze", "Cast"})
MAX_CHAIN = 16  # data-movement nodes followed back from the weight
MAX_SHAPE_NODES = 32  # nodes of one Reshape's shape computation
_INT_TYPES = (np.int32, np.int64)


@dataclass
class Step:
    node: Node
    shape: tuple[int, ...]  # the node's output shape
    perm: tuple[int, ...] | None = None  # Transpose only


@dataclass
class Chain:
    """``tensor`` = the steps applied to constant ``source``; shape and type are the folded ones."""

    tensor: Tensor
    source: Tensor
    source_shape: tuple[int, ...]
    steps: list[Step]  # in order of computation (the one reading ``source`` first)
    shape: tuple[int, ...]
    elem_type: int

    def describe(self) -> str:
        ops = " of ".join(f"{s.node.op} {s.node.name!r}" for s in reversed(self.steps))
        return f"{ops} of constant {self.source.name!r} {list(self.source_shape)}"


def _default(node: Node) -> bool:
    return node.domain in (None, "", "ai.onnx")


def trace(g: ModelGraph, t: Tensor, what: str) -> Chain | None:
    """The chain ``t`` is computed by, or None where ``t`` is not data movement of a constant
    or of an initializer (a computed operand: the caller's reason stands).  Raises Reject when
    it is one but cannot be folded: the initializer may be fed, or a shape is not constant."""
    nodes: list[Node] = []
    src = t
    while not g.is_constant(src) and not g.overridable(src):
        node = producer(src)
        if node is None or not _default(node) or node.op not in MOVES or not node.inputs or len(nodes) >= MAX_CHAIN:
            return None
        nodes.append(node)
        src = node.inputs[0]
    if not nodes:
        return None
    where = f"{what}: weight {t.name!r} = " + " of ".join(f"{n.op} {n.name!r}" for n in nodes) + f" of {src.name!r}"
    nodes.reverse()
    if g.overridable(src):
        raise Reject(f"{where}: {g.not_constant_reason(src)}")
    shape = source_shape = g.constant_shape(src)
    elem_type = g.elem_type(src)
    steps: list[Step] = []
    for node in nodes:
        step = _step(g, node, shape, elem_type, f"{where}; {node.op} {node.name!r}")
        steps.append(step)
        shape = step.shape
    return Chain(t, src, source_shape, steps, shape, elem_type)


def fold(g: ModelGraph, chain: Chain) -> np.ndarray:
    """The chain's value (reads the whole constant: only a rewrite that bakes it calls this)."""
    value = g.constant_value(chain.source, max_elements=1 << 62)
    if value is None:  # trace saw a constant: only a vanished proto could get here
        raise Reject(f"weight {chain.tensor.name!r}: constant {chain.source.name!r} cannot be read")
    for step in chain.steps:
        value = np.transpose(value, step.perm) if step.perm is not None else value.reshape(step.shape)
    return np.ascontiguousarray(value)


# -- one node -------------------------------------------------------------------------------


def _step(g: ModelGraph, node: Node, shape: tuple[int, ...], elem_type: int, where: str) -> Step:
    attrs = node.attrs
    if any(isinstance(v, AttributeRef) for v in attrs.values()):
        raise Reject(f"{where}: an attribute refers to the calling function's, unknown when fusing")
    rank = len(shape)
    if node.op == "Identity":
        return Step(node, shape)
    if node.op == "Cast":
        if attrs.get("to") != elem_type:
            to = attrs.get("to")
            name = TensorProto.DataType.Name(to) if to in TensorProto.DataType.values() else to
            raise Reject(f"{where} converts {TensorProto.DataType.Name(elem_type)} to {name}: not data movement")
        return Step(node, shape)
    if node.op == "Transpose":
        perm = tuple(int(p) for p in attrs.get("perm", range(rank - 1, -1, -1)))
        if sorted(perm) != list(range(rank)):
            raise Reject(f"{where}: perm {list(perm)} is not a permutation of {rank} axes")
        return Step(node, tuple(shape[p] for p in perm), perm)
    if node.op == "Reshape":
        if len(node.inputs) < 2 or not node.inputs[1].name:
            raise Reject(f"{where} has no target shape")
        target = _shape_input(g, node.inputs[1], f"{where}: target shape {node.inputs[1].name!r}")
        return Step(node, _reshaped(shape, target, bool(attrs.get("allowzero", 0)), where))
    axes = _axes(g, node, where)
    if node.op == "Squeeze":
        if axes is None:
            return Step(node, tuple(d for d in shape if d != 1))
        axes = _normalized(axes, rank, where)
        if any(shape[a] != 1 for a in axes):
            raise Reject(f"{where} removes axes {sorted(axes)} of shape {list(shape)}, not all of size 1")
        return Step(node, tuple(d for i, d in enumerate(shape) if i not in axes))
    # Unsqueeze
    if axes is None:
        raise Reject(f"{where} has no axes")
    out_rank = rank + len(axes)
    axes = _normalized(axes, out_rank, where)
    dims = iter(shape)
    return Step(node, tuple(1 if i in axes else next(dims) for i in range(out_rank)))


def _axes(g: ModelGraph, node: Node, where: str) -> list[int] | None:
    """Squeeze / Unsqueeze axes: an attribute before opset 13, an optional input from it."""
    if len(node.inputs) > 1 and node.inputs[1].name:
        return [int(a) for a in _ints(g, node.inputs[1], f"{where}: axes {node.inputs[1].name!r}", MAX_SHAPE_NODES).reshape(-1)]
    axes = node.attrs.get("axes")
    return None if axes is None else [int(a) for a in axes]


def _normalized(axes: list[int], rank: int, where: str) -> set[int]:
    out = {a + rank if a < 0 else a for a in axes}
    if len(out) != len(axes) or any(not 0 <= a < rank for a in out):
        raise Reject(f"{where}: axes {axes} are not distinct axes of rank {rank}")
    return out


def _reshaped(shape: tuple[int, ...], target: list[int], allowzero: bool, where: str) -> tuple[int, ...]:
    """ONNX Reshape's output shape: 0 copies the input's dim (unless allowzero), -1 is inferred."""
    dims = []
    for i, d in enumerate(target):
        if d == 0 and not allowzero:
            if i >= len(shape):
                raise Reject(f"{where}: target {target} copies dim {i} of the rank-{len(shape)} input")
            d = shape[i]
        dims.append(d)
    size = int(np.prod(shape, dtype=np.int64))
    if dims.count(-1) > 1 or any(d < -1 for d in dims):
        raise Reject(f"{where}: target {target} is not a valid shape")
    if -1 in dims:
        known = int(np.prod([d for d in dims if d != -1], dtype=np.int64))
        if known == 0 or size % known:
            raise Reject(f"{where}: target {target} does not divide {size} elements")
        dims[dims.index(-1)] = size // known
    if int(np.prod(dims, dtype=np.int64)) != size:
        raise Reject(f"{where}: target {target} does not hold the {size} elements of shape {list(shape)}")
    return tuple(int(d) for d in dims)


# -- shape computations -----------------------------------------------------------------------


def _shape_input(g: ModelGraph, t: Tensor, where: str) -> list[int]:
    value = _ints(g, t, where, MAX_SHAPE_NODES)
    if value.ndim != 1:
        raise Reject(f"{where} has rank {value.ndim}, not 1")
    return [int(v) for v in value]


def _ints(g: ModelGraph, t: Tensor, where: str, budget: int) -> np.ndarray:
    """The value of an integer tensor computed from constants and static shapes only."""
    return _eval(g, t, where, [budget])


def _eval(g: ModelGraph, t: Tensor, where: str, budget: list[int]) -> np.ndarray:
    value = g.constant_value(t, max_elements=1 << 10)
    if value is not None:
        if value.dtype not in _INT_TYPES:
            raise Reject(f"{where}: {t.name!r} is {value.dtype}, not an integer tensor")
        return value.astype(np.int64)
    if g.is_constant(t):
        raise Reject(f"{where}: constant {t.name!r} is too large for a shape")
    if g.overridable(t):
        raise Reject(f"{where}: {g.not_constant_reason(t)}")
    node = producer(t)
    if node is None:
        raise Reject(f"{where}: {t.name!r} is a graph input, not a constant")
    budget[0] -= 1
    if budget[0] < 0:
        raise Reject(f"{where}: computed by more than {MAX_SHAPE_NODES} nodes")
    if not _default(node) or node.op not in _FOLDERS or any(isinstance(v, AttributeRef) for v in node.attrs.values()):
        raise Reject(f"{where}: {t.name!r} is computed by {node.op} {node.name!r}, which is not folded from constants")
    if node.op == "Shape":  # reads only its input's shape, never its value
        return _shape_of(g, node, where)
    args = [None if not i.name else _eval(g, i, where, budget) for i in node.inputs]
    return _FOLDERS[node.op](node, args, where)


def _shape_of(g: ModelGraph, node: Node, where: str) -> np.ndarray:
    u = node.inputs[0]
    dims = g.fixed_shape(u)  # a constant, or an initializer whose graph input pins its shape
    if dims is None:
        chain = trace(g, u, where)
        if chain is None:
            raise Reject(f"{where}: Shape {node.name!r} reads {u.name!r}, whose shape is not known when fusing")
        dims = chain.shape
    rank = len(dims)
    start, end = int(node.attrs.get("start", 0)), node.attrs.get("end")
    end = rank if end is None else int(end)
    start, end = (min(max(v + rank if v < 0 else v, 0), rank) for v in (start, end))
    return np.array(dims[start:end], np.int64)


def _gather(node: Node, args, where: str) -> np.ndarray:
    data, idx = args
    axis = int(node.attrs.get("axis", 0))
    if data.ndim != 1 or axis not in (0, -1):
        raise Reject(f"{where}: Gather {node.name!r} on rank {data.ndim} along axis {axis} is not folded")
    if np.any(idx < -len(data)) or np.any(idx >= len(data)):
        raise Reject(f"{where}: Gather {node.name!r} indices {idx.tolist()} out of range for {len(data)}")
    return np.take(data, idx)


def _concat(node: Node, args, where: str) -> np.ndarray:
    if any(a.ndim != 1 for a in args) or int(node.attrs.get("axis", 0)) not in (0, -1):
        raise Reject(f"{where}: Concat {node.name!r} is not of vectors along axis 0")
    return np.concatenate(args)


def _reduce_prod(node: Node, args, where: str) -> np.ndarray:
    data = args[0]
    axes = node.attrs.get("axes")
    if len(args) > 1 and args[1] is not None:  # an input from opset 18
        axes = args[1].reshape(-1).tolist()
    if axes is not None and not axes and node.attrs.get("noop_with_empty_axes", 0):
        return data
    if data.ndim != 1 or (axes and [int(a) for a in axes] not in ([0], [-1])):
        raise Reject(f"{where}: ReduceProd {node.name!r} over axes {axes} of rank {data.ndim} is not folded")
    out = np.prod(data, dtype=np.int64)
    return out.reshape(1) if node.attrs.get("keepdims", 1) else out


def _squeeze(node: Node, args, where: str) -> np.ndarray:
    axes = node.attrs.get("axes") if len(args) < 2 or args[1] is None else args[1].tolist()
    data = args[0]
    if axes is None:
        return data.reshape([d for d in data.shape if d != 1])
    axes = _normalized([int(a) for a in axes], data.ndim, where)
    if any(data.shape[a] != 1 for a in axes):
        raise Reject(f"{where}: Squeeze {node.name!r} removes an axis not of size 1")
    return data.reshape([d for i, d in enumerate(data.shape) if i not in axes])


def _unsqueeze(node: Node, args, where: str) -> np.ndarray:
    axes = node.attrs.get("axes") if len(args) < 2 or args[1] is None else args[1].tolist()
    if axes is None:
        raise Reject(f"{where}: Unsqueeze {node.name!r} has no axes")
    data = args[0]
    rank = data.ndim + len(axes)
    axes = _normalized([int(a) for a in axes], rank, where)
    dims = iter(data.shape)
    return data.reshape([1 if i in axes else next(dims) for i in range(rank)])


def _slice(node: Node, args, where: str) -> np.ndarray:
    data = args[0]
    if len(args) > 1:  # from opset 10 starts, ends, axes and steps are inputs
        starts, ends = args[1], args[2]
        axes, steps = (args[i] if len(args) > i else None for i in (3, 4))
    else:
        starts, ends, axes, steps = node.attrs.get("starts"), node.attrs.get("ends"), node.attrs.get("axes"), None
    starts, ends = np.asarray(starts).reshape(-1), np.asarray(ends).reshape(-1)
    one_axis = axes is None or [int(a) for a in np.asarray(axes).reshape(-1)] in ([0], [-1])
    if data.ndim != 1 or len(starts) != 1 or len(ends) != 1 or not one_axis:
        raise Reject(f"{where}: Slice {node.name!r} is not of one vector")
    step = 1 if steps is None else int(np.asarray(steps).reshape(-1)[0])
    if step <= 0:  # ONNX clamps for a negative step otherwise than Python slices do: not folded
        raise Reject(f"{where}: Slice {node.name!r} has step {step}")
    n = len(data)
    start, end = (int(min(max(v + n if v < 0 else v, 0), n)) for v in (starts[0], ends[0]))
    return data[start:end:step]


def _cast(node: Node, args, where: str) -> np.ndarray:
    if node.attrs.get("to") not in (TensorProto.INT64, TensorProto.INT32):
        raise Reject(f"{where}: Cast {node.name!r} to a non-integer type")
    return args[0]


_FOLDERS = {
    "Shape": None,  # handled by _shape_of
    "Identity": lambda node, args, where: args[0],
    "Cast": _cast,
    "Gather": _gather,
    "Concat": _concat,
    "ReduceProd": _reduce_prod,
    "Squeeze": _squeeze,
    "Unsqueeze": _unsqueeze,
    "Slice": _slice,
}
