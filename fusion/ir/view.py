"""A lean, read-only graph view with onnx-graphsurgeon's interface.

Nodes have ``op``, ``name``, ``domain``, ``attrs``, ``inputs`` and ``outputs``; tensors have
``name``, ``inputs`` (the producer), ``outputs`` (the consumers), ``shape`` and ``dtype`` —
the names onnx-graphsurgeon uses, so patterns read the same either way.  It exists for speed:
importing a 48-layer BERT through ``gs.import_onnx`` alone takes longer than our whole fusion
budget, while this view is built in one pass over the protos and decodes attributes only when
a pattern asks.  Each node keeps its NodeProto and position, which is how rewrites find what
to edit.
"""

from __future__ import annotations

from typing import Iterator

import onnx

_GRAPH_TYPES = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)


class AttributeRef:
    """A function-body attribute that refers to an attribute of the calling node."""

    __slots__ = ("name", "type")

    def __init__(self, name: str, type_: int):
        self.name, self.type = name, type_

    def __eq__(self, other) -> bool:
        return isinstance(other, AttributeRef) and (self.name, self.type) == (other.name, other.type)

    def __hash__(self) -> int:
        return hash((self.name, self.type))

    def __repr__(self) -> str:
        return f"AttributeRef({self.name})"


class Tensor:
    __slots__ = ("name", "inputs", "outputs", "const", "graph_input", "_info", "_dtype", "_shape")

    def __init__(self, name: str, dtype: int | None = None, shape: list | None = None, const=None, info=None):
        self.name = name
        self.inputs: list[Node] = []  # the producer, if any
        self.outputs: list[Node] = []  # consumers, in this graph and in nested subgraphs
        self.const = const  # the TensorProto of an initializer
        # An initializer also listed as a graph input: that input's ValueInfoProto.  From IR 4
        # on a caller may feed it, so its value is not a constant (fusion.ir.graph decides).
        self.graph_input: onnx.ValueInfoProto | None = None
        self._info = info  # a ValueInfoProto, decoded on first use (most never are)
        self._dtype = dtype
        self._shape = shape

    @property
    def dtype(self) -> int | None:
        """ONNX element type, or None."""
        self._decode()
        return self._dtype

    @dtype.setter
    def dtype(self, value: int | None) -> None:
        self._decode()
        self._dtype = value

    @property
    def shape(self) -> list | None:
        """Dims: ints (static) and strings/None (dynamic); None when the rank is unknown."""
        self._decode()
        return self._shape

    @shape.setter
    def shape(self, value: list | None) -> None:
        self._decode()
        self._shape = value

    def add_info(self, vi: onnx.ValueInfoProto) -> None:
        """Take the element type and dims this tensor lacks from ``vi`` (inferred), decoded on
        first use like an annotation: most tensors are never asked."""
        self._decode()
        self._info = vi

    def offer_info(self, vi: onnx.ValueInfoProto) -> None:
        """``add_info(vi)`` if this tensor lacks its element type or dims (its annotation read first)."""
        if self._info is not None:
            self._decode()
        if self._dtype is None or self._shape is None:
            self._info = vi

    def _decode(self) -> None:
        vi, self._info = self._info, None
        if vi is None or not vi.type.HasField("tensor_type"):
            return
        tt = vi.type.tensor_type
        self._dtype = self._dtype or tt.elem_type or None
        if self._shape is None and tt.HasField("shape"):
            self._shape = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None) for d in tt.shape.dim]

    def __repr__(self) -> str:
        return f"Tensor({self.name!r})"


class Node:
    __slots__ = ("op", "name", "domain", "inputs", "outputs", "proto", "index", "graph", "scope", "_attrs", "subgraphs")

    def __init__(self, proto: onnx.NodeProto, index: int, graph: "Graph"):
        self.proto = proto
        self.op = proto.op_type
        self.name = proto.name
        self.domain = proto.domain
        self.index = index  # position in the container's node list
        self.graph = graph
        self.scope = None  # set by fusion.ir.graph.ModelGraph
        self.inputs: list[Tensor] = []
        self.outputs: list[Tensor] = []
        self._attrs: dict | None = None
        self.subgraphs: dict[str, list[Graph]] = {}

    @property
    def attrs(self) -> dict:
        if self._attrs is None:
            self._attrs = {a.name: self._value(a) for a in self.proto.attribute}
        return self._attrs

    def _value(self, a: onnx.AttributeProto):
        if a.ref_attr_name:
            return AttributeRef(a.ref_attr_name, a.type)
        if a.type == onnx.AttributeProto.GRAPH:
            return self.subgraphs[a.name][0]
        if a.type == onnx.AttributeProto.GRAPHS:
            return list(self.subgraphs[a.name])
        v = onnx.helper.get_attribute_value(a)
        if isinstance(v, bytes):
            return v.decode("utf-8", "replace")
        if isinstance(v, list) and v and isinstance(v[0], bytes):
            return [x.decode("utf-8", "replace") for x in v]
        return v

    def __repr__(self) -> str:
        return f"Node({self.op} {self.name!r})"


class Graph:
    """A node list with its tensors; ``parent`` is the enclosing graph of a subgraph."""

    def __init__(self, proto, parent: "Graph | None" = None):
        self.proto = proto
        self.parent = parent
        self.nodes: list[Node] = []
        self.inputs: list[Tensor] = []
        self.outputs: list[Tensor] = []
        self.tensors: dict[str, Tensor] = {}
        self.defined: set[str] = set()  # graph inputs and initializers (function inputs)
        self._producers_first: bool | None = None

    def producers_first(self) -> bool:
        """Whether every node comes after the nodes of this graph that compute what it reads
        (found once: the view never changes)."""
        if self._producers_first is None:
            self._producers_first = all(
                p.index < n.index for n in self.nodes for t in n.inputs for p in t.inputs if p.graph is self
            )
        return self._producers_first

    def lookup(self, name: str) -> Tensor | None:
        g: Graph | None = self
        while g is not None:
            t = g.tensors.get(name)
            if t is not None:
                return t
            g = g.parent
        return None

    def walk(self) -> Iterator["Graph"]:
        """This graph and every nested subgraph."""
        yield self
        for n in self.nodes:
            for subs in n.subgraphs.values():
                for s in subs:
                    yield from s.walk()


def import_graph(proto: onnx.GraphProto, parent: Graph | None = None) -> Graph:
    g = Graph(proto, parent)
    info = {}
    for vi in (*proto.input, *proto.output, *proto.value_info):
        info[vi.name] = vi
    for t in proto.initializer:
        g.tensors[t.name] = Tensor(t.name, t.data_type, list(t.dims), const=t)
    for sp in proto.sparse_initializer:
        g.tensors[sp.values.name] = Tensor(sp.values.name, sp.values.data_type, list(sp.dims))
    g.defined = set(g.tensors) | {vi.name for vi in proto.input}
    for vi in proto.input:
        if vi.name not in g.tensors:
            g.tensors[vi.name] = _from_info(vi)
        else:
            g.tensors[vi.name].graph_input = vi
        g.inputs.append(g.tensors[vi.name])
    _import_nodes(g, proto.node, info)
    for vi in proto.output:
        g.outputs.append(_tensor(g, vi.name, info))
    return g


def import_function(proto: onnx.FunctionProto) -> Graph:
    g = Graph(proto)
    for name in proto.input:
        g.tensors[name] = Tensor(name)
        g.inputs.append(g.tensors[name])
    g.defined = set(proto.input)
    _import_nodes(g, proto.node, {})
    for name in proto.output:
        g.outputs.append(_tensor(g, name, {}))
    return g


def _import_nodes(g: Graph, nodes, info: dict) -> None:
    tensors = g.tensors  # (the loop runs once per node of the model: names bound once)
    get, add = tensors.get, g.nodes.append
    for i, p in enumerate(nodes):
        node = Node(p, i, g)
        inputs, outputs = node.inputs, node.outputs
        for name in p.input:
            if not name:
                inputs.append(Tensor(""))  # an absent optional input
                continue
            t = get(name) or _tensor(g, name, info)
            t.outputs.append(node)
            inputs.append(t)
        for a in p.attribute or ():
            if a.type in _GRAPH_TYPES:
                subs = [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs)
                # Reads of outer tensors register the inner node as their consumer (as in gs).
                node.subgraphs[a.name] = [import_graph(s, g) for s in subs]
        for name in p.output:
            if not name:
                outputs.append(Tensor(""))
                continue
            t = get(name)
            if t is None:
                t = tensors[name] = _from_info(info[name]) if name in info else Tensor(name)
            t.inputs.append(node)
            outputs.append(t)
        add(node)


def _tensor(g: Graph, name: str, info: dict) -> Tensor:
    t = g.lookup(name)
    if t is None:
        t = g.tensors[name] = _from_info(info[name]) if name in info else Tensor(name)
    return t


def _from_info(vi: onnx.ValueInfoProto) -> Tensor:
    return Tensor(vi.name, info=vi)
