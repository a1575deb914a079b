"""Decomposed LayerNorm / RMSNorm chains in every form the patterns claim, built in code."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Sequence

import numpy as np
import onnx

from .builders import DOUBLE, FLOAT, FLOAT16, NP, G, reduce_mean


@dataclass(frozen=True)
class Form:
    """One way of writing a norm; every field is a variant the patterns must cover."""

    kind: str = "layer"  # layer | rms
    opset: int = 13
    dtype: int = FLOAT
    island: int | None = None  # compute inside the chain in this type (fp16 models: FLOAT/DOUBLE)
    square: str = "pow"  # pow | mul
    normalize: str = "div"  # div | reciprocal | div_one | pow_half
    gamma: bool = True
    beta: bool = True
    axes: tuple[int, ...] = (-1,)
    positive_axes: bool = False
    shape: tuple = ("B", "S", 16)
    eps: float = 1e-5
    eps_node: bool = False  # Constant node instead of an initializer
    eps_dtype: type | None = None  # defaults to the compute type
    swap: bool = True  # operands of Add/Mul in the other order
    channels_first_params: bool = False  # γ/β shaped [C,1,1] (ConvNeXt)

    def with_(self, **kw) -> "Form":
        return replace(self, **kw)


def build(f: Form, rng: np.random.Generator | None = None) -> onnx.ModelProto:
    rng = rng or np.random.default_rng(0)
    g = G(opset=f.opset)
    x = g.input("x", f.dtype, f.shape)
    rank = len(f.shape)
    axes = [a + rank if f.positive_axes else a for a in f.axes]
    compute = f.island or f.dtype
    ctype = NP[compute]

    def arith(op, a, b):
        return g.op(op, b, a) if f.swap else g.op(op, a, b)

    if f.kind == "layer":
        mean = reduce_mean(g, x, axes)  # exporters take the mean in the model's type
        d = g.op("Sub", x, mean)
        if f.island:
            d = g.op("Cast", d, to=compute)
    else:
        d = g.op("Cast", x, to=compute) if f.island else x
    if f.square == "pow":
        sq = g.op("Pow", d, g.const(2.0, dtype=ctype))
    else:
        sq = g.op("Mul", d, d)
    var = reduce_mean(g, sq, axes)
    eps_type = f.eps_dtype or ctype
    eps = g.constant_node(f.eps, dtype=eps_type) if f.eps_node else g.const(f.eps, dtype=eps_type)
    if eps_type != ctype:
        eps = g.op("Cast", eps, to=onnx.helper.np_dtype_to_tensor_dtype(np.dtype(ctype)))
    ve = arith("Add", var, eps)
    if f.normalize == "pow_half":
        inv = g.op("Pow", ve, g.const(-0.5, dtype=ctype))
        n = arith("Mul", d, inv)
    else:
        s = g.op("Sqrt", ve)
        if f.normalize == "div":
            n = g.op("Div", d, s)
        elif f.normalize == "reciprocal":
            n = arith("Mul", d, g.op("Reciprocal", s))
        else:
            n = arith("Mul", d, g.op("Div", g.const(1.0, dtype=ctype), s))
    if f.island:
        n = g.op("Cast", n, to=f.dtype)
    dt = NP[f.dtype]
    pshape = _param_shape(f)
    if f.gamma:
        n = arith("Mul", n, g.const(rng.standard_normal(pshape).astype(dt)))
    if f.beta and f.kind == "layer":
        n = arith("Add", n, g.const(rng.standard_normal(pshape).astype(dt)))
    g.nodes[-1].output[0] = "y"
    g.output("y", f.dtype, f.shape)
    return g.model()


def _param_shape(f: Form) -> list[int]:
    if f.channels_first_params:
        rank = len(f.shape)
        a = f.axes[0] % rank
        return [f.shape[a]] + [1] * (rank - a - 1)
    return [f.shape[a] for a in f.axes]


def feeds(f: Form, batch: Sequence[int] = (2, 3), seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    it = iter(batch)
    shape = [d if isinstance(d, int) else next(it) for d in f.shape]
    return {"x": (rng.standard_normal(shape) * 3 + 1).astype(NP[f.dtype])}


LAYER = Form()
RMS = Form(kind="rms", beta=False)

# fp16 exports: torch's TorchScript exporter computes the variance in fp64; HF LLaMA/T5 in fp32.
FP16_TORCH = LAYER.with_(dtype=FLOAT16, island=DOUBLE, swap=False)
FP16_LLAMA = RMS.with_(dtype=FLOAT16, island=FLOAT, normalize="reciprocal")
__all__ = ["Form", "build", "feeds", "LAYER", "RMS", "FP16_TORCH", "FP16_LLAMA", "DOUBLE", "FLOAT", "FLOAT16"]
