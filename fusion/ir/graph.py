"""The model as the passes see it: a graph view for matching, the protos for editing.

Matching runs on a view with onnx-graphsurgeon's interface (fusion.ir.view: producers and
consumers are one attribute away).  Rewrites are applied to the original ``ModelProto``
instead of re-exporting a graph, so everything a pass does not touch (node order, doc strings,
metadata, sparse or unused initializers, external-data references) comes out byte for byte as
it went in.  Each view node keeps the NodeProto it was read from.
"""

from __future__ import annotations

import logging
import math
import os
from dataclasses import dataclass, field
from functools import cached_property
from typing import Iterator

import numpy as np
import onnx
from onnx import numpy_helper

from . import view as ir
from ..errors import ModelLoadError

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
    """An ONNX element type from an enum or a numpy dtype (as onnx-graphsurgeon stores them)."""
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
    ir: ir.Graph
    proto: onnx.GraphProto | onnx.FunctionProto
    opset: int
    parent: "Scope | None" = None
    output_names: frozenset = frozenset()
    # Where the container sits in the model, valid in any copy of it (see graph.node_lists).
    locator: tuple = ("graph",)

    @property
    def is_function(self) -> bool:
        return self.kind == "function"

    @cached_property
    def nested(self) -> bool:
        """Whether a node of this list has a graph attribute (a control-flow body; maybe none in it)."""
        return any(n.subgraphs for n in self.ir.nodes)


@dataclass
class ModelGraph:
    """A ModelProto with its graph view, one Scope per node list."""

    proto: onnx.ModelProto
    base_dir: str | None = None  # where external data is resolved; None: in memory only
    scopes: list[Scope] = field(default_factory=list)
    # Treat the main graph's initializers that are also graph inputs as constants: the caller
    # promises never to feed them (see ``overridable``; the output then stops listing them).
    assume_constant_initializers: bool = False
    # Every node list's locator, the skipped functions' too, in node_lists' order.
    locators: list[tuple] = field(default_factory=list)
    _names: set[str] | None = None
    _values: dict[ir.Tensor, np.ndarray] = field(default_factory=dict, repr=False)  # constants' values, read once
    _node_values: dict[ir.Node, onnx.TensorProto | None] = field(default_factory=dict, repr=False)  # Constant nodes', read once
    _shapes_inferred: bool = False
    _light: onnx.ModelProto | None = field(default=None, repr=False)  # weightless(proto), kept from shape inference
    # Analyses of the graph as read, made once and kept for the pass (patterns/_shapes.py).
    analyses: dict = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def from_proto(
        cls, proto: onnx.ModelProto, base_dir: str | None = None, skip_functions=(), assume_constant_initializers: bool = False
    ) -> "ModelGraph":
        """Read ``proto``; functions whose (domain, name) is in ``skip_functions`` are not scanned."""
        mg = cls(proto=proto, base_dir=base_dir, assume_constant_initializers=assume_constant_initializers)
        opset = default_opset(proto.opset_import)
        mg._add_scope("graph", "main", ir.import_graph(proto.graph), opset, None, ("graph",))
        for k, fproto in enumerate(proto.functions):
            if (fproto.domain, fproto.name) in skip_functions:
                mg.locators.extend(_node_lists(fproto, ("function", k)))
                continue
            fopset = default_opset(fproto.opset_import) or opset
            path = f"function {fproto.domain}::{fproto.name}"
            mg._add_scope("function", path, ir.import_function(fproto), fopset, None, ("function", k))
        return mg

    def _add_scope(self, kind, path, graph: ir.Graph, opset, parent, locator) -> None:
        out_names = frozenset(t.name for t in graph.outputs)
        scope = Scope(kind, path, graph, graph.proto, opset, parent, out_names, locator)
        self.scopes.append(scope)
        self.locators.append(locator)
        for node in graph.nodes:
            node.scope = scope
            for attr_name, subs in node.subgraphs.items():
                label = node.name or node.op
                for j, sub in enumerate(subs):
                    where = f"{path}/{label}.{attr_name}" + (f"[{j}]" if len(subs) > 1 else "")
                    self._add_scope("subgraph", where, sub, opset, scope, locator + (node.index, attr_name, j))

    def node_lists(self, model: onnx.ModelProto | None = None) -> dict[tuple, onnx.GraphProto | onnx.FunctionProto]:
        """``node_lists(model)`` for this graph's proto or a copy of it whose node lists sit where
        they sit here, found from the locators instead of a walk over every node."""
        model = self.proto if model is None else model
        return {key: locate(model, key) for key in self.locators}

    # -- links --------------------------------------------------------------------------
    @staticmethod
    def node_proto(node: ir.Node) -> onnx.NodeProto:
        return node.proto

    @staticmethod
    def node_index(node: ir.Node) -> int:
        """Position of ``node`` in its container's node list."""
        return node.index

    @staticmethod
    def scope_of(node: ir.Node) -> Scope:
        return node.scope

    # -- names --------------------------------------------------------------------------
    def all_names(self) -> set[str]:
        """Every node and value name anywhere in the model (for making fresh ones): graphs' inputs,
        outputs and initializers, functions' inputs and outputs, nodes' names and outputs."""
        if self._names is None:
            names: set[str] = set()
            for s in self.scopes:  # read from the view: no proto but the initializer list
                names.update(t.name for t in s.ir.inputs)
                names.update(t.name for t in s.ir.outputs)
                if not s.is_function:
                    names.update(t.name for t in s.proto.initializer)
                nodes = s.ir.nodes  # (two flat passes: no generator per node)
                names.update([n.name for n in nodes])
                names.update([t.name for n in nodes for t in n.outputs])
            scanned = {s.locator for s in self.scopes}
            for key in self.locators:  # the functions left out of the view
                if key not in scanned:
                    names.update(_proto_names(locate(self.proto, key)))
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
    # A constant is a value known when fusing: a Constant node, or an initializer no caller can
    # replace.  An initializer that is also listed as a graph input is not one from IR 4 on:
    # ONNX lets the caller feed it and onnxruntime honours that.  Below IR 4 every initializer
    # had to be listed as an input, and onnxruntime refuses to feed them there, so they count
    # as constants.  Such an "overridable" initializer can still be passed through to a fused
    # node as an input, if its shape is pinned (``fixed_shape``); a rule may never bake its value.

    def overridable(self, t: ir.Tensor) -> bool:
        """An initializer a caller may replace by feeding the graph input of the same name."""
        if t.const is None or t.graph_input is None or self.proto.ir_version < 4:
            return False
        if self.assume_constant_initializers and self.scopes and self.scopes[0].ir.tensors.get(t.name) is t:
            return False  # the caller's promise covers the main graph's inputs only
        return True

    def constant_proto(self, t: ir.Tensor) -> onnx.TensorProto | None:
        """The TensorProto behind a constant tensor (an initializer or a Constant node), else None."""
        if t.const is not None:
            return None if self.overridable(t) else t.const
        if len(t.inputs) == 1:
            node = t.inputs[0]
            if node.op == "Constant" and node.domain in ("", "ai.onnx"):
                # (asked for again and again while matching: its attributes are read once)
                values = self._node_values
                if node not in values:
                    values[node] = _constant_node_value(node.proto)
                return values[node]
            if node.op == "Identity" and node.domain in ("", "ai.onnx") and node.inputs:
                return self.constant_proto(node.inputs[0])
        return None

    def is_constant(self, t: ir.Tensor) -> bool:
        return self.constant_proto(t) is not None

    def constant_shape(self, t: ir.Tensor) -> tuple[int, ...] | None:
        p = self.constant_proto(t)
        return None if p is None else tuple(p.dims)

    def fixed_shape(self, t: ir.Tensor) -> tuple[int, ...] | None:
        """The shape of a constant, or of an overridable initializer whose graph input declares
        exactly its dims and type (onnxruntime refuses a feed of another shape or type); else None.
        The value of the latter may still change: pass it through, never bake it."""
        shape = self.constant_shape(t)
        if shape is not None or not self.overridable(t):
            return shape
        declared = _declared(t.graph_input)
        if declared is None or declared[0] != t.const.data_type or declared[1] != list(t.const.dims):
            return None
        return tuple(t.const.dims)

    def not_constant_reason(self, t: ir.Tensor) -> str:
        """Why ``t`` has no value known when fusing (for near-miss reasons)."""
        seen = t
        while not self.overridable(seen):
            node = producer(seen)
            if node is None or node.op != "Identity" or not node.inputs:
                return f"{t.name!r} is not a constant"
            seen = node.inputs[0]
        via = "" if seen is t else f" (through Identity of {seen.name!r})"
        return (
            f"{t.name!r}{via} is an initializer that is also a graph input, so a caller may feed another value; "
            "treat it as a constant only with assume_constant_initializers=True (CLI: --freeze-initializers)"
        )

    def constant_value(self, t: ir.Tensor, max_elements: int = MAX_CONST_READ) -> np.ndarray | None:
        """Read a constant's value; None if it is not constant or too big to read for matching."""
        p = self.constant_proto(t)
        if p is None or math.prod(p.dims) > max_elements:
            return None
        # The view's tensors live as long as this graph and a constant never changes while it
        # is matched: read each once (patterns ask for axes and exponents again and again).
        value = self._values.get(t)  # (keyed by the tensor itself: kept alive, its id never reused)
        if value is None:
            value = self._values[t] = read_tensor(p, self.base_dir)
        return value.copy()  # (the caller's to change)

    def scalar(self, t: ir.Tensor) -> float | None:
        """The value of a one-element constant, else None."""
        v = self.constant_value(t, max_elements=1)
        if v is None or v.size != 1:
            return None
        return float(v.reshape(()).astype(np.float64))

    def light(self) -> onnx.ModelProto:
        """``weightless(self.proto)``, the caller's to edit: the one shape inference made, if it
        ran (handed out once), else a new one."""
        light, self._light = self._light, None
        return weightless(self.proto) if light is None else light

    # -- types and shapes ---------------------------------------------------------------
    def elem_type(self, t: ir.Tensor, infer: bool = True) -> int | None:
        """The element type; ``infer``: run shape inference (once per model) if it is not annotated."""
        p = self.constant_proto(t)
        if p is not None:
            return p.data_type
        et = elem_type_of(t.dtype)
        if et is None and infer:
            self._infer_shapes()
            et = elem_type_of(t.dtype)
        return et

    def shape(self, t: ir.Tensor, infer: bool = True) -> list | None:
        """Dims as ints (static) or strings/None (dynamic); None when even the rank is unknown."""
        p = self.constant_proto(t)
        if p is not None:
            return list(p.dims)
        if self.overridable(t):  # a feed may have any shape its graph input allows
            declared = _declared(t.graph_input)
            return None if declared is None else declared[1]
        if t.shape is None and infer:
            self._infer_shapes()
        return None if t.shape is None else list(t.shape)

    def _infer_shapes(self) -> None:
        """Fill missing types/shapes once, from ONNX shape inference, on first need."""
        if self._shapes_inferred:
            return
        self._shapes_inferred = True
        self._light = weightless(self.proto)  # (kept: validation checks the fused one, see ``light``)
        try:
            inferred = onnx.shape_inference.infer_shapes(self._light, strict_mode=False)
        except Exception as e:  # inference is best effort: patterns then see unknown shapes
            log.debug("shape inference failed: %s", e)
            return
        nested = any(s.kind == "subgraph" for s in self.scopes)
        if not nested:  # one graph: each inferred value straight to its tensor, the first of a name
            tensors, seen = self.scopes[0].ir.tensors, set()
            g = inferred.graph
            for vi in (*g.value_info, *g.output, *g.input):
                name = vi.name
                if name in seen:
                    continue
                seen.add(name)
                t = tensors.get(name)
                if t is not None and t.const is None:
                    t.offer_info(vi)
            return
        infos: dict[str, onnx.ValueInfoProto] = {}
        for g in _walk_graph_protos(inferred):
            for vi in (*g.value_info, *g.output, *g.input):
                infos.setdefault(vi.name, vi)
        for scope in self.scopes:
            if scope.is_function:
                continue
            for name, t in scope.ir.tensors.items():
                vi = infos.get(name)  # (first: most tensors have none, and decoding costs more)
                if vi is None or t.const is not None or (t.dtype is not None and t.shape is not None):
                    continue
                t.add_info(vi)



WEIGHTS_STUB = "weights.not.loaded"


def weightless(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with large initializers marked external: shape inference and the checker
    never read weights, and serializing a model without them for the C++ side costs nothing."""
    light = onnx.ModelProto()
    for f in ("ir_version", "producer_name", "producer_version", "domain", "model_version", "doc_string"):
        setattr(light, f, getattr(model, f))
    light.opset_import.extend(model.opset_import)
    light.metadata_props.extend(model.metadata_props)
    light.functions.extend(model.functions)
    g, src = light.graph, model.graph
    g.name, g.doc_string = src.name, src.doc_string
    g.node.extend(src.node)
    g.input.extend(src.input)
    g.output.extend(src.output)
    g.value_info.extend(src.value_info)
    g.sparse_initializer.extend(src.sparse_initializer)
    for t in src.initializer:
        small = math.prod(t.dims) <= 1024  # shape constants: inference reads them
        if t.data_location == onnx.TensorProto.EXTERNAL or small:
            g.initializer.append(t)
            continue
        stub = g.initializer.add()
        stub.name, stub.data_type = t.name, t.data_type
        stub.dims.extend(t.dims)
        stub.data_location = onnx.TensorProto.EXTERNAL
        entry = stub.external_data.add()
        entry.key, entry.value = "location", WEIGHTS_STUB
    return light


def producer(t: ir.Tensor) -> ir.Node | None:
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


def _declared(vi: onnx.ValueInfoProto) -> tuple[int, list] | None:
    """(element type, dims) a graph input declares; dims as in ``ModelGraph.shape``."""
    if not vi.type.HasField("tensor_type") or not vi.type.tensor_type.HasField("shape"):
        return None
    tt = vi.type.tensor_type
    return tt.elem_type, [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim]


def freeze_initializers(model: onnx.ModelProto) -> list[str]:
    """Stop listing the main graph's initializers as graph inputs (what onnxruntime's
    remove_initializer_from_input does), so no caller can feed a value the fusion assumed
    constant; initializers nothing reads any more go too.  Returns the names unlisted."""
    g = model.graph
    inits = {t.name for t in g.initializer}
    frozen = [i.name for i in g.input if i.name in inits]
    if not frozen:
        return []
    keep = [i for i in g.input if i.name not in inits]
    del g.input[:]
    g.input.extend(keep)
    read: set[str] = {o.name for o in g.output}
    for c in node_lists(model).values():
        for n in c.node:
            read.update(n.input)
            for a in n.attribute:  # names an enclosing graph's value is read by in a body
                for sub in [a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs:
                    read.update(o.name for o in sub.output)
    unused = set(frozen) - read
    if unused:
        kept = [t for t in g.initializer if t.name not in unused]
        del g.initializer[:]
        g.initializer.extend(kept)
    return frozen


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


def node_lists(model: onnx.ModelProto) -> dict[tuple, onnx.GraphProto | onnx.FunctionProto]:
    """Every node list of ``model``: the main graph, functions, and the control-flow bodies in
    either, keyed by a locator that finds the same list in any copy of the model (Scope.locator)."""
    out = _node_lists(model.graph, ("graph",))
    for k, f in enumerate(model.functions):
        out.update(_node_lists(f, ("function", k)))
    return out


def _node_lists(container, key: tuple) -> dict[tuple, onnx.GraphProto | onnx.FunctionProto]:
    """``container`` and the bodies nested in it, keyed by locator (``key`` is the container's)."""
    out: dict[tuple, onnx.GraphProto | onnx.FunctionProto] = {}

    def visit(container, key: tuple) -> None:
        out[key] = container
        for i, n in enumerate(container.node):
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    visit(a.g, key + (i, a.name, 0))
                elif a.type == onnx.AttributeProto.GRAPHS:
                    for j, g in enumerate(a.graphs):
                        visit(g, key + (i, a.name, j))

    visit(container, key)
    return out


def locate(model: onnx.ModelProto, key: tuple) -> onnx.GraphProto | onnx.FunctionProto:
    """The node list at locator ``key`` (see node_lists) in ``model``."""
    container = model.graph if key[0] == "graph" else model.functions[key[1]]
    path = key[1:] if key[0] == "graph" else key[2:]
    for i in range(0, len(path), 3):
        index, name, j = path[i : i + 3]
        # The last attribute of that name, as node_lists' walk keeps the last body it finds there.
        a = [a for a in container.node[index].attribute if a.name == name][-1]
        container = a.g if a.type == onnx.AttributeProto.GRAPH else a.graphs[j]
    return container


def in_order(g: ir.Graph) -> bool | None:
    """Whether every node of ``g`` comes after the nodes computing what it reads, from the view
    (no proto is read); None where only the protos can tell: in a nested graph (whose names
    may shadow the enclosing graph's) or with a node that has subgraphs (what they read)."""
    if g.parent is not None or any(n.subgraphs for n in g.nodes):
        return None
    return g.producers_first()


def _proto_names(c: onnx.GraphProto | onnx.FunctionProto) -> Iterator[str]:
    """What ModelGraph.all_names takes from one node list."""
    if isinstance(c, onnx.GraphProto):
        yield from (i.name for i in c.input)
        yield from (o.name for o in c.output)
        yield from (t.name for t in c.initializer)
    else:
        yield from c.input
        yield from c.output
    for n in c.node:
        yield n.name
        yield from n.output


def _walk_graph_protos(model: onnx.ModelProto) -> Iterator[onnx.GraphProto]:
    """The main graph, every subgraph, and the subgraphs inside function bodies."""
    return (c for c in node_lists(model).values() if isinstance(c, onnx.GraphProto))
