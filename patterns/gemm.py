"""Fully connected: Gemm, or MatMul (+ Add bias), with an optional ReLU / GELU after it.

Covered:

* ``Gemm`` with any transA / transB / alpha / beta, C absent, scalar, [N], [1, N] (GPT-2's
  Conv1D is ``addmm`` = Gemm transB=0, nn.Linear on 2-D input is Gemm transB=1);
* ``MatMul(x, W)`` with constant W [K, N] or ``Transpose(W[N, K])``, x of rank >= 2
  ([B, S, K] from transformers; an unknown rank is accepted, as the FC node takes [..., K] of
  any rank), then ``Add`` of a constant bias that varies only along the last dim ([N],
  [1, N], [1, 1, N], scalar), in either operand order; no Add where there is no bias (LLaMA,
  T5);
* a weight written as data movement on a constant (tf2onnx's Keras EinsumDense:
  ``Gemm(x, Reshape(W, Concat([-1], ReduceProd(Gather(Shape(W), [3, 4])))))``): Reshape,
  Transpose, Identity, Squeeze, Unsqueeze and same-type Cast, with shapes and axes computed
  from constants and static shapes only (``_weight_chain``).  The chain must start at a true
  constant and end as a matrix; it is folded when rewriting (plugin: a new initializer; trt:
  baked; onnx: the Gemm reads the chain's output as it is), and its nodes go only where
  nothing else reads them;
* (an FC written as ``Einsum``, tf2onnx's other EinsumDense form, is einsum_fc's: it emits
  through this module);
* then optionally ``Relu``, ``Gelu`` (opset 20, both approximations), or GELU written out:
  erf form ``0.5 * y * (1 + erf(y / sqrt2))`` (Div by sqrt2 or Mul by 1/sqrt2, the 0.5 in any
  of the places exporters put it, or a Div by 2) and tanh form ``0.5 * y * (1 + tanh(sqrt(2/pi)
  * (y + 0.044715 * y^3)))`` (Pow(y, 3) or y*y*y).  Irrational constants are compared with a
  relative tolerance for how exporters round them (1.4142135 vs 1.41421356; 1e-4 for fp32,
  1e-3 for fp16-stored constants, 8e-3 for bf16).  The activation may read the FC through a
  Reshape (GPT-2: addmm, then view(B, S, N), then gelu_new); the Reshape moves after the FC
  node, which an elementwise activation allows.

Not fused, with a near-miss reason: a product of two computed tensors (attention scores
Q @ K^T, probs @ V), W @ x, a weight that is not a constant matrix (a weight chain from an
initializer a caller may feed, or with a Reshape target computed at run time), a Gemm C that
is computed or varies along rows (a bias Add that varies along rows stays an Add after a
bias-less FC), a bare MatMul whose output also feeds a bias Add but is read elsewhere too
(MatMul + Add cannot fuse and the MatMul is left alone), a GELU whose constants are off (the
FC fuses without it).

Targets:

* ``plugin``: one ``FusedFC`` node; W stays the model's initializer (``transpose_weight``
  says its layout, so weights are never read or copied, but for a weight chain, which is
  folded), the bias becomes [N] (zeros where absent; a [1, N] / scalar / beta-scaled bias is
  rewritten, which reads only the small bias).
  At opset 11 activations stay separate nodes: the function body that lets onnxruntime run
  the node cannot refer to a STRING field before opset 12 (see ``_fc_body``);
* ``trt``: TensorRT's ``CustomFCPluginDynamic`` (W baked as an fp32 TENSOR attribute laid out
  [K, N], alpha folded into it): Reshape to [M, 1, K, 1, 1], the plugin, Reshape back, then
  Add(bias) and the activation as standard nodes (the plugin has neither);
* ``onnx``: MatMul + Add becomes a standard ``Gemm`` (rank-2 input directly, other ranks
  through Reshape to [M, K] and back); Gemm nodes are already standard, and activations stay
  separate nodes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from fusion.rewrite import specs
from fusion.ir.graph import FLOAT_TYPES
from fusion.ir.view import Node, Tensor
from fusion.match.pattern import Const, Match, Op, Opt, Var
from fusion.rewrite.editor import Emitter, Reject
from fusion.rewrite.rules import Context, Rule

from . import _fc_body, _weight_chain
from ._constants import check_constant_rank, check_overridable

_fc_body.register()

SQRT2 = math.sqrt(2.0)
_TYPE_NAME = {t: TensorProto.DataType.Name(t) for t in FLOAT_TYPES}
# Relative tolerance for irrational constants, by the constant's element type: exporters
# write sqrt(2) as 1.4142135 or 1.41421356, and an fp16 / bf16 model stores them rounded.
_CONST_RTOL = {
    TensorProto.FLOAT16: 1e-3,
    TensorProto.BFLOAT16: 8e-3,
}
_DEFAULT_RTOL = 1e-4
GELU_CONSTANTS = {
    "sqrt2": ("sqrt(2)", SQRT2),
    "inv_sqrt2": ("1/sqrt(2)", 1.0 / SQRT2),
    "cubic": ("0.044715", 0.044715),
    "tanh_scale": ("sqrt(2/pi)", math.sqrt(2.0 / math.pi)),
}


# -- pattern ----------------------------------------------------------------------------


def _swaps_matrix(node: Node) -> str | None:
    perm = node.attrs.get("perm")
    if perm is None or list(perm) == [1, 0]:
        return None
    return f"perm {list(perm)} is not a matrix transpose"


x = Var("x")
w = Var("w")
weight = Op("Transpose", w, name="w_transpose", where=_swaps_matrix) | w
matmul = Op("MatMul", x, weight, name="matmul")
gemm = Op("Gemm", x, weight, Opt(Var("c")), name="gemm")
# The bias is a Const in the pattern: Add(MatMul, residual) is not a near-miss worth a report.
biased = Op("Add", matmul, Const("b"), name="bias_add")
FC = gemm | biased | matmul


def _half_times(fc, one_plus):
    """0.5 * fc * one_plus, in the orders exporters write it."""
    return (
        Op("Mul", Op("Mul", fc, one_plus, name="g_mul"), Const(value=0.5), name="act")  # torch: x * (1+erf) * 0.5
        | Op("Mul", Op("Mul", fc, Const(value=0.5), name="g_mul"), one_plus, name="act")  # 0.5 * x * (1+erf)
        | Op("Mul", fc, Op("Mul", one_plus, Const(value=0.5), name="g_mul"), name="act")  # x * (0.5 * (1+erf))
        | Op("Div", Op("Mul", fc, one_plus, name="g_mul"), Const(value=2.0), name="act")  # x * (1+erf) / 2
    )


# The activation may read the FC through a Reshape: GPT-2's Conv1D is addmm on [B*S, K] then
# view(B, S, N).  An elementwise activation commutes with it, so the Reshape moves after the FC.
Y = Op("Reshape", FC, Var("out_shape"), name="reshape") | FC
erf_arg = Op("Div", Y, Const("sqrt2"), name="g_scale") | Op("Mul", Y, Const("inv_sqrt2"), name="g_scale")
erf_one = Op("Add", Op("Erf", erf_arg, name="erf"), Const(value=1.0), name="g_one")
cube = Op("Pow", Y, Const(value=3.0), name="g_cube") | Op("Mul", Op("Mul", Y, Y, name="g_square"), Y, name="g_cube")
tanh_arg = Op("Add", Y, Op("Mul", cube, Const("cubic"), name="g_cubic"), name="g_inner")
tanh_one = Op("Add", Op("Tanh", Op("Mul", tanh_arg, Const("tanh_scale"), name="g_tanh_scale"), name="tanh"), Const(value=1.0), name="g_one")

ACTIVATED = Op("Relu", Y, name="act") | Op("Gelu", Y, name="act") | _half_times(Y, erf_one) | _half_times(Y, tanh_one)
PATTERN = ACTIVATED | FC


# -- check ------------------------------------------------------------------------------


@dataclass
class FCDesc:
    """What a matched FC computes: y = act(alpha * op(x) @ W + bias)."""

    x: Tensor
    y: Tensor  # the match's output
    w: Tensor  # the stored weight initializer / constant
    k: int
    n: int
    transpose_weight: int  # 1: w is stored [N, K]
    trans_a: bool  # Gemm transA=1: x is [K, M]
    alpha: float
    bias: Tensor | None
    beta: float  # bias scale (Gemm beta)
    activation: str  # one of specs.FC_ACTIVATIONS
    kind: str  # "gemm" | "matmul" | "einsum" (einsum_fc's)
    reshape: Node | None  # a Reshape between the FC and its activation, re-emitted after both
    rank: int | None  # rank of x (None: unknown, >= 2 if known)
    elem_type: int
    w_chain: _weight_chain.Chain | None = None  # w is data movement on a constant, folded when rewriting
    notes: list[str] = field(default_factory=list)
    # An Einsum read as an FC (einsum_fc): its kernel exists only folded to [K, N] (no tensor of
    # the graph holds that matrix, so every target reads the fold), x may be reshaped first (it
    # contracts several axes), and N is the output's trailing dims, over which the bias broadcasts.
    w_in_graph: bool = True
    x_name: str | None = None
    out_dims: tuple[int, ...] | None = None


def analyze(m: Match, ctx: Context) -> FCDesc:
    g = ctx.graph
    core = m.get("gemm") or m["matmul"]
    kind = core.op.lower()
    what = f"{core.op} {core.name!r}"
    xt, wt = m["x"], m["w"]
    # W, the bias and a moved Reshape's shape go to the new nodes as inputs (W is baked for
    # target trt, a bias that needs reshaping or scaling is checked where it is read).
    check_overridable(g, m, ("x", "w", "b", "c", "out_shape"))
    # An initializer a caller may feed still has a fixed shape and reaches the FC as an input.
    x_const, w_const = g.is_constant(xt), g.is_constant(wt) or g.overridable(wt)
    # tf2onnx's Gemm(x, Reshape(W)): data movement on a constant, folded when rewriting.
    chain = None if w_const else _weight_chain.trace(g, wt, what)
    if chain is None and not w_const:
        if x_const:
            raise Reject(f"{what}: the constant is the left operand (W @ x), an FC computes x @ W")
        raise Reject(
            f"{what}: both operands are computed ({xt.name!r}, {wt.name!r}): an activation x activation "
            "product such as attention scores is not a fully-connected layer"
        )
    if x_const:
        raise Reject(f"{what}: both operands are constants (a constant-folding candidate, not an FC)")
    wshape = chain.shape if chain is not None else g.fixed_shape(wt)
    if wshape is None:
        raise Reject(f"{what}: weight: {g.not_constant_reason(wt)}, and its graph input does not pin its shape and type")
    if len(wshape) != 2:
        folded = "" if chain is None else f" (folded from {chain.describe()})"
        raise Reject(f"{what}: weight {wt.name!r} has shape {list(wshape)}{folded}, not a matrix")

    attrs = core.attrs
    transposed = "w_transpose" in m
    trans_a = kind == "gemm" and bool(attrs.get("transA", 0))
    tw = int(transposed) ^ (int(bool(attrs.get("transB", 0))) if kind == "gemm" else 0)
    k, n = (wshape[1], wshape[0]) if tw else (wshape[0], wshape[1])
    alpha = float(attrs.get("alpha", 1.0)) if kind == "gemm" else 1.0
    beta = float(attrs.get("beta", 1.0)) if kind == "gemm" else 1.0

    # Gemm's A is a matrix by definition.  A MatMul input of unknown rank is accepted: the FC
    # node is defined on [..., K] of any rank, as MatMul is.  So shape inference (slow on big
    # models, and it gives up after a computed Reshape in many legacy exports) runs only for
    # a bias of rank > 1, whose broadcast depends on the rank.
    xshape = g.shape(xt, infer=False)
    if xshape is None and "bias_add" in m and len(g.fixed_shape(m["b"]) or ()) > 1:
        xshape = g.shape(xt)
    rank = 2 if kind == "gemm" else (None if xshape is None else len(xshape))
    if rank is not None and rank < 2:
        raise Reject(f"{what}: input {xt.name!r} has rank {rank}; an FC needs [..., K] with rank >= 2")
    if xshape is not None and len(xshape) == rank:
        last = xshape[0] if trans_a else xshape[-1]
        if isinstance(last, int) and last != k:
            raise Reject(f"{what}: input {xt.name!r} has {last} features but weight {wt.name!r} expects {k}")

    t_w = chain.elem_type if chain is not None else g.elem_type(wt)
    t = g.elem_type(xt, infer=False) or t_w  # MatMul / Gemm take one type: W's (a constant) says it
    if t is None:
        raise Reject(f"{what}: the element type of {xt.name!r} is unknown")
    if t not in FLOAT_TYPES:
        raise Reject(f"{what}: element type {TensorProto.DataType.Name(t)} is not a float type")
    if t_w != t:
        raise Reject(f"{what}: weight type {TensorProto.DataType.Name(t_w)} differs from the input's {_TYPE_NAME[t]}")

    bias = None
    if kind == "gemm":
        c = m.get("c")
        if c is not None and beta != 0.0:
            _check_bias(g, c, n, 2, f"{what}: C")
            bias = c
    elif "bias_add" in m:
        b = m["b"]
        _check_bias(g, b, n, rank, f"Add {m['bias_add'].name!r}: operand")
        bias = b
    else:
        _check_bare_matmul(g, ctx, m["matmul"])

    activation = _activation(g, m)
    # The activation's constants (0.5, 1, √2, ...) must not grow the output either.
    tail = [n for n in m.all_nodes if not any(n is m.get(k) for k in ("gemm", "matmul", "bias_add", "w_transpose", "reshape"))]
    if "reshape" in m:
        y_in = m["reshape"].outputs[0]
        y_shape = g.shape(y_in, infer=False)
        y_rank, known_min = (None if y_shape is None else len(y_shape)), 0
    else:
        y_in, y_rank, known_min = m["x"], rank, 1
    check_constant_rank(g, tail, y_rank, known_min, lambda: _rank(g, y_in))
    return FCDesc(
        x=xt,
        y=m.root.outputs[0],
        w=wt,
        k=int(k),
        n=int(n),
        transpose_weight=tw,
        trans_a=trans_a,
        alpha=alpha,
        bias=bias,
        beta=beta,
        activation=activation,
        kind=kind,
        reshape=_moved_reshape(g, m),
        rank=rank,
        elem_type=t,
        w_chain=chain,
    )


def _rank(g, t: Tensor) -> int | None:
    shape = g.shape(t)
    return None if shape is None else len(shape)


def _moved_reshape(g, m: Match) -> Node | None:
    """The Reshape between FC and activation; its target shape must not be computed from the match.

    (The driver removes a node that reads an intermediate and only feeds the match, and the
    re-emitted Reshape reads its target shape after the match is gone.)  Nodes are in
    topological order, so what comes before the match's first node cannot depend on it.
    """
    node = m.get("reshape")
    if node is None:
        return None
    inside = {id(n) for n in m.all_nodes}
    first = min(g.node_index(n) for n in m.all_nodes)
    stack, seen = [m["out_shape"]], set()
    while stack:
        t = stack.pop()
        p = t.inputs[0] if len(t.inputs) == 1 else None
        # Producers in an enclosing graph cannot depend on a subgraph's intermediates.
        if p is None or id(p) in seen or p.graph is not node.graph or g.node_index(p) < first:
            continue
        if id(p) in inside:
            raise Reject(f"Reshape {node.name!r}: its target shape is computed from the FC's own output")
        seen.add(id(p))
        if len(seen) > 256:
            raise Reject(f"Reshape {node.name!r}: its target shape comes from too deep a computation to follow")
        stack.extend(p.inputs)
    return node


def _check_bias(g, b: Tensor, n: int, out_rank: int | None, what: str) -> None:
    """The bias must be a constant that varies only along the output features."""
    if not g.is_constant(b):
        if not g.overridable(b):
            raise Reject(f"{what} {b.name!r} is computed, not a constant bias")
        if g.fixed_shape(b) is None:
            raise Reject(f"{what}: {g.not_constant_reason(b)}, and its graph input does not pin its shape and type")
    shape = list(g.fixed_shape(b))
    if out_rank is None and len(shape) > 1:
        raise Reject(f"{what} {b.name!r} has rank {len(shape)} and the input's rank is unknown: the output could grow")
    if out_rank is not None and len(shape) > out_rank:
        raise Reject(f"{what} {b.name!r} has rank {len(shape)}, more than the output's {out_rank}: the output would grow")
    if shape and shape[-1] not in (1, n):
        raise Reject(f"{what} {b.name!r} has shape {shape}, which does not broadcast to {n} output features")
    if any(d != 1 for d in shape[:-1]):
        raise Reject(f"{what} {b.name!r} has shape {shape}: it varies along rows, not only along the output features")


def _check_bare_matmul(g, ctx: Context, node: Node) -> None:
    """A MatMul whose bias Add could not be fused with it (its output is read elsewhere too) stays."""
    out = node.outputs[0]
    elsewhere = len(out.outputs) > 1 or out.name in ctx.scope.output_names
    if not elsewhere:
        return
    for c in out.outputs:
        if c.op == "Add" and c.domain in (None, "", "ai.onnx") and len(c.inputs) == 2:
            other = c.inputs[1] if c.inputs[0] is out else c.inputs[0]
            if g.is_constant(other) or g.overridable(other):
                users = ", ".join(f"{u.op} {u.name!r}" for u in out.outputs if u is not c)
                if out.name in ctx.scope.output_names:
                    users = ", ".join(filter(None, [users, "a graph output"]))
                raise Reject(
                    f"MatMul {node.name!r}: its output feeds bias Add {c.name!r} but is also read by {users}, "
                    "so MatMul + Add cannot fuse, and the MatMul alone is left as it is"
                )


def _activation(g, m: Match) -> str:
    if "act" not in m:
        return "none"
    act = m["act"]
    if act.op == "Relu":
        return "relu"
    if act.op == "Gelu":
        approx = act.attrs.get("approximate", "none")
        approx = approx.decode() if isinstance(approx, bytes) else approx
        if approx not in ("none", "tanh"):
            raise Reject(f"Gelu {act.name!r}: approximate={approx!r} is not none or tanh")
        return "gelu_erf" if approx == "none" else "gelu_tanh"
    form = "gelu_erf" if "erf" in m else "gelu_tanh"
    for role in ("sqrt2", "inv_sqrt2") if form == "gelu_erf" else ("cubic", "tanh_scale"):
        if role in m:
            _check_constant(g, m[role], role, form)
    return form


def _check_constant(g, t: Tensor, role: str, form: str) -> None:
    label, want = GELU_CONSTANTS[role]
    value = g.scalar(t)
    if value is None and g.overridable(t):
        raise Reject(f"{form}: {g.not_constant_reason(t)}")
    if value is None:
        raise Reject(f"{form}: {t.name!r} should be the one-element constant {label}")
    rtol = _CONST_RTOL.get(g.elem_type(t), _DEFAULT_RTOL)
    if not math.isclose(value, want, rel_tol=rtol):
        raise Reject(f"{form}: {t.name!r} is {value:.8g}, not {label} = {want:.8g} (within {rtol:g})")


# -- rewrite ----------------------------------------------------------------------------


def emit(desc: FCDesc, em: Emitter, ctx: Context) -> None:
    # The plugins accumulate in fp32; Gemm computes in the model's type.
    em.compute_type = desc.elem_type if ctx.target == "onnx" else TensorProto.FLOAT
    if ctx.target != "plugin" and 0 in (desc.k, desc.n):
        raise Reject(f"target {ctx.target}: weight {desc.w.name!r} has a zero-size dim")
    if ctx.target == "plugin":
        _emit_plugin(desc, em, ctx)
    elif ctx.target == "trt":
        _emit_trt(desc, em, ctx)
    else:
        _emit_onnx(desc, em, ctx)
    if desc.reshape is not None:
        em.node("Reshape", [em.nodes[-1].output[0], desc.reshape.inputs[1].name], **dict(desc.reshape.attrs))
    em.nodes[-1].output[0] = desc.y.name


def _np_type(t: int):
    return helper.tensor_dtype_to_np_dtype(t)


def _emit_plugin(desc: FCDesc, em: Emitter, ctx: Context) -> None:
    t = desc.elem_type
    if t == TensorProto.DOUBLE:
        raise Reject("target plugin: FusedFC takes fp32/fp16/bf16, not DOUBLE")
    if desc.activation != "none" and ctx.opset < 12:
        raise Reject(
            f"target plugin: at opset {ctx.opset} the FusedFC function body cannot refer to the activation field "
            "(Constant.value_string needs opset 12), so the activation stays a separate node"
        )
    x = _input(desc, em)
    bias = _bias_vector(desc, em, ctx)
    em.plugin(
        specs.FUSED_FC,
        [x, _weight(desc, em, ctx), bias],
        em.name("FusedFC_out"),
        t,
        out_features=desc.n,
        transpose_weight=desc.transpose_weight,
        alpha=desc.alpha,
        activation=desc.activation,
    )


def _emit_trt(desc: FCDesc, em: Emitter, ctx: Context) -> None:
    t = desc.elem_type
    if t not in (TensorProto.FLOAT, TensorProto.FLOAT16):
        raise Reject(f"target trt: CustomFCPluginDynamic takes fp32/fp16, not {_TYPE_NAME[t]}")
    g = ctx.graph
    if desc.w_chain is not None:
        value = _weight_chain.fold(g, desc.w_chain)
        desc.notes.append(_fold_note(desc.w_chain, "baked into the node's W"))
    elif not g.is_constant(desc.w):
        raise Reject(f"target trt: CustomFCPluginDynamic bakes W into the node: {g.not_constant_reason(desc.w)}")
    else:
        value = g.constant_value(desc.w, max_elements=1 << 62)  # the plugin bakes W: read it here
    if desc.transpose_weight:
        value = value.T
    if desc.alpha != 1.0:
        value = value.astype(np.float64) * desc.alpha
    # fp32 whatever type_id says: the creator declares W as kFLOAT32 and converts it to its
    # compute type itself (WeightsWithOwnership::convertAndCopy).
    weights = numpy_helper.from_array(np.ascontiguousarray(value.astype(np.float32)), "W")

    x = _input(desc, em)
    rows = em.node("Reshape", [x, em.const("fc_in_shape", np.array([-1, 1, desc.k, 1, 1], np.int64))])[0]
    y = em.plugin(
        specs.TRT_FC,
        [rows],
        em.name("CustomFCPluginDynamic_out"),
        t,
        out_dims=desc.n,
        type_id=0 if t == TensorProto.FLOAT else 1,
        W=weights,
    )
    y = _reshape_out(desc, em, ctx, y, x)
    if desc.bias is not None:
        y = em.node("Add", [y, _bias_vector(desc, em, ctx)])[0]
    _activation_nodes(desc.activation, y, t, em, ctx)


def _emit_onnx(desc: FCDesc, em: Emitter, ctx: Context) -> None:
    if desc.kind == "gemm":
        raise Reject("target onnx: already a standard Gemm")
    if desc.activation != "none":
        raise Reject("target onnx: the activation stays a separate node (the MatMul + Add before it is rewritten alone)")
    if desc.bias is None and desc.kind != "einsum":
        raise Reject("target onnx: a MatMul without bias is already standard ONNX")
    g = ctx.graph
    bshape = None if desc.bias is None else tuple(g.fixed_shape(desc.bias))
    # Gemm's C broadcasts unidirectionally to [M, N]: the bias goes in as it is where it can.
    if bshape is None:
        bias = None
    elif len(bshape) <= 2 and all(d == 1 for d in bshape[:-1]) and desc.out_dims is None:
        bias = desc.bias.name
    else:
        bias = _bias_vector(desc, em, ctx)
    attrs = {"transB": 1} if desc.transpose_weight else {}
    x, w = _input(desc, em), desc.w.name if desc.w_in_graph else _weight(desc, em, ctx)
    inputs = [w] if bias is None else [w, bias]  # Gemm's C is optional from opset 11 (Einsum: 12)
    if desc.rank == 2:
        em.node("Gemm", [x, *inputs], **attrs)
        return
    rows = em.node("Reshape", [x, em.const("fc_in_shape", np.array([-1, desc.k], np.int64))])[0]
    y = em.node("Gemm", [rows, *inputs], **attrs)[0]
    _reshape_out(desc, em, ctx, y, x)


def _weight(desc: FCDesc, em: Emitter, ctx: Context) -> str:
    """W as FusedFC gets it: the model's own tensor, or a folded chain's value as a new constant."""
    if desc.w_chain is None:
        return desc.w.name
    desc.notes.append(_fold_note(desc.w_chain, "a new initializer FusedFC reads"))
    return em.const("weight", _weight_chain.fold(ctx.graph, desc.w_chain))


def _fold_note(chain: _weight_chain.Chain, into: str) -> str:
    return f"weight {chain.tensor.name!r} = {chain.describe()}: folded when fusing to {list(chain.shape)}, {into}"


def _input(desc: FCDesc, em: Emitter) -> str:
    if desc.x_name is not None:
        return desc.x_name
    if desc.trans_a:
        return em.node("Transpose", [desc.x.name], perm=[1, 0])[0]
    return desc.x.name


def _bias_vector(desc: FCDesc, em: Emitter, ctx: Context) -> str:
    """The bias as an [N] constant of the compute type (zeros where the model has none)."""
    g = ctx.graph
    t = desc.elem_type
    np_t = _np_type(t)
    if desc.bias is None:
        return em.const("bias", np.zeros(desc.n, np_t))
    shape = tuple(g.fixed_shape(desc.bias))
    if shape == (desc.n,) and desc.beta == 1.0 and g.elem_type(desc.bias) == t:
        return desc.bias.name  # already right: no copy, no read
    if g.overridable(desc.bias):
        return _fed_bias(desc, em, shape)
    value = g.constant_value(desc.bias)
    if value is None:
        raise Reject(f"bias {desc.bias.name!r} is too large to reshape")
    if desc.out_dims is None:
        value = np.broadcast_to(np.asarray(value).reshape(-1), (desc.n,))
    else:  # over the output's trailing dims (the rule checked the others are 1)
        dims = desc.out_dims
        value = np.asarray(value).reshape(np.shape(value)[max(0, np.ndim(value) - len(dims)):])
        value = np.broadcast_to(value, dims).reshape(desc.n)
    if desc.beta != 1.0:
        value = value.astype(np.float64) * desc.beta
    return em.const("bias", np.ascontiguousarray(value.astype(np_t)))


def _fed_bias(desc: FCDesc, em: Emitter, shape: tuple) -> str:
    """A bias a caller may feed, made [N] by nodes (its value is not known to bake)."""
    b = desc.bias.name
    if desc.beta != 1.0:
        b = em.node("Mul", [b, em.const("beta", np.array(desc.beta, _np_type(desc.elem_type)))])[0]
    if shape != (desc.n,):
        b = em.node("Reshape", [b, em.const("bias_flat", np.array([-1], np.int64))])[0]
        if int(np.prod(shape)) != desc.n:  # one element: broadcast along the features
            b = em.node("Expand", [b, em.const("bias_n", np.array([desc.n], np.int64))])[0]
    return b


def _reshape_out(desc: FCDesc, em: Emitter, ctx: Context, y: str, x: str) -> str:
    """``y`` (rows of N) reshaped to the FC output: x's leading dims and N, zero-size ones kept."""
    if desc.rank == 2:
        return em.node("Reshape", [y, em.const("fc_out_shape", np.array([-1, desc.n], np.int64))])[0]
    return em.reshape(y, _output_shape(desc, em, ctx, x))


def _output_shape(desc: FCDesc, em: Emitter, ctx: Context, x: str) -> str:
    """Shape of the FC output: x's leading dims and N."""
    shape = em.node("Shape", [x])[0]
    if ctx.opset >= 10:
        lead = em.node(
            "Slice",
            [shape, em.const("lead_start", np.array([0], np.int64)), em.const("lead_end", np.array([-1], np.int64))],
        )[0]
    else:
        lead = em.node("Slice", [shape], starts=[0], ends=[-1], axes=[0])[0]
    return em.node("Concat", [lead, em.const("out_features", np.array([desc.n], np.int64))], axis=0)[0]


def _activation_nodes(activation: str, y: str, t: int, em: Emitter, ctx: Context) -> str:
    """Standard nodes computing ``activation(y)`` (the trt target's epilogue)."""
    if activation == "none":
        return y
    if activation == "relu":
        return em.node("Relu", [y])[0]
    if ctx.opset >= 20:
        return em.node("Gelu", [y], approximate="none" if activation == "gelu_erf" else "tanh")[0]
    np_t = _np_type(t)

    def c(hint: str, v: float) -> str:
        return em.const(hint, np.array(v, np_t))

    if activation == "gelu_erf":
        inner = em.node("Erf", [em.node("Mul", [y, c("inv_sqrt2", 1.0 / SQRT2)])[0]])[0]
    else:
        cubed = em.node("Mul", [em.node("Mul", [y, y])[0], y])[0]
        arg = em.node("Add", [y, em.node("Mul", [cubed, c("cubic", 0.044715)])[0]])[0]
        inner = em.node("Tanh", [em.node("Mul", [arg, c("tanh_scale", math.sqrt(2.0 / math.pi))])[0]])[0]
    one_plus = em.node("Add", [inner, c("one", 1.0)])[0]
    return em.node("Mul", [em.node("Mul", [y, c("half", 0.5)])[0], one_plus])[0]


class GemmRule(Rule):
    name = "gemm"
    pass_name = "gemm"
    pattern = PATTERN
    # An Add(MatMul, not-a-bias) binds 2 nodes; a GELU that fails where it starts to differ from
    # one (an RMSNorm's Mul(x, rsqrt) next to an FC, SiLU's Sigmoid) binds 4.
    min_progress = 5
    signature = frozenset({"MatMul", "Gemm"})
    doc = "Gemm | MatMul (+ Add bias) (+ Relu / Gelu / erf- or tanh-GELU) → FusedFC"
    variants = (
        "Gemm: any transA / transB / alpha / beta; C absent, scalar, [N] or [1, N]",
        "MatMul(x, W): W a constant [K, N] or Transpose of a constant [N, K]; x of rank ≥ 2 or unknown",
        "weight chain: W = Reshape / Transpose / Identity / Squeeze / Unsqueeze / same-type Cast of a constant, "
        "shapes folded from constants and Shape of constants (tf2onnx's Gemm(x, Reshape(W)))",
        "bias: Add of a constant [N], [1, N], [1, 1, N] or scalar, either operand order; or no Add",
        "activation: Relu, or Gelu (opset 20, approximate none or tanh)",
        "erf GELU: 0.5·y·(1 + erf(y / √2)), Div by √2 or Mul by 1/√2, the 0.5 in any place or a Div by 2",
        "tanh GELU: 0.5·y·(1 + tanh(√(2/π)·(y + 0.044715·y³))), Pow(y, 3) or y·y·y",
        "reshape: a Reshape between the FC and its activation (GPT-2's addmm + view) moves after the fused node",
    )

    def check(self, m, ctx):
        return analyze(m, ctx)

    def rewrite(self, desc, em, ctx):
        emit(desc, em, ctx)


RULE = GemmRule()
