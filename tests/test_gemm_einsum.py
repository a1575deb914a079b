"""The FC rule for a dense layer written as Einsum (patterns/einsum_fc.py, issue 13).

tf2onnx leaves some Keras EinsumDense layers as ``Einsum(x, W)`` (opset 13's attention output
projection ``abcd,cde->abe``).  An equation that is exactly x @ W.reshape(C, N), with an
optional bias Add over the kept axes, fuses on every target; every other form is refused with
the reason.  Every fused model runs on onnxruntime (FusedFC through its function body) against
the original.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import fusion

from .builders import FLOAT, FLOAT16, NP, G, max_error, run

TOL = {FLOAT: 1e-4, FLOAT16: 2e-2}
DIMS = {"a": 2, "b": 3, "c": 8, "d": 4, "e": 5}  # x's and W's axis sizes by subscript; a, b dynamic
DYNAMIC = {"a": "B", "b": "S"}


def _shape(subscripts: str) -> tuple[int, ...]:
    return tuple(DIMS[s] for s in subscripts)


def build(
    equation: str,
    bias_shape: tuple[int, ...] | None = None,
    opset: int = 13,
    dtype: int = FLOAT,
    weight_first: bool = False,
    computed_weight: bool = False,
    seed: int = 0,
) -> onnx.ModelProto:
    """``Einsum(x, W)`` (+ Add(bias)) with x, W shaped by ``equation``'s subscripts."""
    rng = np.random.default_rng(seed)
    np_t = NP[dtype]
    terms = equation.split("->")[0].split(",")
    xs, ws = (terms[1], terms[0]) if weight_first else (terms[0], terms[1])
    g = G(opset)
    x = g.input("x", dtype, [DYNAMIC.get(s, DIMS[s]) for s in xs.replace("...", "ab")])
    w = g.const((rng.standard_normal(_shape(ws)) / np.sqrt(8)).astype(np_t), name="W")
    if computed_weight:
        w = g.op("Relu", w)
    y = g.op("Einsum", *((w, x) if weight_first else (x, w)), equation=equation)
    if bias_shape is not None:
        y = g.op("Add", y, g.const(rng.standard_normal(bias_shape).astype(np_t), name="bias"))
    g.nodes[-1].output[0] = "y"
    g.output("y", dtype, None)
    return g.model()


def feeds(equation: str, dtype: int = FLOAT, seed: int = 1, weight_first: bool = False, grow: int = 0) -> dict:
    terms = equation.split("->")[0].split(",")
    xs = terms[1] if weight_first else terms[0]
    shape = [DIMS[s] + (grow if s in DYNAMIC else 0) for s in xs]
    return {"x": np.random.default_rng(seed).standard_normal(shape).astype(NP[dtype])}


def reasons(result) -> list[str]:
    return [m.reason for m in result.near_misses]


def _node(model: onnx.ModelProto, op_type: str) -> onnx.NodeProto:
    return next(n for n in model.graph.node if n.op_type == op_type)


def _init(model: onnx.ModelProto, name: str) -> np.ndarray:
    return numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == name))


# -- positive ----------------------------------------------------------------------------------

POSITIVE = {
    # name: (equation, bias shape, opset, dtype, weight first)
    "keras_qkv_opset13": ("abc,cde->abde", (4, 5), 13, FLOAT, False),
    "keras_qkv_opset17": ("abc,cde->abde", (4, 5), 17, FLOAT, False),
    "keras_qkv_opset12": ("abc,cde->abde", (4, 5), 12, FLOAT, False),
    "keras_out_opset13": ("abcd,cde->abe", (5,), 13, FLOAT, False),
    "keras_out_opset17_no_bias": ("abcd,cde->abe", None, 17, FLOAT, False),
    "dense_no_bias": ("abc,cd->abd", None, 13, FLOAT, False),
    "dense_bias_1x1xN": ("abc,cd->abd", (1, 1, 4), 13, FLOAT, False),
    "linear_weight_NK": ("abc,dc->abd", (4,), 13, FLOAT, False),  # torch F.linear: W [N, K]
    "kept_axes_permuted": ("abc,ecd->abde", (4, 5), 13, FLOAT, False),
    "bias_broadcast_over_heads": ("abc,cde->abde", (5,), 13, FLOAT, False),
    "bias_scalar": ("abc,cde->abde", (), 13, FLOAT, False),
    "bias_broadcast_over_last": ("abc,cde->abde", (4, 1), 13, FLOAT, False),
    "weight_first": ("cde,abc->abde", (4, 5), 13, FLOAT, True),
    "implicit_output": ("abc,cd", (4,), 13, FLOAT, False),  # -> "abd"
    "fp16": ("abc,cde->abde", (4, 5), 13, FLOAT16, False),
}
CASES = [(name, t) for name in sorted(POSITIVE) for t in ("plugin", "trt", "onnx")]


def _kn(equation: str, w: np.ndarray, weight_first: bool) -> np.ndarray:
    """W as the [C, N] matrix the Einsum multiplies by (what the fold must give)."""
    terms = equation.split("->")[0].split(",")
    xs, ws = (terms[1], terms[0]) if weight_first else (terms[0], terms[1])
    contracted = "".join(s for s in xs if s in ws)
    kept = "".join(s for s in (equation.split("->")[1] if "->" in equation else sorted(set(xs + ws) - set(contracted))) if s in ws)
    moved = np.transpose(w, [ws.index(s) for s in contracted + kept])
    return moved.reshape(int(np.prod(_shape(contracted))), -1)


@pytest.mark.parametrize(("name", "target"), CASES, ids=[f"{n}-{t}" for n, t in CASES])
def test_dense_einsum_fuses_and_matches(name, target):
    equation, bias, opset, dtype, first = POSITIVE[name]
    model = build(equation, bias, opset, dtype, first)
    result = fusion.run(model, ["gemm"], target=target)
    assert result.counts() == {"gemm": 1}, reasons(result)
    fused = result.model
    assert "Einsum" not in {n.op_type for n in fused.graph.node}
    w = _init(model, "W")
    w_kn = _kn(equation, w, first)
    matrix = w.ndim == 2  # read as it is, never copied; a kernel of higher rank is folded
    if target == "plugin":
        node = _node(fused, "FusedFC")
        tw = next(a.i for a in node.attribute if a.name == "transpose_weight")
        assert tw == int(name == "linear_weight_NK")
        np.testing.assert_array_equal(_init(fused, node.input[1]), w_kn.T if tw else w_kn)
        assert (node.input[1] == "W") == matrix and len(fused.graph.initializer) <= len(model.graph.initializer) + 2
    elif target == "trt":
        node = _node(fused, "CustomFCPluginDynamic")
        baked = numpy_helper.to_array(next(a.t for a in node.attribute if a.name == "W"))
        np.testing.assert_array_equal(baked, w_kn.astype(np.float32))
    else:
        gemm = _node(fused, "Gemm")
        tw = next((a.i for a in gemm.attribute if a.name == "transB"), 0)
        np.testing.assert_array_equal(_init(fused, gemm.input[1]), w_kn.T if tw else w_kn)
        assert (gemm.input[1] == "W") == matrix
    if target != "onnx" and not matrix:
        notes = [n for f in result.fusions for n in f.notes]
        assert any("kernel of Einsum" in n and f"folded when fusing to {list(w_kn.shape)}" in n for n in notes), notes
    for seed, grow in ((1, 0), (2, 3)):  # the dynamic B, S at other sizes too
        assert max_error(model, fused, feeds(equation, dtype, seed, first, grow)) < TOL[dtype]


def test_output_matches_the_matmul_path_exactly():
    """The Einsum's FC computes what the same layer written as MatMul + Add fuses to, bit for bit."""
    model = build("abc,cde->abde", (4, 5))
    w, b = _init(model, "W"), _init(model, "bias")
    g = G(13)
    x = g.input("x", FLOAT, ["B", "S", 8])
    y = g.op("Add", g.op("MatMul", x, g.const(w.reshape(8, 20), name="W")), g.const(b.reshape(20), name="bias"))
    g.op("Reshape", y, g.const(np.array([0, 0, 4, 5], np.int64)))
    g.nodes[-1].output[0] = "y"
    g.output("y", FLOAT, None)
    matmul = g.model()
    got = run(fusion.run(model, ["gemm"]).model, feeds("abc,cde->abde"))[0]
    want = run(fusion.run(matmul, ["gemm"]).model, feeds("abc,cde->abde"))[0]
    np.testing.assert_array_equal(got, want)


def test_plugin_graph_is_fc_between_reshapes():
    """abcd,cde->abe: x Reshape'd to [B, S, C] first; abc,cde->abde: the output to [B, S, d, e]."""
    out = fusion.run(build("abcd,cde->abe", (5,)), ["gemm"]).model
    assert [n.op_type for n in out.graph.node] == ["Reshape", "FusedFC"]
    assert _init(out, out.graph.node[0].input[1]).tolist() == [0, 0, 32]
    qkv = fusion.run(build("abc,cde->abde", (4, 5)), ["gemm"]).model
    assert [n.op_type for n in qkv.graph.node] == ["FusedFC", "Reshape"]
    assert _init(qkv, qkv.graph.node[1].input[1]).tolist() == [0, 0, 4, 5]
    assert qkv.graph.node[1].output[0] == "y"


def test_zero_size_batch():
    """0 in a Reshape target copies x's dim: an empty batch stays empty, of the right shape."""
    model = build("abc,cde->abde", (4, 5))
    fused = fusion.run(model, ["gemm"]).model
    x = {"x": np.zeros((0, 3, 8), np.float32)}
    assert run(fused, x)[0].shape == run(model, x)[0].shape == (0, 3, 4, 5)


# -- negative ----------------------------------------------------------------------------------

NEGATIVE = {
    # name: (equation, build options, reason fragments)
    "attention_scores": ("abc,adc->abd", {"computed_weight": True}, ("both operands are computed",)),
    "contracts_non_last_axis": ("acb,cd->abd", {}, ("contracts 'c' of x 'acb', not x's last axes",)),
    "batch_axis_in_weight": ("abc,acd->abd", {}, ("weight axis 'a' is also an axis of x and of the output (a batch axis)",)),
    "ellipsis": ("...c,cd->...d", {}, ("has an ellipsis",)),
    "diagonal": ("abcc,cd->abd", {}, ("repeats 'c' in 'abcc' (a diagonal or trace)",)),
    "x_axis_summed": ("abc,cd->ad", {}, ("x's axis 'b' is summed away",)),
    "weight_axis_summed": ("abc,cde->abd", {}, ("weight axis 'e' is summed away",)),
    "output_out_of_order": ("abc,cd->bad", {}, ("output 'bad' is not x's leading axes 'ab' then the weight's kept axes 'd'",)),
    "outer_product": ("ab,cd->abcd", {}, ("no axis is contracted (an outer product)",)),
}


@pytest.mark.parametrize("name", sorted(NEGATIVE))
def test_einsum_is_refused_with_reason(name):
    equation, options, fragments = NEGATIVE[name]
    model = build(equation, **options)
    for target in ("plugin", "trt", "onnx"):
        result = fusion.run(model, ["gemm"], target=target)
        assert not result.fusions and not result.modified, (target, result.counts())
        assert any(all(f in r for f in fragments) for r in reasons(result)), (target, reasons(result))


BIAS_LEFT = {
    # name: (equation, bias shape, reason fragments)
    "bias_varies_along_rows": ("abc,cde->abde", (3, 4, 5), ("varies along the input's axes",)),
    "bias_grows_output": ("abc,cd->abd", (1, 1, 1, 4), ("more than the output's 3: the output would grow",)),
}


@pytest.mark.parametrize("name", sorted(BIAS_LEFT))
def test_add_that_is_no_bias_stays(name):
    """The Add is refused with the reason; the Einsum fuses alone, the Add after it (as MatMul's)."""
    equation, bias, fragments = BIAS_LEFT[name]
    model = build(equation, bias)
    result = fusion.run(model, ["gemm"])
    assert result.counts() == {"gemm": 1}, reasons(result)
    assert any(all(f in r for f in fragments) for r in reasons(result)), reasons(result)
    assert [n.op_type for n in result.model.graph.node][-1] == "Add"
    assert max_error(model, result.model, feeds(equation)) < 1e-4


def test_weight_a_caller_may_feed_is_refused():
    """An initializer listed as a graph input may be fed: its value cannot be folded."""
    model = build("abc,cde->abde", (4, 5))
    w = next(t for t in model.graph.initializer if t.name == "W")
    model.graph.input.append(helper.make_tensor_value_info("W", w.data_type, list(w.dims)))
    result = fusion.run(model, ["gemm"])
    assert not result.fusions
    assert any("Einsum" in r and "weight" in r and "graph input" in r for r in reasons(result)), reasons(result)
    opted_in = fusion.run(model, ["gemm"], assume_constant_initializers=True)
    assert opted_in.counts() == {"gemm": 1}, reasons(opted_in)


def test_three_operands_are_not_an_fc():
    g = G(13)
    x = g.input("x", FLOAT, ["B", 8])
    w = g.const(np.ones((8, 4), np.float32))
    g.op("Einsum", x, w, g.const(np.ones((4, 2), np.float32)), equation="ac,cd,de->ae")
    g.nodes[-1].output[0] = "y"
    g.output("y", FLOAT, None)
    result = fusion.run(g.model(), ["gemm"])
    assert not result.fusions
