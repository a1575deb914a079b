"""The FC rule (Gemm / MatMul + Add + activation): every claimed form fuses to the spec with
the same numbers on every target; what must not fuse does not, and says why."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import fusion
from fusion.rewrite import specs
from fusion.compare.verify import verify  # fusion.verify is the submodule once that is imported

from .builders import FLOAT, FLOAT16, NORM_FC_PASSES, NP, G, count, max_error, run

DOUBLE = TensorProto.DOUBLE
TOL = {FLOAT: 1e-4, FLOAT16: 2e-2, DOUBLE: 1e-6}
SQRT2 = math.sqrt(2.0)


@dataclass(frozen=True)
class FC:
    """One fully-connected layer as some exporter writes it."""

    form: str = "matmul_add"  # "gemm" | "matmul_add" | "matmul"
    rank: int = 3
    k: int = 8
    n: int = 12
    trans_a: int = 0  # Gemm only
    trans_b: int = 1  # Gemm only
    alpha: float = 1.0
    beta: float = 1.0
    bias: str = "n"  # "none" | "scalar" | "n" | "1n" | "11n" | "rows"
    bias_first: bool = False  # Add(b, MatMul) instead of Add(MatMul, b)
    w_transpose: bool = False  # W stored [N, K] behind Transpose(perm=[1, 0])
    act: str = "none"
    dtype: int = FLOAT
    opset: int = 13
    const_node: bool = False  # W from a Constant node instead of an initializer
    sqrt2: float = 1.4142135  # the erf form's divisor, as the exporter rounded it
    seed: int = 0

    def with_(self, **kw) -> FC:
        return replace(self, **kw)

    @property
    def transpose_weight(self) -> int:
        return (self.trans_b if self.form == "gemm" else 0) ^ int(self.w_transpose)


def _const(g: G, value: np.ndarray, as_node: bool) -> str:
    return g.constant_node(value) if as_node else g.const(value)


def _activation(g: G, y: str, act: str, np_t, sqrt2: float = 1.4142135) -> str:
    def c(v: float) -> str:
        return g.const(np.array(v, np_t))

    def erf_one(scale: str = "div") -> str:
        arg = g.op("Div", y, c(sqrt2)) if scale == "div" else g.op("Mul", y, c(0.70710678))
        return g.op("Add", g.op("Erf", arg), c(1.0))

    def tanh_one(cube: str) -> str:
        if cube == "pow":
            y3 = g.op("Pow", y, c(3.0))
        else:
            y3 = g.op("Mul", g.op("Mul", y, y), y)
        inner = g.op("Add", y, g.op("Mul", c(0.044715), y3))
        return g.op("Add", c(1.0), g.op("Tanh", g.op("Mul", c(0.7978845608), inner)))

    if act == "none":
        return y
    if act == "relu":
        return g.op("Relu", y)
    if act == "gelu_op":
        return g.op("Gelu", y)
    if act == "gelu_op_tanh":
        return g.op("Gelu", y, approximate="tanh")
    if act == "erf_torch":  # torch.onnx legacy: x * (1 + erf(x / sqrt2)) * 0.5
        return g.op("Mul", g.op("Mul", y, erf_one()), c(0.5))
    if act == "erf_half_first":  # 0.5 * x * (1 + erf(x / sqrt2))
        return g.op("Mul", g.op("Mul", c(0.5), y), erf_one())
    if act == "erf_inner_half":  # x * (0.5 * (1 + erf(x * 1/sqrt2)))
        return g.op("Mul", y, g.op("Mul", c(0.5), erf_one("mul")))
    if act == "erf_div2":  # x * (1 + erf(x / sqrt2)) / 2
        return g.op("Div", g.op("Mul", y, erf_one()), c(2.0))
    if act == "tanh_pow":  # 0.5 * x * (1 + tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))
        return g.op("Mul", g.op("Mul", y, c(0.5)), tanh_one("pow"))
    if act == "tanh_cube":  # torch.onnx legacy gelu(approximate='tanh'): 0.5 * (x * (1 + tanh(...)))
        return g.op("Mul", c(0.5), g.op("Mul", y, tanh_one("mul")))
    if act == "erf_wrong":  # Div by 2 instead of sqrt2: not a GELU
        return g.op("Mul", g.op("Mul", y, g.op("Add", g.op("Erf", g.op("Div", y, c(2.0))), c(1.0))), c(0.5))
    raise ValueError(act)


def _x_shape(fc: FC) -> list:
    if fc.rank == 2:
        return [fc.k, "M"] if fc.trans_a else ["M", fc.k]
    return ["B", "S", fc.k][-fc.rank :] if fc.rank <= 3 else ["A"] * (fc.rank - 2) + ["S", fc.k]


def _fc(g: G, fc: FC, x: str, rng) -> str:
    """The FC nodes from ``x``; returns the output name."""
    np_t = NP[fc.dtype]
    w = (rng.standard_normal((fc.k, fc.n)) / math.sqrt(fc.k)).astype(np_t)
    stored_nk = fc.transpose_weight == 1
    stored = np.ascontiguousarray(w.T) if stored_nk else w
    wt = _const(g, stored, fc.const_node)
    b_vals = rng.standard_normal(fc.n).astype(np_t)
    bias = {
        "none": None,
        "scalar": np.array(0.25, np_t),
        "n": b_vals,
        "1n": b_vals.reshape(1, fc.n),
        "11n": b_vals.reshape(1, 1, fc.n),
        "rows": rng.standard_normal((4, fc.n)).astype(np_t),
    }[fc.bias]
    if fc.form == "gemm":
        b_in = wt
        if fc.w_transpose:  # Gemm reading a Transpose of the stored weight
            b_in = g.op("Transpose", wt, perm=[1, 0])
        inputs = [x, b_in] + ([g.const(bias)] if bias is not None else [])
        attrs = {"transA": fc.trans_a, "transB": fc.trans_b}
        if fc.alpha != 1.0:
            attrs["alpha"] = fc.alpha
        if fc.beta != 1.0:
            attrs["beta"] = fc.beta
        y = g.op("Gemm", *inputs, **attrs)
    else:
        w_in = g.op("Transpose", wt, perm=[1, 0]) if fc.w_transpose else wt
        y = g.op("MatMul", x, w_in)
        if fc.form == "matmul_add":
            b = g.const(bias)
            y = g.op("Add", b, y) if fc.bias_first else g.op("Add", y, b)
    return _activation(g, y, fc.act, np_t, fc.sqrt2)


def build(fc: FC) -> onnx.ModelProto:
    rng = np.random.default_rng(fc.seed)
    g = G(fc.opset)
    x = g.input("x", fc.dtype, _x_shape(fc))
    g.output(_fc(g, fc, x, rng), fc.dtype)
    return g.model()


def feeds(fc: FC, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    dims = {"M": 5, "B": 2, "S": 3, "A": 2}
    shape = [dims.get(d, d) for d in _x_shape(fc)]
    if fc.bias == "rows":
        shape[-2] = 4
    return {"x": rng.standard_normal(shape).astype(NP[fc.dtype])}


def _nodes(model: onnx.ModelProto, op_type: str) -> list[onnx.NodeProto]:
    return [n for n in model.graph.node if n.op_type == op_type]


def _attrs_to_spec(node: onnx.NodeProto, spec: specs.PluginSpec) -> dict:
    """The node's attributes, checked to be exactly the spec's fields with the spec's types."""
    assert node.domain == spec.domain
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert attrs.pop("plugin_version") == spec.version.encode()
    assert attrs.pop("plugin_namespace") == spec.namespace.encode()
    assert set(attrs) == {f.name for f in spec.fields}
    for a in node.attribute:
        if a.name in attrs:
            assert a.type == spec.field(a.name).type.onnx_type, a.name
    spec.check_arity(len(node.input), len(node.output))
    return {k: v.decode() if isinstance(v, bytes) else v for k, v in attrs.items()}


def _reasons(result) -> list[str]:
    return [m.reason for m in result.near_misses]


# -- plugin target: every form ----------------------------------------------------------

BASE = FC()
GEMM = FC(form="gemm", rank=2)
FORMS: dict[str, tuple[FC, str]] = {
    # name: (model, expected activation field)
    "matmul_add_3d": (BASE, "none"),
    "matmul_add_2d": (BASE.with_(rank=2), "none"),
    "matmul_add_4d": (BASE.with_(rank=4), "none"),
    "bias_first": (BASE.with_(bias_first=True), "none"),
    "bias_1n": (BASE.with_(bias="1n"), "none"),
    "bias_11n": (BASE.with_(bias="11n"), "none"),
    "bias_scalar": (BASE.with_(bias="scalar"), "none"),
    "w_transposed": (BASE.with_(w_transpose=True), "none"),
    "w_constant_node": (BASE.with_(const_node=True), "none"),
    "matmul_no_bias": (BASE.with_(form="matmul", bias="none"), "none"),
    "gemm_transB": (GEMM, "none"),
    "gemm_conv1d_transB0": (GEMM.with_(trans_b=0), "none"),
    "gemm_transA": (GEMM.with_(trans_a=1), "none"),
    "gemm_transA_transB0": (GEMM.with_(trans_a=1, trans_b=0), "none"),
    "gemm_alpha_beta": (GEMM.with_(alpha=0.5, beta=2.0), "none"),
    "gemm_beta0": (GEMM.with_(beta=0.0), "none"),
    "gemm_no_c": (GEMM.with_(bias="none"), "none"),
    "gemm_c_scalar": (GEMM.with_(bias="scalar"), "none"),
    "gemm_c_1n": (GEMM.with_(bias="1n"), "none"),
    "gemm_w_transpose_node": (GEMM.with_(trans_b=0, w_transpose=True), "none"),
    "relu": (BASE.with_(act="relu"), "relu"),
    "gemm_relu": (GEMM.with_(act="relu"), "relu"),
    "no_bias_relu": (BASE.with_(form="matmul", bias="none", act="relu"), "relu"),
    "erf_torch": (BASE.with_(act="erf_torch"), "gelu_erf"),
    "erf_half_first": (BASE.with_(act="erf_half_first"), "gelu_erf"),
    "erf_inner_half_mul_inv_sqrt2": (BASE.with_(act="erf_inner_half"), "gelu_erf"),
    "erf_div2": (BASE.with_(act="erf_div2"), "gelu_erf"),
    "tanh_pow": (BASE.with_(act="tanh_pow"), "gelu_tanh"),
    "tanh_cube": (BASE.with_(act="tanh_cube"), "gelu_tanh"),
    "gemm_erf": (GEMM.with_(act="erf_torch"), "gelu_erf"),
    "gelu_op_opset20": (BASE.with_(act="gelu_op", opset=20), "gelu_erf"),
    "gelu_op_tanh_opset20": (BASE.with_(act="gelu_op_tanh", opset=20), "gelu_tanh"),
    "fp16": (BASE.with_(dtype=FLOAT16), "none"),
    "fp16_erf": (BASE.with_(dtype=FLOAT16, act="erf_torch"), "gelu_erf"),
    "fp16_tanh": (BASE.with_(dtype=FLOAT16, act="tanh_pow"), "gelu_tanh"),
    "fp16_gemm_relu": (GEMM.with_(dtype=FLOAT16, act="relu"), "relu"),
    "fp64": (BASE.with_(dtype=DOUBLE), None),  # None: fuses on trt/onnx only; see negatives
    "opset11": (BASE.with_(opset=11), "none"),
    "opset18": (BASE.with_(opset=18, act="relu"), "relu"),
}
PLUGIN_FORMS = {k: v for k, v in FORMS.items() if v[1] is not None}


@pytest.mark.parametrize("name", sorted(PLUGIN_FORMS))
def test_form_fuses_to_fused_fc_and_matches(name):
    fc, act = PLUGIN_FORMS[name]
    model = build(fc)
    result = fusion.run(model, ["gemm"])
    assert result.counts() == {"gemm": 1}, (result.counts(), _reasons(result))
    fused = result.model
    assert [n.op_type for n in fused.graph.node if n.op_type != "Constant"] == (["Transpose"] if fc.trans_a else []) + [
        "FusedFC"
    ]
    node = _nodes(fused, "FusedFC")[0]
    attrs = _attrs_to_spec(node, specs.FUSED_FC)
    alpha = fc.alpha if fc.form == "gemm" else 1.0
    assert attrs == {"out_features": fc.n, "transpose_weight": fc.transpose_weight, "alpha": pytest.approx(alpha), "activation": act}
    # W is the model's own weight tensor, untouched (never copied, transposed or read).
    w_src = {i.name for i in model.graph.initializer} | {o for n in model.graph.node if n.op_type == "Constant" for o in n.output}
    assert node.input[1] in w_src
    if fc.bias == "n" and fc.beta == 1.0:
        assert node.input[2] in {i.name for i in model.graph.initializer}  # a [N] bias goes in as it is
    assert [f.name for f in fused.functions] == ["FusedFC"]
    assert max_error(model, fused, feeds(fc)) < TOL[fc.dtype]


def test_bias_vector_is_n_and_scaled_by_beta():
    fc = GEMM.with_(beta=2.0, bias="1n")
    model = build(fc)
    fused = fusion.fuse_gemm(model)
    node = _nodes(fused, "FusedFC")[0]
    b = numpy_helper.to_array(next(i for i in fused.graph.initializer if i.name == node.input[2]))
    c = numpy_helper.to_array(next(i for i in model.graph.initializer if i.name == _nodes(model, "Gemm")[0].input[2]))
    assert b.shape == (fc.n,)
    np.testing.assert_allclose(b, 2.0 * c.reshape(-1), rtol=1e-6)


def test_missing_bias_becomes_zeros():
    fused = fusion.fuse_gemm(build(BASE.with_(form="matmul", bias="none")))
    node = _nodes(fused, "FusedFC")[0]
    b = numpy_helper.to_array(next(i for i in fused.graph.initializer if i.name == node.input[2]))
    assert b.shape == (BASE.n,) and not b.any()


def test_plugin_target_never_reads_the_weights(monkeypatch):
    import fusion.ir.graph

    read: list[str] = []
    real = fusion.ir.graph.read_tensor

    def spy(p, base_dir):
        read.append(p.name)
        return real(p, base_dir)

    monkeypatch.setattr(fusion.ir.graph, "read_tensor", spy)
    fc = BASE.with_(k=64, n=96, w_transpose=True, act="erf_torch")
    model = build(fc)
    weights = {i.name for i in model.graph.initializer if len(i.dims) == 2}
    result = fusion.run(model, ["gemm"])
    assert result.counts() == {"gemm": 1}
    assert not weights & set(read), read


# -- targets trt and onnx ---------------------------------------------------------------

TRT_FORMS = {
    "matmul_add_3d": BASE,
    "matmul_add_2d_relu": BASE.with_(rank=2, act="relu"),
    "w_transposed_erf": BASE.with_(w_transpose=True, act="erf_torch"),
    "gemm_alpha_beta_transA": GEMM.with_(trans_a=1, alpha=0.5, beta=2.0),
    "gemm_conv1d": GEMM.with_(trans_b=0, act="tanh_pow"),
    "no_bias": BASE.with_(form="matmul", bias="none"),
    "fp16_tanh": BASE.with_(dtype=FLOAT16, act="tanh_cube"),
    "gelu_op_opset20": BASE.with_(act="gelu_op", opset=20),
    "opset11_relu": BASE.with_(opset=11, act="relu"),
}


@pytest.mark.parametrize("name", sorted(TRT_FORMS))
def test_trt_target_custom_fc_plugin(name):
    fc = TRT_FORMS[name]
    model = build(fc)
    result = fusion.run(model, ["gemm"], target="trt")
    assert result.counts() == {"gemm": 1}, _reasons(result)
    fused = result.model
    node = _nodes(fused, "CustomFCPluginDynamic")[0]
    attrs = _attrs_to_spec(node, specs.TRT_FC)
    assert attrs["out_dims"] == fc.n
    assert attrs["type_id"] == (1 if fc.dtype == FLOAT16 else 0)
    # W is laid out [K, out_dims] (Y = X @ W, no transpose), alpha folded in.
    w = attrs["W"]
    assert list(w.dims) == [fc.k, fc.n] and w.data_type == FLOAT  # the creator's declared kFLOAT32
    stored = numpy_helper.to_array(next(i for i in model.graph.initializer if len(i.dims) == 2))
    expected = (stored.T if fc.transpose_weight else stored).astype(np.float64) * fc.alpha
    np.testing.assert_allclose(numpy_helper.to_array(w).astype(np.float64), expected, rtol=1e-3 if fc.dtype == FLOAT16 else 1e-6)
    # The plugin sees rank 5 [rows, 1, K, 1, 1]; there is no bias or activation inside it.
    assert count(fused, "Reshape") == 2
    gelu_adds = {"erf": 1, "tanh": 2}.get(fc.act.split("_")[0], 0) if fc.opset < 20 else 0
    assert count(fused, "Add") == (0 if fc.bias == "none" else 1) + gelu_adds
    assert [f.name for f in fused.functions] == ["CustomFCPluginDynamic"]
    assert max_error(model, fused, feeds(fc)) < TOL[fc.dtype]


def test_trt_target_shapes_in_function_body():
    """The body reproduces the plugin's I/O contract: [S, B, K, 1, 1] -> [S, B, N, 1, 1]."""
    fused = fusion.fuse_gemm(build(BASE), target="trt")
    body = fused.functions[0]
    assert (body.domain, body.name) == (specs.PLUGIN_DOMAIN, "CustomFCPluginDynamic")
    w = numpy_helper.to_array(_attrs_to_spec(_nodes(fused, "CustomFCPluginDynamic")[0], specs.TRT_FC)["W"])
    g = G(13)
    x = g.input("x", FLOAT, [3, 2, BASE.k, 1, 1])
    g.nodes.append(
        helper.make_node(
            "CustomFCPluginDynamic", [x], ["y"], domain=specs.PLUGIN_DOMAIN,
            **specs.TRT_FC.attributes({"out_dims": BASE.n, "type_id": 0, "W": numpy_helper.from_array(w, "W")}),
        )
    )  # fmt: skip
    g.output("y", FLOAT, [3, 2, BASE.n, 1, 1])
    m = g.model(infer=False, functions=[body])
    m.opset_import.append(helper.make_opsetid(specs.PLUGIN_DOMAIN, 1))
    xv = np.random.default_rng(0).standard_normal((3, 2, BASE.k, 1, 1)).astype(np.float32)
    (y,) = run(m, {"x": xv})
    assert y.shape == (3, 2, BASE.n, 1, 1)
    np.testing.assert_allclose(y[..., 0, 0], xv[..., 0, 0] @ w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("rank", [2, 3, 4])
def test_onnx_target_matmul_add_becomes_gemm(rank):
    fc = BASE.with_(rank=rank, w_transpose=True, bias="1n")
    model = build(fc)
    result = fusion.run(model, ["gemm"], target="onnx")
    assert result.counts() == {"gemm": 1}, _reasons(result)
    fused = result.model
    gemm = _nodes(fused, "Gemm")
    assert len(gemm) == 1 and count(fused, "MatMul") == 0 and count(fused, "Add") == 0
    assert {a.name: helper.get_attribute_value(a) for a in gemm[0].attribute} == {"transB": 1}
    assert count(fused, "Reshape") == (0 if rank == 2 else 2)
    assert not fused.functions
    assert max_error(model, fused, feeds(fc)) < 1e-5


def test_onnx_target_leaves_gemm_and_activations_alone():
    r = fusion.run(build(GEMM.with_(act="relu")), ["gemm"], target="onnx")
    assert not r.modified and any("already a standard Gemm" in s for s in _reasons(r))
    model = build(BASE.with_(act="erf_torch"))
    r = fusion.run(model, ["gemm"], target="onnx")
    assert r.counts() == {"gemm": 1}
    assert count(r.model, "Gemm") == 1 and count(r.model, "Erf") == 1
    assert any("activation stays a separate node" in s for s in _reasons(r))
    assert max_error(model, r.model, feeds(BASE)) < 1e-5
    r = fusion.run(build(BASE.with_(form="matmul", bias="none")), ["gemm"], target="onnx")
    assert not r.modified and any("without bias is already standard" in s for s in _reasons(r))


# -- what must not fuse -----------------------------------------------------------------


def _attention(opset: int = 13) -> onnx.ModelProto:
    g = G(opset)
    q = g.input("q", FLOAT, ["B", 2, "S", 4])
    k = g.input("k", FLOAT, ["B", 2, "S", 4])
    v = g.input("v", FLOAT, ["B", 2, "S", 4])
    scores = g.op("MatMul", q, g.op("Transpose", k, perm=[0, 1, 3, 2]))
    probs = g.op("Softmax", g.op("Div", scores, g.const(2.0)), axis=-1)
    g.output(g.op("MatMul", probs, v), FLOAT)
    return g.model()


def test_attention_scores_never_fuse():
    result = fusion.inspect(_attention(), ["gemm"])
    assert not result.fusions
    reasons = _reasons(result)
    assert len(reasons) == 2 and all("both operands are computed" in r for r in reasons), reasons


def _with_extra_use(model: onnx.ModelProto, op_type: str) -> onnx.ModelProto:
    """Make ``op_type``'s output also feed a Relu that is a second graph output."""
    node = _nodes(model, op_type)[0]
    relu = helper.make_node("Relu", [node.output[0]], ["other"], name="other_use")
    model.graph.node.append(relu)
    model.graph.output.append(helper.make_tensor_value_info("other", FLOAT, None))
    return model


def test_matmul_read_elsewhere_does_not_fuse():
    model = _with_extra_use(build(BASE), "MatMul")
    result = fusion.run(model, ["gemm"])
    assert not result.fusions and not result.modified
    assert any("also read by Relu 'other_use'" in r for r in _reasons(result)), _reasons(result)


def test_activation_input_read_elsewhere_fuses_without_activation():
    model = _with_extra_use(build(BASE.with_(act="erf_torch")), "Add")
    add = _nodes(model, "Add")[0]
    model.graph.node.remove(next(n for n in model.graph.node if n.name == "other_use"))
    model.graph.node.append(helper.make_node("Sigmoid", [add.output[0]], ["other"], name="other_use"))
    result = fusion.run(model, ["gemm"])
    assert result.counts() == {"gemm": 1}
    node = _nodes(result.model, "FusedFC")[0]
    assert _attrs_to_spec(node, specs.FUSED_FC)["activation"] == "none"
    assert count(result.model, "Erf") == 1
    assert max_error(model, result.model, feeds(BASE)) < 1e-4


NEGATIVES: dict[str, tuple[FC, str, str]] = {
    # name: (model, target, reason fragment); nothing of the FC fuses
    "w_rank3": (BASE.with_(form="matmul", bias="none"), "plugin", "not a matrix"),
    "fp64_plugin": (BASE.with_(dtype=DOUBLE), "plugin", "not DOUBLE"),
    "fp64_trt": (BASE.with_(dtype=DOUBLE), "trt", "fp32/fp16"),
    "gemm_c_rows": (GEMM.with_(bias="rows"), "plugin", "varies along rows"),
    "vector_input": (BASE.with_(rank=1), "plugin", "has rank 1"),
}


def _w_rank3(model: onnx.ModelProto) -> onnx.ModelProto:
    w = next(i for i in model.graph.initializer if len(i.dims) == 2)
    w.dims[:] = [1] + list(w.dims)
    del model.graph.value_info[:]
    return onnx.shape_inference.infer_shapes(model)


@pytest.mark.parametrize("name", sorted(NEGATIVES))
def test_does_not_fuse_and_says_why(name):
    fc, target, reason = NEGATIVES[name]
    model = build(fc)
    if name == "w_rank3":
        model = _w_rank3(model)
    result = fusion.inspect(model, ["gemm"], target=target)
    assert not result.fusions
    assert any(reason in r for r in _reasons(result)), _reasons(result)


def test_computed_weight_does_not_fuse():
    g = G(13)
    x = g.input("x", FLOAT, ["B", 8])
    w = g.input("w", FLOAT, [8, 4])
    g.output(g.op("Add", g.op("MatMul", x, w), g.const(np.ones(4, np.float32))), FLOAT)
    result = fusion.inspect(g.model(), ["gemm"])
    assert not result.fusions
    assert any("both operands are computed" in r for r in _reasons(result)), _reasons(result)
    g = G(13)
    x = g.input("x", FLOAT, ["B", 8])
    c = g.input("c", FLOAT, [4])
    g.output(g.op("Gemm", x, g.const(np.ones((8, 4), np.float32)), c), FLOAT)
    result = fusion.inspect(g.model(), ["gemm"])
    assert not result.fusions and any("computed, not a constant bias" in r for r in _reasons(result))


def test_bias_varying_along_rows_stays_an_add():
    fc = FC(rank=2, bias="rows")
    model = build(fc)
    result = fusion.run(model, ["gemm"])
    assert result.counts() == {"gemm": 1}  # the MatMul alone; the Add keeps its [M, N] operand
    assert count(result.model, "Add") == 1
    assert any("varies along rows" in r for r in _reasons(result))
    assert max_error(model, result.model, {"x": np.ones((4, fc.k), np.float32)}) < 1e-4


def test_wrong_gelu_constant_leaves_the_activation():
    model = build(BASE.with_(act="erf_wrong"))
    result = fusion.run(model, ["gemm"])
    assert result.counts() == {"gemm": 1}
    assert _attrs_to_spec(_nodes(result.model, "FusedFC")[0], specs.FUSED_FC)["activation"] == "none"
    assert any("not sqrt(2)" in r for r in _reasons(result)), _reasons(result)
    assert max_error(model, result.model, feeds(BASE)) < 1e-4


@pytest.mark.parametrize(
    ("sqrt2", "dtype", "fuses"),
    [
        (1.4142135, FLOAT, True),  # torch.onnx
        (1.41421356, FLOAT, True),
        (SQRT2, FLOAT, True),
        (1.4142, FLOAT, True),  # 1.4e-5 relative
        (1.414, FLOAT, False),  # 1.5e-4 relative: a different function
        (1.4142135, FLOAT16, True),  # stored as 1.4140625
        (1.41, FLOAT16, False),
    ],
)
def test_gelu_constants_compared_with_exporter_tolerance(sqrt2, dtype, fuses):
    fc = BASE.with_(act="erf_torch", dtype=dtype, sqrt2=sqrt2)
    result = fusion.run(build(fc), ["gemm"])
    node = _nodes(result.model, "FusedFC")[0]
    assert _attrs_to_spec(node, specs.FUSED_FC)["activation"] == ("gelu_erf" if fuses else "none")
    if not fuses:
        assert any("not sqrt(2)" in r for r in _reasons(result)), _reasons(result)


def test_opset11_keeps_activation_outside_fused_fc():
    model = build(BASE.with_(opset=11, act="relu"))
    result = fusion.run(model, ["gemm"])
    assert result.counts() == {"gemm": 1}
    assert count(result.model, "Relu") == 1
    assert any("opset 11" in r and "activation" in r for r in _reasons(result))
    assert max_error(model, result.model, feeds(BASE)) < 1e-4


# -- scopes, mixed models, entry points -------------------------------------------------


def _mlp(opset: int, dtype: int = FLOAT) -> tuple[onnx.ModelProto, dict]:
    """Four FCs in a row that differ in layout and activation: one FusedFC function serves all."""
    rng = np.random.default_rng(3)
    g = G(opset)
    x = g.input("x", dtype, ["M", 8])
    layers = [
        FC(form="gemm", rank=2, k=8, n=16, trans_b=1, act="relu", dtype=dtype, opset=opset),
        FC(rank=2, k=16, n=16, act="erf_torch", dtype=dtype, opset=opset),
        FC(form="gemm", rank=2, k=16, n=8, trans_b=0, act="tanh_pow", dtype=dtype, opset=opset),
        FC(rank=2, k=8, n=4, w_transpose=True, dtype=dtype, opset=opset),
    ]
    y = x
    for fc in layers:
        y = _fc(g, fc, y, rng)
    g.output(y, dtype)
    return g.model(), {"x": np.random.default_rng(4).standard_normal((6, 8)).astype(NP[dtype])}


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_mixed_fcs_share_one_function(opset):
    model, xs = _mlp(opset)
    result = fusion.run(model, ["gemm"])
    assert result.counts() == {"gemm": 4}, _reasons(result)
    assert not result.warnings
    nodes = _nodes(result.model, "FusedFC")
    got = [(_attrs_to_spec(n, specs.FUSED_FC)["transpose_weight"], _attrs_to_spec(n, specs.FUSED_FC)["activation"]) for n in nodes]
    acts = ["relu", "gelu_erf", "gelu_tanh", "none"] if opset >= 12 else ["none"] * 4
    assert got == list(zip([1, 0, 0, 1], acts))
    assert [f.name for f in result.model.functions] == ["FusedFC"]
    assert max_error(model, result.model, xs) < 1e-4


def test_fp16_mixed_model_runs():
    model, xs = _mlp(17, FLOAT16)
    fused = fusion.fuse_gemm(model)
    assert count(fused, "FusedFC") == 4
    assert max_error(model, fused, xs) < 2e-2


def test_gemm_inside_if_branch_is_fused():
    fc = GEMM.with_(n=2 * GEMM.k, act="relu")
    inner = G(13)
    then_y = _fc(inner, fc, "x", np.random.default_rng(0))
    then_g = helper.make_graph(inner.nodes, "then", [], [helper.make_tensor_value_info(then_y, FLOAT, ["M", fc.n])], inner.initializers)
    else_g = helper.make_graph(
        [helper.make_node("Concat", ["x", "x"], ["else_y"], name="else/Concat", axis=1)],
        "else",
        [],
        [helper.make_tensor_value_info("else_y", FLOAT, ["M", fc.n])],
    )
    g = G(13)
    g.input("x", FLOAT, ["M", fc.k])
    g.input("cond", TensorProto.BOOL, [])
    g.nodes.append(helper.make_node("If", ["cond"], ["y"], name="If_0", then_branch=then_g, else_branch=else_g))
    g.output("y", FLOAT, ["M", fc.n])
    model = g.model()
    result = fusion.run(model, ["gemm"])
    assert result.counts() == {"gemm": 1}, _reasons(result)
    assert result.fusions[0].scope.endswith("If_0.then_branch")
    branch = next(a.g for a in result.model.graph.node[0].attribute if a.name == "then_branch")
    assert [n.op_type for n in branch.node] == ["FusedFC"]
    for cond in (True, False):
        fd = {"x": np.random.default_rng(1).standard_normal((5, fc.k)).astype(np.float32), "cond": np.array(cond)}
        assert max_error(model, result.model, fd) < 1e-4


def test_fuse_all_passes_and_cli(tmp_path):
    model = build(BASE.with_(act="relu"))
    assert count(fusion.fuse(model, NORM_FC_PASSES), "FusedFC") == 1
    src, dst = tmp_path / "m.onnx", tmp_path / "f.onnx"
    onnx.save(model, str(src))
    from fusion.cli.commands import main

    assert main(["fuse", str(src), "-o", str(dst), "--passes", "gemm"]) == 0
    fused = onnx.load(str(dst))
    assert count(fused, "FusedFC") == 1
    assert verify(model, fused).passed


def _conv1d_gelu(shape_from_output: bool) -> onnx.ModelProto:
    """GPT-2's Conv1D: addmm on [B*S, K], view(B, S, N), then gelu_new (tanh form)."""
    rng = np.random.default_rng(5)
    g = G(13)
    x = g.input("x", FLOAT, ["B", "S", 8])
    x2 = g.op("Reshape", x, g.const(np.array([-1, 8], np.int64)))
    y = g.op("Gemm", x2, g.const(rng.standard_normal((8, 16)).astype(np.float32)), g.const(rng.standard_normal(16).astype(np.float32)))
    src = y if shape_from_output else x  # view(*x.shape[:-1], N), sized from the FC's own output or its input
    lead = g.op("Slice", g.op("Shape", src), g.const(np.array([0], np.int64)), g.const(np.array([1 if shape_from_output else 2], np.int64)))
    parts = [lead, g.const(np.array([-1, 16], np.int64))] if shape_from_output else [lead, g.const(np.array([16], np.int64))]
    y = g.op("Reshape", y, g.op("Concat", *parts, axis=0))
    g.output(_activation(g, y, "tanh_pow", np.float32), FLOAT)
    return g.model()


def test_activation_behind_a_reshape_fuses_and_the_reshape_moves_after():
    model = _conv1d_gelu(shape_from_output=False)
    result = fusion.run(model, ["gemm"])
    assert result.counts() == {"gemm": 1}, _reasons(result)
    node = _nodes(result.model, "FusedFC")[0]
    assert _attrs_to_spec(node, specs.FUSED_FC)["activation"] == "gelu_tanh"
    ops = [n.op_type for n in result.model.graph.node]
    assert ops.index("FusedFC") < len(ops) - 1 and ops[-1] == "Reshape" and "Tanh" not in ops
    xs = {"x": np.random.default_rng(2).standard_normal((2, 3, 8)).astype(np.float32)}
    assert max_error(model, result.model, xs) < 1e-4
    trt = fusion.fuse_gemm(model, target="trt")
    assert max_error(model, trt, xs) < 1e-4


def test_reshape_sized_from_the_fc_output_is_not_moved():
    model = _conv1d_gelu(shape_from_output=True)
    result = fusion.run(model, ["gemm"])
    assert result.counts() == {"gemm": 1}
    assert _attrs_to_spec(_nodes(result.model, "FusedFC")[0], specs.FUSED_FC)["activation"] == "none"
    assert any("target shape is computed from the FC's own output" in r for r in _reasons(result)), _reasons(result)
    xs = {"x": np.random.default_rng(2).standard_normal((2, 3, 8)).astype(np.float32)}
    assert max_error(model, result.model, xs) < 1e-4


def test_fc_inside_a_model_local_function():
    rng = np.random.default_rng(6)
    consts = [
        helper.make_node("Constant", [], [name], name=f"c_{name}", value=numpy_helper.from_array(v, name))
        for name, v in (("w", rng.standard_normal((8, 4)).astype(np.float32)), ("b", rng.standard_normal(4).astype(np.float32)))
    ]
    body = consts + [
        helper.make_node("MatMul", ["X", "w"], ["mm"], name="fc/MatMul"),
        helper.make_node("Add", ["mm", "b"], ["ad"], name="fc/Add"),
        helper.make_node("Relu", ["ad"], ["Y"], name="fc/Relu"),
    ]
    fn = helper.make_function("local", "Block", ["X"], ["Y"], body, [helper.make_opsetid("", 13)])
    g = G(13)
    g.input("x", FLOAT, ["B", 8])
    g.nodes.append(helper.make_node("Block", ["x"], ["y"], domain="local", name="blk"))
    g.output("y", FLOAT, ["B", 4])
    model = helper.make_model(
        g.graph(), opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("local", 1)], functions=[fn], ir_version=8
    )
    xs = {"x": rng.standard_normal((3, 8)).astype(np.float32)}
    for target, op in (("plugin", "FusedFC"), ("trt", "CustomFCPluginDynamic"), ("onnx", "Gemm")):
        result = fusion.run(model, ["gemm"], target=target)
        assert result.counts() == {"gemm": 1} and result.fusions[0].scope == "function local::Block"
        block = next(f for f in result.model.functions if f.name == "Block")
        assert op in [n.op_type for n in block.node]
        assert max_error(model, result.model, xs) < 1e-5


def test_bf16_fuses_on_plugin_target_only():
    import ml_dtypes

    rng = np.random.default_rng(7)
    g = G(13)
    x = g.input("x", TensorProto.BFLOAT16, ["B", "S", 8])
    w = g.const(rng.standard_normal((8, 4)).astype(ml_dtypes.bfloat16))
    b = g.const(rng.standard_normal(4).astype(ml_dtypes.bfloat16))
    g.output(g.op("Relu", g.op("Add", g.op("MatMul", x, w), b)), TensorProto.BFLOAT16)
    model = g.model()
    fused = fusion.fuse_gemm(model)  # validated by onnx.checker (full check) inside
    node = _nodes(fused, "FusedFC")[0]
    assert _attrs_to_spec(node, specs.FUSED_FC)["activation"] == "relu"
    result = fusion.inspect(model, ["gemm"], target="trt")
    assert not result.fusions and any("not BFLOAT16" in r for r in _reasons(result))
