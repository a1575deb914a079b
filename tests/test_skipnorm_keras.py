"""Skip norms over TensorFlow's LayerNorm (issue 12): the residual Add in front of Keras's
x·s + ((−mean)·s + β), whose input, the sum, is read by the mean, the variance and x·s."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import fusion
from fusion.patterns import layernorm, skipnorm

from .builders import FLOAT, G, max_error, run

H = 32
SKIP = ["skipnorm", "layernorm", "rmsnorm"]


def _keras(pre_norm=False, bias=False, skip_shape=None, offset="keras3", sum_reader=None, opset=13):
    """Add(a, b) (+ bias) → Keras's LayerNorm, with a GlobalAveragePool mean as tf2onnx writes it.

    ``pre_norm``: the sum is the next residual too; ``sum_reader``: "early" (a node reading the
    sum comes before the norm in node order), "inner" (the bias-free sum a + b is read outside)."""
    rng = np.random.default_rng(0)
    g = G(opset)
    a = g.input("a", FLOAT, ["B", "S", H])
    b = g.input("b", FLOAT, list(skip_shape or ["B", "S", H]))
    s0 = g.op("Add", a, b, name="residual")
    s = g.op("Add", s0, g.const(rng.standard_normal(H).astype(np.float32)), name="add_bias") if bias else s0
    early = g.op("Relu", s) if sum_reader == "early" else None
    inner = g.op("Sigmoid", s0) if sum_reader == "inner" else None
    mean = g.op("GlobalAveragePool", s)
    d = g.op("Sub", s, mean)
    var = g.op("GlobalAveragePool", g.op("Mul", d, d))
    gamma = g.const((rng.standard_normal(H) * 0.3 + 1).astype(np.float32))
    beta = g.const(rng.standard_normal(H).astype(np.float32))
    scale = g.op("Mul", g.op("Reciprocal", g.op("Sqrt", g.op("Add", var, g.const(1e-3)))), gamma)
    if offset == "keras3":  # (−mean)·s + β
        off = g.op("Add", g.op("Mul", g.op("Neg", mean), scale), beta)
    else:  # tf2onnx / keras2onnx: β − mean·s
        off = g.op("Sub", beta, g.op("Mul", mean, scale))
    y = g.op("Add", g.op("Mul", s, scale), off, name="norm_out")
    g.output(y, FLOAT, ["B", "S", H])
    if pre_norm:
        g.output(g.op("Add", s, y, name="next_residual"), FLOAT, ["B", "S", H])
    for extra in (early, inner):
        if extra is not None:
            g.output(extra, FLOAT, ["B", "S", H])
    return g.model()


def _feeds(batch=(2, 5), skip_shape=None, seed=0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    shape = [*batch, H]
    bshape = shape if skip_shape is None else [d if isinstance(d, int) else shape[i] for i, d in enumerate(skip_shape)]
    return {"a": (rng.standard_normal(shape) * 3 + 1).astype(np.float32),
            "b": rng.standard_normal(bshape).astype(np.float32)}


def _numbers(model, result, skip_shape=None) -> None:
    for batch in ((2, 5), (1, 1)):
        assert max_error(model, result.model, _feeds(batch, skip_shape)) < 1e-4, batch
    empty = _feeds((0, 3), skip_shape)
    assert [x.shape for x in run(model, empty)] == [y.shape for y in run(result.model, empty)]


def _reasons(result) -> list[str]:
    return [m.reason for m in result.near_misses]


POSITIVE = {
    "post": {},
    "post_bias": dict(bias=True),
    "post_tf_offset": dict(offset="tf"),
    "pre": dict(pre_norm=True),
    "pre_bias": dict(pre_norm=True, bias=True),
}


@pytest.mark.parametrize("name", POSITIVE)
def test_residual_add_before_keras_layernorm_fuses(name):
    kw = POSITIVE[name]
    model = _keras(**kw)
    r = fusion.run(model, SKIP)
    onnx.checker.check_model(r.model, full_check=True)
    assert r.counts() == {"skiplayernorm": 1}, _reasons(r)
    node = next(n for n in r.model.graph.node if n.op_type == "FusedSkipLayerNorm")
    assert [n.op_type for n in r.model.graph.node if n.op_type not in ("FusedSkipLayerNorm",)] == (
        ["Add"] if kw.get("pre_norm") else [])  # only the next residual is left
    with_sum = onnx.helper.get_attribute_value(next(a for a in node.attribute if a.name == "with_sum"))
    assert with_sum == int(bool(kw.get("pre_norm")))
    _numbers(model, r)


@pytest.mark.parametrize("pre_norm", [False, True])
def test_onnx_target_writes_add_and_layernormalization(pre_norm):
    model = _keras(pre_norm=pre_norm, opset=17)
    r = fusion.run(model, SKIP, target="onnx")
    assert r.counts() == {"skiplayernorm": 1}, _reasons(r)
    ops = sorted(n.op_type for n in r.model.graph.node)
    assert ops == sorted(["Add", "LayerNormalization"] + (["Add"] if pre_norm else []))
    _numbers(model, r)


NEGATIVE = {
    "skip_broadcast_rank": (dict(skip_shape=(H,)), "the residual Add broadcasts"),
    "skip_broadcast_dim": (dict(skip_shape=(1, "S", H)), "cannot tell they agree on axis -3"),
    "sum_read_before_the_norm": (dict(pre_norm=True, sum_reader="early"), "before the norm ends in node order"),
    "bias_free_sum_read_outside": (dict(bias=True, sum_reader="inner"), "is also read by Sigmoid"),
}


@pytest.mark.parametrize("name", NEGATIVE)
def test_refused_with_reason_and_the_layernorm_fuses_alone(name):
    kw, reason = NEGATIVE[name]
    model = _keras(**kw)
    r = fusion.inspect(model, ["skipnorm"])
    assert not r.fusions
    assert any(reason in m for m in _reasons(r)), _reasons(r)
    r = fusion.run(model, SKIP)
    assert r.counts() == {"layernorm": 1}, _reasons(r)
    _numbers(model, r, kw.get("skip_shape"))


def test_trt_target_refuses_keras_eps_with_reason():
    """CustomSkipLayerNormPluginDynamic adds no epsilon: Keras's default 1e-3 is refused."""
    r = fusion.inspect(_keras(), ["skipnorm"], target="trt")
    assert not r.fusions
    assert any("has no epsilon field" in m for m in _reasons(r)), _reasons(r)


def test_the_skip_pattern_is_the_plain_rules_over_the_sum():
    """over_sum copies the TensorFlow LayerNorm pattern with the residual in x's place, keeping
    its sharing: the input reached from the mean, the variance and x·s is one pattern object."""
    p = skipnorm.TF_LAYER_RULE.pattern
    seen: dict[int, int] = {}

    visited: set[int] = set()

    def walk(q):
        if id(q) in visited and id(q) != id(skipnorm.SUM):
            return
        visited.add(id(q))
        if id(q) == id(skipnorm.SUM):
            seen[id(q)] = seen.get(id(q), 0) + 1
            return
        if id(q) == id(layernorm.x):
            raise AssertionError("the plain rule's input Var is left in the skip pattern")
        for c in getattr(q, "inputs", ()) + getattr(q, "options", ()) + ((q.inner,) if hasattr(q, "inner") else ()):
            walk(c)

    walk(p)
    assert seen[id(skipnorm.SUM)] >= 3  # the mean, the variance, x·s read the one sum
    assert skipnorm.TF_LAYER_RULE.root_ops == layernorm.TF_RULE.root_ops
