"""Model-local ONNX functions that define custom plugin nodes in standard ops.

A fused model carries, for each custom op it uses, a FunctionProto of the same domain and
name.  onnxruntime runs the body, so the fused model runs anywhere; TensorRT's parser prefers
the registered plugin (onnx-tensorrt imports a local function only when no plugin creator of
that name is registered).

Bodies never turn a zero-size dim into a copied one: a Reshape to a shape computed at run time
uses ``allowzero=1`` (opset 14) or, below, :func:`reshape_keeping_zeros`.

Bodies refer to the calling node's attributes (``ref_attr_name``), so one function serves
every node (before opset 12, a float attribute reaches the body as LeakyRelu's alpha).  Where
the model's opset cannot express a reference (``CastLike`` needs opset 15) the value is baked
in, which needs every node of that op to agree on it; :func:`build` says why when they do not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import onnx
from onnx import TensorProto, helper

from . import specs

# Bodies compute in fp32: the plugins accumulate in fp32, and TensorRT (which imports the body
# when no plugin is registered) has no fp64.
COMPUTE_TYPE = TensorProto.FLOAT
MIN_OPSET = 11  # Flatten with a negative axis


@dataclass(frozen=True)
class Use:
    """One emitted node of a custom op: its field values and the element type of its X."""

    attrs: tuple  # sorted (name, value) pairs
    elem_type: int


class Body:
    """Builds a function body node by node, referencing or baking node attributes."""

    def __init__(self, opset: int, uses: list[Use]):
        self.opset = opset
        self.uses = uses
        self.nodes: list[onnx.NodeProto] = []
        self._n = 0

    def uniform(self, name: str):
        """The single value every use has for ``name``; raises _CannotBake when they differ."""
        values = {dict(u.attrs)[name] for u in self.uses} if name != "T" else {u.elem_type for u in self.uses}
        if len(values) != 1:
            raise _CannotBake(f"nodes differ in {name!r} and opset {self.opset} cannot refer to it")
        return values.pop()

    def op(self, op_type: str, *inputs: str, refs: dict[str, tuple[str, int]] | None = None, **attrs) -> str:
        self._n += 1
        out = f"t{self._n}"
        node = helper.make_node(op_type, list(inputs), [out], **attrs)
        for attr_name, (field_name, attr_type) in (refs or {}).items():
            node.attribute.append(onnx.AttributeProto(name=attr_name, type=attr_type, ref_attr_name=field_name))
        self.nodes.append(node)
        return out

    def float_field(self, field: str) -> str:
        """A scalar fp32 tensor holding the node's FLOAT attribute ``field``."""
        if self.opset >= 12:
            return self.op("Constant", refs={"value_float": (field, onnx.AttributeProto.FLOAT)})
        # Constant.value_float arrived in opset 12; LeakyRelu's alpha has always been a float
        # attribute, and LeakyRelu(-1) = -alpha, exactly.
        minus_one = self.op("Constant", value=helper.make_tensor("m1", COMPUTE_TYPE, [], [-1.0]))
        return self.op("Neg", self.op("LeakyRelu", minus_one, refs={"alpha": (field, onnx.AttributeProto.FLOAT)}))

    def to_compute(self, x: str) -> str:
        return self.op("Cast", x, to=COMPUTE_TYPE)

    def like_input(self, y: str, x: str) -> str:
        """Cast ``y`` back to the element type of input ``x``."""
        if self.opset >= 15:
            return self.op("CastLike", y, x)
        return self.op("Cast", y, to=int(self.uniform("T")))

    def reduce_mean_last(self, x: str) -> str:
        """Mean over axis 1 of a 2-D tensor, keepdims."""
        if self.opset >= 18:
            axes = self.op("Constant", value=helper.make_tensor("axes", TensorProto.INT64, [1], [1]))
            return self.op("ReduceMean", x, axes)
        return self.op("ReduceMean", x, axes=[1])

    def flatten(self, x: str, axis_field: str | None, axis: int | None = None) -> str:
        if axis_field is None:
            return self.op("Flatten", x, axis=axis)
        return self.op("Flatten", x, refs={"axis": (axis_field, onnx.AttributeProto.INT)})

    def ints(self, values: list[int]) -> str:
        return self.op("Constant", value=helper.make_tensor("c", TensorProto.INT64, [len(values)], values))

    def reshape(self, y: str, shape: str) -> str:
        """Reshape ``y`` to the run-time ``shape``, whose 0s mean 0 (see reshape_keeping_zeros)."""
        return reshape_keeping_zeros(lambda op, *ins, **attrs: self.op(op, *ins, **attrs), self.ints, y, shape, self.opset)

    def rename_last(self, name: str) -> None:
        self.nodes[-1].output[0] = name


def reshape_keeping_zeros(op: Callable[..., str], ints: Callable[[list[int]], str], y: str, shape: str, opset: int) -> str:
    """Reshape ``y`` to ``shape`` (an int64 tensor computed at run time) where a 0 is a zero-size dim.

    Reshape reads a 0 as "copy this dim of the input" unless ``allowzero=1`` (opset 14): an empty
    batch would come out as [0, 64, 64] for [0, 0, 64], or fail.  Below opset 14 the zeros are
    made 1s, ``y`` is padded to that many elements, reshaped, and sliced down to ``shape``
    (with no zero in ``shape`` the pad is empty and the slice takes everything).  The pad's
    values are sliced away: they repeat y's first element's sum (0 for an empty y), which
    has y's type whatever it is.  ``op(op_type, *inputs, **attrs)`` adds a node and returns
    its output.
    """
    if opset >= 14:
        return op("Reshape", y, shape, allowzero=1)
    if opset < 10:  # Slice takes its bounds as attributes: a run-time shape cannot be one
        raise ValueError("reshape_keeping_zeros needs opset >= 10")
    zeros = op("Sub", shape, shape)
    if opset >= 12:  # Max takes int64 from opset 12 (and is a plain elementwise layer in TensorRT)
        safe = op("Max", shape, ints([1]))
    else:
        safe = op("Where", op("Equal", shape, zeros), ints([1]), shape)
    padded = op("ReduceProd", safe, keepdims=1)
    flat = op("Flatten", y, axis=0)  # [1, size]
    first = op("Slice", flat, ints([0]), ints([1]), ints([1]))
    # The pad: prod(safe) elements, less the first size.  (Not an Expand to [1, prod(safe) - size]:
    # onnxruntime's ExpandElimination takes an Expand of [1, 1] to [1, 0] for a no-op, keeps the
    # element, and the Reshape fails.)
    wide = op("Expand", op("ReduceSum", first, keepdims=1), op("Concat", ints([1]), padded, axis=0))
    filler = op("Slice", wide, op("ReduceProd", shape, keepdims=1), ints([2**63 - 1]), ints([1]))
    full = op("Reshape", op("Concat", flat, filler, axis=1), safe)
    return op("Slice", full, zeros, shape)


def same_function(a: onnx.FunctionProto, b: onnx.FunctionProto) -> bool:
    """Whether two functions compute the same (their doc strings aside)."""
    ca, cb = onnx.FunctionProto(), onnx.FunctionProto()
    ca.CopyFrom(a)
    cb.CopyFrom(b)
    ca.doc_string = cb.doc_string = ""
    return ca.SerializeToString(deterministic=True) == cb.SerializeToString(deterministic=True)


class _CannotBake(Exception):
    pass


def _norm_body(
    b: Body, centered: bool, scale: str, bias: str | None, axis_field: str | None, axis: int | None,
    x: str = "X", out: str = "Y", eps: float | None = None,
) -> None:
    """``out`` = normalize(``x`` over dims [axis, rank)) * scale (+ bias), computed in fp32 on a
    2-D view; epsilon is the node's field, or ``eps`` where the op has none."""
    x2 = b.to_compute(b.flatten(x, axis_field, axis))
    if centered:
        x2 = b.op("Sub", x2, b.reduce_mean_last(x2))
    var = b.reduce_mean_last(b.op("Mul", x2, x2))
    epsilon = b.float_field("epsilon") if eps is None else b.op("Constant", value=helper.make_tensor("eps", COMPUTE_TYPE, [], [eps]))
    std = b.op("Sqrt", b.op("Add", var, epsilon))
    y = b.op("Mul", b.op("Div", x2, std), b.to_compute(b.op("Flatten", scale, axis=0)))
    if bias is not None:
        y = b.op("Add", y, b.to_compute(b.op("Flatten", bias, axis=0)))
    # Back to X's shape; an empty X stays empty in every dim it has.
    b.reshape(b.like_input(y, x), b.op("Shape", x))
    b.rename_last(out)


def _layer_norm(b: Body) -> None:
    _norm_body(b, True, "Scale", "B", "axis", None)


def _rms_norm(b: Body) -> None:
    _norm_body(b, False, "Scale", None, "axis", None)


def _trt_layer_norm(b: Body) -> None:
    # TensorRT's LayerNorm v1 normalizes over the last rank-2 dims: a 2-D view from axis 2.
    _norm_body(b, True, "gamma", "beta", None, 2)


BODIES: dict[str, Callable[[Body], None]] = {
    specs.FUSED_LAYER_NORM.op_type: _layer_norm,
    specs.FUSED_RMS_NORM.op_type: _rms_norm,
    specs.TRT_LAYER_NORM.op_type: _trt_layer_norm,
}


def register(op_type: str, body: Callable[[Body], None]) -> None:
    """Add the body builder of another custom op (used by the FC fusion)."""
    BODIES[op_type] = body


def build(spec: specs.PluginSpec, opset: int, uses: list[Use]) -> onnx.FunctionProto | str:
    """The function for ``spec`` at ``opset``, or the reason it cannot be written."""
    if spec.op_type not in BODIES:
        return f"no function body is defined for {spec.op_type}"
    if opset < MIN_OPSET:
        return f"function bodies need opset >= {MIN_OPSET} (model has {opset})"
    b = Body(opset, uses)
    try:
        BODIES[spec.op_type](b)
    except _CannotBake as e:
        return str(e)
    return helper.make_function(
        spec.domain,
        spec.op_type,
        [p.name for p in spec.inputs],
        [p.name for p in spec.outputs],
        b.nodes,
        [helper.make_opsetid("", opset)],
        attributes=[f.name for f in spec.fields],
        doc_string=f"{spec.doc} Reference body for onnxruntime; TensorRT uses plugin "
        f"{spec.op_type} v{spec.version} (namespace {spec.namespace!r}).",
    )
