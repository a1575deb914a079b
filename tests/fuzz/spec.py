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
ENABLED_FAMILIES: set[str] = set()
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
    for glue, piece in steps:
        x = _glue(c, glue, x, prev)
        prev = x
        built: Built = piece.build(c, x, where)
        built.input_known = x.known
        n = built.count
        if piece.leak is not None and where == "main":
            n = _leak(c, piece.leak, built)
        if built.rule and n:
            counts[built.rule] = counts.get(built.rule, 0) + n
        for r, k in built.inner.items():
            counts[r] = counts.get(r, 0) + k
        x = built.y
    return x, counts


def _leak(c: Container, leak: Leak, built: Built) -> int:
    """Read one of the piece's values outside it; returns the piece's fusion count then."""
    if not built.roles:
        return built.count
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
    return built.leaked(role)


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
    return Case(mb.model(), counts, mb.feeds, dict(DIMS), spec.seed, spec.dtype, spec)
