"""ONNX function bodies of FusedGroupNorm and TensorRT's GroupNormalizationPlugin.

onnxruntime runs these; TensorRT runs the plugins.  They compute in fp32 on a [N, G, K] view
(K = C / G * spatial), then apply the per-channel affine on a [N, C, S] view, so the body
never needs X's rank.  Every reshape keeps zero-size dims (Body.reshape).
"""

from __future__ import annotations

import onnx
from onnx import TensorProto, helper

from fusion.rewrite import functions, specs
from fusion.rewrite.functions import COMPUTE_TYPE, Body


def _int_field(b: Body, field: str) -> str:
    """A [1] int64 tensor holding the node's INT attribute ``field`` (baked before opset 12)."""
    if b.opset >= 12:
        v = b.op("Constant", refs={"value_int": (field, onnx.AttributeProto.INT)})
    else:
        v = b.op("Constant", value=helper.make_tensor("v", TensorProto.INT64, [], [int(b.uniform(field))]))
    return b.op("Reshape", v, b.ints([1]))


def _mean_last(b: Body, x: str) -> str:
    """Mean over axis 2 of a 3-D tensor, keepdims."""
    if b.opset >= 18:
        return b.op("ReduceMean", x, b.ints([2]))
    return b.op("ReduceMean", x, axes=[2])


def _per_channel(b: Body, p: str, c: str) -> str:
    """A [C] parameter as [C, 1] in fp32 (broadcasts over [N, C, S])."""
    return b.to_compute(b.reshape(p, b.op("Concat", c, b.ints([1]), axis=0)))


def _group_norm(b: Body, x: str, scale: str, bias: str, eps_field: str, silu: bool | None, out: str) -> None:
    shape = b.op("Shape", x)
    n = b.op("Slice", shape, b.ints([0]), b.ints([1]))
    c = b.op("Slice", shape, b.ints([1]), b.ints([2]))
    rest = b.op("Slice", shape, b.ints([2]), b.ints([2**62]))
    s = b.op("ReduceProd", b.op("Concat", b.ints([1]), rest, axis=0), keepdims=1)  # 1 for rank 2
    groups = _int_field(b, "num_groups")
    k = b.op("Mul", b.op("Div", c, groups), s)
    x3 = b.to_compute(b.reshape(x, b.op("Concat", n, groups, k, axis=0)))
    d = b.op("Sub", x3, _mean_last(b, x3))
    var = _mean_last(b, b.op("Mul", d, d))
    eps = b.float_field(eps_field)
    y3 = b.op("Div", d, b.op("Sqrt", b.op("Add", var, eps)))
    y = b.reshape(y3, b.op("Concat", n, c, s, axis=0))
    y = b.op("Add", b.op("Mul", y, _per_channel(b, scale, c)), _per_channel(b, bias, c))
    if silu is None:  # the node's silu field: 0 or 1
        on = b.op("Equal", _int_field(b, "silu"), b.ints([1]))
        y = b.op("Where", on, b.op("Mul", y, b.op("Sigmoid", y)), y)
    b.reshape(b.like_input(y, x), shape)
    b.rename_last(out)


def fused_group_norm(b: Body) -> None:
    _group_norm(b, "X", "Scale", "B", "epsilon", None, "Y")


def trt_group_norm(b: Body) -> None:
    _group_norm(b, "input", "scale", "bias", "eps", False, "output")


def register() -> None:
    functions.register(specs.FUSED_GROUP_NORM.op_type, fused_group_norm)
    functions.register(specs.TRT_GROUP_NORM.op_type, trt_group_norm)


__all__ = ["COMPUTE_TYPE", "register"]
