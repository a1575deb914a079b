"""GroupNorm: X [N, C, *spatial] split into G groups of C / G channels, each normalized over its
channels and spatial dims, then a per-channel affine; optionally SiLU after it.

Covered (the forms exporters write):

* torch's TorchScript exporter (every opset): ``Reshape(x, [0, G, -1])`` →
  ``InstanceNormalization`` (scale 1, bias 0: constants of G elements) → ``Reshape(·, Shape(x))``
  → ``Mul(γ [C, 1, ..])`` → ``Add(β)``;
* ``GroupNormalization``: at opset 18-20 its scale and bias are per group ([G]; the opset-18
  definition) and are repeated C / G times per channel; from opset 21 they are per channel ([C]);
* the ReduceMean form: ``Reshape(x, [N, G, -1])``, mean and variance over the view's last axis
  (the LayerNorm chain of layernorm.py on the view), ``Reshape`` back, per-channel affine;
* then optionally SiLU: ``Mul(y, Sigmoid(y))``, either operand order;
* float Casts around the pieces (fp16 models that compute in fp32); γ and/or β absent.

Not fused, with the reason: G not dividing C, a view that is not [N, G, K], a reduction over
other axes than the view's last, an InstanceNormalization with its own scale/bias, γ/β varying
along other axes than the channels, a per-channel scale on an opset-18 GroupNormalization
(mislabelled: that opset's scale is per group), constants a caller may override (eps, shapes).

Targets: ``plugin`` (FusedGroupNorm, SiLU fused as a field); ``trt`` (TensorRT's
GroupNormalizationPlugin: fp32 and fully static shapes only, SiLU as standard nodes after it);
``onnx`` (GroupNormalization at opset >= 21, else Reshape → InstanceNormalization → Reshape →
Mul → Add, + Sigmoid/Mul).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import helper

from fusion.ir.graph import FLOAT_TYPES, FLOAT_WIDTH
from fusion.ir.view import Tensor
from fusion.match.pattern import Const, Match, Op, Opt, Pattern, Var
from fusion.rewrite import specs
from fusion.rewrite.editor import Emitter, Reject
from fusion.rewrite.rules import Context, Rule

from . import _gn_body
from ._constants import check_constant_rank, check_overridable
from ._norm import _normalized_axes, _proven_dim, cast, compute_types, plus_eps

_gn_body.register()



def reduce_mean(x: Pattern, name: str) -> Op:
    """ReduceMean with axes as an attribute (opset < 18) or as a constant input (opset >= 18)."""
    return Op("ReduceMean", x, Opt(Const()), name=name)


FLOAT, FLOAT16, DOUBLE = onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.DOUBLE

x = Var("x")
cx = cast(x)
view = Op("Reshape", cx, Const("view_shape"), name="view")
cv = cast(view)

# The InstanceNormalization form (torch's TorchScript exporter).
inorm = Op("InstanceNormalization", cv, Const("in_scale"), Const("in_bias"), name="inorm")

# The ReduceMean form: a LayerNorm over the last axis of the [N, G, K] view (as layernorm.py).
mean = reduce_mean(cv, "mean")
centered = Op("Sub", cv, cast(mean), name="center")
var_mean = reduce_mean(cv, "var_mean")
var_centered = Op("Sub", cv, cast(var_mean), name="var_center")
square = Op("Pow", cast(var_centered), Const(value=2.0), name="square") | Op(
    "Mul", cast(var_centered), cast(var_centered), name="square"
)
variance = reduce_mean(cast(square), "variance")
var_eps = plus_eps(variance)
std = Op("Sqrt", var_eps, name="sqrt")
normalized = (
    Op("Div", cast(centered), cast(std), name="normalize")
    | Op("Mul", cast(centered), cast(Op("Reciprocal", std, name="inverse")), name="normalize")
    | Op("Mul", cast(centered), cast(Op("Pow", var_eps, Const(value=-0.5), name="inverse")), name="normalize")
)
restored = Op("Reshape", cast(inorm | normalized), Op("Shape", cx, name="shape") | Const("back_shape"), name="restore")
scaled = Op("Mul", cast(restored), cast(Const("gamma")), name="scale")
affine = (
    Op("Add", cast(scaled), cast(Const("beta")), name="shift")
    | scaled
    | Op("Add", cast(restored), cast(Const("beta")), name="shift")
    | restored
)
gn_op = Op("GroupNormalization", cx, Const("gamma"), Const("beta"), name="gn_op")
gn = cast(affine | gn_op)
PATTERN = cast(Op("Mul", gn, Op("Sigmoid", gn, name="sigmoid"), name="silu") | gn)


@dataclass
class GroupNormDesc:
    x: Tensor
    y: Tensor
    shape: list  # x's dims (ints or symbols)
    channels: int
    groups: int
    epsilon: float
    gamma: Tensor | None
    beta: Tensor | None
    per_group: bool  # γ/β hold one value per group (GroupNormalization before opset 21)
    silu: bool
    form: str  # "instancenorm" | "reducemean" | "groupnormalization"
    types: frozenset  # float types the chain computes in besides x's


class GroupNormRule(Rule):
    name = "groupnorm"
    pass_name = "groupnorm"
    pattern = PATTERN
    min_progress = 3
    signature = frozenset({"InstanceNormalization", "GroupNormalization", "ReduceMean"})
    doc = "Reshape [N, G, -1] → InstanceNormalization or mean/var → Reshape → Mul γ → Add β (→ SiLU); GroupNormalization"
    variants = (
        "InstanceNormalization form: Reshape(x, [0|N, G, -1]) → InstanceNormalization(scale 1, bias 0) → Reshape(Shape(x))",
        "GroupNormalization: scale/bias per group ([G]) at opset 18-20, per channel ([C]) from opset 21",
        (
            "ReduceMean form: Reshape(x, [N, G, -1]), mean and variance over the last axis (Pow/Mul square; Div, "
            "Reciprocal or Pow(-0.5)), Reshape back"
        ),
        "affine: Mul γ then Add β per channel ([C, 1, ..]), only one of them, or neither; either operand order",
        "SiLU after it: Mul(y, Sigmoid(y)), either operand order (fused as silu=1)",
        "casts: float-to-float Cast anywhere in the chain",
    )

    def check(self, m: Match, ctx: Context) -> GroupNormDesc:
        return analyze(m, ctx)

    def rewrite(self, desc: GroupNormDesc, em: Emitter, ctx: Context) -> None:
        emit(desc, em, ctx)


RULE = GroupNormRule()


# -- check -------------------------------------------------------------------------------


def _int_values(g, t: Tensor, what: str) -> list[int]:
    v = g.constant_value(t)
    if v is None:
        raise Reject(f"{what} {t.name!r} is not a constant")
    if v.dtype.kind not in "iu":
        raise Reject(f"{what} {t.name!r} is not an integer tensor")
    return [int(a) for a in np.asarray(v).reshape(-1)]


def analyze(m: Match, ctx: Context) -> GroupNormDesc:
    g = ctx.graph
    xt = m["x"]
    # x, γ and β go to the fused node; shapes, eps and the InstanceNorm's 1/0 are baked.
    check_overridable(g, m, ("x", "gamma", "beta"))
    shape = g.shape(xt)
    if shape is None:
        # Shape inference loses the rank at Reshape(·, Shape(x)) (every torch GroupNorm): prove it.
        rank = _proven_rank(g, xt)
        if rank is None:
            raise Reject(f"the rank of {xt.name!r} is unknown: cannot tell its channel axis")
        shape = [None] * rank
    rank = len(shape)
    if rank < 2:
        raise Reject(f"{xt.name!r} has rank {rank}: GroupNorm needs [N, C, ...]")
    gamma, beta = m.get("gamma"), m.get("beta")
    per_group = False
    if "gn_op" in m:
        node = m["gn_op"]
        form = "groupnormalization"
        groups = int(node.attrs.get("num_groups", 0))
        eps = float(node.attrs.get("epsilon", 1e-5))
        per_group = ctx.opset < 21
    else:
        groups = _check_view(g, m, shape)
        if "inorm" in m:
            form = "instancenorm"
            eps = float(m["inorm"].attrs.get("epsilon", 1e-5))
            for name, want in (("in_scale", 1.0), ("in_bias", 0.0)):
                v = g.constant_value(m[name])
                if v is None or v.size != groups or not np.all(v == want):
                    raise Reject(f"InstanceNormalization {m['inorm'].name!r}: its {name[3:]} is not {want:g} for each of "
                                 f"the {groups} groups (a per-group affine this rule does not fold)")  # fmt: skip
        else:
            form = "reducemean"
            for name in ("mean", "var_mean", "variance"):
                if name in m:
                    axes = _normalized_axes(g, m[name], 3)
                    if axes != (-1,):
                        raise Reject(f"ReduceMean {m[name].name!r} reduces axes {list(axes)} of the [N, G, K] view, "
                                     "not its last axis only: not a GroupNorm")  # fmt: skip
            eps = g.scalar(m["eps"]) if "eps" in m else 0.0
            if eps is None:
                raise Reject(f"epsilon {m['eps'].name!r} is not a one-element constant")
    if groups <= 0:
        raise Reject(f"num_groups is {groups}")
    native = form == "groupnormalization"
    if native and not per_group and not isinstance(shape[1], int) and gamma is not None and g.fixed_shape(gamma):
        # GroupNormalization-21 fails unless its scale has C elements: C is the scale's.
        shape = [shape[0], int(np.prod(g.fixed_shape(gamma)))] + list(shape[2:])
    channels = _channels(g, xt, shape, gamma, beta, per_group, ctx)
    if channels % groups:
        raise Reject(f"{groups} groups do not divide the {channels} channels: not a GroupNorm")
    for param, label in ((gamma, "γ"), (beta, "β")):
        if param is not None:
            _check_param(g, param, label, rank, channels, groups, per_group, ctx.opset, native)
    check_constant_rank(g, m.all_nodes, rank, rank)
    return GroupNormDesc(xt, m.root.outputs[0], shape, channels, groups, eps, gamma, beta, per_group,
                         "silu" in m, form, compute_types(g, m))  # fmt: skip


def _check_view(g, m: Match, shape: list) -> int:
    """The Reshape to [N, G, K] and the one back to x's shape; returns G."""
    node = m["view"]
    v = _int_values(g, m["view_shape"], f"Reshape {node.name!r}: shape")
    allowzero = int(node.attrs.get("allowzero", 0))
    if len(v) != 3:
        raise Reject(f"Reshape {node.name!r} makes a view of rank {len(v)}, not [N, G, K]")
    n, groups, k = v
    n_ok = (n == 0 and not allowzero) or (isinstance(shape[0], int) and n == shape[0])
    if not n_ok:
        raise Reject(f"Reshape {node.name!r}: its first dim {n} is not the batch of {list(shape)}")
    static_rest = all(isinstance(d, int) for d in shape[1:])
    if not (k == -1 or (static_rest and groups > 0 and k * groups == int(np.prod(shape[1:])))):
        raise Reject(f"Reshape {node.name!r}: shape {v} does not keep each sample's C x spatial elements in {groups} groups")
    back = m["restore"]
    if "shape" in m:
        sn = m["shape"]
        if sn.attrs.get("start", 0) != 0 or sn.attrs.get("end") is not None:
            raise Reject(f"Shape {sn.name!r} takes a slice of the shape, not all of it")
    else:
        b = _int_values(g, m["back_shape"], f"Reshape {back.name!r}: shape")
        if not all(isinstance(d, int) for d in shape) or b != [int(d) for d in shape]:
            raise Reject(f"Reshape {back.name!r} makes {b}, not the input's shape {list(shape)}")
    return groups


def _channels(g, xt: Tensor, shape: list, gamma, beta, per_group: bool, ctx: Context) -> int:
    """C: static in x's shape, or given by γ/β and proven to be x's (a C of 1 would broadcast)."""
    if isinstance(shape[1], int):
        return shape[1]
    sizes = set()
    for p in (gamma, beta):
        if p is not None and not per_group:
            ps = g.fixed_shape(p)
            if ps is not None and len(ps) >= len(shape) - 1:
                sizes.add(int(ps[len(ps) - len(shape) + 1]))
    proven = _proven_channels(g, xt, len(shape), ctx)
    if proven is not None:
        return proven
    raise Reject(f"the channel count of {xt.name!r} ({shape[1]!r}) is not static"
                 + (f" and cannot be proven to be γ's {sorted(sizes)}" if sizes else ""))  # fmt: skip


# Ops whose output has the shape of their first input (the norm chain's neighbours).
_KEEPS_SHAPE = frozenset({"Cast", "Identity", "Relu", "Sigmoid", "Tanh", "Erf", "Neg", "Sqrt", "Exp", "Gelu",
                          "Dropout", "Clip", "LeakyRelu", "Elu", "Softplus", "HardSigmoid", "HardSwish", "Mish"})  # fmt: skip
_BROADCASTS = frozenset({"Add", "Sub", "Mul", "Div", "Pow"})


def _proven_rank(g, t: Tensor, depth: int = 24) -> int | None:
    """The rank of ``t`` whatever the graph's inputs are: annotated, or forced by the ops that
    make it (a Conv's output has its weight's rank; Reshape(·, Shape(u)) has u's)."""
    shape = g.shape(t, infer=False)
    if shape is not None:
        return len(shape)
    node = t.inputs[0] if len(t.inputs) == 1 else None
    if node is None or depth == 0 or node.domain not in ("", "ai.onnx") or not node.inputs:
        return None
    if node.op in _KEEPS_SHAPE or node.op == "Transpose":
        return _proven_rank(g, node.inputs[0], depth - 1)
    if node.op == "Concat":  # every input has the output's rank
        return next((r for r in (_proven_rank(g, i, depth - 1) for i in node.inputs) if r is not None), None)
    if node.op in _BROADCASTS:
        ranks = [_proven_rank(g, i, depth - 1) for i in node.inputs]
        return None if None in ranks else max(ranks)
    if node.op in ("Conv", "ConvTranspose") and len(node.inputs) > 1:
        w = g.fixed_shape(node.inputs[1])
        return None if w is None else len(w)
    if node.op == "Reshape" and len(node.inputs) > 1:
        src = node.inputs[1].inputs[0] if len(node.inputs[1].inputs) == 1 else None
        if src is not None and src.op == "Shape" and not src.attrs.get("start") and src.attrs.get("end") is None:
            return _proven_rank(g, src.inputs[0], depth - 1)
        if src is not None and src.op == "Concat" and all(_one_element(g, p) for p in src.inputs):
            return len(src.inputs)
        target = g.fixed_shape(node.inputs[1])
        return None if target is None or len(target) != 1 else int(target[0])
    return None


def _proven_channels(g, t: Tensor, rank: int, ctx: Context, depth: int = 24) -> int | None:
    """dim 1 of ``t`` (of ``rank``) whatever the graph's inputs are: _norm's proof, plus Conv
    (its weight's dim 0) and Reshape(·, Shape(u)) (u's), through same-shape and broadcasting ops."""
    shape = g.shape(t, infer=False)
    if shape is not None and len(shape) == rank and isinstance(shape[1], int):
        return shape[1]
    node = t.inputs[0] if len(t.inputs) == 1 else None
    if node is not None and depth > 0 and node.domain in ("", "ai.onnx") and node.inputs:
        if node.op in _KEEPS_SHAPE:
            return _proven_channels(g, node.inputs[0], rank, ctx, depth - 1)
        if node.op in _BROADCASTS:
            dims = [_proven_channels(g, i, rank, ctx, depth - 1) if _proven_rank(g, i) == rank else None
                    for i in node.inputs]  # fmt: skip
            known = [d for d in dims if d is not None and d != 1]
            if known:
                return known[0]  # the others are 1 or that size, else the op fails
        if node.op == "Conv" and len(node.inputs) > 1:
            w = g.fixed_shape(node.inputs[1])
            if w is not None and len(w) == rank:
                return int(w[0])
        if node.op == "Concat" and int(node.attrs.get("axis", 0)) in (1, 1 - rank):  # torch.cat of skips
            parts = [_proven_channels(g, i, rank, ctx, depth - 1) for i in node.inputs]
            if None not in parts:
                return sum(parts)
        if node.op == "Reshape" and len(node.inputs) > 1:
            src = node.inputs[1].inputs[0] if len(node.inputs[1].inputs) == 1 else None
            if src is not None and src.op == "Shape" and not src.attrs.get("start") and src.attrs.get("end") is None:
                return _proven_channels(g, src.inputs[0], rank, ctx, depth - 1)
            if src is not None and src.op == "Concat" and int(src.attrs.get("axis", 0)) in (0, -1):
                # view(batch, channels, -1) as diffusers' attention writes it: piece 1 of the shape.
                d = _shape_piece(g, src, 1, ctx, depth - 1)
                if d is not None:
                    return d
    return _proven_dim(g, t, 1 - rank, ctx.scope)


def _one_element(g, t: Tensor) -> bool:
    fixed = g.fixed_shape(t)
    return (fixed is not None and list(fixed) == [1]) or _unsqueezed_scalar(g, t)


def _unsqueezed_scalar(g, t: Tensor) -> bool:
    """t = Unsqueeze(s) of a scalar s: one element."""
    n = t.inputs[0] if len(t.inputs) == 1 else None
    return n is not None and n.op == "Unsqueeze" and bool(n.inputs) and _scalar(g, n.inputs[0])


def _scalar(g, t: Tensor, depth: int = 6) -> bool:
    """A 0-d tensor: a constant, Gather(Shape(u), scalar index), or arithmetic / Cast of those."""
    fixed = g.fixed_shape(t)
    if fixed is not None:
        return len(fixed) == 0
    n = t.inputs[0] if len(t.inputs) == 1 else None
    if n is None or depth == 0 or not n.inputs:
        return False
    if n.op == "Gather" and len(n.inputs) == 2:
        idx = g.fixed_shape(n.inputs[1])
        data = n.inputs[0].inputs[0] if len(n.inputs[0].inputs) == 1 else None
        return idx is not None and len(idx) == 0 and data is not None and data.op == "Shape"
    if n.op in ("Mul", "Add", "Sub", "Div", "Cast"):
        return all(_scalar(g, i, depth - 1) for i in n.inputs)
    return False


def _shape_piece(g, concat, index: int, ctx: Context, depth: int) -> int | None:
    """Element ``index`` of a Concat of one-element pieces building a shape: a positive constant,
    or Unsqueeze(Gather(Shape(u), 1)) with u's channels proven."""
    pieces = list(concat.inputs)
    if not all(_one_element(g, p) for p in pieces[:index + 1]):
        return None
    piece = pieces[index] if index < len(pieces) else None
    if piece is None:
        return None
    value = g.constant_value(piece)
    if value is not None:
        v = int(np.asarray(value).reshape(-1)[0])
        return v if v > 0 else None
    uns = piece.inputs[0]
    gather = uns.inputs[0].inputs[0] if uns.inputs and len(uns.inputs[0].inputs) == 1 else None
    if gather is None or gather.op != "Gather" or int(gather.attrs.get("axis", 0)) != 0:
        return None
    idx = g.constant_value(gather.inputs[1])
    shape_node = gather.inputs[0].inputs[0] if len(gather.inputs[0].inputs) == 1 else None
    if idx is None or idx.size != 1 or int(idx.reshape(-1)[0]) != 1 or shape_node is None or shape_node.op != "Shape":
        return None
    if shape_node.attrs.get("start") or shape_node.attrs.get("end") is not None:
        return None
    u = shape_node.inputs[0]
    r = _proven_rank(g, u)
    return None if r is None or r < 2 else _proven_channels(g, u, r, ctx, depth)


def _check_param(g, p: Tensor, label: str, rank: int, channels: int, groups: int, per_group: bool, opset: int,
                 native: bool = False) -> None:  # fmt: skip
    ps = g.fixed_shape(p)
    if ps is None:
        raise Reject(f"{label}: {g.not_constant_reason(p)}, and its graph input does not pin its shape and type")
    ps = list(ps)
    if native and not per_group:
        if ps != [channels]:
            raise Reject(f"GroupNormalization at opset {opset}: {label} {p.name!r} has shape {ps}, not one value per "
                         f"channel [{channels}]")  # fmt: skip
        return
    if per_group:
        if ps != [groups]:
            extra = " (a per-channel scale: GroupNormalization's is per channel only from opset 21)" if ps == [channels] else ""
            raise Reject(f"GroupNormalization at opset {opset}: {label} {p.name!r} has shape {ps}, not one value per "
                         f"group [{groups}]{extra}")  # fmt: skip
        return
    if len(ps) > rank:
        raise Reject(f"{label} {p.name!r} has rank {len(ps)}, more than the input's {rank}: the output would grow")
    full = [1] * (rank - len(ps)) + ps
    for axis, d in enumerate(full):
        if axis == 1:
            if d not in (1, channels):
                raise Reject(f"{label} {p.name!r} has shape {ps}: {d} values along the channels, which are {channels}")
        elif d != 1:
            raise Reject(f"{label} {p.name!r} has shape {ps}: it varies along axis {axis}, not only along the channels")


# -- rewrite -----------------------------------------------------------------------------


def _widest(types) -> int:
    return max(types, key=lambda t: FLOAT_WIDTH[t])


def emit(desc: GroupNormDesc, em: Emitter, ctx: Context) -> None:
    g = ctx.graph
    t_in, t_out = g.elem_type(desc.x), g.elem_type(desc.y)
    t_in, t_out = t_in or t_out, t_out or t_in
    if t_in is None:
        raise Reject(f"the element type of {desc.x.name!r} is unknown")
    for t in (t_in, t_out):
        if t not in FLOAT_TYPES:
            raise Reject(f"element type {onnx.TensorProto.DataType.Name(t)} is not a float type")
    t = t_out if FLOAT_WIDTH[t_in] < FLOAT_WIDTH[t_out] else t_in
    # Compute as wide as the chain's widest type; fp16 in and out holds in fp32 (as _norm.emit).
    compute = _widest(desc.types | {t, FLOAT})
    if compute == DOUBLE and t_in == t_out == FLOAT16:
        compute = FLOAT
    target = ctx.target
    if compute == DOUBLE and target != "onnx":
        raise Reject(f"target {target}: the chain computes in DOUBLE, and the plugins (and TensorRT) have no fp64; "
                     "target onnx keeps it")  # fmt: skip
    em.compute_type = compute
    if compute == DOUBLE:
        t = DOUBLE
    name = onnx.TensorProto.DataType.Name
    if target == "plugin" and t not in (FLOAT, FLOAT16):
        raise Reject(f"target plugin: FusedGroupNorm takes fp32/fp16, not {name(t)}")
    if target == "trt":
        if t != FLOAT:
            raise Reject(f"target trt: GroupNormalizationPlugin takes fp32 only, not {name(t)}")
        if not all(isinstance(d, int) for d in desc.shape):
            raise Reject(f"target trt: GroupNormalizationPlugin needs a static input shape (its configurePlugin "
                         f"asserts no dim is dynamic), this one is {list(desc.shape)}")  # fmt: skip
    if target == "onnx" and desc.form == "instancenorm" and ctx.opset < 21:
        raise Reject(f"target onnx: already the standard InstanceNormalization form (GroupNormalization with a "
                     f"per-channel scale needs opset 21, the model has {ctx.opset})")  # fmt: skip

    xn = desc.x.name
    if t != t_in:
        xn = em.node("Cast", [xn], to=t)[0]
    rank = len(desc.shape)
    if target == "plugin":
        gamma = _param(em, g, desc, desc.gamma, t, 1.0, "gamma", [desc.channels])
        beta = _param(em, g, desc, desc.beta, t, 0.0, "beta", [desc.channels])
        y = em.plugin(specs.FUSED_GROUP_NORM, [xn, gamma, beta], em.name("FusedGroupNorm_out"), t,
                      epsilon=desc.epsilon, num_groups=desc.groups, silu=int(desc.silu))  # fmt: skip
    elif target == "trt":
        gamma = _param(em, g, desc, desc.gamma, t, 1.0, "gamma", [desc.channels])
        beta = _param(em, g, desc, desc.beta, t, 0.0, "beta", [desc.channels])
        y = em.plugin(specs.TRT_GROUP_NORM, [xn, gamma, beta], em.name("GroupNorm_out"), t,
                      eps=desc.epsilon, num_groups=desc.groups)  # fmt: skip
        if desc.silu:
            y = em.node("Mul", [y, em.node("Sigmoid", [y])[0]])[0]
    elif ctx.opset >= 21:
        gamma = _param(em, g, desc, desc.gamma, t, 1.0, "gamma", [desc.channels])
        beta = _param(em, g, desc, desc.beta, t, 0.0, "beta", [desc.channels])
        y = em.node("GroupNormalization", [xn, gamma, beta], epsilon=desc.epsilon, num_groups=desc.groups,
                    stash_type=compute)[0]  # fmt: skip
        if desc.silu:
            y = em.node("Mul", [y, em.node("Sigmoid", [y])[0]])[0]
    else:
        y = _decomposed(em, g, desc, xn, t, rank)
    if t != t_out:
        y = em.node("Cast", [y], to=t_out)[0]
    em.nodes[-1].output[0] = desc.y.name


def _decomposed(em: Emitter, g, desc: GroupNormDesc, xn: str, t: int, rank: int) -> str:
    """Reshape → InstanceNormalization → Reshape → Mul → Add (→ SiLU), for opsets before 21."""
    if not all(isinstance(d, int) for d in desc.shape[1:]):
        raise Reject(f"target onnx: the per-sample size of {list(desc.shape)} is not static (the [N, G, K] view needs K)")
    shape = em.node("Shape", [xn])[0]
    n = em.node("Slice", [shape, em.const("s0", np.array([0], np.int64)), em.const("s1", np.array([1], np.int64))])[0]
    k = int(np.prod(desc.shape[1:])) // desc.groups
    view = em.node("Concat", [n, em.const("gk", np.array([desc.groups, k], np.int64))], axis=0)[0]
    v = em.reshape(xn, view)
    np_t = helper.tensor_dtype_to_np_dtype(t)
    y = em.node("InstanceNormalization", [v, em.const("ones", np.ones(desc.groups, np_t)),
                em.const("zeros", np.zeros(desc.groups, np_t))], epsilon=desc.epsilon)[0]  # fmt: skip
    y = em.reshape(y, shape)
    out = [desc.channels] + [1] * (rank - 2)
    if desc.gamma is not None:
        y = em.node("Mul", [y, _param(em, g, desc, desc.gamma, t, 1.0, "gamma", out)])[0]
    if desc.beta is not None:
        y = em.node("Add", [y, _param(em, g, desc, desc.beta, t, 0.0, "beta", out)])[0]
    if desc.silu:
        y = em.node("Mul", [y, em.node("Sigmoid", [y])[0]])[0]
    return y


def _param(em: Emitter, g, desc: GroupNormDesc, p: Tensor | None, t: int, fill: float, hint: str, out: list[int]) -> str:
    """γ or β per channel, shaped ``out``, of type ``t`` (made when absent); never bakes an
    overridable initializer's value (reshapes/expands it in the graph instead)."""
    c, groups = desc.channels, desc.groups
    np_t = helper.tensor_dtype_to_np_dtype(t)
    if p is None:
        return em.const(hint, np.full(out, fill, np_t))
    pshape = list(g.fixed_shape(p))
    if pshape == out and g.elem_type(p) == t:
        return p.name
    if g.overridable(p):
        name = p.name
        if desc.per_group:
            name = em.node("Reshape", [name, em.const(hint + "_g", np.array([groups, 1], np.int64))])[0]
            name = em.node("Expand", [name, em.const(hint + "_gc", np.array([groups, c // groups], np.int64))])[0]
        name = em.node("Reshape", [name, em.const(hint + "_flat", np.array([-1], np.int64))])[0]
        name = em.node("Expand", [name, em.const(hint + "_c", np.array([c], np.int64))])[0]
        name = em.node("Reshape", [name, em.const(hint + "_shape", np.array(out, np.int64))])[0]
        if g.elem_type(p) != t:
            name = em.node("Cast", [name], to=t)[0]
        return name
    value = g.constant_value(p)
    if value is None:
        raise Reject(f"{hint} {p.name!r} is too large to read")
    if desc.per_group:
        value = np.repeat(value.reshape(-1), c // groups)
    else:
        value = np.broadcast_to(value.reshape(-1), [c])  # [C, 1, ..] or one value (checked)
    return em.const(hint, np.ascontiguousarray(value).reshape(out).astype(np_t))
