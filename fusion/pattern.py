"""A small declarative pattern language over onnx-graphsurgeon graphs.

A pattern describes how a tensor is computed, from the root (the fused subgraph's output)
back to its inputs::

    d = Op("Sub", x, mean, name="sub")
    square = Op("Pow", d, Const(value=2.0)) | Op("Mul", d, d)

* ``Var(name)`` binds any tensor; a Var used twice must bind the same tensor.
* ``Const(name, value=...)`` binds a constant (initializer or Constant node), optionally
  with a required scalar value; without one it also binds an initializer a caller may
  override (ModelGraph.overridable), which the rule must then pass through, not bake.
* ``Op(op_type, *inputs, name=...)`` binds the node producing the tensor.  Add and Mul are
  commutative: both operand orders are tried.  An Op object reached twice must bind the same
  node, or a structurally identical duplicate (exporters sometimes emit ``x - mean`` twice).
* ``a | b`` declares alternatives; ``Opt(p)`` a trailing optional input.

Matching is a depth-first search that yields every binding; a rule takes the first one that
its check accepts.  Each failure is recorded with how far the match had got, so a near-miss
can say why it did not fuse.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterator


from .ir import Node, Tensor
from .graph import ModelGraph, producer

COMMUTATIVE = frozenset({"Add", "Mul", "Max", "Min", "Sum", "Equal"})
_DEFAULT_DOMAINS = (None, "", "ai.onnx")


class Pattern:
    def __or__(self, other: "Pattern") -> "Alt":
        return Alt(self, other)


class Var(Pattern):
    def __init__(self, name: str | None = None):
        self.name = name

    def __repr__(self) -> str:
        return f"Var({self.name})"


class Const(Pattern):
    """A constant tensor; ``value`` requires a one-element constant equal to it."""

    def __init__(self, name: str | None = None, value: float | None = None):
        self.name = name
        self.value = value

    def __repr__(self) -> str:
        return f"Const({self.name or self.value})"


class Op(Pattern):
    def __init__(
        self,
        op_type: str,
        *inputs: Pattern,
        name: str | None = None,
        commute: bool | None = None,
        where: Callable[[Node], str | None] | None = None,
        quiet: bool = False,
    ):
        self.op_type = op_type
        self.inputs = inputs
        self.name = name
        self.commute = op_type in COMMUTATIVE if commute is None else commute
        self.where = where  # extra structural test on the node; returns a reason or None
        # An optional wrapper (a Cast that may or may not be there): its absence is no failure.
        self.quiet = quiet

    def __repr__(self) -> str:
        return f"Op({self.op_type}{', ' + self.name if self.name else ''})"


class Alt(Pattern):
    def __init__(self, *options: Pattern):
        flat: list[Pattern] = []
        for o in options:
            flat.extend(o.options if isinstance(o, Alt) else [o])
        self.options = tuple(flat)

    def __repr__(self) -> str:
        return " | ".join(map(repr, self.options))


class Opt(Pattern):
    """A trailing optional input: absent, or present and matching ``inner``."""

    def __init__(self, inner: Pattern):
        self.inner = inner


@dataclass
class Match:
    """A successful structural match: what each named pattern bound to."""

    root: Node
    nodes: dict[str, Node]
    tensors: dict[str, Tensor]
    all_nodes: list[Node]  # every matched node, duplicates included, root first

    def __getitem__(self, name: str):
        if name in self.nodes:
            return self.nodes[name]
        return self.tensors[name]

    def get(self, name: str, default=None):
        try:
            return self[name]
        except KeyError:
            return default

    def __contains__(self, name: str) -> bool:
        return name in self.nodes or name in self.tensors


@dataclass
class _State:
    nodes: dict[int, Node] = field(default_factory=dict)  # id(Op pattern) -> node
    tensors: dict[int, Tensor] = field(default_factory=dict)  # id(Var/Const) -> tensor
    order: tuple = ()  # matched nodes in match order (duplicates included)

    def with_node(self, p: Op, node: Node) -> "_State":
        nodes = dict(self.nodes)
        nodes[id(p)] = node
        return _State(nodes, self.tensors, self.order + (node,))

    def with_tensor(self, p: Pattern, t: Tensor) -> "_State":
        tensors = dict(self.tensors)
        tensors[id(p)] = t
        return _State(self.nodes, tensors, self.order)

    def with_extra(self, extra: list[Node]) -> "_State":
        return _State(self.nodes, self.tensors, self.order + tuple(extra))


@dataclass
class Failure:
    progress: int
    _reason: str | Callable[[], str]

    @property
    def reason(self) -> str:
        """Formatted on demand: most failures are never read."""
        if callable(self._reason):
            self._reason = self._reason()
        return self._reason


class Matcher:
    """Matches patterns in one ModelGraph; ``claimed`` holds nodes already fused away."""

    def __init__(self, graph: ModelGraph, claimed: set[int] | None = None):
        self.graph = graph
        self.claimed = claimed if claimed is not None else set()
        self.best: Failure | None = None
        self.best_nodes: tuple = ()  # the nodes bound when the best failure happened

    # -- entry point --------------------------------------------------------------------
    def match(self, pattern: Pattern, root: Node) -> Iterator[Match]:
        """Yield every structural match of ``pattern`` whose root is ``root``'s first output."""
        self.best, self.best_nodes = None, ()
        if not root.outputs:
            return
        names = _NAMES.get(id(pattern))
        if names is None:
            names = _NAMES[id(pattern)] = _names(pattern)
        for st in self._match(pattern, root.outputs[0], _State()):
            yield Match(
                root=root,
                nodes={n: st.nodes[i] for i, n in names["nodes"].items() if i in st.nodes},
                tensors={n: st.tensors[i] for i, n in names["tensors"].items() if i in st.tensors},
                all_nodes=_unique(st.order),
            )

    def fail(self, st: _State, reason: Callable[[], str], bonus: float = 0.0) -> None:
        progress = len(st.order) + bonus
        # On a tie the later failure wins: alternatives are tried most specific first.
        if self.best is None or progress >= self.best.progress:
            self.best = Failure(progress, reason)
            self.best_nodes = st.order

    # -- recursion ----------------------------------------------------------------------
    def _match(self, p: Pattern, t: Tensor, st: _State) -> Iterator[_State]:
        if isinstance(p, Alt):
            node = producer(t)
            op = None if node is None else node.op
            for o in p.options:
                # Most options fail on the producer's op type: say so without recursing.
                if isinstance(o, Op) and o.op_type != op and st.nodes.get(id(o)) is None:
                    if not o.quiet:
                        self.fail(st, lambda o=o: f"{_desc(t)} comes from {op or 'no node'}, expected {o.op_type}")
                    continue
                yield from self._match(o, t, st)
        elif isinstance(p, Op):
            yield from self._match_op(p, t, st)
        elif isinstance(p, Var):
            yield from self._bind_tensor(p, t, st)
        elif isinstance(p, Const):
            # An initializer a caller may override binds a Const without a required value (a
            # rule may pass it through); its value is never known, so no value can be checked.
            if not (self.graph.is_constant(t) or (p.value is None and self.graph.overridable(t))):
                # Outranks alternatives failing as far along: it is the reason the user can act on.
                bonus = 0.5 if self.graph.overridable(t) else 0.0
                self.fail(st, lambda: self.graph.not_constant_reason(t), bonus)
                return
            if p.value is not None:
                v = self.graph.scalar(t)
                if v is None:
                    self.fail(st, lambda: f"{_desc(t)} is not a one-element constant (expected {p.value:g})")
                    return
                if v != p.value:
                    self.fail(st, lambda: f"{_desc(t)} is {v:g}, expected {p.value:g}")
                    return
            yield from self._bind_tensor(p, t, st)
        else:
            raise TypeError(f"not a pattern: {p!r}")

    def _bind_tensor(self, p: Pattern, t: Tensor, st: _State) -> Iterator[_State]:
        bound = st.tensors.get(id(p))
        if bound is None:
            yield st.with_tensor(p, t)
        elif bound is t or (isinstance(p, Const) and _same_constant(self.graph, bound, t)):
            yield st
        else:
            self.fail(st, lambda: f"{getattr(p, 'name', p)!r} reached as both {bound.name!r} and {t.name!r}")

    def _match_op(self, p: Op, t: Tensor, st: _State) -> Iterator[_State]:
        node = producer(t)
        if node is None:
            if not p.quiet:
                self.fail(st, lambda: f"{_desc(t)} is not computed by a node (expected {p.op_type})")
            return
        if node.op != p.op_type or node.domain not in _DEFAULT_DOMAINS:
            if not p.quiet:
                self.fail(st, lambda: f"{_desc(t)} comes from {node.op}, expected {p.op_type}")
            return
        if node.outputs[0] is not t:
            self.fail(st, lambda: f"{_desc(t)} is not the first output of {node.op}")
            return
        bound = st.nodes.get(id(p))
        if bound is not None:
            if bound is node:
                yield st
                return
            extra = _equivalent(self.graph, bound, node)
            if extra is None:
                self.fail(st, lambda: f"{p.op_type} {node.name!r} should be {bound.name!r} (or an identical copy)")
                return
            yield st.with_extra(extra)
            return
        if id(node) in self.claimed:
            self.fail(st, lambda: f"{node.op} {node.name!r} is already part of another fusion")
            return
        if p.where is not None:
            reason = p.where(node)
            if reason:
                self.fail(st, lambda: f"{node.op} {node.name!r}: {reason}")
                return
        inputs = [i for i in node.inputs]
        while inputs and inputs[-1].name == "":
            inputs.pop()
        required = [q for q in p.inputs if not isinstance(q, Opt)]
        if not len(required) <= len(inputs) <= len(p.inputs):
            self.fail(st, lambda: f"{node.op} {node.name!r} has {len(inputs)} inputs, expected {len(required)}")
            return
        pats = [q.inner if isinstance(q, Opt) else q for q in p.inputs[: len(inputs)]]
        st = st.with_node(p, node)
        orders = [inputs]
        if p.commute and len(inputs) == 2 and inputs[0] is not inputs[1]:
            orders.append(inputs[::-1])
        for ins in orders:
            yield from self._match_all(list(zip(pats, ins)), st)

    def _match_all(self, pairs: list, st: _State) -> Iterator[_State]:
        if not pairs:
            yield st
            return
        (p, t), rest = pairs[0], pairs[1:]
        for s in self._match(p, t, st):
            yield from self._match_all(rest, s)


def _equivalent(graph: ModelGraph, a: Node, b: Node, depth: int = 3) -> list[Node] | None:
    """If ``b`` computes exactly what ``a`` does, the nodes that make ``b`` (for removal), else None."""
    if a.op != b.op or a.domain != b.domain or len(a.inputs) != len(b.inputs) or a.attrs != b.attrs:
        return None
    extra = [b]
    for x, y in zip(a.inputs, b.inputs):
        if x is y or _same_constant(graph, x, y):
            continue
        px, py = producer(x), producer(y)
        if depth == 0 or px is None or py is None:
            return None
        sub = _equivalent(graph, px, py, depth - 1)
        if sub is None:
            return None
        extra.extend(sub)
    return extra


def _same_constant(graph: ModelGraph, a: Tensor, b: Tensor) -> bool:
    va, vb = graph.constant_value(a, 64), graph.constant_value(b, 64)
    return va is not None and vb is not None and va.dtype == vb.dtype and va.shape == vb.shape and (va == vb).all()


_NAMES: dict[int, dict[str, dict[int, str]]] = {}  # patterns are module-level constants


def _names(p: Pattern) -> dict[str, dict[int, str]]:
    """Map pattern object ids to their capture names, over the whole pattern DAG."""
    out: dict[str, dict[int, str]] = {"nodes": {}, "tensors": {}}
    seen: set[int] = set()
    stack = [p]
    while stack:
        q = stack.pop()
        if id(q) in seen:
            continue
        seen.add(id(q))
        if isinstance(q, Alt):
            stack.extend(q.options)
        elif isinstance(q, Opt):
            stack.append(q.inner)
        elif isinstance(q, Op):
            if q.name:
                out["nodes"][id(q)] = q.name
            stack.extend(q.inputs)
        elif isinstance(q, (Var, Const)) and q.name:
            out["tensors"][id(q)] = q.name
    return out


def _unique(nodes) -> list[Node]:
    seen: set[int] = set()
    out = []
    for n in nodes:
        if id(n) not in seen:
            seen.add(id(n))
            out.append(n)
    return out


def _desc(t: Tensor) -> str:
    return f"{t.name!r}"
