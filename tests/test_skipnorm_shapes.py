"""Skip norms proven same-shape from the graph's structure (patterns/_shapes.py), as legacy
exports need: no shapes on intermediates, dynamic batch and sequence.

Each model feeds Add(a, b) into a LayerNorm chain, with ``x`` [B, S, 16] its only dynamic
input and no value_info: ONNX inference names every derived dim afresh, so only the
structural proof can tell that a and b have one shape.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import onnx
import pytest

import fusion
from fusion.ir.graph import ModelGraph
from fusion.patterns import _shapes

from .builders import FLOAT, G, run

D = 16
BIG = np.iinfo(np.int64).max


def _w(g: G, rng, *shape) -> str:
    return g.const(rng.standard_normal(shape).astype(np.float32))


def _ints(g: G, *v) -> str:
    return g.const(np.array(v, np.int64))


def _dim(g: G, t: str, i: int) -> str:
    """Unsqueeze(Gather(Shape(t), i)): one size as a 1-element vector (TorchScript's pieces)."""
    return g.op("Unsqueeze", g.op("Gather", g.op("Shape", t), g.const(np.array(i, np.int64)), axis=0), _ints(g, 0))


def _layernorm(g: G, s: str, rng) -> str:
    d = g.op("Sub", s, g.op("ReduceMean", s, axes=[-1]))
    var = g.op("ReduceMean", g.op("Pow", d, g.const(2.0)), axes=[-1])
    n = g.op("Div", d, g.op("Sqrt", g.op("Add", var, g.const(1e-5))))
    return g.op("Add", g.op("Mul", n, _w(g, rng, D)), _w(g, rng, D))


def build(branch: Callable, extra_inputs: dict | None = None) -> onnx.ModelProto:
    """x -> branch(g, x, rng) = (a, b) -> LayerNorm(a + b) -> y; no shapes annotated."""
    rng = np.random.default_rng(0)
    g = G(opset=13)
    x = g.input("x", FLOAT, ["B", "S", D])
    for name, shape in (extra_inputs or {}).items():
        g.input(name, FLOAT, shape)
    a, b = branch(g, x, rng)
    y = _layernorm(g, g.op("Add", a, b, name="residual"), rng)
    g.nodes[-1].output[0] = "y"
    g.output("y", FLOAT, ["B", "S", D])
    return g.model(infer=False)


# -- the constructs ------------------------------------------------------------------------


def head_merge(g, x, rng):
    """TorchScript attention: split heads by Reshape(Concat(Shape pieces, [2, 8])), Transpose,
    merge them back by Reshape(Concat(Shape(x)[0], Shape(x)[1], [16])), then the output MatMul."""
    h = g.op("Add", g.op("MatMul", x, _w(g, rng, D, D)), _w(g, rng, D))
    heads = g.op("Reshape", h, g.op("Concat", _dim(g, x, 0), _dim(g, x, 1), _ints(g, 2), _ints(g, 8), axis=0))
    t = g.op("Transpose", g.op("Transpose", heads, perm=[0, 2, 1, 3]), perm=[0, 2, 1, 3])
    merged = g.op("Reshape", t, g.op("Concat", _dim(g, x, 0), _dim(g, x, 1), _ints(g, D), axis=0))
    return g.op("MatMul", merged, _w(g, rng, D, D)), x


def conv1d(g, x, rng):
    """GPT-2's Conv1D: Reshape(x, [-1, D]) -> Gemm -> Reshape(Concat(Shape(x)[:-1], [N])), a
    Split of it, and an activation; the residual is x."""
    def linear(t, n):
        flat = g.op("Reshape", t, g.op("Concat", _ints(g, -1), g.op("Slice", g.op("Shape", t), _ints(g, -1), _ints(g, BIG)),
                                        axis=0))
        out = g.op("Gemm", flat, _w(g, rng, D, n), _w(g, rng, n))
        lead = g.op("Slice", g.op("Shape", t), _ints(g, 0), _ints(g, -1))
        return g.op("Reshape", out, g.op("Concat", lead, _ints(g, n), axis=0))

    qkv = linear(x, 3 * D)
    q = g.op("Split", qkv, _ints(g, D, D, D), axis=2, n_out=3)[0]
    return linear(g.op("Tanh", q), D), x


def elementwise(g, x, rng):
    """Unary ops, Cast, Dropout, Identity, and constants that do not widen the shape."""
    t = g.op("Erf", g.op("Div", g.op("Cast", x, to=onnx.TensorProto.FLOAT), g.const(1.4)))
    t = g.op("Mul", g.op("Relu", t), g.const(rng.standard_normal([1, 1, D]).astype(np.float32)))
    t = g.op("Sub", g.op("Sigmoid", t), g.const(np.float32(0.5)))
    return g.op("Identity", g.op("Dropout", g.op("Tanh", t))), x


def post_norm(g, x, rng):
    """BERT's residual: the previous LayerNorm's output, and a MatMul of it."""
    n = _layernorm(g, x, rng)
    return g.op("MatMul", n, _w(g, rng, D, D)), n


def head_copy_of_two(g, x, rng):
    """Reshape(t [B, 2, S, 8], [B, S, 16]): where S is 0 the Reshape copies t's 2 (allowzero=0),
    but then the residual Add would fail (2 against 0), so the sizes still agree where it runs."""
    t = g.op("Transpose", g.op("Reshape", x, _ints(g, 0, 0, 2, 8)), perm=[0, 2, 1, 3])
    a = g.op("Reshape", t, g.op("Concat", _dim(g, x, 0), _dim(g, x, 1), _ints(g, D), axis=0))
    return a, x


def heads_into_batch(g, x, rng):
    """diffusers' attention (AttnProcessor): heads folded into the batch, Reshape(t [B, 2, S, 8]
    -> [B*2, S, 8]) with B*2 = Mul(Shape(x)[0], 2), and unfolded by (B*2)/2 = Div(Shape(t)[0], 2)."""
    def scalar_dim(t, i):
        return g.op("Gather", g.op("Shape", t), g.const(np.array(i, np.int64)), axis=0)

    def piece(v):
        return g.op("Unsqueeze", v, _ints(g, 0))

    h = g.op("MatMul", x, _w(g, rng, D, D))
    split = g.op("Reshape", h, g.op("Concat", _dim(g, h, 0), _dim(g, h, 1), _ints(g, 2), _ints(g, 8), axis=0))
    folded = g.op("Reshape", g.op("Transpose", split, perm=[0, 2, 1, 3]),
                  g.op("Concat", piece(g.op("Mul", scalar_dim(x, 0), g.const(np.array(2, np.int64)))), _dim(g, x, 1),
                       _ints(g, 8), axis=0))
    t = g.op("Tanh", folded)
    batch = piece(g.op("Div", scalar_dim(t, 0), g.const(np.array(2, np.int64))))
    unfolded = g.op("Reshape", t, g.op("Concat", batch, _ints(g, 2), _dim(g, t, 1), _ints(g, 8), axis=0))
    merged = g.op("Reshape", g.op("Transpose", unfolded, perm=[0, 2, 1, 3]),
                  g.op("Concat", batch, _dim(g, t, 1), _ints(g, D), axis=0))
    return g.op("MatMul", merged, _w(g, rng, D, D)), x


def _as_image(g, x):
    """[B, S, 16] -> [B, 16, S, 1]."""
    return g.op("Unsqueeze", g.op("Transpose", x, perm=[0, 2, 1]), _ints(g, 3))


def _as_tokens(g, t):
    """[B, 16, S, W] -> [B, S, 16], averaging W away."""
    return g.op("Transpose", g.op("ReduceMean", t, axes=[3], keepdims=0), perm=[0, 2, 1])


def conv_same(g, x, rng):
    """A UNet's convolutions: a 3x1 kernel padded by 1 above and below (stride 1) keeps the
    spatial size, and an upsampler's Resize by [1, 1, 1, 2] keeps every size but the last."""
    c = g.op("Conv", _as_image(g, x), _w(g, rng, D, D, 3, 1), _w(g, rng, D), kernel_shape=[3, 1], pads=[1, 0, 1, 0])
    r = g.op("Resize", c, "", g.const(np.array([1, 1, 1, 2], np.float32)), mode="nearest")
    return _as_tokens(g, r), x


POSITIVE = {"head_merge": head_merge, "conv1d": conv1d, "elementwise": elementwise, "post_norm": post_norm,
            "head_copy_of_two": head_copy_of_two, "heads_into_batch": heads_into_batch, "conv_same": conv_same}
SHAPES = [(2, 3), (1, 1), (3, 1), (1, 5), (0, 3), (2, 0)]


def _outputs_match(original: onnx.ModelProto, fused: onnx.ModelProto, feeds_list) -> int:
    """Same outputs (shapes and values) wherever the original runs; how many ran."""
    ran = 0
    for feeds in feeds_list:
        try:
            want = run(original, feeds)
        except Exception:  # noqa: BLE001 - (a size of 0 the original's Reshape cannot take)
            continue
        got = run(fused, feeds)
        for a, b in zip(want, got):
            assert a.shape == b.shape, feeds
            assert a.size == 0 or np.abs(a - b).max() < 1e-4
        ran += 1
    return ran


def _feeds(shapes=SHAPES, **extra):
    rng = np.random.default_rng(1)
    return [{"x": rng.standard_normal([b, s, D]).astype(np.float32), **{k: v(b, s) for k, v in extra.items()}}
            for b, s in shapes]


def _proven(m: onnx.ModelProto) -> bool:
    """Whether the analysis proves the residual Add's operands of one shape."""
    g = ModelGraph.from_proto(m)
    scope = g.scopes[0]
    add = next(n for n in scope.ir.nodes if n.name == "residual")
    return _shapes.same_shape(g, add.inputs[0], add.inputs[1], scope)


@pytest.mark.parametrize("name", POSITIVE)
def test_proven_from_structure_fuses_and_computes_the_same(name):
    m = build(POSITIVE[name])
    assert _proven(m)
    r = fusion.run(m, ["skipnorm", "layernorm"])
    assert r.counts().get("skiplayernorm") == 1, [x.reason for x in r.near_misses]
    assert _outputs_match(m, r.model, _feeds()) >= 4


def test_fused_norm_node_output_has_its_input_shape():
    """A model fused before: the residual adds x to a MatMul of a FusedLayerNorm's output."""
    rng = np.random.default_rng(0)
    g = G(opset=13)
    x = g.input("x", FLOAT, ["B", "S", D])
    n = _layernorm(g, x, rng)
    g.nodes[-1].output[0] = "n"
    g.output("n", FLOAT, ["B", "S", D])
    first = fusion.run(g.model(infer=False), ["layernorm"]).model
    assert [o.op_type for o in first.graph.node].count("FusedLayerNorm") == 1
    rest = G(opset=13)
    a = rest.op("MatMul", "n", _w(rest, rng, D, D))
    y = _layernorm(rest, rest.op("Add", a, "x", name="residual"), rng)
    rest.nodes[-1].output[0] = "y"
    first.graph.node.extend(rest.nodes)
    first.graph.initializer.extend(rest.initializers)
    first.graph.output.append(onnx.helper.make_tensor_value_info("y", FLOAT, ["B", "S", D]))
    assert _proven(first)
    r = fusion.run(first, ["skipnorm"])
    assert r.counts() == {"skiplayernorm": 1}, [x.reason for x in r.near_misses]
    assert _outputs_match(first, r.model, _feeds()) >= 4


def linear(g, x, rng):
    """x @ W + b: the gemm pass makes it a FusedFC, whose output is x[:-1] + [out_features]."""
    return g.op("Add", g.op("MatMul", x, _w(g, rng, D, D)), _w(g, rng, D)), x


def test_fused_fc_output_shape():
    m = build(linear)
    first = fusion.run(m, ["gemm"])
    assert first.counts() == {"gemm": 1}, first.near_misses
    assert _proven(first.model)
    r = fusion.run(first.model, ["skipnorm"])
    assert r.counts() == {"skiplayernorm": 1}, [x.reason for x in r.near_misses]
    assert _outputs_match(m, r.model, _feeds()) >= 4


# -- refusals --------------------------------------------------------------------------------


def widening_constant(g, x, rng):
    """A constant of batch 3: where x's batch is 1, a broadcasts to 3 and the Add with it."""
    return g.op("Mul", g.op("MatMul", x, _w(g, rng, D, D)), g.const(rng.standard_normal([3, 1, D]).astype(np.float32))), x


def reshape_to_another_tensor(g, x, rng):
    """Merged heads sized by another input's Shape: nothing ties those sizes to x's."""
    sizes = g.op("Concat", _dim(g, "other", 0), _dim(g, "other", 1), _ints(g, D), axis=0)
    return g.op("Reshape", g.op("MatMul", x, _w(g, rng, D, D)), sizes), x


def matmul_by_an_input(g, x, rng):
    """A MatMul whose weight is fed: its columns could be 1 (then the Add broadcasts)."""
    return g.op("MatMul", x, "w"), x


def position_embeddings(g, x, rng):
    """BERT's embeddings: positions [1, S, D] broadcast over the batch."""
    seq = g.op("Gather", g.op("Shape", x), g.const(np.array(1, np.int64)), axis=0)
    ids = g.op("Unsqueeze", g.op("Range", g.const(np.array(0, np.int64)), seq, g.const(np.array(1, np.int64))), _ints(g, 0))
    return x, g.op("Gather", _w(g, rng, 64, D), ids, axis=0)


def head_copy_of_one(g, x, rng):
    """Reshape(t [B, 1, S*16], [B, S, 16]): where S is 0 the Reshape copies t's 1 (allowzero=0),
    giving [0, 1, 16] for x [0, 0, 16], which the Add broadcasts: the fused node could not."""
    t = g.op("Unsqueeze", g.op("Flatten", x, axis=1), _ints(g, 1))
    return g.op("Reshape", t, g.op("Concat", _dim(g, x, 0), _dim(g, x, 1), _ints(g, D), axis=0)), x


def conv_unpadded(g, x, rng):
    """A 3x1 kernel without pads: S-2 rows, which is 1 where S is 3 (the Add then broadcasts)."""
    c = g.op("Conv", _as_image(g, x), _w(g, rng, D, D, 3, 1), kernel_shape=[3, 1])
    return _as_tokens(g, c), x


def resize_tokens(g, x, rng):
    """Resize by 2 along S: 2 rows where S is 1 (the Add then broadcasts)."""
    r = g.op("Resize", _as_image(g, x), "", g.const(np.array([1, 1, 2, 1], np.float32)), mode="nearest")
    return _as_tokens(g, r), x


NEGATIVE = {
    "conv_unpadded": (conv_unpadded, {}, "cannot tell they agree on axis -2"),
    "resize_tokens": (resize_tokens, {}, "cannot tell they agree on axis -2"),
    "widening_constant": (widening_constant, {}, "cannot tell they agree on axis -3"),
    "reshape_to_another_tensor": (reshape_to_another_tensor, {"other": ["P", "Q", 4]}, "cannot tell they agree on axis -3"),
    "matmul_by_an_input": (matmul_by_an_input, {"w": [D, "N"]}, "cannot tell they agree on axis -1"),
    "position_embeddings": (position_embeddings, {}, "cannot tell they agree on axis -3"),
    "head_copy_of_one": (head_copy_of_one, {}, "cannot tell they agree on axis -2"),
}
# Where the original runs at all: the unpadded kernel needs S >= 3 (and S - 2 = 1 or S to add).
NEGATIVE_SHAPES = {"conv_unpadded": [(2, 3), (1, 3), (3, 3)]}
EXTRA_FEEDS = {
    "reshape_to_another_tensor": {"other": lambda b, s: np.zeros([b, s, 4], np.float32)},
    "matmul_by_an_input": {"w": lambda b, s: np.random.default_rng(2).standard_normal([D, D]).astype(np.float32)},
}


@pytest.mark.parametrize("name", NEGATIVE)
def test_refused_with_reason_and_plain_norm_fuses(name):
    branch, inputs, reason = NEGATIVE[name]
    m = build(branch, inputs)
    r = fusion.inspect(m, ["skipnorm"])
    assert not r.fusions
    assert any(reason in x.reason for x in r.near_misses), [x.reason for x in r.near_misses]
    r = fusion.run(m, ["skipnorm", "layernorm"])
    assert r.counts() == {"layernorm": 1}, r.near_misses
    assert _outputs_match(m, r.model, _feeds(NEGATIVE_SHAPES.get(name, SHAPES), **EXTRA_FEEDS.get(name, {}))) >= 3


def test_copy_of_one_really_broadcasts_where_the_size_is_0():
    """Why head_copy_of_one must be refused: the original runs, and a is [0, 1, 16]."""
    m = build(head_copy_of_one)
    a_name = next(n for n in m.graph.node if n.name == "residual").input[0]
    m.graph.output.append(onnx.helper.make_tensor_value_info(a_name, FLOAT, None))
    y, a = run(m, {"x": np.zeros([0, 0, D], np.float32)})
    assert a.shape == (0, 1, D) and y.shape == (0, 0, D)


def test_unpadded_conv_really_broadcasts():
    """Why conv_unpadded must be refused: at S = 3 its branch has 1 row, broadcast over x's 3."""
    m = build(conv_unpadded)
    a_name = next(n for n in m.graph.node if n.name == "residual").input[0]
    m.graph.output.append(onnx.helper.make_tensor_value_info(a_name, FLOAT, None))
    y, a = run(m, {"x": np.ones([2, 3, D], np.float32)})
    assert a.shape == (2, 1, D) and y.shape == (2, 3, D)


def test_widening_constant_really_broadcasts():
    m = build(widening_constant)
    (y,) = run(m, {"x": np.ones([1, 2, D], np.float32)})
    assert y.shape == (3, 2, D)


# -- cross-attention: a batch proven through a broadcast -----------------------------------


def cross_attention(heads: int) -> Callable:
    """diffusers' legacy cross-attention: queries from x [B, S, 16], keys and values from ctx
    [B2, T, 16], heads folded into the batch (B*h, B2*h), the scores MatMul broadcasting the two
    batches, and unfolded by (batch)/h."""
    d = D // heads

    def branch(g, x, rng):
        def scalar_dim(t, i):
            return g.op("Gather", g.op("Shape", t), g.const(np.array(i, np.int64)), axis=0)

        def piece(v):
            return g.op("Unsqueeze", v, _ints(g, 0))

        def fold(t):  # [b, s, 16] -> [b*h, s, d]
            split = g.op("Reshape", t, g.op("Concat", _dim(g, t, 0), _dim(g, t, 1), _ints(g, heads), _ints(g, d), axis=0))
            batch = piece(g.op("Mul", scalar_dim(t, 0), g.const(np.array(heads, np.int64))))
            return g.op("Reshape", g.op("Transpose", split, perm=[0, 2, 1, 3]),
                        g.op("Concat", batch, _dim(g, t, 1), _ints(g, d), axis=0))

        q = fold(g.op("MatMul", x, _w(g, rng, D, D)))
        k = fold(g.op("MatMul", "ctx", _w(g, rng, D, D)))
        v = fold(g.op("MatMul", "ctx", _w(g, rng, D, D)))
        p = g.op("Softmax", g.op("MatMul", q, g.op("Transpose", k, perm=[0, 2, 1])), axis=-1)
        o = g.op("MatMul", p, v)  # [bcast(B*h, B2*h), S, d]
        batch = piece(g.op("Div", scalar_dim(o, 0), g.const(np.array(heads, np.int64))))
        unfolded = g.op("Reshape", o, g.op("Concat", batch, _ints(g, heads), _dim(g, o, 1), _ints(g, d), axis=0))
        merged = g.op("Reshape", g.op("Transpose", unfolded, perm=[0, 2, 1, 3]),
                      g.op("Concat", _dim(g, unfolded, 0), _dim(g, o, 1), _ints(g, D), axis=0))
        return g.op("MatMul", merged, _w(g, rng, D, D)), x
    return branch


CTX = {"ctx": ["B2", "T", D]}


def _ctx(batch: Callable[[int], int] = lambda b: b, t: int = 3) -> dict:
    return {"ctx": lambda b, s: np.random.default_rng(3).standard_normal([batch(b), t, D]).astype(np.float32)}


def test_cross_attention_batch_proven_through_the_broadcast():
    """B*2 and B2*2 are never 1, so the scores MatMul runs only where they are equal: its batch
    is both, and (B*2)/2 is B."""
    m = build(cross_attention(2), CTX)
    assert _proven(m)
    r = fusion.run(m, ["skipnorm", "layernorm"])
    assert r.counts() == {"skiplayernorm": 1}, [x.reason for x in r.near_misses]
    assert _outputs_match(m, r.model, _feeds(**_ctx())) >= 4
    # Where the batches differ the original fails (so nothing is lost): B=1, B2=2 gives 2 and 4.
    with pytest.raises(Exception, match="(?i)matmul|broadcast|dimension"):
        run(m, _feeds([(1, 3)], **_ctx(lambda b: 2))[0])


def test_cross_attention_of_one_head_refused():
    """With 1 head the batches are B and B2, and B can be 1: B=1, B2=2 runs, and the residual
    Add broadcasts x [1, S, 16] over the attention's [2, S, 16].  The fused node could not."""
    m = build(cross_attention(1), CTX)
    assert not _proven(m)
    r = fusion.inspect(m, ["skipnorm"])
    assert not r.fusions
    assert any("cannot tell they agree on axis -3" in x.reason for x in r.near_misses), [x.reason for x in r.near_misses]
    a_name = next(n for n in m.graph.node if n.name == "residual").input[0]
    m.graph.output.append(onnx.helper.make_tensor_value_info(a_name, FLOAT, None))
    feeds = _feeds([(1, 3)], **_ctx(lambda b: 2))[0]
    y, a = run(m, feeds)
    assert feeds["x"].shape == (1, 3, D) and a.shape == (2, 3, D) and y.shape == (2, 3, D)


# -- the term algebra ----------------------------------------------------------------------


def test_terms():
    e, f = ("dim", 1, 0, "x"), ("dim", 2, 0, "y")
    assert _shapes.broadcast([1, e]) == e and _shapes.broadcast([3, e]) == 3 and _shapes.broadcast([2, 3]) is None
    assert _shapes.broadcast([e, f]) == _shapes.broadcast([f, e, 1]) == ("bcast", (e, f))
    # A Reshape element copied from the input where it is 0: fine unless the copy is 1.
    assert _shapes.compatible(("or0", e, 96), e) and _shapes.compatible(("or0", e, 96), ("or0", e, 32))
    assert not _shapes.compatible(("or0", e, 1), e)
    assert _shapes.broadcast([("or0", e, 96), e]) == e
    # A copy that is 0 wherever e is changes nothing.
    assert _shapes._or_zero(e, _shapes.broadcast([e, f])) == e
    assert _shapes._or_zero(e, _shapes.product([e, f])) == e
    assert _shapes._or_zero(e, f) == ("or0", e, f) and not _shapes.compatible(("or0", e, f), e)
    # Reshape's -1: what is left of the input's element count.
    assert _shapes._quotient((e, f, 16), [f, 4]) == _shapes.product([e], 4)
    assert _shapes._quotient((e, 16), [f]) is None


def test_size_arithmetic():
    """Shape-vector arithmetic on sizes: times a positive int, and an exact division of it."""
    e = ("dim", 1, 0, "x")
    mul, div = _shapes._arith("Mul"), _shapes._arith("Div")
    assert mul(e, 2) == mul(2, e) == _shapes.product([e], 2) and div(_shapes.product([e], 2), 2) == e
    assert div(_shapes.product([e], 6), 3) == _shapes.product([e], 2)
    assert div(e, 2) is None and div(_shapes.product([e], 6), 4) is None  # (floor division: not modelled)
    assert mul(e, -1) is None and mul(e, 0) is None  # (-1 is Reshape's "infer"; 0 its "copy")
    # 2e is 0 only where e is: a copy of e there changes nothing; a copy of e*f could.
    f = ("dim", 2, 0, "y")
    assert _shapes._or_zero(_shapes.product([e], 2), e) == _shapes.product([e], 2)
    assert _shapes._or_zero(_shapes.product([e, f], 2), e)[0] == "or0"


def test_never_one():
    """k times a product of sizes, |k| >= 2, is 0 or at least 2; anything else may be 1."""
    e, f = ("dim", 1, 0, "x"), ("dim", 2, 0, "y")
    two_e, two_f = _shapes.product([e], 2), _shapes.product([f], 2)
    assert all(map(_shapes.never_one, [0, 2, two_e, _shapes.product([e, f], 3), ("or0", two_e, 4), ("or0", two_e, two_f)]))
    assert _shapes.never_one(_shapes.equal([two_e, f]))  # one size: one of its names is never 1
    assert not any(map(_shapes.never_one, [1, e, ("prod", (e,), -1), ("prod", (e,), 1), ("or0", two_e, 1), ("or0", two_e, f),
                                           ("or0", e, 2), ("bcast", (e, f)), _shapes.equal([e, f])]))


def test_broadcast_of_sizes_never_one():
    """Such sizes broadcast only where equal (0 with n >= 2 neither): the result names both."""
    e, f, h = ("dim", 1, 0, "x"), ("dim", 2, 0, "y"), ("dim", 3, 0, "z")
    two_e, two_f = _shapes.product([e], 2), _shapes.product([f], 2)
    both = _shapes.broadcast([two_e, two_f])
    assert both == _shapes.broadcast([two_f, 1, two_e]) == _shapes.equal([two_f, two_e]) == ("eq", (two_e, two_f))
    assert _shapes.broadcast([two_e, h]) == two_e and _shapes.broadcast([two_e, two_f, h]) == both  # (h: 1 or that size)
    assert _shapes.broadcast([both, two_f]) == _shapes.broadcast([both, 1]) == both
    assert _shapes.broadcast([0, two_e]) == 0 and _shapes.broadcast([6, two_e]) == 6  # ints as before
    assert _shapes.broadcast([e, ("prod", (f,), -1)])[0] == "bcast"  # -f could be... not modelled as never 1
    # Either name serves: comparisons, zero values, exact division, Reshape's -1.
    assert _shapes.compatible(both, two_e) and _shapes.compatible(two_f, both) and not _shapes.compatible(both, e)
    assert _shapes.zero_value(both, e) == 0 and _shapes.zero_value(two_e, _shapes.equal([e, f])) == 0
    div = _shapes._arith("Div")
    assert div(both, 2) == _shapes.equal([e, f]) and div(both, 4) is None
    assert _shapes.compatible(div(both, 2), e) and _shapes.compatible(f, div(both, 2))
    assert _shapes._quotient((both, 8), [2, 8]) == _shapes.equal([e, f])
    assert _shapes._quotient((both, h, 8), [h, 16]) == _shapes.equal([e, f]) and _shapes._quotient((both, 8), [h]) is None
    assert _shapes.describe(both) == "(x[0]*2 = y[0]*2)"


def test_one_analysis_per_graph(monkeypatch):
    """The analysis runs once per scope and pass, however many residuals ask."""
    from .fixtures.catalog import fixture_path

    made = []
    real = _shapes.ScopeShapes.__init__

    def counting(self, g, scope):
        made.append(scope.path)
        real(self, g, scope)

    monkeypatch.setattr(_shapes.ScopeShapes, "__init__", counting)
    r = fusion.run(str(fixture_path("bert_legacy_op13_fp32.onnx")), ["skipnorm", "layernorm"])
    assert r.counts()["skiplayernorm"] == 4
    assert made == ["main"]
