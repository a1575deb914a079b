"""Prove a fused model computes what the original did.

Both models run on the same inputs (given, or random ones over the dynamic dims at several
shapes) through polygraphy's runners; polygraphy's comparator decides pass/fail with
per-output tolerances suited to the output's type, and the report adds max abs/rel errors.

Beyond the random inputs, extra checks (each named in the report's table) try what random
data at ordinary shapes does not: overridable initializers (also graph inputs, which a
caller may feed) fed perturbed values, a zero-size dynamic dim, and float inputs with a large
mean and a small spread (x = c + noise), which exposes precision lost in a fused body.

Both models run with onnxruntime's graph optimizations off, so each runs as written.  Users
deploy on its default session, which optimizes (constant folding, then rewrite rules on the
folded graph): the "onnxruntime optimized" check runs the fused model there (ORT_ENABLE_ALL)
on the random feeds again and compares it with the original's unoptimized outputs.
A fused model that cannot load or run where the original does is a FAILED check with the
runtime's message, not an error.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import warnings
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping, Sequence, Union

import numpy as np
import onnx
import onnx_graphsurgeon as gs

from ..ir import model_io
from ..errors import VerifyError
from ..ir.feeds import make_feeds
from ..ir.graph import node_lists

log = logging.getLogger(__name__)

ModelSource = Union[str, os.PathLike, onnx.ModelProto, gs.Graph]

# (atol, rtol) per output element type; polygraphy passes an element within either.
TOLERANCES: dict[int, tuple[float, float]] = {
    onnx.TensorProto.DOUBLE: (1e-6, 1e-6),  # bodies compute in fp32
    onnx.TensorProto.FLOAT: (1e-4, 1e-3),
    onnx.TensorProto.FLOAT16: (2e-2, 2e-2),
    onnx.TensorProto.BFLOAT16: (1e-1, 5e-2),
}
# The extra checks (names as the report shows them); verify(extra_checks=...) picks some.
RANDOM = "random"
INITIALIZERS = "initializers fed"
ZERO_SIZE = "zero-size dim"
LARGE_MEAN = "large mean"
OPTIMIZED = "onnxruntime optimized"
OPTIMIZED_LEVEL = "ORT_ENABLE_ALL"  # what an onnxruntime.InferenceSession does by default
EXTRA_CHECKS = (INITIALIZERS, ZERO_SIZE, LARGE_MEAN, OPTIMIZED)
# What verify(extra_checks=True) runs: all of them.
DEFAULT_EXTRA_CHECKS = EXTRA_CHECKS
EXTRA_DIM_VALUE = 3  # the other dynamic dims at the extra checks' shape points
# Ops that kill onnxruntime (SIGFPE, uncatchable) on an empty input, e.g. Einsum
# "btnh,bsnh->bnts" with b = 0 (tf2onnx's Keras attention): no zero-size check where they are.
ZERO_SIZE_CRASHES = frozenset({"Einsum"})
MAX_ZERO_DIMS = 2  # zero-size points: one per dim name, for the first few names
# x = c + N(0, s) per float input type: c/s large enough that an fp32 body of a float64
# chain, or a one-pass variance E[x²] − E[x]², loses digits a two-pass original keeps (fp32
# at 1e3: a one-pass variance is off by ~0.1, onnxruntime's LayerNormalization by ~1e-7).
# (fp16 has no digits to spare: no such check.)  A model whose own conditioning amplifies
# rounding (a softmax of logits this large) can fail it too: extra_checks= leaves it out.
LARGE_MEAN_VALUES: dict[int, tuple[float, float]] = {
    onnx.TensorProto.DOUBLE: (1e8, 1.0),
    onnx.TensorProto.FLOAT: (1e3, 1.0),
}


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
    check: str = RANDOM  # which feed: random inputs, or one of EXTRA_CHECKS (with details)
    error: str = ""  # the fused model could not load or run: the runtime's message


@dataclass
class VerifyReport:
    backend: str
    shapes: list[dict[str, list[int]]]
    checks: list[OutputCheck] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    labels: list[str] = field(default_factory=list)  # per shape point: what its feed is (see OutputCheck.check)
    latency: Any = None  # trt backend: a fusion.trt.timing.LatencyReport (original vs fused engine)

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
            "labels": self.labels,
            "latency": self.latency.to_dict() if self.latency is not None else None,
        }

    def table(self) -> str:
        head = (f"{'shape':>5}  {'check':<21} {'output':<28} {'dtype':<8} {'max abs':>10} {'max rel':>10} "
                f"{'atol':>8} {'rtol':>8}  result")  # fmt: skip
        rows = [head, "-" * len(head)]
        errors: dict[str, None] = {}
        for c in self.checks:
            rows.append(
                f"{c.shape_point:>5}  {c.check.split(':')[0][:21]:<21} {c.output[:28]:<28} {c.dtype:<8} "
                f"{c.max_abs:>10.3g} {c.max_rel:>10.3g} {c.atol:>8.1g} {c.rtol:>8.1g}  {'ok' if c.passed else 'FAIL'}"
            )
            if c.error:
                errors.setdefault(f"shape {c.shape_point}: the fused model fails: {c.error}")
        for i, s in enumerate(self.shapes):
            label = f" ({self.labels[i]})" if i < len(self.labels) and self.labels[i] != RANDOM else ""
            rows.append(f"shape {i}{label}: " + ", ".join(f"{k}={v}" for k, v in s.items()))
        rows.extend(errors)
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
    extra_checks: bool | Sequence[str] = True,
    **backend_options: Any,
) -> VerifyReport:
    """Run ``original`` on onnxruntime and ``fused`` on ``backend``; compare every output.

    ``inputs``: feed dict(s) to use.  Otherwise random inputs are made at several shapes:
    ``shapes`` is a list of shape points, each mapping a dim name (``batch``) or an input
    name (``input_ids``) to a value or full shape; by default every dynamic dim takes
    1, 3 and 8 in turn.  ``atol``/``rtol``: one value, or per output name; defaults by type.
    ``extra_checks``: with made inputs on onnxruntime, also some of EXTRA_CHECKS (True: those
    of DEFAULT_EXTRA_CHECKS; or a list of their names; False: none).
    ``backend="trt"`` also builds the original's engine and times both (``latency=False``: not).
    """
    orig = _Model(original)
    fuse = _Model(fused)
    if [i.name for i in orig.inputs] != [i.name for i in fuse.inputs]:
        raise VerifyError("the two models have different inputs")
    extras: list[tuple[str, dict[str, np.ndarray]]] = []
    wanted: Sequence[str] = ()
    notes: list[str] = []
    if backend == "onnxruntime":
        runner = fuse.ort_runner("fused")
    elif backend == "trt":
        from ..trt.run import setup_verify  # noqa: PLC0415 - TensorRT is optional

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
        if backend == "onnxruntime" and extra_checks:
            wanted = DEFAULT_EXTRA_CHECKS if extra_checks is True else tuple(extra_checks)
            unknown = set(wanted) - set(EXTRA_CHECKS)
            if unknown:
                raise VerifyError(f"unknown extra checks {sorted(unknown)} (known: {', '.join(EXTRA_CHECKS)})")
            extras = extra_feeds(orig, fuse, feeds[0], wanted, seed, notes)
    labels = [RANDOM] * len(feeds) + [label for label, _ in extras]
    # The optimized check repeats the random feeds: its point j is random point repeats[j].
    repeats: dict[int, int] = {}
    if OPTIMIZED in wanted:
        repeats = {len(feeds) + len(extras) + i: i for i in range(len(feeds))}
        labels += [f"{OPTIMIZED}: {OPTIMIZED_LEVEL}, shape {i}'s feed" for i in repeats.values()]
    feeds += [f for _, f in extras] + [feeds[i] for i in repeats.values()]
    names = {i.name for i in orig.inputs}
    report = VerifyReport(
        backend, [{k: list(v.shape) for k, v in f.items() if k in names} for f in feeds], labels=labels
    )
    report.skipped.extend(notes)

    # The original first: a point it cannot run is skipped, not failed.
    ref_runs: dict[int, dict[str, np.ndarray]] = {}
    own = [i for i in range(len(feeds)) if i not in repeats]
    for i, out in zip(own, _run_each(orig.ort_runner("original"), [feeds[i] for i in own])):
        if isinstance(out, BaseException):
            report.skipped.append(f"shape {i} ({labels[i]}): the original model fails on it ({_first_line(out)})")
        else:
            ref_runs[i] = out
    if not any(labels[i] == RANDOM for i in ref_runs):
        raise VerifyError("the original model runs on none of the input shapes; pass inputs= or shapes=")
    # (The optimized check compares with the original's outputs on the feed it repeats.)
    ref_runs.update({j: ref_runs[i] for j, i in repeats.items() if i in ref_runs})
    points = [i for i in sorted(ref_runs) if i not in repeats]
    new_runs = dict(zip(points, _run_each(runner, [feeds[i] for i in points])))
    again = [j for j in sorted(ref_runs) if j in repeats]
    if again:
        optimized = fuse.ort_runner("fused (optimized)", OPTIMIZED_LEVEL)
        new_runs.update(zip(again, _run_each(optimized, [feeds[j] for j in again])))
    _compare(orig, ref_runs, new_runs, labels, atol, rtol, report)
    if backend == "trt" and latency:
        from ..trt.timing import verify_latency  # noqa: PLC0415

        opts = dict(backend_options, **({"latency_repeats": latency_repeats} if latency_repeats else {}))
        timed = [feeds[i] for i in points if labels[i] == RANDOM]
        report.latency = verify_latency(orig.source, runner.built, timed, opts)
    return report


def _run_each(runner, feeds: Sequence[Mapping[str, np.ndarray]]) -> list[Any]:
    """Each feed's outputs (copied: runners may reuse buffers), or the exception it raised;
    every entry is the loader's exception when the model cannot even load."""
    out: list[Any] = []
    try:
        with _quiet_polygraphy(), runner as r:
            for feed in feeds:
                try:
                    # (check_inputs would refuse initializers fed by name)
                    res = r.infer(dict(feed), check_inputs=False)
                    out.append({k: np.array(v, copy=True) for k, v in res.items()})
                except Exception as e:  # noqa: BLE001 - reported per feed
                    out.append(e)
    except Exception as e:  # noqa: BLE001 - the model does not load: every feed fails with that
        out += [e] * (len(feeds) - len(out))
    return out


def _compare(orig: "_Model", ref_runs, new_runs, labels, atol, rtol, report: VerifyReport) -> None:
    from polygraphy.comparator import Comparator, IterationResult, RunResults

    try:  # polygraphy >= 0.50; older ones (the TensorRT 8.5 era) only have CompareFunc.simple
        from polygraphy.comparator import SimpleCompareFunc as simple
    except ImportError:
        from polygraphy.comparator import CompareFunc

        simple = CompareFunc.simple

    names = [o.name for o in orig.outputs]
    types = {o.name: o.type.tensor_type.elem_type for o in orig.outputs}
    atols = {n: _tol(atol, n, TOLERANCES.get(types[n], (0.0, 0.0))[0]) for n in names}
    rtols = {n: _tol(rtol, n, TOLERANCES.get(types[n], (0.0, 0.0))[1]) for n in names}
    ran = [i for i in sorted(ref_runs) if not isinstance(new_runs[i], BaseException)]
    verdicts: dict[int, Any] = {}
    if ran:
        results = RunResults()
        results.append(("original", [IterationResult(ref_runs[i], runner_name="original") for i in ran]))
        results.append(("fused", [IterationResult(new_runs[i], runner_name="fused") for i in ran]))
        # (zero-size outputs: numpy warns about the mean of nothing; the verdict stands)
        with _quiet_polygraphy(), np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            accuracy = Comparator.compare_accuracy(
                results, compare_func=simple(atol=atols, rtol=rtols, check_error_stat="elemwise")
            )
        # polygraphy >= 0.50 returns one AccuracyResult per compare function, older ones just one.
        if not hasattr(accuracy, "values"):
            accuracy = accuracy[0]
        verdicts = dict(zip(ran, next(iter(accuracy.values()))))
    for point in sorted(ref_runs):
        ref, new = ref_runs[point], new_runs[point]
        error = _first_line(new) if isinstance(new, BaseException) else ""
        for name in names:
            a = np.asarray(ref[name])
            b = None if error or name not in new else np.asarray(new[name])
            if b is None or a.shape != b.shape:
                report.checks.append(
                    OutputCheck(point, name, _type_name(types[name]), list(a.shape), float("inf"), float("inf"),
                                float("inf"), atols[name], rtols[name], False, labels[point], error)
                )
                continue
            a64 = a.astype(np.float64)
            diff = abs_diff(a64, b)
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
                    bool(verdicts[point][name]),
                    labels[point],
                )
            )


def abs_diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """|a - b| in float64, 0 where both hold the same infinity or both NaN, inf where only one
    side is NaN (the worst mismatch: a max over it cannot hide it)."""
    a64, b64 = np.asarray(a, np.float64), np.asarray(b, np.float64)
    diff = np.abs(a64 - b64)
    same = (a64 == b64) | (np.isnan(a64) & np.isnan(b64))
    return np.where(same, 0.0, np.where(np.isnan(diff), np.inf, diff))


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
        # Initializers also listed as graph inputs (IR >= 4): a caller may feed them.
        listed = {i.name for i in g.input}
        self.overridable = [t for t in g.initializer if t.name in listed] if self.proto.ir_version >= 4 else []

    def ort_runner(self, name: str, level: str = "ORT_DISABLE_ALL"):
        """A polygraphy runner on onnxruntime's CPU provider at graph optimization ``level`` (a
        GraphOptimizationLevel name): off by default, so the model runs as written."""
        import onnxruntime as ort
        from polygraphy.backend.onnxrt import OnnxrtRunner

        def session() -> Any:
            opts = ort.SessionOptions()
            opts.graph_optimization_level = getattr(ort.GraphOptimizationLevel, level)
            # A shape a model fails on is reported (skipped or FAILED), not logged to stderr too.
            opts.log_severity_level = 4
            return ort.InferenceSession(self.source, opts, providers=["CPUExecutionProvider"])

        return OnnxrtRunner(session, name=name)


def _op_types(model: onnx.ModelProto) -> set[str]:
    """Every op type in the model: its graph, subgraphs and local functions."""
    return {n.op_type for c in node_lists(model).values() for n in c.node}


def extra_feeds(
    orig: "_Model", fused: "_Model", base: Mapping[str, np.ndarray], wanted: Sequence[str], seed: int, notes: list[str]
) -> list[tuple[str, dict[str, np.ndarray]]]:
    """The extra checks' (label, feed) pairs; ``notes`` gets why a wanted one could not be made."""
    rng = np.random.default_rng(seed + 7919)
    out: list[tuple[str, dict[str, np.ndarray]]] = []
    if INITIALIZERS in wanted and orig.overridable:
        fed = {t.name for t in fused.overridable}
        feed = dict(base)
        for t in orig.overridable:
            if t.name not in fed:
                notes.append(f"{INITIALIZERS}: {t.name!r} is overridable in the original only: not fed")
                continue
            value = _perturbed(rng, orig, t)
            if value is not None:
                feed[t.name] = value
        names = [k for k in feed if k not in base]
        if names:
            shown = ", ".join(names[:4]) + (f", ... ({len(names)} in all)" if len(names) > 4 else "")
            out.append((f"{INITIALIZERS}: {shown}", feed))
    crashing = sorted(ZERO_SIZE_CRASHES & (_op_types(orig.proto) | _op_types(fused.proto)))
    if ZERO_SIZE in wanted and crashing:
        notes.append(f"{ZERO_SIZE}: not run: onnxruntime dies (SIGFPE) running {', '.join(crashing)} on an empty "
                     "tensor, which would end this process")
    elif ZERO_SIZE in wanted:
        dims = _dynamic_dims(orig)
        if not dims:
            notes.append(f"{ZERO_SIZE}: no dynamic dim to set to 0")
        for dim in dims[:MAX_ZERO_DIMS]:
            point = {"*": EXTRA_DIM_VALUE, dim: 0} if dim != "*" else {"*": 0}
            feed = make_feeds(orig, [point], seed)[0]
            out.append((f"{ZERO_SIZE}: {dim if dim != '*' else 'every dynamic dim'}=0", feed))
    if LARGE_MEAN in wanted:
        feed = dict(base)
        shown = []
        for vi in orig.inputs:
            elem = vi.type.tensor_type.elem_type
            if elem in LARGE_MEAN_VALUES:
                c, spread = LARGE_MEAN_VALUES[elem]
                x = base[vi.name]
                feed[vi.name] = (c + spread * rng.standard_normal(x.shape)).astype(x.dtype)
                shown.append(f"{c:g} + N(0, {spread:g})")
        if shown:
            out.append((f"{LARGE_MEAN}: x = {shown[0]}", feed))
    return out


def _perturbed(rng: np.random.Generator, model: "_Model", t: onnx.TensorProto) -> np.ndarray | None:
    """A float initializer's value moved off what it is (kept positive where it was):
    an emitted node that baked the stored value then computes something else.  Integer
    ones (axes, shapes) stay: changing them would mostly make the original fail."""
    np_type = onnx.helper.tensor_dtype_to_np_dtype(t.data_type)
    if not np.issubdtype(np_type, np.floating):
        return None
    if t.data_location == onnx.TensorProto.EXTERNAL:
        if not isinstance(model.source, str):
            return None
        from onnx.external_data_helper import load_external_data_for_tensor  # noqa: PLC0415

        t2 = onnx.TensorProto()
        t2.CopyFrom(t)
        load_external_data_for_tensor(t2, os.path.dirname(os.path.abspath(model.source)))
        t = t2
    value = onnx.numpy_helper.to_array(t).astype(np.float64)
    scale = rng.uniform(1.3, 1.7, value.shape)
    shift = rng.uniform(0.05, 0.15, value.shape) * np.where(value < 0, -1.0, 1.0)
    return np.asarray(value * scale + shift).astype(np_type)  # (a 0-d result would be a numpy scalar)


def _dynamic_dims(model: "_Model") -> list[str]:
    """Names of the inputs' dynamic dims in order of appearance ("*" for unnamed ones)."""
    out: list[str] = []
    for vi in model.inputs:
        for d in vi.type.tensor_type.shape.dim:
            if not d.HasField("dim_value"):
                name = d.dim_param or "*"
                if name not in out:
                    out.append(name)
    # "*" stands for every unnamed dim at once: only when nothing is named.
    named = [n for n in out if n != "*"]
    return named or out


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
    if not lines:
        return type(e).__name__
    # onnxruntime's messages name its own source files and C++ functions: noise to a user, and
    # they would push the shapes that matter past the cut.
    text = re.sub(r"\S*onnxruntime_src/\S*\s*", "", lines[-1])
    text = re.sub(r"onnxruntime::[\w:~<>]+\([^)]*\)\s*", "", text)
    return text[:300]


@contextlib.contextmanager
def _quiet_polygraphy():
    from polygraphy.logger import G_LOGGER

    old = G_LOGGER.module_severity
    G_LOGGER.module_severity = G_LOGGER.CRITICAL
    try:
        yield
    finally:
        G_LOGGER.module_severity = old
