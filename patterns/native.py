"""Native norms: an exporter's own LayerNormalization (opset 17) or RMSNormalization (opset 23).

torch's exporters at opset 17+ (and the dynamo exporter) write nn.LayerNorm as one
LayerNormalization node.  TensorRT 8.5 (JetPack 5) has no ONNX importer for it (8.6 added one),
so on the ``plugin`` and ``trt`` targets such a model builds only once the node becomes a
plugin: these rules rewrite it through the same emitter as the decomposed chains
(``_norm.emit``), so both targets treat it alike.  Target ``onnx`` is not tried: the node is
already what it would emit.

What the fused node expresses, and the rule checks: normalization over trailing dims
[axis, rank) (FusedLayerNorm's own ``axis``; a positive axis needs the rank), statistics in
fp32 (stash_type FLOAT, or the input's own type), γ (and β) constant and broadcasting over the
normalized dims only, and only the first output read (Mean and InvStdDev have no counterpart).
"""

from __future__ import annotations

import onnx

from fusion.ir.graph import FLOAT_TYPES
from fusion.match.pattern import Match, Op, Opt, Pattern, Var
from fusion.rewrite.editor import Reject
from fusion.rewrite.rules import Context, Rule

from ._norm import NormDesc, _check_affine, _proven_dim, emit

# Default attributes (ONNX LayerNormalization-17, RMSNormalization-23).
DEFAULT_EPS = 1e-5
DEFAULT_STASH = onnx.TensorProto.FLOAT
OPS = {"layer": "LayerNormalization", "rms": "RMSNormalization"}


def build(kind: str, x: Pattern) -> Pattern:
    """The native node over input ``x`` (a Var, or the residual Add of a skip norm).  γ and β are
    Vars: the check says why a non-constant one does not fuse."""
    if kind == "layer":
        return Op("LayerNormalization", x, Var("gamma"), Opt(Var("beta")), name="norm")
    return Op("RMSNormalization", x, Var("gamma"), name="norm")


def describe(m: Match, ctx: Context, kind: str) -> NormDesc:
    """Check a native norm node and describe it as the decomposed rules do; raise Reject."""
    g = ctx.graph
    node = m["norm"]
    x = m["x"]
    op = OPS[kind]
    for extra in node.outputs[1:]:
        if extra.name and (extra.outputs or extra.name in ctx.scope.output_names):
            what = "a graph output" if extra.name in ctx.scope.output_names else f"read by {extra.outputs[0].op}"
            raise Reject(f"{op} {node.name!r}: its output {extra.name!r} (Mean/InvStdDev) is {what}, and the fused "
                         "node outputs only Y")
    shape = g.shape(x, infer=False)
    axis = int(node.attrs.get("axis", -1))
    if axis >= 0 and shape is None:
        shape = g.shape(x)
    rank = None if shape is None else len(shape)
    if axis >= 0:
        if rank is None:
            raise Reject(f"{op} {node.name!r} has axis {axis}, counted from the front, and the input's rank is unknown")
        axis -= rank
    if rank is not None and not -rank <= axis < 0:
        raise Reject(f"{op} {node.name!r} has axis {node.attrs.get('axis', -1)}, outside the input's rank {rank}")
    axes = tuple(range(axis, 0))
    stash = int(node.attrs.get("stash_type", DEFAULT_STASH))
    t_x = g.elem_type(x)
    if stash not in FLOAT_TYPES:
        raise Reject(f"{op} {node.name!r} has stash_type {stash}, not a float type")
    if stash != onnx.TensorProto.FLOAT and stash != t_x:
        raise Reject(f"{op} {node.name!r} computes its statistics in {onnx.TensorProto.DataType.Name(stash)} "
                     "(stash_type), neither FLOAT nor the input's type: the fused node computes them in fp32")
    gamma, beta = m.get("gamma"), m.get("beta")
    beta = None if beta is not None and not beta.name else beta
    for t, what in ((gamma, "Scale"), (beta, "B")):
        if t is None:
            continue
        pshape = g.fixed_shape(t)
        if pshape is None:
            raise Reject(f"{what}: {g.not_constant_reason(t)}, and the fused node takes it as a weight of the "
                         "normalized shape")
        if shape is None and (any(d != 1 for d in pshape) or len(pshape) > len(axes)):
            shape = g.shape(x)  # whether it grows the output depends on the input's shape
        _check_affine(pshape, shape, axes, f"{what} {t.name!r}", lambda a: _proven_dim(g, x, a, ctx.scope))
    # X, Scale, B and Y share one type: γ's, where X is untyped (function bodies).
    chain_type = g.elem_type(gamma) if gamma is not None else None
    eps = float(node.attrs.get("epsilon", DEFAULT_EPS))
    return NormDesc(kind, x, node.outputs[0], chain_type, axes, None if shape is None else len(shape), eps, gamma,
                    beta, frozenset({stash}))


class NativeNormRule(Rule):
    min_progress = 1
    targets = ("plugin", "trt")
    kind = ""

    def check(self, m: Match, ctx: Context) -> NormDesc:
        return describe(m, ctx, self.kind)

    def rewrite(self, desc: NormDesc, em, ctx: Context) -> None:
        emit(desc, em, ctx)


class NativeLayerNormRule(NativeNormRule):
    name = "native_layernorm"
    pass_name = "layernorm"
    kind = "layer"
    signature = frozenset({"LayerNormalization"})
    pattern = build("layer", Var("x"))
    doc = "LayerNormalization (opset 17) → FusedLayerNorm / TensorRT's LayerNorm plugin (targets plugin, trt)"
    variants = (
        "node: LayerNormalization whose Mean and InvStdDev outputs nobody reads (TensorRT 8.5 cannot import it)",
        "axis: any, normalizing the trailing dims [axis, rank); a positive axis needs the input's rank",
        "stash_type: FLOAT, or the input's own type (the fused node computes the statistics in fp32)",
        "affine: Scale constant, B constant or absent, varying only along the normalized dims",
    )


class NativeRMSNormRule(NativeNormRule):
    name = "native_rmsnorm"
    pass_name = "rmsnorm"
    kind = "rms"
    signature = frozenset({"RMSNormalization"})
    pattern = build("rms", Var("x"))
    doc = "RMSNormalization (opset 23) → FusedRMSNorm (target plugin)"
    variants = (
        "node: RMSNormalization (opset 23)",
        "axis: any, normalizing the trailing dims [axis, rank); a positive axis needs the input's rank",
        "stash_type: FLOAT, or the input's own type (the fused node computes the statistics in fp32)",
        "scale: constant, varying only along the normalized dims",
    )


LAYER_RULE = NativeLayerNormRule()
RMS_RULE = NativeRMSNormRule()
