"""Prove a fused model computes what the original did.

Both models run on the same inputs (given, or random ones over the dynamic dims at several
shapes) through polygraphy's runners; polygraphy's comparator decides pass/fail with
per-output tolerances suited to the output's type, and the report adds max abs/rel errors.
"""

from __future__ import annotations

import contextlib
import logging
import os
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping, Sequence, Union

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from . import model_io
from .errors import VerifyError

log = logging.getLogger(__name__)

ModelSource = Union[str, os.PathLike, onnx.ModelProto, gs.Graph]

# (atol, rtol) per output element type; polygraphy passes an element within either.
TOLERANCES: dict[int, tuple[float, float]] = {
    onnx.TensorProto.DOUBLE: (1e-6, 1e-6),  # bodies compute in fp32
    onnx.TensorProto.FLOAT: (1e-4, 1e-3),
    onnx.TensorProto.FLOAT16: (2e-2, 2e-2),
    onnx.TensorProto.BFLOAT16: (1e-1, 5e-2),
}
DEFAULT_DIM_VALUES = (1, 3, 8)  # one shape point per value, for every dynamic dim


@dataclass
class OutputCheck:
    shape_point: int
    output: str
    dtype: str
    shape: list[int]
    max_abs: float
    max_rel: float
    mean_abs: float
    atol: float
    rtol: float
    passed: bool


@dataclass
class VerifyReport:
    backend: str
    shapes: list[dict[str, list[int]]]
    checks: list[OutputCheck] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    latency: Any = None  # trt backend: a fusion.trt_timing.LatencyReport (original vs fused engine)

    @property
    def passed(self) -> bool:
        return bool(self.checks) and all(c.passed for c in self.checks)

    @property
    def max_abs(self) -> float:
        return max((c.max_abs for c in self.checks), default=float("nan"))

    def to_dict(self) -> dict[str, Any]:
        return {
            "backend": self.backend,
            "passed": self.passed,
            "max_abs": self.max_abs,
            "shapes": self.shapes,
            "checks": [asdict(c) for c in self.checks],
            "skipped": self.skipped,
            "latency": self.latency.to_dict() if self.latency is not None else None,
        }

    def table(self) -> str:
        head = f"{'shape':>5}  {'output':<32} {'dtype':<8} {'max abs':>10} {'max rel':>10} {'atol':>8} {'rtol':>8}  result"
        rows = [head, "-" * len(head)]
        for c in self.checks:
            rows.append(
                f"{c.shape_point:>5}  {c.output[:32]:<32} {c.dtype:<8} {c.max_abs:>10.3g} {c.max_rel:>10.3g} "
                f"{c.atol:>8.1g} {c.rtol:>8.1g}  {'ok' if c.passed else 'FAIL'}"
            )
        for i, s in enumerate(self.shapes):
            rows.append(f"shape {i}: " + ", ".join(f"{k}={v}" for k, v in s.items()))
        rows.extend(f"skipped: {s}" for s in self.skipped)
        rows.append(f"{'PASSED' if self.passed else 'FAILED'} ({self.backend})")
        if self.latency is not None:
            rows.append(self.latency.table())
        return "\n".join(rows)

    def __str__(self) -> str:
        return self.table()


def verify(
    original: ModelSource,
    fused: ModelSource,
    *,
    inputs: Sequence[Mapping[str, np.ndarray]] | Mapping[str, np.ndarray] | None = None,
    shapes: Sequence[Mapping[str, Any]] | None = None,
    atol: float | Mapping[str, float] | None = None,
    rtol: float | Mapping[str, float] | None = None,
    seed: int = 0,
    backend: str = "onnxruntime",
    **backend_options: Any,
) -> VerifyReport:
    """Run ``original`` on onnxruntime and ``fused`` on ``backend``; compare every output.

    ``inputs``: feed dict(s) to use.  Otherwise random inputs are made at several shapes:
    ``shapes`` is a list of shape points, each mapping a dim name (``batch``) or an input
    name (``input_ids``) to a value or full shape; by default every dynamic dim takes
    1, 3 and 8 in turn.  ``atol``/``rtol``: one value, or per output name; defaults by type.
    ``backend="trt"`` also builds the original's engine and times both (``latency=False``: not).
    """
    orig = _Model(original)
    fuse = _Model(fused)
    if [i.name for i in orig.inputs] != [i.name for i in fuse.inputs]:
        raise VerifyError("the two models have different inputs")
    if backend == "onnxruntime":
        runner = fuse.ort_runner("fused")
    elif backend == "trt":
        from .trt_run import setup_verify  # noqa: PLC0415 - TensorRT is optional

        latency = backend_options.pop("latency", True)
        latency_repeats = backend_options.pop("latency_repeats", None)

        # Builds the engine; inputs default to the min/opt/max shapes of its profiles.
        runner, inputs, atol, rtol = setup_verify(
            orig, fuse, inputs=inputs, shapes=shapes, atol=atol, rtol=rtol, seed=seed, **backend_options
        )
    else:
        raise VerifyError(f"unknown backend {backend!r} (onnxruntime or trt)")

    if inputs is not None:
        feeds = [dict(inputs)] if isinstance(inputs, Mapping) else [dict(f) for f in inputs]
    else:
        feeds = make_feeds(orig, shapes, seed)
    report = VerifyReport(backend, [{k: list(v.shape) for k, v in f.items()} for f in feeds])
    runners = [orig.ort_runner("original"), runner]
    ok_feeds = []
    for i, feed in enumerate(feeds):
        try:
            with _quiet_polygraphy(), runners[0] as r:
                r.infer(feed)
            ok_feeds.append((i, feed))
        except Exception as e:  # the original itself cannot run at this shape: not our problem
            report.skipped.append(f"shape {i}: the original model fails on it ({_first_line(e)})")
    if not ok_feeds:
        raise VerifyError("the original model runs on none of the input shapes; pass inputs= or shapes=")
    _compare(orig, runners, ok_feeds, atol, rtol, report)
    if backend == "trt" and latency:
        from .trt_timing import verify_latency  # noqa: PLC0415

        opts = dict(backend_options, **({"latency_repeats": latency_repeats} if latency_repeats else {}))
        report.latency = verify_latency(orig.source, runner.built, [f for _, f in ok_feeds], opts)
    return report


def _compare(orig: "_Model", runners, feeds, atol, rtol, report: VerifyReport) -> None:
    from polygraphy.comparator import Comparator

    try:  # polygraphy >= 0.50; older ones (the TensorRT 8.5 era) only have CompareFunc.simple
        from polygraphy.comparator import SimpleCompareFunc as simple
    except ImportError:
        from polygraphy.comparator import CompareFunc

        simple = CompareFunc.simple

    names = [o.name for o in orig.outputs]
    types = {o.name: o.type.tensor_type.elem_type for o in orig.outputs}
    atols = {n: _tol(atol, n, TOLERANCES.get(types[n], (0.0, 0.0))[0]) for n in names}
    rtols = {n: _tol(rtol, n, TOLERANCES.get(types[n], (0.0, 0.0))[1]) for n in names}
    with _quiet_polygraphy():
        results = Comparator.run(runners, data_loader=[f for _, f in feeds])
        accuracy = Comparator.compare_accuracy(
            results, compare_func=simple(atol=atols, rtol=rtols, check_error_stat="elemwise")
        )
    # polygraphy >= 0.50 returns one AccuracyResult per compare function, older ones just one.
    if not hasattr(accuracy, "values"):
        accuracy = accuracy[0]
    pair = next(iter(accuracy.values()))
    ref_runs, new_runs = results[0][1], results[1][1]
    for (point, _), verdict, ref, new in zip(feeds, pair, ref_runs, new_runs):
        for name in names:
            a = np.asarray(ref[name])
            b = np.asarray(new[name]) if name in new else None
            if b is None or a.shape != b.shape:
                report.checks.append(
                    OutputCheck(point, name, _type_name(types[name]), list(a.shape), float("inf"), float("inf"),
                                float("inf"), atols[name], rtols[name], False)
                )
                continue
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            diff = np.abs(a64 - b64)
            same_nonfinite = (a64 == b64) | (np.isnan(a64) & np.isnan(b64))
            diff = np.where(same_nonfinite, 0.0, diff)
            rel = diff / np.maximum(np.abs(a64), 1e-30)
            report.checks.append(
                OutputCheck(
                    point,
                    name,
                    _type_name(types[name]),
                    list(a.shape),
                    float(diff.max(initial=0.0)),
                    float(rel.max(initial=0.0)),
                    float(diff.mean()) if diff.size else 0.0,
                    atols[name],
                    rtols[name],
                    bool(verdict[name]),
                )
            )


class _Model:
    """A model to run: kept as a path where it has one (external data resolves from there)."""

    def __init__(self, src: ModelSource):
        if isinstance(src, gs.Graph):
            src = gs.export_onnx(src)
        if isinstance(src, onnx.ModelProto):
            if model_io.external_tensors(src):
                raise VerifyError("a ModelProto with external data cannot be run from memory: pass its path")
            self.source: Any = src.SerializeToString()
            self.proto = src
        else:
            self.source = os.fspath(src)
            self.proto = model_io.load(self.source).proto
        g = self.proto.graph
        init = {t.name for t in g.initializer}
        self.inputs = [i for i in g.input if i.name not in init]
        self.outputs = list(g.output)

    def ort_runner(self, name: str):
        import onnxruntime as ort
        from polygraphy.backend.onnxrt import OnnxrtRunner, SessionFromOnnx

        # Without ORT's own graph rewrites both models run as written.
        level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        session = SessionFromOnnx(self.source, providers=["CPUExecutionProvider"], graph_optimization_level=level)
        return OnnxrtRunner(session, name=name)


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


def _tol(value, name: str, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, Mapping):
        return float(value.get(name, default))
    return float(value)


def _type_name(t: int) -> str:
    return onnx.TensorProto.DataType.Name(t).lower() if t else "?"


def _first_line(e: BaseException) -> str:
    lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
    return lines[-1][:200] if lines else type(e).__name__


@contextlib.contextmanager
def _quiet_polygraphy():
    from polygraphy.logger import G_LOGGER

    old = G_LOGGER.module_severity
    G_LOGGER.module_severity = G_LOGGER.CRITICAL
    try:
        yield
    finally:
        G_LOGGER.module_severity = old
