"""A fusion rule is a pattern, a check and a rewrite.

* ``pattern`` (fusion.match.pattern) finds the subgraph structurally;
* ``check(match, ctx)`` reads constants, axes, shapes and types and returns a description of
  what the subgraph computes, or raises :class:`Reject` with the reason it is not fusable;
* ``rewrite(desc, emitter, ctx)`` emits the replacement for ``ctx.target``, or raises Reject
  when that target cannot express it.

The driver (fusion.passes.driver) adds the safety rule common to all: no intermediate of the match
may be used outside it or be a graph output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..ir.graph import ModelGraph, Scope
from ..ir.view import Node
from ..match.pattern import Alt, Match, Op, Opt, Pattern
from .editor import Emitter, Reject

TARGETS = ("plugin", "trt", "onnx")

__all__ = ["Context", "Reject", "Rule", "TARGETS"]


@dataclass
class Context:
    graph: ModelGraph
    scope: Scope
    target: str
    options: dict[str, Any] = field(default_factory=dict)

    @property
    def opset(self) -> int:
        return self.scope.opset

    @property
    def assume_constant_initializers(self) -> bool:
        """Whether initializers listed as graph inputs count as constants (the caller's opt-in)."""
        return self.graph.assume_constant_initializers


class Rule:
    """Subclasses set ``name``, ``pass_name`` and ``pattern`` and implement check/rewrite."""

    name: str = ""
    pass_name: str = ""
    pattern: Pattern
    # A failed match is reported as a near-miss only if it bound this many nodes, one of
    # them of a signature op type (the part that makes the pattern what it is).
    min_progress: int = 4
    signature: frozenset[str] = frozenset()
    # Other op sets of which every match holds a node (the norms' Sqrt/Pow): each bounds, like
    # the signature, how far below such a node a root can be; the driver checks them all.
    anchors: tuple[frozenset[str], ...] = ()
    doc: str = ""
    # The forms the pattern covers, one line each ("part: forms"); the README's variant
    # table is rendered from these (fusion/docs.py), so they live next to the pattern.
    variants: tuple[str, ...] = ()
    # A rule that extends a later one at the same root (skip norms): where both miss, the later
    # rule's reason is the one reported (it says why even the smaller fusion did not happen).
    defers_misses: bool = False
    # The targets the rule rewrites for; the driver does not try it on others (a native
    # LayerNormalization is already what target onnx would emit: nothing to fuse there).
    targets: tuple[str, ...] = TARGETS

    def check(self, m: Match, ctx: Context) -> Any:
        raise NotImplementedError

    def exported(self, m: Match) -> frozenset[int]:
        """Ids of matched nodes whose output the rewrite writes again under the same name, so
        nodes outside the match may read it (the driver's safety rule spares them)."""
        return frozenset()

    def rewrite(self, desc: Any, em: Emitter, ctx: Context) -> None:
        raise NotImplementedError

    @property
    def root_ops(self) -> frozenset[str]:
        return frozenset(_root_ops(self.pattern))

    @property
    def reach(self) -> int | None:
        """Every match has a signature node at most this many hops above its root (None: no bound).

        The driver skips roots farther than that from any signature node: a sound filter
        that keeps matching linear and cheap on big graphs.
        """
        if not self.signature:
            return None
        cached = self.__dict__.get("_reach")
        if cached is None:
            d = _distance(self.pattern, self.signature, {})
            cached = self.__dict__["_reach"] = (None if d == _INF else d,)
        return cached[0]

    @property
    def anchor_reaches(self) -> tuple[tuple[frozenset[str], int], ...]:
        """(op set, hops) for each of ``anchors``: more sound filters of the same kind as reach."""
        cached = self.__dict__.get("_anchor_reaches")
        if cached is None:
            pairs = ((a, _distance(self.pattern, a, {})) for a in self.anchors)
            cached = self.__dict__["_anchor_reaches"] = tuple((a, d) for a, d in pairs if d != _INF)
        return cached

    def may_start_at(self, node: Node) -> bool:
        """False where no match can bind a node below ``node``: every root option of the pattern
        that fits ``node`` has an input that only a node binds, and no input pattern of it
        accepts the op of a node computing an input of ``node``.  The match then binds at most
        ``node`` itself, below any min_progress: neither a fusion nor a near-miss, so the driver
        skips it (a sound filter, like ``reach``; most Adds of a transformer end here).
        """
        cached = self.__dict__.get("_starts")
        if cached is None:
            cached = self.__dict__["_starts"] = (_start_table(self.pattern),)
        entries = None if cached[0] is None else cached[0].get(node.op)
        if not entries or self.min_progress < 2:  # (a failure with the root alone has progress 1.5 at most)
            return True
        made_by = {p.op for t in node.inputs for p in t.inputs}
        return any(ops is None or not ops.isdisjoint(made_by) for ops in entries)

    def __repr__(self) -> str:
        return f"<Rule {self.name}>"


_INF = 1 << 30


def _distance(p: Pattern, signature: frozenset[str], memo: dict[int, int]) -> int:
    """Hops from ``p``'s output up to the nearest signature op, in the worst alternative."""
    if id(p) in memo:
        return memo[id(p)]
    if isinstance(p, Alt):
        d = max(_distance(o, signature, memo) for o in p.options)
    elif isinstance(p, Op):
        if p.op_type in signature:
            d = 0
        else:
            required = [i for i in p.inputs if not isinstance(i, Opt)]
            d = min((_distance(i, signature, memo) for i in required), default=_INF)
            d = min(d + 1, _INF)
    else:
        d = _INF
    memo[id(p)] = d
    return d


def _start_table(p: Pattern) -> dict[str, list[frozenset[str] | None]] | None:
    """Per op type of a root option of ``p``: for each such option, the op types of the nodes
    its input patterns can bind (None: it matches with no input bound to a node).  None when
    a root option is no Op."""
    table: dict[str, list[frozenset[str] | None]] = {}
    for o in _root_options(p):
        if not isinstance(o, Op):
            return None
        needs_node = any(_needs_node(q) for q in o.inputs)
        table.setdefault(o.op_type, []).append(frozenset().union(*map(_node_ops, o.inputs)) if needs_node else None)
    return table


def _root_options(p: Pattern) -> list[Pattern]:
    return [q for o in p.options for q in _root_options(o)] if isinstance(p, Alt) else [p]


def _node_ops(p: Pattern) -> frozenset[str]:
    """The op types of the node ``p`` can bind at its tensor (none for a Var or a Const)."""
    if isinstance(p, Op):
        return frozenset({p.op_type})
    if isinstance(p, Alt):
        return frozenset().union(*map(_node_ops, p.options))
    if isinstance(p, Opt):
        return _node_ops(p.inner)
    return frozenset()


def _needs_node(p: Pattern) -> bool:
    """Whether ``p`` matches only by binding a node at its tensor."""
    if isinstance(p, Op):
        return True
    if isinstance(p, Alt):
        return all(_needs_node(o) for o in p.options)
    return False  # Var, Const, Opt (absent)


def _root_ops(p: Pattern) -> set[str]:
    if isinstance(p, Alt):
        return set().union(*(_root_ops(o) for o in p.options))
    if isinstance(p, Op):
        return {p.op_type}
    return set()
