"""The FC rule through a weight written as data movement on a constant (issue 13).

tf2onnx writes Keras EinsumDense kernels as ``Gemm(x, Reshape(W, Concat([-1], ReduceProd(
Gather(Shape(W), [3, 4])))))``.  Such a chain of Reshape / Transpose / Identity / Squeeze /
Unsqueeze / same-type Cast on a true constant is folded when fusing; one that starts at an
initializer a caller may feed, or whose shape is computed at run time, is refused with the
reason.  Every fused model is run on onnxruntime against the original.
"""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

import fusion
from fusion.rewrite import specs

from .builders import FLOAT, FLOAT16, NP, G, max_error, run

K, N = 8, 12
TOL = {FLOAT: 1e-4, FLOAT16: 2e-2}
OPT_IN = "assume_constant_initializers=True"
# The chain's ops and those of the shape computations beside it.
CHAIN_OPS = {"Reshape", "Transpose", "Squeeze", "Unsqueeze", "Identity", "Cast"}
CHAIN_OPS |= {"Shape", "Gather", "ReduceProd", "Concat", "Slice"}


def _ints(g: G, values) -> str:
    return g.const(np.array(values, np.int64))


def _axes(g: G, op: str, x: str, axes: list[int]) -> str:
    """Squeeze / Unsqueeze: axes as an attribute before opset 13, an input from it."""
    if g.opset >= 13:
        return g.op(op, x, _ints(g, axes))
    return g.op(op, x, axes=axes)


def weight_chain(g: G, case: str, w: np.ndarray) -> tuple[str, int]:
    """The weight of ``x @ w`` written as ``case``; returns (tensor, 1 if it is laid out [N, K])."""
    if case == "reshape":
        return g.op("Reshape", g.const(w.reshape(-1), name="W"), _ints(g, [K, N])), 0
    if case == "keras":  # tf2onnx: the EinsumDense kernel [2, K/2, N] stored as [1, 1, N, 2, K/2]
        src = g.const(np.ascontiguousarray(w.T).reshape(1, 1, N, 2, K // 2), name="W")
        prod = g.op("ReduceProd", g.op("Gather", g.op("Shape", src), _ints(g, [3, 4])), keepdims=1)
        return g.op("Reshape", src, g.op("Concat", _ints(g, [-1]), prod, axis=0)), 1
    if case == "transpose_of_reshape":  # the matrix Transpose is the pattern's, the Reshape the chain's
        r = g.op("Reshape", g.const(np.ascontiguousarray(w.T).reshape(-1), name="W"), _ints(g, [N, K]))
        return g.op("Transpose", r, perm=[1, 0]), 0
    if case == "transpose_3d":  # [1, N, K] -> Transpose [2, 0, 1] -> [K, 1, N] -> Reshape [0, -1]
        t = g.op("Transpose", g.const(np.ascontiguousarray(w.T)[None], name="W"), perm=[2, 0, 1])
        return g.op("Reshape", t, _ints(g, [0, -1])), 0
    if case == "squeeze_unsqueeze":  # [K, 1, N] -> [K, N] -> [1, K, N] -> [K, N] -> Identity -> Cast
        y = _axes(g, "Squeeze", g.const(w[:, None, :], name="W"), [1])
        y = _axes(g, "Squeeze", _axes(g, "Unsqueeze", y, [0]), [-3])
        return g.op("Cast", g.op("Identity", y), to=helper.np_dtype_to_tensor_dtype(w.dtype)), 0
    if case == "slice_shape":  # [K, N, 1] reshaped to Shape(W)[0:2]
        src = g.const(w[:, :, None], name="W")
        return g.op("Reshape", src, g.op("Slice", g.op("Shape", src), _ints(g, [0]), _ints(g, [2]))), 0
    raise ValueError(case)


def build(case: str, form: str = "matmul_add", dtype: int = FLOAT, opset: int = 13, chain=weight_chain) -> onnx.ModelProto:
    rng = np.random.default_rng(0)
    np_t = NP[dtype]
    w = (rng.standard_normal((K, N)) / math.sqrt(K)).astype(np_t)
    b = rng.standard_normal(N).astype(np_t)
    g = G(opset)
    x = g.input("x", dtype, ["M", K] if form == "gemm" else ["B", "S", K])
    wt, layout = chain(g, case, w)
    if form == "gemm":
        y = g.op("Gemm", x, wt, g.const(b, name="b"), transB=layout)
    else:
        y = g.op("Add", g.op("MatMul", x, g.op("Transpose", wt, perm=[1, 0]) if layout else wt), g.const(b, name="b"))
    g.nodes[-1].output[0] = "y"
    g.output("y", dtype, None)
    return g.model()


def feeds(form: str, dtype: int = FLOAT, seed: int = 1) -> dict[str, np.ndarray]:
    shape = (5, K) if form == "gemm" else (2, 3, K)
    return {"x": np.random.default_rng(seed).standard_normal(shape).astype(NP[dtype])}


def reasons(result) -> list[str]:
    return [m.reason for m in result.near_misses]


def _init(model: onnx.ModelProto, name: str) -> np.ndarray:
    return numpy_helper.to_array(next(t for t in model.graph.initializer if t.name == name))


def _node(model: onnx.ModelProto, op_type: str) -> onnx.NodeProto:
    return next(n for n in model.graph.node if n.op_type == op_type)


# -- positive: every chain fuses on every target, with the original's numbers ----------------

POSITIVE = {
    # name: (chain, FC form, dtype, opset)
    "reshape_matmul_add": ("reshape", "matmul_add", FLOAT, 13),
    "reshape_gemm": ("reshape", "gemm", FLOAT, 13),
    "reshape_fp16": ("reshape", "matmul_add", FLOAT16, 13),
    "keras_gemm_opset17": ("keras", "gemm", FLOAT, 17),
    "keras_gemm_opset13": ("keras", "gemm", FLOAT, 13),
    "keras_matmul_opset18": ("keras", "matmul_add", FLOAT, 18),
    "transpose_of_reshape": ("transpose_of_reshape", "matmul_add", FLOAT, 13),
    "transpose_3d": ("transpose_3d", "matmul_add", FLOAT, 13),
    "squeeze_unsqueeze_opset13": ("squeeze_unsqueeze", "matmul_add", FLOAT, 13),
    "squeeze_unsqueeze_opset11": ("squeeze_unsqueeze", "gemm", FLOAT, 11),
    "slice_shape": ("slice_shape", "matmul_add", FLOAT, 13),
}
# Target onnx leaves a Gemm as it is (already standard): only MatMul + Add is rewritten there.
CASES = [
    (name, t) for name, (_, form, _, _) in sorted(POSITIVE.items()) for t in ("plugin", "trt", "onnx") if t != "onnx" or form != "gemm"
]


def _stored(w_kn: np.ndarray, transpose_weight: int) -> np.ndarray:
    return np.ascontiguousarray(w_kn.T) if transpose_weight else w_kn


def _w_kn(dtype: int) -> np.ndarray:
    """The [K, N] matrix every chain of ``build`` computes (same seed, same first draw)."""
    rng = np.random.default_rng(0)
    return (rng.standard_normal((K, N)) / math.sqrt(K)).astype(NP[dtype])


@pytest.mark.parametrize(("name", "target"), CASES, ids=[f"{n}-{t}" for n, t in CASES])
def test_folded_weight_fuses_and_matches(name, target):
    case, form, dtype, opset = POSITIVE[name]
    model = build(case, form, dtype, opset)
    result = fusion.run(model, ["gemm"], target=target)
    assert result.counts() == {"gemm": 1}, reasons(result)
    fused = result.model
    ops = {n.op_type for n in fused.graph.node}
    w_kn = _w_kn(dtype)
    if target == "plugin":
        node = _node(fused, "FusedFC")
        tw = next(a.i for a in node.attribute if a.name == "transpose_weight")
        # W is the folded value, as a new initializer; the chain and its source are gone.
        np.testing.assert_array_equal(_init(fused, node.input[1]), _stored(w_kn, tw))
        assert not ops & CHAIN_OPS and "W" not in {t.name for t in fused.graph.initializer}
    elif target == "trt":
        node = _node(fused, "CustomFCPluginDynamic")
        w = numpy_helper.to_array(next(a.t for a in node.attribute if a.name == "W"))
        np.testing.assert_allclose(w, w_kn.astype(np.float32), rtol=0, atol=0)
        assert "W" not in {t.name for t in fused.graph.initializer}
    else:  # Gemm reads the chain's output as it is: standard ONNX, nothing to fold
        gemm = _node(fused, "Gemm")
        assert gemm.input[1] in {o for n in fused.graph.node if n.op_type in CHAIN_OPS for o in n.output}
    if target != "onnx":
        notes = [n for f in result.fusions for n in f.notes]
        assert any("folded when fusing" in n and "'W'" in n for n in notes), notes
    for seed in (1, 2):
        assert max_error(model, fused, feeds(form, dtype, seed)) < TOL[dtype]


def test_keras_form_folds_the_shape_computation_too():
    """Shape(W) -> Gather -> ReduceProd -> Concat sizes only the folded Reshape: all of it goes."""
    model = build("keras", "gemm", opset=17)
    fused = fusion.fuse_gemm(model)
    assert [n.op_type for n in fused.graph.node] == ["FusedFC"]
    assert {t.name for t in fused.graph.initializer} == {"b", _node(fused, "FusedFC").input[1]}


def test_chain_read_elsewhere_is_kept():
    """The FC takes the folded weight; the chain stays for its other reader."""
    g = G(13)
    rng = np.random.default_rng(3)
    x = g.input("x", FLOAT, ["B", "S", K])
    w = g.op("Reshape", g.const(rng.standard_normal(K * N).astype(np.float32), name="W"), _ints(g, [K, N]))
    g.op("Add", g.op("MatMul", x, w), g.const(rng.standard_normal(N).astype(np.float32)))
    g.nodes[-1].output[0] = "y"
    g.output("y", FLOAT, None)
    g.op("ReduceSum", w, keepdims=0)  # the weight's sum, a second output
    g.nodes[-1].output[0] = "w_sum"
    g.output("w_sum", FLOAT, None)
    model = g.model()
    for target, op in (("plugin", "FusedFC"), ("trt", "CustomFCPluginDynamic")):
        result = fusion.run(model, ["gemm"], target=target)
        assert result.counts() == {"gemm": 1}, reasons(result)
        fused = result.model
        assert op in {n.op_type for n in fused.graph.node}
        reshape = next(n for n in fused.graph.node if n.op_type == "Reshape" and n.input[0] == "W")
        assert any(reshape.output[0] in n.input for n in fused.graph.node if n.op_type == "ReduceSum")
        assert "W" in {t.name for t in fused.graph.initializer}
        for seed in (1, 2):
            assert max_error(model, fused, feeds("matmul_add", seed=seed)) < 1e-4


def test_two_fcs_share_one_chain():
    g = G(13)
    rng = np.random.default_rng(4)
    x = g.input("x", FLOAT, ["B", "S", K])
    w = g.op("Reshape", g.const(rng.standard_normal(K * K).astype(np.float32), name="W"), _ints(g, [K, K]))
    y = g.op("MatMul", g.op("Relu", g.op("MatMul", x, w)), w)
    g.output(y, FLOAT)
    model = g.model()
    result = fusion.run(model, ["gemm"])
    assert result.counts() == {"gemm": 2}, reasons(result)
    assert not {n.op_type for n in result.model.graph.node} & CHAIN_OPS
    assert max_error(model, result.model, feeds("matmul_add")) < 1e-4


# -- negative: refused, with the reason --------------------------------------------------------


def _shape_from_input(g: G, case: str, w: np.ndarray) -> tuple[str, int]:
    """K taken from x's shape at run time: not known when fusing."""
    k = g.op("Gather", g.op("Shape", "x"), _ints(g, [2]))
    return g.op("Reshape", g.const(w.reshape(-1), name="W"), g.op("Concat", k, _ints(g, [-1]), axis=0)), 0


def _shape_is_input(g: G, case: str, w: np.ndarray) -> tuple[str, int]:
    g.input("shape", onnx.TensorProto.INT64, [2])
    return g.op("Reshape", g.const(w.reshape(-1), name="W"), "shape"), 0


def _rank3(g: G, case: str, w: np.ndarray) -> tuple[str, int]:
    """[1, K, N]: MatMul broadcasts it, the FC takes a matrix only."""
    return g.op("Reshape", g.const(w.reshape(-1), name="W"), _ints(g, [1, K, N])), 0


def _cast_up(g: G, case: str, w: np.ndarray) -> tuple[str, int]:
    """An fp16 weight cast to fp32: a conversion, not data movement."""
    return g.op("Cast", g.op("Reshape", g.const(w.reshape(-1).astype(np.float16), name="W"), _ints(g, [K, N])), to=FLOAT), 0


def _computed(g: G, case: str, w: np.ndarray) -> tuple[str, int]:
    """Reshape of Relu(W): a computation, the original reason stands."""
    return g.op("Reshape", g.op("Relu", g.const(w.reshape(-1), name="W")), _ints(g, [K, N])), 0


NEGATIVE = {
    # name: (chain builder, reason fragments)
    "shape_from_input": (_shape_from_input, ("target shape", "'x', whose shape is not known when fusing")),
    "shape_is_graph_input": (_shape_is_input, ("target shape 'shape'", "is a graph input, not a constant")),
    "folds_to_rank3": (_rank3, ("has shape [1, 8, 12] (folded from Reshape", "not a matrix")),
    "cast_to_another_type": (_cast_up, ("converts FLOAT16 to FLOAT", "not data movement")),
    "reshape_of_computed": (_computed, ("both operands are computed",)),
}


@pytest.mark.parametrize("name", sorted(NEGATIVE))
def test_chain_is_refused_with_reason(name):
    chain, fragments = NEGATIVE[name]
    model = build("", chain=chain)
    for target in ("plugin", "trt", "onnx"):
        result = fusion.run(model, ["gemm"], target=target)
        assert not result.fusions and not result.modified, (target, result.counts())
        assert any(all(f in r for f in fragments) for r in reasons(result)), (target, reasons(result))


def expose(model: onnx.ModelProto, names) -> onnx.ModelProto:
    """List the named initializers as graph inputs too, with their exact shape."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    for t in out.graph.initializer:
        if t.name in names:
            out.graph.input.append(helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    return out


def _shape_name(model: onnx.ModelProto) -> str:
    return next(n for n in model.graph.node if n.op_type == "Reshape").input[1]


@pytest.mark.parametrize("exposed", ["W", "shape"])
def test_overridable_initializer_in_the_chain_is_not_folded(exposed):
    """A fed W (or target shape) must reach the FC: folding would bake the stored one."""
    base = build("reshape")
    name = "W" if exposed == "W" else _shape_name(base)
    model = expose(base, [name])
    for target in ("plugin", "trt"):
        result = fusion.run(model, ["gemm"], target=target)
        assert not result.fusions and not result.modified, result.counts()
        why = [r for r in reasons(result) if repr(name) in r]
        assert any("initializer that is also a graph input" in r and OPT_IN in r for r in why), reasons(result)


def test_overridable_weight_fuses_with_the_opt_in_and_is_frozen():
    model = expose(build("reshape"), ["W"])
    result = fusion.run(model, ["gemm"], assume_constant_initializers=True)
    assert result.counts() == {"gemm": 1}, reasons(result)
    fused = result.model
    assert [i.name for i in fused.graph.input] == ["x"]
    assert max_error(model, fused, feeds("matmul_add")) < 1e-4
    other = np.full(K * N, 0.125, np.float32)
    with pytest.raises(Exception, match="[Ii]nvalid input name"):
        run(fused, {**feeds("matmul_add"), "W": other})


def test_plain_weights_are_still_not_read(monkeypatch):
    """Folding reads a chain's constant only: a plain weight on the plugin target stays unread."""
    import fusion.ir.graph

    read: list[str] = []
    real = fusion.ir.graph.read_tensor
    monkeypatch.setattr(fusion.ir.graph, "read_tensor", lambda p, d: read.append(p.name) or real(p, d))
    g = G(13)
    x = g.input("x", FLOAT, ["B", "S", K])
    g.output(g.op("MatMul", x, g.const(np.ones((K, N), np.float32), name="plain")), FLOAT)
    assert fusion.run(g.model(), ["gemm"]).counts() == {"gemm": 1}
    assert "plain" not in read
    assert fusion.run(build("reshape"), ["gemm"]).counts() == {"gemm": 1}
    assert "W" in read


def test_spec_of_the_folded_node():
    fused = fusion.fuse_gemm(build("keras", "gemm", opset=17))
    node = _node(fused, "FusedFC")
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    assert attrs["out_features"] == N and attrs["transpose_weight"] == 1
    specs.FUSED_FC.check_arity(len(node.input), len(node.output))


def test_chain_inside_a_model_local_function():
    """Constant nodes instead of initializers; the folded weight becomes a Constant node there."""
    rng = np.random.default_rng(6)

    def constant(name: str, value: np.ndarray) -> onnx.NodeProto:
        return helper.make_node("Constant", [], [name], name=f"c_{name}", value=numpy_helper.from_array(value, name))

    body = [
        constant("w", rng.standard_normal(K * N).astype(np.float32)),
        constant("shape", np.array([K, N], np.int64)),
        helper.make_node("Reshape", ["w", "shape"], ["w_kn"], name="fc/Reshape"),
        helper.make_node("MatMul", ["X", "w_kn"], ["Y"], name="fc/MatMul"),
    ]
    fn = helper.make_function("local", "Block", ["X"], ["Y"], body, [helper.make_opsetid("", 13)])
    g = G(13)
    g.input("x", FLOAT, ["B", K])
    g.nodes.append(helper.make_node("Block", ["x"], ["y"], domain="local", name="blk"))
    g.output("y", FLOAT, ["B", N])
    model = helper.make_model(
        g.graph(), opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("local", 1)], functions=[fn], ir_version=8
    )
    xs = {"x": rng.standard_normal((3, K)).astype(np.float32)}
    for target in ("plugin", "trt"):
        result = fusion.run(model, ["gemm"], target=target)
        assert result.counts() == {"gemm": 1}, reasons(result)
        block = next(f for f in result.model.functions if f.name == "Block")
        assert not {"c_w", "c_shape", "fc/Reshape"} & {n.name for n in block.node}
        if target == "plugin":  # the folded weight and the zero bias
            assert sorted(n.op_type for n in block.node) == ["Constant", "Constant", "FusedFC"]
        assert max_error(model, result.model, xs) < 1e-5
