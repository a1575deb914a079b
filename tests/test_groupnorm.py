"""GroupNorm rule (patterns/groupnorm.py): each exporter form, SiLU, the three targets; what it
refuses and why; outputs on onnxruntime (optimizations off) against the original."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

import fusion
from fusion.rewrite import specs

from .builders import FLOAT16, run
from .groupnorm_models import GN, build, feeds

FORMS = [GN(), GN(form="reducemean"), GN(form="reducemean", opset=18), GN(form="groupnorm", opset=18),
         GN(form="groupnorm", opset=21), GN(opset=11)]  # fmt: skip


def _id(f: GN) -> str:
    return f"{f.form}_op{f.opset}" + (f"_{f.silu}" if f.silu else "")


def _close(original, fused, f: GN, batches=(2, 1), tol=2e-5):
    for batch in batches:
        a, b = run(original, feeds(f, batch)), run(fused, feeds(f, batch))
        for want, got in zip(a, b):
            assert got.shape == want.shape
            w, g = want.astype(np.float64), got.astype(np.float64)
            assert np.abs(w - g).max() <= tol * max(1.0, float(np.abs(w).max())), np.abs(w - g).max()


def _nodes(model, op_type):
    return [n for n in model.graph.node if n.op_type == op_type]


@pytest.mark.parametrize("silu", ["", "xs", "sx"])
@pytest.mark.parametrize("f", FORMS, ids=_id)
def test_plugin_target_fuses_every_form(f, silu):
    f = f.with_(silu=silu)
    m = build(f)
    r = fusion.run(m, ["groupnorm"])
    assert r.counts() == {"groupnorm": 1}, r.near_misses
    [node] = _nodes(r.model, "FusedGroupNorm")
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["num_groups"] == 4 and attrs["silu"] == int(bool(silu))
    assert abs(attrs["epsilon"] - 1e-5) < 1e-12
    assert not _nodes(r.model, "Sigmoid") and not _nodes(r.model, "InstanceNormalization")
    _close(m, r.model, f)


def test_fp16_model():
    f = GN(dtype=FLOAT16, silu="xs")
    m = build(f)
    r = fusion.run(m, ["groupnorm"])
    assert r.counts() == {"groupnorm": 1}, r.near_misses
    _close(m, r.model, f, tol=3e-3)


def test_affine_optional():
    for f in (GN(gamma=False), GN(beta=False), GN(gamma=False, beta=False, silu="xs"), GN(form="reducemean", beta=False)):
        m = build(f)
        r = fusion.run(m, ["groupnorm"])
        assert r.counts() == {"groupnorm": 1}, (f, r.near_misses)
        _close(m, r.model, f)


def _chain(a: onnx.ModelProto, b: onnx.ModelProto) -> onnx.ModelProto:
    """b's norm after a's output, in one model."""
    g = a.graph
    prefix = "b_"
    out_a = g.output[0].name
    for n in b.graph.node:
        n.input[:] = [out_a if i == "x" else prefix + i for i in n.input]
        n.output[:] = [prefix + o for o in n.output]
        n.name = prefix + n.name
    for t in b.graph.initializer:
        t.name = prefix + t.name
    g.node.extend(b.graph.node)
    g.initializer.extend(b.graph.initializer)
    del g.output[:]
    g.output.extend([helper.make_tensor_value_info(prefix + b.graph.output[0].name, onnx.TensorProto.FLOAT, ["N", 16, 5, 6])])
    g.value_info.append(helper.make_tensor_value_info(out_a, onnx.TensorProto.FLOAT, ["N", 16, 5, 6]))
    return a


def test_silu_and_plain_norms_in_one_model_share_a_body():
    """The body reads silu at run time (Where), so nodes with silu 0 and 1 share one function."""
    m = _chain(build(GN(silu="xs")), build(GN()))
    r = fusion.run(m, ["groupnorm"])
    assert r.counts() == {"groupnorm": 2}, r.near_misses
    assert sorted(helper.get_attribute_value(a) for n in _nodes(r.model, "FusedGroupNorm") for a in n.attribute
                  if a.name == "silu") == [0, 1]  # fmt: skip
    assert len(r.model.functions) == 1
    _close(m, r.model, GN())


def test_opset_11_bakes_int_fields_and_refuses_a_second_value():
    """Before opset 12 a body cannot read an INT field: num_groups is baked, so a second norm with
    other groups cannot share the body and stays, saying why."""
    m = _chain(build(GN(opset=11)), build(GN(opset=11, groups=2)))
    r = fusion.run(m, ["groupnorm"])
    assert r.counts() == {"groupnorm": 1}
    assert any("nodes differ in 'num_groups'" in x.reason for x in r.near_misses), r.near_misses
    _close(m, r.model, GN())


def test_silu_not_fused_when_the_norm_output_is_read_elsewhere():
    f = GN(silu="xs", extra_use=True)
    m = build(f)
    r = fusion.run(m, ["groupnorm"])
    assert r.counts() == {"groupnorm": 1}, r.near_misses
    [node] = _nodes(r.model, "FusedGroupNorm")
    assert {a.name: helper.get_attribute_value(a) for a in node.attribute}["silu"] == 0
    assert len(_nodes(r.model, "Sigmoid")) == 1
    _close(m, r.model, f)


def test_empty_batch_runs():
    m = build(GN(silu="xs"))
    r = fusion.run(m, ["groupnorm"])
    (y,) = run(r.model, feeds(GN(), batch=0))
    assert y.shape == (0, 16, 5, 6)


# ------------------------------------------------------------------ targets onnx and trt


def test_onnx_target():
    f = GN(form="groupnorm", opset=21, silu="xs")
    m = build(f)
    r = fusion.run(m, ["groupnorm"], target="onnx")
    assert r.counts() == {"groupnorm": 1}
    assert len(_nodes(r.model, "GroupNormalization")) == 1 and not _nodes(r.model, "ReduceMean")
    _close(m, r.model, f)
    # Below opset 21: the InstanceNormalization decomposition (from the ReduceMean form).
    f = GN(form="reducemean", opset=17, silu="sx")
    m = build(f)
    r = fusion.run(m, ["groupnorm"], target="onnx")
    assert r.counts() == {"groupnorm": 1}
    assert len(_nodes(r.model, "InstanceNormalization")) == 1 and not _nodes(r.model, "ReduceMean")
    _close(m, r.model, f)
    # The opset-18 GroupNormalization (per-group scale) becomes the decomposition with the scale repeated.
    f = GN(form="groupnorm", opset=18)
    m = build(f)
    r = fusion.run(m, ["groupnorm"], target="onnx")
    assert r.counts() == {"groupnorm": 1} and not _nodes(r.model, "GroupNormalization")
    _close(m, r.model, f)


def test_onnx_target_leaves_the_instancenorm_form():
    r = fusion.inspect(build(GN()), ["groupnorm"], target="onnx")
    assert not r.fusions
    assert "already the standard InstanceNormalization form" in r.near_misses[0].reason


def test_trt_target_static_fp32():
    f = GN(shape=(2, 16, 5, 6), silu="xs")
    m = build(f)
    r = fusion.run(m, ["groupnorm"], target="trt")
    assert r.counts() == {"groupnorm": 1}, r.near_misses
    [node] = _nodes(r.model, specs.TRT_GROUP_NORM.op_type)
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["num_groups"] == 4 and set(attrs) == {"eps", "num_groups", "plugin_version", "plugin_namespace"}
    assert len(_nodes(r.model, "Sigmoid")) == 1  # SiLU stays standard nodes after TensorRT's plugin
    _close(m, r.model, f, batches=(2,))


@pytest.mark.parametrize("level", ["ORT_ENABLE_BASIC", "ORT_ENABLE_ALL"])
@pytest.mark.parametrize("target", ["plugin", "trt"])
def test_static_fused_model_runs_on_optimizing_onnxruntime(target, level):
    """Below opset 14 the bodies keep zero-size dims through a padded Reshape.  Its pad was an Expand
    of [1, 1] to [1, 0], which onnxruntime's ExpandElimination took for a no-op: with all shapes
    static, the fused model failed to run there (Reshape {1,961} -> {2,4,120})."""
    import onnxruntime as ort

    f = GN(shape=(2, 16, 5, 6), silu="xs")
    m = build(f)
    fused = fusion.run(m, ["groupnorm"], target=target)
    assert fused.counts() == {"groupnorm": 1}
    opts = ort.SessionOptions()
    opts.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
    session = ort.InferenceSession(fused.model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    (got,), (want,) = session.run(None, feeds(f)), run(m, feeds(f))
    assert got.shape == want.shape and np.abs(got.astype(np.float64) - want).max() <= 2e-5 * max(1.0, np.abs(want).max())


@pytest.mark.parametrize("f,reason", [
    (GN(), "needs a static input shape"),
    (GN(shape=(2, 16, 5, 6), dtype=FLOAT16), "takes fp32 only"),
], ids=["dynamic", "fp16"])  # fmt: skip
def test_trt_target_refusals(f, reason):
    r = fusion.inspect(build(f), ["groupnorm"], target="trt")
    assert not r.fusions
    assert reason in r.near_misses[0].reason, r.near_misses


def test_trt_target_off_by_default():
    r = fusion.inspect(build(GN(shape=(2, 16, 5, 6))), target="trt")
    assert not r.fusions
    assert any("off by default for target trt" in m.reason for m in r.near_misses), r.near_misses


# ------------------------------------------------------------------ refused, with the reason


@pytest.mark.parametrize("f,reason", [
    (GN(groups=3, shape=("N", 15, 5, 6)).with_(shape=("N", 16, 3, 6)), "3 groups do not divide the 16 channels"),
    (GN(form="groupnorm", opset=18, gamma_shape=(16,)), "not one value per group [4] (a per-channel scale"),
    (GN(form="groupnorm", opset=21, gamma_shape=(4,)), "not one value per channel [16]"),
    (GN(form="reducemean", eps_overridable=True), "is an initializer that is also a graph input"),
    (GN(form="reducemean", mean_axes=(1, 2)), "not its last axis only"),
    (GN(in_scale=2.0), "its scale is not 1 for each of the 4 groups"),
], ids=["groups_not_dividing", "op18_per_channel_scale", "op21_per_group_scale", "overridable_eps",
        "wrong_axes", "instancenorm_scale"])  # fmt: skip
def test_refused_with_reason(f, reason):
    m = build(f)
    r = fusion.inspect(m, ["groupnorm"])
    assert not r.fusions
    assert any(reason in x.reason for x in r.near_misses), [x.reason for x in r.near_misses]


def test_layernorm_rules_leave_groupnorm_alone():
    """Nothing in a GroupNorm fixture is another rule's (the ReduceMean form's inner chain is a
    LayerNorm of the view, which the groupnorm pass claims first when both run)."""
    m = build(GN(form="reducemean", silu="xs"))
    r = fusion.run(m, ["layernorm", "rmsnorm", "groupnorm"])
    assert r.counts() == {"groupnorm": 1}, r.counts()


def test_gamma_varying_along_spatial_stays_outside():
    """γ [C, H, 1] is no per-channel affine: the norm fuses without it (its reason is the
    near-miss at the Add), and the Mul and Add stay after the fused node."""
    f = GN(gamma_shape=(16, 5, 1))
    m = build(f)
    r = fusion.run(m, ["groupnorm"])
    assert r.counts() == {"groupnorm": 1}
    [node] = _nodes(r.model, "FusedGroupNorm")
    assert [n.op_type for n in r.model.graph.node if node.output[0] in n.input] == ["Mul"]
    _close(m, r.model, f)
    reasons = [x.reason for x in fusion.inspect(m, ["groupnorm"]).near_misses]
    assert any("varies along axis 2" in x for x in reasons), reasons


def test_symbolic_channels_refused():
    """C symbolic in x's shape, nothing forces it: a C of 1 would broadcast γ in the original."""
    f = GN(shape=("N", "C", 5, 6))
    r = fusion.inspect(build(f), ["groupnorm"])
    assert not r.fusions
    assert any("the channel count of 'x' ('C') is not static" in x.reason for x in r.near_misses), r.near_misses


def test_channels_and_rank_proven_through_conv():
    """x = Conv(input), nothing annotated.  (Where ONNX shape inference loses the rank, after a
    Reshape(·, Shape(x)), the Conv's weight proves rank and channels: the second and third
    GroupNorm of every resnet_gn fixture, tests/test_groupnorm_fixtures.py.)"""
    from .builders import G

    g = G(13)
    inp = g.input("inp", onnx.TensorProto.FLOAT, ["N", 3, 5, 6])
    x = g.op("Conv", inp, g.const(np.random.default_rng(0).standard_normal((16, 3, 1, 1)).astype(np.float32)))
    v = g.op("Reshape", x, g.const(np.array([0, 4, -1], np.int64)))
    n = g.op("InstanceNormalization", v, g.const(np.ones(4, np.float32)), g.const(np.zeros(4, np.float32)), epsilon=1e-5)
    y = g.op("Reshape", n, g.op("Shape", x))
    y = g.op("Add", g.op("Mul", y, g.const(np.full((16, 1, 1), 1.5, np.float32))), g.const(np.full((16, 1, 1), 0.5, np.float32)))
    y = g.op("Mul", y, g.op("Sigmoid", y))
    g.output(y, onnx.TensorProto.FLOAT)
    m = g.model(infer=False)
    r = fusion.run(m, ["groupnorm"])
    assert r.counts() == {"groupnorm": 1}, r.near_misses
    feeds = {"inp": np.random.default_rng(1).standard_normal((2, 3, 5, 6)).astype(np.float32)}
    a, b = run(m, feeds)[0], run(r.model, feeds)[0]
    assert np.abs(a - b).max() < 1e-5


@pytest.mark.parametrize("opset", [18, 21])
def test_overridable_scale_is_passed_through_not_baked(opset):
    """γ/β initializers that are also graph inputs: fed values still work (opset 18 repeats the
    per-group values per channel with Reshape/Expand in the graph, never by reading them)."""
    f = GN(form="groupnorm", opset=opset, silu="xs")
    m = build(f)
    for name in ("gamma", "beta"):
        init = next(t for t in m.graph.initializer if t.name == name)
        m.graph.input.append(helper.make_tensor_value_info(name, init.data_type, list(init.dims)))
    r = fusion.run(m, ["groupnorm"])
    assert r.counts() == {"groupnorm": 1}, r.near_misses
    n = 4 if opset == 18 else 16
    feed = {**feeds(f), "gamma": np.linspace(-1, 2, n).astype(np.float32), "beta": np.linspace(1, -1, n).astype(np.float32)}
    a, b = run(m, feed)[0], run(r.model, feed)[0]
    assert np.abs(a - b).max() < 1e-5
