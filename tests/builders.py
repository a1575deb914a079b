"""Build small ONNX models in code, and run them on onnxruntime, for the tests."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

FLOAT, FLOAT16, DOUBLE, BFLOAT16 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE, TensorProto.BFLOAT16
NP = {FLOAT: np.float32, FLOAT16: np.float16, DOUBLE: np.float64}

# The passes target "plugin" ran by default until its plugins measured slower in whole TensorRT
# engines (fusion/passes/defaults.py): with none named it now fuses GroupNorm only.  Tests of what
# these rules do name them; tests/test_defaults.py tests the defaults themselves.
NORM_FC_PASSES = ("layernorm", "rmsnorm", "gemm")
NORM_FC_CLI = ("--passes", ",".join(NORM_FC_PASSES))  # the same, on the command line


class G:
    """A graph under construction: ``g.op("Add", a, b)`` returns the output name."""

    def __init__(self, opset: int = 13, name: str = "g"):
        self.opset = opset
        self.name = name
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self.value_info: list[onnx.ValueInfoProto] = []
        self._n = 0

    def fresh(self, hint: str) -> str:
        self._n += 1
        return f"{hint}_{self._n}"

    def input(self, name: str, elem_type: int, shape: Sequence[Any]) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, elem_type, list(shape)))
        return name

    def const(self, value, name: str | None = None, dtype=np.float32) -> str:
        """An initializer (scalars become 0-d tensors of ``dtype`` unless given as arrays)."""
        arr = np.asarray(value, dtype=None if isinstance(value, np.ndarray) else dtype)
        name = name or self.fresh("c")
        self.initializers.append(numpy_helper.from_array(arr, name))
        return name

    def constant_node(self, value, dtype=np.float32) -> str:
        arr = np.asarray(value, dtype=None if isinstance(value, np.ndarray) else dtype)
        out = self.fresh("k")
        self.nodes.append(helper.make_node("Constant", [], [out], name=self.fresh("Constant"), value=numpy_helper.from_array(arr)))
        return out

    def op(self, op_type: str, *inputs: str, n_out: int = 1, name: str | None = None, domain: str = "", **attrs):
        outs = [self.fresh(op_type.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op_type, list(inputs), outs, name=name or self.fresh(op_type), domain=domain or None, **attrs))
        return outs[0] if n_out == 1 else outs

    def output(self, name: str, elem_type: int, shape: Sequence[Any] | None = None) -> None:
        self.outputs.append(helper.make_tensor_value_info(name, elem_type, list(shape) if shape is not None else None))

    def graph(self) -> onnx.GraphProto:
        return helper.make_graph(self.nodes, self.name, self.inputs, self.outputs, self.initializers, value_info=self.value_info)

    def model(self, ir_version: int = 8, infer: bool = True, functions=()) -> onnx.ModelProto:
        m = helper.make_model(self.graph(), opset_imports=[helper.make_opsetid("", self.opset)], ir_version=ir_version, functions=list(functions))
        if infer:
            m = onnx.shape_inference.infer_shapes(m)
        return m


def reduce_mean(g: G, x: str, axes: Sequence[int], keepdims: int = 1, as_input: bool | None = None) -> str:
    """ReduceMean with axes as attribute (opset < 18) or input (opset >= 18)."""
    as_input = g.opset >= 18 if as_input is None else as_input
    if as_input:
        return g.op("ReduceMean", x, g.const(np.array(axes, np.int64)), keepdims=keepdims)
    return g.op("ReduceMean", x, axes=list(axes), keepdims=keepdims)


def run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def max_error(a: onnx.ModelProto, b: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> float:
    ra, rb = run(a, feeds), run(b, feeds)
    return max(float(np.abs(x.astype(np.float64) - y.astype(np.float64)).max()) for x, y in zip(ra, rb))


# Fixture outputs, fused vs original: max abs error relative to max(1, |original|).
FIXTURE_TOLERANCE = {"fp32": 2e-4, "fp16": 3e-2}


def assert_fixture_outputs_match(record: dict, original: onnx.ModelProto, fused: onnx.ModelProto) -> None:
    """The fused fixture computes what the original did at its min and max shapes."""
    from .fixtures.catalog import random_feeds

    for shape in ("min", "max"):
        feeds = random_feeds(record, shape, seed=1)
        for a, b in zip(run(original, feeds), run(fused, feeds)):
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            assert np.abs(a64 - b64).max() <= FIXTURE_TOLERANCE[record["dtype"]] * max(1.0, float(np.abs(a64).max()))


def op_types(model: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in model.graph.node]


def count(model: onnx.ModelProto, op_type: str) -> int:
    return sum(n.op_type == op_type for n in model.graph.node)
