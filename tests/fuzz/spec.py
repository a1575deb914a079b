"""A fuzz model as data (:class:`ModelSpec`), and building it into a :class:`Case`."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

import onnx

from .builder import (
    DIMS,
    FLOAT,
    FULL,
    Container,
    Feed,
    ModelBuilder,
    Value,
    merge_known,
)
from .pieces import CONST, Built, Leak

GLUES = ("none", "tanh", "neg", "sigmoid", "residual")

# The generator families of tests/fuzz/trouble.py (issue 16), each aimed at one defect fixed
# on another branch; on this branch they find those defects, so they start switched off.
# After the merges, the lead turns them all on with: ENABLED_FAMILIES = set(TROUBLE_FAMILIES)
TROUBLE_FAMILIES = (
    "initializer_inputs",  # defect 3 (initializers as graph inputs)
    "float64",  # defect 5
    "fp64_island",  # defect 5
    "multi_output",  # defect 2 (Split outputs)
    "nondeterministic",  # defect 2 (Random*, Dropout in training)
    "pre_existing_function",  # defect 7 (a function named as our op)
    "scope_crossing",  # defect 7 (mean outside, the rest in an If branch)
    "one_element_rank",  # defect 4 ([1,1,1,1] constants)
    "zero_size",  # defect 6
)
ENABLED_FAMILIES: set[str] = set(TROUBLE_FAMILIES)
# FUZZ_FAMILIES=all (or a comma list) runs switched-off families too, to see what they find.
_env = os.environ.get("FUZZ_FAMILIES", "")
ENABLED_FAMILIES |= set(TROUBLE_FAMILIES) if _env == "all" else {f for f in _env.split(",") if f}


@dataclass(frozen=True)
class ModelSpec:
    opset: int = 13
    dtype: int = FLOAT
    shape: tuple = ("B", 3, 8)
    seed: int = 0
    dedupe: bool = False  # equal constants shared, as exporters do
    steps: tuple = ()  # (glue, piece) pairs, applied in order to the input


@dataclass
class Case:
    """A model, how many fusions of each rule it must give, and how to feed it."""

    model: onnx.ModelProto
    expected: dict[str, int]
    feeds: list[Feed]
    dims: dict = field(default_factory=lambda: dict(DIMS))
    seed: int = 0
    dtype: int = FLOAT
    spec: object = None
    bare: dict[str, int] | None = None  # the counts without function bodies, where they differ


def _glue(c: Container, kind: str, x: Value, prev: Value | None) -> Value:
    if kind == "none":
        return x
    if kind == "residual":
        if prev is None or prev.shape != x.shape or prev.dtype != x.dtype:
            return x
        return Value(c.op("Add", x.name, prev.name), x.dtype, x.shape, merge_known(x.known, prev.known))
    op = {"tanh": "Tanh", "neg": "Neg", "sigmoid": "Sigmoid"}[kind]
    return Value(c.op(op, x.name), x.dtype, x.shape, x.known)


def build_sequence(c: Container, x: Value, steps: tuple, where: str) -> tuple[Value, dict[str, int]]:
    """Apply ``steps`` ((glue, piece) pairs) to ``x`` in container ``c``; the expected counts."""
    counts: dict[str, int] = {}
    prev = None
    cast: Cast | None = None  # x is the previous piece's final Cast
    prev_cast: Cast | None = None  # prev (the previous piece's input) is one
    lead: Lead | None = None  # the previous piece started with a Cast of prev
    last: tuple | None = None  # the previous piece: (its unit, whether its output is read elsewhere)
    for glue, piece in steps:
        glued = _glue(c, glue, x, prev)
        if glued.name != x.name:
            if glue == "residual":  # the Add reads prev too
                for p in (prev_cast, lead):
                    if p is not None:
                        p.free = False
            cast = None  # the glue reads x, the piece the glue's output
        follows = last is not None and glued.name == x.name and not last[1]  # x: the previous output, read by this piece only
        x = glued
        prev, prev_cast = x, cast
        built: Built = piece.build(c, x, where)
        built.input_known = x.known
        n, alts, leaked = built.count, built.alts, None
        if piece.leak is not None and where == "main":
            n, alts, leaked = _leak(c, piece.leak, built)
        # A piece starting with a Cast of x alone: the previous norm may end with that Cast.
        lead = Lead(built.leads_with_cast) if built.leads_with_cast and follows else None
        if lead is not None and last[0] is not None:
            last[0].lead = lead
        unit = None
        if built.rule and n:
            counts[built.rule] = counts.get(built.rule, 0) + n
            if built.op:
                unit = Unit(built.rule, built.op, alts, cast if built.takes_cast else None, own_lead=lead)
                c.units.append(unit)
        cast = Cast(built.ends_in_cast, unit) if built.ends_in_cast else None
        read = leaked is not None and leaked.value.name == built.y.name
        if cast is not None and read:
            cast.free = False  # read elsewhere: no match may take it in
        last = (unit, read)
        for r, k in built.inner.items():
            counts[r] = counts.get(r, 0) + k
        x = built.y
    return x, counts


@dataclass
class Cast:
    """A piece's final Cast back to the model's type, which the next norm may take in."""

    reads: int  # the type the Cast reads
    unit: "Unit | None"  # the fusion of the piece it ends, if any
    free: bool = True  # read by nothing but the next piece (no glue, no leak, no residual)


@dataclass
class Unit:
    """One expected fusion of a custom op (see admitted)."""

    rule: str
    op: str
    alts: object  # pieces.Alts
    cast: Cast | None = None  # a Cast before it that it may take in
    cut: bool = False  # the next piece took this one's final Cast in
    lead: "Lead | None" = None  # the next piece's leading Cast, which it may end with
    own_lead: "Lead | None" = None  # its own leading Cast, which the previous piece may end with


@dataclass
class Lead:
    """An RMS norm's leading Cast of x (the previous piece's output), which the previous norm
    may take as its final Cast unless the RMS norm's own match takes it."""

    makes: int  # the type it casts to
    free: bool = True  # x read by nothing else (no residual after)
    claimed: bool = False  # the RMS norm's fusion took it


def _leak(c: Container, leak: Leak, built: Built) -> tuple[int, object, object]:
    """Read one of the piece's values outside it; returns the piece's fusion count then, the
    types its fused node may take (Built.alts), and the role read."""
    if not built.roles:
        return built.count, built.alts, None
    role = built.roles[leak.index % len(built.roles)]
    v = role.value
    mb = c.mb
    kind = leak.kind
    if kind == "output" and (role.kind == CONST or built.input_known != FULL):
        # A graph output must be computed by a node; and the rank it declares would tell the
        # library what shape inference could not.
        kind = "spy"
    if kind == "output":
        # Declared with its full shape: a graph output declared with unknown dims hides the
        # dims shape inference would find from the library (which reads declared shapes first).
        mb.graph_output(Value(v.name, v.dtype, tuple(None if d == -1 else d for d in v.shape)))
    elif kind == "spy":
        mb.graph_output(Value(c.op("Sigmoid", v.name), v.dtype, v.shape), typed=False)
    else:  # read inside both branches of an If
        from onnx import helper

        branches = []
        for op in ("Sigmoid", "Neg"):
            out = mb.fresh("leak")
            node = helper.make_node(op, [v.name], [out], name=mb.fresh(op))
            branches.append(helper.make_graph([node], mb.fresh("leak_branch"), [], [helper.make_tensor_value_info(out, v.dtype, None)]))
        from .builder import BOOL

        cond = mb.graph_input("cond", BOOL, (), kind="bool").name
        y = c.op("If", cond, then_branch=branches[0], else_branch=branches[1])
        mb.graph_output(Value(y, v.dtype, v.shape), typed=False)
    return built.leaked(role), built.alternatives(role), role


def admitted(mb: ModelBuilder, counts: dict[str, int]) -> dict[str, int]:
    """The counts once the library refused what no function body could serve.

    Below opset 15 a body cannot refer to its node's element type (CastLike needs 15), so it
    bakes one: every node of a custom op must then take the same T (rewrite.Editor.admit,
    functions.Body.like_input).  The library scans scope by scope (a node list, the bodies of
    its nodes, then the functions: Container.scopes), each from its last node back, and admits
    the first fusion of an op at the type it prefers; a later chain of another type then fuses
    a shorter (or later-starting) match of that type, if it has one (Norm.alternatives), and
    is refused otherwise.
    """
    if mb.opset >= 15:
        return counts
    counts = dict(counts)
    baked: dict[str, int] = {}
    for scope in mb.main.scopes() + [s for f in mb.function_bodies for s in f.scopes()]:
        for u in reversed(scope.units):
            absorb = u.cast.reads if u.cast is not None and u.cast.free else 0
            extend = u.lead.makes if u.lead is not None and u.lead.free and not u.lead.claimed else 0
            tries = u.alts(absorb, u.cut, extend)
            if not tries:
                raise ValueError(f"generator bug: {u.rule} expected to fuse, but no match the plugin target takes")
            t = baked.setdefault(u.op, tries[0][0])
            took = next((e for e in tries if e[0] == t), None)
            if took is None:
                counts[u.rule] -= 1
                continue
            if took[1] and u.cast.unit is not None:
                u.cast.unit.cut = True
            if u.own_lead is not None:
                u.own_lead.claimed = took[2]
    return {r: n for r, n in counts.items() if n}


def build(spec: ModelSpec) -> Case:
    mb = ModelBuilder(spec.opset, spec.dtype, spec.seed, spec.dedupe)
    x = mb.graph_input("x", spec.dtype, spec.shape)
    y, counts = build_sequence(mb.main, x, spec.steps, "main")
    if y.name == x.name:
        y = Value(mb.main.op("Identity", x.name), x.dtype, x.shape)
    # The main output first: leaks were appended as they came.
    mb.outputs = [o for o in mb.outputs if o.name != y.name]
    mb.graph_output(y)
    mb.outputs.insert(0, mb.outputs.pop())
    case = Case(mb.model(), admitted(mb, counts), mb.feeds, dict(DIMS), spec.seed, spec.dtype, spec)
    case.bare = counts  # functions=False: no body to serve, nothing refused for it
    return case
