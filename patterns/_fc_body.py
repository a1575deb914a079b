"""Reference ONNX function bodies of the FC custom ops (FusedFC, CustomFCPluginDynamic).

onnxruntime runs these; TensorRT runs the registered plugins instead.  Both compute in fp32
and cast back to the type of X, as the norm bodies do.

FusedFC's fields are referred to, not baked, wherever the opset allows, so one function
serves FC nodes that differ in weight layout or activation (a BERT has MatMul weights [K, N]
and a pooler Gemm with [N, K]; an MLP mixes ReLU, GELU and no activation):

* ``transpose_weight`` picks the weight layout through an If whose condition is the field
  (``Constant.value_int``, opset 12; at opset 11 ``EyeLike(k=transpose_weight)`` turns the
  field into a tensor, since EyeLike's ``k`` is an INT attribute every opset can refer to);
* ``alpha`` is ``Constant.value_float`` (baked below opset 12, see Body.float_field);
* ``activation`` (a STRING) becomes a one-hot over FC_ACTIVATIONS through TfIdfVectorizer on
  ``Constant.value_string`` (opset 12): standard ONNX has no string comparison before opset
  19, and TfIdfVectorizer's term-frequency of a one-word input against a pool of the four
  names is exactly that one-hot.  Where selects the activation, so no branch's inf or NaN
  leaks into the others.  Below opset 12 the field cannot be referred to at all: the body
  bakes it, and the gemm rule leaves activations outside FC nodes at opset 11 so that every
  node agrees on "none".
"""

from __future__ import annotations

import math

import onnx
from onnx import TensorProto, helper

from fusion.rewrite import functions, specs
from fusion.rewrite.functions import COMPUTE_TYPE, Body

_INT = onnx.AttributeProto.INT
_STRING = onnx.AttributeProto.STRING
_TENSOR = onnx.AttributeProto.TENSOR
SQRT_HALF = 1.0 / math.sqrt(2.0)
TANH_SCALE = math.sqrt(2.0 / math.pi)
CUBIC = 0.044715


def _scalar(b: Body, value: float) -> str:
    return b.op("Constant", value=helper.make_tensor("c", COMPUTE_TYPE, [], [value]))


def _ints(b: Body, values: list[int]) -> str:
    return b.op("Constant", value=helper.make_tensor("c", TensorProto.INT64, [len(values)], values))


def gelu_erf(b: Body, y: str) -> str:
    """0.5 * y * (1 + erf(y / sqrt(2)))."""
    inner = b.op("Add", b.op("Erf", b.op("Mul", y, _scalar(b, SQRT_HALF))), _scalar(b, 1.0))
    return b.op("Mul", b.op("Mul", y, _scalar(b, 0.5)), inner)


def gelu_tanh(b: Body, y: str) -> str:
    """0.5 * y * (1 + tanh(sqrt(2/pi) * (y + 0.044715 * y^3)))."""
    cube = b.op("Mul", b.op("Mul", y, y), y)
    inner = b.op("Add", y, b.op("Mul", cube, _scalar(b, CUBIC)))
    t = b.op("Tanh", b.op("Mul", inner, _scalar(b, TANH_SCALE)))
    return b.op("Mul", b.op("Mul", y, _scalar(b, 0.5)), b.op("Add", t, _scalar(b, 1.0)))


def apply_activation(b: Body, y: str, name: str) -> str:
    if name == "none":
        return y
    if name == "relu":
        return b.op("Relu", y)
    if name == "gelu_erf":
        return gelu_erf(b, y)
    if name == "gelu_tanh":
        return gelu_tanh(b, y)
    raise ValueError(f"unknown activation {name!r}")


def _transpose_flag(b: Body) -> str:
    """A one-element bool tensor: the node's ``transpose_weight`` field."""
    if b.opset >= 12:
        flag = b.op("Constant", refs={"value_int": ("transpose_weight", _INT)})
    else:
        zeros = b.op("Constant", value=helper.make_tensor("z", TensorProto.FLOAT, [1, 2], [0.0, 0.0]))
        eye = b.op("EyeLike", zeros, refs={"k": ("transpose_weight", _INT)})  # [[1, 0]] or [[0, 1]]
        flag = b.op("Reshape", b.op("Gather", eye, _ints(b, [1]), axis=1), _ints(b, [1]))
    return b.op("Cast", flag, to=TensorProto.BOOL)


def _weight_kn(b: Body, w: str) -> str:
    """W as [K, N] whatever the layout field says (If on transpose_weight)."""
    cond = _transpose_flag(b)
    then_out, else_out = "fc_w_transposed", "fc_w_as_stored"  # the body's only If
    then_g = helper.make_graph(
        [helper.make_node("Transpose", [w], [then_out], perm=[1, 0])],
        "transposed",
        [],
        [helper.make_tensor_value_info(then_out, COMPUTE_TYPE, None)],
    )
    else_g = helper.make_graph(
        [helper.make_node("Identity", [w], [else_out])],
        "as_stored",
        [],
        [helper.make_tensor_value_info(else_out, COMPUTE_TYPE, None)],
    )
    return b.op("If", cond, then_branch=then_g, else_branch=else_g)


def _select_activation(b: Body, y: str) -> str:
    """activation(y) for the node's ``activation`` field."""
    if b.opset < 12:
        return apply_activation(b, y, str(b.uniform("activation")))
    word = b.op("Reshape", b.op("Constant", refs={"value_string": ("activation", _STRING)}), _ints(b, [1]))
    onehot = b.op(
        "TfIdfVectorizer",
        word,
        mode="TF",
        min_gram_length=1,
        max_gram_length=1,
        max_skip_count=0,
        ngram_counts=[0],
        ngram_indexes=list(range(len(specs.FC_ACTIVATIONS))),
        pool_strings=list(specs.FC_ACTIVATIONS),
    )
    out = y
    for i, name in enumerate(specs.FC_ACTIVATIONS):
        if name == "none":
            continue
        chosen = b.op("Cast", b.op("Gather", onehot, _ints(b, [i]), axis=0), to=TensorProto.BOOL)
        out = b.op("Where", chosen, apply_activation(b, y, name), out)
    return out


def fused_fc(b: Body) -> None:
    """Y = activation(alpha * X @ W + B), W [K, N] or [N, K] by transpose_weight."""
    x = b.to_compute("X")
    w = _weight_kn(b, b.to_compute("W"))
    y = b.op("Mul", b.op("MatMul", x, w), b.float_field("alpha"))
    y = b.op("Add", y, b.to_compute("B"))
    y = _select_activation(b, y)
    b.like_input(y, "X")
    b.rename_last("Y")


def trt_fc(b: Body) -> None:
    """output[S, B, N, 1, 1] = input[S, B, K, 1, 1] @ W[K, N] (CustomFCPluginDynamic)."""
    # Squeeze/Unsqueeze of the two unit dims, not Reshape [0, 0, -1]: with S or B = 0 that -1
    # cannot be inferred.
    x = b.to_compute(_unit_dims(b, "Squeeze", "input"))
    w = b.to_compute(b.op("Constant", refs={"value": ("W", _TENSOR)}))
    y = b.op("MatMul", x, w)
    y = b.like_input(y, "input")
    _unit_dims(b, "Unsqueeze", y)
    b.rename_last("output")


def _unit_dims(b: Body, op: str, x: str) -> str:
    """Squeeze or Unsqueeze dims 3 and 4 (axes an input from opset 13)."""
    if b.opset >= 13:
        return b.op(op, x, _ints(b, [3, 4]))
    return b.op(op, x, axes=[3, 4])


def register() -> None:
    functions.register(specs.FUSED_FC.op_type, fused_fc)
    functions.register(specs.TRT_FC.op_type, trt_fc)
