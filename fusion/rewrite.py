"""Applying fusions to the ModelProto.

A rule's rewrite writes new nodes through an :class:`Emitter` (one per fusion, so a rewrite
that gives up leaves nothing behind).  The :class:`Editor` collects every accepted fusion and
applies them all at once to a copy of the model: each fused subgraph's nodes are dropped and
the new nodes take the root's place in the node list, so the order stays topological.
Constants that only the removed nodes used are dropped too; the plugin ops' function bodies
and opset imports are added last.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper

from . import functions, specs
from .ir import Node
from .graph import ModelGraph, Scope, default_opset, node_lists

log = logging.getLogger(__name__)


class Reject(Exception):
    """A rule's check or rewrite declines a match; the message is the near-miss reason."""


@dataclass
class Emitter:
    """Collects the nodes and constants one fusion adds."""

    graph: ModelGraph
    scope: Scope
    prefix: str
    nodes: list[onnx.NodeProto] = field(default_factory=list)
    initializers: list[onnx.TensorProto] = field(default_factory=list)
    plugin_uses: list[tuple[specs.PluginSpec, functions.Use]] = field(default_factory=list)

    def name(self, hint: str) -> str:
        return self.graph.fresh_name(f"{self.prefix}{hint}")

    def const(self, hint: str, value: np.ndarray) -> str:
        """A new constant: an initializer, or a Constant node inside a function body."""
        name = self.name(hint)
        tensor = numpy_helper.from_array(np.ascontiguousarray(value), name)
        if self.scope.is_function:
            self.nodes.append(helper.make_node("Constant", [], [name], name=self.name("Constant"), value=tensor))
        else:
            self.initializers.append(tensor)
        return name

    def node(self, op_type: str, inputs: list[str], outputs: list[str] | None = None, domain: str = "", **attrs) -> list[str]:
        """Add a node; outputs default to one fresh name.  Returns the output names."""
        outs = outputs if outputs is not None else [self.name(op_type + "_out")]
        self.nodes.append(helper.make_node(op_type, inputs, outs, name=self.name(op_type), domain=domain or None, **attrs))
        return outs

    def plugin(self, spec: specs.PluginSpec, inputs: list[str], output: str, elem_type: int, **fields: Any) -> str:
        """Add a custom node exactly as ``spec`` describes it."""
        spec.check_arity(len(inputs), 1)
        attrs = spec.attributes(fields)
        self.node(spec.op_type, inputs, [output], domain=spec.domain, **attrs)
        use = functions.Use(tuple(sorted((k, v) for k, v in attrs.items() if not isinstance(v, np.ndarray))), elem_type)
        self.plugin_uses.append((spec, use))
        return output


@dataclass
class _Edit:
    removed: set[int] = field(default_factory=set)  # indices into the container's node list
    inserts: dict[int, list[onnx.NodeProto]] = field(default_factory=lambda: defaultdict(list))
    initializers: list[onnx.TensorProto] = field(default_factory=list)
    dropped_values: set[str] = field(default_factory=set)  # intermediates that no longer exist
    released: set[str] = field(default_factory=set)  # inputs of removed nodes: maybe unused now
    custom_domain: bool = False


class Editor:
    """Accumulates fusions against a ModelGraph and applies them to a copy of its proto."""

    def __init__(self, graph: ModelGraph):
        self.graph = graph
        self.edits: dict[int, _Edit] = {}
        self.plugin_uses: dict[str, tuple[specs.PluginSpec, list[functions.Use], set[int]]] = {}

    def commit(self, scope: Scope, removed: list[Node], root: Node, em: Emitter) -> None:
        edit = self.edits.setdefault(id(scope), _Edit())
        kept_outputs = set()
        for n in em.nodes:
            kept_outputs.update(n.output)
        for node in removed:
            nproto = self.graph.node_proto(node)
            edit.removed.add(self.graph.node_index(node))
            edit.released.update(i for i in nproto.input if i)
            edit.dropped_values.update(o for o in nproto.output if o and o not in kept_outputs)
        edit.inserts[self.graph.node_index(root)].extend(em.nodes)
        edit.initializers.extend(em.initializers)
        for spec, use in em.plugin_uses:
            edit.custom_domain = True
            entry = self.plugin_uses.setdefault(spec.op_type, (spec, [], set()))
            entry[1].append(use)
            entry[2].add(scope.opset)

    @property
    def modified(self) -> bool:
        return bool(self.edits)

    def apply(self, with_functions: bool = True, inplace: bool = False) -> tuple[onnx.ModelProto, list[str]]:
        """The ModelProto with every committed fusion applied (a copy unless ``inplace``), and warnings."""
        warnings: list[str] = []
        out = self.graph.proto
        if not inplace:
            out = onnx.ModelProto()
            out.CopyFrom(self.graph.proto)
        containers = node_lists(out)
        # Innermost first: rebuilding a node list copies its nodes, so an edit of a body made
        # after the list holding its If/Loop node was rebuilt would land in a discarded copy.
        for scope in sorted(self.graph.scopes, key=lambda s: -len(s.locator)):
            edit = self.edits.get(id(scope))
            if edit is None:
                continue
            container = containers[scope.locator]
            _apply_edit(container, edit)
        containers = node_lists(out)  # the rebuilt lists hold new copies of their bodies
        _drop_dead(out, self.edits.values(), containers)
        if any(e.custom_domain for e in self.edits.values()):
            _import_domain(out.opset_import, specs.PLUGIN_DOMAIN)
            for scope in self.graph.scopes:
                edit = self.edits.get(id(scope))
                if scope.is_function and edit is not None and edit.custom_domain:
                    _import_domain(containers[scope.locator].opset_import, specs.PLUGIN_DOMAIN)
        if with_functions:
            warnings += self._add_functions(out)
        return out, warnings

    def _add_functions(self, model: onnx.ModelProto) -> list[str]:
        warnings = []
        present = {(f.domain, f.name) for f in model.functions}
        opset = default_opset(model.opset_import)
        for op_type in sorted(self.plugin_uses):
            spec, uses, _ = self.plugin_uses[op_type]
            if (spec.domain, spec.op_type) in present:
                continue
            fn = functions.build(spec, opset, uses)
            if isinstance(fn, str):
                warnings.append(f"{op_type}: no ONNX function attached ({fn}); onnxruntime cannot run the fused model")
                continue
            model.functions.append(fn)
            # Model-local functions need IR version 8.
            model.ir_version = max(model.ir_version, 8)
        return warnings


def _apply_edit(container, edit: _Edit) -> None:
    old = list(container.node)
    new: list[onnx.NodeProto] = []
    for i, n in enumerate(old):
        new.extend(edit.inserts.get(i, ()))
        if i not in edit.removed:
            new.append(n)
    del container.node[:]
    container.node.extend(new)
    if isinstance(container, onnx.GraphProto):
        container.initializer.extend(edit.initializers)
        if edit.dropped_values:
            keep = [v for v in container.value_info if v.name not in edit.dropped_values]
            del container.value_info[:]
            container.value_info.extend(keep)


def _drop_dead(model: onnx.ModelProto, edits, containers) -> None:
    """Remove what only the fused-away nodes read: initializers, Constant nodes, and side
    computations (Shape -> Concat chains) that fed them.  Code that was dead before stays."""
    released = [name for e in edits for name in e.released]
    if not released:
        return
    uses: dict[str, int] = {}
    producer: dict[str, tuple[Any, onnx.NodeProto]] = {}
    for c in containers.values():
        outs = c.output if isinstance(c, onnx.FunctionProto) else [o.name for o in c.output]
        for o in outs:
            uses[o] = uses.get(o, 0) + 1
        for n in c.node:
            for i in n.input:
                uses[i] = uses.get(i, 0) + 1
            for sub in _subgraph_inputs(n):
                uses[sub] = uses.get(sub, 0) + 1
            if not _has_subgraph(n):
                for o in n.output:
                    producer[o] = (c, n)
    dead_nodes: set[int] = set()
    dead_names: set[str] = set()
    work = list(dict.fromkeys(released))
    while work:
        name = work.pop()
        if uses.get(name, 0) > 0 or name in dead_names:
            continue
        dead_names.add(name)
        hit = producer.get(name)
        if hit is None or id(hit[1]) in dead_nodes:
            continue
        _, node = hit
        if any(uses.get(o, 0) > 0 for o in node.output if o):
            continue
        dead_nodes.add(id(node))
        for i in node.input:
            if i:
                uses[i] -= 1
                work.append(i)
    for key in sorted(containers, key=len, reverse=True):  # innermost first, as in Editor.apply
        c = containers[key]
        if isinstance(c, onnx.GraphProto):
            inputs = {i.name for i in c.input}
            keep = [t for t in c.initializer if t.name not in dead_names or t.name in inputs]
            if len(keep) != len(c.initializer):
                del c.initializer[:]
                c.initializer.extend(keep)
            vis = [v for v in c.value_info if v.name not in dead_names]
            if len(vis) != len(c.value_info):
                del c.value_info[:]
                c.value_info.extend(vis)
        nodes = [n for n in c.node if id(n) not in dead_nodes]
        if len(nodes) != len(c.node):
            del c.node[:]
            c.node.extend(nodes)


def _has_subgraph(n: onnx.NodeProto) -> bool:
    return any(a.type in (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS) for a in n.attribute)


def _subgraph_inputs(n: onnx.NodeProto) -> list[str]:
    """Names a node's subgraphs read (from any scope: reading counts as a use)."""
    out: list[str] = []
    for a in n.attribute:
        graphs = [a.g] if a.type == onnx.AttributeProto.GRAPH else list(a.graphs) if a.type == onnx.AttributeProto.GRAPHS else []
        for g in graphs:
            for m in g.node:
                out.extend(m.input)
                out.extend(_subgraph_inputs(m))
    return out


def _import_domain(opset_import, domain: str) -> None:
    if not any(o.domain == domain for o in opset_import):
        opset_import.append(helper.make_opsetid(domain, 1))
