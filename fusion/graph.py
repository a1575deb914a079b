"""The model as the passes see it: onnx-graphsurgeon graphs for matching, protos for editing.

Matching runs on onnx-graphsurgeon's IR (producers and consumers are one attribute away).
Rewrites are applied to the original ``ModelProto`` instead of re-exporting the gs graph, so
everything a pass does not touch (node order, doc strings, metadata, sparse or unused
initializers, external-data references) comes out byte for byte as it went in.  Each gs node
therefore keeps a link to the NodeProto it was imported from.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np
import onnx
import onnx_graphsurgeon as gs
from onnx import numpy_helper

from .errors import ModelLoadError

log = logging.getLogger(__name__)

FLOAT_TYPES = frozenset(
    {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE}
)
# Wider first: used to pick the type a fused node computes in when a chain mixes types.
FLOAT_WIDTH = {
    onnx.TensorProto.BFLOAT16: 1,
    onnx.TensorProto.FLOAT16: 1,
    onnx.TensorProto.FLOAT: 2,
    onnx.TensorProto.DOUBLE: 3,
}
# Constants bigger than this are never read to match a pattern: weights stay on disk.
MAX_CONST_READ = 1 << 16


def elem_type_of(dtype) -> int | None:
    """gs stores numpy dtypes, or ONNX enums for types numpy lacks (bfloat16)."""
    if dtype is None:
        return None
    if isinstance(dtype, (int, np.integer)):
        return int(dtype)
    try:
        return onnx.helper.np_dtype_to_tensor_dtype(np.dtype(dtype))
    except (KeyError, TypeError, ValueError):
        return None


@dataclass(eq=False)
class Scope:
    """One node list: the main graph, a control-flow body, or a model-local function."""

    kind: str  # "graph" | "subgraph" | "function"
    path: str  # for reports: "main", "main/If_0.then_branch", "function trt.plugins::Foo"
    ir: gs.Graph | gs.Function
    proto: onnx.GraphProto | onnx.FunctionProto
    opset: int
    parent: "Scope | None" = None
    output_names: frozenset = frozenset()
    # Where the container sits in the model, valid in any copy of it (see rewrite._containers).
    locator: tuple = ("graph",)

    @property
    def is_function(self) -> bool:
        return self.kind == "function"


@dataclass
class ModelGraph:
    """A ModelProto with its gs import and the links between the two."""

    proto: onnx.ModelProto
    base_dir: str | None = None  # where external data is resolved; None: in memory only
    scopes: list[Scope] = field(default_factory=list)
    _node_proto: dict[int, tuple[Scope, onnx.NodeProto]] = field(default_factory=dict)
    _node_index: dict[int, int] = field(default_factory=dict)
    _names: set[str] | None = None
    _shapes_inferred: bool = False

    @classmethod
    def from_proto(cls, proto: onnx.ModelProto, base_dir: str | None = None, skip_functions=()) -> "ModelGraph":
        """Import ``proto``; functions whose (domain, name) is in ``skip_functions`` are not scanned."""
        try:
            graph = gs.import_onnx(proto)
        except Exception as e:  # gs raises bare exceptions on malformed graphs
            raise ModelLoadError(f"cannot import the graph: {_one_line(e)}") from e
        mg = cls(proto=proto, base_dir=base_dir)
        opset = default_opset(proto.opset_import)
        mg._add_scope("graph", "main", graph, proto.graph, opset, None, ("graph",))
        functions = {(f.domain, f.name): f for f in graph.functions}
        for k, fproto in enumerate(proto.functions):
            if (fproto.domain, fproto.name) in skip_functions:
                continue
            fir = functions.get((fproto.domain, fproto.name))
            if fir is None:
                continue
            fopset = default_opset(fproto.opset_import) or opset
            path = f"function {fproto.domain}::{fproto.name}"
            mg._add_scope("function", path, fir, fproto, fopset, None, ("function", k))
        return mg

    def _add_scope(self, kind, path, ir, proto, opset, parent, locator) -> None:
        out_names = frozenset(t.name for t in ir.outputs)
        scope = Scope(kind, path, ir, proto, opset, parent, out_names, locator)
        self.scopes.append(scope)
        if len(ir.nodes) != len(proto.node):
            raise ModelLoadError(f"{path}: graph import lost nodes ({len(ir.nodes)} of {len(proto.node)})")
        for i, (node, nproto) in enumerate(zip(ir.nodes, proto.node)):
            self._node_proto[id(node)] = (scope, nproto)
            self._node_index[id(node)] = i
            for attr in nproto.attribute:
                if attr.type == onnx.AttributeProto.GRAPH:
                    sub = node.attrs.get(attr.name)
                    if isinstance(sub, gs.Graph):
                        label = node.name or node.op
                        where = f"{path}/{label}.{attr.name}"
                        self._add_scope("subgraph", where, sub, attr.g, opset, scope, locator + (i, attr.name, 0))
                elif attr.type == onnx.AttributeProto.GRAPHS:
                    subs = node.attrs.get(attr.name) or []
                    for j, (sub, g) in enumerate(zip(subs, attr.graphs)):
                        label = node.name or node.op
                        where = f"{path}/{label}.{attr.name}[{j}]"
                        self._add_scope("subgraph", where, sub, g, opset, scope, locator + (i, attr.name, j))

    # -- links --------------------------------------------------------------------------
    def node_proto(self, node: gs.Node) -> onnx.NodeProto:
        return self._node_proto[id(node)][1]

    def node_index(self, node: gs.Node) -> int:
        """Position of ``node`` in its container's node list."""
        return self._node_index[id(node)]

    def scope_of(self, node: gs.Node) -> Scope:
        return self._node_proto[id(node)][0]

    # -- names --------------------------------------------------------------------------
    def all_names(self) -> set[str]:
        """Every node and value name anywhere in the model (for making fresh ones)."""
        if self._names is None:
            names: set[str] = set()
            for g in _walk_graph_protos(self.proto):
                names.update(i.name for i in g.input)
                names.update(o.name for o in g.output)
                names.update(t.name for t in g.initializer)
                for n in g.node:
                    names.add(n.name)
                    names.update(n.output)
            for f in self.proto.functions:
                names.update(f.input)
                names.update(f.output)
                for n in f.node:
                    names.add(n.name)
                    names.update(n.output)
            self._names = names
        return self._names

    def fresh_name(self, hint: str) -> str:
        names = self.all_names()
        name, i = hint, 0
        while name in names or not name:
            i += 1
            name = f"{hint}_{i}"
        names.add(name)
        return name

    # -- constants ----------------------------------------------------------------------
    def constant_proto(self, t: gs.Tensor) -> onnx.TensorProto | None:
        """The TensorProto behind a constant tensor (an initializer or a Constant node), else None."""
        if isinstance(t, gs.Constant):
            vals = t._values
            if isinstance(vals, gs.ir.tensor.LazyValues):
                return vals.tensor
            return numpy_helper.from_array(np.asarray(vals), t.name)
        if len(t.inputs) == 1:
            node = t.inputs[0]
            if node.op == "Constant" and node.domain in (None, "", "ai.onnx"):
                return _constant_node_value(self.node_proto(node))
            if node.op == "Identity" and node.domain in (None, "", "ai.onnx") and node.inputs:
                return self.constant_proto(node.inputs[0])
        return None

    def is_constant(self, t: gs.Tensor) -> bool:
        return self.constant_proto(t) is not None

    def constant_shape(self, t: gs.Tensor) -> tuple[int, ...] | None:
        p = self.constant_proto(t)
        return None if p is None else tuple(p.dims)

    def constant_value(self, t: gs.Tensor, max_elements: int = MAX_CONST_READ) -> np.ndarray | None:
        """Read a constant's value; None if it is not constant or too big to read for matching."""
        p = self.constant_proto(t)
        if p is None or int(np.prod(p.dims, dtype=np.int64)) > max_elements:
            return None
        return read_tensor(p, self.base_dir)

    def scalar(self, t: gs.Tensor) -> float | None:
        """The value of a one-element constant, else None."""
        v = self.constant_value(t, max_elements=1)
        if v is None or v.size != 1:
            return None
        return float(v.reshape(()).astype(np.float64))

    # -- types and shapes ---------------------------------------------------------------
    def elem_type(self, t: gs.Tensor) -> int | None:
        p = self.constant_proto(t)
        if p is not None:
            return p.data_type
        et = elem_type_of(t.dtype)
        if et is None:
            self._infer_shapes()
            et = elem_type_of(t.dtype)
        return et

    def shape(self, t: gs.Tensor) -> list | None:
        """Dims as ints (static) or strings/None (dynamic); None when even the rank is unknown."""
        p = self.constant_proto(t)
        if p is not None:
            return list(p.dims)
        if t.shape is None:
            self._infer_shapes()
        return None if t.shape is None else list(t.shape)

    def _infer_shapes(self) -> None:
        """Fill missing types/shapes once, from ONNX shape inference, on first need."""
        if self._shapes_inferred:
            return
        self._shapes_inferred = True
        try:
            inferred = onnx.shape_inference.infer_shapes(self.proto, strict_mode=False)
        except Exception as e:  # inference is best effort: patterns then see unknown shapes
            log.debug("shape inference failed: %s", e)
            return
        infos: dict[str, onnx.ValueInfoProto] = {}
        for g in _walk_graph_protos(inferred):
            for vi in list(g.value_info) + list(g.output) + list(g.input):
                infos.setdefault(vi.name, vi)
        for scope in self.scopes:
            if scope.is_function:
                continue
            for t in scope.ir.tensors().values():
                vi = infos.get(t.name)
                if vi is None or isinstance(t, gs.Constant) or not vi.type.HasField("tensor_type"):
                    continue
                tt = vi.type.tensor_type
                if t.dtype is None and tt.elem_type:
                    t.dtype = gs.importers.onnx_importer.get_numpy_type(tt.elem_type) or tt.elem_type
                if t.shape is None and tt.HasField("shape"):
                    t.shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim]

    def nodes(self) -> Iterator[tuple[Scope, gs.Node]]:
        for scope in self.scopes:
            for node in scope.ir.nodes:
                yield scope, node


def producer(t: gs.Tensor) -> gs.Node | None:
    return t.inputs[0] if len(t.inputs) == 1 else None


def default_opset(opset_import) -> int:
    for o in opset_import:
        if o.domain in ("", "ai.onnx"):
            return o.version
    return 0


def read_tensor(p: onnx.TensorProto, base_dir: str | None) -> np.ndarray:
    """numpy value of a TensorProto, reading only its own bytes when the data is external."""
    if p.data_location == onnx.TensorProto.EXTERNAL:
        info = {e.key: e.value for e in p.external_data}
        if base_dir is None:
            raise ModelLoadError(
                f"tensor {p.name!r} keeps its data in external file {info.get('location')!r}, "
                "but the model was given in memory: pass its path instead"
            )
        q = onnx.TensorProto()
        q.CopyFrom(p)
        path = os.path.join(base_dir, info["location"])
        try:
            with open(path, "rb") as f:
                f.seek(int(info.get("offset", 0)))
                n = int(info["length"]) if "length" in info else -1
                q.raw_data = f.read(n)
        except OSError as e:
            raise ModelLoadError(f"cannot read external data of {p.name!r} from {path}: {e.strerror}") from e
        del q.external_data[:]
        q.data_location = onnx.TensorProto.DEFAULT
        p = q
    return numpy_helper.to_array(p)


def _constant_node_value(n: onnx.NodeProto) -> onnx.TensorProto | None:
    for a in n.attribute:
        if a.ref_attr_name:
            return None  # a function-attribute reference: not known until the call
        if a.name == "value":
            return a.t
        if a.name == "value_float":
            return numpy_helper.from_array(np.array(a.f, dtype=np.float32))
        if a.name == "value_floats":
            return numpy_helper.from_array(np.array(list(a.floats), dtype=np.float32))
        if a.name == "value_int":
            return numpy_helper.from_array(np.array(a.i, dtype=np.int64))
        if a.name == "value_ints":
            return numpy_helper.from_array(np.array(list(a.ints), dtype=np.int64))
    return None


def _walk_graph_protos(model: onnx.ModelProto) -> Iterator[onnx.GraphProto]:
    """The main graph, every subgraph, and the subgraphs inside function bodies."""
    stack: list[onnx.GraphProto] = [model.graph]
    nodes_of_functions = [n for f in model.functions for n in f.node]
    for n in nodes_of_functions:
        stack.extend(_subgraphs(n))
    while stack:
        g = stack.pop()
        yield g
        for n in g.node:
            stack.extend(_subgraphs(n))


def _subgraphs(n: onnx.NodeProto) -> list[onnx.GraphProto]:
    out = []
    for a in n.attribute:
        if a.type == onnx.AttributeProto.GRAPH:
            out.append(a.g)
        elif a.type == onnx.AttributeProto.GRAPHS:
            out.extend(a.graphs)
    return out


def walk_graph_protos(model: onnx.ModelProto) -> Iterator[onnx.GraphProto]:
    return _walk_graph_protos(model)


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__
