"""What the rules may assume about the constants of a match (shared by the norm and FC rules).

Two traps, both of which change what a model computes if ignored:

* an initializer that is also a graph input can be fed another value (ModelGraph.overridable):
  a rule may pass it through to the fused node unchanged, but never bake its value;
* a one-element constant still broadcasts: ``eps`` of shape [1, 1, 1, 1] makes a rank-3
  norm's output rank 4, and a fused node would not.
"""

from __future__ import annotations

from fusion.ir.graph import ModelGraph
from fusion.ir.view import Node, Tensor
from fusion.match.pattern import Match
from fusion.rewrite.editor import Reject

# Ops whose output has the rank of their widest operand (numpy broadcasting).
BROADCASTING = frozenset({"Add", "Sub", "Mul", "Div", "Pow"})


def check_overridable(g: ModelGraph, m: Match, passed_through: tuple[str, ...] = ()) -> None:
    """Every overridable initializer the match reads must be one of ``passed_through`` (capture
    names): the rule gives those to the fused node as inputs, so any value fed still works."""
    allowed = {id(m[n]) for n in passed_through if n in m}
    for node in m.all_nodes:
        for t in node.inputs:
            if t.name and id(t) not in allowed and g.overridable(t):
                raise Reject(f"{node.op} {node.name!r}: {g.not_constant_reason(t)}")


def widest_constant(g: ModelGraph, nodes: list[Node]) -> tuple[int, Tensor] | None:
    """The constant operand of highest rank among broadcasting ``nodes`` (or None)."""
    best: tuple[int, Tensor] | None = None
    for node in nodes:
        if node.op not in BROADCASTING or node.domain not in ("", "ai.onnx"):
            continue
        for t in node.inputs:
            # Through a Cast: eps is often cast to the compute type before the Add.
            src = t
            p = t.inputs[0] if len(t.inputs) == 1 else None
            if p is not None and p.op == "Cast" and p.inputs and any(p is n for n in nodes):
                src = p.inputs[0]
            shape = g.fixed_shape(src)
            if shape is not None and (best is None or len(shape) > best[0]):
                best = (len(shape), src)
    return best


def check_constant_rank(g: ModelGraph, nodes: list[Node], rank: int | None, known_min: int, rank_of=None) -> None:
    """No constant operand of ``nodes`` may have a higher rank than the output (``rank``; when
    unknown, ``rank_of()`` may infer it, else it is at least ``known_min``)."""
    worst = widest_constant(g, nodes)
    if worst is None:
        return
    r, t = worst
    if rank is None and r > known_min and rank_of is not None:
        rank = rank_of()
    shape = list(g.fixed_shape(t))
    if rank is None:
        if r > known_min:
            raise Reject(f"constant {t.name!r} has shape {shape} and the output's rank is unknown: the output could grow")
        return
    if r > rank:
        raise Reject(
            f"constant {t.name!r} has shape {shape}, of rank {r}, more than the output's {rank}: it grows the "
            f"original output to rank {r}, and a fused node would not"
        )
