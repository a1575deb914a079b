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
  commutative: both operand orders are tried.
* ``a | b`` declares alternatives; ``Opt(p)`` a trailing optional input.

Every pattern object binds one tensor.  Reached again, it must be at that same tensor, and then
it stands for what it bound the first time (the same option of each alternative, Opt and
quiet Cast wrapper on its way), or at an exact duplicate of it: the same op, attributes and
output index over the same inputs, for ops known to be deterministic (exporters sometimes emit
``x - mean`` twice).  A match stays in its root's scope: a value computed in an enclosing graph
is an opaque input, never a node the match may bind or remove.

Matching is a depth-first search that yields every binding; a rule takes the first one that
its check accepts.  Each failure is recorded with how far the match had got, so a near-miss
can say why it did not fuse.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Iterable, Iterator


from ..ir.view import Node, Tensor
from ..ir.graph import ModelGraph, producer

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
        self.required = sum(not isinstance(q, Opt) for q in inputs)  # inputs that must be present
        self.name = name
        self.commute = op_type in COMMUTATIVE if commute is None else commute
        self.where = where  # extra structural test on the node; returns a reason or None
        # An optional wrapper (a Cast that may or may not be there): its absence is no failure.
        self.quiet = quiet

    def __repr__(self) -> str:
        return f"Op({self.op_type}{', ' + self.name if self.name else ''})"


class Alt(Pattern):
    # Not flattened: a nested Alt may be shared (reached elsewhere too), and then it must bind
    # the same option there; flattening it into this one would lose that identity.
    def __init__(self, *options: Pattern):
        self.options = tuple(options)

    @property
    def table(self) -> tuple[tuple[Pattern, str | None, bool], ...]:
        """(option, its op type if an Op, whether its absence is a failure), made once."""
        cached = self.__dict__.get("_table")
        if cached is None:
            cached = self.__dict__["_table"] = tuple(
                (o, o.op_type, not o.quiet) if isinstance(o, Op) else (o, None, True) for o in self.options
            )
        return cached

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


_ABSENT = Tensor("")  # what an Opt binds when its input is absent


class _State:
    __slots__ = ("at", "order")

    def __init__(self, at: dict[int, Tensor] | None = None, order: tuple = ()):
        self.at = {} if at is None else at  # id(pattern) -> the tensor it bound
        self.order = order  # matched nodes in match order (duplicates included)

    def bind(self, p: Pattern, t: Tensor, node: Node | None = None) -> "_State":
        at = self.at.copy()
        at[id(p)] = t
        return _State(at, self.order if node is None else self.order + (node,))

    def with_extra(self, extra: list[Node]) -> "_State":
        return _State(self.at, self.order + tuple(extra))


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
        # The best failure so far, as (progress, reason): a Failure is made only when read.
        self._best: tuple[float, str | Callable[[], str]] | None = None
        self.best_nodes: tuple = ()  # the nodes bound when the best failure happened
        self.home = None  # the root's ir.Graph: a match never leaves it

    @property
    def best(self) -> Failure | None:
        """The failure that got furthest (the latest of those tied)."""
        return None if self._best is None else Failure(*self._best)

    # -- entry point --------------------------------------------------------------------
    def match(self, pattern: Pattern, root: Node) -> Iterator[Match]:
        """Yield every structural match of ``pattern`` whose root is ``root``'s first output."""
        self._best, self.best_nodes = None, ()
        self.home = root.graph
        if not root.outputs:
            return
        # Cached on the pattern itself: an id-keyed cache would outlive a pattern built on the fly.
        names = pattern.__dict__.get("_capture_names")
        if names is None:
            names = pattern.__dict__["_capture_names"] = _names(pattern)
        for st in self._match(pattern, root.outputs[0], _State()):
            yield Match(
                root=root,
                nodes={n: producer(st.at[i]) for i, n in names["nodes"].items() if i in st.at},
                tensors={n: st.at[i] for i, n in names["tensors"].items() if i in st.at},
                all_nodes=_unique(st.order),
            )

    def fail(self, st: _State, reason: Callable[[], str], bonus: float = 0.0) -> None:
        progress = len(st.order) + bonus
        # On a tie the later failure wins: alternatives are tried most specific first.
        best = self._best
        if best is None or progress >= best[0]:
            self._best = (progress, reason)
            self.best_nodes = st.order

    def _outranks(self, st: _State) -> bool:
        """Whether a failure now (no bonus) would be recorded: spares making its reason otherwise."""
        return self._best is None or len(st.order) >= self._best[0]

    # -- recursion ----------------------------------------------------------------------
    def _match(self, p: Pattern, t: Tensor, st: _State) -> Iterable[_State]:
        """The states matching ``p`` at ``t`` extends ``st`` to, as its caller iterates them at once.

        (The hottest function of a pass.  It dispatches on the exact pattern class and hands
        back the generator that does the work, or the states themselves where there is at most
        one (a Var, a Const, a pattern reached again): a generator less per pattern object on
        the way down, through which every state would otherwise be passed back up.  Each
        caller iterates the result right away, so failures are recorded in the same order.)"""
        bound = st.at.get(id(p))
        if bound is not None:
            return self._again(p, bound, t, st)
        kind = type(p)
        if kind is Op:
            return self._match_op(p, t, st)
        if kind is Alt:
            return self._match_alt(p, t, st)
        if kind is Var:
            return (st.bind(p, t),)
        if kind is Const:
            return self._match_const(p, t, st)
        if kind is Opt:
            return self._match_opt(p, t, st)
        if isinstance(p, Op):  # subclasses: what their class does
            return self._match_op(p, t, st)
        if isinstance(p, Alt):
            return self._match_alt(p, t, st)
        if isinstance(p, Var):
            return (st.bind(p, t),)
        if isinstance(p, Const):
            return self._match_const(p, t, st)
        if isinstance(p, Opt):
            return self._match_opt(p, t, st)
        raise TypeError(f"not a pattern: {p!r}")

    def _match_alt(self, p: Alt, t: Tensor, st: _State) -> Iterator[_State]:
        ins = t.inputs
        node = ins[0] if len(ins) == 1 else None  # (self._producer(t), inlined)
        op = None if node is None or node.graph is not self.home else node.op
        at = st.at
        for o, o_op, loud in p.table:
            # Most options fail on the producer's op type: say so without recursing.
            if o_op is not None and o_op != op and id(o) not in at:
                if loud and self._outranks(st):
                    self.fail(st, lambda o=o: f"{_desc(t)} comes from {op or 'no node of this scope'}, expected {o.op_type}")
                continue
            for s in self._match(o, t, st):
                yield s.bind(p, t)

    def _match_opt(self, p: Opt, t: Tensor, st: _State) -> Iterator[_State]:
        for s in self._match(p.inner, t, st):
            yield s.bind(p, t)

    def _match_const(self, p: Const, t: Tensor, st: _State) -> tuple[_State, ...]:
        # An initializer a caller may override binds a Const without a required value (a
        # rule may pass it through); its value is never known, so no value can be checked.
        if not (self.graph.is_constant(t) or (p.value is None and self.graph.overridable(t))):
            # Outranks alternatives failing as far along: it is the reason the user can act on.
            bonus = 0.5 if self.graph.overridable(t) else 0.0
            self.fail(st, lambda: self.graph.not_constant_reason(t), bonus)
            return ()
        if p.value is not None:
            v = self.graph.scalar(t)
            if v is None:
                self.fail(st, lambda: f"{_desc(t)} is not a one-element constant (expected {p.value:g})")
                return ()
            if v != p.value:
                self.fail(st, lambda: f"{_desc(t)} is {v:g}, expected {p.value:g}")
                return ()
        return (st.bind(p, t),)

    def _again(self, p: Pattern, bound: Tensor, t: Tensor, st: _State) -> tuple[_State, ...]:
        """``p`` reached a second time, at ``t``: it stands for what it bound first."""
        if bound is t:
            return (st,)
        if bound is _ABSENT or t is _ABSENT:
            self.fail(st, lambda: f"{p!r} is present at one place and absent at another")
            return ()
        if not isinstance(p, (Var, Op)) and _same_constant(self.graph, bound, t):
            return (st,)  # two constants of one value (a Const, or a constant option of an Alt)
        if isinstance(p, (Var, Const)):
            self.fail(st, lambda: f"{getattr(p, 'name', p)!r} reached as both {bound.name!r} and {t.name!r}")
            return ()
        extra = _duplicate(self.graph, bound, t, self.home, self.claimed)
        if extra is None:
            if isinstance(p, Op):
                node, first = producer(t), producer(bound)
                self.fail(st, lambda: f"{p.op_type} {(node.name if node else t.name)!r} should be {first.name!r}, "
                          "which the same part of the pattern matched elsewhere (or an identical copy of it)")
            else:
                self.fail(st, lambda: f"{_desc(t)} should be {bound.name!r}, which the same part of the pattern "
                          "matched elsewhere (or an identical copy of it)")
            return ()
        return (st.with_extra(extra),)

    def _producer(self, t: Tensor) -> Node | None:
        """The node computing ``t`` in the match's scope (an enclosing graph's is no node here)."""
        node = producer(t)
        return node if node is not None and node.graph is self.home else None

    def _match_op(self, p: Op, t: Tensor, st: _State) -> Iterator[_State]:
        ins = t.inputs
        node = ins[0] if len(ins) == 1 else None  # (producer(t), inlined)
        if node is None:
            if not p.quiet:
                self.fail(st, lambda: f"{_desc(t)} is not computed by a node (expected {p.op_type})")
            return
        if node.graph is not self.home:
            if not p.quiet:
                self.fail(st, lambda: f"{_desc(t)} is computed outside this scope, an input here (expected {p.op_type})")
            return
        if node.op != p.op_type or node.domain not in _DEFAULT_DOMAINS:
            if not p.quiet:
                self.fail(st, lambda: f"{_desc(t)} comes from {node.op}, expected {p.op_type}")
            return
        if node.outputs[0] is not t:
            self.fail(st, lambda: f"{_desc(t)} is not the first output of {node.op}")
            return
        if id(node) in self.claimed:
            self.fail(st, lambda: f"{node.op} {node.name!r} is already part of another fusion")
            return
        if p.where is not None:
            reason = p.where(node)
            if reason:
                self.fail(st, lambda: f"{node.op} {node.name!r}: {reason}")
                return
        inputs = list(node.inputs)
        while inputs and inputs[-1].name == "":
            inputs.pop()
        if not p.required <= len(inputs) <= len(p.inputs):
            self.fail(st, lambda: f"{node.op} {node.name!r} has {len(inputs)} inputs, expected {p.required}")
            return
        st = st.bind(p, t, node)
        for q in p.inputs[len(inputs) :]:  # absent optional inputs: absent wherever q is reached
            if st.at.get(id(q), _ABSENT) is not _ABSENT:
                self.fail(st, lambda: f"{node.op} {node.name!r} lacks an optional input present elsewhere")
                return
            st = st.bind(q, _ABSENT)
        pats, n = p.inputs, len(inputs)
        orders = [inputs]
        if p.commute and n == 2 and inputs[0] is not inputs[1]:
            orders.append(inputs[::-1])
        for ins in orders:
            if n == 1:  # (one and two inputs, most ops: without a generator per input)
                yield from self._match(pats[0], ins[0], st)
            elif n == 2:
                p1, t1 = pats[1], ins[1]
                for s in self._match(pats[0], ins[0], st):
                    yield from self._match(p1, t1, s)
            else:
                yield from self._match_all(list(zip(pats, ins)), 0, st)

    def _match_all(self, pairs: list, i: int, st: _State) -> Iterator[_State]:
        """Match ``pairs[i:]`` (pattern, tensor) in order."""
        if i == len(pairs):
            yield st
            return
        p, t = pairs[i]
        for s in self._match(p, t, st):
            yield from self._match_all(pairs, i + 1, s)


# Ops whose result is a function of their inputs and attributes alone: two such nodes over
# the same inputs compute the same tensor.  An allow-list: anything else (Random*, Bernoulli,
# Multinomial, Dropout, custom domains, control flow) is never taken for a duplicate.
DETERMINISTIC = frozenset(
    """Abs Acos Acosh Add And Asin Asinh Atan Atanh BitShift Cast CastLike Ceil Celu Clip Concat
    Cos Cosh CumSum DepthToSpace Div Einsum Elu Equal Erf Exp Expand Flatten Floor Gather
    GatherElements GatherND Gelu Gemm Greater GreaterOrEqual HardSigmoid HardSwish Identity
    InstanceNormalization IsInf IsNaN LayerNormalization LeakyRelu Less LessOrEqual Log
    LogSoftmax MatMul Max Mean Min Mish Mod Mul Neg Not Or Pad Pow PRelu Range Reciprocal
    ReduceL1 ReduceL2 ReduceLogSum ReduceLogSumExp ReduceMax ReduceMean ReduceMin ReduceProd
    ReduceSum ReduceSumSquare Relu Reshape Round Selu Shape Sigmoid Sign Sin Sinh Size Slice
    Softmax Softplus Softsign SpaceToDepth Split Sqrt Squeeze Sub Sum Tan Tanh Tile Transpose
    Trilu Unsqueeze Where Xor""".split()
)


def _duplicate(graph: ModelGraph, a: Tensor, b: Tensor, home, claimed: set[int], depth: int = 4) -> list[Node] | None:
    """If ``b`` is an exact recomputation of ``a`` in graph ``home``: the nodes that make ``b``
    (to remove with the match), else None.

    Exact means the same output of the same op with the same attributes, over inputs that are
    the same tensors, equal constants, or again exact recomputations, ``depth`` nodes deep.
    """
    pa, pb = producer(a), producer(b)
    if depth == 0 or pa is None or pb is None or pa is pb:
        return None  # pa is pb: two outputs of one node (the halves of a Split)
    if pa.graph is not home or pb.graph is not home or id(pb) in claimed:
        return None
    if not _deterministic(pa) or pa.op != pb.op or pa.domain != pb.domain or pa.attrs != pb.attrs:
        return None
    if len(pa.inputs) != len(pb.inputs) or _index(pa, a) != _index(pb, b):
        return None
    extra = [pb]
    for x, y in zip(pa.inputs, pb.inputs):
        if not x.name or not y.name:
            if x.name or y.name:
                return None  # an optional input absent in one, present in the other
            continue
        if x is y or _same_constant(graph, x, y):
            continue
        sub = _duplicate(graph, x, y, home, claimed, depth - 1)
        if sub is None:
            return None
        extra.extend(sub)
    return extra


def _deterministic(node: Node) -> bool:
    return node.domain in _DEFAULT_DOMAINS and node.op in DETERMINISTIC and not node.subgraphs


def _index(node: Node, t: Tensor) -> int:
    return next(i for i, o in enumerate(node.outputs) if o is t)


def _same_constant(graph: ModelGraph, a: Tensor, b: Tensor) -> bool:
    va, vb = graph.constant_value(a, 64), graph.constant_value(b, 64)
    return va is not None and vb is not None and va.dtype == vb.dtype and va.shape == vb.shape and (va == vb).all()


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
