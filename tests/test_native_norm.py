"""Native norms (patterns/native.py): an exporter's own LayerNormalization / RMSNormalization
becomes our plugin node on the plugin and trt targets (TensorRT 8.5 cannot import it), with the
residual Add in front of it as a skip norm; target onnx leaves it as it is."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import onnx
import pytest
from onnx import helper

import fusion

from .builders import DOUBLE, FLOAT, FLOAT16, NP, G, max_error, op_types

SKIP = ["skipnorm", "layernorm", "rmsnorm"]


@dataclass(frozen=True)
class Native:
    kind: str = "layer"  # "layer": LayerNormalization (opset 17); "rms": RMSNormalization (opset 23)
    dtype: int = FLOAT
    shape: tuple = ("B", "S", 16)
    axis: int | None = None  # None: the default (-1)
    beta: bool = True
    stash_type: int | None = None
    eps: float = 1e-5
    residual: bool = False  # x = Add(a, b) (+ bias) in front of the norm
    bias: bool = False
    pre_norm: bool = False  # a later node reads the sum too
    skip_shape: tuple | None = None  # another shape for b (broadcasting)
    extra_outputs: str = ""  # "mean": Mean is a graph output; "inv": InvStdDev read by a node
    gamma_input: bool = False  # γ a plain graph input (not a constant)
    infer: bool = True

    def with_(self, **kw) -> "Native":
        return replace(self, **kw)


def build(n: Native, seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    g = G(opset=17 if n.kind == "layer" else 23)
    dt = NP.get(n.dtype, np.float32)
    shape = list(n.shape)
    axis = -1 if n.axis is None else n.axis
    rank = len(shape)
    norm_shape = shape[(axis if axis < 0 else axis - rank):]
    x = g.input("a", n.dtype, shape)
    if n.residual:
        x = g.op("Add", x, g.input("b", n.dtype, list(n.skip_shape or shape)), name="residual")
        if n.bias:
            x = g.op("Add", x, g.const(rng.standard_normal(norm_shape).astype(dt)), name="add_bias")
    if n.gamma_input:
        gamma = g.input("gamma", n.dtype, norm_shape)
    else:
        gamma = g.const((rng.standard_normal(norm_shape) + 1).astype(dt))
    inputs = [x, gamma]
    if n.kind == "layer" and n.beta:
        inputs.append(g.const(rng.standard_normal(norm_shape).astype(dt)))
    attrs = {"epsilon": n.eps}
    if n.axis is not None:
        attrs["axis"] = n.axis
    if n.stash_type is not None:
        attrs["stash_type"] = n.stash_type
    op = "LayerNormalization" if n.kind == "layer" else "RMSNormalization"
    outs = 3 if n.extra_outputs else 1
    y = g.op(op, *inputs, n_out=outs, name="norm", **attrs)
    if outs > 1:
        y, mean, inv = y
        if n.extra_outputs == "mean":
            g.output(mean, FLOAT, None)
        else:
            g.output(g.op("Mul", inv, g.const(np.array(2.0, np.float32))), FLOAT, None)
    g.output(y, n.dtype, shape)
    if n.pre_norm:
        g.output(g.op("Add", x, y, name="next_residual"), n.dtype, shape)
    return g.model(infer=n.infer)


def feeds(n: Native, batch=(2, 3), seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    it = iter(batch)
    shape = [d if isinstance(d, int) else next(it) for d in n.shape]
    dt = NP[n.dtype]
    out = {"a": (rng.standard_normal(shape) * 3 + 1).astype(dt)}
    if n.residual:
        out["b"] = rng.standard_normal(shape).astype(dt)
    return out


def _numerics(n: Native, result) -> None:
    m = build(n)
    for batch in ((2, 3), (1, 1)):
        err = max_error(m, result.model, feeds(n, batch))
        assert err <= (3e-2 if n.dtype == FLOAT16 else 2e-5), (batch, err)


PLAIN = {
    "ln": Native(),
    "ln_no_beta": Native(beta=False),
    "ln_two_trailing_axes": Native(axis=-2, shape=("B", 4, 16)),
    "ln_positive_axis": Native(axis=1, shape=("B", 4, 16)),
    "ln_fp16_stash_float": Native(dtype=FLOAT16),
    "ln_eps_default": Native(eps=1e-5),
    "rms": Native(kind="rms"),
    "rms_fp16": Native(kind="rms", dtype=FLOAT16, eps=1e-6),
}


@pytest.mark.parametrize("name", PLAIN)
def test_native_norm_becomes_the_plugin_and_computes_the_same(name):
    n = PLAIN[name]
    r = fusion.run(build(n), ["layernorm", "rmsnorm"])
    rule = "native_layernorm" if n.kind == "layer" else "native_rmsnorm"
    assert r.modified and r.counts() == {rule: 1}, r.near_misses
    ops = op_types(r.model)
    assert "LayerNormalization" not in ops and "RMSNormalization" not in ops
    node = next(x for x in r.model.graph.node if x.domain == "trt.plugins")
    assert node.op_type == ("FusedLayerNorm" if n.kind == "layer" else "FusedRMSNorm")
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["axis"] == (-1 if n.axis is None else -(len(n.shape) - n.axis if n.axis >= 0 else -n.axis))
    assert attrs["epsilon"] == pytest.approx(n.eps)
    _numerics(n, r)


def test_trt_target_uses_tensorrts_layernorm_plugin():
    n = Native(shape=("B", "S", 64))
    r = fusion.run(build(n), ["layernorm"], target="trt")
    assert r.counts() == {"native_layernorm": 1}, r.near_misses
    assert "LayerNorm" in op_types(r.model) and "LayerNormalization" not in op_types(r.model)
    _numerics(n, r)


def test_trt_target_keeps_the_plain_rules_refusals():
    r = fusion.inspect(build(Native()), ["layernorm"], target="trt")  # 16 wide
    assert [m.reason for m in r.near_misses] == [
        "target trt: TensorRT's LayerNorm plugin is inaccurate below 48 normalized elements (this norm has 16)"]
    r = fusion.inspect(build(Native(kind="rms")), ["rmsnorm"], target="trt")
    assert [m.reason for m in r.near_misses] == ["target trt: TensorRT ships no RMSNorm plugin"]


@pytest.mark.parametrize("passes", [["layernorm", "rmsnorm"], SKIP])
def test_target_onnx_leaves_native_norms_alone(passes):
    for n in (Native(), Native(kind="rms"), Native(residual=True, pre_norm=True)):
        r = fusion.run(build(n), passes, target="onnx")
        assert not r.modified and not r.fusions and not r.near_misses


def test_off_by_default_on_plugin_says_how_to_opt_in():
    """Defaults unchanged: the layernorm pass is off on plugin, so a native node is a near-miss."""
    r = fusion.run(build(Native()))
    assert not r.modified
    assert [m.rule for m in r.near_misses] == ["native_layernorm"]
    assert "off by default for target plugin" in r.near_misses[0].reason


def test_cli_passes_layernorm_fuses_an_opset17_model(tmp_path):
    from fusion.cli.commands import main

    src, out = tmp_path / "m.onnx", tmp_path / "fused.onnx"
    onnx.save(build(Native()), src)
    assert main(["fuse", str(src), "-o", str(out), "--passes", "layernorm"]) == 0
    assert "FusedLayerNorm" in op_types(onnx.load(str(out)))


REFUSED = {
    "mean_output_read": (Native(extra_outputs="mean"), "(Mean/InvStdDev) is a graph output"),
    "inv_std_read": (Native(extra_outputs="inv"), "(Mean/InvStdDev) is read by Mul"),
    "positive_axis_rank_unknown": (Native(axis=2, infer=False, shape=None), "counted from the front, and the input's "
                                   "rank is unknown"),
    "stash_bf16_for_fp32": (Native(stash_type=onnx.TensorProto.BFLOAT16, infer=False), "computes its statistics in "
                            "BFLOAT16 (stash_type), neither FLOAT nor the input's type"),
    "fp64_model": (Native(dtype=DOUBLE, stash_type=DOUBLE), "target plugin: the model is DOUBLE"),
    "gamma_not_constant": (Native(gamma_input=True), "Scale: 'gamma' is not a constant"),
}


@pytest.mark.parametrize("name", REFUSED)
def test_refused_with_reason(name):
    n, reason = REFUSED[name]
    r = fusion.inspect(_model(n), ["layernorm"])
    assert not r.fusions
    assert len(r.near_misses) == 1 and reason in r.near_misses[0].reason, [m.reason for m in r.near_misses]


def _model(n: Native) -> onnx.ModelProto:
    if n.shape is not None:
        return build(n)
    m = build(n.with_(shape=("B", "S", 16)))  # then the input's shape erased
    m.graph.input[0].type.tensor_type.ClearField("shape")
    return m


SKIPS = {
    "post": Native(residual=True),
    "post_bias": Native(residual=True, bias=True),
    "pre": Native(residual=True, pre_norm=True),
    "pre_bias_no_beta": Native(residual=True, bias=True, pre_norm=True, beta=False),
    "fp16_pre": Native(residual=True, pre_norm=True, dtype=FLOAT16),
    "rms_pre": Native(kind="rms", residual=True, pre_norm=True),
}


@pytest.mark.parametrize("name", SKIPS)
def test_residual_add_fuses_into_a_skip_norm(name):
    n = SKIPS[name]
    r = fusion.run(build(n), SKIP)
    rule = "native_skiplayernorm" if n.kind == "layer" else "native_skiprmsnorm"
    assert r.counts() == {rule: 1}, r.near_misses
    node = next(x for x in r.model.graph.node if x.domain == "trt.plugins")
    assert node.op_type == ("FusedSkipLayerNorm" if n.kind == "layer" else "FusedSkipRMSNorm")
    assert not {"residual", "add_bias", "norm"} & {x.name for x in r.model.graph.node}
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["with_sum"] == int(n.pre_norm)
    _numerics(n, r)


def test_trt_target_skip_plugin():
    n = Native(residual=True, bias=True, shape=("B", "S", 64), eps=0.0)
    r = fusion.run(build(n), ["skipnorm"], target="trt")
    assert r.counts() == {"native_skiplayernorm": 1}, r.near_misses
    assert "CustomSkipLayerNormPluginDynamic" in op_types(r.model)
    _numerics(n, r)


SKIP_REFUSED = {
    "broadcasting_add": (Native(residual=True, skip_shape=(1, "S", 16)), "cannot tell they agree on axis -3"),
    "mean_output_read": (Native(residual=True, extra_outputs="mean"), "(Mean/InvStdDev) is a graph output"),
    "trt_eps": (Native(residual=True, shape=("B", "S", 64)), "has no epsilon field"),
}


@pytest.mark.parametrize("name", SKIP_REFUSED)
def test_skip_refused_with_reason_and_plain_norm_fuses(name):
    n, reason = SKIP_REFUSED[name]
    target = "trt" if name.startswith("trt") else "plugin"
    r = fusion.inspect(build(n), ["skipnorm"], target=target)
    assert not r.fusions
    assert len(r.near_misses) == 1 and reason in r.near_misses[0].reason, [m.reason for m in r.near_misses]
    if "Mean" not in reason:
        assert fusion.run(build(n), SKIP, target=target).counts() == {"native_layernorm": 1}
