"""GroupNorm in the forms exporters write, built in code (tests/test_groupnorm.py)."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import onnx
from onnx import helper

from .builders import FLOAT, NP, G, reduce_mean


@dataclass(frozen=True)
class GN:
    form: str = "instancenorm"  # instancenorm | groupnorm | reducemean
    opset: int = 13
    dtype: int = FLOAT
    shape: tuple = ("N", 16, 5, 6)
    groups: int = 4  # the groups the graph is written with
    eps: float = 1e-5
    gamma: bool = True
    beta: bool = True
    silu: str = ""  # "" | "xs" (Mul(y, Sigmoid(y))) | "sx" (Mul(Sigmoid(y), y))
    gamma_shape: tuple | None = None  # default [C, 1, ..] ([G] or [C] for GroupNormalization by opset)
    mean_axes: tuple = (-1,)
    eps_overridable: bool = False
    in_scale: float = 1.0
    extra_use: bool = False  # the norm's output is also a graph output (SiLU cannot fuse)

    def with_(self, **kw) -> "GN":
        return replace(self, **kw)


def build(f: GN, rng: np.random.Generator | None = None) -> onnx.ModelProto:
    rng = rng or np.random.default_rng(0)
    g = G(f.opset)
    np_t = NP[f.dtype]
    c, groups, rank = (f.shape[1] if isinstance(f.shape[1], int) else 16), f.groups, len(f.shape)
    x = g.input("x", f.dtype, f.shape)
    affine_shape = [c] + [1] * (rank - 2)
    if f.form == "groupnorm":
        pshape = list(f.gamma_shape or ([groups] if f.opset < 21 else [c]))
        scale = g.const(rng.uniform(0.5, 1.5, pshape).astype(np_t), "gamma")
        bias = g.const(rng.uniform(-0.5, 0.5, pshape).astype(np_t), "beta")
        y = g.op("GroupNormalization", x, scale, bias, epsilon=f.eps, num_groups=groups)
    else:
        v = g.op("Reshape", x, g.const(np.array([0, groups, -1], np.int64)))
        if f.form == "instancenorm":
            ones = g.const(np.full(groups, f.in_scale, np_t))
            zeros = g.const(np.zeros(groups, np_t))
            n = g.op("InstanceNormalization", v, ones, zeros, epsilon=f.eps)
        else:
            mean = reduce_mean(g, v, f.mean_axes)
            d = g.op("Sub", v, mean)
            var = reduce_mean(g, g.op("Pow", d, g.const(np.array(2.0, np_t))), f.mean_axes)
            eps = g.const(np.array(f.eps, np_t), "eps")
            if f.eps_overridable:
                g.inputs.append(helper.make_tensor_value_info("eps", f.dtype, []))
            n = g.op("Div", d, g.op("Sqrt", g.op("Add", var, eps)))
        y = g.op("Reshape", n, g.op("Shape", x))
        if f.gamma:
            y = g.op("Mul", y, g.const(rng.uniform(0.5, 1.5, list(f.gamma_shape or affine_shape)).astype(np_t), "gamma"))
        if f.beta:
            y = g.op("Add", y, g.const(rng.uniform(-0.5, 0.5, affine_shape).astype(np_t), "beta"))
    out = y
    if f.silu:
        s = g.op("Sigmoid", y)
        out = g.op("Mul", y, s) if f.silu == "xs" else g.op("Mul", s, y)
    # A consumer after the norm (a Conv-like op): the fused node is not a graph output.
    out = g.op("Relu", out, name="after")
    g.output(out, f.dtype, f.shape)
    if f.extra_use:
        g.output(y, f.dtype, f.shape)
    return g.model()


def feeds(f: GN, batch: int = 2, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    shape = [batch if isinstance(d, str) else d for d in f.shape]
    return {"x": (rng.standard_normal(shape) * 2 + 3).astype(NP[f.dtype])}
