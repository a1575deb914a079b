"""Issue 16, defects 3 and 4: what counts as a constant, and the shapes of constants.

3. An initializer also listed as a graph input (IR >= 4) can be fed another value; onnxruntime
   honours that.  A rule may pass such a value through to the fused node, never bake it; the
   opt-in ``assume_constant_initializers=True`` (``--freeze-initializers``) treats them as
   constants, and the fused model then stops listing them as inputs.
4. A one-element constant of higher rank than the output grows the original's output; a
   normalized dim that is dynamic where γ has size 16 broadcasts in the original when fed 1.

Every case runs the original and the fused model on onnxruntime (optimizations off) at two
input shapes, feeding the overridden initializers where the case is about them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import onnx
import pytest
from onnx import helper

import fusion

from .builders import FLOAT, NORM_FC_CLI, NORM_FC_PASSES, G, run

D, N, K = 16, 12, 8
OPT_IN = "assume_constant_initializers=True"


# -- model builders ------------------------------------------------------------------------


def norm_model(
    kind: str = "layer",
    normalize: str = "div",
    opset: int = 13,
    x_shape=("B", "S", D),
    shapes: dict | None = None,
    bias_before: bool = False,
) -> onnx.ModelProto:
    """A LayerNorm / RMSNorm with named initializers: eps, two, one, minus_half, gamma, beta, axes."""
    shapes = shapes or {}
    rng = np.random.default_rng(0)

    def c(name: str, value, default_shape=()):
        shape = shapes.get(name, default_shape)
        return g.const(np.full(shape, value, np.float32) if np.isscalar(value) else value.reshape(shape), name=name)

    def mean(t: str) -> str:
        if opset >= 18:
            return g.op("ReduceMean", t, g.const(np.array([-1], np.int64), name="axes" if "axes" not in names else None))
        return g.op("ReduceMean", t, axes=[-1])

    g = G(opset=opset)
    names: set[str] = set()
    x = g.input("x", FLOAT, x_shape)
    if bias_before:  # the Add of a [16] bias makes the last dim 16 whatever x's is
        x = g.op("Add", x, g.const(rng.standard_normal(D).astype(np.float32), name="pre_bias"))
    d = g.op("Sub", x, mean(x)) if kind == "layer" else x
    names.add("axes")
    var = mean(g.op("Pow", d, c("two", 2.0)))
    ve = g.op("Add", var, c("eps", 1e-5))
    if normalize == "div":
        n = g.op("Div", d, g.op("Sqrt", ve))
    elif normalize == "div_one":
        n = g.op("Mul", d, g.op("Div", c("one", 1.0), g.op("Sqrt", ve)))
    else:
        n = g.op("Mul", d, g.op("Pow", ve, c("minus_half", -0.5)))
    n = g.op("Mul", n, c("gamma", rng.standard_normal(D).astype(np.float32), (D,)))
    if kind == "layer":
        n = g.op("Add", n, c("beta", rng.standard_normal(D).astype(np.float32), (D,)))
    g.nodes[-1].output[0] = "y"
    g.output("y", FLOAT, None)
    return g.model()


def fc_model(
    form: str = "matmul",
    act: str = "none",
    beta: float = 1.0,
    shapes: dict | None = None,
    x_shape=("B", "S", K),
) -> onnx.ModelProto:
    """MatMul(x, W) + b or Gemm(x, W, C), then an erf or tanh GELU written out, with named initializers."""
    shapes = shapes or {}
    rng = np.random.default_rng(1)

    def c(name: str, value):
        return g.const(np.full(shapes.get(name, ()), value, np.float32), name=name)

    g = G(opset=13)
    if form == "gemm":
        x = g.input("x", FLOAT, ["M", K])
        w = g.const((rng.standard_normal((K, N)) / math.sqrt(K)).astype(np.float32), name="W")
        bias = rng.standard_normal(N).astype(np.float32).reshape(shapes.get("C", (N,)))
        y = g.op("Gemm", x, w, g.const(bias, name="C"), beta=beta)
    else:
        x = g.input("x", FLOAT, x_shape)
        w = g.const((rng.standard_normal((K, N)) / math.sqrt(K)).astype(np.float32), name="W")
        bias = rng.standard_normal(N).astype(np.float32).reshape(shapes.get("b", (N,)))
        y = g.op("Add", g.op("MatMul", x, w), g.const(bias, name="b"))
    if act == "erf":
        erf = g.op("Erf", g.op("Div", y, c("sqrt2", 1.4142135)))
        y = g.op("Mul", g.op("Mul", y, g.op("Add", erf, c("one", 1.0))), c("half", 0.5))
    elif act == "tanh":
        inner = g.op("Add", y, g.op("Mul", g.op("Pow", y, c("three", 3.0)), c("cubic", 0.044715)))
        t = g.op("Tanh", g.op("Mul", inner, c("tanh_scale", 0.7978845608)))
        y = g.op("Mul", g.op("Mul", y, c("half", 0.5)), g.op("Add", t, c("one", 1.0)))
    g.nodes[-1].output[0] = "y"
    g.output("y", FLOAT, None)
    return g.model()


def expose(model: onnx.ModelProto, names, pinned: bool = True, ir_version: int | None = None) -> onnx.ModelProto:
    """List the named initializers as graph inputs too (as older exporters do), with their exact
    shape (``pinned``) or none declared."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    inits = {t.name: t for t in out.graph.initializer}
    for name in names:
        t = inits[name]
        dims = list(t.dims) if pinned else [f"{name}_{i}" for i in range(len(t.dims))]
        out.graph.input.append(helper.make_tensor_value_info(name, t.data_type, dims))
    if ir_version is not None:
        out.ir_version = ir_version
    return out


# -- running -------------------------------------------------------------------------------


def _x(shape, seed: int) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * 3 + 1).astype(np.float32)


def same_outputs(original: onnx.ModelProto, fused: onnx.ModelProto, feeds: list[dict], tol: float = 1e-4) -> None:
    """Original and fused agree on every feed: same shapes, same values (NaN where NaN)."""
    for f in feeds:
        want, got = run(original, f), run(fused, f)
        for a, b in zip(want, got):
            assert a.shape == b.shape, (a.shape, b.shape)
            np.testing.assert_allclose(b, a, rtol=tol, atol=tol, equal_nan=True)


def x_feeds(x_shapes, extra: dict | None = None) -> list[dict]:
    return [{"x": _x(s, i), **(extra or {})} for i, s in enumerate(x_shapes)]


NORM_SHAPES = [(2, 3, D), (1, 5, D)]
FC_SHAPES = [(2, 3, K), (1, 5, K)]
GEMM_SHAPES = [(3, K), (7, K)]


def reasons(result) -> list[str]:
    return [m.reason for m in result.near_misses]


def _activations(result) -> set[str]:
    return {n["attributes"].get("activation", "none") for f in result.fusions for n in f.nodes if n["op_type"] == "FusedFC"}


def has_no_initializer_inputs(model: onnx.ModelProto) -> bool:
    inits = {t.name for t in model.graph.initializer}
    return not any(i.name in inits for i in model.graph.input)


# -- defect 3: overridable initializers whose value a rule would bake --------------------------


@dataclass
class Baked:
    """A model whose fusion would bake the exposed initializer ``name``; fed ``fed`` it differs."""

    build: callable
    name: str
    fed: np.ndarray
    passes: tuple = ("layernorm", "rmsnorm")
    target: str = "plugin"
    x_shapes: list = field(default_factory=lambda: NORM_SHAPES)
    fuses_anyway: str | None = None  # a rule that still fuses part of it (the FC without its GELU)


BAKED = {
    "ln_eps": Baked(lambda: norm_model(), "eps", np.array(0.5, np.float32)),
    "rms_eps": Baked(lambda: norm_model("rms"), "eps", np.array(0.5, np.float32)),
    "ln_pow_exponent": Baked(lambda: norm_model(), "two", np.array(4.0, np.float32)),
    "rms_pow_exponent": Baked(lambda: norm_model("rms"), "two", np.array(4.0, np.float32)),
    "ln_div_one": Baked(lambda: norm_model(normalize="div_one"), "one", np.array(2.0, np.float32)),
    "rms_pow_minus_half": Baked(lambda: norm_model("rms", normalize="pow_half"), "minus_half", np.array(-1.0, np.float32)),
    "ln_axes_opset18": Baked(lambda: norm_model(opset=18), "axes", np.array([-2], np.int64)),
    "gelu_erf_sqrt2": Baked(
        lambda: fc_model(act="erf"), "sqrt2", np.array(2.0, np.float32), ("gemm",), x_shapes=FC_SHAPES, fuses_anyway="gemm"
    ),
    "gelu_erf_half": Baked(
        lambda: fc_model(act="erf"), "half", np.array(0.25, np.float32), ("gemm",), x_shapes=FC_SHAPES, fuses_anyway="gemm"
    ),
    "gelu_tanh_cubic": Baked(
        lambda: fc_model(act="tanh"), "cubic", np.array(0.5, np.float32), ("gemm",), x_shapes=FC_SHAPES, fuses_anyway="gemm"
    ),
    "fc_w_target_trt": Baked(
        lambda: fc_model(), "W", np.full((K, N), 0.125, np.float32), ("gemm",), target="trt", x_shapes=FC_SHAPES
    ),
}


@pytest.mark.parametrize("case", sorted(BAKED))
def test_overridable_value_is_not_baked(case):
    """Fed another value, the fused model computes what the original does (it did not, before:
    the value was baked into the fused node)."""
    c = BAKED[case]
    model = expose(c.build(), [c.name])
    result = fusion.run(model, list(c.passes), target=c.target)
    fused = result.model
    same_outputs(model, fused, x_feeds(c.x_shapes, {c.name: c.fed}))
    same_outputs(model, fused, x_feeds(c.x_shapes))


@pytest.mark.parametrize("case", sorted(BAKED))
def test_overridable_value_near_miss_says_why(case):
    c = BAKED[case]
    result = fusion.inspect(expose(c.build(), [c.name]), list(c.passes), target=c.target)
    assert set(result.counts()) <= ({c.fuses_anyway} if c.fuses_anyway else set()), result.counts()
    why = [r for r in reasons(result) if repr(c.name) in r]
    assert why, reasons(result)
    assert any(
        "initializer that is also a graph input" in r and OPT_IN in r and "--freeze-initializers" in r for r in why
    ), why


@pytest.mark.parametrize("case", sorted(BAKED))
def test_opt_in_fuses_and_freezes(case):
    """With the opt-in the chain fuses as before, and the fused model no longer lists the
    initializers as inputs, so no caller can feed a value the fusion assumed."""
    c = BAKED[case]
    model = expose(c.build(), [c.name])
    result = fusion.run(model, list(c.passes), target=c.target, assume_constant_initializers=True)
    assert sum(result.counts().values()) == 1, (result.counts(), reasons(result))
    if c.fuses_anyway:  # the GELU is fused in this time
        assert _activations(result) != {"none"}, result.fusions
    assert has_no_initializer_inputs(result.model)
    same_outputs(model, result.model, x_feeds(c.x_shapes))
    # The original still honours a fed value; the frozen fused model refuses the feed.
    with pytest.raises(Exception, match="[Ii]nvalid input name"):
        run(result.model, x_feeds(c.x_shapes, {c.name: c.fed})[0])


# -- defect 3: overridable initializers that the fused node can take as inputs ------------------


@dataclass
class Passed:
    build: callable
    names: tuple
    fed: dict
    passes: tuple
    op_type: str
    target: str = "plugin"
    x_shapes: list = field(default_factory=lambda: NORM_SHAPES)


rng = np.random.default_rng(7)
PASSED = {
    "ln_gamma_beta_d": Passed(
        lambda: norm_model(), ("gamma", "beta"),
        {"gamma": rng.standard_normal(D).astype(np.float32), "beta": rng.standard_normal(D).astype(np.float32)},
        ("layernorm",), "FusedLayerNorm",
    ),
    "ln_gamma_11d": Passed(  # γ [1, 1, D] is reshaped by a node now, not baked
        lambda: norm_model(shapes={"gamma": (1, 1, D)}), ("gamma",),
        {"gamma": rng.standard_normal((1, 1, D)).astype(np.float32)}, ("layernorm",), "FusedLayerNorm",
    ),
    "ln_gamma_beta_onnx": Passed(
        lambda: norm_model(opset=17), ("gamma", "beta"),
        {"gamma": rng.standard_normal(D).astype(np.float32), "beta": rng.standard_normal(D).astype(np.float32)},
        ("layernorm",), "LayerNormalization", target="onnx",
    ),
    "rms_gamma": Passed(
        lambda: norm_model("rms"), ("gamma",), {"gamma": rng.standard_normal(D).astype(np.float32)},
        ("rmsnorm",), "FusedRMSNorm",
    ),
    "fc_w_and_bias": Passed(
        lambda: fc_model(), ("W", "b"),
        {"W": rng.standard_normal((K, N)).astype(np.float32), "b": rng.standard_normal(N).astype(np.float32)},
        ("gemm",), "FusedFC", x_shapes=FC_SHAPES,
    ),
    "fc_bias_1n": Passed(  # a [1, N] bias is flattened by a node now, not baked
        lambda: fc_model(shapes={"b": (1, N)}), ("b",), {"b": rng.standard_normal((1, N)).astype(np.float32)},
        ("gemm",), "FusedFC", x_shapes=FC_SHAPES,
    ),
    "gemm_c_beta": Passed(  # beta * C is a Mul node now, not baked
        lambda: fc_model("gemm", beta=0.5), ("C",), {"C": rng.standard_normal(N).astype(np.float32)},
        ("gemm",), "FusedFC", x_shapes=GEMM_SHAPES,
    ),
    "gemm_c_1n_trt": Passed(
        lambda: fc_model("gemm", beta=2.0, shapes={"C": (1, N)}), ("C",),
        {"C": rng.standard_normal((1, N)).astype(np.float32)}, ("gemm",), "CustomFCPluginDynamic",
        target="trt", x_shapes=GEMM_SHAPES,
    ),
}


@pytest.mark.parametrize("case", sorted(PASSED))
def test_overridable_input_passes_through(case):
    """γ, β, W and biases go to the fused node as inputs: any fed value still gives the original's result."""
    c = PASSED[case]
    model = expose(c.build(), list(c.names))
    result = fusion.run(model, list(c.passes), target=c.target)
    assert sum(result.counts().values()) == 1, (result.counts(), reasons(result))
    assert any(n.op_type == c.op_type for n in result.model.graph.node)
    same_outputs(model, result.model, x_feeds(c.x_shapes, c.fed))
    same_outputs(model, result.model, x_feeds(c.x_shapes))


def test_gamma_without_pinned_shape_is_not_fused_in():
    """A graph input with dynamic dims lets a caller feed γ of another shape: the norm fuses
    without γ (and β after it), which stay as they were."""
    model = expose(norm_model(), ["gamma"], pinned=False)
    result = fusion.run(model, ["layernorm"])
    assert result.counts() == {"layernorm": 1}
    fused = next(n for n in result.model.graph.node if n.op_type == "FusedLayerNorm")
    assert "gamma" not in fused.input and "beta" not in fused.input
    assert any("does not pin its shape" in r and "'gamma'" in r for r in reasons(result)), reasons(result)
    same_outputs(model, result.model, x_feeds(NORM_SHAPES, {"gamma": np.ones(1, np.float32)}))


def test_below_ir4_initializers_are_constants():
    """Below IR 4 every initializer had to be a graph input and onnxruntime refuses to feed them:
    they are constants.  The function body lifts the IR version, so the inputs go."""
    model = expose(norm_model(), ["eps", "gamma", "beta", "two"], ir_version=3)
    result = fusion.run(model, ["layernorm"])
    assert result.counts() == {"layernorm": 1}, reasons(result)
    assert result.model.ir_version >= 8
    assert has_no_initializer_inputs(result.model)


def test_frozen_model_keeps_initializers_still_read(tmp_path):
    """Freezing unlists every initializer input; only those nothing reads any more are dropped."""
    model = expose(norm_model(), ["eps", "gamma", "beta"])
    src, dst = tmp_path / "m.onnx", tmp_path / "f.onnx"
    onnx.save(model, str(src))
    result = fusion.fuse_file(src, dst, NORM_FC_PASSES, assume_constant_initializers=True)
    out = onnx.load(str(dst))
    assert result.counts() == {"layernorm": 1}
    assert [i.name for i in out.graph.input] == ["x"]
    names = {t.name for t in out.graph.initializer}
    assert {"gamma", "beta"} <= names and "eps" not in names
    same_outputs(model, out, x_feeds(NORM_SHAPES))


def test_same_keyword_on_every_entry_point():
    model = expose(norm_model(), ["eps"])
    for kw in ({}, {"assume_constant_initializers": True}):
        n = 1 if kw else 0
        assert len(fusion.inspect(model, NORM_FC_PASSES, **kw).fusions) == n
        assert len(fusion.run(model, NORM_FC_PASSES, **kw).fusions) == n
        assert (fusion.fuse(model, NORM_FC_PASSES, **kw) is model) == (not kw)
        assert (fusion.fuse_layernorm(model, **kw) is model) == (not kw)
    gemm = expose(fc_model(), ["W"])
    assert fusion.run(gemm, ["gemm"], target="trt").counts() == {}
    fused = fusion.fuse_gemm(gemm, target="trt", assume_constant_initializers=True)
    assert any(n.op_type == "CustomFCPluginDynamic" for n in fused.graph.node)


def test_cli_freeze_initializers(tmp_path):
    from fusion.cli.commands import main

    src, dst = tmp_path / "m.onnx", tmp_path / "f.onnx"
    onnx.save(expose(norm_model(), ["eps"]), str(src))
    assert main(["fuse", str(src), "-o", str(dst), *NORM_FC_CLI]) == 0
    assert not any(n.op_type == "FusedLayerNorm" for n in onnx.load(str(dst)).graph.node)
    assert main(["fuse", str(src), "-o", str(dst), *NORM_FC_CLI, "--freeze-initializers"]) == 0
    out = onnx.load(str(dst))
    assert [n.op_type for n in out.graph.node] == ["FusedLayerNorm"]
    assert has_no_initializer_inputs(out)


# -- defect 4: rank of one-element constants ---------------------------------------------------

R4 = (1, 1, 1, 1)
RANKED = {
    "ln_eps": (lambda s: norm_model(shapes={"eps": s}), "eps", ("layernorm", "rmsnorm"), NORM_SHAPES),
    "rms_eps": (lambda s: norm_model("rms", shapes={"eps": s}), "eps", ("layernorm", "rmsnorm"), NORM_SHAPES),
    "ln_pow_exponent": (lambda s: norm_model(shapes={"two": s}), "two", ("layernorm", "rmsnorm"), NORM_SHAPES),
    "rms_pow_exponent": (lambda s: norm_model("rms", shapes={"two": s}), "two", ("layernorm", "rmsnorm"), NORM_SHAPES),
    "ln_div_one": (lambda s: norm_model(normalize="div_one", shapes={"one": s}), "one", ("layernorm", "rmsnorm"), NORM_SHAPES),
    "rms_div_one": (
        lambda s: norm_model("rms", normalize="div_one", shapes={"one": s}), "one", ("layernorm", "rmsnorm"), NORM_SHAPES
    ),
    "ln_pow_minus_half": (
        lambda s: norm_model(normalize="pow_half", shapes={"minus_half": s}), "minus_half", ("layernorm", "rmsnorm"), NORM_SHAPES
    ),
    "rms_pow_minus_half": (
        lambda s: norm_model("rms", normalize="pow_half", shapes={"minus_half": s}), "minus_half", ("layernorm", "rmsnorm"),
        NORM_SHAPES,
    ),
    "gelu_erf_sqrt2": (lambda s: fc_model(act="erf", shapes={"sqrt2": s}), "sqrt2", ("gemm",), FC_SHAPES),
    "gelu_erf_half": (lambda s: fc_model(act="erf", shapes={"half": s}), "half", ("gemm",), FC_SHAPES),
    "gelu_tanh_scale": (lambda s: fc_model(act="tanh", shapes={"tanh_scale": s}), "tanh_scale", ("gemm",), FC_SHAPES),
    "gelu_tanh_one": (lambda s: fc_model(act="tanh", shapes={"one": s}), "one", ("gemm",), FC_SHAPES),
}


@pytest.mark.parametrize("case", sorted(RANKED))
def test_higher_rank_constant_keeps_output_rank(case):
    build, name, passes, shapes = RANKED[case]
    model = build(R4)
    result = fusion.run(model, list(passes))
    same_outputs(model, result.model, x_feeds(shapes))


@pytest.mark.parametrize("case", sorted(RANKED))
def test_higher_rank_constant_near_miss_says_why(case):
    build, name, passes, _ = RANKED[case]
    result = fusion.inspect(build(R4), list(passes))
    why = [r for r in reasons(result) if f"constant {name!r} has shape [1, 1, 1, 1], of rank 4, more than the output's 3" in r]
    assert why, reasons(result)


@pytest.mark.parametrize("case", sorted(RANKED))
def test_constant_of_output_rank_still_fuses(case):
    build, name, passes, shapes = RANKED[case]
    model = build((1, 1, 1))
    result = fusion.run(model, list(passes))
    assert sum(result.counts().values()) == 1, (result.counts(), reasons(result))
    if passes == ("gemm",):
        assert _activations(result) != {"none"}, result.fusions
    same_outputs(model, result.model, x_feeds(shapes))


# -- defect 4: a dynamic normalized dim against γ's static size --------------------------------


def test_dynamic_normalized_dim_is_refused():
    """x [B, S, D] with γ [16]: fed D = 1 the original broadcasts to 16; a fused node cannot."""
    model = norm_model(x_shape=("B", "S", "D"))
    result = fusion.run(model, ["layernorm"])
    assert not result.fusions
    assert any("has 16 along normalized axis -1, where the input's size is 'D'" in r for r in reasons(result)), reasons(result)
    same_outputs(model, result.model, x_feeds([(2, 3, D), (2, 3, 1)]))


def test_dynamic_dim_proven_by_a_broadcasting_bias_fuses():
    """x = h + bias[16]: whatever h's last dim, x's is 16, so the norm fuses; fed 1, both agree."""
    model = norm_model(x_shape=("B", "S", "D"), bias_before=True)
    result = fusion.run(model, ["layernorm"])
    assert result.counts() == {"layernorm": 1}, reasons(result)
    same_outputs(model, result.model, x_feeds([(2, 3, D), (2, 3, 1)]))


def test_dynamic_dim_rmsnorm_is_refused():
    model = norm_model("rms", x_shape=("B", "S", "D"))
    result = fusion.run(model, ["rmsnorm"])
    assert not result.fusions
    assert any("where the input's size is 'D'" in r for r in reasons(result)), reasons(result)
    same_outputs(model, result.model, x_feeds([(2, 3, D), (2, 3, 1)]))


def _function_model(x_shape, calls: int = 2) -> onnx.ModelProto:
    """A LayerNorm inside a model-local function, called ``calls`` times in a row."""
    rng = np.random.default_rng(3)
    body = G(opset=13)

    def k(value) -> str:
        return body.constant_node(np.asarray(value, np.float32))

    mean = body.op("ReduceMean", "fx", axes=[-1])
    d = body.op("Sub", "fx", mean)
    var = body.op("ReduceMean", body.op("Pow", d, k(2.0)), axes=[-1])
    n = body.op("Div", d, body.op("Sqrt", body.op("Add", var, k(1e-5))))
    n = body.op("Add", body.op("Mul", n, k(rng.standard_normal(D))), k(rng.standard_normal(D)))
    fn = helper.make_function(
        "local", "Norm", ["fx"], [n], body.nodes, [helper.make_opsetid("", 13)]
    )
    g = G(opset=13)
    y = g.input("x", FLOAT, x_shape)
    for _ in range(calls):
        y = g.op("Norm", y, domain="local")
    g.nodes[-1].output[0] = "y"
    g.output("y", FLOAT, None)
    m = helper.make_model(g.graph(), opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("local", 1)],
                          ir_version=8, functions=[fn])
    return m


def test_function_input_proven_at_every_call():
    """Inside a function x has no shape; every call passes a last dim of 16 (the second call
    passes the first's output, whose β makes it 16): the norm fuses."""
    model = _function_model(("B", "S", D))
    result = fusion.run(model, ["layernorm"])
    assert result.counts() == {"layernorm": 1}, reasons(result)
    same_outputs(model, result.model, x_feeds(NORM_SHAPES))


def test_function_input_dynamic_at_a_call_is_refused():
    model = _function_model(("B", "S", "D"), calls=1)
    result = fusion.run(model, ["layernorm"])
    assert not result.fusions
    assert any("has 16 along normalized axis -1, where the input's size is unknown" in r for r in reasons(result)), reasons(result)
    same_outputs(model, result.model, x_feeds([(2, 3, D), (2, 3, 1)]))


def test_overridable_norm_input_is_passed_through():
    """x itself an initializer listed as an input (a norm of a weight): the node reads it as an input."""
    model = norm_model()
    model.graph.initializer.append(onnx.numpy_helper.from_array(_x((2, 3, D), 9), "x"))
    result = fusion.run(model, ["layernorm"])
    assert result.counts() == {"layernorm": 1}, reasons(result)
    same_outputs(model, result.model, x_feeds(NORM_SHAPES))
    same_outputs(model, result.model, [{}])
