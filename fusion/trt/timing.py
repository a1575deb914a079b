"""Engine latency: time TensorRT engines the same way, side by side.

    t = time_engines([unfused, fused], feeds)   # t[engine][feed] -> Timing
    rep = compare_latency(unfused, fused, feeds, labels)   # -> LatencyReport (speed-up per shape)

How an engine is timed (every engine the same way, so ratios are fair):

* device buffers are allocated and the inputs copied once per shape; nothing crosses the bus
  in the timed region;
* warm-up launches, then ``repeats`` repetitions, each ``n`` back-to-back enqueues between two
  CUDA events on one stream (``n`` sized so a repetition lasts about ``target_ms``);
* ``execute_async_v2`` with a binding array on TensorRT < 10 (what 8.x measured with),
  ``execute_async_v3`` with ``set_tensor_address`` on >= 10;
* the engines of one comparison take turns repetition by repetition, so clock or thermal
  drift hits both alike; median, p10 and p90 of the repetitions are reported.

CUDA comes from polygraphy's wrapper of the CUDA runtime (TensorRT's Python bundle has
polygraphy and numpy only).  Everything but the launches runs on the CPU in the tests, with a
stand-in engine and CUDA (tests/test_trt_timing.py).
"""

from __future__ import annotations

import ctypes
import html
import logging
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from ..errors import VerifyError

log = logging.getLogger(__name__)

REPEATS = 15
TARGET_MS = 25.0  # one repetition lasts about this long
WARMUP_MS = 200.0
MAX_LAUNCHES = 2000


@dataclass
class Timing:
    """One engine at one shape: milliseconds per inference over ``repeats`` repetitions."""

    median_ms: float
    p10_ms: float
    p90_ms: float
    min_ms: float
    max_ms: float
    launches: int  # back-to-back enqueues per repetition
    repeats: int
    api: str

    @property
    def spread(self) -> float:
        """(p90 - p10) / median: how much the repetitions disagree."""
        return (self.p90_ms - self.p10_ms) / self.median_ms if self.median_ms > 0 else float("nan")

    def to_dict(self) -> dict[str, Any]:
        d = {k: (round(v, 5) if isinstance(v, float) else v) for k, v in asdict(self).items()}
        d["spread"] = round(self.spread, 4)
        return d


def summarize(runs: Sequence[float], launches: int, api: str) -> Timing:
    a = np.asarray(runs, dtype=np.float64)
    p10, med, p90 = np.percentile(a, [10, 50, 90])
    return Timing(float(med), float(p10), float(p90), float(a.min()), float(a.max()), launches, len(a), api)


# -- CUDA ---------------------------------------------------------------------------------


def _cuda():
    from polygraphy import cuda

    return cuda


class CudaTimer:
    """CUDA events through the CUDA runtime polygraphy loads (no torch in TensorRT's Python)."""

    def __init__(self):
        self.rt = _cuda().wrapper().handle
        self.start, self.end = self._event(), self._event()

    def _event(self) -> ctypes.c_void_p:
        ev = ctypes.c_void_p()
        self._check(self.rt.cudaEventCreate(ctypes.byref(ev)), "cudaEventCreate")
        return ev

    @staticmethod
    def _check(status: int, what: str) -> None:
        if status != 0:
            raise RuntimeError(f"{what} failed with CUDA error {status}")

    def time(self, stream_ptr: int, launch, n: int) -> float:
        """Milliseconds per launch over ``n`` back-to-back launches between two events."""
        s = ctypes.c_void_p(stream_ptr)
        self._check(self.rt.cudaEventRecord(self.start, s), "cudaEventRecord")
        for i in range(n):
            launch(i)
        self._check(self.rt.cudaEventRecord(self.end, s), "cudaEventRecord")
        self._check(self.rt.cudaEventSynchronize(self.end), "cudaEventSynchronize")
        ms = ctypes.c_float()
        self._check(self.rt.cudaEventElapsedTime(ctypes.byref(ms), self.start, self.end), "cudaEventElapsedTime")
        return ms.value / n

    def close(self) -> None:
        for ev in (self.start, self.end):
            self.rt.cudaEventDestroy(ev)


# -- one engine, bound to one input set -------------------------------------------------------


def _major(trt) -> int:
    return int(str(trt.__version__).split(".")[0])


def choose_api(trt, context) -> str:
    """``v2`` (binding array) before TensorRT 10, ``v3`` (tensor addresses) from 10 on."""
    if _major(trt) < 10 and hasattr(context, "execute_async_v2"):
        return "v2"
    return "v3"


class EngineSession:
    """A deserialized engine with one execution context per optimization profile."""

    def __init__(self, built: Any, api: str | None = None):
        from .build import import_trt, load_plugins, make_logger

        self.trt = trt = import_trt()
        load_plugins()  # TensorRT's own plugin creators (and any loaded before), to deserialize
        self.built = built
        self.logger = make_logger(trt)
        self.runtime = trt.Runtime(self.logger)
        self.engine = self.runtime.deserialize_cuda_engine(built.engine)
        if self.engine is None:
            raise VerifyError("TensorRT could not deserialize the engine: " + "; ".join(self.logger.errors()[-1:]))
        self.contexts: dict[int, Any] = {}
        self.api = api
        self.shape_tensors = {i.name for i in built.inputs if i.shape_tensor}

    def context(self, profile: int, stream) -> Any:
        if profile not in self.contexts:
            ctx = self.engine.create_execution_context()
            if ctx is None:
                raise VerifyError("TensorRT could not create an execution context (out of device memory?)")
            if self.built.profiles:
                ctx.set_optimization_profile_async(profile, stream.ptr)
                stream.synchronize()
            self.contexts[profile] = ctx
            if self.api is None:
                self.api = choose_api(self.trt, ctx)
        return self.contexts[profile]

    def bind(self, feed: Mapping[str, np.ndarray], stream) -> Bound:
        from .inputs import _cast, check_in_profiles

        profile = check_in_profiles(self.built.profiles, self.built.inputs, feed, self.shape_tensors, 0) or 0
        ctx = self.context(profile, stream)
        bound = Bound(ctx, stream, self.api)
        try:
            if self.api == "v2":
                self._bind_v2(bound, profile, feed, _cast)
            else:
                self._bind_v3(bound, feed, _cast)
        except BaseException:
            bound.free()
            raise
        return bound

    def _bind_v2(self, b: Bound, profile: int, feed, cast) -> None:
        e, ctx, cuda = self.engine, b.context, _cuda()
        per = e.num_bindings // max(1, e.num_optimization_profiles)
        b.bindings = [0] * e.num_bindings
        outputs = []
        for i in range(per):
            idx = profile * per + i
            name = e.get_binding_name(i)
            dtype = np.dtype(self.trt.nptype(e.get_binding_dtype(idx)))
            if not e.binding_is_input(idx):
                outputs.append((idx, name, dtype))
                continue
            arr = cast(name, np.asarray(feed[name]), dtype)
            if e.is_shape_binding(idx):
                ctx.set_shape_input(idx, arr.reshape(-1))
            else:
                ctx.set_binding_shape(idx, arr.shape)
            b.bindings[idx] = b.upload(name, arr, cuda)
        for idx, name, dtype in outputs:
            shape = tuple(ctx.get_binding_shape(idx))
            b.bindings[idx] = b.alloc(name, shape, dtype, cuda)
        b.launch = lambda: ctx.execute_async_v2(b.bindings, b.stream.ptr)

    def _bind_v3(self, b: Bound, feed, cast) -> None:
        e, ctx, cuda, trt = self.engine, b.context, _cuda(), self.trt
        names = [e.get_tensor_name(i) for i in range(e.num_io_tensors)]
        outputs = []
        for name in names:
            dtype = np.dtype(trt.nptype(e.get_tensor_dtype(name)))
            if e.get_tensor_mode(name) != trt.TensorIOMode.INPUT:
                outputs.append((name, dtype))
                continue
            arr = cast(name, np.asarray(feed[name]), dtype)
            ctx.set_input_shape(name, arr.shape)
            if e.is_shape_inference_io(name):  # shape tensors are read from host memory
                b.host.append(arr)
                ctx.set_tensor_address(name, arr.ctypes.data)
                continue
            ctx.set_tensor_address(name, b.upload(name, arr, cuda))
        for name, dtype in outputs:
            ctx.set_tensor_address(name, b.alloc(name, tuple(ctx.get_tensor_shape(name)), dtype, cuda))
        b.launch = lambda: ctx.execute_async_v3(b.stream.ptr)

    def close(self) -> None:
        self.contexts.clear()
        self.engine = None


class Bound:
    """An engine context with device buffers for one input set: ``launch()`` enqueues once."""

    def __init__(self, context, stream, api: str):
        self.context, self.stream, self.api = context, stream, api
        self.buffers: list[Any] = []
        self.outputs: dict[str, Any] = {}
        self.host: list[np.ndarray] = []
        self.bindings: list[int] = []
        self.launch = lambda: True

    def upload(self, name: str, arr: np.ndarray, cuda) -> int:
        dev = cuda.DeviceArray(shape=arr.shape, dtype=arr.dtype)
        self.buffers.append(dev)
        dev.copy_from(np.ascontiguousarray(arr), self.stream)
        return dev.ptr

    def alloc(self, name: str, shape: tuple, dtype: np.dtype, cuda) -> int:
        if any(d < 0 for d in shape):
            raise VerifyError(f"output {name!r} has a data-dependent shape {list(shape)}: not timed")
        dev = cuda.DeviceArray(shape=shape, dtype=dtype)
        self.buffers.append(dev)
        self.outputs[name] = dev
        return dev.ptr

    def enqueue(self, _i: int = 0) -> None:
        if self.launch() is False:
            raise VerifyError(f"execute_async_{self.api} failed")

    def fetch(self) -> dict[str, np.ndarray]:
        """The outputs, copied to the host (after the timed region)."""
        self.stream.synchronize()
        out = {}
        for name, dev in self.outputs.items():
            host = np.empty(dev.shape, dtype=dev.dtype)
            dev.copy_to(host, self.stream)
            out[name] = host
        self.stream.synchronize()
        return out

    def free(self) -> None:
        for b in self.buffers:
            b.free()
        self.buffers = []


# -- timing ---------------------------------------------------------------------------------


def time_engines(
    builts: Sequence[Any],
    feeds: Sequence[Mapping[str, np.ndarray]],
    *,
    repeats: int = REPEATS,
    target_ms: float = TARGET_MS,
    warmup_ms: float = WARMUP_MS,
    fetch: bool = False,
) -> list[list[Timing]] | tuple[list[list[Timing]], list[list[dict[str, np.ndarray]]]]:
    """Time every engine at every feed; ``result[engine][feed]``.  The engines take turns,
    repetition by repetition.  ``fetch``: also return each engine's outputs per feed."""
    cuda = _cuda()
    stream = cuda.Stream()
    sessions = [EngineSession(b) for b in builts]
    timer = CudaTimer()
    table: list[list[Timing]] = [[] for _ in builts]
    outputs: list[list[dict[str, np.ndarray]]] = [[] for _ in builts]
    try:
        for feed in feeds:
            bound: list[Bound] = []
            try:
                for s in sessions:
                    bound.append(s.bind(feed, stream))
                launches = [_warm_up(b, timer, stream, warmup_ms, target_ms) for b in bound]
                runs: list[list[float]] = [[] for _ in bound]
                for _ in range(repeats):
                    for k, b in enumerate(bound):
                        runs[k].append(timer.time(stream.ptr, b.enqueue, launches[k]))
                for k, b in enumerate(bound):
                    table[k].append(summarize(runs[k], launches[k], f"execute_async_{b.api}"))
                    if fetch:
                        outputs[k].append(b.fetch())
            finally:
                for b in bound:
                    b.free()
    finally:
        timer.close()
        for s in sessions:
            s.close()
        stream.free()
    return (table, outputs) if fetch else table


def _warm_up(b: Bound, timer: CudaTimer, stream, warmup_ms: float, target_ms: float) -> int:
    """Warm up for about ``warmup_ms``; returns the launches per repetition for ``target_ms``."""
    b.enqueue()
    stream.synchronize()
    probe = max(timer.time(stream.ptr, b.enqueue, 3), 1e-4)
    for _ in range(int(min(MAX_LAUNCHES, warmup_ms / probe))):
        b.enqueue()
    stream.synchronize()
    probe = max(timer.time(stream.ptr, b.enqueue, 5), 1e-4)
    return int(min(MAX_LAUNCHES, max(1, math.ceil(target_ms / probe))))


def time_engine(built: Any, feeds: Sequence[Mapping[str, np.ndarray]], **kw: Any) -> list[Timing]:
    """One engine at every feed."""
    return time_engines([built], feeds, **kw)[0]


# -- original vs fused ---------------------------------------------------------------------


@dataclass
class LatencyRow:
    label: str  # "min" / "opt" / "max" (of profile k), or "shape i"
    shapes: dict[str, list[int]]
    unfused: Timing
    fused: Timing

    @property
    def speedup(self) -> float:
        """unfused / fused median time: > 1 means the fused engine is faster."""
        return self.unfused.median_ms / self.fused.median_ms if self.fused.median_ms > 0 else float("nan")

    def to_dict(self) -> dict[str, Any]:
        return {"label": self.label, "shapes": self.shapes, "unfused": self.unfused.to_dict(),
                "fused": self.fused.to_dict(), "speedup": round(self.speedup, 4)}  # fmt: skip


@dataclass
class LatencyReport:
    """Engine latency of the original and the fused model, per shape."""

    rows: list[LatencyRow] = field(default_factory=list)
    build_s: dict[str, float] = field(default_factory=dict)  # "unfused" / "fused" -> seconds
    error: str = ""  # why there are no rows
    method: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"rows": [r.to_dict() for r in self.rows], "build_s": {k: round(v, 2) for k, v in self.build_s.items()},
                "error": self.error, "method": self.method}  # fmt: skip

    def table(self) -> str:
        if not self.rows:
            return f"engine latency: not measured ({self.error or 'no shapes'})"
        head = f"{'shape':<10} {'unfused ms':>11} {'fused ms':>10} {'spread':>7}  {'fused/unfused speed-up':>22}"
        lines = ["engine latency (median of repetitions; spread = (p90-p10)/median of the fused engine):", head,
                 "-" * len(head)]  # fmt: skip
        for r in self.rows:
            verdict = "faster" if r.speedup > 1 else "SLOWER" if r.speedup < 1 else "same"
            lines.append(f"{r.label[:10]:<10} {r.unfused.median_ms:>11.4g} {r.fused.median_ms:>10.4g} "
                         f"{r.fused.spread:>7.1%}  {r.speedup:>15.3f}x {verdict}")  # fmt: skip
        for i, r in enumerate(self.rows):
            lines.append(f"{r.label}: " + ", ".join(f"{k}={v}" for k, v in r.shapes.items()))
        if self.build_s:
            lines.append("engine build: " + ", ".join(f"{k} {v:.1f}s" for k, v in self.build_s.items()))
        if self.method:
            lines.append(f"method: {self.method}")
        return "\n".join(lines)

    def html(self) -> str:
        """An HTML section for the report (fusion/report/html.py)."""
        e = html.escape
        head = '<section id="latency"><h2>Engine latency</h2>'
        if not self.rows:
            return head + f'<p class="muted">Not measured: {e(self.error or "no shapes")}.</p></section>'
        rows = []
        for r in self.rows:
            cls = "ok" if r.speedup >= 1 else "fail"
            rows.append(f"<tr><td>{e(r.label)}</td><td>{e(', '.join(f'{k}={v}' for k, v in r.shapes.items()))}</td>"
                        f"<td>{r.unfused.median_ms:.4g}</td><td>{r.fused.median_ms:.4g}</td>"
                        f"<td>{r.fused.p10_ms:.4g}–{r.fused.p90_ms:.4g}</td>"
                        f'<td class="{cls}">{r.speedup:.3f}×</td></tr>')  # fmt: skip
        builds = ", ".join(f"{k} {v:.1f} s" for k, v in self.build_s.items())
        return (head + f"<p>{e(self.method)}. Engine build: {e(builds)}.</p>"
                + '<table class="grid"><tr><th>shape</th><th>inputs</th><th>unfused ms</th><th>fused ms</th>'
                + "<th>fused p10–p90</th><th>speed-up</th></tr>" + "".join(rows) + "</table></section>")  # fmt: skip


METHOD = ("median of {repeats} repetitions of back-to-back enqueues between CUDA events, device-resident "
          "buffers, engines taking turns")  # fmt: skip


def shape_labels(profiles: Sequence[Any], feeds: Sequence[Mapping[str, np.ndarray]], shape_tensors=()) -> list[str]:
    """'min' / 'opt' / 'max' (with the profile's index when there are several) where a feed sits
    at a profile's corner, else 'shape i'."""
    from .profiles import PROFILE_POINTS, feed_key

    labels = []
    for i, feed in enumerate(feeds):
        key = feed_key(feed, shape_tensors)
        label = f"shape {i}"
        for k, p in enumerate(profiles):
            # opt first: a fixed-shape profile (min = opt = max) is labelled by what TensorRT tuned for
            points = ("opt", *(w for w in PROFILE_POINTS if w != "opt"))
            hit = next((w for w in points if all(key.get(n) == s for n, s in p.point(w).items())), None)
            if hit:
                label = hit if len(profiles) == 1 else f"p{k} {hit}"
                break
        labels.append(label)
    return labels


def compare_latency(unfused: Any, fused: Any, feeds: Sequence[Mapping[str, np.ndarray]], *,
                    repeats: int = REPEATS, **kw: Any) -> LatencyReport:  # fmt: skip
    """Time both engines (``BuiltEngine``) at every feed, taking turns."""
    shape_tensors = {i.name for i in fused.inputs if i.shape_tensor}
    labels = shape_labels(fused.profiles, feeds, shape_tensors)
    t_unfused, t_fused = time_engines([unfused, fused], feeds, repeats=repeats, **kw)
    rep = LatencyReport(build_s={"unfused": unfused.build_s, "fused": fused.build_s}, method=METHOD.format(repeats=repeats))
    for label, feed, a, b in zip(labels, feeds, t_unfused, t_fused):
        rep.rows.append(LatencyRow(label, {n: list(np.shape(v)) for n, v in feed.items()}, a, b))
    return rep


def probe(built: Any, feed: Mapping[str, np.ndarray]) -> None:
    """Deserialize ``built`` and bind it to ``feed`` once: raises where it cannot be timed."""
    cuda = _cuda()
    stream = cuda.Stream()
    try:
        session = EngineSession(built)
        session.bind(feed, stream).free()
        session.close()
    finally:
        stream.free()


def verify_latency(original_source: Any, fused_built: Any, feeds: Sequence[Mapping[str, np.ndarray]],
                   options: Mapping[str, Any]) -> LatencyReport:  # fmt: skip
    """What ``verify(..., backend="trt")`` adds: build the original's engine like the fused one
    (same profiles, precision, plugins, tactic sources, timing cache) and time both.  A failure
    here is reported, not raised: the accuracy check stands on its own."""
    from .build import build_engine

    keep = ("plugins", "tactic_sources", "timing_cache", "workspace_mb")
    try:
        probe(fused_built, feeds[0])  # an engine that cannot be timed here is not worth a second build
        t0 = time.perf_counter()
        unfused = build_engine(original_source, shapes=[p.ranges for p in fused_built.profiles] or None,
                               precision=fused_built.precision, **{k: options[k] for k in keep if k in options})  # fmt: skip
        log.info("original's engine built in %.1fs", time.perf_counter() - t0)
        return compare_latency(unfused, fused_built, feeds, repeats=int(options.get("latency_repeats", REPEATS)))
    except Exception as e:  # noqa: BLE001 - latency is an addition to the accuracy check
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        log.warning("engine latency not measured: %s", first)
        return LatencyReport(error=f"{type(e).__name__}: {first}")
