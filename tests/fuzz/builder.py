"""Building one fuzz model: node containers (main graph, control-flow bodies, functions) that
track every value's type and shape, so pieces can size their constants."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

FLOAT, FLOAT16, DOUBLE, BOOL, INT64 = (
    TensorProto.FLOAT,
    TensorProto.FLOAT16,
    TensorProto.DOUBLE,
    TensorProto.BOOL,
    TensorProto.INT64,
)
NP = {FLOAT: np.float32, FLOAT16: np.float16, DOUBLE: np.float64, BOOL: np.bool_, INT64: np.int64}
# Concrete sizes of the symbolic dims, for the inputs fed to onnxruntime.
DIMS = {"B": 2, "S": 3}
FUNCTION_DOMAIN = "fuzz.fn"

Dim = "int | str"


@dataclass(frozen=True)
class Value:
    name: str
    dtype: int
    shape: tuple  # ints (static) and dim names (dynamic)
    # What the library can know of the shape (from ONNX shape inference): FULL; LEAD (the
    # rank and the last dim: a rank-2 Gemm of an unshaped input is [unk, N]); or NONE (a
    # Loop's outputs are left unshaped; nothing inside a function body is typed).
    known: str = "full"

    @property
    def rank(self) -> int:
        return len(self.shape)


FULL, LEAD, NONE = "full", "lead", "none"


def merge_known(a: str, b: str) -> str:
    """Shape knowledge of a broadcast of two values (a dim of one fills an unknown of the other)."""
    if NONE in (a, b):
        return NONE
    return FULL if FULL in (a, b) else LEAD


def broadcast(a: Sequence, b: Sequence) -> tuple:
    """numpy broadcasting of two shapes whose dims are equal or 1 where they differ."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x == 1:
            out.append(y)
        elif y == 1 or x == y:
            out.append(x)
        else:
            raise ValueError(f"generator bug: shapes {list(a)} and {list(b)} do not broadcast")
    return tuple(reversed(out))


@dataclass
class Feed:
    """How to make one graph input's value (stored with saved regressions)."""

    name: str
    dtype: int
    shape: tuple
    kind: str = "data"  # data | eps | param | weight | bool

    def to_json(self) -> dict:
        return {"name": self.name, "dtype": self.dtype, "shape": list(self.shape), "kind": self.kind}

    @classmethod
    def from_json(cls, d: dict) -> "Feed":
        return cls(d["name"], d["dtype"], tuple(d["shape"]), d["kind"])

    def make(self, rng: np.random.Generator, dims: dict) -> np.ndarray:
        shape = [d if isinstance(d, int) else dims[d] for d in self.shape]
        t = NP[self.dtype]
        if self.kind == "bool":
            return np.asarray(rng.random(shape) < 0.5)
        if self.kind == "eps":
            return np.full(shape, 1e-3, t)
        if self.kind == "param":
            return (rng.standard_normal(shape) * 0.5 + 1.0).astype(t)
        if self.kind == "weight":  # [K, N] or [N, K]: keep x @ W at x's magnitude
            return (rng.standard_normal(shape) / np.sqrt(max(shape))).astype(t)
        return (rng.standard_normal(shape) * 1.5 + 0.5).astype(t)


class ModelBuilder:
    """One model: its main graph, graph inputs/outputs, functions, and what should fuse."""

    def __init__(self, opset: int, dtype: int, seed: int, dedupe: bool = False):
        self.opset = opset
        self.dtype = dtype
        self.rng = np.random.default_rng(seed)
        self.dedupe = dedupe  # share equal constants (exporters do)
        self._n = 0
        self.main = Container(self, "graph")
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self.feeds: list[Feed] = []
        self.functions: list[onnx.FunctionProto] = []
        self.function_bodies: list["Container"] = []  # the containers of self.functions, in order
        self.expected: dict[str, int] = {}

    def fresh(self, hint: str) -> str:
        self._n += 1
        return f"{hint}_{self._n}"

    def expect(self, rule: str, n: int = 1) -> None:
        if n:
            self.expected[rule] = self.expected.get(rule, 0) + n

    def graph_input(self, hint: str, dtype: int, shape: tuple, kind: str = "data") -> Value:
        name = self.fresh(hint)
        self.inputs.append(helper.make_tensor_value_info(name, dtype, list(shape)))
        self.feeds.append(Feed(name, dtype, tuple(shape), kind))
        return Value(name, dtype, tuple(shape))

    def graph_output(self, v: Value, typed: bool = True) -> None:
        if any(o.name == v.name for o in self.outputs):
            return
        shape = list(v.shape) if typed else [None] * len(v.shape)  # untyped: the rank only
        self.outputs.append(helper.make_tensor_value_info(v.name, v.dtype, shape))

    def model(self) -> onnx.ModelProto:
        g = helper.make_graph(self.main.nodes, "fuzz", self.inputs, self.outputs, self.main.initializers)
        opsets = [helper.make_opsetid("", self.opset)]
        if self.functions:
            opsets.append(helper.make_opsetid(FUNCTION_DOMAIN, 1))
        return helper.make_model(g, opset_imports=opsets, ir_version=8, functions=self.functions, producer_name="fuzz")


class Container:
    """A node list under construction: the main graph, a body (If/Loop) or a function."""

    def __init__(self, mb: ModelBuilder, kind: str, outer_consts: bool = False, parent: "Container | None" = None):
        self.mb = mb
        self.kind = kind  # graph | body | function
        self.outer_consts = outer_consts  # a body whose constants live in the main graph
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._cache: dict[tuple, str] = {}
        # The library scans scopes in this order (graph.ModelGraph.from_proto): a node list,
        # then the bodies of its nodes in node order, then the model's functions.
        self.bodies: list[Container] = []
        if parent is not None:
            parent.bodies.append(self)
        elif kind == "function":
            mb.function_bodies.append(self)
        # The fusions expected here, in node order: (rule, custom op, the element types its
        # node may take, preferred first) -- see spec.admitted.
        self.units: list[tuple[str, str, tuple]] = []

    def scopes(self) -> list["Container"]:
        """This container and the bodies in it, in the order the library scans them."""
        return [self] + [s for b in self.bodies for s in b.scopes()]

    @property
    def opset(self) -> int:
        return self.mb.opset

    def op(self, op_type: str, *inputs: str, domain: str = "", **attrs) -> str:
        out = self.mb.fresh(op_type.lower())
        self.nodes.append(helper.make_node(op_type, list(inputs), [out], name=self.mb.fresh(op_type), domain=domain or None, **attrs))
        return out

    def const(self, value: np.ndarray, node: bool = False, hint: str = "c") -> str:
        """A constant: an initializer (here or, for some bodies, in the main graph) or a Constant node."""
        value = np.asarray(value)
        if not value.flags.c_contiguous:
            value = value.copy()  # (np.ascontiguousarray would make a 0-d array 1-d)
        if node or self.kind == "function":
            out = self.mb.fresh("k")
            tensor = numpy_helper.from_array(value, out)
            self.nodes.append(helper.make_node("Constant", [], [out], name=self.mb.fresh("Constant"), value=tensor))
            return out
        home = self.mb.main if self.outer_consts else self
        key = (value.dtype.str, value.shape, value.tobytes())
        if self.mb.dedupe and key in home._cache:
            return home._cache[key]
        name = self.mb.fresh(hint)
        home.initializers.append(numpy_helper.from_array(value, name))
        home._cache[key] = name
        return name

    def scalar(self, v: float, dtype: int, node: bool = False) -> str:
        return self.const(np.array(v, NP[dtype]), node=node)

    def ints(self, values: Sequence[int]) -> str:
        """An int64 constant (axes, shapes): always local, so shape inference sees it in bodies too."""
        outer, self.outer_consts = self.outer_consts, False
        try:
            return self.const(np.array(list(values), np.int64))
        finally:
            self.outer_consts = outer

    def reduce_mean(self, x: str, axes: Sequence[int], keepdims: int = 1) -> str:
        if self.opset >= 18:
            return self.op("ReduceMean", x, self.ints(axes), keepdims=keepdims)
        return self.op("ReduceMean", x, axes=list(axes), keepdims=keepdims)

    def unsqueeze(self, x: str, axes: Sequence[int]) -> str:
        if self.opset >= 13:
            return self.op("Unsqueeze", x, self.ints(axes))
        return self.op("Unsqueeze", x, axes=list(axes))
