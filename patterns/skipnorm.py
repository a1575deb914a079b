"""Skip norms: the residual Add(x, skip) (+ bias) that feeds a LayerNorm or RMSNorm chain.

Inside a TensorRT engine most of what a fused norm saves is memory traffic, and the residual
sum in front of it is written out and read back by the norm: one node that reads x and skip
once and writes the normalized output (and the sum, where later nodes read it) saves that.

Post-norm (BERT): the sum feeds only the norm.  Pre-norm (GPT-2, ViT, LLaMA, T5): the sum is
also the next residual, so the fused node has a second output, the sum, under its old name.
The norm part is the LayerNorm / RMSNorm rules' own pattern and check (``analyze``); where a
skip norm does not fit, those rules, tried next at the same root, fuse the norm alone.  A plain
rule's pattern becomes a skip rule's by putting the residual in place of its input
(:func:`over_sum`): so TensorFlow's LayerNorm, whose input x is read by the mean, the variance
and x·s alike, takes the residual Add in front of it as the other spellings do.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import numpy_helper

from fusion.ir.graph import producer
from fusion.ir.view import Tensor
from fusion.match.pattern import Alt, Const, Match, Op, Opt, Pattern, Var
from fusion.rewrite import functions, specs
from fusion.rewrite.editor import Emitter, Reject
from fusion.rewrite.rules import Context, Rule

from . import _algebra as alg
from . import _shapes, layernorm, native, rmsnorm
from ._constants import check_overridable
from ._norm import NormDesc, _affine, _check_affine, _normalized_shape, _proven_dim, analyze, norm_types
from ._skip_body import register as _register_bodies

_register_bodies()

# The pattern object the norm reads as its input: the bias Add, or the residual Add itself.
_residual = Op("Add", Var("a"), Var("b"), name="residual")
SUM = Op("Add", _residual, Const("bias"), name="add_bias") | _residual


def over_sum(p: Pattern, x: Var) -> Pattern:
    """A plain norm rule's pattern with the residual :data:`SUM` in place of its input ``x``.

    The copy keeps the pattern's sharing (an object reached twice is copied once), so every
    place the norm reads x must read the one residual sum, as the matcher binds a shared
    pattern to one tensor; ``where`` tests are kept as they are (guards that change no match)."""
    memo: dict[int, Pattern] = {id(x): SUM}

    def copy(q: Pattern) -> Pattern:
        if id(q) in memo:
            return memo[id(q)]
        if isinstance(q, Op):
            out: Pattern = Op(q.op_type, *map(copy, q.inputs), name=q.name, commute=q.commute, where=q.where,
                              quiet=q.quiet)
        elif isinstance(q, Alt):
            out = Alt(*map(copy, q.options))
        elif isinstance(q, Opt):
            out = Opt(copy(q.inner))
        else:  # Var, Const: no inputs; shared as they are
            out = q
        memo[id(q)] = out
        return out

    return copy(p)

# TensorRT 8.5.3's CustomSkipLayerNormPluginDynamic has no epsilon field: it adds none (later
# releases add the type's machine epsilon).  Only a model eps this small is within fp32 rounding.
# Its variance is E[s^2] - mean^2 in one pass: rows with a large mean lose precision to
# cancellation, which no check at fusion time can see (one more reason it is off by default).
TRT_SKIP_MAX_EPS = 1e-9


@dataclass
class SkipDesc:
    norm: NormDesc
    a: Tensor
    b: Tensor
    bias: Tensor | None
    sum: Tensor  # the tensor the norm reads: the residual sum (with the bias)
    with_sum: bool  # nodes outside the match read the sum: the fused node outputs it
    sum_out: Tensor | None = None  # the name they read it by: the sum, or a Cast of it to its own type


class SkipNormRule(Rule):
    pass_name = "skipnorm"
    min_progress = 5
    defers_misses = True
    # As the plain norm rules: a mean of some spelling, and a Sqrt/Pow root below it.
    signature = alg.REDUCTIONS
    anchors = (alg.ROOTS,)
    kind = ""
    reductions: tuple[str, ...] = ()

    def exported(self, m: Match) -> frozenset[int]:
        # The sum, and a Cast of it inside the chain (HF LLaMA/T5 upcast the sum to fp32 before
        # the norm, and in fp32 models the next residual reads that no-op Cast): check() decides.
        top = m.nodes.get("add_bias") or m.nodes.get("residual")
        if top is None:
            return frozenset()
        return frozenset({id(top)} | {id(n) for n in _sum_casts(m, top.outputs[0])})

    def check(self, m: Match, ctx: Context) -> SkipDesc:
        g = ctx.graph
        top = m.nodes.get("add_bias") or m["residual"]
        s = top.outputs[0]
        # The norm's own checks, with the sum as its input; the residual nodes checked here.
        residual = {id(top), id(m["residual"])}
        norm_nodes = [n for n in m.all_nodes if id(n) not in residual]
        view = Match(m.root, m.nodes, {**m.tensors, "x": s}, norm_nodes)
        desc = self.describe(view, ctx)
        check_overridable(g, Match(m.root, m.nodes, m.tensors, [top, m["residual"]]), ("a", "b", "bias"))
        if not desc.trailing:
            raise Reject(f"normalized axes {list(desc.axes)} are not the trailing ones: skip norms fuse trailing axes only")
        a, b = m["a"], m["b"]
        sa, sb = g.shape(a), g.shape(b)
        _check_same_shape(g, a, b, sa, sb, ctx)
        if sa is None:  # (the bias check reads the input's static dims)
            sa = _shapes.static_dims(g, a, ctx.scope)
        bias = m.get("bias")
        if bias is not None:
            pshape = g.fixed_shape(bias)
            if pshape is None:
                raise Reject(f"bias: {g.not_constant_reason(bias)}, and its graph input does not pin its shape and type "
                             "to the initializer's")
            _check_affine(pshape, sa, desc.axes, f"bias {bias.name!r}", lambda ax: _proven_dim(g, a, ax, ctx.scope))
            if g.elem_type(bias) != g.elem_type(a):
                raise Reject(f"bias {bias.name!r} is {_name(g.elem_type(bias))}, the sum {_name(g.elem_type(a))}")
        inside = {id(n) for n in m.all_nodes}

        def read_outside(t: Tensor) -> bool:
            return t.name in ctx.scope.output_names or any(id(c) not in inside for c in t.outputs)

        read = [t for t in [s] + [c.outputs[0] for c in _sum_casts(m, s)] if read_outside(t)]
        if len(read) > 1:
            raise Reject(f"later nodes read both the sum {s.name!r} and its Cast {read[1].name!r}: the fused node has one "
                         "sum output")
        sum_out = read[0] if read else None
        if sum_out is not None and sum_out is not s:
            to = int(sum_out.inputs[0].attrs["to"])
            if to != g.elem_type(s):
                raise Reject(f"later nodes read the sum cast to {_name(to)} ({sum_out.name!r}); the fused node outputs it "
                             f"as {_name(g.elem_type(s))}")
        if sum_out is not None:
            root_at = g.node_index(m.root)
            early = [c for c in sum_out.outputs if c.scope is ctx.scope and g.node_index(c) < root_at and id(c) not in inside]
            if early:
                raise Reject(f"{early[0].op} {early[0].name!r} reads the sum {sum_out.name!r} before the norm ends in node "
                             "order")
        return SkipDesc(desc, a, b, bias, s, sum_out is not None, sum_out)

    def describe(self, view: Match, ctx: Context) -> NormDesc:
        """The norm part, its input ``x`` the sum: the decomposed chain's checks."""
        s = view["x"]
        if self.kind == "rms" and rmsnorm._centered(s):
            raise Reject(f"{s.name!r} is centered by a ReduceMean: a LayerNorm that did not fuse, not an RMSNorm")
        return analyze(view, ctx, self.kind, self.reductions)

    def rewrite(self, desc: SkipDesc, em: Emitter, ctx: Context) -> None:
        emit_skip(desc, em, ctx)


def _sum_casts(m: Match, s: Tensor) -> list:
    """The matched Casts that read the sum directly."""
    return [n for n in dict.fromkeys(m.all_nodes) if n.op == "Cast" and n.inputs and n.inputs[0] is s]


def _name(t) -> str:
    return "an unknown type" if t is None else onnx.TensorProto.DataType.Name(t)


def _check_same_shape(g, a: Tensor, b: Tensor, sa, sb, ctx: Context) -> None:
    """The fused node adds x and skip elementwise: no broadcasting, so their shapes must agree.

    Each axis is proven from the graph's structure (patterns/_shapes.py: the sizes each tensor
    is built from), else from ONNX's shapes and ``_proven_dim``."""
    ta, tb = _shapes.terms(g, a, ctx.scope), _shapes.terms(g, b, ctx.scope)
    if ta is None or tb is None:
        ta, tb = sa, sb  # the ranks come from ONNX's shapes, if at all
        if sa is None or sb is None:
            raise Reject(f"cannot tell that {a.name!r} and {b.name!r} have one shape (shapes unknown): the fused node "
                         "adds them without broadcasting")
    if len(ta) != len(tb):
        raise Reject(f"skip {b.name!r} has rank {len(tb)}, the input {a.name!r} rank {len(ta)}: the residual Add "
                     "broadcasts, the fused node would not")
    rank = len(ta)

    def dim(shape, axis):  # ONNX's dim on that axis, where its rank agrees
        return shape[axis] if shape is not None and len(shape) == rank else None

    for axis in range(-rank, 0):
        if ta is not sa and _shapes.compatible(ta[axis], tb[axis]):
            continue
        da, db = dim(sa, axis), dim(sb, axis)
        if da == db and da is not None and da != "":
            continue
        pa = da if isinstance(da, int) else _proven_dim(g, a, axis, ctx.scope)
        pb = db if isinstance(db, int) else _proven_dim(g, b, axis, ctx.scope)
        if pa is None or pa != pb:
            shown = [list(s) if ta is sa else [_shapes.describe(d) for d in s] for s in (ta, tb)]
            raise Reject(f"{a.name!r} has shape {shown[0]} and {b.name!r} {shown[1]}: cannot tell they agree on "
                         f"axis {axis}, and the fused node adds them without broadcasting")


def emit_skip(d: SkipDesc, em: Emitter, ctx: Context) -> None:
    g = ctx.graph
    desc = d.norm
    t_in, t_out, t, cast_in = norm_types(desc, em, ctx)
    if cast_in or g.elem_type(d.a) is None:
        raise Reject(f"the element type of the sum {d.sum.name!r} is unknown")
    if t != t_in:
        raise Reject(f"the sum is {_name(t_in)} and the norm computes in {_name(t)}: the fused node computes both in one type")
    k = len(desc.axes)
    norm_shape = _normalized_shape(g, desc, g.shape(desc.x))
    target = ctx.target
    lname = "LayerNorm" if desc.kind == "layer" else "RMSNorm"
    if target == "trt":
        _trt_refusals(d, t, norm_shape)
    # The node always has both outputs (ONNX function inference wants a slot for each); an unread
    # sum gets a name of its own rather than "": TensorRT 8.5's parser takes "" as a tensor name,
    # and two such nodes fail its unique-name and topological-sort checks (seen on the H100).
    outputs = [em.name(lname + "_out"), d.sum_out.name if d.with_sum else em.name(lname + "_sum")]
    if target == "onnx":
        need, op = (17, "LayerNormalization") if desc.kind == "layer" else (23, "RMSNormalization")
        if ctx.opset < need:
            raise Reject(f"target onnx: {op} needs opset {need}, the model has {ctx.opset}")
        s = em.node("Add", [d.a.name, d.b.name])[0]
        if d.bias is not None:
            s = em.node("Add", [s, d.bias.name])[0]
        if d.with_sum:
            em.nodes[-1].output[0] = s = d.sum_out.name
        gamma = _affine(em, g, desc.gamma, desc, norm_shape, norm_shape, t, 1.0, "gamma")
        inputs = [s, gamma]
        if desc.kind == "layer" and desc.beta is not None:
            inputs.append(_affine(em, g, desc.beta, desc, norm_shape, norm_shape, t, 0.0, "beta"))
        y = em.node(op, inputs, axis=-k, epsilon=desc.epsilon, stash_type=em.compute_type)[0]
    elif target == "plugin":
        spec = specs.FUSED_SKIP_LAYER_NORM if desc.kind == "layer" else specs.FUSED_SKIP_RMS_NORM
        inputs = [d.a.name, d.b.name, _affine(em, g, d.bias, desc, norm_shape, norm_shape, t, 0.0, "bias"),
                  _affine(em, g, desc.gamma, desc, norm_shape, norm_shape, t, 1.0, "gamma")]
        if desc.kind == "layer":
            inputs.append(_affine(em, g, desc.beta, desc, norm_shape, norm_shape, t, 0.0, "beta"))
        y = em.plugin(spec, inputs, outputs, t, epsilon=desc.epsilon, axis=-k, with_sum=int(d.with_sum))
    else:
        y = _emit_trt(d, em, g, t, norm_shape)
    if t != t_out:
        y = em.node("Cast", [y], to=t_out)[0]
    em.nodes[-1].output[0] = desc.y.name


def _trt_refusals(d: SkipDesc, t: int, norm_shape) -> None:
    desc = d.norm
    if desc.kind != "layer":
        raise Reject("target trt: TensorRT ships no skip RMSNorm plugin")
    if d.with_sum:
        raise Reject("target trt: later nodes read the residual sum, and CustomSkipLayerNormPluginDynamic v1 does not "
                     "output it")
    if t != onnx.TensorProto.FLOAT:
        raise Reject(f"target trt: CustomSkipLayerNormPluginDynamic accumulates in its input type, so it fuses fp32 "
                     f"only, not {_name(t)}")
    if len(desc.axes) != 1 or norm_shape is None:
        raise Reject("target trt: CustomSkipLayerNormPluginDynamic normalizes one static trailing dim (ld)")
    if desc.epsilon > TRT_SKIP_MAX_EPS:
        raise Reject(f"target trt: CustomSkipLayerNormPluginDynamic has no epsilon field (TensorRT 8.5 adds none), "
                     f"and this norm's is {desc.epsilon:g}")


def _emit_trt(d: SkipDesc, em: Emitter, g, t: int, norm_shape) -> str:
    desc = d.norm
    ld = int(norm_shape[0])
    for p in (desc.gamma, desc.beta, d.bias):
        if p is not None and g.overridable(p):
            raise Reject(f"target trt: {p.name!r} is baked into the plugin's weights, but {g.not_constant_reason(p)}")

    def weights(p, fill: float) -> onnx.TensorProto:
        return numpy_helper.from_array(np.ascontiguousarray(_values(p, fill)), em.name("w"))

    def _values(p, fill: float) -> np.ndarray:
        if p is None:
            return np.full([ld], fill, np.float32)
        v = g.constant_value(p)
        if v is None:
            raise Reject(f"target trt: {p.name!r} is too large to read into the plugin's weights")
        return np.broadcast_to(v.reshape(-1) if v.size == ld else v.reshape(-1)[:1], [ld]).astype(np.float32)

    shape5 = em.const("shape5d", np.array([-1, 1, ld, 1, 1], np.int64))
    a5 = em.node("Reshape", [d.a.name, shape5])[0]
    b5 = em.node("Reshape", [d.b.name, shape5])[0]
    y5 = em.plugin(specs.TRT_SKIP_LAYER_NORM, [a5, b5], em.name("SkipLayerNorm_out"), t, type_id=0, ld=ld,
                   beta=weights(desc.beta, 0.0), gamma=weights(desc.gamma, 1.0), bias=weights(d.bias, 0.0))
    return em.reshape(y5, em.node("Shape", [d.a.name])[0])


class SkipLayerNormRule(SkipNormRule):
    name = "skiplayernorm"
    kind = "layer"
    reductions = layernorm.LN_REDUCTIONS
    pattern = layernorm.build(SUM).pattern
    doc = "Add(x, skip) (→ Add bias) → LayerNorm chain; the sum also output where later nodes read it (pre-norm)"
    variants = (
        "residual: Add(x, skip) in either operand order, x and skip of one shape (no broadcasting)",
        "bias: Add(x + skip, bias) with bias varying only along the normalized dims, or none",
        "norm: every LayerNorm form the layernorm rule covers (trailing axes), Casts included",
        "sum: read only by the norm (post-norm, BERT) or also by later nodes (pre-norm: a second output)",
    )


class SkipLayerNormTFRule(SkipLayerNormRule):
    """The residual Add in front of TensorFlow's LayerNorm (the layernorm pass's second rule):
    its pattern over the sum, the rest as the decomposed skip rules."""

    pattern = over_sum(layernorm.TF_PATTERN, layernorm.x)
    doc = "Add(x, skip) (→ Add bias) → TensorFlow's LayerNorm, x·s + (β − mean·s); the sum also output where later nodes read it"
    variants = (
        "residual: Add(x, skip) in either operand order, x and skip of one shape (no broadcasting)",
        "bias: Add(x + skip, bias) with bias varying only along the normalized dims, or none",
        "norm: every form the layernorm rule's TensorFlow form covers (tf2onnx / keras2onnx, Keras 3), the sum read "
        "by the mean, the variance and x·s",
        "sum: read only by the norm (post-norm, BERT) or also by later nodes (pre-norm: a second output)",
    )


class SkipRMSNormRule(SkipNormRule):
    name = "skiprmsnorm"
    kind = "rms"
    reductions = ("mean_square",)
    pattern = rmsnorm.build(SUM)
    doc = "Add(x, skip) (→ Add bias) → RMSNorm chain; the sum also output where later nodes read it (pre-norm)"
    variants = (
        "residual: Add(x, skip) in either operand order, x and skip of one shape (no broadcasting)",
        "bias: Add(x + skip, bias) with bias varying only along the normalized dims, or none",
        "norm: every RMSNorm form the rmsnorm rule covers (trailing axes), Casts included",
        "sum: read only by the norm or also by later nodes (pre-norm, LLaMA/T5: a second output)",
    )


class NativeSkipNormRule(SkipNormRule):
    """The residual Add in front of a native LayerNormalization / RMSNormalization node (torch's
    exporters at opset 17+, the dynamo exporter): the norm part is checked as the native rules
    check the node alone (patterns/native.py).  Target onnx is not tried: there it would be the
    same Add and norm node again."""

    min_progress = 2
    anchors = ()
    targets = ("plugin", "trt")

    def describe(self, view: Match, ctx: Context) -> NormDesc:
        return native.describe(view, ctx, self.kind)


class NativeSkipLayerNormRule(NativeSkipNormRule):
    name = "native_skiplayernorm"
    kind = "layer"
    signature = frozenset({"LayerNormalization"})
    pattern = native.build("layer", SUM)
    doc = "Add(x, skip) (→ Add bias) → LayerNormalization (opset 17); the sum also output where later nodes read it"
    variants = (
        "residual: Add(x, skip) in either operand order, x and skip of one shape (no broadcasting)",
        "bias: Add(x + skip, bias) with bias varying only along the normalized dims, or none",
        "norm: a LayerNormalization the native_layernorm rule fuses (trailing dims, Mean/InvStdDev unread)",
        "sum: read only by the norm (post-norm, BERT) or also by later nodes (pre-norm, GPT-2/ViT: a second output)",
    )


class NativeSkipRMSNormRule(NativeSkipNormRule):
    name = "native_skiprmsnorm"
    kind = "rms"
    signature = frozenset({"RMSNormalization"})
    pattern = native.build("rms", SUM)
    doc = "Add(x, skip) (→ Add bias) → RMSNormalization (opset 23); the sum also output where later nodes read it"
    variants = (
        "residual: Add(x, skip) in either operand order, x and skip of one shape (no broadcasting)",
        "bias: Add(x + skip, bias) with bias varying only along the normalized dims, or none",
        "norm: an RMSNormalization the native_rmsnorm rule fuses",
        "sum: read only by the norm or also by later nodes (pre-norm: a second output)",
    )


LAYER_RULE = SkipLayerNormRule()
TF_LAYER_RULE = SkipLayerNormTFRule()
RMS_RULE = SkipRMSNormRule()
NATIVE_LAYER_RULE = NativeSkipLayerNormRule()
NATIVE_RMS_RULE = NativeSkipRMSNormRule()
