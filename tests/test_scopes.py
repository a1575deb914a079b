"""Matching recurses into If/Loop/Scan bodies and model-local functions; outer-scope reads count."""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

import fusion

from .builders import FLOAT, G, max_error, run
from .norm_models import LAYER, build


def _ln_nodes(prefix: str, x: str, y: str, opset: int = 13) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """The nodes of a LayerNorm from x to y, names prefixed (to splice into bodies)."""
    m = build(LAYER.with_(opset=opset, shape=("B", 16)))
    rename = {"x": x, "y": y}
    nodes = []
    for n in m.graph.node:
        n2 = onnx.NodeProto()
        n2.CopyFrom(n)
        n2.name = prefix + n.name
        n2.input[:] = [rename.get(i, prefix + i) for i in n.input]
        n2.output[:] = [rename.get(o, prefix + o) for o in n.output]
        nodes.append(n2)
    inits = []
    for t in m.graph.initializer:
        t2 = onnx.TensorProto()
        t2.CopyFrom(t)
        t2.name = prefix + t.name
        inits.append(t2)
    return nodes, inits


def _if_model() -> onnx.ModelProto:
    then_nodes, then_inits = _ln_nodes("then/", "x", "then_y")
    then_g = helper.make_graph(then_nodes, "then", [], [helper.make_tensor_value_info("then_y", FLOAT, ["B", 16])], then_inits)
    else_g = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["else_y"], name="else/Identity")],
        "else",
        [],
        [helper.make_tensor_value_info("else_y", FLOAT, ["B", 16])],
    )
    g = helper.make_graph(
        [helper.make_node("If", ["cond"], ["y"], name="If_0", then_branch=then_g, else_branch=else_g)],
        "main",
        [helper.make_tensor_value_info("x", FLOAT, ["B", 16]), helper.make_tensor_value_info("cond", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", FLOAT, ["B", 16])],
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_norm_inside_if_branch_is_fused():
    model = _if_model()
    result = fusion.run(model, ["layernorm"])
    assert result.counts() == {"layernorm": 1}
    assert result.fusions[0].scope == "main/If_0.then_branch"
    then_g = next(a.g for a in result.model.graph.node[0].attribute if a.name == "then_branch")
    assert [n.op_type for n in then_g.node] == ["FusedLayerNorm"]
    onnx.checker.check_model(result.model, full_check=True)
    x = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)
    for cond in (True, False):
        feeds = {"x": x, "cond": np.array(cond)}
        assert max_error(model, result.model, feeds) < 1e-5


def test_intermediate_read_inside_a_subgraph_blocks_the_fusion():
    g = G(13)
    nodes, inits = _ln_nodes("ln/", "x", "y")
    g.inputs.append(helper.make_tensor_value_info("x", FLOAT, ["B", 16]))
    g.inputs.append(helper.make_tensor_value_info("cond", TensorProto.BOOL, []))
    g.nodes.extend(nodes)
    g.initializers.extend(inits)
    sub = next(n for n in nodes if n.op_type == "Sub").output[0]
    body = helper.make_graph([helper.make_node("Identity", [sub], ["b_out"], name="spy")], "b", [], [helper.make_tensor_value_info("b_out", FLOAT, None)])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["o_out"], name="o")], "o", [], [helper.make_tensor_value_info("o_out", FLOAT, None)])
    g.nodes.append(helper.make_node("If", ["cond"], ["z"], name="If_spy", then_branch=body, else_branch=other))
    g.output("y", FLOAT)
    g.output("z", FLOAT)
    result = fusion.inspect(g.model(infer=False), ["layernorm"])
    assert not result.fusions
    assert any("also read by Identity 'spy'" in m.reason for m in result.near_misses), result.near_misses


def test_norm_inside_loop_body_is_fused():
    nodes, inits = _ln_nodes("body/", "x", "body_y")
    body = helper.make_graph(
        nodes + [helper.make_node("Identity", ["cond_in"], ["cond_out"], name="body/cond")],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []), helper.make_tensor_value_info("cond_in", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), helper.make_tensor_value_info("body_y", FLOAT, ["B", 16])],
        inits,
    )
    g = helper.make_graph(
        [helper.make_node("Loop", ["trip", ""], ["ys"], name="Loop_0", body=body)],
        "main",
        [helper.make_tensor_value_info("x", FLOAT, ["B", 16]), helper.make_tensor_value_info("trip", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("ys", FLOAT, None)],
    )
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    result = fusion.run(model, ["layernorm"])
    assert result.counts() == {"layernorm": 1}
    feeds = {"x": np.random.default_rng(0).standard_normal((2, 16)).astype(np.float32), "trip": np.array(2, np.int64)}
    assert max_error(model, result.model, feeds) < 1e-5


def test_norm_inside_a_model_local_function_is_fused():
    m = build(LAYER.with_(shape=("B", 16)))
    # Functions cannot hold initializers: turn them into Constant nodes of the body.
    consts = [helper.make_node("Constant", [], [t.name], name="k_" + t.name, value=t) for t in m.graph.initializer]
    fn = helper.make_function("custom", "MyLN", ["x"], ["y"], consts + list(m.graph.node), [helper.make_opsetid("", 13)])
    g = helper.make_graph(
        [helper.make_node("MyLN", ["inp"], ["out"], domain="custom", name="call")],
        "main",
        [helper.make_tensor_value_info("inp", FLOAT, ["B", 16])],
        [helper.make_tensor_value_info("out", FLOAT, ["B", 16])],
    )
    model = helper.make_model(
        g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("custom", 1)], ir_version=8, functions=[fn]
    )
    result = fusion.run(model, ["layernorm"])
    assert result.counts() == {"layernorm": 1}
    assert result.fusions[0].scope == "function custom::MyLN"
    body = next(f for f in result.model.functions if f.name == "MyLN")
    assert [n.op_type for n in body.node if n.op_type != "Constant"] == ["FusedLayerNorm"]
    assert any(o.domain == "trt.plugins" for o in body.opset_import)
    onnx.checker.check_model(result.model, full_check=True)
    x = np.random.default_rng(0).standard_normal((3, 16)).astype(np.float32)
    assert max_error(model, result.model, {"inp": x}) < 1e-5


def test_our_own_function_bodies_are_not_rematched():
    once = fusion.fuse_layernorm(build(LAYER))
    result = fusion.run(once, ["layernorm", "rmsnorm"])
    assert not result.modified and not result.fusions and not result.near_misses
    run(once, {"x": np.zeros((1, 2, 16), np.float32)})
