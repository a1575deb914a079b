"""Applying fusions to the ModelProto.

A rule's rewrite writes new nodes through an :class:`Emitter` (one per fusion, so a rewrite
that gives up leaves nothing behind).  The :class:`Editor` collects every accepted fusion and
applies them all at once to a copy of the model: each fused subgraph's nodes are dropped and
the new nodes take the root's place in the node list, so the order stays topological.
Constants that only the removed nodes used are dropped too; the plugin ops' function bodies
and opset imports are added last.

A custom node is admitted only if a function body can define it (:meth:`Editor.admit`): the
opset must allow one, every node of the op must be served by the same body, and a function of
that name already in the model must be exactly that body (old nodes keep calling it; a new
node must not silently run another).  Otherwise the rewrite is rejected with the reason,
unless the caller asked for plugin-only output (``functions=False``).
"""

from __future__ import annotations

import logging
from bisect import bisect_left, bisect_right
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from itertools import chain
from typing import Any, Collection

import numpy as np
import onnx
from onnx import helper, numpy_helper

from . import functions, specs
from ..ir.view import Node
from ..ir.graph import ModelGraph, Scope, default_opset, node_lists

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
    editor: "Editor | None" = None  # admits custom nodes (function bodies); None: no check
    compute_type: int | None = None  # the element type the fused nodes compute in (for the report)

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

    def plugin(self, spec: specs.PluginSpec, inputs: list[str], output: str | list[str], elem_type: int, **fields: Any) -> str:
        """Add a custom node exactly as ``spec`` describes it; returns its first output."""
        outputs = [output] if isinstance(output, str) else list(output)
        spec.check_arity(len(inputs), len(outputs))
        attrs = spec.attributes(fields)
        # Tensor fields are never baked into a body (and would make the Use unhashable).
        baked = ((k, v) for k, v in attrs.items() if not isinstance(v, (np.ndarray, onnx.TensorProto)))
        use = functions.Use(tuple(sorted(baked)), elem_type)
        if self.editor is not None:
            self.editor.admit(spec, [u for s, u in self.plugin_uses if s is spec] + [use])
        self.node(spec.op_type, inputs, outputs, domain=spec.domain, **attrs)
        self.plugin_uses.append((spec, use))
        return outputs[0]

    def reshape(self, y: str, shape: str) -> str:
        """Reshape ``y`` to the run-time ``shape`` whose 0s are zero-size dims, not copies."""
        if self.scope.opset < 10:
            raise Reject(
                f"at opset {self.scope.opset} a Reshape to a shape computed at run time would copy a zero-size dim "
                "instead of keeping it (allowzero needs opset 14, Slice with run-time bounds opset 10)"
            )

        def op(op_type: str, *inputs: str, **attrs) -> str:
            return self.node(op_type, list(inputs), **attrs)[0]

        def ints(values: list[int]) -> str:
            return self.const("shape", np.array(values, np.int64))

        return functions.reshape_keeping_zeros(op, ints, y, shape, self.scope.opset)


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

    def __init__(self, graph: ModelGraph, functions: bool = True):
        self.graph = graph
        self.functions = functions  # attach function bodies (False: plugin-only output)
        self.edits: dict[int, _Edit] = {}
        self.plugin_uses: dict[str, tuple[specs.PluginSpec, list[functions.Use], set[int]]] = {}
        self._admitted: dict[tuple, str | None] = {}  # (op_type, distinct uses) -> reason or None
        self._distinct: dict[str, dict[functions.Use, None]] = {}  # committed uses per op, once each
        self._dead: tuple[set[str], dict[tuple, list[int]]] | None = None  # what apply drops (found once)
        self._built: dict[tuple[str, int], onnx.FunctionProto | str] = {}  # function bodies apply attaches

    def admit(self, spec: specs.PluginSpec, new_uses: list[functions.Use]) -> None:
        """Raise Reject unless one function body can define every node of ``spec`` with ``new_uses``."""
        # The body depends only on the distinct uses.
        uses = list(dict.fromkeys([*self._distinct.get(spec.op_type, {}), *new_uses]))
        key = (spec.op_type, frozenset(uses))
        if key not in self._admitted:
            self._admitted[key] = self._refusal(spec, uses)
        if self._admitted[key] is not None:
            raise Reject(self._admitted[key])

    def _refusal(self, spec: specs.PluginSpec, uses: list[functions.Use]) -> str | None:
        model = self.graph.proto
        fn = functions.build(spec, default_opset(model.opset_import), uses)
        existing = next((f for f in model.functions if (f.domain, f.name) == (spec.domain, spec.op_type)), None)
        if existing is not None:
            if isinstance(fn, str) or not functions.same_function(fn, existing):
                return (
                    f"the model already defines function {spec.domain}::{spec.op_type} with another body: "
                    f"a new {spec.op_type} node would run that body, not this chain"
                )
            return None
        if isinstance(fn, str) and self.functions:
            return (
                f"{spec.op_type}: no ONNX function body can define this node ({fn}), so onnxruntime could not "
                "run the fused model; ask for plugin-only output (functions=False, --no-functions) to fuse it anyway"
            )
        return None

    def commit(self, scope: Scope, removed: list[Node], root: Node, em: Emitter) -> None:
        edit = self.edits.setdefault(id(scope), _Edit())
        kept_outputs = set()
        for n in em.nodes:
            kept_outputs.update(n.output)
        for node in removed:  # (names read from the view: the same as the proto's, and cheaper)
            edit.removed.add(self.graph.node_index(node))
            edit.released.update(t.name for t in node.inputs if t.name)
            edit.dropped_values.update(t.name for t in node.outputs if t.name and t.name not in kept_outputs)
        edit.inserts[self.graph.node_index(root)].extend(em.nodes)
        edit.initializers.extend(em.initializers)
        for spec, use in em.plugin_uses:
            edit.custom_domain = True
            entry = self.plugin_uses.setdefault(spec.op_type, (spec, [], set()))
            entry[1].append(use)
            self._distinct.setdefault(spec.op_type, {})[use] = None
            entry[2].add(scope.opset)

    @property
    def modified(self) -> bool:
        return bool(self.edits)

    def apply(
        self, with_functions: bool = True, inplace: bool = False, base: onnx.ModelProto | None = None
    ) -> tuple[onnx.ModelProto, list[str]]:
        """The ModelProto with every committed fusion applied (a copy unless ``inplace``), and warnings.

        ``base``: apply to this copy of the model instead (one with the same node lists, such as
        its weightless view: the fused model can then be validated before the original is touched).
        """
        warnings: list[str] = []
        out = self.graph.proto if base is None else base
        if not inplace and base is None:
            out = onnx.ModelProto()
            out.CopyFrom(self.graph.proto)
        containers = self.graph.node_lists(out)
        # Innermost first.  Every list was found before the first edit, and lists are edited in
        # place, so a body found here is the one the output keeps.
        for scope in sorted(self.graph.scopes, key=lambda s: -len(s.locator)):
            edit = self.edits.get(id(scope))
            if edit is None:
                continue
            container = containers[scope.locator]
            _apply_edit(container, edit)
        # An edited list's nodes have moved: a locator through it is stale, and only a walk finds
        # the bodies below it.
        edited = [s.locator for s in self.graph.scopes if id(s) in self.edits]
        if any(len(k) > len(e) and k[: len(e)] == e for k in self.graph.locators for e in edited):
            containers, plain = node_lists(out), set()
        else:
            containers, plain = self.graph.node_lists(out), self._plain_lists()
        # What dies is the same in every model the edits were applied to (node lists, initializers
        # and value_info sit at the same places in a weightless copy): found once, deleted in each.
        if self._dead is None:
            self._dead = self._dead_in_view() or _find_dead(self.edits.values(), containers, plain)
        _delete_dead(containers, *self._dead)
        if any(e.custom_domain for e in self.edits.values()):
            _import_domain(out.opset_import, specs.PLUGIN_DOMAIN)
            for scope in self.graph.scopes:
                edit = self.edits.get(id(scope))
                if scope.is_function and edit is not None and edit.custom_domain:
                    _import_domain(containers[scope.locator].opset_import, specs.PLUGIN_DOMAIN)
        if with_functions:
            warnings += self._add_functions(out)
        elif self.plugin_uses:
            ops = ", ".join(sorted(self.plugin_uses))
            warnings.append(
                f"functions=False: the custom nodes ({ops}) carry no ONNX function body; onnxruntime cannot run "
                "the fused model, only TensorRT with their plugins registered can"
            )
            if base is None:
                log.warning("%s", warnings[-1])
        return out, warnings

    def main_graph_ops(self) -> set[tuple[str, str]] | None:
        """(domain, op_type) of every node the fused main graph and its bodies may hold: a superset
        (fused-away nodes still count), or None when a fusion added a node with a body."""
        ops = {(n.domain, n.op) for s in self.graph.scopes if s.locator[0] == "graph" for n in s.ir.nodes}
        for scope in self.graph.scopes:
            edit = self.edits.get(id(scope))
            if edit is None or scope.locator[0] != "graph":
                continue
            for n in (n for nodes in edit.inserts.values() for n in nodes):
                if _has_subgraph(n):
                    return None
                ops.add((n.domain, n.op_type))
        return ops

    def _dead_in_view(self) -> tuple[set[str], dict[tuple, list[int]]] | None:
        """``_find_dead`` for a model of one node list (no function, no body, none added), read
        from the graph view and the edits instead of every node of the fused proto; else None."""
        if self.graph.locators != [("graph",)] or len(self.edits) != 1:
            return None
        scope = self.graph.scopes[0]
        edit = self.edits.get(id(scope))
        if edit is None or not edit.released:
            return None
        added = [n for i in sorted(edit.inserts) for n in edit.inserts[i]]
        if any(_has_subgraph(n) for n in added):
            return None
        tensors, removed = scope.ir.tensors, edit.removed
        new_reads = Counter(chain.from_iterable([n.input for n in added]))
        new_producer: dict[str, onnx.NodeProto] = {}
        for n in added:
            for o in n.output:
                t = tensors.get(o)
                if t is not None and t.inputs and t.inputs[0].index not in removed:
                    return None  # defined twice: leave the order of definitions to the full walk
                new_producer[o] = n
        outputs = Counter(t.name for t in scope.ir.outputs)
        uses: dict[str, int] = {}

        def count(name: str) -> int:
            if name not in uses:
                t = tensors.get(name)
                kept = 0 if t is None else sum(1 for c in t.outputs if c.index not in removed)
                uses[name] = kept + new_reads.get(name, 0) + outputs.get(name, 0)
            return uses[name]

        dead_names: set[str] = set()
        dead_old: set[int] = set()  # indices of the graph's nodes
        dead_new: set[int] = set()  # ids of added nodes
        work = list(dict.fromkeys(edit.released))
        while work:
            name = work.pop()
            if count(name) > 0 or name in dead_names:
                continue
            dead_names.add(name)
            t = tensors.get(name)
            node = t.inputs[0] if t is not None and t.inputs and t.inputs[0].index not in removed else None
            if node is not None:
                if node.index in dead_old or any(count(o.name) > 0 for o in node.outputs if o.name):
                    continue
                dead_old.add(node.index)
                reads = [i.name for i in node.inputs if i.name]
            else:
                proto = new_producer.get(name)
                if proto is None or id(proto) in dead_new or any(count(o) > 0 for o in proto.output if o):
                    continue
                dead_new.add(id(proto))
                reads = [i for i in proto.input if i]
            for i in reads:
                count(i)
                uses[i] -= 1
                work.append(i)
        # Positions in the edited list, where each root's new nodes come before the node kept at
        # its index: the kept nodes before it, plus the new nodes at or (for a new one) before it.
        gone, keys = sorted(removed), sorted(edit.inserts)
        added_before = [0]  # new nodes at the roots before keys[k]
        for key in keys:
            added_before.append(added_before[-1] + len(edit.inserts[key]))
        positions = [i - bisect_left(gone, i) + added_before[bisect_right(keys, i)] for i in dead_old]
        for k, key in enumerate(keys):
            for j, n in enumerate(edit.inserts[key]):
                if id(n) in dead_new:
                    positions.append(key - bisect_left(gone, key) + added_before[k] + j)
        return dead_names, {scope.locator: sorted(positions)}

    def _plain_lists(self) -> set[tuple]:
        """Locators of the node lists that hold no node with a graph attribute, fusions applied."""
        plain = set()
        for scope in self.graph.scopes:
            edit = self.edits.get(id(scope))
            added = () if edit is None else (n for nodes in edit.inserts.values() for n in nodes)
            if not scope.nested and not any(_has_subgraph(n) for n in added):
                plain.add(scope.locator)
        return plain

    def _add_functions(self, model: onnx.ModelProto) -> list[str]:
        warnings = []
        present = {(f.domain, f.name) for f in model.functions}
        opset = default_opset(model.opset_import)
        for op_type in sorted(self.plugin_uses):
            spec, uses, _ = self.plugin_uses[op_type]
            key = (op_type, opset)  # (built once for the output and its weightless copy)
            if key not in self._built:
                self._built[key] = functions.build(spec, opset, uses)
            fn = self._built[key]
            if (spec.domain, spec.op_type) in present:
                continue  # the same body (Editor.admit saw to it): the model's is reused
            if isinstance(fn, str):
                warnings.append(f"{op_type}: no ONNX function attached ({fn}); onnxruntime cannot run the fused model")
                continue
            model.functions.append(fn)
            # Model-local functions need IR version 8.
            model.ir_version = max(model.ir_version, 8)
        return warnings


def _apply_edit(container, edit: _Edit) -> None:
    """Edit the node list in place (no copy of the nodes kept): back to front, so the positions
    still to edit stay put, each removed run goes and the new nodes take their root's place,
    before the node that was there."""
    nodes = container.node
    for i in sorted(edit.removed | edit.inserts.keys(), reverse=True):
        if i in edit.removed:
            del nodes[i]
        for k, n in enumerate(edit.inserts.get(i, ())):
            nodes.insert(i + k, n)
    if isinstance(container, onnx.GraphProto):
        container.initializer.extend(edit.initializers)
        if edit.dropped_values:
            _delete(container.value_info, [i for i, v in enumerate(container.value_info) if v.name in edit.dropped_values])


def _delete(repeated, indices: list[int]) -> None:
    """Delete the elements at ascending ``indices`` of a repeated field in place, a run at a time
    from the back: the rest (weights, for initializers) is neither copied nor moved in Python."""
    end = len(indices)
    while end:
        start = end - 1
        while start and indices[start - 1] == indices[start] - 1:
            start -= 1
        del repeated[indices[start] : indices[end - 1] + 1]
        end = start


def _find_dead(edits, containers, plain: Collection[tuple] = ()) -> tuple[set[str], dict[tuple, list[int]]]:
    """What only the fused-away nodes read: initializers, Constant nodes, and side computations
    (Shape -> Concat chains) that fed them; code that was dead before stays.  Returns the dead
    names and, per list, the positions of the dead nodes.  ``plain``: locators of lists known to
    hold no node with a graph attribute (read faster)."""
    released = [name for e in edits for name in e.released]
    if not released:
        return set(), {}
    uses: Counter[str] = Counter()
    producer: dict[str, tuple[Any, onnx.NodeProto]] = {}
    for key, c in containers.items():
        uses.update(c.output if isinstance(c, onnx.FunctionProto) else [o.name for o in c.output])
        nodes = list(c.node)
        if key in plain:
            uses.update(chain.from_iterable([n.input for n in nodes]))
            for n in nodes:
                for o in n.output:
                    producer[o] = (c, n)
            continue
        for n in nodes:
            uses.update(n.input)
            uses.update(_subgraph_inputs(n))
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
    return dead_names, {key: [i for i, n in enumerate(c.node) if id(n) in dead_nodes] for key, c in containers.items()}


def _delete_dead(containers, dead_names: set[str], dead_nodes: dict[tuple, list[int]]) -> None:
    """Delete what ``_find_dead`` found: initializers (not graph inputs) and value_info by name, nodes by position."""
    if not dead_names:
        return
    for key in sorted(containers, key=len, reverse=True):  # innermost first, as in Editor.apply
        c = containers[key]
        if isinstance(c, onnx.GraphProto):
            inputs = {i.name for i in c.input}
            _delete(c.initializer, [i for i, t in enumerate(c.initializer) if t.name in dead_names and t.name not in inputs])
            _delete(c.value_info, [i for i, v in enumerate(c.value_info) if v.name in dead_names])
        _delete(c.node, dead_nodes.get(key, []))


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


def topologically_sorted(
    model: onnx.ModelProto, lists: dict[tuple, Any] | None = None, ordered: Collection[tuple] = ()
) -> onnx.ModelProto | None:
    """A copy of ``model`` with every node list in topological order, or None if it already is.

    onnxruntime runs graphs in any order, but the passes (and onnx.checker) take the node
    order for a topological one: a producer listed after its consumer would make a rewrite
    place nodes before what they read.  Sorting keeps the original order wherever it can.
    ``lists``: ``node_lists(model)`` if the caller has it; ``ordered``: the locators of lists
    the caller already knows to be in order (read from its graph view, which is cheaper).
    """
    lists = node_lists(model) if lists is None else lists
    if all(key in ordered or _is_sorted(c) for key, c in lists.items()):
        return None
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for key in sorted(node_lists(out), key=len, reverse=True):  # innermost first, as in Editor.apply
        c = node_lists(out)[key]
        if not _is_sorted(c):
            order = _topo_order(c)
            nodes = [c.node[i] for i in order]
            copies = [onnx.NodeProto() for _ in nodes]
            for dst, src in zip(copies, nodes):
                dst.CopyFrom(src)
            del c.node[:]
            c.node.extend(copies)
    return out


def _reads(n: onnx.NodeProto) -> list[str]:
    return [i for i in n.input if i] + _subgraph_inputs(n)


def _is_sorted(c) -> bool:
    where = {o: i for i, n in enumerate(c.node) for o in n.output if o}
    return all(where.get(r, -1) < i for i, n in enumerate(c.node) for r in _reads(n))


def _topo_order(c) -> list[int]:
    """Kahn's algorithm, always taking the earliest ready node (the input is acyclic: checked)."""
    import heapq

    where = {o: i for i, n in enumerate(c.node) for o in n.output if o}
    users: list[list[int]] = [[] for _ in c.node]
    pending = [0] * len(c.node)
    for i, n in enumerate(c.node):
        deps = {where[r] for r in _reads(n) if r in where and where[r] != i}
        pending[i] = len(deps)
        for d in deps:
            users[d].append(i)
    ready = [i for i, p in enumerate(pending) if p == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        i = heapq.heappop(ready)
        order.append(i)
        for u in users[i]:
            pending[u] -= 1
            if pending[u] == 0:
                heapq.heappush(ready, u)
    if len(order) != len(c.node):  # a cycle: leave the order as it is (the graph check reports it)
        return list(range(len(c.node)))
    return order
