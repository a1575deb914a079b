"""The arithmetic identities the norm patterns see through (patterns/_algebra.py).

Each identity: a positive (fuses, and the fused model computes what the original did on
onnxruntime with graph optimizations off), a near-identity that is NOT one (does not fuse, and
says why) and the numbers.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import fusion

from .builders import FLOAT, G, max_error

H = 32


def _x(shape=(2, 5, H), seed=0) -> dict[str, np.ndarray]:
    return {"x": (np.random.default_rng(seed).standard_normal(shape) * 2 + 0.7).astype(np.float32)}


def _mean(g: G, t: str, form: str, n: float = H, keepdims: int = 1, axes=(-1,)) -> str:
    """The mean of ``t`` over ``axes``, spelled ``form``."""
    ax = g.const(np.array(axes, np.int64))
    if form == "reduce_mean":
        return g.op("ReduceMean", t, axes=list(axes), keepdims=keepdims)
    if form == "gap":
        return g.op("GlobalAveragePool", t)
    total = g.op("ReduceSum", t, ax, keepdims=0 if form == "sum_restored_div" else keepdims)
    if form == "sum_div":
        return g.op("Div", total, g.const(n))
    if form == "sum_mul":
        return g.op("Mul", g.const(np.float32(1.0 / n)), total)
    if form == "sum_restored_div":  # torch dynamo: the sum put back before the division
        return g.op("Div", g.op("Unsqueeze", total, g.const(np.array([-1], np.int64))), g.const(n))
    if form in ("sum_div_shape", "sum_div_wrong_dim"):
        idx = np.array([2 if form == "sum_div_shape" else 1], np.int64)
        count = g.op("Cast", g.op("ReduceProd", g.op("Gather", g.op("Shape", t), g.const(idx), axis=0), keepdims=1), to=FLOAT)
        return g.op("Div", total, count)
    if form == "sum_div_size":
        return g.op("Div", total, g.op("Cast", g.op("Size", t), to=FLOAT))
    if form == "sum_mul_shape":  # multiplies by N: not a mean
        count = g.op("Cast", g.op("Gather", g.op("Shape", t), g.const(np.array([2], np.int64)), axis=0), to=FLOAT)
        return g.op("Mul", total, count)
    raise ValueError(form)


def layernorm(
    mean="reduce_mean", var="two_pass", sqrt="sqrt", normalize="div", center="sub", n: float = H,
    restore=None, shape=("B", "S", H), gamma_folded=False,
) -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    g = G(13)
    x = g.input("x", FLOAT, list(shape))
    keep = 0 if restore else 1
    m = _mean(g, x, mean, n, keepdims=keep)
    mb = m
    if restore == "unsqueeze":
        mb = g.op("Unsqueeze", m, g.const(np.array([-1], np.int64)))
    elif restore == "reshape":
        mb = g.op("Reshape", m, g.const(np.array([0, 0, 1], np.int64)))
    elif restore == "wrong":  # [B, S] -> [B, 1, S]
        mb = g.op("Reshape", m, g.const(np.array([0, 1, -1], np.int64)))
    if center == "sub":
        d = g.op("Sub", x, mb)
    elif center == "add_neg":
        d = g.op("Add", g.op("Neg", mb), x)
    elif center == "sub_neg":  # x − (−mean) = x + mean: not centered
        d = g.op("Sub", x, g.op("Neg", mb))
    else:
        raise ValueError(center)
    if var == "two_pass":
        v = _mean(g, g.op("Mul", d, d), mean, n)
    else:
        ex2 = _mean(g, g.op("Mul", x, x), mean, n, keepdims=keep)
        other = m if var != "one_pass_other" else _mean(g, g.op("Tanh", x), mean, n, keepdims=keep)
        diff = g.op("Sub", ex2, g.op("Mul", other, other))
        if var == "one_pass":
            v = g.op("Max", diff, g.const(0.0))
        elif var == "one_pass_relu":
            v = g.op("Relu", diff)
        else:
            v = diff
        if restore in ("unsqueeze", "wrong"):
            v = g.op("Unsqueeze", v, g.const(np.array([-1], np.int64)))
        elif restore == "reshape":
            v = g.op("Reshape", v, g.const(np.array([0, 0, 1], np.int64)))
    ve = g.op("Add", v, g.const(1e-5))
    root = {"sqrt": lambda: g.op("Sqrt", ve), "pow_half": lambda: g.op("Pow", ve, g.const(0.5)),
            "pow_049": lambda: g.op("Pow", ve, g.const(0.49))}
    gamma = g.const((1 + 0.3 * rng.standard_normal(H)).astype(np.float32))
    if normalize == "div":
        y = g.op("Div", d, root[sqrt]())
    else:
        inv = {
            "reciprocal": lambda: g.op("Reciprocal", root[sqrt]()),
            "div_one": lambda: g.op("Div", g.const(1.0), root[sqrt]()),
            "pow_neg": lambda: g.op("Pow", ve, g.const(-0.5)),
        }[normalize]()
        # γ folded into the inverse first: (x − mean)·(rsqrt·γ), as Flax and Keras write it
        y = g.op("Mul", d, g.op("Mul", inv, gamma)) if gamma_folded else g.op("Mul", d, inv)
    if not gamma_folded:
        y = g.op("Mul", y, gamma)
    y = g.op("Add", y, g.const((0.3 * rng.standard_normal(H)).astype(np.float32)))
    g.output(y, FLOAT)
    return g.model()


def rmsnorm(mean="reduce_mean", normalize="pow_neg", n: float = H, gamma_folded=False) -> onnx.ModelProto:
    rng = np.random.default_rng(2)
    g = G(13)
    x = g.input("x", FLOAT, ["B", "S", H])
    ve = g.op("Add", _mean(g, g.op("Mul", x, x), mean, n), g.const(1e-6))
    if normalize == "pow_neg":
        inv = g.op("Pow", ve, g.const(-0.5))
    elif normalize == "reciprocal_pow_half":
        inv = g.op("Reciprocal", g.op("Pow", ve, g.const(0.5)))
    else:
        raise ValueError(normalize)
    gamma = g.const((1 + 0.3 * rng.standard_normal(H)).astype(np.float32))
    y = g.op("Mul", x, g.op("Mul", inv, gamma)) if gamma_folded else g.op("Mul", g.op("Mul", x, inv), gamma)
    g.output(y, FLOAT)
    return g.model()


def _fuse(model, rules=("layernorm", "rmsnorm")):
    result = fusion.run(model, list(rules))
    onnx.checker.check_model(result.model, full_check=True)
    return result


def _reasons(result) -> str:
    return " | ".join(m.reason for m in result.near_misses)


def _numbers(model, result, tol=1e-4) -> None:
    for feeds in (_x(), _x((1, 3, H), seed=3)):
        assert max_error(model, result.model, feeds) < tol


# -- the identities, fused ------------------------------------------------------------------

POSITIVE = {
    "sum ÷ N": dict(mean="sum_div"),
    "sum × 1/N": dict(mean="sum_mul"),
    "sum ÷ N counted from the shape": dict(mean="sum_div_shape"),
    "sum restored then ÷ N (torch dynamo)": dict(mean="sum_restored_div"),
    "GlobalAveragePool mean (tf2onnx)": dict(mean="gap"),
    "one pass E[x²] − E[x]², Max(·, 0)": dict(var="one_pass"),
    "one pass, Relu": dict(var="one_pass_relu"),
    "one pass, no clamp": dict(var="one_pass_bare"),
    "one pass, sums ÷ N": dict(var="one_pass", mean="sum_div"),
    "one pass, keepdims=0 restored by Unsqueeze": dict(var="one_pass", restore="unsqueeze"),
    "one pass, keepdims=0 restored by Reshape": dict(var="one_pass", restore="reshape"),
    "Pow(v, 0.5) as Sqrt": dict(sqrt="pow_half"),
    "Reciprocal(Pow(v, 0.5))": dict(sqrt="pow_half", normalize="reciprocal"),
    "Div(1, Pow(v, 0.5))": dict(sqrt="pow_half", normalize="div_one"),
    "x + Neg(mean)": dict(center="add_neg"),
    "mean keepdims=0 restored (Unsqueeze)": dict(var="one_pass", restore="unsqueeze", center="add_neg"),
    "γ folded into rsqrt (Flax, Keras)": dict(normalize="pow_neg", gamma_folded=True, var="one_pass"),
    "γ folded into Reciprocal(Sqrt)": dict(normalize="reciprocal", gamma_folded=True),
}


@pytest.mark.parametrize("form", POSITIVE, ids=list(POSITIVE))
def test_layernorm_identity_fuses(form):
    model = layernorm(**POSITIVE[form])
    result = _fuse(model)
    assert result.counts() == {"layernorm": 1}, _reasons(result)
    _numbers(model, result)
    notes = result.fusions[0].notes
    assert bool(notes) == POSITIVE[form].get("var", "two_pass").startswith("one_pass"), notes


@pytest.mark.parametrize("kw", [dict(mean="sum_mul"), dict(mean="sum_div", normalize="reciprocal_pow_half"),
                                dict(gamma_folded=True)], ids=["sum×1/N", "sum÷N,Reciprocal(Pow 0.5)", "γ folded"])
def test_rmsnorm_identity_fuses(kw):
    model = rmsnorm(**kw)
    result = _fuse(model)
    assert result.counts() == {"rmsnorm": 1}, _reasons(result)
    _numbers(model, result)


def test_one_pass_note_says_the_fused_node_is_more_accurate():
    result = _fuse(layernorm(var="one_pass"))
    assert "more accurate" in result.fusions[0].notes[0]
    assert "note: one-pass variance" in str(result)


def test_one_pass_variance_is_more_accurate_fused():
    """Where E[x²] − E[x]² cancels (a large offset), the two-pass fused node is closer to the
    float64 truth than the original."""
    model = layernorm(var="one_pass")
    result = _fuse(model)
    x = (np.random.default_rng(5).standard_normal((2, 3, H)) * 0.01 + 300.0).astype(np.float32)
    from .builders import run

    want = run(model, {"x": x})[0]
    got = run(result.model, {"x": x})[0]
    x64 = x.astype(np.float64)
    d = x64 - x64.mean(-1, keepdims=True)
    g = _consts(model)
    truth = d / np.sqrt((d * d).mean(-1, keepdims=True) + 1e-5) * g[0] + g[1]
    assert np.abs(got - truth).max() < np.abs(want - truth).max() / 10


def _consts(model) -> list[np.ndarray]:
    return [onnx.numpy_helper.to_array(i) for i in model.graph.initializer if i.dims == [H]]


# -- near-identities that are not one ------------------------------------------------------

NEGATIVE = {
    "sum ÷ 31 over 32 elements": (dict(mean="sum_div", n=31), "divides the sum by 31, but the reduced dims [32] hold 32 elements"),
    "sum × 1/31": (dict(mean="sum_mul", n=31), "hold 32 elements"),
    "sum ÷ a count of the wrong dim": (dict(mean="sum_div_wrong_dim"), "counts the dims [1]"),
    "sum ÷ the size of the whole tensor": (dict(mean="sum_div_size"), "divides by the size of the whole tensor"),
    "sum × N": (dict(mean="sum_mul_shape"), "multiplies the sum by N, not by its reciprocal"),
    "E[x²] − E[y]²": (dict(var="one_pass_other"), "which the same part of the pattern matched elsewhere"),
    "Pow(v, 0.49)": (dict(sqrt="pow_049"), "is 0.49, expected 0.5"),
    "restore to [B, 1, S]": (dict(var="one_pass", restore="wrong", shape=("B", H, H)), "not the input's"),
}


@pytest.mark.parametrize("form", NEGATIVE, ids=list(NEGATIVE))
def test_near_identity_is_not_fused(form):
    kw, reason = NEGATIVE[form]
    model = layernorm(**kw)
    result = _fuse(model)
    assert result.counts() == {}, result.fusions
    assert reason in _reasons(result), _reasons(result)
    feeds = _x((2, H, H) if kw.get("shape") else (2, 5, H))
    assert max_error(model, result.model, feeds) == 0.0


def test_one_pass_with_means_of_different_keepdims_is_not_fused():
    """E[x] keeps its dims, E[x²] does not: E[x²] − E[x]² broadcasts to [1, H, H], which a
    Reshape passes off as x's shape.  Not a variance."""
    g = G(13)
    x = g.input("x", FLOAT, [1, H, H])
    m = g.op("ReduceMean", x, axes=[-1], keepdims=1)
    ex2 = g.op("ReduceMean", g.op("Mul", x, x), axes=[-1], keepdims=0)
    v = g.op("Max", g.op("Sub", ex2, g.op("Mul", m, m)), g.const(0.0))
    v = g.op("Reshape", v, g.const(np.array([0, 0, -1], np.int64)))
    y = g.op("Div", g.op("Sub", x, m), g.op("Sqrt", g.op("Add", v, g.const(1e-5))))
    g.output(y, FLOAT)
    model = g.model()
    result = _fuse(model)
    assert result.counts() == {}, result.fusions
    assert "differ in keepdims" in _reasons(result), _reasons(result)
    assert max_error(model, result.model, _x((1, H, H))) == 0.0


def test_rms_never_takes_a_centered_input_written_as_add_neg():
    """x + Neg(mean) is centered: an RMS chain over it is a LayerNorm that did not fuse."""
    g = G(13)
    x = g.input("x", FLOAT, ["B", "S", H])
    d = g.op("Add", x, g.op("Neg", g.op("Div", g.op("ReduceSum", x, g.const(np.array([-1], np.int64))), g.const(float(H)))))
    inv = g.op("Pow", g.op("Add", g.op("ReduceMean", g.op("Mul", d, d), axes=[-1]), g.const(1e-5)), g.const(-0.5))
    y = g.op("Mul", d, inv)
    g.output(y, FLOAT)
    result = _fuse(g.model(), ["rmsnorm"])
    assert result.counts() == {}
    assert "centered by a ReduceMean" in _reasons(result), _reasons(result)


def test_x_minus_neg_mean_is_no_layernorm():
    """x − Neg(mean) = x + mean: no LayerNorm; the chain is an RMSNorm of x + mean, and fuses as one."""
    model = layernorm(center="sub_neg")
    result = _fuse(model)
    assert result.counts() == {"rmsnorm": 1}, _reasons(result)
    _numbers(model, result)


def test_rms_after_a_tf_layernorm_with_neg_shift_still_fuses():
    """x·s + Neg(mean·s) is not x + Neg(mean): the RMSNorm reading it is no centered input.
    (Found by the fuzzer while the mean test took Mul(ReduceMean, s) for a mean.)"""
    from .fuzz import properties
    from .fuzz.algebra import AlgebraNorm
    from .fuzz.pieces import TFNorm
    from .fuzz.spec import ModelSpec, build

    spec = ModelSpec(opset=13, shape=("B", 3, 8), steps=(
        ("none", TFNorm(square="mul", inverse="reciprocal", shift="neg", eps_value=1e-5)),
        ("none", AlgebraNorm(kind="rms", mean="sum_div", variance="two_pass", root="pow_half", inverse="div")),
    ))
    case = build(spec)
    assert case.expected == {"layernorm": 1, "rmsnorm": 1}
    properties.check(case)


def _stable_layernorm(row_axis: int = -1, eps_castlike: bool = False, double: bool = False, opset: int = 15) -> onnx.ModelProto:
    """jax2onnx's exact centering: Where(min == max and mean finite, 0, x − mean); ``double``:
    the variance in float64, as jax2onnx computes it."""
    g = G(opset)  # (CastLike: 15)
    x = g.input("x", FLOAT, ["B", "S", H])
    m = g.op("ReduceMean", x, axes=[-1], keepdims=1)
    d = g.op("Sub", x, m)
    lo = g.op("ReduceMin", x, axes=[row_axis], keepdims=1)
    hi = g.op("ReduceMax", x, axes=[row_axis], keepdims=1)
    zero = g.const(0.0)
    cond = g.op("And", g.op("Equal", lo, hi), g.op("Equal", g.op("Sub", m, m), zero))
    sd = g.op("Where", cond, zero, d)
    if double:
        v = g.op("Cast", g.op("ReduceMean", g.op("Cast", g.op("Mul", sd, sd), to=onnx.TensorProto.DOUBLE), axes=[-1]), to=FLOAT)
    else:
        v = g.op("ReduceMean", g.op("Mul", sd, sd), axes=[-1])
    eps = g.op("CastLike", g.const(np.float64(1e-5), dtype=np.float64), x) if eps_castlike else g.const(1e-5)
    y = g.op("Div", sd, g.op("Sqrt", g.op("Add", v, eps)))
    g.output(g.op("Add", g.op("Mul", y, g.const(np.full(H, 1.5, np.float32))), g.const(np.full(H, 0.1, np.float32))), FLOAT, ["B", "S", H])
    return g.model()


def test_exact_centering_fuses_with_a_note():
    model = _stable_layernorm()
    result = _fuse(model)
    assert result.counts() == {"layernorm": 1}, _reasons(result)
    assert any("constant rows" in n for n in result.fusions[0].notes)
    _numbers(model, result)


def test_exact_centering_with_a_float64_variance_fuses_on_target_onnx():
    """jax2onnx's form exactly: the plugin target has no fp64 and says so; target onnx fuses."""
    model = _stable_layernorm(double=True, opset=17)
    plugin = _fuse(model)
    assert plugin.counts() == {} and "computes in DOUBLE" in _reasons(plugin), _reasons(plugin)
    result = fusion.run(model, ["layernorm"], target="onnx")
    assert result.counts() == {"layernorm": 1}, _reasons(result)
    _numbers(model, result)


def test_exact_centering_over_other_rows_is_not_fused():
    """min == max over axis −2: the Where zeroes x − mean where a column is constant."""
    model = _stable_layernorm(row_axis=-2)
    result = _fuse(model)
    assert "layernorm" not in result.counts(), result.fusions
    assert "reduces axes [-2]" in _reasons(result) or "reduces [-2]" in _reasons(result), _reasons(result)
    _numbers(model, result, tol=0.0 + 1e-12)


def test_castlike_epsilon_fuses():
    model = _stable_layernorm(eps_castlike=True)
    result = _fuse(model)
    assert result.counts() == {"layernorm": 1}, _reasons(result)
    assert result.fusions[0].nodes[-1]["attributes"]["epsilon"] == pytest.approx(1e-5)
    _numbers(model, result)


def test_global_average_pool_over_more_axes_than_the_variance_is_not_fused():
    """Rank 4: GlobalAveragePool averages axes 2 and 3; the variance only axis −1."""
    g = G(13)
    x = g.input("x", FLOAT, ["B", 3, 4, H])
    d = g.op("Sub", x, g.op("GlobalAveragePool", x))
    v = g.op("ReduceMean", g.op("Mul", d, d), axes=[-1])
    g.output(g.op("Div", d, g.op("Sqrt", g.op("Add", v, g.const(1e-5)))), FLOAT)
    model = g.model()
    result = _fuse(model)
    assert result.counts() == {}, result.fusions
    assert "mean reduces axes [-2, -1] but variance reduces [-1]" in _reasons(result), _reasons(result)
    assert max_error(model, result.model, _x((2, 3, 4, H))) == 0.0


def test_global_average_pool_over_all_spatial_axes_fuses():
    g = G(13)
    x = g.input("x", FLOAT, ["B", 3, 4, H])
    m = g.op("GlobalAveragePool", x)
    d = g.op("Sub", x, m)
    v = g.op("GlobalAveragePool", g.op("Mul", d, d))
    g.output(g.op("Div", d, g.op("Sqrt", g.op("Add", v, g.const(1e-5)))), FLOAT)
    model = g.model()
    result = _fuse(model)
    assert result.counts() == {"layernorm": 1}, _reasons(result)
    for feeds in (_x((2, 3, 4, H)), _x((1, 3, 4, H), seed=4)):
        assert max_error(model, result.model, feeds) < 1e-4


def test_mean_over_every_axis_as_sum_over_size():
    g = G(13)
    x = g.input("x", FLOAT, [4, H])  # (every axis normalized: their sizes must be static)
    ax = g.const(np.array([0, 1], np.int64))
    size = g.op("Cast", g.op("Size", x), to=FLOAT)
    m = g.op("Div", g.op("ReduceSum", x, ax, keepdims=1), size)
    d = g.op("Sub", x, m)
    v = g.op("Div", g.op("ReduceSum", g.op("Mul", d, d), ax, keepdims=1), size)
    g.output(g.op("Div", d, g.op("Sqrt", g.op("Add", v, g.const(1e-5)))), FLOAT)
    model = g.model()
    result = _fuse(model)
    assert result.counts() == {"layernorm": 1}, _reasons(result)
    for feeds in (_x((4, H)), _x((4, H), seed=4)):
        assert max_error(model, result.model, feeds) < 1e-4


def test_sum_divided_by_a_vector_of_dims_is_not_a_mean():
    """Div(ReduceSum over [S, W], Cast(Gather(Shape(x), [1, 2]))) divides by the vector [S, W]
    elementwise (broadcast against [B, S, W]): without a ReduceProd the dims are no count."""
    g = G(13)
    x = g.input("x", FLOAT, ["B", 4, 2])
    ax = g.const(np.array([-2, -1], np.int64))
    dims = g.op("Cast", g.op("Gather", g.op("Shape", x), g.const(np.array([1, 2], np.int64)), axis=0), to=FLOAT)
    m = g.op("Div", g.op("ReduceSum", x, ax, keepdims=1), dims)
    d = g.op("Sub", x, m)
    v = g.op("ReduceMean", g.op("Mul", d, d), axes=[-2, -1])
    g.output(g.op("Div", d, g.op("Sqrt", g.op("Add", v, g.const(1e-5)))), FLOAT, ["B", 4, 2])
    model = g.model()
    result = _fuse(model)
    assert "layernorm" not in result.counts(), result.fusions
    assert "neither a constant nor a count of the input's dims" in _reasons(result), _reasons(result)
    assert max_error(model, result.model, _x((2, 4, 2))) == 0.0


def test_html_report_shows_the_note(tmp_path):
    from fusion.report import html as html_report

    model = layernorm(var="one_pass")
    src, out = tmp_path / "m.onnx", tmp_path / "fused.onnx"
    onnx.save(model, src)
    result = fusion.run(str(src), ["layernorm"])
    onnx.save(result.model, out)
    html = html_report.render_report(src, out, result, verify=False)
    assert "Note: one-pass variance" in html


def _jnp_var_layernorm(ddof: float = 0.0, guard: float | None = None) -> onnx.ModelProto:
    """jnp.var under jax2onnx: Where(N − ddof > 0, ReduceSumSquare(x − mean) ÷ (N − ddof), NaN),
    N − ddof computed from constants at run time; the sum put back by Unsqueeze before ÷."""
    g = G(13)
    x = g.input("x", FLOAT, ["B", "S", H])
    d = g.op("Sub", x, g.op("ReduceMean", x, axes=[-1], keepdims=1))
    n = g.op("Sub", g.const(float(H)), g.op("Cast", g.const(np.int64(ddof), dtype=np.int64), to=FLOAT))
    ss = g.op("Unsqueeze", g.op("ReduceSumSquare", d, axes=[-1], keepdims=0), g.const(np.array([-1], np.int64)))
    v = g.op("Div", ss, n)
    cond = g.op("Greater", n if guard is None else g.const(guard), g.const(0.0))
    v = g.op("Where", cond, v, g.op("Expand", g.const(np.float32(np.nan)), g.op("Shape", v)))
    y = g.op("Div", d, g.op("Sqrt", g.op("Add", v, g.const(1e-6))))
    g.output(g.op("Mul", y, g.const(np.full(H, 0.8, np.float32))), FLOAT, ["B", "S", H])
    return g.model()


def test_jnp_var_fuses():
    model = _jnp_var_layernorm()
    result = _fuse(model)
    assert result.counts() == {"layernorm": 1}, _reasons(result)
    _numbers(model, result)


def test_jnp_var_with_ddof_1_is_not_a_layernorm():
    """÷ (N − 1): the unbiased variance."""
    model = _jnp_var_layernorm(ddof=1)
    result = _fuse(model)
    assert "layernorm" not in result.counts(), result.fusions
    assert "divides the sum by 31, but the reduced dims [32] hold 32 elements" in _reasons(result), _reasons(result)
    assert max_error(model, result.model, _x()) == 0.0


def test_jnp_var_guard_that_can_pick_nan_is_not_fused():
    model = _jnp_var_layernorm(guard=0.0)
    result = _fuse(model)
    assert "layernorm" not in result.counts(), result.fusions
    assert "which is not a positive constant" in _reasons(result), _reasons(result)


def _dense_then_layernorm(last: int) -> onnx.ModelProto:
    """tf2onnx's Dense: Reshape(MatMul(Reshape(x, [-1, K]), W), Cast(Concat(Shape(x)[:2], [last])))
    then a LayerNorm with γ of H: γ's size is proven equal to the input's only if ``last`` is H."""
    g = G(13)
    x = g.input("x", FLOAT, ["B", "S", H])
    flat = g.op("Reshape", x, g.const(np.array([-1, H], np.int64)))
    mm = g.op("MatMul", flat, g.const(np.random.default_rng(0).standard_normal((H, H)).astype(np.float32) * 0.2))
    lead = g.op("Slice", g.op("Shape", x), g.const(np.array([0], np.int64)), g.const(np.array([2], np.int64)))
    shape = g.op("Cast", g.op("Concat", g.op("Cast", lead, to=onnx.TensorProto.INT32),
                              g.const(np.array([last], np.int32), dtype=np.int32), axis=0), to=onnx.TensorProto.INT64)
    h = g.op("Reshape", mm, shape)
    d = g.op("Sub", h, g.op("ReduceMean", h, axes=[-1]))
    v = g.op("ReduceMean", g.op("Mul", d, d), axes=[-1])
    y = g.op("Div", d, g.op("Sqrt", g.op("Add", v, g.const(1e-5))))
    g.output(g.op("Mul", y, g.const(np.full(H, 1.5, np.float32))), FLOAT, ["B", "S", H])
    return g.model()


def test_layernorm_after_a_tf2onnx_dense_fuses():
    model = _dense_then_layernorm(H)
    result = _fuse(model)
    assert result.counts() == {"layernorm": 1}, _reasons(result)
    _numbers(model, result)


def test_layernorm_after_a_reshape_copying_its_last_dim_needs_its_size():
    """A 0 in the target shape copies the input's dim: not a proof of the size (γ could broadcast)."""
    model = _dense_then_layernorm(0)
    result = _fuse(model)
    assert "layernorm" not in result.counts(), result.fusions
    assert "cannot prove they are equal" in _reasons(result), _reasons(result)


def _conv_tokens_then_layernorm(k: int, unsqueeze: bool = True) -> onnx.ModelProto:
    """diffusers' Transformer2DModel as TorchScript exports it: proj_in (a 1x1 Conv to C=8),
    then Reshape(Transpose(h, [0,2,3,1]), Concat(B, H*W, Shape(h)[k])) and a LayerNorm with γ of
    C: the last dim is h's size along axis k, C only where k is the channel axis (1 or -3)."""
    g = G(13)
    x = g.input("x", FLOAT, ["B", 4, "H", "W"])
    rng = np.random.default_rng(0)
    h = g.op("Conv", x, g.const(rng.standard_normal((8, 4, 1, 1)).astype(np.float32)),
             g.const(rng.standard_normal(8).astype(np.float32)), kernel_shape=[1, 1])

    def size(t: str, axis: int) -> str:
        if unsqueeze:  # a scalar index, made one element
            return g.op("Unsqueeze", g.op("Gather", g.op("Shape", t), g.const(np.array(axis, np.int64)), axis=0),
                        g.const(np.array([0], np.int64)))
        return g.op("Gather", g.op("Shape", t), g.const(np.array([axis], np.int64)), axis=0)

    hw = g.op("Mul", size(x, 2), size(x, 3))
    tokens = g.op("Reshape", g.op("Transpose", h, perm=[0, 2, 3, 1]), g.op("Concat", size(x, 0), hw, size(h, k), axis=0))
    d = g.op("Sub", tokens, g.op("ReduceMean", tokens, axes=[-1]))
    v = g.op("ReduceMean", g.op("Mul", d, d), axes=[-1])
    y = g.op("Div", d, g.op("Sqrt", g.op("Add", v, g.const(1e-5))))
    y = g.op("Add", g.op("Mul", y, g.const(rng.uniform(0.5, 1.5, 8).astype(np.float32))),
             g.const(rng.standard_normal(8).astype(np.float32)))
    g.output(y, FLOAT, ["B", "N", "C"])
    return g.model(infer=False)  # (as exported: no shapes on the intermediates)


@pytest.mark.parametrize(("k", "unsqueeze"), [(1, True), (-3, True), (1, False)])
def test_layernorm_after_a_reshape_to_a_convs_channels_fuses(k, unsqueeze):
    model = _conv_tokens_then_layernorm(k, unsqueeze)
    result = _fuse(model)
    assert result.counts() == {"layernorm": 1}, _reasons(result)
    for shape in ((2, 4, 3, 5), (1, 4, 1, 1)):
        feeds = {"x": np.random.default_rng(1).standard_normal(shape).astype(np.float32)}
        assert max_error(model, result.model, feeds) < 1e-4


def test_layernorm_after_a_reshape_to_a_convs_spatial_dim_needs_its_size():
    """Shape(h)[2] is a height, not the channels: nothing forces it to be γ's 8."""
    model = _conv_tokens_then_layernorm(2)
    result = _fuse(model)
    assert "layernorm" not in result.counts(), result.fusions
    assert "cannot prove they are equal" in _reasons(result), _reasons(result)


@pytest.mark.parametrize("offset", ["neg_mean_times_s", "neg_of_mean_times_s"])
def test_keras_offset_forms_fuse(offset):
    """Keras 3: x·s + ((−mean)·s + β); also x·s + (−(mean·s) + β); s = rsqrt(var + eps)·γ."""
    g = G(13)
    x = g.input("x", FLOAT, ["B", "S", H])
    m = g.op("GlobalAveragePool", x)
    d = g.op("Sub", x, m)
    s = g.op("Mul", g.op("Reciprocal", g.op("Sqrt", g.op("Add", g.op("GlobalAveragePool", g.op("Mul", d, d)), g.const(1e-3)))),
             g.const(np.full(H, 1.2, np.float32)))
    neg = g.op("Mul", g.op("Neg", m), s) if offset == "neg_mean_times_s" else g.op("Neg", g.op("Mul", m, s))
    y = g.op("Add", g.op("Mul", x, s), g.op("Add", neg, g.const(np.full(H, 0.3, np.float32))))
    g.output(y, FLOAT, ["B", "S", H])
    model = g.model()
    result = _fuse(model)
    assert result.counts() == {"layernorm": 1}, _reasons(result)
    _numbers(model, result)


def test_jnp_var_after_an_unannotated_layer_fuses():
    """The input's shape comes from inference (found by the fuzzer: a ReduceSumSquare variance
    did not ask for it, so N could not be checked)."""
    g = G(13)
    x0 = g.input("x", FLOAT, ["B", "S", H])
    x = g.op("Tanh", x0)  # no value_info: its shape is known only by inference
    d = g.op("Sub", x, g.op("ReduceMean", x, axes=[-1], keepdims=1))
    v = g.op("Div", g.op("ReduceSumSquare", d, axes=[-1], keepdims=1), g.const(float(H)))
    y = g.op("Div", d, g.op("Sqrt", g.op("Add", v, g.const(1e-6))))
    g.output(y, FLOAT, ["B", "S", H])
    model = g.model(infer=False)
    result = _fuse(model)
    assert result.counts() == {"layernorm": 1}, _reasons(result)
    _numbers(model, result)


@pytest.mark.parametrize("where", ["clamp", "n"])
def test_a_one_element_constant_of_higher_rank_is_no_identity(where):
    """Max(v, 0) with a 0 of shape [1, 1, 1, 1], or ÷ N of that shape, make the output rank 4."""
    g = G(13)
    x = g.input("x", FLOAT, ["B", "S", H])
    n = g.const(np.full((1, 1, 1, 1), float(H), np.float32)) if where == "n" else g.const(float(H))
    zero = g.const(np.zeros((1, 1, 1, 1), np.float32)) if where == "clamp" else g.const(0.0)
    m = g.op("ReduceMean", x, axes=[-1])
    ex2 = g.op("Div", g.op("ReduceSum", g.op("Mul", x, x), g.const(np.array([-1], np.int64))), n)
    v = g.op("Max", g.op("Sub", ex2, g.op("Mul", m, m)), zero)
    y = g.op("Div", g.op("Sub", x, m), g.op("Sqrt", g.op("Add", v, g.const(1e-5))))
    g.output(y, FLOAT, [1, "B", "S", H])
    model = g.model()
    result = _fuse(model)
    assert result.counts() == {}, result.fusions
    assert "grow the output" in _reasons(result), _reasons(result)
    assert max_error(model, result.model, _x()) == 0.0


def test_rank_through_reshape_to_a_shape_vector_reads_the_memo(monkeypatch):
    """rank_of(Reshape(x, Shape(y))) asks for Shape(y)'s length, which is y's rank: that lookup
    used a memo the helper never received (a NameError, not an unknown rank)."""
    from onnx import TensorProto, helper

    from fusion.ir.graph import ModelGraph
    from fusion.patterns import _algebra

    nodes = [helper.make_node("Shape", ["y"], ["sy"]), helper.make_node("Reshape", ["x", "sy"], ["r"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 12]),
                                           helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3, 4])],
                              [helper.make_tensor_value_info("r", TensorProto.FLOAT, None)])  # fmt: skip
    g = ModelGraph.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    known = {"y": [2, 3, 4], "x": [2, 12]}
    monkeypatch.setattr(g, "shape", lambda t, infer=True: known.get(t.name))  # only the inputs' shapes
    r = next(n for n in g.scopes[0].ir.nodes if n.op == "Reshape").outputs[0]
    assert _algebra.rank_of(g, r) == 3
