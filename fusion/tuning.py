"""Fusion chosen by measurement: keep only what makes the TensorRT engine faster.

    fused, record = fusion.tune("bert.onnx", target="trt", profile={"batch": 8, "seq": 128})
    print(record.text())

A small greedy search, every step an engine build and a timing against the unfused engine
(both engines timed together, taking turns; :mod:`fusion.trt.timing`), with one timing cache
shared by every build:

1. what would fuse, per pass and per group of a pass (``gemm[act]``: FCs followed by an
   activation; ``gemm[plain]``: the rest), from one dry run;
2. the unfused engine (the baseline);
3. each pass alone: kept when it wins by more than the noise margin (geometric mean of the
   per-shape speed-ups >= 1 + margin, and no shape below 1 - margin);
4. a pass that does not win, and has several groups: each group alone, kept the same way;
5. everything kept, together: used when it wins and is at least as fast as the best unit
   alone (else that unit alone).

Every measurement (build seconds, latency per shape, speed-up, decision and reason) goes to
the :class:`TuneRecord`, which the result carries (``PassResult.tuning``) into the text and
JSON reports; what is left out is a near-miss quoting its measurement.
"""

from __future__ import annotations

import logging
import math
import os
import tempfile
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import onnx

from .ir import model_io
from .passes import driver  # `passes` is the keyword that names the passes
from .api import _renamed
from .errors import FusionError
from .passes.defaults import UNVERIFIED, off_reason
from .passes.driver import PassResult
from .rewrite.editor import Reject
from .rewrite.rules import Rule

log = logging.getLogger(__name__)

TUNE_TARGETS = ("trt", "plugin")
MARGIN = 0.03  # a unit must win by more than this (3 %) to be kept
ALL = None  # a unit's groups: all of them


# -- units: a pass, or one group of a pass --------------------------------------------------


def group_of(pass_name: str, desc: Any) -> str:
    """The group a fused subgraph belongs to within its pass (what tuning may split)."""
    if pass_name == "gemm":
        return "act" if getattr(desc, "activation", "none") not in ("none", None) else "plain"
    return "all"


def unit_name(pass_name: str, group: str | None) -> str:
    return pass_name if group in (None, "all") else f"{pass_name}[{group}]"


class _Select(Rule):
    """A rule fusing only the chosen groups of its pass; the rest are near-misses saying why."""

    def __init__(self, inner: Rule, groups: set[str] | None, why: Mapping[str, str] | None = None):
        self.inner, self.groups, self.why = inner, groups, dict(why or {})
        self.fused: Counter[str] = Counter()
        self.left: list[tuple[set[int], str]] = []  # (node ids, group) of matches left unfused
        for attr in ("name", "pass_name", "pattern", "min_progress", "signature", "anchors", "doc", "variants",
                     "defers_misses"):
            setattr(self, attr, getattr(inner, attr))

    def exported(self, m: Any) -> frozenset[int]:
        return self.inner.exported(m)

    def check(self, m: Any, ctx: Any) -> Any:
        desc = self.inner.check(m, ctx)
        g = group_of(self.pass_name, desc)
        nodes = {id(n) for n in m.all_nodes}
        # Groups are disjoint: the FC inside a left-out FC + activation is not fused on its own
        # (roots are tried from the outputs back, so the longer match comes first).
        held = next((h for h in self.left if h[0] & nodes), None)
        if held is not None:
            g = held[1]
        if self.groups is not None and g not in self.groups:
            if held is None:
                self.left.append((nodes, g))
            name = unit_name(self.pass_name, g)
            raise Reject(f"left unfused by tuning: {self.why.get(name) or self.why.get(self.pass_name) or 'not measured'}")
        return desc, g

    def rewrite(self, desc: Any, em: Any, ctx: Any) -> None:
        inner_desc, g = desc
        self.inner.rewrite(inner_desc, em, ctx)
        self.fused[g] += 1


def _rules(rules: Sequence[Rule], config: Mapping[str, set[str] | None], why: Mapping[str, str] | None = None) -> list[_Select]:
    """``config``: pass -> groups to fuse (None: all); passes not in it fuse nothing."""
    return [_Select(r, config[r.pass_name] if r.pass_name in config else set(), why) for r in rules]


# -- the record -------------------------------------------------------------------------------


@dataclass
class Measurement:
    name: str  # "unfused", a unit ("layernorm", "gemm[act]"), or units joined by "+"
    units: list[str]
    fused_nodes: int = 0
    build_s: float | None = None
    shapes: list[str] = field(default_factory=list)  # labels: min / opt / max
    unfused_ms: list[float] = field(default_factory=list)  # the baseline, timed alongside
    ms: list[float] = field(default_factory=list)
    p10_ms: list[float] = field(default_factory=list)
    p90_ms: list[float] = field(default_factory=list)
    decision: str = ""  # baseline | kept | dropped | final | not chosen | failed | skipped
    reason: str = ""

    @property
    def speedups(self) -> list[float]:
        return [a / b if b > 0 else float("nan") for a, b in zip(self.unfused_ms, self.ms)]

    @property
    def score(self) -> float:
        """Geometric mean of the per-shape speed-ups (nan when not measured)."""
        s = [x for x in self.speedups if x > 0 and math.isfinite(x)]
        return math.exp(sum(math.log(x) for x in s) / len(s)) if s else float("nan")

    def to_dict(self) -> dict[str, Any]:
        r = lambda v: round(v, 5) if isinstance(v, float) and math.isfinite(v) else v  # noqa: E731
        return {"name": self.name, "units": self.units, "fused_nodes": self.fused_nodes,
                "build_s": r(self.build_s), "shapes": self.shapes, "unfused_ms": [r(v) for v in self.unfused_ms],
                "ms": [r(v) for v in self.ms], "p10_ms": [r(v) for v in self.p10_ms],
                "p90_ms": [r(v) for v in self.p90_ms], "speedups": [r(v) for v in self.speedups],
                "score": r(self.score), "decision": self.decision, "reason": self.reason}  # fmt: skip


@dataclass
class TuneRecord:
    target: str
    precision: str
    margin: float
    measurements: list[Measurement] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)  # the units of the returned model
    seconds: float = 0.0  # the whole tuning
    trt_version: str | None = None

    @property
    def builds(self) -> int:
        return sum(m.build_s is not None for m in self.measurements)

    @property
    def final(self) -> Measurement | None:
        return next((m for m in self.measurements if m.decision == "final"), None)

    def to_dict(self) -> dict[str, Any]:
        f = self.final
        return {"target": self.target, "precision": self.precision, "margin": self.margin, "kept": self.kept,
                "speedups": [round(s, 4) for s in f.speedups] if f else [], "seconds": round(self.seconds, 1),
                "engine_builds": self.builds, "build_s": round(sum(m.build_s or 0 for m in self.measurements), 1),
                "trt_version": self.trt_version, "measurements": [m.to_dict() for m in self.measurements]}  # fmt: skip

    def text(self) -> str:
        lines = [f"tuning ({self.target}, {self.precision}, margin {self.margin:.0%}): kept "
                 f"{', '.join(self.kept) or 'nothing'}; {self.builds} engine builds, {self.seconds:.0f} s in all"]  # fmt: skip
        head = f"  {'candidate':<28} {'nodes':>5} {'build s':>8}  {'speed-up per shape':<36} {'decision':<10} reason"
        lines += [head]
        for m in self.measurements:
            sp = " ".join(f"{lab}:{s:.3f}x" for lab, s in zip(m.shapes, m.speedups)) if m.ms else "-"
            if m.decision == "baseline":
                sp = " ".join(f"{lab}:{v:.3g}ms" for lab, v in zip(m.shapes, m.ms))
            b = f"{m.build_s:.1f}" if m.build_s is not None else "-"
            lines.append(f"  {m.name[:28]:<28} {m.fused_nodes:>5} {b:>8}  {sp:<36} {m.decision:<10} {m.reason}")
        return "\n".join(lines)


# -- building and timing (tests replace this class) ------------------------------------------


class EngineBench:
    """Builds engines with one set of options and one timing cache; times each candidate
    together with the unfused engine at every profile corner."""

    def __init__(self, original: onnx.ModelProto, *, profiles: Any, plugins: Sequence[str] = (), precision: str = "fp32",
                 tactic_sources: Any = None, timing_cache: str | None = None, workspace_mb: int | None = None,
                 repeats: int = 10, seed: int = 0, tmpdir: str | None = None):  # fmt: skip
        from .trt.profiles import derive_profiles, model_inputs
        from .trt.run import corner_feeds
        from .compare.verify import _Model

        self.original = original
        self.tmpdir = tmpdir or tempfile.mkdtemp(prefix="fusion-tune-")
        self.cache = timing_cache or os.path.join(self.tmpdir, "timing.cache")
        self.options = dict(plugins=list(plugins), precision=precision, tactic_sources=tactic_sources,
                            timing_cache=self.cache, workspace_mb=workspace_mb)  # fmt: skip
        self.spec = profiles
        self.profiles = derive_profiles(model_inputs(original), profiles)
        self.feeds = corner_feeds(_Model(original), self.profiles, seed)
        self.repeats = repeats
        self.unfused = None

    def labels(self) -> list[str]:
        from .trt.timing import shape_labels

        return shape_labels(self.profiles, self.feeds, {n for p in self.profiles for n in p.shape_tensors})

    def _build(self, model: onnx.ModelProto, name: str):
        from .trt.build import build_engine

        return build_engine(self._source(model, name), shapes=self.spec, **self.options)

    def _source(self, model: onnx.ModelProto, name: str) -> Any:
        if model.ByteSize() < (1 << 31) - (64 << 20) and not model_io.external_tensors(model):
            return model
        path = os.path.join(self.tmpdir, f"{name.replace('/', '_')}.onnx")
        onnx.save(model, path, save_as_external_data=True, location=os.path.basename(path) + ".data")
        return path

    def baseline(self) -> tuple[float, list[Any]]:
        """Build the unfused engine; (build seconds, its timings)."""
        from .trt.timing import time_engine

        self.unfused = self._build(self.original, "unfused")
        return self.unfused.build_s, time_engine(self.unfused, self.feeds, repeats=self.repeats)

    def measure(self, model: onnx.ModelProto, name: str) -> tuple[float, list[Any], list[Any]]:
        """Build ``model``'s engine; (build seconds, the unfused engine's timings, its own)."""
        from .trt.timing import time_engines

        built = self._build(model, name)
        unfused, fused = time_engines([self.unfused, built], self.feeds, repeats=self.repeats)
        return built.build_s, unfused, fused


# -- the search -------------------------------------------------------------------------------


@dataclass
class TuneResult:
    model: onnx.ModelProto
    record: TuneRecord
    result: PassResult

    def __iter__(self):  # fused, record = fusion.tune(...)
        return iter((self.model, self.record))


def tune(
    model: Any,
    *,
    target: str = "trt",
    profile: Any = None,
    passes: Sequence[str] | None = None,
    plugins: Sequence[str] = (),
    precision: str = "fp32",
    tactic_sources: Any = None,
    timing_cache: str | None = None,
    workspace_mb: int | None = None,
    margin: float = MARGIN,
    groups: bool = True,
    repeats: int = 10,
    functions: bool = True,
    validate: bool = True,
    base_dir: str | None = None,
    passes_: Sequence[str] | None = None,
) -> TuneResult:
    """Fuse ``model`` (path or ModelProto) for ``target``, keeping only the passes and groups
    that make its TensorRT engine faster at the ``profile``'s min/opt/max shapes (see the
    module doc).  ``passes``: the passes to consider (default: all, whatever the target's
    defaults).  Returns the fused model, the record, and the PassResult (``.tuning`` set)."""
    t0 = time.perf_counter()
    if target not in TUNE_TARGETS:
        raise FusionError(f"tuning builds TensorRT engines: target must be one of {', '.join(TUNE_TARGETS)}, not {target!r}")
    if profile is None:
        raise FusionError("tuning needs the shapes to time at: an optimization profile (--profile batch=1,8,32 seq=...)")
    proto, base_dir = _load(model, base_dir)
    names = _renamed(passes, passes_, "passes_")
    rules = driver.rules_for(names)
    # Unnamed, a pass whose kernels have not run on a GPU yet is not tried: timing shows speed, not
    # that it computes the right thing.
    untried = {} if names is not None else {
        r.pass_name: off_reason(target, r.pass_name) for r in rules if (target, r.pass_name) in UNVERIFIED
    }
    rules = [r for r in rules if r.pass_name not in untried]
    bench = EngineBench(proto, profiles=profile, plugins=plugins, precision=precision, tactic_sources=tactic_sources,
                        timing_cache=timing_cache, workspace_mb=workspace_mb, repeats=repeats)  # fmt: skip
    from .trt.build import trt_version

    rec = TuneRecord(target, precision, margin, trt_version=trt_version())
    labels = bench.labels()

    # 1. what would fuse, per unit
    probe = _rules(rules, {r.pass_name: ALL for r in rules})
    driver.run(proto, probe, target, base_dir=base_dir, dry_run=True)
    counts: dict[str, Counter[str]] = {}
    for r in probe:
        counts.setdefault(r.pass_name, Counter()).update(r.fused)
    order = list(dict.fromkeys(r.pass_name for r in rules))
    why: dict[str, str] = {}
    for p, reason in untried.items():
        rec.measurements.append(Measurement(p, [p], decision="skipped", reason=f"not tried: off by default for target "
                                            f"{target} ({reason}); name the pass to tune it"))  # fmt: skip
    for p in order:
        if not sum(counts[p].values()):
            rec.measurements.append(Measurement(p, [p], decision="skipped", reason="nothing to fuse"))

    def fuse(config: Mapping[str, set[str] | None], reasons=None, final: bool = False) -> PassResult:
        return driver.run(proto, _rules(rules, config, reasons), target, base_dir=base_dir, functions=functions,
                          validate=validate and final)  # fmt: skip

    def measure(name: str, config: Mapping[str, set[str] | None]) -> Measurement:
        units = [unit_name(p, None) if g is ALL else "+".join(unit_name(p, x) for x in sorted(g)) for p, g in config.items()]
        m = Measurement(name, units, shapes=labels)
        result = fuse(config)
        m.fused_nodes = len(result.fusions)
        try:
            m.build_s, base, cand = bench.measure(result.model, name)
        except FusionError as e:
            m.decision, m.reason = "failed", f"{e}"
            log.warning("tune: %s: %s", name, e)
        else:
            m.unfused_ms = [t.median_ms for t in base]
            m.ms, m.p10_ms, m.p90_ms = [t.median_ms for t in cand], [t.p10_ms for t in cand], [t.p90_ms for t in cand]
        rec.measurements.append(m)
        log.info("tune: %s: %s", name, " ".join(f"{s:.3f}x" for s in m.speedups))
        return m

    # 2. baseline
    base = Measurement("unfused", [], shapes=labels, decision="baseline", reason="TensorRT on the original model")
    base.build_s, timings = bench.baseline()
    base.ms = base.unfused_ms = [t.median_ms for t in timings]
    base.p10_ms, base.p90_ms = [t.p10_ms for t in timings], [t.p90_ms for t in timings]
    rec.measurements.append(base)

    # 3. each pass alone; 4. the groups of a pass that does not win
    kept: list[tuple[Measurement, dict[str, set[str] | None]]] = []
    for p in order:
        if not sum(counts[p].values()):
            continue
        m = measure(p, {p: ALL})
        if m.decision != "failed":
            _decide(m, margin)
        why[p] = f"{p} alone measured {_speedups_text(m)}" if m.ms else m.reason
        if m.decision == "kept":
            kept.append((m, {p: ALL}))
            continue
        present = [g for g, n in sorted(counts[p].items()) if n]
        if groups and len(present) > 1:
            for g in present:
                name = unit_name(p, g)
                mg = measure(name, {p: {g}})
                if mg.decision != "failed":
                    _decide(mg, margin)
                why[name] = f"{name} alone measured {_speedups_text(mg)}" if mg.ms else mg.reason
                if mg.decision == "kept":
                    kept.append((mg, {p: {g}}))

    # 5. together
    final_config: dict[str, set[str] | None] = {}
    if len(kept) == 1:
        kept[0][0].decision, final_config = "final", kept[0][1]
    elif kept:
        combined: dict[str, set[str] | None] = {}
        for _, c in kept:
            for p, g in c.items():
                combined[p] = ALL if g is ALL or combined.get(p, set()) is ALL else (combined.get(p) or set()) | g
        mc = measure("+".join(m.name for m, _ in kept), combined)
        best = max(kept, key=lambda k: k[0].score)
        if mc.decision != "failed" and _wins(mc, margin) and mc.score >= best[0].score:
            mc.decision, mc.reason, final_config = "final", f"together faster than each alone ({mc.score:.3f}x)", combined
        else:
            if mc.decision != "failed":
                mc.decision = "not chosen"
                mc.reason = f"together {mc.score:.3f}x: not faster than {best[0].name} alone ({best[0].score:.3f}x)"
            best[0].decision, final_config = "final", best[1]
            for m, _ in kept:
                if m is not best[0]:
                    why[m.name] = f"{m.name} alone won, but {mc.reason or 'failed together'}"
    rec.kept = [m.units[0] if len(m.units) == 1 else "+".join(m.units) for m, c in kept if _within(c, final_config)]

    result = fuse(final_config, why, final=True)
    rec.seconds = time.perf_counter() - t0
    result.tuning = rec
    if not final_config:
        result.warnings.append("tuning kept nothing: no fusion made the engine faster; the model is left as it was")
    log.info("%s", rec.text())
    return TuneResult(result.model, rec, result)


def _within(unit: Mapping[str, set[str] | None], config: Mapping[str, set[str] | None]) -> bool:
    for p, g in unit.items():
        if p not in config:
            return False
        if config[p] is not ALL and (g is ALL or not g <= config[p]):
            return False
    return True


def _wins(m: Measurement, margin: float) -> bool:
    s = [x for x in m.speedups if math.isfinite(x)]
    return bool(s) and m.score >= 1 + margin and min(s) >= 1 - margin


def _decide(m: Measurement, margin: float) -> None:
    if _wins(m, margin):
        m.decision, m.reason = "kept", f"faster (geomean {m.score:.3f}x >= {1 + margin:.2f}x)"
    elif m.score < 1 - margin or min(m.speedups, default=1.0) < 1 - margin:
        m.decision, m.reason = "dropped", f"slower (geomean {m.score:.3f}x, worst shape {min(m.speedups):.3f}x)"
    else:
        m.decision, m.reason = "dropped", f"within the noise margin ({m.score:.3f}x, need >= {1 + margin:.2f}x)"


def _speedups_text(m: Measurement) -> str:
    return ", ".join(f"{s:.3f}x at {lab}" for lab, s in zip(m.shapes, m.speedups)) or "-"


def _load(model: Any, base_dir: str | None) -> tuple[onnx.ModelProto, str | None]:
    if isinstance(model, onnx.ModelProto):
        return model, base_dir
    loaded = model_io.load(model)
    if model_io.external_tensors(loaded.proto):
        onnx.load_external_data_for_model(loaded.proto, loaded.base_dir)
    return loaded.proto, loaded.base_dir


# -- command line (fuse --tune) ---------------------------------------------------------------


def add_cli_args(p) -> None:
    """fuse's tuning group: the profile and engine options are the shared ones (fusion/options.py)."""
    from . import options

    g = p.add_argument_group("tuning (fuse --tune: keep only the fusions that make the TensorRT engine faster)")
    g.add_argument("--tune", action="store_true", help="build and time engines; needs --target trt|plugin and --profile")
    options.add_profile_args(g, help_suffix=" (with --tune: the shapes to time the engines at)")
    options.add_engine_args(g)
    g.add_argument("--tune-margin", type=float, default=MARGIN, help=f"noise margin (default {MARGIN})")
    g.add_argument("--tune-repeats", type=int, default=10, help="timing repetitions per shape (default 10)")


def run_cli(args) -> int:
    """``fuse --tune``: tune, write the model, print the report (text or JSON)."""
    from . import options
    from .passes import text as report

    if not args.output:
        raise FusionError("fuse --tune needs -o OUTPUT")
    if not args.profile:
        raise FusionError("fuse --tune needs --profile (the shapes to time the engines at)")
    engine = options.engine_options(args)
    pass_names = [s.strip() for s in args.passes.split(",") if s.strip()] if args.passes else None
    res = tune(args.model, target=args.target, profile=options.profiles(args), passes=pass_names,
               margin=args.tune_margin, repeats=args.tune_repeats, functions=not args.no_functions,
               validate=not args.no_validate, **engine)  # fmt: skip
    loaded_dir = os.path.dirname(os.path.abspath(args.model))
    model_io.save(res.model, args.output, source_dir=loaded_dir)
    print(report.to_json(res.result) if args.json else report.text(res.result))
    if getattr(args, "report", None):
        from .report.html import write_report  # noqa: PLC0415

        write_report(args.model, args.output, res.result, args.report)
    return 0


__all__ = ["EngineBench", "Measurement", "TuneRecord", "TuneResult", "tune", "group_of"]
