"""What the emitted nodes and their function bodies compute, and models that cannot run (issue 16,
defects 5-8): compute types, zero-size dims, function-name clashes, bodiless custom nodes,
validation on the in-place entry points, and inputs that are not topologically sorted.

Every numeric check runs the original and the fused model on onnxruntime with graph
optimizations off, except the section that runs the fused models at every level."""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import fusion
from fusion.rewrite import functions, specs
from fusion.passes import driver as passes

from . import skip_models
from .builders import DOUBLE, FLOAT, FLOAT16, NORM_FC_PASSES, NP, G, count, reduce_mean, run
from .groupnorm_models import GN, build as gn_build
from .norm_models import FP16_LLAMA, FP16_TORCH, LAYER, RMS, build, feeds


def _reasons(result) -> list[str]:
    return [m.reason for m in result.near_misses]


def _same_outputs(a: onnx.ModelProto, b: onnx.ModelProto, feed: dict, rtol: float, atol: float) -> None:
    ra, rb = run(a, feed), run(b, feed)
    for x, y in zip(ra, rb):
        assert x.shape == y.shape and x.dtype == y.dtype, (x.shape, y.shape, x.dtype, y.dtype)
        np.testing.assert_allclose(y.astype(np.float64), x.astype(np.float64), rtol=rtol, atol=atol)


def _layer_norm_chain(g: G, x: str, t: int, d: int, rng, island: int | None = None, eps: float = 1e-5) -> str:
    """A LayerNorm of ``x`` (type ``t``) over its last dim, computed in ``island`` when given
    (Cast in at the start, Cast back at the end)."""
    ct = island or t
    npt = NP[ct]
    h = g.op("Cast", x, to=ct) if island else x
    mean = reduce_mean(g, h, [-1])
    dev = g.op("Sub", h, mean)
    var = reduce_mean(g, g.op("Mul", dev, dev), [-1])
    std = g.op("Sqrt", g.op("Add", var, g.const(eps, dtype=npt)))
    y = g.op("Div", dev, std)
    y = g.op("Mul", y, g.const(rng.standard_normal(d).astype(npt)))
    y = g.op("Add", y, g.const(rng.standard_normal(d).astype(npt)))
    return g.op("Cast", y, to=t) if island else y


def _ln_model(t: int = FLOAT, opset: int = 13, d: int = 64, island: int | None = None, shape=("B", "S")) -> onnx.ModelProto:
    g = G(opset=opset)
    x = g.input("x", t, [*shape, d])
    y = _layer_norm_chain(g, x, t, d, np.random.default_rng(0), island)
    g.nodes[-1].output[0] = "y"
    g.output("y", t, [*shape, d])
    return g.model()


def _large_mean(shape, t: int, mean: float, std: float, seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {"x": (mean + std * rng.standard_normal(shape)).astype(NP[t])}


# -- defect 5: the compute type of the chain is kept, or the target refuses --------------------


@pytest.mark.parametrize("target", ["plugin", "trt"])
def test_fp64_layernorm_is_refused_where_the_target_computes_in_fp32(target):
    result = fusion.run(_ln_model(DOUBLE), ["layernorm"], target=target)
    assert not result.fusions
    assert any("DOUBLE" in r and "no fp64" in r for r in _reasons(result)), _reasons(result)


def test_fp64_rmsnorm_is_refused_for_the_plugin():
    result = fusion.run(build(RMS.with_(dtype=DOUBLE)), ["rmsnorm"])
    assert not result.fusions
    assert any("the model is DOUBLE" in r for r in _reasons(result)), _reasons(result)


def test_fp32_model_with_fp64_island_is_refused_for_the_plugin():
    result = fusion.run(_ln_model(FLOAT, island=DOUBLE), ["layernorm"])
    assert not result.fusions
    assert any("the chain computes in DOUBLE" in r for r in _reasons(result)), _reasons(result)


def test_fp64_layernorm_onnx_target_computes_in_fp64():
    """x = 1e8 + N(0, 1): fp32 arithmetic loses the deviation entirely."""
    model = _ln_model(DOUBLE, opset=17)
    result = fusion.run(model, ["layernorm"], target="onnx")
    assert result.counts() == {"layernorm": 1}, _reasons(result)
    assert result.fusions[0].compute_type == "DOUBLE"
    feed = _large_mean([2, 3, 64], DOUBLE, 1e8, 1.0)
    _same_outputs(model, result.model, feed, rtol=1e-6, atol=1e-6)


def test_fp32_model_with_fp64_island_onnx_target_keeps_fp64():
    """x = 1e4 + N(0, 0.01) in fp32, normalized in fp64 inside the chain."""
    model = _ln_model(FLOAT, opset=17, island=DOUBLE)
    result = fusion.run(model, ["layernorm"], target="onnx")
    assert result.counts() == {"layernorm": 1}, _reasons(result)
    assert result.fusions[0].compute_type == "DOUBLE"
    ln = next(n for n in result.model.graph.node if n.op_type == "LayerNormalization")
    assert {a.name: a.i for a in ln.attribute if a.name == "stash_type"} == {"stash_type": DOUBLE}
    feed = _large_mean([2, 3, 64], FLOAT, 1e4, 0.01)
    _same_outputs(model, result.model, feed, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("form", [FP16_LLAMA, FP16_TORCH], ids=["fp16_fp32_island", "fp16_fp64_island"])
def test_fp16_chains_that_widen_inside_still_fuse_to_the_plugin(form):
    model = build(form)
    result = fusion.run(model, ["layernorm", "rmsnorm"])
    assert sum(result.counts().values()) == 1, _reasons(result)
    assert result.fusions[0].compute_type == "FLOAT"
    _same_outputs(model, result.model, feeds(form), rtol=1e-2, atol=1e-2)


def test_report_says_the_compute_type():
    result = fusion.run(_ln_model(FLOAT), ["layernorm"])
    assert result.fusions[0].compute_type == "FLOAT"
    assert "computes in FLOAT" in str(result)


# -- defect 6: zero-size dims stay zero-size --------------------------------------------------

EMPTY_SHAPES = [(0, 0), (0, 5), (3, 0)]


@pytest.mark.parametrize("opset", [13, 17])
@pytest.mark.parametrize("kind", ["layer", "rms"])
def test_norm_plugin_body_keeps_zero_size_dims(opset, kind):
    form = (LAYER if kind == "layer" else RMS).with_(opset=opset, shape=("B", "S", 64))
    model = build(form)
    fused = fusion.fuse_layernorm(model)
    assert count(fused, "FusedLayerNorm" if kind == "layer" else "FusedRMSNorm") == 1
    for lead in EMPTY_SHAPES:
        feed = {"x": np.zeros([*lead, 64], np.float32)}
        _same_outputs(model, fused, feed, rtol=0, atol=0)
    _same_outputs(model, fused, feeds(form), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("opset", [13, 17])
def test_norm_trt_target_keeps_zero_size_dims(opset):
    form = LAYER.with_(opset=opset, shape=("A", "B", "S", 64))
    model = build(form)
    fused = fusion.fuse_layernorm(model, target="trt")
    assert count(fused, "LayerNorm") == 1
    for lead in [(0, 0, 0), (2, 0, 3), (0, 4, 0), (2, 3, 0)]:
        _same_outputs(model, fused, {"x": np.zeros([*lead, 64], np.float32)}, rtol=0, atol=0)
    _same_outputs(model, fused, feeds(form, batch=(2, 3, 5)), rtol=1e-4, atol=1e-4)


def _fc_model(opset: int, rank: int = 3, k: int = 16, n: int = 24, t: int = FLOAT, lead: tuple | None = None) -> onnx.ModelProto:
    rng = np.random.default_rng(1)
    g = G(opset=opset)
    lead = list(lead) if lead is not None else ["A", "B", "S"][-(rank - 1):]
    x = g.input("x", t, [*lead, k])
    w = g.const((rng.standard_normal((k, n)) / math.sqrt(k)).astype(NP[t]))
    y = g.op("Add", g.op("MatMul", x, w), g.const(rng.standard_normal(n).astype(NP[t])))
    g.nodes[-1].output[0] = "y"
    g.output("y", t, [*lead, n])
    return g.model()


@pytest.mark.parametrize("opset", [11, 13, 14, 18])
@pytest.mark.parametrize("target", ["plugin", "trt", "onnx"])
def test_fc_keeps_zero_size_dims(target, opset):
    model = _fc_model(opset)
    result = fusion.run(model, ["gemm"], target=target)
    assert result.counts() == {"gemm": 1}, _reasons(result)
    for lead in EMPTY_SHAPES:
        _same_outputs(model, result.model, {"x": np.zeros([*lead, 16], np.float32)}, rtol=0, atol=0)
    x = np.random.default_rng(2).standard_normal([2, 3, 16]).astype(np.float32)
    _same_outputs(model, result.model, {"x": x}, rtol=1e-4, atol=1e-4)


def test_fc_rank4_trt_keeps_zero_size_dims():
    model = _fc_model(13, rank=4)
    fused = fusion.fuse_gemm(model, target="trt")
    for lead in [(0, 0, 0), (2, 0, 3), (2, 3, 0)]:
        _same_outputs(model, fused, {"x": np.zeros([*lead, 16], np.float32)}, rtol=0, atol=0)


def test_zero_size_weight_is_refused_where_the_emitter_reshapes():
    model = _fc_model(13, n=0)
    for target in ("trt", "onnx"):
        result = fusion.run(model, ["gemm"], target=target)
        assert not result.fusions and any("zero-size dim" in r for r in _reasons(result)), _reasons(result)


# -- onnxruntime's own graph optimizations keep what the fused model computes -------------------
#
# Below opset 14 the bodies (and some emitted graphs) reshape through
# functions.reshape_keeping_zeros.  With a static input onnxruntime folds its shapes to
# constants, and at ORT_ENABLE_BASIC and up its rewrite rules then run on the result: the
# ExpandElimination rule dropped the padding Expand (target [1, 0]), so every fused op below
# failed there ("Input shape:{1,385}, requested shape:{2,3,64}") on onnxruntime's default
# session.  Each fused model runs at every level against the original.

ORT_LEVELS = {
    "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
    "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
    "off": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
}
RUN_DIMS = {"A": 2, "B": 2, "S": 3, "N": 2}


def _run_at(model: onnx.ModelProto, feed: dict, level: str) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ORT_LEVELS[level]
    try:
        sess = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        return sess.run(None, feed)
    except Exception as e:  # onnxruntime's reason, and the level it failed at
        raise AssertionError(f"graph optimizations {level}: {e}") from e


@dataclass(frozen=True)
class _Fused:
    """One fused op whose body or emitted graph reshapes through reshape_keeping_zeros."""

    build: Callable[[int, tuple], onnx.ModelProto]  # (opset, leading dims: names or sizes) -> model
    lead: tuple  # the model's leading (batch-like) dims
    passes: tuple[str, ...]
    target: str
    op_type: str  # the node the fused model has
    opsets: tuple[int, ...] = (11, 12, 13)  # 11: the helper's Where branch; 12, 13: Max
    dynamic: bool = True  # the target fuses a model with symbolic dims
    tol: float = 1e-4
    empty_runs: bool = True  # the original runs an empty batch (GroupNorm's Reshape [N, G, -1] cannot)


def _norm(form):
    return lambda opset, lead: build(form.with_(opset=opset, shape=(*lead, 64)))


def _skip(norm):
    return lambda opset, lead: skip_models.build(skip_models.Skip(norm=norm.with_(opset=opset, shape=(*lead, 64))))


def _gn(**kw):
    return lambda opset, lead: gn_build(GN(form="reducemean", opset=opset, shape=(*lead, 16, 5, 6), **kw))


def _fc(opset: int, lead: tuple) -> onnx.ModelProto:
    return _fc_model(opset, lead=lead)


BS = ("B", "S")
FUSED_RESHAPING = {
    "FusedLayerNorm": _Fused(_norm(LAYER), BS, ("layernorm",), "plugin", "FusedLayerNorm"),
    "FusedLayerNorm_fp16": _Fused(_norm(FP16_TORCH), BS, ("layernorm",), "plugin", "FusedLayerNorm", tol=2e-2),
    "FusedRMSNorm": _Fused(_norm(RMS), BS, ("rmsnorm",), "plugin", "FusedRMSNorm"),
    "LayerNorm_trt": _Fused(_norm(LAYER), ("A", "B", "S"), ("layernorm",), "trt", "LayerNorm"),
    "FusedSkipLayerNorm": _Fused(_skip(LAYER), BS, ("skipnorm",), "plugin", "FusedSkipLayerNorm"),
    "FusedSkipRMSNorm": _Fused(_skip(RMS), BS, ("skipnorm",), "plugin", "FusedSkipRMSNorm"),
    "CustomSkipLayerNormPluginDynamic": _Fused(_skip(LAYER.with_(eps=0.0)), BS, ("skipnorm",), "trt",
                                               "CustomSkipLayerNormPluginDynamic"),  # fmt: skip
    "FusedGroupNorm": _Fused(_gn(silu="xs"), ("N",), ("groupnorm",), "plugin", "FusedGroupNorm", empty_runs=False),
    "FusedGroupNorm_fp16": _Fused(_gn(dtype=FLOAT16), ("N",), ("groupnorm",), "plugin", "FusedGroupNorm", tol=2e-2,
                                  empty_runs=False),  # fmt: skip
    "GroupNormalizationPlugin": _Fused(_gn(), ("N",), ("groupnorm",), "trt", "GroupNormalizationPlugin", dynamic=False,
                                       empty_runs=False),  # fmt: skip
    # Emitted graphs (no body): the onnx target's [N, G, K] view and the FC targets' output reshape.
    "GroupNorm_onnx": _Fused(_gn(), ("N",), ("groupnorm",), "onnx", "InstanceNormalization", opsets=(10, 11, 12, 13),
                             empty_runs=False),  # fmt: skip
    "FC_trt": _Fused(_fc, BS, ("gemm",), "trt", "CustomFCPluginDynamic"),
    "FC_onnx": _Fused(_fc, BS, ("gemm",), "onnx", "Gemm", opsets=(10, 11, 12, 13)),
}
SHAPES = ["dynamic", "static", "static_empty"]


def _feed(model: onnx.ModelProto, dims: dict, seed: int = 0) -> dict:
    """Random values for every graph input, symbolic dims sized by ``dims``."""
    rng = np.random.default_rng(seed)
    out = {}
    for vi in model.graph.input:
        tt = vi.type.tensor_type
        shape = [dims[d.dim_param] if d.dim_param else d.dim_value for d in tt.shape.dim]
        out[vi.name] = (rng.standard_normal(shape) * 2 + 1).astype(helper.tensor_dtype_to_np_dtype(tt.elem_type))
    return out


@pytest.mark.parametrize("shapes", SHAPES)
@pytest.mark.parametrize("name,opset", [(n, o) for n, c in FUSED_RESHAPING.items() for o in c.opsets], ids=str)
def test_fused_model_matches_at_every_onnxruntime_optimization_level(name, opset, shapes):
    case = FUSED_RESHAPING[name]
    if shapes == "dynamic" and not case.dynamic:
        pytest.skip(f"target {case.target} fuses static shapes only")
    if shapes == "static_empty" and not case.empty_runs:
        pytest.skip("the original model cannot take an empty batch (the dynamic case checks the fused one's shape)")
    dims = dict(RUN_DIMS)
    if shapes == "static_empty":
        dims[case.lead[0]] = 0
    lead = case.lead if shapes == "dynamic" else tuple(dims[d] for d in case.lead)
    model = case.build(opset, lead)
    result = fusion.run(model, list(case.passes), target=case.target)
    assert sum(result.counts().values()) == 1 and count(result.model, case.op_type) == 1, _reasons(result)
    feed = _feed(model, dims)
    want = run(model, feed)
    for level in ORT_LEVELS:
        got = _run_at(result.model, feed, level)
        for w, g in zip(want, got):
            assert g.shape == w.shape and g.dtype == w.dtype, (level, g.shape, w.shape)
            w64, g64 = w.astype(np.float64), g.astype(np.float64)
            assert np.abs(w64 - g64).max(initial=0.0) <= case.tol * max(1.0, float(np.abs(w64).max(initial=0.0))), level
    if shapes != "dynamic":
        return
    # The empty batch the helper exists for: a Reshape reading 0 as "copy" would not keep it.
    empty = {**dims, case.lead[0]: 0}
    feed = _feed(model, empty)
    want = run(model, feed) if case.empty_runs else None
    for level in ORT_LEVELS:
        got = _run_at(result.model, feed, level)
        for i, g in enumerate(got):
            if want is not None:
                assert g.shape == want[i].shape and g.dtype == want[i].dtype, (level, g.shape, want[i].shape)
            else:
                declared = result.model.graph.output[i].type.tensor_type.shape.dim
                assert list(g.shape) == [empty[d.dim_param] if d.dim_param else d.dim_value for d in declared], level


# -- defect 7: a function of the same name already in the model --------------------------------


def _with_existing_function(body_nodes, opset: int = 13) -> onnx.ModelProto:
    """A LayerNorm chain next to a node calling the model's own trt.plugins::FusedLayerNorm."""
    g = G(opset=opset)
    x = g.input("x", FLOAT, ["B", "S", 64])
    x2 = g.input("x2", FLOAT, ["B", "S", 64])
    rng = np.random.default_rng(0)
    y = _layer_norm_chain(g, x, FLOAT, 64, rng)
    g.nodes[-1].output[0] = "y"
    g.nodes.append(
        helper.make_node(
            "FusedLayerNorm",
            [x2, g.const(np.ones(64, np.float32)), g.const(np.zeros(64, np.float32))],
            ["old_y"],
            name="old_node",
            domain=specs.PLUGIN_DOMAIN,
            epsilon=1e-5,
            axis=-1,
            plugin_version="1",
            plugin_namespace="fusion",
        )
    )
    g.output("y", FLOAT, ["B", "S", 64])
    g.output("old_y", FLOAT, ["B", "S", 64])
    fn = helper.make_function(
        specs.PLUGIN_DOMAIN,
        "FusedLayerNorm",
        ["X", "Scale", "B"],
        ["Y"],
        body_nodes,
        [helper.make_opsetid("", opset)],
        attributes=["epsilon", "axis"],
    )
    m = helper.make_model(
        g.graph(),
        opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid(specs.PLUGIN_DOMAIN, 1)],
        ir_version=8,
        functions=[fn],
    )
    return m


def _feed2(seed: int = 0) -> dict:
    rng = np.random.default_rng(seed)
    return {k: (rng.standard_normal([2, 3, 64]) * 3 + 1).astype(np.float32) for k in ("x", "x2")}


def test_a_different_function_of_the_same_name_is_never_used():
    # Another tool's FusedLayerNorm: X * Scale + B, no normalization.
    model = _with_existing_function([
        helper.make_node("Mul", ["X", "Scale"], ["t"]),
        helper.make_node("Add", ["t", "B"], ["Y"]),
    ])
    result = fusion.run(model, ["layernorm"])
    assert not result.fusions
    assert any("already defines function trt.plugins::FusedLayerNorm with another body" in r for r in _reasons(result)), _reasons(result)
    # Dry run says the same; the old node keeps its function.
    assert _reasons(fusion.inspect(model, ["layernorm"])) == _reasons(result)
    assert result.model is model


def test_an_identical_function_of_the_same_name_is_reused():
    use = functions.Use((("axis", -1), ("epsilon", 1e-5), ("plugin_namespace", "fusion"), ("plugin_version", "1")), FLOAT)
    ours = functions.build(specs.FUSED_LAYER_NORM, 13, [use])
    model = _with_existing_function(list(ours.node))
    result = fusion.run(model, ["layernorm"])
    assert result.counts() == {"layernorm": 1}, _reasons(result)
    assert [f.name for f in result.model.functions] == ["FusedLayerNorm"]
    assert sum(n.op_type == "FusedLayerNorm" for n in result.model.graph.node) == 2
    _same_outputs(model, result.model, _feed2(), rtol=1e-4, atol=1e-4)


# -- defect 8: what cannot carry a function body is not fused (unless asked) --------------------


@pytest.mark.parametrize("opset", [9, 10])
def test_old_opsets_refuse_custom_nodes_without_a_body(opset):
    model = _ln_model(FLOAT, opset=opset)
    result = fusion.run(model, ["layernorm"])
    assert not result.fusions
    assert any(f"function bodies need opset >= 11 (model has {opset})" in r and "functions=False" in r for r in _reasons(result)), _reasons(result)
    run(result.model, feeds(LAYER.with_(shape=("B", "S", 64))))  # still loads


def test_plugin_only_output_when_asked_says_so_loudly(caplog):
    model = _ln_model(FLOAT, opset=10)
    with caplog.at_level(logging.WARNING, logger="fusion"):
        result = fusion.run(model, ["layernorm"], functions=False)
    assert result.counts() == {"layernorm": 1}
    assert not result.model.functions
    assert any("functions=False" in w and "onnxruntime cannot run" in w for w in result.warnings), result.warnings
    assert any("onnxruntime cannot run" in r.message for r in caplog.records)


def _mixed_types_model(opset: int) -> onnx.ModelProto:
    """An fp16 and an fp32 LayerNorm: below opset 15 one body cannot cast back to both types."""
    g = G(opset=opset)
    rng = np.random.default_rng(0)
    a = g.input("a", FLOAT16, ["B", 64])
    b = g.input("b", FLOAT, ["B", 64])
    ya = _layer_norm_chain(g, a, FLOAT16, 64, rng)
    g.nodes[-1].output[0] = "ya"
    yb = _layer_norm_chain(g, b, FLOAT, 64, rng)
    g.nodes[-1].output[0] = "yb"
    g.output("ya", FLOAT16, ["B", 64])
    g.output("yb", FLOAT, ["B", 64])
    return g.model()


def _mixed_feed():
    rng = np.random.default_rng(3)
    return {"a": rng.standard_normal([4, 64]).astype(np.float16), "b": rng.standard_normal([4, 64]).astype(np.float32)}


def test_fp16_and_fp32_chains_below_opset15_fuse_only_what_one_body_serves():
    model = _mixed_types_model(13)
    result = fusion.run(model, ["layernorm"])
    assert result.counts() == {"layernorm": 1}, _reasons(result)
    assert any("nodes differ in 'T' and opset 13 cannot refer to it" in r for r in _reasons(result)), _reasons(result)
    assert not result.warnings
    _same_outputs(model, result.model, _mixed_feed(), rtol=1e-2, atol=1e-2)


def test_fp16_and_fp32_chains_from_opset15_both_fuse():
    model = _mixed_types_model(15)
    result = fusion.run(model, ["layernorm"])
    assert result.counts() == {"layernorm": 2}, _reasons(result)
    _same_outputs(model, result.model, _mixed_feed(), rtol=1e-2, atol=1e-2)


def _break_fused_models(monkeypatch):
    """Make the checker fail on any model holding a custom node (the input passes)."""
    real = passes._check

    def check(model, base_dir, full=True, light=False):
        if any(n.domain == specs.PLUGIN_DOMAIN for n in model.graph.node):
            raise onnx.checker.ValidationError("injected failure")
        real(model, base_dir, full, light)

    monkeypatch.setattr(passes, "_check", check)


def test_fuse_path_raises_when_the_output_fails_the_checker(tmp_path, monkeypatch):
    path = tmp_path / "m.onnx"
    onnx.save(_ln_model(), str(path))
    _break_fused_models(monkeypatch)
    with pytest.raises(passes.InternalError, match="injected failure"):
        fusion.fuse(str(path), NORM_FC_PASSES)


def test_fuse_inplace_raises_and_leaves_the_proto_intact(monkeypatch):
    model = _ln_model()
    before = model.SerializeToString()
    _break_fused_models(monkeypatch)
    with pytest.raises(passes.InternalError, match="injected failure"):
        fusion.fuse(model, NORM_FC_PASSES, inplace=True)
    assert model.SerializeToString() == before


def test_fuse_inplace_still_edits_in_place():
    model = _ln_model()
    fused = fusion.fuse(model, NORM_FC_PASSES, inplace=True)
    assert fused is model and count(model, "FusedLayerNorm") == 1


def _unsorted_fc_with_computed_reshape() -> onnx.ModelProto:
    """MatMul + Add, Reshape to a shape computed from its own output, then Relu; the Shape node
    is listed first (onnxruntime runs it: it sorts the graph itself)."""
    g = G(opset=13)
    rng = np.random.default_rng(0)
    x = g.input("x", FLOAT, ["M", 16])
    fc = g.op("Add", g.op("MatMul", x, g.const(rng.standard_normal((16, 24)).astype(np.float32))), g.const(rng.standard_normal(24).astype(np.float32)))
    shape = g.op("Shape", fc)
    r = g.op("Reshape", fc, shape)
    y = g.op("Relu", r)
    g.nodes[-1].output[0] = "y"
    g.output("y", FLOAT, ["M", 24])
    nodes = list(g.nodes)
    shape_node = next(n for n in nodes if n.op_type == "Shape")
    g.nodes[:] = [shape_node] + [n for n in nodes if n is not shape_node]
    return g.model(infer=False)


def test_unsorted_input_with_reshape_shape_from_the_fc_output():
    model = _unsorted_fc_with_computed_reshape()
    feed = {"x": np.random.default_rng(1).standard_normal([5, 16]).astype(np.float32)}
    result = fusion.run(model, ["gemm"])
    assert any("target shape is computed from the FC's own output" in r for r in _reasons(result)), _reasons(result)
    # The FC without its activation may fuse; whatever came out runs and computes the same.
    _same_outputs(model, result.model, feed, rtol=1e-4, atol=1e-4)
    onnx.checker.check_model(result.model, full_check=True)


def test_unsorted_input_is_fused_in_topological_order():
    g = G(opset=13)
    x = g.input("x", FLOAT, ["B", "S", 64])
    y = _layer_norm_chain(g, x, FLOAT, 64, np.random.default_rng(0))
    g.nodes[-1].output[0] = "y"
    g.output("y", FLOAT, ["B", "S", 64])
    g.nodes[:] = list(reversed(g.nodes))
    model = g.model(infer=False)
    result = fusion.run(model, ["layernorm"])
    assert result.counts() == {"layernorm": 1}, _reasons(result)
    onnx.checker.check_model(result.model, full_check=True)
    _same_outputs(model, result.model, feeds(LAYER.with_(shape=("B", "S", 64))), rtol=1e-4, atol=1e-4)


def test_unsorted_input_is_left_as_it_was_unless_inplace():
    g = G(opset=13)
    x = g.input("x", FLOAT, ["B", "S", 64])
    _layer_norm_chain(g, x, FLOAT, 64, np.random.default_rng(0))
    g.nodes[-1].output[0] = "y"
    g.output("y", FLOAT, ["B", "S", 64])
    g.nodes[:] = list(reversed(g.nodes))
    model = g.model(infer=False)
    before = model.SerializeToString()
    fused = fusion.fuse(model, passes=["layernorm"])
    assert model.SerializeToString() == before and count(fused, "FusedLayerNorm") == 1
    same = fusion.fuse(model, passes=["layernorm"], inplace=True)
    assert same is model and count(model, "FusedLayerNorm") == 1
    onnx.checker.check_model(model, full_check=True)


def _function_with_untyped_fp32_input(opset: int = 13) -> onnx.ModelProto:
    """A model-local function (untyped inside) normalizing an fp32 X in fp32, casting to fp16 last."""
    fg = G(opset=opset)
    rng = np.random.default_rng(0)
    y = _layer_norm_chain(fg, "X", FLOAT, 64, rng)
    fg.op("Cast", y, to=FLOAT16)
    fg.nodes[-1].output[0] = "Y"
    consts = [helper.make_node("Constant", [], [t.name], value=t) for t in fg.initializers]
    fn = helper.make_function("local", "Norm16", ["X"], ["Y"], consts + fg.nodes, [helper.make_opsetid("", opset)])
    g = G(opset=opset)
    x = g.input("x", FLOAT, ["B", 64])
    g.op("Norm16", x, domain="local")
    g.nodes[-1].output[0] = "y"
    g.output("y", FLOAT16, ["B", 64])
    return helper.make_model(
        g.graph(), opset_imports=[helper.make_opsetid("", opset), helper.make_opsetid("local", 1)], ir_version=8, functions=[fn]
    )


def test_untyped_input_in_a_function_is_cast_to_the_chains_widest_type():
    """x = 1e4 + N(0, 0.01): cast to fp16 first (the output's type), the deviation is gone."""
    model = _function_with_untyped_fp32_input()
    result = fusion.run(model, ["layernorm"])
    assert result.counts() == {"layernorm": 1}, _reasons(result)
    feed = _large_mean([4, 64], FLOAT, 1e4, 0.01)
    _same_outputs(model, result.model, feed, rtol=2e-3, atol=2e-3)
