"""From ONNX to a verified TensorRT engine in one call: ``python -m fusion deploy`` / ``fusion.deploy``.

    res = fusion.deploy("bert.onnx", "out/", profile={"batch": (1, 8, 32), "seq": (1, 128, 512)},
                        target="trt", tactic_sources=["cublas", "cublas_lt"])
    print(res.text()); assert res.passed

Steps: fuse (or tune: keep only the fusions that make the engine faster), write the fused
model, build its engine, verify the engine against the original on onnxruntime at the min, opt
and max of every profile, build the original's engine alike and time both, write one HTML
report (fusions, accuracy, latency) and a JSON summary.

Everything that can be checked without building (TensorRT present, tactic sources and their
libraries, the profile against the model's inputs, plugin files, the output directory) is
checked first.  Outputs are written into a temporary directory beside OUTDIR and moved into
place at the end: an error leaves nothing behind.  A verification that runs and fails still
writes everything (the report says what failed); ``passed`` is False.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from .ir import model_io
from .errors import EngineBuildError, FusionError, OutputError

log = logging.getLogger(__name__)

Progress = Callable[[str], None]


def stderr_progress(message: str) -> None:
    """The CLI's progress: one line per step on stderr (stdout keeps the result)."""
    print(message, file=sys.stderr, flush=True)


@dataclass
class OutputNames:
    """The files deploy writes, by role, as names inside OUTDIR."""

    fused: str
    engine: str
    report: str
    summary: str

    @classmethod
    def for_model(cls, model: Path) -> OutputNames:
        stem = model.name[: -len(".onnx")] if model.name.lower().endswith(".onnx") else model.name
        return cls(f"{stem}.fused.onnx", f"{stem}.fused.engine", f"{stem}.report.html", f"{stem}.deploy.json")

    def all(self) -> list[str]:
        return [self.fused, self.fused + ".data", self.engine, self.report, self.summary]


@dataclass
class DeployResult:
    """What deploy made and measured (paths are the final ones, inside OUTDIR)."""

    outdir: Path
    files: dict[str, Path]  # role (fused, engine, report, summary) -> path
    fusion: Any  # PassResult
    check: Any  # VerifyReport on TensorRT
    engine: Any  # BuiltEngine of the fused model
    latency: Any = None  # LatencyReport (None: not measured)
    seconds: dict[str, float] = field(default_factory=dict)  # per step
    tuning: Any = None  # the tuning record, with tune=True

    @property
    def passed(self) -> bool:
        return bool(self.check.passed)

    def to_dict(self) -> dict[str, Any]:
        return {
            "passed": self.passed,
            "outdir": str(self.outdir),
            "files": {k: str(v) for k, v in self.files.items()},
            "fusions": self.fusion.counts(),
            "near_misses": len(self.fusion.near_misses),
            "engine": self.engine.summary(),
            "verify": self.check.to_dict(),
            "tuning": self.tuning.to_dict() if self.tuning is not None and hasattr(self.tuning, "to_dict") else None,
            "seconds": {k: round(v, 2) for k, v in self.seconds.items()},
        }

    def text(self) -> str:
        counts = ", ".join(f"{n} {rule}" for rule, n in sorted(self.fusion.counts().items())) or "nothing"
        info = self.engine.summary()
        lines = [
            f"fused: {counts}",
            f"engine: TensorRT {info['trt_version']}, {info['precision']}, {len(info['plugin_layers'])} plugin layers, "
            f"built in {info['build_s']:.1f}s",
            self.check.table(),  # (with the latency table)
        ]
        lines += [f"{role}: {path}" for role, path in self.files.items()]
        lines.append(f"{'PASSED' if self.passed else 'FAILED'}: deploy took {sum(self.seconds.values()):.1f}s")
        return "\n".join(lines)


def deploy(
    model: str | os.PathLike,
    outdir: str | os.PathLike,
    *,
    profile: Any = None,
    target: str = "plugin",
    passes: Sequence[str] | None = None,
    plugins: Sequence[str | os.PathLike] = (),
    precision: str = "fp32",
    tactic_sources: Sequence[str] | None = None,
    timing_cache: str | os.PathLike | None = None,
    workspace_mb: int | None = None,
    tune: bool = False,
    latency: bool = True,
    atol: float | Mapping[str, float] | None = None,
    rtol: float | Mapping[str, float] | None = None,
    seed: int = 0,
    functions: bool = True,
    validate: bool = True,
    freeze_initializers: bool = False,
    progress: Progress | None = None,
) -> DeployResult:
    """Fuse ``model`` (a path), build, verify and time its engine; write everything to ``outdir``.

    ``profile``: the optimization profile(s), as :func:`fusion.build_engine` takes them (a mapping
    of input or dim names to ranges, or a list of them; required for dynamic inputs).
    ``tactic_sources``: None (TensorRT's default), [] (none) or names such as
    ["cublas", "cublas_lt"].  ``passes``: None runs the target's default passes, which for
    target plugin is none (fusion/passes/defaults.py): the model is then deployed unfused, and
    a progress line says so.  ``tune``: fuse with :func:`fusion.tune` (keep what is faster).
    ``latency``: also build the original's engine and time both.  ``progress``: called with
    one line per step (default: logged at INFO).  Raises FusionError on bad input, writing
    nothing; returns a :class:`DeployResult` (``passed`` False when verification failed).
    """
    say = _Clock(progress)
    src = Path(model)
    out = Path(outdir)
    loaded = model_io.load(src)  # (graph only)
    names = OutputNames.for_model(src)
    engine_opts = _preflight(loaded, src, out, names, profile, plugins, precision, tactic_sources, timing_cache, tune)
    engine_opts["workspace_mb"] = workspace_mb
    tmp = _temp_dir(out)
    cache = os.fspath(timing_cache) if timing_cache else os.path.join(tmp, ".timing.cache")
    engine_opts["timing_cache"] = cache
    try:
        fused_path = os.path.join(tmp, names.fused)
        tuning = None
        if tune:
            say(f"tuning: building and timing candidate engines for target {target} (minutes per build)", "tune")
            fusion_result, tuning = _tune(src, loaded, fused_path, target, passes, profile, engine_opts, functions, validate)
        else:
            say(f"fusing {src.name} for target {target}", "fuse")
            from .api import fuse_file

            fusion_result = fuse_file(src, fused_path, passes, target=target, functions=functions, validate=validate,
                                      assume_constant_initializers=freeze_initializers)  # fmt: skip
            left_out = any(m.would_fuse for m in fusion_result.near_misses)  # only the target's defaults stopped it
            if passes is None and not fusion_result.counts() and left_out:  # (the report's near-misses say why)
                say(f"nothing is fused by default on target {target} for this model (its plugins for what it "
                    "has made measured engines slower): name --passes or use --tune; deploying the model unfused")  # fmt: skip
        counts = ", ".join(f"{n} {r}" for r, n in sorted(fusion_result.counts().items())) or "nothing"
        say(f"fused {counts}; building the fused engine (this can take minutes)", "build")
        built = build(fused_path, profile, os.path.join(tmp, names.engine), engine_opts)
        say(f"built the fused engine in {built.build_s:.1f}s: {len(built.plugin_layers)} plugin layers; "
            "verifying it against onnxruntime at each profile's min, opt and max", "verify")  # fmt: skip
        check = verify_engine(src, fused_path, built, engine_opts, atol=atol, rtol=rtol, seed=seed)
        say(f"verification {'PASSED' if check.passed else 'FAILED'}, max abs error {check.max_abs:.3g}")
        lat = None
        if latency:
            say("building the unfused engine and timing both (this can take minutes)", "latency")
            lat = measure_latency(src, built, _feeds(src, built, seed), engine_opts)
            check.latency = lat  # the report's and the summary's latency table
            say("timed: " + _latency_line(lat))
        if not timing_cache:
            _remove(cache)
        files = {role: out / getattr(names, role) for role in ("fused", "engine", "report", "summary")}
        result = DeployResult(out, files, fusion_result, check, built, lat, dict(say.steps), tuning)
        say("writing the report", "report")
        from .report.html import write_report

        write_report(src, fused_path, fusion_result, os.path.join(tmp, names.report), check=check,
                     sections=[engine_section(built)] + ([] if latency else [latency_section(None)]),
                     fused_shown_as=files["fused"])  # fmt: skip
        built.path = os.fspath(files["engine"])  # where it will be
        result.seconds = say.total()
        with open(os.path.join(tmp, names.summary), "w", encoding="utf-8") as f:
            json.dump(result.to_dict(), f, indent=2, default=str)
        _commit(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    say(f"wrote {out}: {'PASSED' if result.passed else 'FAILED'}")
    return result


# -- steps (module functions: the tests replace the GPU ones) --------------------------------


def build(fused_path: str, profile: Any, engine_path: str, opts: Mapping[str, Any]):
    from .trt.build import build_engine

    return build_engine(fused_path, shapes=profile, out=engine_path, **_build_opts(opts))


def verify_engine(original: Path, fused_path: str, built: Any, opts: Mapping[str, Any], **kw: Any):
    """The fused engine against the original on onnxruntime, at the profiles' min/opt/max."""
    from .compare.verify import verify

    return verify(original, fused_path, backend="trt", engine=built, latency=False, **_build_opts(opts), **kw)


def measure_latency(original: Path, built: Any, feeds: Sequence[Mapping[str, np.ndarray]], opts: Mapping[str, Any]):
    """Build the original's engine like the fused one and time both at ``feeds`` (what
    ``verify --trt`` does: :func:`fusion.trt.timing.verify_latency`; a failure is reported in
    the result, not raised)."""
    from .trt.timing import verify_latency

    return verify_latency(os.fspath(original), built, feeds, _build_opts(opts))


def _build_opts(opts: Mapping[str, Any]) -> dict[str, Any]:
    keep = ("plugins", "precision", "tactic_sources", "timing_cache", "workspace_mb")
    return {k: opts[k] for k in keep if k in opts and opts[k] is not None}


def _feeds(src: Path, built: Any, seed: int) -> list[dict[str, np.ndarray]]:
    from .trt.run import corner_feeds
    from .compare.verify import _Model

    return corner_feeds(_Model(src), built.profiles, seed)


def _tune(src, loaded, fused_path, target, passes, profile, opts, functions, validate):
    from .tuning import tune

    res = tune(os.fspath(src), target=target, profile=profile, passes=passes, functions=functions, validate=validate,
               **_build_opts(opts))  # fmt: skip
    model_io.save(res.model, fused_path, source_dir=loaded.base_dir)
    return res.result, res.record


# -- checks before anything is written ---------------------------------------------------


def _preflight(loaded, src: Path, out: Path, names: OutputNames, profile, plugins, precision, tactic_sources,
               timing_cache, tune: bool) -> dict[str, Any]:  # fmt: skip
    from .trt.build import PRECISIONS, check_tactic_libraries, import_trt
    from .trt.profiles import derive_profiles, model_inputs

    trt = import_trt()
    if precision not in PRECISIONS:
        raise EngineBuildError(f"precision must be one of {', '.join(PRECISIONS)}, not {precision!r}")
    sources = None if tactic_sources is None else [str(s).lower() for s in tactic_sources]
    check_tactic_libraries(trt, sources)
    for p in plugins:
        if not os.path.isfile(p):
            raise EngineBuildError(f"plugin library {p} does not exist")
    if tune and profile is None:
        raise FusionError("--tune needs --profile (the shapes to time the engines at)")
    derive_profiles(model_inputs(loaded.proto), profile)  # names and ranges against the model's inputs
    if timing_cache and os.path.isdir(timing_cache):
        raise OutputError(f"--timing-cache {timing_cache}: is a directory")
    _check_outdir(out, src, loaded, names)
    return {"plugins": [os.fspath(p) for p in plugins], "precision": precision, "tactic_sources": sources}


def _check_outdir(out: Path, src: Path, loaded, names: OutputNames) -> None:
    if out.exists() and not out.is_dir():
        raise OutputError(f"-o {out}: exists and is not a directory")
    parent = out.resolve().parent
    if not parent.is_dir():
        raise OutputError(f"-o {out}: {parent} does not exist")
    if not os.access(parent, os.W_OK | os.X_OK) or (out.is_dir() and not os.access(out, os.W_OK | os.X_OK)):
        raise OutputError(f"-o {out}: not writable")
    if not out.is_dir():
        return
    model_dir = src.resolve().parent
    ours = {(model_dir / rel).resolve() for rel in _external_files(loaded)} | {src.resolve()}
    for name in names.all():
        target = (out / name).resolve()
        if target in ours:
            raise OutputError(f"-o {out}: {name} would overwrite the model's own file {target}: choose another OUTDIR")
        if out.resolve() == model_dir and target.exists():
            raise OutputError(f"-o {out} is the model's folder and {name} exists there: choose another OUTDIR")


def _external_files(loaded) -> set[str]:
    return {e.value for t in model_io.external_tensors(loaded.proto) for e in t.external_data if e.key == "location"}


# -- writing -----------------------------------------------------------------------------


def _temp_dir(out: Path) -> str:
    parent = out.resolve().parent
    try:
        tmp = tempfile.mkdtemp(prefix=f".{out.name or 'deploy'}.partial-", dir=parent)
    except OSError as e:
        raise OutputError(f"-o {out}: cannot write in {parent}: {e.strerror or e}") from None
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(tmp, 0o777 & ~umask)  # (mkdtemp's 0700 would stay on OUTDIR after the rename)
    return tmp


def _commit(tmp: str, out: Path) -> None:
    """The finished files into OUTDIR: a rename of the whole directory where OUTDIR is new, else
    one rename per file (each replaces an older file of the same name)."""
    if not out.exists():
        os.replace(tmp, out)
        return
    for name in sorted(os.listdir(tmp)):
        os.replace(os.path.join(tmp, name), out / name)
    os.rmdir(tmp)


def _remove(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


class _Clock:
    """Progress lines with the elapsed seconds; remembers how long each step took."""

    def __init__(self, progress: Progress | None):
        self.progress = progress or (lambda m: log.info("%s", m))
        self.t0 = self.last = time.perf_counter()
        self.steps: dict[str, float] = {}
        self.step = "check"

    def __call__(self, message: str, step: str | None = None) -> None:
        now = time.perf_counter()
        if step is not None:  # a new step starts: the last one's time is booked
            self.steps[self.step] = self.steps.get(self.step, 0.0) + now - self.last
            self.step, self.last = step, now
        self.progress(f"[{now - self.t0:6.1f}s] {message}")

    def total(self) -> dict[str, float]:
        self.steps[self.step] = self.steps.get(self.step, 0.0) + time.perf_counter() - self.last
        self.last = time.perf_counter()
        return dict(self.steps)


# -- latency ------------------------------------------------------------------------------


def _latency_line(lat: Any) -> str:
    if not lat.rows:
        return f"not measured ({lat.error})"
    return ", ".join(f"{r.label} {r.speedup:.2f}x" for r in lat.rows) + " (unfused/fused)"


# -- report sections ---------------------------------------------------------------------


def engine_section(built: Any) -> str:
    from html import escape as e

    info = built.summary()
    rows = [
        ("TensorRT", info["trt_version"]),
        ("precision", info["precision"]),
        ("profiles", " | ".join("; ".join(f"{n} {r[0]}..{r[2]} (opt {r[1]})" for n, r in p.items()) for p in info["profiles"])
         or "static shapes"),
        ("layers", f"{info['network_layers']} in the network, {len(info['plugin_layers'])} plugin layers"),
        ("plugin layers", ", ".join(info["plugin_layers"]) or "none"),
        ("build", f"{info['build_s']:.1f} s, {info['engine_bytes'] / 1e6:.1f} MB"),
    ]
    table = "".join(f"<tr><th>{e(k)}</th><td>{e(str(v))}</td></tr>" for k, v in rows)
    return f'<section id="engine"><h2>Engine</h2><table class="kv">{table}</table></section>'


def latency_section(lat: Any) -> str:
    if lat is None:
        return '<section id="latency"><h2>Engine latency</h2><p class="muted">Not measured (--no-latency).</p></section>'
    return lat.html()
