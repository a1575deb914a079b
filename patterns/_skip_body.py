"""Function bodies of the skip-norm nodes (onnxruntime runs these; TensorRT the plugins).

The sum is computed in X's type, as the residual Add it replaces did; the norm in fp32
(``functions._norm_body``).  The body always defines Sum; a node without the second output
simply does not read it.
"""

from __future__ import annotations

import onnx
from onnx import helper

from fusion.rewrite import functions, specs
from fusion.rewrite.functions import Body

_TENSOR = onnx.AttributeProto.TENSOR


def _sum(b: Body, x: str, skip: str, bias: str) -> str:
    s = b.op("Add", b.op("Add", x, skip), bias)
    b.op("Identity", s)
    b.rename_last("Sum")
    return "Sum"


def fused_skip_layer_norm(b: Body) -> None:
    s = _sum(b, "X", "Skip", "Bias")
    functions._norm_body(b, True, "Scale", "B", "axis", None, x=s)


def fused_skip_rms_norm(b: Body) -> None:
    s = _sum(b, "X", "Skip", "Bias")
    functions._norm_body(b, False, "Scale", None, "axis", None, x=s)


def trt_skip_layer_norm(b: Body) -> None:
    # input/skip are [S, B, E, 1, 1]; the weights [E], fp32; normalized over E with no epsilon.
    def weight(name: str) -> str:
        return b.op("Constant", refs={"value": (name, _TENSOR)})

    shape = b.op("Constant", value=helper.make_tensor("e11", onnx.TensorProto.INT64, [3], [-1, 1, 1]))
    bias = b.like_input(b.op("Reshape", weight("bias"), shape), "input")
    s = b.op("Add", b.op("Add", "input", "skip"), bias)
    functions._norm_body(b, True, weight("gamma"), weight("beta"), None, 2, x=s, out="output", eps=0.0)


def register() -> None:
    functions.register(specs.FUSED_SKIP_LAYER_NORM.op_type, fused_skip_layer_norm)
    functions.register(specs.FUSED_SKIP_RMS_NORM.op_type, fused_skip_rms_norm)
    functions.register(specs.TRT_SKIP_LAYER_NORM.op_type, trt_skip_layer_norm)
