"""Residual Add (+ bias) in front of the decomposed norms of tests/norm_models.py, built in code."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import onnx
from onnx import helper, numpy_helper

from . import norm_models
from .builders import NP


@dataclass(frozen=True)
class Skip:
    norm: norm_models.Form = norm_models.LAYER
    bias: bool = False
    swap: bool = False  # Add(skip, x) instead of Add(x, skip); Add(bias, s) for the bias
    pre_norm: bool = False  # a later node reads the sum too (it becomes a graph output here)
    later_reader: bool = True  # pre-norm: the sum feeds an Add after the norm (else it is a graph output)
    skip_shape: tuple | None = None  # another shape for skip (broadcasting: not fusable)
    bias_shape: tuple | None = None
    bias_input: bool = False  # bias is an initializer that is also a graph input (overridable)
    pin_bias: bool = True  # ... whose graph input declares its shape and type

    def with_(self, **kw) -> "Skip":
        return replace(self, **kw)


def build(s: Skip, seed: int = 0) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    m = norm_models.build(s.norm, rng)
    g = m.graph
    x = next(i for i in g.input if i.name == "x")
    et = x.type.tensor_type.elem_type
    shape = list(s.norm.shape)
    new_inputs = [helper.make_tensor_value_info("a", et, shape),
                  helper.make_tensor_value_info("b", et, list(s.skip_shape or shape))]
    nodes = [helper.make_node("Add", ["b", "a"] if s.swap else ["a", "b"], ["sum0"], name="residual")]
    top = "sum0"
    if s.bias:
        bshape = list(s.bias_shape or [shape[-1]])
        g.initializer.append(numpy_helper.from_array(rng.standard_normal(bshape).astype(NP[et]), "bias"))
        if s.bias_input:
            new_inputs.append(helper.make_tensor_value_info("bias", et, bshape if s.pin_bias else None))
        nodes.append(helper.make_node("Add", ["bias", "sum0"] if s.swap else ["sum0", "bias"], ["sum1"], name="add_bias"))
        top = "sum1"
    for n in g.node:
        for i, name in enumerate(n.input):
            if name == "x":
                n.input[i] = top
    keep = [i for i in g.input if i.name != "x"]
    del g.input[:]
    g.input.extend(new_inputs + keep)
    all_nodes = nodes + list(g.node)
    if s.pre_norm:
        if s.later_reader:
            all_nodes.append(helper.make_node("Add", [top, "y"], ["z"], name="next_residual"))
            g.output.append(helper.make_tensor_value_info("z", et, shape))
        else:
            g.output.append(helper.make_tensor_value_info(top, et, shape))
    del g.node[:]
    g.node.extend(all_nodes)
    del g.value_info[:]
    return onnx.shape_inference.infer_shapes(m)


def feeds(s: Skip, batch=(2, 3), seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    it = iter(batch)
    shape = [d if isinstance(d, int) else next(it) for d in s.norm.shape]
    dt = NP[s.norm.dtype]
    out = {"a": (rng.standard_normal(shape) * 3 + 1).astype(dt)}
    bshape = shape if s.skip_shape is None else [d if isinstance(d, int) else shape[i] for i, d in enumerate(s.skip_shape)]
    out["b"] = rng.standard_normal(bshape).astype(dt)
    return out
