"""Plugin specs: the one place that says what each emitted custom node looks like.

A spec names the TensorRT plugin creator a node maps to (op_type, plugin_version,
plugin_namespace), the node's ONNX domain, its inputs, outputs and fields.  The fusion
passes emit nodes only through these specs (``fusion.ir.graph.plugin_node``); the C++ creators in
plugin_src/ are generated from / checked against these specs (``python -m fusion plugins
check``), and the README's plugin table is rendered from them.

Field types follow onnx-tensorrt's FallbackPluginImporter: every ONNX attribute but
``plugin_version`` and ``plugin_namespace`` (both STRING) becomes a ``PluginField``.
Initializer inputs reach the plugin as ITensors, not Weights.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

import numpy as np
import onnx

# Every custom node lives in this ONNX domain: the ONNX checker rejects custom nodes with a
# model-local function in the default domain, and onnx-tensorrt looks plugins up by op_type.
PLUGIN_DOMAIN = "trt.plugins"


class FieldType(enum.Enum):
    """An ONNX attribute type and the TensorRT ``PluginFieldType`` it arrives as."""

    INT = ("INT", "kINT32")
    FLOAT = ("FLOAT", "kFLOAT32")
    STRING = ("STRING", "kCHAR")
    INTS = ("INTS", "kINT32")
    FLOATS = ("FLOATS", "kFLOAT32")
    TENSOR = ("TENSOR", "Weights")

    @property
    def onnx_name(self) -> str:
        return self.value[0]

    @property
    def trt_name(self) -> str:
        return self.value[1]

    @property
    def onnx_type(self) -> int:
        return getattr(onnx.AttributeProto, self.onnx_name)


@dataclass(frozen=True)
class Field:
    """A plugin field, carried as an ONNX attribute of the same name."""

    name: str
    type: FieldType
    doc: str
    default: Any = None  # None: the field is required
    choices: tuple = ()  # allowed values, where the set is closed

    @property
    def required(self) -> bool:
        return self.default is None

    def check(self, value: Any) -> Any:
        """Return ``value`` coerced to the field's Python type; raise ValueError if it does not fit."""
        t = self.type
        if t is FieldType.INT:
            if isinstance(value, (bool, np.bool_)) or not isinstance(value, (int, np.integer)):
                raise ValueError(f"field {self.name!r} takes an int, got {value!r}")
            value = int(value)
            if not -(2**31) <= value < 2**31:
                raise ValueError(f"field {self.name!r} does not fit int32: {value}")
        elif t is FieldType.FLOAT:
            if not isinstance(value, (int, float, np.floating, np.integer)) or isinstance(value, bool):
                raise ValueError(f"field {self.name!r} takes a float, got {value!r}")
            value = float(value)
        elif t is FieldType.STRING:
            if not isinstance(value, str):
                raise ValueError(f"field {self.name!r} takes a string, got {value!r}")
        elif t is FieldType.INTS:
            value = [Field(self.name, FieldType.INT, "").check(v) for v in value]
        elif t is FieldType.FLOATS:
            value = [Field(self.name, FieldType.FLOAT, "").check(v) for v in value]
        elif t is FieldType.TENSOR:
            if not isinstance(value, (np.ndarray, onnx.TensorProto)):
                raise ValueError(f"field {self.name!r} takes a tensor, got {type(value).__name__}")
        if self.choices and value not in self.choices:
            raise ValueError(f"field {self.name!r} must be one of {list(self.choices)}, got {value!r}")
        return value


@dataclass(frozen=True)
class Port:
    """A node input or output."""

    name: str
    doc: str
    optional: bool = False


@dataclass(frozen=True)
class PluginSpec:
    """What a custom node looks like, and which TensorRT plugin creator it maps to."""

    op_type: str
    version: str
    namespace: str
    inputs: tuple[Port, ...]
    outputs: tuple[Port, ...]
    fields: tuple[Field, ...]
    doc: str
    # "fusion": implemented in plugin_src/; "tensorrt": shipped in libnvinfer_plugin.
    provider: str = "fusion"
    domain: str = PLUGIN_DOMAIN
    # Folder under plugin_src/ that implements it (provider "fusion" only).
    source_dir: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> tuple[str, str, str]:
        """The triple TensorRT's plugin registry is keyed by."""
        return (self.op_type, self.version, self.namespace)

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"{self.op_type} has no field {name!r}")

    def attributes(self, values: Mapping[str, Any]) -> dict[str, Any]:
        """Validate field values and return the node's full attribute dict.

        Unknown names and missing required fields are errors; optional fields left out
        take their defaults, so every emitted node spells out every field.
        """
        unknown = set(values) - {f.name for f in self.fields}
        if unknown:
            raise ValueError(f"{self.op_type} has no field(s) {sorted(unknown)}")
        attrs: dict[str, Any] = {}
        for f in self.fields:
            if f.name in values:
                attrs[f.name] = f.check(values[f.name])
            elif f.required:
                raise ValueError(f"{self.op_type} needs field {f.name!r}")
            else:
                attrs[f.name] = f.default
        attrs["plugin_version"] = self.version
        attrs["plugin_namespace"] = self.namespace
        return attrs

    def check_arity(self, n_inputs: int, n_outputs: int) -> None:
        need = sum(not p.optional for p in self.inputs)
        if not need <= n_inputs <= len(self.inputs):
            raise ValueError(f"{self.op_type} takes {need}..{len(self.inputs)} inputs, got {n_inputs}")
        need = sum(not p.optional for p in self.outputs)
        if not need <= n_outputs <= len(self.outputs):
            raise ValueError(f"{self.op_type} has {len(self.outputs)} output(s), got {n_outputs}")

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able description (used by ``fusion list`` and the plugin contract check)."""
        return {
            "op_type": self.op_type,
            "plugin_version": self.version,
            "plugin_namespace": self.namespace,
            "domain": self.domain,
            "provider": self.provider,
            "inputs": [{"name": p.name, "optional": p.optional, "doc": p.doc} for p in self.inputs],
            "outputs": [{"name": p.name, "doc": p.doc} for p in self.outputs],
            "fields": [
                {
                    "name": f.name,
                    "onnx_type": f.type.onnx_name,
                    "trt_type": f.type.trt_name,
                    "default": f.default,
                    "doc": f.doc,
                    **({"choices": list(f.choices)} if f.choices else {}),
                }
                for f in self.fields
            ],
            "doc": self.doc,
        }


_EPS = Field("epsilon", FieldType.FLOAT, "added to the variance before the square root")
_AXIS = Field(
    "axis",
    FieldType.INT,
    "first normalized dimension, negative: the node normalizes over dims [axis, rank)",
    default=-1,
)

FUSED_LAYER_NORM = PluginSpec(
    op_type="FusedLayerNorm",
    version="1",
    namespace="fusion",
    inputs=(
        Port("X", "input, fp32/fp16/bf16"),
        Port("Scale", "γ, shaped like the normalized dims, same type as X (the emitter always provides it)", optional=True),
        Port("B", "β, shaped like the normalized dims, same type as X (the emitter always provides it)", optional=True),
    ),
    outputs=(Port("Y", "normalized output, same type and shape as X"),),
    fields=(_EPS, _AXIS),
    doc="Y = (X - mean) / sqrt(var + epsilon) * Scale + B over dims [axis, rank), fp32 accumulation.",
    source_dir="layernorm",
)

FUSED_RMS_NORM = PluginSpec(
    op_type="FusedRMSNorm",
    version="1",
    namespace="fusion",
    inputs=(
        Port("X", "input, fp32/fp16/bf16"),
        Port("Scale", "γ, shaped like the normalized dims, same type as X (the emitter always provides it)", optional=True),
    ),
    outputs=(Port("Y", "normalized output, same type and shape as X"),),
    fields=(_EPS, _AXIS),
    doc="Y = X / sqrt(mean(X^2) + epsilon) * Scale over dims [axis, rank), fp32 accumulation.",
    source_dir="rmsnorm",
)

# Shipped in TensorRT's libnvinfer_plugin (8.5 ... 10.x).  Measured on 8.5.3: it normalizes
# over the last rank-2 dims, so the emitter only uses it on rank-3 [N, 1, C] views.
TRT_LAYER_NORM = PluginSpec(
    op_type="LayerNorm",
    version="1",
    namespace="",
    inputs=(
        Port("X", "input, rank 3 [N, S, C]: normalized over the last rank-2 dims"),
        Port("gamma", "γ, shaped like the normalized dims"),
        Port("beta", "β, shaped like the normalized dims"),
    ),
    outputs=(Port("Y", "normalized output"),),
    fields=(_EPS,),
    doc="TensorRT's shipped LayerNorm plugin: normalizes over the last rank-2 dims.",
    provider="tensorrt",
)

_WITH_SUM = Field(
    "with_sum",
    FieldType.INT,
    "1: the node also outputs Sum = X + Skip (+ Bias) (pre-norm: the next residual reads it)",
    default=0,
    choices=(0, 1),
)
_SKIP_INPUTS = (
    Port("X", "input, fp32/fp16/bf16"),
    Port("Skip", "residual, same shape and type as X"),
    Port("Bias", "added to X + Skip, shaped like the normalized dims, same type as X (the emitter always provides it)"),
    Port("Scale", "γ, shaped like the normalized dims, same type as X"),
)
_SUM = Port("Sum", "X + Skip (+ Bias), same type and shape as X; present iff with_sum = 1", optional=True)

FUSED_SKIP_LAYER_NORM = PluginSpec(
    op_type="FusedSkipLayerNorm",
    version="1",
    namespace="fusion",
    inputs=_SKIP_INPUTS + (Port("B", "β, shaped like the normalized dims, same type as X"),),
    outputs=(Port("Y", "LayerNorm(X + Skip + Bias), same type and shape as X"), _SUM),
    fields=(_EPS, _AXIS, _WITH_SUM),
    doc="S = X + Skip + Bias; Y = (S - mean) / sqrt(var + epsilon) * Scale + B over dims [axis, rank), fp32 "
    "accumulation; Sum = S when with_sum = 1.",
    source_dir="skipnorm",
)

FUSED_SKIP_RMS_NORM = PluginSpec(
    op_type="FusedSkipRMSNorm",
    version="1",
    namespace="fusion",
    inputs=_SKIP_INPUTS,
    outputs=(Port("Y", "RMSNorm(X + Skip + Bias), same type and shape as X"), _SUM),
    fields=(_EPS, _AXIS, _WITH_SUM),
    doc="S = X + Skip + Bias; Y = S / sqrt(mean(S^2) + epsilon) * Scale over dims [axis, rank), fp32 accumulation; "
    "Sum = S when with_sum = 1.",
    source_dir="skipnorm",
)

FC_ACTIVATIONS = ("none", "relu", "gelu_erf", "gelu_tanh")

FUSED_FC = PluginSpec(
    op_type="FusedFC",
    version="1",
    namespace="fusion",
    inputs=(
        Port("X", "activations [..., K], fp32/fp16/bf16"),
        Port("W", "weight: [K, N] (transpose_weight=0) or [N, K] (transpose_weight=1), same type as X"),
        Port("B", "bias [N], same type as X (zeros where the model has none)"),
    ),
    outputs=(Port("Y", "[..., N] = activation(alpha * X @ W + B)"),),
    fields=(
        Field("out_features", FieldType.INT, "N, the number of output features"),
        Field("transpose_weight", FieldType.INT, "1 if W is stored [N, K] (Linear/Gemm transB=1)", default=0, choices=(0, 1)),
        Field("alpha", FieldType.FLOAT, "scale of the matrix product (Gemm alpha)", default=1.0),
        Field("activation", FieldType.STRING, "epilogue after the bias", default="none", choices=FC_ACTIVATIONS),
    ),
    doc="Fully connected layer: cuBLASLt GEMM with the bias and activation fused as an epilogue.",
    source_dir="fc",
)

SPECS: tuple[PluginSpec, ...] = (FUSED_LAYER_NORM, FUSED_RMS_NORM, FUSED_FC, TRT_LAYER_NORM)
SPECS = SPECS + (FUSED_SKIP_LAYER_NORM, FUSED_SKIP_RMS_NORM)


def by_op_type(op_type: str, domain: str = PLUGIN_DOMAIN) -> PluginSpec | None:
    for s in SPECS:
        if s.op_type == op_type and s.domain == domain:
            return s
    return None


def fusion_specs() -> Sequence[PluginSpec]:
    """The specs this project implements in plugin_src/."""
    return [s for s in SPECS if s.provider == "fusion"]


# Shipped in TensorRT's libnvinfer_plugin (BERT demo plugin, 7.x ... 10.x, deprecated in 10.6).
# Read from TensorRT OSS plugin/fcPlugin: Gemm(m=out_dims, n=S*B, k=K), no transposes,
# column-major, A = W, B = input: so W is the row-major [K, out_dims] matrix of Y = X @ W.
# getOutputDimensions keeps d[0], d[1] and sets d[2] = out_dims, d[3] = d[4] = 1; rows are
# d[0] * d[1].  No bias and no activation: the emitter adds Add / activation nodes after it.
TRT_FC = PluginSpec(
    op_type="CustomFCPluginDynamic",
    version="1",
    namespace="",
    inputs=(Port("input", "rank 5 [S, B, K, 1, 1], fp32 or fp16 as type_id says"),),
    outputs=(Port("output", "[S, B, out_dims, 1, 1] = input @ W"),),
    fields=(
        Field("out_dims", FieldType.INT, "N, the number of output features"),
        Field("type_id", FieldType.INT, "the input/compute type: 0 fp32, 1 fp16", choices=(0, 1)),
        Field("W", FieldType.TENSOR, "weights, row-major [K, out_dims] (not transposed, unlike an FC layer)"),
    ),
    doc="TensorRT's shipped FC plugin: Y = X @ W through cuBLASLt, no bias, no activation.",
    provider="tensorrt",
)

SPECS = SPECS + (TRT_FC,)

# GroupNorm (issue 12).  X is [N, C, *spatial]; the C channels split into num_groups groups of
# C / num_groups consecutive channels, each normalized over its channels and spatial dims.
FUSED_GROUP_NORM = PluginSpec(
    op_type="FusedGroupNorm",
    version="1",
    namespace="fusion",
    inputs=(
        Port("X", "input [N, C, *spatial], fp32/fp16"),
        Port("Scale", "γ per channel [C], same type as X"),
        Port("B", "β per channel [C], same type as X"),
    ),
    outputs=(Port("Y", "normalized output, same type and shape as X"),),
    fields=(
        _EPS,
        Field("num_groups", FieldType.INT, "G, the number of groups; divides C"),
        Field("silu", FieldType.INT, "1: Y = Y * sigmoid(Y) after the affine (fused SiLU)", default=0, choices=(0, 1)),
    ),
    doc="Y = (X - mean_g) / sqrt(var_g + epsilon) * Scale[c] + B[c] per group g of C / num_groups channels, "
    "then SiLU if silu = 1; fp32 statistics.",
    source_dir="groupnorm",
)

# Shipped in TensorRT's libnvinfer_plugin (8.x).  Read from TensorRT OSS
# plugin/groupNormalizationPlugin/groupNormalizationPlugin.cpp, the cuDNN implementation (commit
# 09dce45; not checked against the 8.5.3 tag itself, nor run on TensorRT 8.5.3): creator
# "GroupNormalizationPlugin" v1, fields eps (kFLOAT32) and num_groups (kINT32); three inputs
# (input, scale, bias), every one fp32 and linear (supportsFormatCombination); scale and bias
# per channel (scaleShiftChannelsInplace over C); configurePlugin asserts that no input dim is
# dynamic (-1), so the emitter uses it only on fully static shapes.
TRT_GROUP_NORM = PluginSpec(
    op_type="GroupNormalizationPlugin",
    version="1",
    namespace="",
    inputs=(
        Port("input", "[N, C, *spatial], fp32, static shape"),
        Port("scale", "γ per channel [C], fp32"),
        Port("bias", "β per channel [C], fp32"),
    ),
    outputs=(Port("output", "normalized output"),),
    fields=(
        Field("eps", FieldType.FLOAT, "added to the variance before the square root"),
        Field("num_groups", FieldType.INT, "G, the number of groups"),
    ),
    doc="TensorRT's shipped GroupNorm plugin (cuDNN batch norm over [1, N*G, C/G, HW], then a per-channel affine).",
    provider="tensorrt",
)

SPECS = SPECS + (FUSED_GROUP_NORM, TRT_GROUP_NORM)
# Shipped in TensorRT's libnvinfer_plugin (BERT demo plugin, 7.x ... 10.x).  Read from TensorRT OSS
# plugin/skipLayerNormPlugin at tag 8.5.3: version "1" (creator fields ld, type_id, beta, gamma,
# bias; bias optional) takes input and skip of equal dims, rank 5 [S, B, E, 1, 1] (dims 3 and 4
# must be 1), normalizes over E = d[2], adds the bias first; one output (no sum); no epsilon:
# rsigma = rsqrt(E[s^2] - mean^2), accumulated in the I/O type (fp16 in fp16), one pass.  Later
# releases add the type's machine epsilon.  Weights arrive as PluginField Weights (the
# FallbackPluginImporter makes them from TENSOR attributes), converted to the I/O type.
TRT_SKIP_LAYER_NORM = PluginSpec(
    op_type="CustomSkipLayerNormPluginDynamic",
    version="1",
    namespace="",
    inputs=(
        Port("input", "rank 5 [S, B, E, 1, 1], fp32 or fp16 as type_id says"),
        Port("skip", "residual, same shape and type as input"),
    ),
    outputs=(Port("output", "LayerNorm over E of input + skip (+ bias)"),),
    fields=(
        Field("type_id", FieldType.INT, "the input/compute type: 0 fp32, 1 fp16", choices=(0, 1)),
        Field("ld", FieldType.INT, "E, the normalized (hidden) size"),
        Field("beta", FieldType.TENSOR, "β [E]"),
        Field("gamma", FieldType.TENSOR, "γ [E]"),
        Field("bias", FieldType.TENSOR, "bias [E] added to input + skip before the norm (zeros where the model has none)"),
    ),
    doc="TensorRT's shipped skip LayerNorm plugin (v1): output = LayerNorm(input + skip + bias) over E, no epsilon field.",
    provider="tensorrt",
)

SPECS = SPECS + (TRT_SKIP_LAYER_NORM,)
