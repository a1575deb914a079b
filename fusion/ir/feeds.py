"""Random inputs for a model's graph inputs, one feed per shape point (used by fusion.compare and fusion.trt)."""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence
import numpy as np
import onnx

from ..errors import VerifyError


DEFAULT_DIM_VALUES = (1, 3, 8)  # one shape point per value, for every dynamic dim


def make_feeds(model: "_Model", shapes: Sequence[Mapping[str, Any]] | None, seed: int) -> list[dict[str, np.ndarray]]:
    """Random inputs, one feed per shape point; integer inputs stay valid as Gather indices."""
    rng = np.random.default_rng(seed)
    points: Iterable[Mapping[str, Any]] = shapes if shapes else [{"*": v} for v in DEFAULT_DIM_VALUES]
    bounds = _index_bounds(model.proto)
    feeds, seen = [], set()
    for point in points:
        feed = {}
        for vi in model.inputs:
            tt = vi.type.tensor_type
            shape = _concrete_shape(vi.name, tt, point)
            feed[vi.name] = _random(rng, tt.elem_type, shape, bounds.get(vi.name, 2))
        key = tuple((k, v.shape) for k, v in feed.items())
        if key not in seen:  # a static model has one shape point
            seen.add(key)
            feeds.append(feed)
    return feeds


def _concrete_shape(name: str, tt, point: Mapping[str, Any]) -> list[int]:
    if name in point:
        return [int(d) for d in point[name]]
    dims = []
    for i, d in enumerate(tt.shape.dim):
        if d.HasField("dim_value"):
            dims.append(d.dim_value)
        elif d.dim_param and d.dim_param in point:
            dims.append(int(point[d.dim_param]))
        elif "*" in point:
            dims.append(int(point["*"]))
        else:
            raise VerifyError(f"input {name!r} dim {i} ({d.dim_param or '?'}) has no value in shape point {dict(point)}")
    return dims


def _random(rng: np.random.Generator, elem_type: int, shape: list[int], high: int) -> np.ndarray:
    np_type = onnx.helper.tensor_dtype_to_np_dtype(elem_type)
    if np.issubdtype(np_type, np.floating):
        return rng.standard_normal(shape).astype(np_type)
    if np_type == np.bool_:
        return rng.integers(0, 2, shape).astype(np.bool_)
    if np.issubdtype(np_type, np.integer):
        return rng.integers(0, max(int(high), 1), shape).astype(np_type)
    return rng.standard_normal(shape).astype(np_type)


def _index_bounds(model: onnx.ModelProto) -> dict[str, int]:
    """For integer inputs used as Gather indices: the size of the gathered axis."""
    g = model.graph
    shapes = {t.name: list(t.dims) for t in g.initializer}
    bounds: dict[str, int] = {}
    for n in g.node:
        if n.op_type == "Gather" and len(n.input) == 2 and n.input[0] in shapes:
            axis = next((a.i for a in n.attribute if a.name == "axis"), 0)
            size = shapes[n.input[0]][axis]
            bounds[n.input[1]] = min(bounds.get(n.input[1], size), size)
    return bounds
