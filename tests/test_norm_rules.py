"""LayerNorm and RMSNorm rules: every claimed form fuses, to the spec, with the same numbers."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import fusion
from fusion.rewrite import specs

from .builders import count, max_error
from .norm_models import DOUBLE, FLOAT, FLOAT16, FP16_LLAMA, FP16_TORCH, LAYER, RMS, Form, build, feeds

TOL = {FLOAT: 1e-4, FLOAT16: 1e-2, DOUBLE: 1e-6}

LAYER_FORMS = {
    "pow_div": LAYER,
    "mul_square": LAYER.with_(square="mul"),
    "reciprocal": LAYER.with_(normalize="reciprocal"),
    "div_one": LAYER.with_(normalize="div_one"),
    "pow_minus_half": LAYER.with_(normalize="pow_half"),
    "operands_in_order": LAYER.with_(swap=False),
    "eps_constant_node": LAYER.with_(eps_node=True),
    "eps_fp16": LAYER.with_(eps_dtype=np.float16),
    "eps_fp64": LAYER.with_(eps_dtype=np.float64),
    "eps_huge": LAYER.with_(eps=10.0),
    "no_gamma": LAYER.with_(gamma=False),
    "no_beta": LAYER.with_(beta=False),
    "no_affine": LAYER.with_(gamma=False, beta=False),
    "positive_axis": LAYER.with_(positive_axes=True),
    "two_axes": LAYER.with_(axes=(-2, -1), shape=("B", 4, 8)),
    "rank2": LAYER.with_(shape=("N", 16)),
    "rank4": LAYER.with_(shape=("B", 2, 3, 16)),
    "opset11": LAYER.with_(opset=11),
    "opset17": LAYER.with_(opset=17),
    "opset18_axes_input": LAYER.with_(opset=18),
    "fp16_fp64_island": FP16_TORCH,
    "fp16_fp32_island": FP16_TORCH.with_(island=FLOAT),
    "fp16_native": LAYER.with_(dtype=FLOAT16),
    # "fp64" (LAYER.with_(dtype=DOUBLE)) left this list with issue 16, defect 5: the plugins compute
    # in fp32, so an fp64 norm is refused for them; tests/test_emit_soundness.py covers it.
    "channels_first": LAYER.with_(axes=(1,), positive_axes=False, shape=("N", 8, 4, 4), channels_first_params=True),
}
RMS_FORMS = {
    "t5_reciprocal": RMS.with_(normalize="reciprocal"),
    "torchscript_div_one": RMS.with_(normalize="div_one"),
    "div": RMS,
    "pow_minus_half": RMS.with_(normalize="pow_half"),
    "mul_square": RMS.with_(square="mul"),
    "no_gamma": RMS.with_(gamma=False),
    "llama_fp16": FP16_LLAMA,
    "opset18": RMS.with_(opset=18),
    "two_axes": RMS.with_(axes=(-2, -1), shape=("B", 4, 8)),
}


def _fused_node(model: onnx.ModelProto, op_type: str) -> onnx.NodeProto:
    nodes = [n for n in model.graph.node if n.op_type == op_type]
    assert len(nodes) == 1, [n.op_type for n in model.graph.node]
    return nodes[0]


def _check_against_spec(node: onnx.NodeProto, spec: specs.PluginSpec) -> dict:
    assert node.domain == spec.domain
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    assert attrs.pop("plugin_version") == spec.version.encode()
    assert attrs.pop("plugin_namespace") == spec.namespace.encode()
    assert set(attrs) == {f.name for f in spec.fields}
    for f in spec.fields:
        assert onnx.helper.make_attribute(f.name, attrs[f.name]).type == f.type.onnx_type
    spec.check_arity(len(node.input), len(node.output))
    return attrs


@pytest.mark.parametrize("name", sorted(LAYER_FORMS))
def test_layernorm_form_fuses_to_spec_and_matches(name):
    form = LAYER_FORMS[name]
    model = build(form)
    result = fusion.run(model, ["layernorm", "rmsnorm"])
    assert result.counts() == {"layernorm": 1}, (result.counts(), result.near_misses)
    node = _fused_node(result.model, "FusedLayerNorm")
    attrs = _check_against_spec(node, specs.FUSED_LAYER_NORM)
    assert attrs["axis"] == -len(form.axes)
    from .builders import NP

    eps_as_stored = float(np.asarray(form.eps, dtype=form.eps_dtype or NP[form.island or form.dtype]))
    assert attrs["epsilon"] == pytest.approx(eps_as_stored, rel=1e-6)
    assert len(node.input) == 3  # γ and β always supplied, so the function body is valid
    assert max_error(model, result.model, feeds(form)) < TOL[form.dtype] * 10


@pytest.mark.parametrize("name", sorted(RMS_FORMS))
def test_rmsnorm_form_fuses_to_spec_and_matches(name):
    form = RMS_FORMS[name]
    model = build(form)
    result = fusion.run(model, ["layernorm", "rmsnorm"])
    assert result.counts() == {"rmsnorm": 1}, (result.counts(), result.near_misses)
    node = _fused_node(result.model, "FusedRMSNorm")
    attrs = _check_against_spec(node, specs.FUSED_RMS_NORM)
    assert attrs["axis"] == -len(form.axes)
    assert max_error(model, result.model, feeds(form)) < TOL[form.dtype] * 10


def test_channels_first_is_transposed_around_a_last_axis_norm():
    form = LAYER_FORMS["channels_first"]
    fused = fusion.fuse_layernorm(build(form))
    assert [n.op_type for n in fused.graph.node] == ["Transpose", "FusedLayerNorm", "Transpose"]
    gamma = next(t for t in fused.graph.initializer if t.name == fused.graph.node[1].input[1])
    assert list(gamma.dims) == [8]


def test_fp16_island_fuses_in_the_model_type():
    fused = fusion.fuse_layernorm(build(FP16_TORCH))
    assert [n.op_type for n in fused.graph.node] == ["FusedLayerNorm"]
    x = fused.graph.node[0].input
    types = {t.name: t.data_type for t in fused.graph.initializer}
    assert types[x[1]] == types[x[2]] == onnx.TensorProto.FLOAT16


# -- negatives: each asserts the reason ---------------------------------------------------


def _near_miss(model: onnx.ModelProto) -> str:
    result = fusion.inspect(model, ["layernorm", "rmsnorm"])
    assert not result.fusions, result.fusions
    assert result.near_misses, "expected a near-miss"
    return " | ".join(m.reason for m in result.near_misses)


def _edit(model: onnx.ModelProto, op_type: str, fn, which: int = 0) -> onnx.ModelProto:
    nodes = [n for n in model.graph.node if n.op_type == op_type]
    fn(nodes[which], model)
    return model


def test_mean_and_variance_over_different_axes_is_not_layernorm():
    m = build(LAYER.with_(shape=("B", 4, 8)))
    red = [n for n in m.graph.node if n.op_type == "ReduceMean"][1]
    red.attribute[0].ints[:] = [-2]
    # Nor is it an RMSNorm of the centered tensor: one near-miss for the chain, from LayerNorm.
    assert _near_miss(m) == "mean reduces axes [-1] but variance reduces [-2]"
    rms = fusion.inspect(m, ["rmsnorm"]).near_misses
    assert any("is centered by a ReduceMean: a LayerNorm that did not fuse" in x.reason for x in rms)


def test_pow_three_is_not_a_square():
    m = build(LAYER)
    two = next(n.input[1] for n in m.graph.node if n.op_type == "Pow")
    init = next(t for t in m.graph.initializer if t.name == two)
    init.CopyFrom(onnx.numpy_helper.from_array(np.array(3.0, np.float32), two))
    assert "is 3, expected 2" in _near_miss(m)


def test_non_constant_eps_is_refused():
    m = build(LAYER)
    eps = next(t for t in m.graph.initializer if t.name == m.graph.node[4].input[0] or t.name == m.graph.node[4].input[1])
    m.graph.initializer.remove(eps)
    m.graph.input.append(onnx.helper.make_tensor_value_info(eps.name, onnx.TensorProto.FLOAT, []))
    assert f"'{eps.name}' is not a constant" in _near_miss(m)


def test_non_constant_gamma_is_refused():
    m = build(LAYER)
    mul = [n for n in m.graph.node if n.op_type == "Mul"][-1]
    gamma = next(t for t in m.graph.initializer if t.name in mul.input)
    m.graph.initializer.remove(gamma)
    m.graph.input.append(onnx.helper.make_tensor_value_info(gamma.name, onnx.TensorProto.FLOAT, [16]))
    # The chain up to γ is still a LayerNorm without affine; γ and β stay as they were.
    result = fusion.run(m, ["layernorm"])
    assert result.counts() == {"layernorm": 1}
    assert [n.op_type for n in result.model.graph.node] == ["FusedLayerNorm", "Mul", "Add"]
    assert result.model.graph.node[1].input[:] == [result.model.graph.node[0].output[0], gamma.name] or gamma.name in result.model.graph.node[1].input


def test_intermediate_used_elsewhere_is_not_fused():
    m = build(LAYER)
    sub = next(n for n in m.graph.node if n.op_type == "Sub")
    m.graph.output.append(onnx.helper.make_tensor_value_info(sub.output[0], onnx.TensorProto.FLOAT, None))
    assert f"intermediate {sub.output[0]!r} is a graph output" in _near_miss(m)


def test_intermediate_read_by_another_node_is_not_fused():
    m = build(LAYER)
    sqrt = next(n for n in m.graph.node if n.op_type == "Sqrt")
    m.graph.node.append(onnx.helper.make_node("Neg", [sqrt.output[0]], ["extra"], name="spy"))
    m.graph.output.append(onnx.helper.make_tensor_value_info("extra", onnx.TensorProto.FLOAT, None))
    assert "is also read by Neg 'spy' outside the pattern" in _near_miss(m)


def test_keepdims_zero_is_refused():
    m = build(LAYER.with_(shape=("B", "S", 16)))
    red = [n for n in m.graph.node if n.op_type == "ReduceMean"][1]
    red.attribute.append(onnx.helper.make_attribute("keepdims", 0))
    assert "keepdims=0" in _near_miss(m)


def test_gamma_varying_along_a_non_normalized_axis_stays_outside():
    m = build(LAYER.with_(shape=("B", 4, 16)))
    mul = [n for n in m.graph.node if n.op_type == "Mul"][-1]
    gamma = next(t for t in m.graph.initializer if t.name in mul.input)
    gamma.CopyFrom(onnx.numpy_helper.from_array(np.ones((4, 16), np.float32), gamma.name))
    result = fusion.run(m, ["layernorm", "rmsnorm"])
    # The normalization itself fuses; the per-position scale and the shift stay as they were.
    assert [n.op_type for n in result.model.graph.node] == ["FusedLayerNorm", "Mul", "Add"]
    assert any("varies along axis -2, which is not normalized" in x.reason for x in result.near_misses)


def test_eps_added_after_sqrt_is_a_different_formula():
    from .builders import G, reduce_mean

    g = G(13)
    x = g.input("x", FLOAT, ["B", 16])
    d = g.op("Sub", x, reduce_mean(g, x, [-1]))
    std = g.op("Sqrt", reduce_mean(g, g.op("Mul", d, d), [-1]))
    y = g.op("Div", d, g.op("Add", std, g.const(1e-5)))
    g.output(y, FLOAT)
    result = fusion.inspect(g.model(), ["layernorm", "rmsnorm"])
    assert not result.fusions
    assert any("comes from Add, expected Sqrt" in m.reason for m in result.near_misses), result.near_misses


def test_vector_magnitude_does_not_match():
    from .builders import NORM_FC_PASSES, G

    g = G(13)
    x = g.input("x", FLOAT, ["B", 3])
    norm = g.op("Sqrt", g.op("ReduceSum", g.op("Pow", x, g.const(2.0)), axes=[-1], keepdims=1))
    g.output(g.op("Div", x, norm), FLOAT)
    g.output(g.op("Sqrt", g.op("Add", g.op("Mul", x, x), g.const(1.0))), FLOAT)
    result = fusion.inspect(g.model(), NORM_FC_PASSES)
    assert not result.fusions


def test_std_not_used_as_norm_does_not_match():
    from .builders import NORM_FC_PASSES, G, reduce_mean

    g = G(13)
    x = g.input("x", FLOAT, ["B", 16])
    d = g.op("Sub", x, reduce_mean(g, x, [-1]))
    std = g.op("Sqrt", g.op("Add", reduce_mean(g, g.op("Mul", d, d), [-1]), g.const(1e-5)))
    g.output(g.op("Mul", x, std), FLOAT)  # scales by std instead of dividing
    assert not fusion.inspect(g.model(), NORM_FC_PASSES).fusions


# -- targets ---------------------------------------------------------------------------------


WIDE = LAYER.with_(shape=("B", "S", 64))  # TensorRT's plugin is exact from 48 elements


def test_trt_target_uses_shipped_layernorm_on_rank3_directly():
    form = WIDE
    fused = fusion.fuse_layernorm(build(form), target="trt")
    assert [n.op_type for n in fused.graph.node] == ["LayerNorm"]
    _check_against_spec(fused.graph.node[0], specs.TRT_LAYER_NORM)
    assert max_error(build(form), fused, feeds(form)) < 1e-4


@pytest.mark.parametrize("shape,axes", [(("N", 64), (-1,)), (("B", 2, 3, 64), (-1,)), (("B", 4, 16), (-2, -1))])
def test_trt_target_reshapes_other_ranks_to_rank3(shape, axes):
    form = LAYER.with_(shape=shape, axes=axes)
    fused = fusion.fuse_layernorm(build(form), target="trt")
    ops = [n.op_type for n in fused.graph.node]
    assert ops.count("LayerNorm") == 1 and ops.count("Reshape") == 2
    shape3 = next(t for t in fused.graph.initializer if t.name.endswith("shape3d"))
    assert list(onnx.numpy_helper.to_array(shape3)) == [-1, 1, 64]
    assert max_error(build(form), fused, feeds(form)) < 1e-4


def test_trt_target_keeps_to_sizes_where_the_plugin_is_exact():
    result = fusion.inspect(build(LAYER.with_(shape=("B", "S", 32))), ["layernorm"], target="trt")
    assert [m.reason for m in result.near_misses] == [
        "target trt: TensorRT's LayerNorm plugin is inaccurate below 48 normalized elements (this norm has 32)"
    ]


def test_trt_target_has_no_rmsnorm():
    result = fusion.inspect(build(RMS), ["rmsnorm"], target="trt")
    assert [m.reason for m in result.near_misses] == ["target trt: TensorRT ships no RMSNorm plugin"]


def test_onnx_target_emits_layernormalization_at_opset17():
    form = LAYER.with_(opset=17)
    fused = fusion.fuse_layernorm(build(form), target="onnx")
    assert [n.op_type for n in fused.graph.node] == ["LayerNormalization"]
    assert not fused.functions
    assert max_error(build(form), fused, feeds(form)) < 1e-5


def test_onnx_target_explains_old_opsets():
    result = fusion.inspect(build(LAYER), target="onnx")
    assert "LayerNormalization needs opset 17, the model has 13" in result.near_misses[0].reason


def test_onnx_target_rmsnormalization_at_opset23():
    form = RMS.with_(opset=23)
    fused = fusion.fuse_layernorm(build(form), target="onnx")
    assert count(fused, "RMSNormalization") == 1
    assert max_error(build(form), fused, feeds(form)) < 1e-4


# -- properties of the output ------------------------------------------------------------


@pytest.mark.parametrize("target", ["plugin", "trt"])
def test_fused_models_pass_the_full_checker_and_carry_functions(target):
    fused = fusion.fuse_layernorm(build(WIDE), target=target)
    onnx.checker.check_model(fused, full_check=True)
    assert {(f.domain, f.name) for f in fused.functions} == {
        (specs.PLUGIN_DOMAIN, "FusedLayerNorm" if target == "plugin" else "LayerNorm")
    }
    assert any(o.domain == specs.PLUGIN_DOMAIN for o in fused.opset_import)


def test_functions_can_be_left_out_and_stripped():
    model = build(LAYER)
    assert not fusion.fuse_layernorm(model, functions=False).functions
    assert not fusion.strip_functions(fusion.fuse_layernorm(model)).functions


def test_idempotent_and_deterministic():
    model = build(FP16_TORCH)
    once = fusion.fuse_layernorm(model)
    twice = fusion.fuse_layernorm(once)
    assert twice.SerializeToString() == once.SerializeToString()
    again = fusion.fuse_layernorm(build(FP16_TORCH))
    assert again.SerializeToString() == once.SerializeToString()


def test_input_model_is_not_modified():
    model = build(LAYER)
    before = model.SerializeToString()
    fusion.fuse_layernorm(model)
    assert model.SerializeToString() == before


def test_names_inputs_outputs_and_metadata_are_preserved():
    model = build(LAYER)
    model.doc_string = "doc"
    model.producer_name = "tests"
    onnx.helper.set_model_props(model, {"k": "v"})
    fused = fusion.fuse_layernorm(model)
    assert fused.doc_string == "doc" and fused.producer_name == "tests"
    assert {p.key: p.value for p in fused.metadata_props} == {"k": "v"}
    assert fused.graph.input == model.graph.input
    assert fused.graph.output == model.graph.output
    assert fused.graph.name == model.graph.name


def test_unused_constants_of_the_chain_are_dropped_but_shared_ones_kept():
    model = build(LAYER)
    fused = fusion.fuse_layernorm(model)
    names = {t.name for t in fused.graph.initializer}
    # eps and the exponent were read only by the chain
    assert len(names) == 2, names


def test_several_norms_in_one_model():
    from .builders import G

    g = G(13)
    x = g.input("x", FLOAT, ["B", 16])
    form = Form(shape=("B", 16))
    cur = x
    for _ in range(3):
        sub = build(form).graph
        # re-create the chain on top of cur by renaming
        mapping = {"x": cur}
        for n in sub.node:
            ins = [mapping.get(i, i) for i in n.input]
            outs = [g.fresh(o) for o in n.output]
            mapping.update(zip(n.output, outs))
            g.nodes.append(onnx.helper.make_node(n.op_type, ins, outs, name=g.fresh(n.op_type), **{a.name: onnx.helper.get_attribute_value(a) for a in n.attribute}))
        for t in sub.initializer:
            if t.name not in {i.name for i in g.initializers}:
                g.initializers.append(t)
        cur = mapping["y"]
        cur = g.op("Relu", cur)
    g.output(cur, FLOAT)
    model = g.model()
    result = fusion.run(model, ["layernorm"])
    assert result.counts() == {"layernorm": 3}
    rng = np.random.default_rng(1)
    assert max_error(model, result.model, {"x": rng.standard_normal((4, 16)).astype(np.float32)}) < 1e-4


def _tf_layernorm(beta: bool = True, gamma: bool = True) -> onnx.ModelProto:
    """tf2onnx's Keras LayerNormalization: batch-norm style, SquaredDifference as Sub + Mul."""
    from .builders import G, reduce_mean

    rng = np.random.default_rng(3)
    g = G(13)
    x = g.input("x", FLOAT, ["B", "S", 16])
    mean = reduce_mean(g, x, [-1])
    d = g.op("Sub", x, mean)
    var = reduce_mean(g, g.op("Mul", d, d), [-1])
    inv = g.op("Reciprocal", g.op("Sqrt", g.op("Add", var, g.const(1e-3))))
    if gamma:
        inv = g.op("Mul", inv, g.const(rng.standard_normal(16).astype(np.float32)))
    xs = g.op("Mul", x, inv)
    ms = g.op("Mul", mean, inv)
    if beta:
        y = g.op("Add", xs, g.op("Sub", g.const(rng.standard_normal(16).astype(np.float32)), ms))
    else:
        y = g.op("Sub", xs, ms)
    g.output(y, FLOAT)
    return g.model()


@pytest.mark.parametrize("beta,gamma", [(True, True), (False, True), (True, False), (False, False)])
def test_tensorflow_form(beta, gamma):
    model = _tf_layernorm(beta, gamma)
    result = fusion.run(model, ["layernorm"])
    assert result.counts() == {"layernorm": 1}, result.near_misses
    assert [n.op_type for n in result.model.graph.node] == ["FusedLayerNorm"]
    x = {"x": np.random.default_rng(0).standard_normal((2, 3, 16)).astype(np.float32)}
    assert max_error(model, result.model, x) < 1e-4


def test_eps_dropped_by_the_exporter_means_zero():
    from .builders import G, reduce_mean

    g = G(18)
    x = g.input("x", FLOAT, ["B", 16])
    d = g.op("Sub", x, reduce_mean(g, x, [-1]))
    y = g.op("Div", d, g.op("Sqrt", reduce_mean(g, g.op("Mul", d, d), [-1])))
    g.output(y, FLOAT)
    model = g.model()
    result = fusion.run(model, ["layernorm"])
    assert result.counts() == {"layernorm": 1}
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in result.model.graph.node[0].attribute}
    assert attrs["epsilon"] == 0.0
    x = {"x": np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)}
    assert max_error(model, result.model, x) < 1e-4


def _torch_var_layernorm(restore_shape_ok: bool = True) -> onnx.ModelProto:
    """The dynamo exporter's torch.var: its own mean, keepdims=0, dims put back by Reshape/Expand
    whose target shapes come from Shape nodes reading the variance."""
    from .builders import G, reduce_mean

    g = G(18)
    x = g.input("x", FLOAT, ["B", "S", 16])
    d = g.op("Sub", x, reduce_mean(g, x, [-1]))
    d2 = g.op("Sub", x, reduce_mean(g, x, [2]))
    var = reduce_mean(g, g.op("Mul", d2, d2), [2], keepdims=0)
    s0 = g.op("Shape", var, start=0, end=1)
    s1 = g.op("Shape", var, start=1, end=2)
    one = g.const(np.array([1], np.int64))
    last = one if restore_shape_ok else g.const(np.array([16], np.int64))
    reshaped = g.op("Reshape", var, g.op("Concat", s0, s1, one, axis=0))
    expanded = g.op("Expand", reshaped, g.op("Concat", g.op("Shape", x, start=0, end=1), g.op("Shape", x, start=1, end=2), last, axis=0))
    y = g.op("Div", d, g.op("Sqrt", g.op("Add", expanded, g.const(1e-5))))
    y = g.op("Add", g.op("Mul", y, g.const(np.full(16, 2.0, np.float32))), g.const(np.full(16, 0.5, np.float32)))
    g.output(y, FLOAT)
    # The exporter writes these shapes itself; ONNX inference cannot see through Shape/Concat.
    g.value_info.append(onnx.helper.make_tensor_value_info(reshaped, FLOAT, ["B", "S", 1]))
    g.value_info.append(onnx.helper.make_tensor_value_info(expanded, FLOAT, ["B", "S", 1 if restore_shape_ok else 16]))
    return g.model()


def test_torch_var_with_dims_restored_and_shape_side_chain_absorbed():
    model = _torch_var_layernorm()
    result = fusion.run(model, ["layernorm"])
    assert result.counts() == {"layernorm": 1}, result.near_misses
    # The Shape/Concat nodes that sized the Reshape/Expand go too.
    assert [n.op_type for n in result.model.graph.node] == ["FusedLayerNorm"]
    x = {"x": np.random.default_rng(0).standard_normal((2, 3, 16)).astype(np.float32)}
    assert max_error(model, result.model, x) < 1e-4


def test_expand_to_the_full_normalized_size_is_still_a_layernorm():
    model = _torch_var_layernorm(restore_shape_ok=False)  # variance repeated along the axis
    result = fusion.run(model, ["layernorm"])
    assert result.counts() == {"layernorm": 1}, result.near_misses
    x = {"x": np.random.default_rng(0).standard_normal((2, 3, 16)).astype(np.float32)}
    assert max_error(model, result.model, x) < 1e-4


def test_restore_that_does_not_restore_is_refused():
    model = _torch_var_layernorm()
    # make the Reshape target [S, B, 1]: a transposition, not a restore of the reduced dim
    concat = [n for n in model.graph.node if n.op_type == "Concat"][0]
    concat.input[0], concat.input[1] = concat.input[1], concat.input[0]
    for vi in model.graph.value_info:
        if vi.name in [n.output[0] for n in model.graph.node if n.op_type in ("Reshape", "Expand")]:
            dims = vi.type.tensor_type.shape.dim
            dims[0].dim_param, dims[1].dim_param = "S", "B"
    result = fusion.inspect(model, ["layernorm"])
    assert not result.fusions
    assert any("not the input's" in m.reason for m in result.near_misses), result.near_misses


def test_a_broken_rewrite_is_caught_by_validation(monkeypatch):
    from fusion.passes.driver import InternalError
    from fusion.patterns import _norm

    real = _norm.emit

    def broken(desc, em, ctx):
        real(desc, em, ctx)
        em.nodes[-1].input[0] = "nowhere"

    monkeypatch.setattr("fusion.patterns.layernorm.emit", broken)
    with pytest.raises(InternalError, match="fails onnx.checker although the input passes"):
        fusion.fuse_layernorm(build(LAYER.with_(shape=("B", 4096))))
