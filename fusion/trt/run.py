"""Running TensorRT engines: the verify backend and engine latency.

``setup_verify`` is what ``fusion.verify(..., backend="trt")`` calls: it builds the fused
model's engine (unless given one), makes the inputs (by default the min, opt and max shapes
of every profile), checks that each fits a profile, and returns a polygraphy runner that
picks the profile per input and feeds TensorRT the types it expects (TensorRT < 10 turns
int64 inputs into int32).  Timing engines is in :mod:`fusion.trt.timing`.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from ..errors import VerifyError
from .profiles import ProfileShapes, feed_key, find_profile, model_inputs

log = logging.getLogger(__name__)

# The verify tolerances of an fp16 engine's fp32 outputs: those of fp16.
FP16_TOLERANCE = (2e-2, 2e-2)


def setup_verify(
    orig: Any,
    fused: Any,
    *,
    inputs: Any,
    shapes: Any,
    atol: Any,
    rtol: Any,
    seed: int,
    profiles: Any = None,
    plugins: Sequence[str] = (),
    precision: str = "fp32",
    tactic_sources: Any = None,
    timing_cache: str | None = None,
    workspace_mb: int | None = None,
    engine: Any = None,
) -> tuple[Any, list[dict[str, np.ndarray]], Any, Any]:
    """-> (runner, feeds, atol, rtol) for verify's comparison.

    ``orig`` / ``fused``: verify's ``_Model`` objects.  ``profiles``: the engine's profiles
    (see :mod:`fusion.trt.profiles`); without them one profile spans the verify inputs
    (``inputs``/``shapes``, else every dynamic dim 1, 3, 8).  ``engine``: a
    :class:`fusion.trt.build.BuiltEngine` of the fused model to use instead of building one.
    """
    from . import build as trt_build
    from ..ir.feeds import make_feeds

    given = None
    if inputs is not None:
        given = [dict(inputs)] if isinstance(inputs, Mapping) else [dict(f) for f in inputs]
    elif shapes is not None:
        given = make_feeds(orig, shapes, seed)
    if engine is None:
        if profiles is None:
            spec_feeds = given if given is not None else make_feeds(orig, None, seed)
            profiles = [span_profile(fused.proto, spec_feeds)]
        engine = trt_build.build_engine(
            fused.source, shapes=profiles, plugins=plugins, precision=precision,
            tactic_sources=tactic_sources, timing_cache=timing_cache, workspace_mb=workspace_mb,
        )  # fmt: skip
    feeds = given if given is not None else corner_feeds(orig, engine.profiles, seed)
    shape_tensors = {i.name for i in engine.inputs if i.shape_tensor}
    for k, feed in enumerate(feeds):
        check_in_profiles(engine.profiles, engine.inputs, feed, shape_tensors, k)
    if engine.precision == "fp16":
        atol, rtol = _fp16_tolerances(orig, atol, 0), _fp16_tolerances(orig, rtol, 1)
    runner = ProfiledTrtRunner(engine, fused.outputs, name="fused-trt")
    return runner, feeds, atol, rtol


def span_profile(model: onnx.ModelProto, feeds: Sequence[Mapping[str, np.ndarray]]) -> dict[str, Any]:
    """One profile spec holding every feed: per input, elementwise min / median / max."""
    inputs = model_inputs(model)
    spec: dict[str, Any] = {}
    for info in inputs:
        if not info.dynamic:
            continue
        keys = [feed_key({info.name: f[info.name]}, [info.name] if info.shape_tensor else []) for f in feeds]
        rows = np.array([k[info.name] for k in keys], dtype=np.int64)
        if rows.ndim != 2 or len({len(k[info.name]) for k in keys}) != 1:
            raise VerifyError(f"input {info.name!r} changes rank between the verify inputs")
        lo, hi = rows.min(axis=0), rows.max(axis=0)
        opt = np.sort(rows, axis=0)[(len(rows) - 1) // 2]
        spec[info.name] = (tuple(map(int, lo)), tuple(map(int, opt)), tuple(map(int, hi)))
    return spec


def corner_feeds(orig: Any, profiles: Sequence[ProfileShapes], seed: int) -> list[dict[str, np.ndarray]]:
    """Random inputs at the min, opt and max of every profile (duplicates dropped)."""
    from ..ir.feeds import make_feeds

    if not profiles:
        return make_feeds(orig, None, seed)
    types = {vi.name: vi.type.tensor_type.elem_type for vi in orig.inputs}
    feeds, seen = [], set()
    for prof in profiles:
        for which in ("min", "opt", "max"):
            point = prof.point(which)
            shapes = {n: list(s) for n, s in point.items() if n not in prof.shape_tensors}
            feed = make_feeds(orig, [shapes], seed)[0]
            for name in prof.shape_tensors & set(point):
                feed[name] = np.array(point[name], dtype=onnx.helper.tensor_dtype_to_np_dtype(types[name]))
            key = tuple((n, a.shape, a.tobytes() if n in prof.shape_tensors else b"") for n, a in sorted(feed.items()))
            if key not in seen:
                seen.add(key)
                feeds.append(feed)
    return feeds


def _fp16_tolerances(orig: Any, value: Any, which: int) -> Any:
    """fp32 outputs of an fp16 engine get fp16 tolerances, unless the caller set their own."""
    if value is not None and not isinstance(value, Mapping):
        return value
    out = dict(value or {})
    for o in orig.outputs:
        if o.type.tensor_type.elem_type == onnx.TensorProto.FLOAT and o.name not in out:
            out[o.name] = FP16_TOLERANCE[which]
    return out or None


def _base_runner():
    from polygraphy.backend.base import BaseRunner

    return BaseRunner


class ProfiledTrtRunner(_base_runner()):
    """A polygraphy runner over one engine with one TensorRT execution context per profile.

    Each input set runs on the first profile that holds it (one context per profile: a
    profile may be active in one context at a time).  Inputs are cast to the engine's
    types and outputs back to the ONNX model's.
    """

    def __init__(self, built: Any, outputs: Sequence[onnx.ValueInfoProto] = (), name: str = "trt"):
        super().__init__(name=name, prefix="trt-runner")
        self.built = built
        self.output_types = {
            o.name: onnx.helper.tensor_dtype_to_np_dtype(o.type.tensor_type.elem_type)
            for o in outputs
            if o.type.tensor_type.elem_type
        }
        self.shape_tensors = {i.name for i in built.inputs if i.shape_tensor}
        self.profile_used: list[int | None] = []

    def activate_impl(self) -> None:
        from .build import import_trt, load_plugins, make_logger

        trt = import_trt()
        load_plugins()  # TensorRT's own plugin creators, for deserializing
        self._logger = make_logger(trt)
        self._runtime = trt.Runtime(self._logger)
        self.engine = self._runtime.deserialize_cuda_engine(self.built.engine)
        if self.engine is None:
            raise VerifyError("TensorRT could not deserialize the engine: " + "; ".join(self._logger.errors()[-1:]))
        n = max(1, len(self.built.profiles))
        self.runners = [self._sub_runner(i if self.built.profiles else None) for i in range(n)]
        for r in self.runners:
            r.activate()
        self.engine_types = {}
        for i in range(self.engine.num_io_tensors):
            name = self.engine.get_tensor_name(i)
            self.engine_types[name] = np.dtype(trt.nptype(self.engine.get_tensor_dtype(name)))

    def _sub_runner(self, profile: int | None):
        from polygraphy.backend.trt import TrtRunner

        return TrtRunner(self.engine, optimization_profile=profile, name=f"{self.name}-p{profile or 0}")

    def get_input_metadata_impl(self):
        from polygraphy.common import TensorMetadata

        meta = TensorMetadata()
        for info in self.built.inputs:
            dtype = onnx.helper.tensor_dtype_to_np_dtype(info.elem_type)
            meta.add(info.name, dtype=dtype, shape=[d if isinstance(d, int) else -1 for d in info.dims])
        return meta

    def infer_impl(self, feed_dict: Mapping[str, np.ndarray]) -> OrderedDict[str, np.ndarray]:
        idx = check_in_profiles(self.built.profiles, self.built.inputs, feed_dict, self.shape_tensors, len(self.profile_used))
        self.profile_used.append(idx)
        runner = self.runners[idx or 0]
        feed = OrderedDict((n, _cast(n, np.asarray(a), self.engine_types.get(n))) for n, a in feed_dict.items())
        out = runner.infer(feed, check_inputs=False)
        self.inference_time = runner.last_inference_time()
        return OrderedDict((n, np.array(a, dtype=self.output_types.get(n, np.asarray(a).dtype), copy=True))
                           for n, a in out.items())  # fmt: skip

    def deactivate_impl(self) -> None:
        for r in getattr(self, "runners", []):
            r.deactivate()
        self.runners = []
        self.engine = None


# -- latency: fusion.trt.timing (one timing code for verify, tune and the benchmarks) ----------

from .timing import CudaTimer  # noqa: E402,F401 - kept importable from here (bench scripts)
from .inputs import _cast, check_in_profiles


def time_engine(built: Any, feed: Mapping[str, np.ndarray], *, repeats: int = 5, target_ms: float = 20.0,
                warmup: int = 10) -> dict[str, Any]:
    """Median ms per inference of ``built`` on ``feed`` (see :mod:`fusion.trt.timing`)."""
    from .timing import time_engine as _time

    (t,) = _time(built, [feed], repeats=repeats, target_ms=target_ms)
    return {"ms": t.median_ms, "ms_min": t.min_ms, "p10_ms": t.p10_ms, "p90_ms": t.p90_ms, "iters": t.launches,
            "repeats": repeats, "method": f"{t.api}, device-resident buffers, CUDA events"}  # fmt: skip
