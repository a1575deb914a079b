"""Generator families for the shapes of trouble of issue 16: each draws small models built
around one way a fusion can change what a model computes, with the feeds that expose it.

Their property (:func:`tests.fuzz.properties.check_semantics`) is weaker than the pieces'
exact counts and stronger where it matters: fusing must not crash, and the fused model
computes what the original does on every feed (fed initializers, zero-size dims, large
means included), or nothing is fused.  Families are switched on in
:data:`tests.fuzz.spec.ENABLED_FAMILIES`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import onnx
from hypothesis import strategies as st
from onnx import helper, numpy_helper

from fusion.rewrite import specs

from .builder import BOOL, DOUBLE, FLOAT, NP, Container, ModelBuilder, Value

Const = Callable[..., str]  # (role, value, shape=()) -> the constant's name


@dataclass
class TroubleCase:
    family: str
    model: onnx.ModelProto
    feeds: list[dict[str, np.ndarray]]  # the first is plain random data
    target: str = "plugin"
    must_not_fuse: bool = False  # nothing may fuse (the outputs are random: no comparison)
    what: str = ""  # the drawn variant, for the failure message
    extra: dict = field(default_factory=dict)


# -- writing chains -------------------------------------------------------------------------


def norm_chain(c: Container, x: str, t: int, kind: str, form: dict, k: Const, h: int) -> str:
    """A last-axis LayerNorm (``kind`` layer) or RMSNorm in type ``t``; every constant comes
    from ``k(role, value, shape)`` so a family can decide what it is."""
    d = c.op("Sub", x, c.reduce_mean(x, [-1])) if kind == "layer" else x
    sq = c.op("Pow", d, k("pow", 2.0)) if form["square"] == "pow" else c.op("Mul", d, d)
    ve = c.op("Add", c.reduce_mean(sq, [-1]), k("eps", 1e-5))
    if form["normalize"] == "pow_half":
        n = c.op("Mul", d, c.op("Pow", ve, k("half", -0.5)))
    elif form["normalize"] == "div_one":
        n = c.op("Mul", d, c.op("Div", k("one", 1.0), c.op("Sqrt", ve)))
    else:
        n = c.op("Div", d, c.op("Sqrt", ve))
    rng = c.mb.rng
    y = n
    if form["gamma"]:
        y = c.op("Mul", y, k("gamma", (rng.standard_normal(h) * 0.5 + 1.0), (h,)))
    if kind == "layer" and form["beta"]:
        y = c.op("Add", y, k("beta", rng.standard_normal(h) * 0.2, (h,)))
    return y


def gelu_fc(c: Container, x: str, t: int, k: Const, k_in: int, n: int) -> str:
    """MatMul + bias + the erf GELU torch writes: 0.5·y·(1 + erf(y/√2))."""
    rng = c.mb.rng
    y = c.op("MatMul", x, k("weight", rng.standard_normal((k_in, n)) / np.sqrt(k_in), (k_in, n)))
    y = c.op("Add", y, k("bias", rng.standard_normal(n) * 0.2, (n,)))
    e = c.op("Erf", c.op("Div", y, k("sqrt2", 1.4142135)))
    return c.op("Mul", c.op("Mul", y, c.op("Add", e, k("one", 1.0))), k("half", 0.5))


def _const(c: Container, t: int) -> Const:
    def k(role: str, value, shape: tuple = ()) -> str:
        return c.const(np.asarray(value, NP[t]).reshape(shape), hint=role)

    return k


def _forms(draw, kind: str) -> dict:
    return {
        "square": draw(st.sampled_from(("pow", "mul"))),
        "normalize": draw(st.sampled_from(("div", "pow_half", "div_one"))),
        "gamma": draw(st.booleans()),
        "beta": kind == "layer" and draw(st.booleans()),
    }


def _data(rng: np.random.Generator, t: int, shape: tuple, mean: float = 0.5, spread: float = 1.5) -> np.ndarray:
    return (mean + spread * rng.standard_normal(shape)).astype(NP[t])


def _finish(mb: ModelBuilder, y: str, t: int, shape: tuple) -> onnx.ModelProto:
    mb.graph_output(Value(y, t, shape))
    return mb.model()


H = 8
SHAPE = ("B", "S", H)
DIMS = {"B": 2, "S": 3}


def _concrete(shape: tuple, dims: dict = DIMS) -> tuple:
    return tuple(dims.get(d, d) if isinstance(d, str) else d for d in shape)


# -- the families ---------------------------------------------------------------------------


@st.composite
def initializer_inputs(draw) -> TroubleCase:
    """Initializers also listed as graph inputs (older exporters): a caller may feed them, so
    they are not constants (issue 16 defect 3)."""
    opset = draw(st.sampled_from((13, 17)))
    mb = ModelBuilder(opset, FLOAT, draw(st.integers(0, 2**16)))
    x = mb.graph_input("x", FLOAT, SHAPE).name
    c = mb.main
    roles: dict[str, str] = {}
    base = _const(c, FLOAT)

    def k(role, value, shape=()):
        roles[role] = base(role, value, shape)
        return roles[role]

    piece = draw(st.sampled_from(("layer", "rms", "gelu_fc")))
    if piece == "gelu_fc":
        y = gelu_fc(c, x, FLOAT, k, H, H)
    else:
        y = norm_chain(c, x, FLOAT, piece, _forms(draw, piece), k, H)
    listed = draw(st.sets(st.sampled_from(sorted(roles)), min_size=1))
    model = _finish(mb, y, FLOAT, SHAPE)
    inits = {t.name: t for t in model.graph.initializer}
    for role in sorted(listed):
        t = inits[roles[role]]
        model.graph.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    rng = np.random.default_rng(0)
    plain = {x: _data(rng, FLOAT, _concrete(SHAPE))}
    fed = dict(plain)
    for role in sorted(listed):
        v = numpy_helper.to_array(inits[roles[role]]).astype(np.float64)
        fed[roles[role]] = np.asarray(v * 1.5 + 0.1 * np.where(v < 0, -1, 1)).astype(np.float32)
    return TroubleCase("initializer_inputs", model, [plain, fed], what=f"{piece}, listed {sorted(listed)}")


@st.composite
def float64(draw) -> TroubleCase:
    """A float64 norm: its fused body must compute in float64 (defect 5)."""
    kind = draw(st.sampled_from(("layer", "rms")))
    mb = ModelBuilder(draw(st.sampled_from((13, 17))), DOUBLE, draw(st.integers(0, 2**16)))
    x = mb.graph_input("x", DOUBLE, SHAPE).name
    y = norm_chain(mb.main, x, DOUBLE, kind, _forms(draw, kind), _const(mb.main, DOUBLE), H)
    rng = np.random.default_rng(1)
    shape = _concrete(SHAPE)
    feeds = [{x: _data(rng, DOUBLE, shape)}, {x: _data(rng, DOUBLE, shape, 1e8, 1.0)}]
    return TroubleCase("float64", _finish(mb, y, DOUBLE, SHAPE), feeds, what=kind)


@st.composite
def fp64_island(draw) -> TroubleCase:
    """An fp32 model that computes its norm in float64 (Cast in, Cast out) (defect 5)."""
    kind = draw(st.sampled_from(("layer", "rms")))
    mb = ModelBuilder(draw(st.sampled_from((13, 17))), FLOAT, draw(st.integers(0, 2**16)))
    x = mb.graph_input("x", FLOAT, SHAPE).name
    c = mb.main
    form = _forms(draw, kind)
    cast_back = draw(st.sampled_from(("after", "before_gamma")))
    xd = c.op("Cast", x, to=DOUBLE)
    if cast_back == "after":
        y = c.op("Cast", norm_chain(c, xd, DOUBLE, kind, form, _const(c, DOUBLE), H), to=FLOAT)
    else:
        n = c.op("Cast", norm_chain(c, xd, DOUBLE, kind, dict(form, gamma=False, beta=False), _const(c, DOUBLE), H), to=FLOAT)
        y = c.op("Mul", n, _const(c, FLOAT)("gamma", mb.rng.standard_normal(H) * 0.5 + 1.0, (H,)))
    rng = np.random.default_rng(2)
    shape = _concrete(SHAPE)
    feeds = [{x: _data(rng, FLOAT, shape)}, {x: _data(rng, FLOAT, shape, 1e4, 0.01)}]
    return TroubleCase("fp64_island", _finish(mb, y, FLOAT, SHAPE), feeds, what=f"{kind}, cast back {cast_back}")


@st.composite
def multi_output(draw) -> TroubleCase:
    """Norm-like chains over the outputs of a Split: which output is read matters (defect 2)."""
    mb = ModelBuilder(13, FLOAT, draw(st.integers(0, 2**16)))
    x = mb.graph_input("x", FLOAT, ("B", "S", 2 * H)).name
    c = mb.main
    split = c.ints([H, H])

    def halves() -> tuple[str, str]:
        a, b = mb.fresh("half"), mb.fresh("half")
        c.nodes.append(helper.make_node("Split", [x, split], [a, b], name=mb.fresh("Split"), axis=-1))
        return a, b

    a, b = halves()
    if draw(st.booleans()):  # the second half from a second, identical Split
        b = halves()[1]
    k = _const(c, FLOAT)
    how = draw(st.sampled_from(("covariance", "cross_center", "cross_mean")))
    da = c.op("Sub", a, c.reduce_mean(a, [-1]))
    db = c.op("Sub", b, c.reduce_mean(b, [-1]))
    if how == "covariance":  # mean((a − ā)(b − b̄)): not a variance
        var, d = c.reduce_mean(c.op("Mul", da, db), [-1]), da
    elif how == "cross_center":  # b centered by a's mean
        d = c.op("Sub", b, c.reduce_mean(a, [-1]))
        var = c.reduce_mean(c.op("Mul", d, d), [-1])
    else:  # a's deviations, scaled by b's spread
        var, d = c.reduce_mean(c.op("Mul", db, db), [-1]), da
    if how == "covariance" and draw(st.booleans()):
        var = c.op("Abs", var)  # (a covariance can be negative: the original's sqrt is then NaN)
    y = c.op("Div", d, c.op("Sqrt", c.op("Add", var, k("eps", 1e-5))))
    rng = np.random.default_rng(3)
    feeds = [{x: _data(rng, FLOAT, (2, 3, 2 * H))}]
    return TroubleCase("multi_output", _finish(mb, y, FLOAT, SHAPE), feeds, what=how)


@st.composite
def nondeterministic(draw) -> TroubleCase:
    """A norm-like chain whose mean and centered value read two separate random draws: never
    one value, so never a norm (defect 2)."""
    mb = ModelBuilder(13, FLOAT, draw(st.integers(0, 2**16)))
    x = mb.graph_input("x", FLOAT, SHAPE).name
    c = mb.main
    op = draw(st.sampled_from(("RandomUniformLike", "RandomNormalLike", "Dropout")))

    def draw_one() -> str:
        if op == "Dropout":
            ratio, train = c.const(np.array(0.5, np.float32)), c.const(np.array(True))
            return c.op("Dropout", x, ratio, train)
        return c.op(op, x)

    r1, r2 = draw_one(), draw_one()
    how = draw(st.sampled_from(("gelu_two_draws", "cross_center", "var_of_other")))
    rng = np.random.default_rng(4)
    feeds = [{x: _data(rng, FLOAT, _concrete(SHAPE))}]
    if how == "gelu_two_draws":  # FC(r1)·(1 + erf(FC(r2)/√2))/2: two draws are not one y
        k = _const(c, FLOAT)
        w, b = k("w", mb.rng.standard_normal((H, H)) / 3, (H, H)), k("b", np.ones(H) * 0.1, (H,))
        y1, y2 = (c.op("Add", c.op("MatMul", r, w), b) for r in (r1, r2))
        e = c.op("Add", c.op("Erf", c.op("Div", y2, k("sqrt2", 1.4142135))), k("one", 1.0))
        y = c.op("Mul", c.op("Mul", y1, k("half", 0.5)), e)
        # (the FC of y1 may fuse; the GELU may not take y2's branch with it)
        return TroubleCase("nondeterministic", _finish(mb, y, FLOAT, SHAPE), feeds, what=f"{op}, {how}", extra={"keep": "Erf"})
    if how == "cross_center":  # r2 centered by r1's mean
        d = dv = c.op("Sub", r2, c.reduce_mean(r1, [-1]))
    else:  # r1's deviations over r2's spread (torch.var-style recentering, of the other draw)
        d = c.op("Sub", r1, c.reduce_mean(r1, [-1]))
        dv = c.op("Sub", r2, c.reduce_mean(r2, [-1]))
    var = c.reduce_mean(c.op("Mul", dv, dv) if draw(st.booleans()) else c.op("Pow", dv, c.scalar(2.0, FLOAT)), [-1])
    y = c.op("Div", d, c.op("Sqrt", c.op("Add", var, c.scalar(1e-5, FLOAT))))
    return TroubleCase("nondeterministic", _finish(mb, y, FLOAT, SHAPE), feeds, must_not_fuse=True, what=f"{op}, {how}")


@st.composite
def pre_existing_function(draw) -> TroubleCase:
    """The model already holds a model-local function named as one of our custom ops, with
    another body (another tool, an older version): new nodes must not call it (defect 7)."""
    spec = draw(st.sampled_from([s for s in specs.SPECS if s.provider == "fusion"]))
    mb = ModelBuilder(17, FLOAT, draw(st.integers(0, 2**16)))
    x = mb.graph_input("x", FLOAT, SHAPE).name
    z = mb.graph_input("z", FLOAT, SHAPE).name
    c = mb.main
    body_op = draw(st.sampled_from(("Neg", "Identity")))
    fn = helper.make_function(
        spec.domain, spec.op_type, ["X"], ["Y"], [helper.make_node(body_op, ["X"], ["Y"])],
        [helper.make_opsetid("", 17)], attributes=[f.name for f in spec.fields],
    )  # fmt: skip
    mb.functions.append(fn)
    theirs = c.op(spec.op_type, z, domain=spec.domain)
    if spec.op_type == "FusedFC":
        y = gelu_fc(c, x, FLOAT, _const(c, FLOAT), H, H)
    else:
        kind = "rms" if "RMS" in spec.op_type else "layer"
        y = norm_chain(c, x, FLOAT, kind, _forms(draw, kind), _const(c, FLOAT), H)
    mb.graph_output(Value(theirs, FLOAT, SHAPE))
    model = _finish(mb, y, FLOAT, SHAPE)
    del model.opset_import[1:]  # (ModelBuilder's function domain) -> the spec's domain
    model.opset_import.append(helper.make_opsetid(spec.domain, 1))
    rng = np.random.default_rng(5)
    shape = _concrete(SHAPE)
    feeds = [{x: _data(rng, FLOAT, shape), z: _data(rng, FLOAT, shape)}]
    return TroubleCase("pre_existing_function", model, feeds, what=f"{spec.op_type} body {body_op}")


@st.composite
def scope_crossing(draw) -> TroubleCase:
    """A norm whose first steps are in the main graph and the rest inside an If branch, next
    to an unrelated node of the branch (defect 7: match within one scope)."""
    kind = draw(st.sampled_from(("layer", "rms")))
    mb = ModelBuilder(13, FLOAT, draw(st.integers(0, 2**16)))
    x = mb.graph_input("x", FLOAT, SHAPE).name
    cond = mb.graph_input("cond", BOOL, (), kind="bool").name
    c = mb.main
    # What the main graph computes: the mean (layer); x − mean; its square.
    split_at = draw(st.sampled_from(("mean", "center", "square") if kind == "layer" else ("square",)))
    mean = c.reduce_mean(x, [-1]) if kind == "layer" else None
    d = c.op("Sub", x, mean) if kind == "layer" and split_at != "mean" else (x if kind == "rms" else None)
    sq = c.op("Mul", d, d) if split_at == "square" else None
    inner_numerator = d is None or draw(st.booleans())  # x − mean (again) inside the branch
    branches = []
    for label in ("then", "else"):
        body = Container(mb, "body")
        unrelated = body.op("Sigmoid", x)  # a node of the branch no fusion may touch
        if label == "then":
            dd = body.op("Sub", x, mean) if kind == "layer" and (d is None or inner_numerator) else d
            var = body.reduce_mean(sq if sq is not None else body.op("Mul", dd, dd), [-1])
            num = dd if inner_numerator else d
            y = body.op("Div", num, body.op("Sqrt", body.op("Add", var, body.scalar(1e-5, FLOAT))))
            y = body.op("Add", y, unrelated)
        else:
            y = body.op("Neg", unrelated)
        out = helper.make_tensor_value_info(y, FLOAT, list(SHAPE))
        branches.append(helper.make_graph(body.nodes, mb.fresh(label), [], [out], body.initializers))
    y = c.op("If", cond, then_branch=branches[0], else_branch=branches[1])
    rng = np.random.default_rng(6)
    xs = _data(rng, FLOAT, _concrete(SHAPE))
    feeds = [{x: xs, cond: np.array(True)}, {x: xs, cond: np.array(False)}]
    where = "inside" if inner_numerator else "outside"
    what = f"{kind}, split at {split_at}, numerator {where}"
    return TroubleCase("scope_crossing", _finish(mb, y, FLOAT, SHAPE), feeds, what=what)


@st.composite
def one_element_rank(draw) -> TroubleCase:
    """A one-element constant of higher rank than the data ([1,1,1,1] eps, exponent, 1/·,
    GELU constant) grows the original's output rank: the fused output must too, or not fuse
    (defect 4)."""
    mb = ModelBuilder(draw(st.sampled_from((13, 17))), FLOAT, draw(st.integers(0, 2**16)))
    x = mb.graph_input("x", FLOAT, SHAPE).name
    c = mb.main
    base = _const(c, FLOAT)
    piece = draw(st.sampled_from(("layer", "rms", "gelu_fc")))
    roles = ("sqrt2", "one", "half") if piece == "gelu_fc" else ("pow", "eps", "one", "half")
    grown = draw(st.sampled_from(roles))
    rank = draw(st.sampled_from((4, 5)))

    def k(role, value, shape=()):
        if role == grown and np.size(value) == 1:
            shape = (1,) * rank
        return base(role, value, shape)

    if piece == "gelu_fc":
        y = gelu_fc(c, x, FLOAT, k, H, H)
    else:
        form = _forms(draw, piece)
        form["square"] = "pow" if grown == "pow" else form["square"]
        form["normalize"] = {"one": "div_one", "half": "pow_half"}.get(grown, form["normalize"])
        y = norm_chain(c, x, FLOAT, piece, form, k, H)
    out_shape = (1,) * (rank - 3) + SHAPE
    feeds = [{x: _data(np.random.default_rng(7), FLOAT, _concrete(SHAPE))}]
    return TroubleCase("one_element_rank", _finish(mb, y, FLOAT, out_shape), feeds, what=f"{piece}, {grown} of rank {rank}")


@st.composite
def zero_size(draw) -> TroubleCase:
    """Norms and FCs fed a zero-size batch or sequence, for every target (defect 6)."""
    target = draw(st.sampled_from(("plugin", "trt", "onnx")))
    mb = ModelBuilder(17, FLOAT, draw(st.integers(0, 2**16)))
    x = mb.graph_input("x", FLOAT, SHAPE).name
    c = mb.main
    piece = draw(st.sampled_from(("layer", "rms", "fc", "gemm")))
    k = _const(c, FLOAT)
    if piece == "fc":
        y = c.op("Add", c.op("MatMul", x, k("w", mb.rng.standard_normal((H, H)) / 3, (H, H))), k("b", np.ones(H), (H,)))
    elif piece == "gemm":  # GPT-2's Conv1D: a Gemm on [B·S, H] viewed back as [B, S, H]
        flat = c.op("Reshape", x, c.ints([-1, H]))
        g = c.op("Gemm", flat, k("w", mb.rng.standard_normal((H, H)) / 3, (H, H)), k("b", np.ones(H), (H,)))
        shp = c.op("Shape", x)
        target_shape = c.op("Concat", c.op("Slice", shp, c.ints([0]), c.ints([-1])), c.ints([H]), axis=0)
        y = c.op("Reshape", g, target_shape)
    else:
        y = norm_chain(c, x, FLOAT, piece, _forms(draw, piece), k, H)
    rng = np.random.default_rng(8)
    feeds = [{x: _data(rng, FLOAT, _concrete(SHAPE))}]
    feeds += [{x: _data(rng, FLOAT, _concrete(SHAPE, dims))} for dims in ({"B": 0, "S": 3}, {"B": 2, "S": 0})]
    return TroubleCase("zero_size", _finish(mb, y, FLOAT, SHAPE), feeds, target=target, what=f"{piece} -> {target}")


FAMILIES = {
    "initializer_inputs": initializer_inputs,
    "float64": float64,
    "fp64_island": fp64_island,
    "multi_output": multi_output,
    "nondeterministic": nondeterministic,
    "pre_existing_function": pre_existing_function,
    "scope_crossing": scope_crossing,
    "one_element_rank": one_element_rank,
    "zero_size": zero_size,
}
