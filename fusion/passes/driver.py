"""The fusion driver: requires -> call -> ensures, with an honest ``modified`` flag.

Every scope (main graph, control-flow bodies, model-local functions) is scanned from its
outputs back, so the first rule to match at a node sees the longest chain ending there.  A
node fused once is never matched again.  Rules that do not fuse leave a near-miss with the
reason, when they got far enough for it to be interesting.
"""

from __future__ import annotations

import functools
import gc
import logging
import os
import tempfile
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import onnx

from ..rewrite import specs
from ..errors import FusionError
from ..ir.view import Node
from ..ir.graph import ModelGraph, Scope, freeze_initializers, in_order, weightless
from ..ir.model_io import check_graph, check_versions, external_tensors
from ..match.pattern import Failure, Match, Matcher
from ..rewrite.editor import Editor, Emitter, Reject, topologically_sorted
from ..rewrite.rules import TARGETS, Context, Rule

log = logging.getLogger(__name__)

# Structural matches tried per root before giving up (alternatives multiply).
MAX_MATCHES_PER_ROOT = 64


@dataclass
class Fusion:
    rule: str
    target: str
    scope: str
    root: str
    removed: list[str]
    nodes: list[dict]  # emitted nodes: op_type, name, domain, inputs, outputs, attributes
    compute_type: str | None = None  # element type the fused nodes compute in ("FLOAT", "DOUBLE")
    notes: list[str] = field(default_factory=list)  # what the fused node does differently (rule's check says)


@dataclass
class NearMiss:
    rule: str
    scope: str
    node: str
    reason: str
    progress: int = 0
    nodes: tuple = ()  # ids of the nodes the failed match had bound (for de-duplication)
    would_fuse: bool = False  # it passed every check: only the target's defaults leave it out


@dataclass
class PassResult:
    model: onnx.ModelProto
    modified: bool
    fusions: list[Fusion] = field(default_factory=list)
    near_misses: list[NearMiss] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    seconds: float = 0.0
    dry_run: bool = False

    def __str__(self) -> str:
        from .text import text  # noqa: PLC0415 - report imports this module

        return text(self, self.dry_run)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for f in self.fusions:
            out[f.rule] = out.get(f.rule, 0) + 1
        return out


class InternalError(FusionError):
    """The fused model failed validation although the input passed it: a bug here."""

    exit_code = 3


def _gc_paused(fn: Callable) -> Callable:
    """Run ``fn`` with the cyclic garbage collector off (the caller's setting restored after).

    A pass allocates a graph view of every node and tensor, all alive until it ends: the
    collector's passes over them find nothing to free and cost more than the matching they
    interrupt.  The pass breaks the view's cycles as it ends (``_release``): reference counting
    frees it then, and no collection of all it allocated follows."""

    @functools.wraps(fn)
    def paused(*args, **kwargs):
        if not gc.isenabled():
            return fn(*args, **kwargs)
        gc.disable()
        try:
            return fn(*args, **kwargs)
        finally:
            gc.enable()

    return paused


@_gc_paused
def run(
    model: onnx.ModelProto,
    rules: Sequence[Rule],
    target: str = "plugin",
    *,
    base_dir: str | None = None,
    functions: bool = True,
    validate: bool = True,
    dry_run: bool = False,
    inplace: bool = False,
    reload: Callable[[], onnx.ModelProto] | None = None,
    options: dict | None = None,
    assume_constant_initializers: bool = False,
) -> PassResult:
    """Apply ``rules`` to ``model``; see the module doc.

    ``model`` is left as it was unless ``inplace`` (which saves copying the weights); even
    then it is changed only once the fused model passed validation (checked on a weightless
    copy), so a failure raises and leaves ``model`` intact.  ``reload`` is no longer needed
    (kept for callers that pass it).
    ``assume_constant_initializers``: initializers listed as graph inputs are constants (see
    ModelGraph.overridable); a fused output then no longer lists them as inputs.
    """
    t0 = time.perf_counter()
    # requires
    if target not in TARGETS:
        raise FusionError(f"unknown target {target!r} (choose from {', '.join(TARGETS)})")
    check_versions(model)
    ours = {(s.domain, s.op_type) for s in specs.SPECS}
    graph = ModelGraph.from_proto(model, base_dir, skip_functions=ours, assume_constant_initializers=assume_constant_initializers)
    ir_version = model.ir_version
    check_graph(graph.scopes[0].ir)
    caller, work = model, model
    ordered = {s.locator for s in graph.scopes if in_order(s.ir)}
    sorted_copy = topologically_sorted(model, graph.node_lists(), ordered)
    if sorted_copy is not None:
        # The rules take node order for dependency order: work on a sorted copy.
        log.info("the model's nodes are not in topological order: fusing a sorted copy")
        work = sorted_copy
        graph = ModelGraph.from_proto(
            work, base_dir, skip_functions=ours, assume_constant_initializers=assume_constant_initializers
        )

    # call
    editor = Editor(graph, functions=functions)
    claimed: set[int] = set()
    fusions: list[Fusion] = []
    misses: list[NearMiss] = []
    by_op: dict[str, list[Rule]] = {}
    for r in rules:
        if target not in r.targets:
            continue
        for op in r.root_ops:
            by_op.setdefault(op, []).append(r)
    for scope in graph.scopes:
        ctx = Context(graph, scope, target, dict(options or {}))
        near = _NearSignature(scope)
        for node in reversed(scope.ir.nodes):
            if id(node) in claimed:
                continue
            deferred = None  # a miss that a later rule's miss at this root replaces
            for rule in by_op.get(node.op, ()):
                if not near.within(rule, node) or not rule.may_start_at(node):
                    continue
                outcome = _try(rule, node, ctx, editor, claimed)
                if isinstance(outcome, Fusion):
                    fusions.append(outcome)
                    deferred = None
                    break
                if outcome is not None:
                    if rule.defers_misses:
                        deferred = deferred or outcome
                    else:
                        misses.append(outcome)
                        deferred = None
            if deferred is not None:
                misses.append(deferred)
    misses = _dedupe(misses, claimed)

    if dry_run or not editor.modified:
        _release(graph)
        return PassResult(model, False, fusions, misses, [], time.perf_counter() - t0, dry_run=dry_run)
    edit_in_place = inplace or work is not caller  # a sorted copy is ours to edit
    freezing = assume_constant_initializers or ir_version < 4
    if validate and edit_in_place:
        # Validate a weightless fused copy first: the proto edited in place stays intact on failure.
        light, _ = editor.apply(with_functions=functions, base=graph.light())
        _validate(light, lambda: caller, base_dir, editor.main_graph_ops(), light=True)
    light = None
    if validate and not edit_in_place and not freezing:
        # The fused model without its weights, for the checker: the edits applied to the weightless
        # copy that shape inference made (cheaper than another one made from the output).
        light, _ = editor.apply(with_functions=functions, base=graph.light())
    out, warnings = editor.apply(with_functions=functions, inplace=edit_in_place)
    # The fusion may have read those initializers as constants: let no caller feed them.  Below
    # IR 4 they were constants by convention; a function body lifts the IR version past that.
    if out.ir_version >= 4 and freezing:
        frozen = freeze_initializers(out)
        if frozen:
            log.info("%d initializers are no longer listed as graph inputs: %s", len(frozen), ", ".join(frozen[:8]))

    # ensures
    if validate and not edit_in_place:
        _validate(out if light is None else light, lambda: caller, base_dir, editor.main_graph_ops(), light=light is not None)
    if inplace and work is not caller:
        caller.CopyFrom(out)
        out = caller
    _release(graph)
    return PassResult(out, True, fusions, misses, warnings, time.perf_counter() - t0)


def _release(graph: ModelGraph) -> None:
    """Break the view's links (node <-> tensor <-> graph) so that reference counting frees it
    when the pass ends, instead of a collection of everything the pass allocated after it."""
    for scope in graph.scopes:
        g = scope.ir
        for n in g.nodes:
            n.inputs = n.outputs = ()
            n.graph = n.scope = None
        for t in g.tensors.values():
            t.inputs = t.outputs = ()
        g.nodes, g.tensors = [], {}
    graph.scopes = []


class _NearSignature:
    """Which nodes lie within a rule's reach below one of its signature ops (per scope, lazily)."""

    def __init__(self, scope: Scope):
        self.scope = scope
        # op set -> (hops searched, {node id: hops below the nearest node of the set})
        self.hops: dict[frozenset, tuple[int, dict[int, int]]] = {}

    def within(self, rule: Rule, node: Node) -> bool:
        reach = rule.reach
        if reach is None:
            return True
        if not self._near(rule.signature, reach, node):
            return False
        return all(self._near(ops, hops, node) for ops, hops in rule.anchor_reaches)

    def _near(self, ops: frozenset[str], reach: int, node: Node) -> bool:
        found = self.hops.get(ops)
        if found is None or found[0] < reach:  # one search per op set, as deep as the deepest rule asks
            found = self.hops[ops] = (reach, self._forward(ops, reach))
        return found[1].get(id(node), reach + 1) <= reach

    def _forward(self, signature: frozenset[str], reach: int) -> dict[int, int]:
        frontier = [n for n in self.scope.ir.nodes if n.op in signature]
        seen = {id(n): 0 for n in frontier}
        for depth in range(1, reach + 1):
            nxt = []
            for n in frontier:
                for t in n.outputs:
                    for c in t.outputs:
                        if id(c) not in seen and c.scope is self.scope:
                            seen[id(c)] = depth
                            nxt.append(c)
            frontier = nxt
        return seen


def _try(rule: Rule, root: Node, ctx: Context, editor: Editor, claimed: set[int]) -> Fusion | NearMiss | None:
    matcher = Matcher(ctx.graph, claimed)
    best: Failure | None = None
    best_nodes: tuple = ()
    best_fuses = False  # the best failure is a match that would fuse but for the target's defaults
    for i, m in enumerate(matcher.match(rule.pattern, root)):
        if i >= MAX_MATCHES_PER_ROOT:
            break
        em = Emitter(ctx.graph, ctx.scope, _prefix(m), editor=editor)
        try:
            removed = _contained(m, ctx.scope, rule.exported(m))
            desc = rule.check(m, ctx)
            rule.rewrite(desc, em, ctx)
        except Reject as r:
            # A structural match that fails a check is further along than any structural failure.
            # A shorter match that would fuse but for the target's defaults (defaults.OffReject)
            # goes first: a longer alternative's reason would hide that naming the pass fuses it.
            failure = Failure(1000 + len(m.all_nodes), str(r))
            fuses = getattr(r, "would_fuse", False)
            if best is None or (fuses, failure.progress) > (best_fuses, best.progress):
                best, best_nodes, best_fuses = failure, tuple(m.all_nodes), fuses
            continue
        editor.commit(ctx.scope, removed, root, em)
        claimed.update(id(n) for n in removed)
        return Fusion(
            rule=rule.name,
            target=ctx.target,
            scope=ctx.scope.path,
            root=root.name,
            removed=[n.name for n in removed],
            nodes=[_describe(n) for n in em.nodes],
            compute_type=None if em.compute_type is None else onnx.TensorProto.DataType.Name(em.compute_type),
            notes=list(getattr(desc, "notes", ())),
        )
    if best is None:
        best = matcher.best
        best_nodes = matcher.best_nodes
    if best is None or best.progress < rule.min_progress:
        return None
    if rule.signature and not any(n.op in rule.signature for n in best_nodes):
        return None  # never got to what makes this pattern itself: not a near-miss
    ids = tuple(id(n) for n in best_nodes)
    return NearMiss(rule.name, ctx.scope.path, root.name or root.op, best.reason, best.progress, ids, best_fuses)


def _contained(m: Match, scope: Scope, exported: frozenset[int] = frozenset()) -> list[Node]:
    """The safety rule: intermediates are read only inside the match and are not outputs.

    A node outside the match that reads an intermediate is tolerated only when everything it
    computes flows back into the match (the Shape -> Concat that sizes a Reshape in it); it is
    then removed with the match.  ``exported``: ids of nodes whose output the rule's rewrite
    produces again (the sum a pre-norm skip norm also returns), so others may read it.
    Returns the nodes to remove.
    """
    inside = {id(n) for n in m.all_nodes}
    extra: list[Node] = []
    for n in m.all_nodes:
        if n.scope is not scope:  # the matcher stays in the root's scope; the editor relies on it
            raise Reject(f"{n.op} {n.name!r} lies outside scope {scope.path}")
        if n is m.root or id(n) in exported:  # the rewrite produces an exported node's output too
            continue
        for t in n.outputs:
            if t.name in scope.output_names:
                raise Reject(f"intermediate {t.name!r} is a graph output")
            for c in t.outputs:
                if id(c) not in inside and not _feeds_back(c, inside, scope, extra):
                    raise Reject(f"intermediate {t.name!r} is also read by {c.op} {c.name!r} outside the pattern")
    return m.all_nodes + extra


def _feeds_back(node: Node, inside: set[int], scope: Scope, extra: list[Node], budget: int = 16) -> bool:
    """Whether all of ``node``'s results are read only by the match (then it joins ``extra``)."""
    seen: list[Node] = []
    stack = [node]
    while stack:
        n = stack.pop()
        if id(n) in inside or any(n is s for s in seen):
            continue
        if len(seen) >= budget or n.scope is not scope or n.subgraphs:
            return False
        seen.append(n)
        for t in n.outputs:
            if t.name in scope.output_names or not t.outputs:
                return False
            stack.extend(t.outputs)
    for n in seen:
        inside.add(id(n))
        extra.append(n)
    return True


def _dedupe(misses: list[NearMiss], claimed: set[int]) -> list[NearMiss]:
    """One near-miss per chain: drop those rooted inside a fusion or inside a further-along miss.

    A miss whose root stayed unfused while part of its chain did fuse is kept: it says why
    the fusion stopped short (a γ that does not broadcast, say).  A miss that would fuse but for
    the target's defaults counts as the fusion it would be: misses rooted inside it go too.
    """
    kept: list[NearMiss] = []
    for m in sorted(misses, key=lambda m: (not m.would_fuse, -m.progress)):
        if m.nodes and m.nodes[0] in claimed:
            continue
        if any(set(m.nodes) <= set(k.nodes) for k in kept):
            continue
        if m.nodes and any(k.would_fuse and m.nodes[0] in k.nodes for k in kept):
            continue
        kept.append(m)
    order = {id(m): i for i, m in enumerate(misses)}
    return sorted(kept, key=lambda m: order[id(m)])


def _prefix(m: Match) -> str:
    """A name prefix for emitted nodes: the matched nodes' common scope, as exporters name them."""
    names = [n.name for n in m.all_nodes if n.name]
    common = os.path.commonprefix(names) if names else ""
    cut = common.rfind("/")
    if cut > 0:
        return common[: cut + 1]
    return (m.root.name or m.root.op) + "/"


def _describe(n: onnx.NodeProto) -> dict:
    attrs = {}
    for a in n.attribute:
        v = onnx.helper.get_attribute_value(a)
        if isinstance(v, bytes):
            v = v.decode()
        elif isinstance(v, onnx.TensorProto):
            v = f"tensor{list(v.dims)}"
        elif isinstance(v, list):
            v = [x.decode() if isinstance(x, bytes) else x for x in v]
        attrs[a.name] = v
    return {
        "op_type": n.op_type,
        "name": n.name,
        "domain": n.domain,
        "inputs": list(n.input),
        "outputs": list(n.output),
        "attributes": attrs,
    }


def _validate(
    out: onnx.ModelProto,
    original: Callable[[], onnx.ModelProto] | None,
    base_dir: str | None,
    graph_ops: set | None = None,
    light: bool = False,
) -> None:
    """Full ONNX check (with strict shape inference) of the output; blame us only if the input passes.

    ``graph_ops``: every (domain, op_type) the main graph and its bodies may hold (a superset,
    Editor.main_graph_ops), which spares a walk over them when none is a bodiless custom op.
    ``light``: ``out`` is weightless already (see ``_check``)."""
    errors = (onnx.checker.ValidationError, onnx.shape_inference.InferenceError)
    # Custom nodes without a function body (functions=False, or one the opset cannot write)
    # have outputs no type inference can see: strict inference then fails on whatever reads
    # them inside a function body.  Such a model is checked without shape inference.
    full = not _bodiless_custom_ops(out, graph_ops)
    try:
        _check(out, base_dir, full, light)
    except errors as e:
        if original is None:
            log.warning("the fused model fails onnx.checker (the input was fused in place, so it is unknown whether it did too): %s", _first(e))
            return
        try:
            _check(original(), base_dir)
        except errors:
            log.warning("the input model already fails onnx.checker; the fused model does too: %s", _first(e))
            return
        raise InternalError(f"the fused model fails onnx.checker although the input passes: {_first(e)}") from e


def _bodiless_custom_ops(model: onnx.ModelProto, graph_ops: set | None = None) -> bool:
    ours = {(s.domain, s.op_type) for s in specs.SPECS}
    have = {(f.domain, f.name) for f in model.functions}
    if graph_ops is not None and not any(op in ours and op not in have for op in graph_ops):
        containers = list(model.functions)  # none in the main graph: only the functions are walked
    else:
        containers = [model.graph, *model.functions]
    while containers:
        c = containers.pop()
        for n in c.node:
            if (n.domain, n.op_type) in ours and (n.domain, n.op_type) not in have:
                return True
            for a in n.attribute:
                containers.extend([a.g] if a.type == onnx.AttributeProto.GRAPH else a.graphs)
    return False


def _check(model: onnx.ModelProto, base_dir: str | None, full: bool = True, light: bool = False) -> None:
    """onnx.checker (full) on ``model`` without its weights.

    A pass never changes a weight's bytes, and serializing them only for the checker costs
    more than the fusion itself.  Large initializers are checked as external data placed in
    a scratch directory (empty placeholder files: the checker verifies they exist, it does
    not read them); the rest of the model, new constants included, is checked in full.
    ``light``: ``model`` is weightless already (``weightless`` would leave it as it is).
    """
    light = model if light else weightless(model)
    with tempfile.TemporaryDirectory(prefix="fusion-check-") as tmp:
        path = os.path.join(tmp, "model.onnx")
        with open(path, "wb") as f:
            f.write(light.SerializeToString())
        # The main graph's initializers hold nearly every external tensor (all the stubs): a
        # walk over every node for the others (a Constant's, a body's) is left for a failure.
        _placeholders(tmp, light.graph.initializer)
        try:
            onnx.checker.check_model(path, full_check=full)
        except (onnx.checker.ValidationError, onnx.shape_inference.InferenceError):
            if not _placeholders(tmp, external_tensors(light)):
                raise
            onnx.checker.check_model(path, full_check=full)


def _placeholders(folder: str, tensors: Iterable[onnx.TensorProto]) -> bool:
    """Empty files in ``folder`` at the external-data locations of ``tensors``; whether any was new."""
    added = False
    seen: set[str] = set()  # (the weights share one stub: one look at the disk for it)
    for t in tensors:
        if t.data_location != onnx.TensorProto.EXTERNAL:
            continue
        for e in t.external_data:
            if e.key == "location" and e.value not in seen:
                seen.add(e.value)
                path = os.path.join(folder, e.value)
                if not os.path.exists(path):
                    os.makedirs(os.path.dirname(path), exist_ok=True)
                    open(path, "wb").close()
                    added = True
    return added


def _first(e: BaseException) -> str:
    lines = str(e).strip().splitlines()
    return lines[0] if lines else type(e).__name__


def rules_for(passes: Iterable[str] | None) -> list[Rule]:
    """The registered rules of the named passes (all when None), in priority order."""
    from ..patterns import RULES

    if passes is None:
        return list(RULES)
    wanted = list(passes)
    unknown = set(wanted) - {r.pass_name for r in RULES}
    if unknown:
        known = sorted({r.pass_name for r in RULES})
        raise FusionError(f"unknown pass {sorted(unknown)[0]!r} (choose from {', '.join(known)})")
    return [r for r in RULES if r.pass_name in wanted]
