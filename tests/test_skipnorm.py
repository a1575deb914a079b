"""Skip norms (issue 12): residual Add (+ bias) fused into the LayerNorm / RMSNorm after it."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import fusion

from . import norm_models as nm
from . import skip_models as sm
from .builders import FLOAT16, max_error, op_types, run

SKIP = ["skipnorm", "layernorm", "rmsnorm"]


def _fuse(s: sm.Skip, target: str = "plugin", **kw):
    return fusion.run(sm.build(s), SKIP, target=target, **kw)


def _numerics(s: sm.Skip, result, tol: float = 1e-5) -> None:
    m = sm.build(s)
    for batch in ((2, 3), (1, 1)):
        err = max_error(m, result.model, sm.feeds(s, batch))
        assert err <= (3e-2 if s.norm.dtype == FLOAT16 else tol), (batch, err)
    # A zero-size batch stays empty, in every output.
    f = sm.feeds(s, (0, 3))
    assert [a.shape for a in run(m, f)] == [b.shape for b in run(result.model, f)]


POSITIVE = {
    "post": sm.Skip(),
    "post_swapped": sm.Skip(swap=True),
    "post_bias": sm.Skip(bias=True),
    "post_bias_swapped": sm.Skip(bias=True, swap=True),
    "pre": sm.Skip(pre_norm=True),
    "pre_graph_output": sm.Skip(pre_norm=True, later_reader=False),
    "pre_bias": sm.Skip(pre_norm=True, bias=True),
    "no_affine": sm.Skip(norm=nm.LAYER.with_(gamma=False, beta=False)),
    "rms": sm.Skip(norm=nm.RMS),
    "rms_pre_bias": sm.Skip(norm=nm.RMS, pre_norm=True, bias=True, swap=True),
    "fp16_torch_casts": sm.Skip(norm=nm.FP16_TORCH),
    "fp16_llama_casts_pre": sm.Skip(norm=nm.FP16_LLAMA, pre_norm=True),
    "opset18_mul_pow": sm.Skip(norm=nm.LAYER.with_(opset=18, square="mul", normalize="pow_half")),
}


@pytest.mark.parametrize("name", POSITIVE)
def test_fuses_and_computes_the_same(name):
    s = POSITIVE[name]
    r = _fuse(s)
    rule = "skiplayernorm" if s.norm.kind == "layer" else "skiprmsnorm"
    assert r.counts() == {rule: 1}, r.near_misses
    op = "FusedSkipLayerNorm" if s.norm.kind == "layer" else "FusedSkipRMSNorm"
    node = next(n for n in r.model.graph.node if n.op_type == op)
    assert "residual" not in [n.name for n in r.model.graph.node]
    assert "add_bias" not in [n.name for n in r.model.graph.node]
    with_sum = onnx.helper.get_attribute_value(next(a for a in node.attribute if a.name == "with_sum"))
    assert with_sum == int(s.pre_norm)
    # Both outputs are named (TensorRT 8.5's parser takes "" as a name shared by every such node);
    # the sum is read outside only in pre-norm form.
    assert "" not in node.output
    read = any(node.output[1] in n.input for n in r.model.graph.node) or node.output[1] in [
        o.name for o in r.model.graph.output]
    assert read == s.pre_norm
    _numerics(s, r)


@pytest.mark.parametrize("name", ["post", "pre_bias", "rms_pre_bias"])
def test_onnx_target_standard_ops(name):
    s = POSITIVE[name]
    s = s.with_(norm=s.norm.with_(opset=17 if s.norm.kind == "layer" else 23))
    r = _fuse(s, "onnx")
    assert len(r.fusions) == 1, r.near_misses
    ops = op_types(r.model)
    assert "LayerNormalization" in ops or "RMSNormalization" in ops
    assert not any(n.domain for n in r.model.graph.node)
    _numerics(s, r)


def test_onnx_target_below_opset_17_falls_back_with_reason():
    r = fusion.inspect(sm.build(sm.Skip()), SKIP, target="onnx")
    assert not r.fusions
    assert any("LayerNormalization needs opset 17" in m.reason for m in r.near_misses)


NEGATIVE = {
    # skip of another rank: the residual Add broadcasts, the fused node would not
    "skip_broadcast_rank": (sm.Skip(skip_shape=(16,)), "the residual Add broadcasts"),
    "skip_broadcast_dim": (sm.Skip(skip_shape=(1, "S", 16)), "cannot tell they agree on axis -3"),
    "bias_wrong_shape": (sm.Skip(bias=True, bias_shape=(3, 16)), "varies along axis -2, which is not normalized"),
    "bias_overridable_unpinned": (sm.Skip(bias=True, bias_input=True, pin_bias=False),
                                  "does not pin its shape and type"),
}


@pytest.mark.parametrize("name", NEGATIVE)
def test_refused_with_reason_and_plain_norm_fuses(name):
    s, reason = NEGATIVE[name]
    r = fusion.inspect(sm.build(s), ["skipnorm"])
    assert not r.fusions
    assert any(reason in m.reason for m in r.near_misses), [m.reason for m in r.near_misses]
    # The plain rule, next in RULES, still fuses the norm alone.
    r = fusion.run(sm.build(s), SKIP)
    assert r.counts() == {"layernorm": 1}, r.near_misses
    _numerics(s, r)


def test_overridable_pinned_bias_is_passed_through():
    s = sm.Skip(bias=True, bias_input=True)
    r = _fuse(s)
    assert r.counts() == {"skiplayernorm": 1}
    node = next(n for n in r.model.graph.node if n.op_type == "FusedSkipLayerNorm")
    assert node.input[2] == "bias"
    m = sm.build(s)
    feeds = {**sm.feeds(s), "bias": np.full([16], 5.0, np.float32)}
    assert max_error(m, r.model, feeds) < 1e-5


def test_pre_bias_sum_read_elsewhere_is_not_exported():
    """With a bias, only the biased sum may be read outside: the inner sum is an intermediate."""
    s = sm.Skip(bias=True)
    m = sm.build(s)
    m.graph.node.append(onnx.helper.make_node("Neg", ["sum0"], ["n"], name="reader"))
    m.graph.output.append(onnx.helper.make_tensor_value_info("n", onnx.TensorProto.FLOAT, None))
    r = fusion.inspect(m, ["skipnorm"])
    assert not r.fusions
    assert any("is also read by Neg 'reader' outside the pattern" in x.reason for x in r.near_misses)


def test_sum_read_before_the_norm_ends_is_refused():
    s = sm.Skip(pre_norm=True, later_reader=False)
    m = sm.build(s)
    reader = onnx.helper.make_node("Neg", ["sum0"], ["n"], name="early")
    m.graph.node.insert(2, reader)
    m.graph.output.append(onnx.helper.make_tensor_value_info("n", onnx.TensorProto.FLOAT, None))
    r = fusion.inspect(m, ["skipnorm"])
    assert any("reads the sum 'sum0' before the norm ends" in x.reason for x in r.near_misses)


def test_skip_rule_is_first_and_off_for_trt_by_default():
    from fusion.patterns import RULES

    names = [r.name for r in RULES]
    assert names.index("skiplayernorm") < names.index("layernorm")
    assert names.index("skiprmsnorm") < names.index("rmsnorm")
    from fusion.passes import defaults

    assert "skipnorm" not in defaults.default_passes("trt", ["skipnorm", "layernorm"])
    r = fusion.inspect(sm.build(sm.Skip(norm=nm.LAYER.with_(shape=("B", "S", 64), eps=0.0))), target="trt")
    assert not r.fusions
    # Both rules are off: the plain norm's reason is the one reported at the root.
    assert [(m.rule, m.reason.startswith("off by default for target trt")) for m in r.near_misses] == [("layernorm", True)]


def test_trt_target_plugin_v1():
    s = sm.Skip(bias=True, norm=nm.LAYER.with_(shape=("B", "S", 64), eps=0.0))
    r = _fuse(s, "trt")
    assert r.counts() == {"skiplayernorm": 1}, r.near_misses
    node = next(n for n in r.model.graph.node if n.op_type == "CustomSkipLayerNormPluginDynamic")
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["ld"] == 64 and attrs["type_id"] == 0 and attrs["plugin_version"] == b"1"
    _numerics(s, r)


@pytest.mark.parametrize("s, reason", [
    (sm.Skip(pre_norm=True, norm=nm.LAYER.with_(shape=("B", "S", 64), eps=0.0)), "does not output it"),
    (sm.Skip(norm=nm.RMS.with_(shape=("B", "S", 64), eps=0.0)), "no skip RMSNorm plugin"),
    (sm.Skip(norm=nm.LAYER.with_(shape=("B", "S", 64))), "has no epsilon field"),
    (sm.Skip(norm=nm.FP16_TORCH.with_(shape=("B", "S", 64), eps=0.0)), "fuses fp32 only"),
])
def test_trt_target_refusals(s, reason):
    r = fusion.inspect(sm.build(s), ["skipnorm"], target="trt")
    assert not r.fusions
    assert any(reason in m.reason for m in r.near_misses), [m.reason for m in r.near_misses]


def test_skip_norm_kernel_compiles_with_nvrtc():
    """The kernel file CuPy loads (tests/gpu/test_skipnorm_kernels.py runs it on a GPU)."""
    from .test_plugins import test_kernel_sources_compile_with_nvrtc

    test_kernel_sources_compile_with_nvrtc("skipnorm")


def _cast_reader(to: int) -> onnx.ModelProto:
    """Pre-norm RMSNorm whose sum is cast (to ``to``) inside the chain, and the next residual reads the Cast."""
    s = sm.Skip(norm=nm.RMS.with_(island=onnx.TensorProto.FLOAT))
    m = sm.build(s)
    cast = next(n for n in m.graph.node if n.op_type == "Cast" and n.input[0] == "sum0")
    cast.attribute[0].i = to
    m.graph.node.append(onnx.helper.make_node("Add", [cast.output[0], "y"], ["z"], name="next_residual"))
    m.graph.output.append(onnx.helper.make_tensor_value_info("z", to, None))
    return m


def test_noop_cast_of_the_sum_read_later_is_the_sum_output():
    """HF LLaMA/T5 fp32 exports: the next residual reads hidden.to(float32), a no-op Cast of the sum."""
    m = _cast_reader(onnx.TensorProto.FLOAT)
    r = fusion.run(m, SKIP)
    assert r.counts() == {"skiprmsnorm": 1}, r.near_misses
    node = next(n for n in r.model.graph.node if n.op_type == "FusedSkipRMSNorm")
    assert node.output[1] == next(n for n in m.graph.node if n.op_type == "Cast").output[0]
    feeds = sm.feeds(sm.Skip(norm=nm.RMS))
    assert max_error(m, r.model, feeds) < 1e-5


def test_widening_cast_of_the_sum_read_later_is_refused():
    m = _cast_reader(onnx.TensorProto.DOUBLE)
    r = fusion.inspect(m, ["skipnorm"])
    assert not r.fusions
    assert any("later nodes read the sum cast to DOUBLE" in x.reason for x in r.near_misses), [x.reason for x in r.near_misses]


def test_rule_wrappers_keep_the_sum_export():
    """tune's and the defaults' wrappers must forward exported(): without it a pre-norm skip norm
    (its sum read later) would be refused as an intermediate read outside the match."""
    from fusion.passes import defaults, driver
    from fusion.tuning import ALL, _rules

    m = sm.build(sm.Skip(pre_norm=True))
    rules = _rules(driver.rules_for(["skipnorm", "layernorm"]), {"skipnorm": ALL, "layernorm": ALL})
    assert driver.run(m, rules, "plugin").counts() == {"skiplayernorm": 1}
    off = defaults.rules_for(None, "plugin")
    skip = next(r for r in off if r.name == "skiplayernorm")
    assert isinstance(skip, defaults.OffByDefault) and skip.defers_misses
    # Named, the pass runs unwrapped; unnamed, the wrapper still reports what it would fuse.
    assert fusion.run(m, ["skipnorm", "layernorm"]).counts() == {"skiplayernorm": 1}
