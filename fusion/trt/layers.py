"""Where an engine spends its time: per-layer times from TensorRT's profiler, grouped by kind.

A fused engine that is slower than the unfused one says why here: time in reformat layers
around a plugin, Myelin regions split into more (and smaller) pieces, or the plugins
themselves.  Layer kinds come from the engine inspector (built with DETAILED profiling
verbosity, as :func:`fusion.trt.build.build_engine` does) and, where it says nothing, from the
layer's name.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..errors import VerifyError
from .inspect import inspector_records
from .timing import EngineSession, _cuda


# (kind, words that mark it in the inspector's LayerType or, failing that, the layer's name);
# the first that matches wins.
KINDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("plugin", ("pluginv2", "pluginv3", "plugin")),
    ("reformat", ("reformat",)),
    ("myelin", ("myelin", "foreignnode")),
    ("matmul", ("gemm", "matrixmultiply", "matmul", "convolution", "fullyconnected")),
    ("reduce", ("reduce",)),
    ("softmax", ("softmax",)),
    ("pointwise", ("pointwise", "elementwise", "unary", "activation", "scale")),
    ("data movement", ("shuffle", "gather", "slice", "concat", "copy", "noop", "constant")),
)


@dataclass
class LayerTime:
    name: str
    ms: float  # median over the profiled runs
    kind: str
    detail: str = ""  # layer type, tactic and I/O formats, where the inspector gives them

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "ms": round(self.ms, 5), "kind": self.kind, "detail": self.detail}


@dataclass
class LayerProfile:
    layers: list[LayerTime]
    runs: int
    shapes: dict[str, list[int]] = field(default_factory=dict)

    @property
    def total_ms(self) -> float:
        return sum(t.ms for t in self.layers)

    def by_kind(self) -> dict[str, dict[str, float]]:
        """kind -> {"ms": summed median ms, "layers": count}, largest first."""
        acc: dict[str, list[float]] = defaultdict(list)
        for t in self.layers:
            acc[t.kind].append(t.ms)
        rows = {k: {"ms": round(sum(v), 5), "layers": len(v)} for k, v in acc.items()}
        return dict(sorted(rows.items(), key=lambda kv: -kv[1]["ms"]))

    def top(self, n: int = 10) -> list[LayerTime]:
        return sorted(self.layers, key=lambda t: -t.ms)[:n]

    def to_dict(self, top: int = 25) -> dict[str, Any]:
        return {"runs": self.runs, "shapes": self.shapes, "total_ms": round(self.total_ms, 5), "layers": len(self.layers),
                "by_kind": self.by_kind(), "top": [t.to_dict() for t in self.top(top)],
                "all": [t.to_dict() for t in self.layers]}  # fmt: skip

    def text(self, top: int = 10) -> str:
        lines = [f"{len(self.layers)} layers, {self.total_ms:.3f} ms summed (median of {self.runs} runs)"]
        for kind, v in self.by_kind().items():
            lines.append(f"  {kind:<14} {v['ms']:8.3f} ms  {v['layers']:4d} layers")
        lines.append("  slowest:")
        for t in self.top(top):
            lines.append(f"    {t.ms:8.4f} ms  {t.kind:<10} {t.name[:90]}")
        return "\n".join(lines)


def classify(name: str, layer_type: str = "") -> str:
    for where in (layer_type, name):
        low = where.lower().replace(" ", "").replace("_", "")
        for kind, words in KINDS:
            if any(w in low for w in words):
                return kind
    return "other"


def inspector_layers(engine, trt) -> dict[str, dict[str, Any]]:
    """name -> the inspector's record of that layer ({} where the engine has none: names still classify)."""
    return {str(r["Name"]): r for r in inspector_records(trt, engine) or () if "Name" in r}


def _detail(record: Mapping[str, Any]) -> str:
    parts = [str(record.get("LayerType", ""))]
    if record.get("TacticName"):
        parts.append(str(record["TacticName"]))
    formats = []
    for key in ("Inputs", "Outputs"):
        for t in record.get(key, []) or []:
            if isinstance(t, dict) and t.get("Format/Datatype"):
                formats.append(f"{key[0].lower()}:{t['Format/Datatype']}")
    if formats:
        parts.append(" ".join(dict.fromkeys(formats)))
    return "; ".join(p for p in parts if p)


def _recorder(trt):
    class Recorder(trt.IProfiler):
        """Collects each layer's time per run, in the order TensorRT reports them."""

        def __init__(self):
            trt.IProfiler.__init__(self)
            self.times: dict[str, list[float]] = defaultdict(list)
            self.order: list[str] = []
            self.recording = False

        def report_layer_time(self, layer_name, ms):
            if not self.recording:
                return
            if layer_name not in self.times:
                self.order.append(layer_name)
            self.times[layer_name].append(float(ms))

    return Recorder()


def profile_layers(built: Any, feed: Mapping[str, np.ndarray], runs: int = 20, warmup: int = 3) -> LayerProfile:
    """Per-layer times of ``built`` (a :class:`fusion.trt.build.BuiltEngine`) at ``feed``: the
    median over ``runs`` synchronous executions after ``warmup`` unrecorded ones."""
    cuda = _cuda()
    stream = cuda.Stream()
    session = EngineSession(built)
    bound = None
    try:
        bound = session.bind(feed, stream)
        recorder = _recorder(session.trt)
        bound.context.profiler = recorder
        for i in range(warmup + runs):
            recorder.recording = i >= warmup
            _run_sync(bound)
        records = inspector_layers(session.engine, session.trt)
        layers = []
        for name in recorder.order:
            rec = records.get(name, {})
            layers.append(LayerTime(name, statistics.median(recorder.times[name]), classify(name, str(rec.get("LayerType", ""))),
                                    _detail(rec)))  # fmt: skip
        return LayerProfile(layers, runs, {k: list(np.shape(v)) for k, v in feed.items()})
    finally:
        if bound is not None:
            bound.free()
        session.close()
        stream.free()


def _run_sync(bound) -> None:
    """One execution that has finished when this returns, so the profiler has reported."""
    if bound.api == "v2":
        ok = bound.context.execute_v2(bound.bindings)
    else:
        ok = bound.launch()
        bound.stream.synchronize()
    if ok is False:
        raise VerifyError(f"TensorRT execute ({bound.api}) failed while profiling layers")
