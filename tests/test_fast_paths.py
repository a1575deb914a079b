"""The shortcuts that keep a pass fast give what the long ways give.

Each shortcut (fusion pass speed, issue 13) is checked against the slow path it replaces: the
root filter against trying every root, node lists found by locator against the walk, the
graph view's order check against the protos', the checker's placeholders against a walk over
every tensor; and the normalized-dim proof stays linear in the depth of a residual chain.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import fusion
from fusion.ir.graph import ModelGraph, in_order, node_lists
from fusion.passes import driver
from fusion.patterns import _norm
from fusion.patterns.layernorm import RULE as LN_RULE
from fusion.rewrite import editor
from fusion.match.pattern import Matcher, Op, Var
from fusion.rewrite.rules import Rule

from .builders import FLOAT, G, count, max_error, reduce_mean

FIXTURES = Path(__file__).parent / "fixtures"
ALL_PASSES = ["layernorm", "rmsnorm", "gemm", "groupnorm", "skipnorm"]


def _residual_chain(layers: int, hidden: int = 16) -> onnx.ModelProto:
    """``layers`` blocks of x = LayerNorm(dense(x) + x), x of unknown shape: only a proof through
    the residual Adds says the normalized size (the exporter's operand order, dense first)."""
    rng = np.random.default_rng(0)
    g = G(opset=13)
    g.inputs.append(helper.make_tensor_value_info("x", FLOAT, None))  # no shape at all
    x = "x"
    for _ in range(layers):
        w = g.const(rng.standard_normal((hidden, hidden)).astype(np.float32) * 0.1)
        dense = g.op("Add", g.const(rng.standard_normal(hidden).astype(np.float32)), g.op("MatMul", x, w))
        s = g.op("Add", dense, x)
        d = g.op("Sub", s, reduce_mean(g, s, [-1]))
        var = reduce_mean(g, g.op("Pow", d, g.const(2.0)), [-1])
        norm = g.op("Div", d, g.op("Sqrt", g.op("Add", var, g.const(1e-5))))
        gamma = g.const(rng.uniform(0.5, 1.5, hidden).astype(np.float32))
        x = g.op("Add", g.op("Mul", norm, gamma), g.const(rng.standard_normal(hidden).astype(np.float32)))
    g.output(x, FLOAT)
    return g.model(infer=False)


def test_normalized_dim_proof_is_linear_in_the_depth(monkeypatch):
    calls = []
    prove = _norm._prove_dim
    monkeypatch.setattr(_norm, "_prove_dim", lambda *a: calls.append(1) or prove(*a))
    layers = 24
    model = _residual_chain(layers)
    fused = fusion.fuse_layernorm(model)
    assert count(fused, "FusedLayerNorm") == layers
    # The residual Add's first operand (the dense layer's bias) says the size: a few steps per
    # question.  Walking back through every earlier layer took hundreds each (quadratic).
    assert len(calls) <= 10 * layers, len(calls)
    feeds = {"x": np.random.default_rng(1).standard_normal((2, 3, 16)).astype(np.float32)}
    assert max_error(model, fused, feeds) < 1e-4


@pytest.mark.parametrize(
    "name",
    ["models/bert_legacy_op13_fp32.onnx", "models/gpt2_dynamo_op18_fp16.onnx", "models/convnext_legacy_op13_fp32.onnx",
     "models/t5_legacy_op13_fp32.onnx", "models/llama_legacy_op17_fp32.onnx", "models/resnet_gn_dynamo_op18_fp32.onnx",
     "exporters/keras_bert_tf2onnx_op17.onnx", "exporters/flax_norms_jax2onnx_op18.onnx"],
)
def test_root_filter_changes_no_result(name, monkeypatch):
    """Every pass, every target: the same fusions and near-misses with the filter as without it."""
    model = onnx.load(str(FIXTURES / name))
    may_start, skipped = Rule.may_start_at, []

    def every_root(self, node) -> bool:
        if not may_start(self, node):
            skipped.append(node)
        return True

    for target in ("plugin", "trt", "onnx"):
        filtered = _record(fusion.run(model, ALL_PASSES, target=target, dry_run=True))
        monkeypatch.setattr(Rule, "may_start_at", every_root)
        unfiltered = _record(fusion.run(model, ALL_PASSES, target=target, dry_run=True))
        monkeypatch.setattr(Rule, "may_start_at", may_start)
        assert filtered == unfiltered
    assert skipped, "the filter skipped no root: nothing was checked"


def _record(result) -> tuple:
    return (
        [dataclasses.asdict(f) for f in result.fusions],
        [(m.rule, m.scope, m.node, m.reason, m.progress) for m in result.near_misses],
    )


def test_root_filter_keeps_a_norms_root_and_skips_a_bias_add():
    g = G(opset=13)
    x = g.input("x", FLOAT, [2, 8])
    bias_add = g.op("Add", g.const(np.ones(8, np.float32)), g.op("MatMul", x, g.const(np.eye(8, dtype=np.float32))))
    d = g.op("Sub", bias_add, reduce_mean(g, bias_add, [-1]))
    norm = g.op("Div", d, g.op("Sqrt", g.op("Add", reduce_mean(g, g.op("Mul", d, d), [-1]), g.const(1e-5))))
    shift = g.op("Add", g.op("Mul", norm, g.const(np.full(8, 2.0, np.float32))), g.const(np.zeros(8, np.float32)))
    g.output(shift, FLOAT)
    nodes = {n.outputs[0].name: n for n in ModelGraph.from_proto(g.model()).scopes[0].ir.nodes}
    assert LN_RULE.may_start_at(nodes[shift])
    assert not LN_RULE.may_start_at(nodes[bias_add])  # Add(constant, MatMul): no input a LayerNorm's Add reads


def test_root_filter_counts_nodes_an_optional_input_may_bind():
    """An input that may be a plain tensor can still bind a node (and a near-miss grow from it):
    the root stays, even though the input that must be a node cannot match here."""

    class Probe(Rule):
        name = pass_name = "probe"
        pattern = Op("Add", Var("a") | Op("Mul", Var(), Var()), Op("Sub", Var(), Var()))
        min_progress = 2

    g = G(opset=13)
    x = g.input("x", FLOAT, [2])
    mul_add = g.op("Add", g.op("Mul", x, x), g.op("Neg", x))
    neg_add = g.op("Add", g.op("Neg", x), g.op("Relu", x))
    g.output(mul_add, FLOAT)
    g.output(neg_add, FLOAT)
    graph = ModelGraph.from_proto(g.model())
    nodes = {n.outputs[0].name: n for n in graph.scopes[0].ir.nodes}
    matcher = Matcher(graph)
    assert not list(matcher.match(Probe.pattern, nodes[mul_add])) and matcher.best.progress == 2  # Add, Mul
    assert Probe().may_start_at(nodes[mul_add])
    assert not list(matcher.match(Probe.pattern, nodes[neg_add])) and matcher.best.progress < 2
    assert not Probe().may_start_at(nodes[neg_add])  # nothing below it can bind


def _nested_model() -> onnx.ModelProto:
    """An If with two bodies, a model-local function, and a function of ours (skipped by the view)."""
    x = helper.make_tensor_value_info("x", FLOAT, [2])
    y = helper.make_tensor_value_info("y", FLOAT, [2])
    branch = lambda k: helper.make_graph(  # noqa: E731
        [helper.make_node("Neg" if k else "Abs", ["x"], [f"b{k}"])], f"body{k}", [], [helper.make_tensor_value_info(f"b{k}", FLOAT, [2])]
    )
    cond = numpy_helper.from_array(np.array(True), "cond")
    nodes = [
        helper.make_node("If", ["cond"], ["t"], then_branch=branch(1), else_branch=branch(0)),
        helper.make_node("Twice", ["t"], ["u"], domain="local"),
        helper.make_node("FusedLayerNorm", ["u"], ["y"], domain="trt.plugins"),
    ]
    twice = helper.make_function("local", "Twice", ["a"], ["b"], [helper.make_node("Add", ["a", "a"], ["b"])],
                                 [helper.make_opsetid("", 13)])
    ours = helper.make_function("trt.plugins", "FusedLayerNorm", ["a"], ["b"], [helper.make_node("Identity", ["a"], ["b"])],
                                [helper.make_opsetid("", 13)])
    graph = helper.make_graph(nodes, "g", [x], [y], [cond])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("local", 1),
                                                   helper.make_opsetid("trt.plugins", 1)], functions=[twice, ours])


def test_node_lists_by_locator_match_the_walk():
    model = _nested_model()
    graph = ModelGraph.from_proto(model, skip_functions={("trt.plugins", "FusedLayerNorm")})
    copy = onnx.ModelProto()
    copy.CopyFrom(model)
    walked, located = node_lists(copy), graph.node_lists(copy)
    assert list(located) == list(walked) and len(walked) == 5  # graph, two bodies, two functions
    for key, container in walked.items():
        assert located[key].SerializeToString() == container.SerializeToString()
    assert len(graph.scopes) == 4  # our function is not scanned, yet its list is found


def test_view_order_check_agrees_with_the_protos():
    g = G(opset=13)
    x = g.input("x", FLOAT, [2])
    g.output(g.op("Relu", g.op("Neg", x)), FLOAT)
    model = g.model(infer=False)
    assert in_order(ModelGraph.from_proto(model).scopes[0].ir) is True
    assert editor.topologically_sorted(model) is None
    model.graph.node.reverse()  # Relu now comes before the Neg it reads
    assert in_order(ModelGraph.from_proto(model).scopes[0].ir) is False
    assert editor.topologically_sorted(model) is not None
    nested = ModelGraph.from_proto(_nested_model())
    assert in_order(nested.scopes[0].ir) is None  # a node with bodies: only the protos can tell


def test_checker_finds_the_file_of_an_external_constant(tmp_path):
    """Placeholders go first where the initializers say; a Constant's external file is found by
    the walk the failed first check falls back to, and a real error still fails."""
    c = numpy_helper.from_array(np.ones(2, np.float32), "c")
    c.ClearField("raw_data")
    c.data_location = TensorProto.EXTERNAL
    entry = c.external_data.add()
    entry.key, entry.value = "location", "consts/c.bin"
    x = helper.make_tensor_value_info("x", FLOAT, [2])
    y = helper.make_tensor_value_info("y", FLOAT, [2])
    nodes = [helper.make_node("Constant", [], ["k"], value=c), helper.make_node("Add", ["x", "k"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 13)])
    driver._check(model, None)
    model.graph.node[1].op_type = "Ad"
    with pytest.raises(onnx.checker.ValidationError, match="Ad"):
        driver._check(model, None)


def test_delete_removes_exactly_the_runs_given():
    g = onnx.GraphProto()
    for i in range(10):
        g.node.add().name = str(i)
    editor._delete(g.node, [0, 1, 4, 5, 6, 9])
    assert [n.name for n in g.node] == ["2", "3", "7", "8"]
    editor._delete(g.node, [])
    assert len(g.node) == 4


@pytest.mark.parametrize(
    "name", ["models/bert_legacy_op13_fp32.onnx", "models/t5_legacy_op13_fp16.onnx", "models/convnext_legacy_op17_fp32.onnx"]
)
def test_dead_code_found_from_the_view_is_what_the_walk_finds(name, monkeypatch):
    """The one-list fast path names the same dead values and node positions as the walk over the fused proto."""
    seen: list = []
    apply, delete = editor.Editor.apply, editor._delete_dead

    def recording_apply(self, *a, **k):
        seen.append(self)
        return apply(self, *a, **k)

    def checking_delete(containers, names, nodes):
        ed = seen[-1]
        fast = ed._dead_in_view()
        assert fast is not None, "the fast path was not taken"
        walked = editor._find_dead(ed.edits.values(), containers, ed._plain_lists())
        assert fast[0] == walked[0]
        assert fast[1][("graph",)] == walked[1][("graph",)]
        checks.append(len(walked[1][("graph",)]))
        return delete(containers, names, nodes)

    checks: list[int] = []
    monkeypatch.setattr(editor.Editor, "apply", recording_apply)
    monkeypatch.setattr(editor, "_delete_dead", checking_delete)
    for target in ("plugin", "onnx"):
        fusion.run(str(FIXTURES / name), ALL_PASSES, target=target)
    assert any(checks), "no dead node was found: nothing was compared"


def test_a_model_with_bodies_or_functions_leaves_dead_code_to_the_walk():
    ed = editor.Editor(ModelGraph.from_proto(_nested_model()))
    ed.edits[id(ed.graph.scopes[0])] = editor._Edit(released={"x"})
    assert ed._dead_in_view() is None


def test_the_checker_gets_exactly_the_weightless_fused_model(monkeypatch):
    """The edits applied to shape inference's weightless copy are what ``weightless`` makes of the output."""
    from fusion.ir.graph import weightless

    checked: list[onnx.ModelProto] = []
    check = driver._check
    monkeypatch.setattr(driver, "_check", lambda model, *a: checked.append(model) or check(model, *a))
    model = onnx.load(str(FIXTURES / "models/bert_legacy_op13_fp32.onnx"))
    before = model.SerializeToString()
    out = fusion.fuse_layernorm(model)
    assert model.SerializeToString() == before
    assert len(checked) == 1
    assert any(t.data_location == TensorProto.EXTERNAL for t in checked[0].graph.initializer), "not a weightless copy"
    assert checked[0].SerializeToString() == weightless(out).SerializeToString()


def test_a_pass_pauses_the_cyclic_gc_and_restores_the_callers_setting(monkeypatch):
    """The collector stays off while a pass runs (it would only walk the live graph view), the
    caller's setting comes back, even on an error, and the pass leaves no cycles behind."""
    import gc

    seen: list[bool] = []
    check = LN_RULE.check
    monkeypatch.setattr(type(LN_RULE), "check", lambda self, m, ctx: seen.append(gc.isenabled()) or check(m, ctx))
    model = onnx.load(str(FIXTURES / "models/bert_legacy_op13_fp32.onnx"))
    was = gc.isenabled()
    try:
        gc.enable()
        assert count(fusion.fuse_layernorm(model), "FusedLayerNorm") > 0
        assert gc.isenabled() and seen and not any(seen)
        gc.disable()
        gc.collect()
        fusion.fuse_layernorm(model)
        assert not gc.isenabled()
        # The view's links are broken when the pass ends: reference counting frees it, so no
        # collection of everything the pass allocated follows the call (it found 2793 objects).
        assert gc.collect() < 100
        gc.enable()
        with pytest.raises(fusion.FusionError):
            fusion.fuse_layernorm(model, target="nope")
        assert gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()


def test_pattern_subclasses_match_as_their_classes_do():
    """The matcher dispatches on the exact pattern classes for speed; a subclass takes the slower path to the same result."""
    from fusion.match.pattern import Alt, Const, Opt

    class MyOp(Op):
        pass

    class MyVar(Var):
        pass

    class MyAlt(Alt):
        pass

    class MyConst(Const):
        pass

    class MyOpt(Opt):
        pass

    g = G(opset=13)
    x = g.input("x", FLOAT, [2])
    two = g.const(2.0, "two")
    y = g.op("Add", g.op("Mul", x, two), g.op("Neg", x))
    g.output(y, FLOAT)
    graph = ModelGraph.from_proto(g.model())
    root = graph.scopes[0].ir.nodes[-1]

    def bound(p):
        return [(sorted(m.nodes), sorted((k, t.name) for k, t in m.tensors.items())) for m in Matcher(graph).match(p, root)]

    def pattern(op, var, alt, const, opt):
        a = var("a")
        return op("Add", alt(op("Mul", a, const("k", value=2.0), name="mul"), op("Relu", a)), op("Neg", a, opt(var("z"))), name="add")

    plain = bound(pattern(Op, Var, Alt, Const, Opt))
    assert plain and plain == bound(pattern(MyOp, MyVar, MyAlt, MyConst, MyOpt))
    assert not bound(pattern(MyOp, MyVar, MyAlt, lambda name, value: MyConst(name, value=3.0), MyOpt))
