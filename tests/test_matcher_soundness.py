"""The matcher's soundness (issue 16, defects 1, 2 and 7b).

* A pattern object reached twice binds one tensor: the same option of every alternative on
  its way (Alt, Opt, the quiet Cast wrappers), not merely a look-alike.
* Two different nodes count as one only if they are exact duplicates: same output index of
  the same inputs, and an op known to be deterministic.
* A match stays in one scope: a value computed in an enclosing graph is an opaque input.

Each case runs the original and the fused model on onnxruntime (graph optimizations off).
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import fusion
from fusion.ir.graph import ModelGraph
from fusion.match.pattern import Const, Matcher, Op, Opt, Var

from .builders import FLOAT, G, count, max_error, reduce_mean

SQRT2 = math.sqrt(2.0)


def _fused(model: onnx.ModelProto, passes: list[str]):
    """Fuse, check the result loads and passes the full checker, and compare numbers."""
    result = fusion.run(model, passes)
    onnx.checker.check_model(result.model, full_check=True)
    return result


def _reasons(result) -> str:
    return " | ".join(m.reason for m in result.near_misses)


# -- defect 1: TensorFlow-form LayerNorm with γ on one product only -------------------------


def _tf_layernorm(rsqrt: str, shift: str, gamma_on: str) -> onnx.ModelProto:
    """x·s1 − mean·s2 with s = rsqrt(var + eps); γ multiplies s1, s2, or both."""
    rng = np.random.default_rng(3)
    g = G(13)
    x = g.input("x", FLOAT, ["B", "S", 16])
    mean = reduce_mean(g, x, [-1])
    d = g.op("Sub", x, mean)
    ve = g.op("Add", reduce_mean(g, g.op("Mul", d, d), [-1]), g.const(1e-3))
    if rsqrt == "reciprocal":
        inv = g.op("Reciprocal", g.op("Sqrt", ve))
    else:
        inv = g.op("Pow", ve, g.const(-0.5))
    scaled = g.op("Mul", inv, g.const((rng.standard_normal(16) + 2).astype(np.float32)))
    xs = g.op("Mul", x, scaled if gamma_on in ("x", "both") else inv)
    ms = g.op("Mul", mean, scaled if gamma_on in ("mean", "both") else inv)
    if shift == "beta":
        y = g.op("Add", xs, g.op("Sub", g.const(rng.standard_normal(16).astype(np.float32)), ms))
    elif shift == "neg":
        y = g.op("Add", xs, g.op("Neg", ms))
    else:
        y = g.op("Sub", xs, ms)
    g.output(y, FLOAT)
    return g.model()


TF_VARIANTS = [(r, s, on) for r in ("reciprocal", "pow") for s in ("beta", "neg", "sub") for on in ("x", "mean")]


def _x(shape=(2, 3, 16), seed=0, scale=3.0, offset=1.0) -> dict[str, np.ndarray]:
    return {"x": (np.random.default_rng(seed).standard_normal(shape) * scale + offset).astype(np.float32)}


@pytest.mark.parametrize("rsqrt,shift,gamma_on", TF_VARIANTS)
def test_tf_layernorm_with_gamma_on_one_product_is_not_fused(rsqrt, shift, gamma_on):
    model = _tf_layernorm(rsqrt, shift, gamma_on)
    result = _fused(model, ["layernorm", "rmsnorm"])
    assert result.counts() == {}, result.fusions
    assert "which the same part of the pattern matched elsewhere" in _reasons(result), _reasons(result)
    for x in (_x(), _x((1, 5, 16), seed=1)):
        assert max_error(model, result.model, x) < 1e-4


@pytest.mark.parametrize("rsqrt,shift", [(r, s) for r in ("reciprocal", "pow") for s in ("beta", "neg", "sub")])
def test_tf_layernorm_with_gamma_on_both_products_still_fuses(rsqrt, shift):
    model = _tf_layernorm(rsqrt, shift, "both")
    result = _fused(model, ["layernorm"])
    assert result.counts() == {"layernorm": 1}, _reasons(result)
    assert [n.op_type for n in result.model.graph.node] == ["FusedLayerNorm"]
    for x in (_x(), _x((1, 5, 16), seed=1)):
        assert max_error(model, result.model, x) < 1e-4


# -- defect 1: GELU whose erf/tanh reads another point of the FC than the product ----------


def _gelu_model(form: str) -> onnx.ModelProto:
    """0.5·y·(1 + erf(t/√2)) (or the tanh form) where t and y are different points of the FC.

    ``erf_pre_bias``: y = t + b, t = MatMul; ``tanh_pre_bias``: the same in the tanh form;
    ``gemm_matmul``: y = Gemm(x, W, c), t = MatMul(x, W); ``reshape``: y = Reshape(Gemm) to
    [M, 1, N], t = the Gemm [M, N] (so the product broadcasts to [M, M, N]); the ``exact_*``
    forms read y everywhere (must fuse)."""
    rng = np.random.default_rng(5)
    g = G(13)
    k, n = 8, 12
    w = (rng.standard_normal((k, n)) / math.sqrt(k)).astype(np.float32)
    b = (rng.standard_normal(n) + 1.0).astype(np.float32)
    if form in ("gemm_matmul", "reshape", "exact_reshape"):
        x = g.input("x", FLOAT, ["M", k])
        wt = g.const(w)
        gemm = g.op("Gemm", x, wt, g.const(b))
        if form == "gemm_matmul":
            y, t = gemm, g.op("MatMul", x, wt)
        else:
            y = g.op("Reshape", gemm, g.const(np.array([-1, 1, n], np.int64)))
            t = gemm if form == "reshape" else y
    else:
        x = g.input("x", FLOAT, ["B", "S", k])
        mm = g.op("MatMul", x, g.const(w))
        y = g.op("Add", mm, g.const(b))
        t = y if form.startswith("exact") else mm
    if "tanh" in form:
        inner = g.op("Add", t, g.op("Mul", g.op("Pow", t, g.const(3.0)), g.const(0.044715)))
        one = g.op("Add", g.op("Tanh", g.op("Mul", inner, g.const(math.sqrt(2 / math.pi)))), g.const(1.0))
    else:
        one = g.op("Add", g.op("Erf", g.op("Div", t, g.const(SQRT2))), g.const(1.0))
    out = g.op("Mul", g.op("Mul", y, one), g.const(0.5))
    g.output(out, FLOAT)
    return g.model()


def _gelu_feeds(form: str, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    shape = (6, 8) if form in ("gemm_matmul", "reshape", "exact_reshape") else (2, 3, 8)
    return {"x": rng.standard_normal(shape).astype(np.float32)}


@pytest.mark.parametrize("form", ["erf_pre_bias", "tanh_pre_bias", "gemm_matmul", "reshape"])
def test_gelu_reading_another_point_of_the_fc_keeps_its_activation(form):
    model = _gelu_model(form)
    result = _fused(model, ["gemm"])
    assert "should be" in _reasons(result), _reasons(result)
    for f in result.fusions:
        assert all(n["attributes"].get("activation", "none") == "none" for n in f.nodes), f.nodes
    assert count(result.model, "Erf") + count(result.model, "Tanh") == 1
    for seed in (1, 2):
        assert max_error(model, result.model, _gelu_feeds(form, seed)) < 1e-4


@pytest.mark.parametrize("form", ["exact_erf", "exact_tanh", "exact_reshape"])
def test_exact_gelu_still_fuses_into_the_fc(form):
    model = _gelu_model(form)
    result = _fused(model, ["gemm"])
    assert result.counts() == {"gemm": 1}, _reasons(result)
    assert count(result.model, "Erf") + count(result.model, "Tanh") == 0
    acts = [n["attributes"].get("activation") for f in result.fusions for n in f.nodes if n["op_type"] == "FusedFC"]
    assert acts == ["gelu_tanh" if "tanh" in form else "gelu_erf"]
    for seed in (1, 2):
        assert max_error(model, result.model, _gelu_feeds(form, seed)) < 1e-4


# -- defect 2: duplicate-node equivalence -------------------------------------------------


def _split_layernorm(splits: int, second_index: int) -> onnx.ModelProto:
    """d1/sqrt(mean(d1·d2) + eps), d_i = h_i − mean(h_i), h1 = Split(s)[0], h2 = Split(s)[k].

    ``second_index`` 1 makes it the covariance of the two halves, 0 a duplicated variance."""
    g = G(13)
    s = g.input("s", FLOAT, ["B", 32])
    first = g.op("Split", s, axis=-1, n_out=2)
    second = g.op("Split", s, axis=-1, n_out=2) if splits == 2 else first
    h1, h2 = first[0], second[second_index]
    d1 = g.op("Sub", h1, reduce_mean(g, h1, [-1]))
    d2 = g.op("Sub", h2, reduce_mean(g, h2, [-1]))
    var = reduce_mean(g, g.op("Mul", d1, d2), [-1])
    y = g.op("Div", d1, g.op("Sqrt", g.op("Add", var, g.const(1e-5))))
    g.output(y, FLOAT)
    return g.model()


def _split_feeds(seed: int = 0, rows: int = 4) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((rows, 16))
    b = 0.5 * a + 0.3 * rng.standard_normal((rows, 16))  # correlated: the covariance is positive
    return {"s": np.concatenate([a, b], axis=1).astype(np.float32)}


@pytest.mark.parametrize("splits", [1, 2])
def test_covariance_of_two_split_halves_is_not_a_variance(splits):
    model = _split_layernorm(splits, second_index=1)
    result = _fused(model, ["layernorm", "rmsnorm"])
    assert result.counts() == {}, result.fusions
    assert "should be" in _reasons(result), _reasons(result)
    for seed in (0, 1):
        assert max_error(model, result.model, _split_feeds(seed)) < 1e-5


def test_duplicated_split_at_the_same_output_still_merges():
    model = _split_layernorm(2, second_index=0)
    result = _fused(model, ["layernorm"])
    assert result.counts() == {"layernorm": 1}, _reasons(result)
    assert count(result.model, "Split") == 1
    for seed in (0, 1):
        assert max_error(model, result.model, _split_feeds(seed)) < 1e-5


def _random_gelu(op: str, spread: float = 0.5) -> onnx.ModelProto:
    """y·(1 + erf(y'/√2))·0.5 where y and y' are MatMuls of two separate random draws
    (``spread`` 0: draws that cannot vary, so the numbers can be compared)."""
    rng = np.random.default_rng(7)
    g = G(13)
    z = g.input("z", FLOAT, ["B", 8])
    w = g.const((rng.standard_normal((8, 12)) / 3).astype(np.float32))
    if op == "Dropout":
        train = g.const(np.array(True))
        draws = [g.op("Dropout", z, g.const(np.float32(spread)), train) for _ in range(2)]
    elif op == "RandomUniformLike":
        draws = [g.op(op, z, low=0.5 - spread, high=0.5 + spread) for _ in range(2)]
    else:
        # (onnxruntime aborts on scale 0; 1e-30 vanishes next to the mean in fp32)
        draws = [g.op(op, z, mean=0.5, scale=max(spread, 1e-30)) for _ in range(2)]
    y1, y2 = (g.op("MatMul", d, w) for d in draws)
    one = g.op("Add", g.op("Erf", g.op("Div", y2, g.const(SQRT2))), g.const(1.0))
    g.output(g.op("Mul", g.op("Mul", y1, one), g.const(0.5)), FLOAT)
    return g.model()


@pytest.mark.parametrize("op", ["RandomUniformLike", "RandomNormalLike", "Dropout"])
def test_nondeterministic_draws_are_never_merged(op):
    model = _random_gelu(op)
    result = _fused(model, ["gemm"])
    assert count(result.model, op) == 2
    assert "should be" in _reasons(result), _reasons(result)
    acts = [n["attributes"].get("activation") for f in result.fusions for n in f.nodes if n["op_type"] == "FusedFC"]
    assert "gelu_erf" not in acts
    assert count(result.model, "Erf") == 1
    # With draws that cannot vary, the numbers must agree.
    still = _random_gelu(op, spread=0.0)
    fused = _fused(still, ["gemm"]).model
    z = {"z": np.random.default_rng(0).standard_normal((3, 8)).astype(np.float32)}
    assert max_error(still, fused, z) < 1e-5


def test_doubled_centering_sub_still_fuses():
    """Some exporters write x − mean twice for the square: Mul(x − mean, x − mean')."""
    g = G(13)
    x = g.input("x", FLOAT, ["B", "S", 16])
    mean = reduce_mean(g, x, [-1])
    d = g.op("Sub", x, mean)
    d2 = g.op("Sub", x, mean)
    var = reduce_mean(g, g.op("Mul", d2, g.op("Sub", x, mean)), [-1])
    y = g.op("Div", d, g.op("Sqrt", g.op("Add", var, g.const(1e-5))))
    g.output(y, FLOAT)
    model = g.model()
    result = _fused(model, ["layernorm"])
    assert result.counts() == {"layernorm": 1}, _reasons(result)
    assert [n.op_type for n in result.model.graph.node] == ["FusedLayerNorm"]
    for x in (_x(), _x((1, 5, 16), seed=1)):
        assert max_error(model, result.model, x) < 1e-5


# -- defect 7b: one scope per match -------------------------------------------------------


def _cross_scope_model() -> onnx.ModelProto:
    """mean = ReduceMean(x) in the main graph; the rest of a LayerNorm inside an If branch,
    after an unrelated node of the branch."""
    eps = helper.make_tensor("eps", FLOAT, [], [1e-5])
    then_nodes = [
        helper.make_node("Neg", ["x"], ["other"], name="then/unrelated"),
        helper.make_node("Sub", ["x", "mean"], ["d"], name="then/sub"),
        helper.make_node("Mul", ["d", "d"], ["sq"], name="then/square"),
        helper.make_node("ReduceMean", ["sq"], ["var"], name="then/var", axes=[-1]),
        helper.make_node("Add", ["var", "eps"], ["ve"], name="then/add_eps"),
        helper.make_node("Sqrt", ["ve"], ["std"], name="then/sqrt"),
        helper.make_node("Div", ["d", "std"], ["then_y"], name="then/div"),
    ]
    then_g = helper.make_graph(
        then_nodes,
        "then",
        [],
        [helper.make_tensor_value_info("then_y", FLOAT, ["B", 16]), helper.make_tensor_value_info("other", FLOAT, ["B", 16])],
        [eps],
    )
    else_g = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["else_y"], name="else/y"), helper.make_node("Identity", ["x"], ["else_o"], name="else/o")],
        "else",
        [],
        [helper.make_tensor_value_info("else_y", FLOAT, ["B", 16]), helper.make_tensor_value_info("else_o", FLOAT, ["B", 16])],
    )
    g = helper.make_graph(
        [
            helper.make_node("ReduceMean", ["x"], ["mean"], name="mean", axes=[-1]),
            helper.make_node("If", ["cond"], ["y", "o"], name="If_0", then_branch=then_g, else_branch=else_g),
        ],
        "main",
        [helper.make_tensor_value_info("x", FLOAT, ["B", 16]), helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", FLOAT, ["B", 16]), helper.make_tensor_value_info("o", FLOAT, ["B", 16])],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_chain_crossing_into_an_if_branch_is_not_fused():
    model = _cross_scope_model()
    result = _fused(model, ["layernorm", "rmsnorm"])
    assert result.counts() == {}, result.fusions
    then_g = next(a.g for a in result.model.graph.node[1].attribute if a.name == "then_branch")
    assert [n.name for n in then_g.node][0] == "then/unrelated"
    x = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)
    for cond in (True, False):
        assert max_error(model, result.model, {"x": x, "cond": np.array(cond)}) < 1e-6


# -- the matcher on its own ---------------------------------------------------------------


def _graph(build_fn) -> tuple[ModelGraph, list]:
    g = G(13)
    x = g.input("x", FLOAT, ["B", 4])
    out = build_fn(g, x)
    g.output(out, FLOAT)
    mg = ModelGraph.from_proto(g.model())
    return mg, mg.scopes[0].ir.nodes


def _matches(pattern, build_fn) -> list:
    mg, nodes = _graph(build_fn)
    return list(Matcher(mg).match(pattern, nodes[-1]))


def _either():
    v = Var("v")
    a = Op("Neg", v, name="neg") | Op("Abs", v, name="abs")
    return Op("Mul", a, a, name="mul")


def test_matcher_alternative_reached_twice_binds_one_option():
    assert not _matches(_either(), lambda g, x: g.op("Mul", g.op("Neg", x), g.op("Abs", x)))
    ms = _matches(_either(), lambda g, x: g.op("Mul", g.op("Abs", x), g.op("Abs", x)))
    assert ms and all("abs" in m and "neg" not in m for m in ms)
    assert [n.op for n in ms[0].all_nodes] == ["Mul", "Abs", "Abs"]  # the duplicate comes along


def test_matcher_quiet_cast_wrapper_reached_twice_binds_one_option():
    v = Var("v")
    c = Op("Cast", v, quiet=True, name="cast") | v
    p = Op("Add", c, c)
    assert not _matches(p, lambda g, x: g.op("Add", g.op("Cast", x, to=FLOAT), x))
    assert not _matches(p, lambda g, x: g.op("Add", x, g.op("Cast", x, to=FLOAT)))
    assert len(_matches(p, lambda g, x: g.op("Add", x, x))) == 1
    ms = _matches(p, lambda g, x: g.op("Add", *[g.op("Cast", x, to=FLOAT)] * 2))
    # Cast(x) twice (the Cast option), or v = Cast(x) twice (the bare option): never a mix.
    assert sorted(("cast" in m, m["v"].name) for m in ms) == [(False, "cast_1"), (True, "x")]


def test_matcher_optional_input_reached_twice_binds_one_option():
    v = Var("v")
    a = Op("Max", v, Opt(Const("c")), name="max", commute=False)
    p = Op("Sub", a, Op("Neg", a))
    one = np.float32(1.0)
    assert len(_matches(p, lambda g, x: (lambda m: g.op("Sub", m, g.op("Neg", m)))(g.op("Max", x, g.const(one))))) == 1
    # Max(x, 1) and Max(x) (absent optional) are not the same tensor.
    assert not _matches(p, lambda g, x: g.op("Sub", g.op("Max", x, g.const(one)), g.op("Neg", g.op("Max", x))))


def test_matcher_var_reached_twice_binds_one_tensor():
    v = Var("v")
    p = Op("Add", Op("Neg", v), Op("Abs", v))
    assert len(_matches(p, lambda g, x: g.op("Add", g.op("Neg", x), g.op("Abs", x)))) == 1
    assert not _matches(p, lambda g, x: g.op("Add", g.op("Neg", x), g.op("Abs", g.op("Relu", x))))


def test_matcher_duplicates_must_read_the_same_output_index():
    p = Op("Mul", Op("Exp", Var("v"), name="e"), Op("Exp", Var("w"), name="e2"), commute=False)
    shared = Op("Exp", Var("v"), name="e")
    q = Op("Mul", shared, shared)

    def halves(g, x, i, j, two):
        first = g.op("Split", x, axis=-1, n_out=2)
        second = g.op("Split", x, axis=-1, n_out=2) if two else first
        return g.op("Mul", g.op("Exp", first[i]), g.op("Exp", second[j]))

    assert len(_matches(p, lambda g, x: halves(g, x, 0, 1, False))) == 1  # distinct patterns: fine
    assert not _matches(q, lambda g, x: halves(g, x, 0, 1, False))
    assert not _matches(q, lambda g, x: halves(g, x, 0, 1, True))
    ms = _matches(q, lambda g, x: halves(g, x, 0, 0, True))
    assert ms and sorted(n.op for n in ms[0].all_nodes) == ["Exp", "Exp", "Mul", "Split"]


def test_matcher_duplicates_compare_absent_optional_inputs():
    shared = Op("Exp", Var("v"), name="e")
    q = Op("Mul", shared, shared)
    top = np.float32(0.5)

    def clipped(g, x, second_min):
        a = g.op("Clip", x, "", g.const(top))
        b = g.op("Clip", x, g.const(np.float32(-1.0)) if second_min else "", g.const(top))
        return g.op("Mul", g.op("Exp", a), g.op("Exp", b))

    assert _matches(q, lambda g, x: clipped(g, x, False))  # both absent: a duplicate
    assert not _matches(q, lambda g, x: clipped(g, x, True))


@pytest.mark.parametrize("op", ["RandomUniformLike", "RandomNormalLike", "Bernoulli", "Multinomial", "Dropout", "Foo"])
def test_matcher_never_merges_nondeterministic_or_unknown_ops(op):
    shared = Op("Exp", Var("v"), name="e")
    q = Op("Mul", shared, shared)

    def draw(g, x):
        kw = {"domain": "custom"} if op == "Foo" else {}
        if op == "Dropout":
            return g.op("Dropout", x, g.const(np.float32(0.5)), g.const(np.array(True)))
        return g.op(op, x, **kw)

    def model(g, x):
        return g.op("Mul", g.op("Exp", draw(g, x)), g.op("Exp", draw(g, x)))

    g = G(13)
    x = g.input("x", FLOAT, ["B", 4])
    g.output(model(g, x), FLOAT)
    mg = ModelGraph.from_proto(g.model(infer=False))
    assert not list(Matcher(mg).match(q, mg.scopes[0].ir.nodes[-1]))


def test_matcher_stays_in_the_root_scope():
    model = _cross_scope_model()
    mg = ModelGraph.from_proto(model)
    branch = next(s for s in mg.scopes if s.path.endswith("then_branch"))
    div = branch.ir.nodes[-1]
    d = Op("Sub", Var("x"), Op("ReduceMean", Var("x2"), name="mean"), name="d")
    p = Op("Div", d, Var("std"))
    matcher = Matcher(mg)
    assert not list(matcher.match(p, div))
    assert "outside" in matcher.best.reason, matcher.best.reason
    # With the mean as an opaque input, the same root matches, binding the outer tensor.
    q = Op("Div", Op("Sub", Var("x"), Var("mean"), name="d"), Var("std"))
    ms = list(Matcher(mg).match(q, div))
    assert len(ms) == 1 and ms[0]["mean"].name == "mean"
    assert all(n.scope is branch for n in ms[0].all_nodes)
