"""A fusion rule is a pattern, a check and a rewrite.

* ``pattern`` (fusion.pattern) finds the subgraph structurally;
* ``check(match, ctx)`` reads constants, axes, shapes and types and returns a description of
  what the subgraph computes, or raises :class:`Reject` with the reason it is not fusable;
* ``rewrite(desc, emitter, ctx)`` emits the replacement for ``ctx.target``, or raises Reject
  when that target cannot express it.

The driver (fusion.passes) adds the safety rule common to all: no intermediate of the match
may be used outside it or be a graph output.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .graph import ModelGraph, Scope
from .pattern import Alt, Match, Op, Pattern
from .rewrite import Emitter, Reject

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


class Rule:
    """Subclasses set ``name``, ``pass_name`` and ``pattern`` and implement check/rewrite."""

    name: str = ""
    pass_name: str = ""
    pattern: Pattern
    # A failed match is reported as a near-miss only if it bound this many nodes, one of
    # them of a signature op type (the part that makes the pattern what it is).
    min_progress: int = 4
    signature: frozenset[str] = frozenset()
    doc: str = ""

    def check(self, m: Match, ctx: Context) -> Any:
        raise NotImplementedError

    def rewrite(self, desc: Any, em: Emitter, ctx: Context) -> None:
        raise NotImplementedError

    @property
    def root_ops(self) -> frozenset[str]:
        return frozenset(_root_ops(self.pattern))

    def __repr__(self) -> str:
        return f"<Rule {self.name}>"


def _root_ops(p: Pattern) -> set[str]:
    if isinstance(p, Alt):
        return set().union(*(_root_ops(o) for o in p.options))
    if isinstance(p, Op):
        return {p.op_type}
    return set()
