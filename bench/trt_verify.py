"""Fixture models on real TensorRT: fuse, build engines with dynamic profiles, verify, time.

    python bench/trt_verify.py --out DIR [--match bert_legacy_op13] [--budget-s 300]
                               [--no-tactic-sources] [--timing-cache FILE] [--targets trt,onnx]

For each fixture model (tests/fixtures/manifest.json; most telling first: opset 13 of every
family in fp32 and fp16, then 17, dynamo 18, 11, 14), with one optimization profile from
the manifest's dim ranges (min, export size as opt, max):

* target ``trt``: fuse LayerNorm with the ``trt`` target (TensorRT's shipped LayerNorm
  plugin), build the fused model's engine and the unfused original's (TensorRT's own handling
  of the chain: the baseline), verify each against the original on onnxruntime at the min,
  opt and max shapes, count plugin layers (parsed network; engine inspector), and time both
  engines at the opt shape (device-resident buffers, CUDA events).
* target ``onnx``: fuse to standard LayerNormalization / RMSNormalization, verify on
  onnxruntime; on TensorRT only where it has a LayerNormalization importer (>= 8.6).

The FC fusion's ``trt`` target (CustomFCPluginDynamic) is not run: that plugin calls cuBLASLt.
Rows go to DIR/trt_verify.json after every model, so a run cut short keeps what it did.
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import os
import re
import sys
import time
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import onnx

import fusion
from fusion.compare.verify import verify
from tests.fixtures.catalog import fixture_path, load_manifest

LOG = logging.getLogger("trt_verify")


def use_source_tree_patterns() -> None:
    """In a checkout that is not installed (the bundle's Python 3.10 on the GPU machine), map
    ``fusion.patterns`` to patterns/ as pyproject's package-dir does for an install."""
    import importlib.util

    if importlib.util.find_spec("fusion.patterns") is not None:
        return
    init = REPO / "patterns" / "__init__.py"
    spec = importlib.util.spec_from_file_location("fusion.patterns", init, submodule_search_locations=[str(init.parent)])
    mod = importlib.util.module_from_spec(spec)
    sys.modules["fusion.patterns"] = mod
    spec.loader.exec_module(mod)
    fusion.patterns = mod


use_source_tree_patterns()
OPSET_ORDER = {"legacy_op13": 0, "legacy_op17": 1, "dynamo_op18": 2, "legacy_op11": 3, "legacy_op14": 4}
TRT_PLUGIN_OPS = {"LayerNorm"}
ONNX_NORM_OPS = {"LayerNormalization", "RMSNormalization"}
# One model also gets two profiles (batch 1 / batch 2..4), to prove several profiles work.
TWO_PROFILE_MODEL = "bert_legacy_op13_fp32.onnx"


def ordered_records(match: str | None = None) -> list[dict[str, Any]]:
    recs = load_manifest()
    if match:
        recs = [r for r in recs if re.search(match, r["file"])]

    def key(r: dict[str, Any]) -> tuple:
        tag = f"{r['exporter']}_op{r['opset']}"
        return (OPSET_ORDER.get(tag, 9), r["dtype"] != "fp32", r["family"])

    return sorted(recs, key=key)


def model_path(rec: dict[str, Any]) -> Path:
    """A record's model: ``path`` for a model made on the machine (bench/trt_e2e_models.py),
    else the fixture."""
    return Path(rec["path"]) if rec.get("path") else fixture_path(rec)


def profile_spec(rec: dict[str, Any]) -> list[dict[str, tuple[int, int, int]]]:
    """min = the low end of each dim's range, opt = the export size, max = the high end."""
    dims: dict[str, tuple[int, int, int]] = {}
    for inp in rec["inputs"]:
        for d, (lo, hi) in inp.get("ranges", {}).items():
            opt = int(inp.get("export_dims", {}).get(d, hi))
            dims[d] = (int(lo), min(max(opt, int(lo)), int(hi)), int(hi))
    if rec["file"] == TWO_PROFILE_MODEL and "batch" in dims:
        lo, opt, hi = dims["batch"]
        return [{**dims, "batch": (1, 1, 1)}, {**dims, "batch": (2, max(2, opt), hi)}]
    return [dims] if dims else []


def count_ops(model: onnx.ModelProto, ops: set[str]) -> int:
    return sum(n.op_type in ops for n in model.graph.node)


def trt_at_least(version: str | None, want: tuple[int, int]) -> bool:
    if not version:
        return False
    parts = [int(p) for p in re.findall(r"\d+", version)[:2]]
    return tuple(parts) >= want


def _err(e: BaseException) -> str:
    lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
    return (f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__)[:400]


def build_and_check(model: Any, original: Path, profiles: list, precision: str, opts: dict, what: str,
                    references: str | None = None, keep: list | None = None, inputs: list | None = None) -> dict:
    """Build ``model``'s engine, verify it against ``original`` on onnxruntime, time it.
    ``keep``: a list the BuiltEngine is appended to (to serialize or reload it); ``inputs``: the
    feeds to verify on (default: random ones at the profile corners)."""
    from fusion.trt.build import build_engine
    from fusion.trt.run import corner_feeds, time_engine
    from fusion.compare.verify import _Model

    out: dict[str, Any] = {"built": False}
    t0 = time.perf_counter()
    try:
        built = build_engine(model, shapes=profiles, precision=precision, **opts)
    except Exception as e:  # noqa: BLE001 - recorded per row
        out["error"] = _err(e)
        LOG.info("%s: build failed: %s", what, out["error"])
        return out
    out.update(built=True, build_s=round(built.build_s, 2), plugin_layers=len(built.plugin_layers),
               plugin_layer_types=sorted({p.plugin for p in built.plugin_layers}),
               engine_plugin_layers=built.engine_plugin_layers, network_layers=built.network_layers,
               plugin_layer_counts=dict(collections.Counter(p.plugin for p in built.plugin_layers)))  # fmt: skip
    if keep is not None:
        keep.append(built)
    out["build_wall_s"] = round(time.perf_counter() - t0, 2)
    t0 = time.perf_counter()
    ref = Path(references or "") / (Path(original).stem + ".npz")
    try:
        rep = verify(str(original), model, backend="trt", engine=built, latency=False, inputs=inputs)  # timed below
        out.update(max_abs_err=rep.max_abs, passed=rep.passed, points=len(rep.shapes), skipped=rep.skipped,
                   worst=_worst(rep), failed=_failed(rep))  # fmt: skip
    except Exception as e:  # noqa: BLE001
        if references and ref.is_file() and "runs on none of the input shapes" in str(e):
            out.update(check_against_reference(model, built, ref))
        else:
            out["verify_error"] = _err(e)
            LOG.info("%s: verify failed: %s\n%s", what, out["verify_error"], traceback.format_exc(limit=4))
    out["verify_s"] = round(time.perf_counter() - t0, 2)
    t0 = time.perf_counter()
    try:
        feeds = corner_feeds(_Model(str(original)), built.profiles, 0)
        opt_feed = feeds[min(1, len(feeds) - 1)] if len(built.profiles) <= 1 else feeds[1]
        t = time_engine(built, opt_feed)
        out.update(ms=t["ms"], ms_min=t["ms_min"], timing=t["method"], opt_shapes={k: list(v.shape) for k, v in opt_feed.items()})
    except Exception as e:  # noqa: BLE001
        out["timing_error"] = _err(e)
        LOG.info("%s: timing failed: %s", what, out["timing_error"])
    out["timing_s"] = round(time.perf_counter() - t0, 2)
    LOG.info("%s: build %.1fs, verify %.1fs, timing %.1fs", what, out["build_wall_s"], out["verify_s"], out["timing_s"])
    return out


def keep_first_token(feed: dict[str, Any]) -> dict[str, Any]:
    """An attention mask as real inputs have it: every row attends to its first token (CLS / BOS).
    A row that masks every token has no defined attention: onnxruntime averages the values,
    TensorRT 8.5's fp32 engines give NaN (the unfused engine too: bench/results/trt_e2e_fixtures.json)."""
    mask = feed.get("attention_mask")
    if mask is None or mask.ndim != 2 or mask.shape[1] == 0:
        return feed
    mask = mask.copy()
    mask[:, 0] = 1
    return dict(feed, attention_mask=mask)


def corner_inputs(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """The feeds the rows verify on: random inputs at the profile corners, masks kept real."""
    return [keep_first_token(f) for f in _corner_feeds(rec)]


def _corner_feeds(rec: dict[str, Any]) -> list[dict[str, Any]]:
    from fusion.trt.profiles import derive_profiles, model_inputs
    from fusion.trt.run import corner_feeds
    from fusion.compare.verify import _Model

    orig = _Model(str(model_path(rec)))
    return corner_feeds(orig, derive_profiles(model_inputs(orig.proto), profile_spec(rec)), 0)


def make_reference(rec: dict[str, Any], out_dir: Path) -> Path:
    """The profile-corner inputs and onnxruntime's outputs of the original, for a machine whose
    onnxruntime cannot run it (the TensorRT bundle's 1.23 and GPT-2 fp16, say)."""
    import numpy as np
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(str(model_path(rec)), so, providers=["CPUExecutionProvider"])
    arrays: dict[str, Any] = {}
    for k, feed in enumerate(corner_inputs(rec)):
        outs = sess.run(None, feed)
        arrays.update({f"in{k}:{n}": a for n, a in feed.items()})
        arrays.update({f"out{k}:{o.name}": a for o, a in zip(sess.get_outputs(), outs)})
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / (Path(rec["file"]).stem + ".npz")
    np.savez(path, __ort_version__=np.array(ort.__version__), **arrays)
    return path


def check_against_reference(model: Any, built, ref: Path) -> dict[str, Any]:
    """Compare the engine with stored onnxruntime outputs, as verify would (same tolerances)."""
    import numpy as np

    from fusion.trt.run import FP16_TOLERANCE, ProfiledTrtRunner
    from fusion.compare.verify import TOLERANCES, _Model, abs_diff

    data = np.load(ref)
    ks = sorted({int(k.split(":")[0][2:]) for k in data.files if k.startswith("in")})
    fused = _Model(model)
    types = {o.name: o.type.tensor_type.elem_type for o in fused.outputs}
    worst, passed, failed = 0.0, True, []
    with ProfiledTrtRunner(built, fused.outputs, name="fused-trt") as runner:
        for k in ks:
            feed = {key.split(":", 1)[1]: data[key] for key in data.files if key.startswith(f"in{k}:")}
            got = runner.infer(feed)
            for key in (x for x in data.files if x.startswith(f"out{k}:")):
                name = key.split(":", 1)[1]
                a, b = data[key].astype(np.float64), np.asarray(got[name]).astype(np.float64)
                atol, rtol = TOLERANCES.get(types[name], (0.0, 0.0))
                if built.precision == "fp16" and types[name] == onnx.TensorProto.FLOAT:
                    atol, rtol = FP16_TOLERANCE
                diff = abs_diff(a, b)
                ok = (diff <= atol) | (diff <= rtol * np.abs(a))
                worst, passed = max(worst, float(diff.max(initial=0.0))), passed and bool(ok.all())
                if not ok.all():
                    failed.append({"point": k, "inputs": {n: list(v.shape) for n, v in feed.items()}, "output": name,
                                   "mismatches": int((~ok).sum()), "nan_reference": int(np.isnan(a).sum()),
                                   "nan_engine": int(np.isnan(b).sum()), "max_abs": float(diff.max())})  # fmt: skip
    return {"max_abs_err": worst, "passed": passed, "points": len(ks), "failed": failed[:8],
            "reference": f"stored onnxruntime {data['__ort_version__']} outputs (this onnxruntime cannot run the model)"}


def _failed(rep, most: int = 8) -> list[dict[str, Any]]:
    """The checks that failed: where (shape point, its input shapes), which output, how far."""
    return [{"point": c.shape_point, "inputs": rep.shapes[c.shape_point] if c.shape_point < len(rep.shapes) else None,
             "check": c.check, "output": c.output, "max_abs": c.max_abs, "max_rel": c.max_rel, "atol": c.atol,
             "rtol": c.rtol, "error": c.error or None} for c in rep.checks if not c.passed][:most]  # fmt: skip


def _worst(rep) -> dict[str, Any] | None:
    if not rep.checks:
        return None
    c = max(rep.checks, key=lambda c: c.max_abs)
    return {"output": c.output, "shape": c.shape, "max_abs": c.max_abs, "max_rel": c.max_rel, "atol": c.atol,
            "rtol": c.rtol}  # fmt: skip


def run_model(rec: dict[str, Any], targets: list[str], opts: dict, trt_ver: str | None,
              refs: str | None = None, as_trt: str | None = None) -> list[dict[str, Any]]:
    path = fixture_path(rec)
    profiles = profile_spec(rec)
    precision = "fp16" if rec["dtype"] == "fp16" else "fp32"
    base = {"model": rec["file"], "family": rec["family"], "exporter": rec["exporter"], "opset": rec["opset"],
            "dtype": rec["dtype"], "trt_version": trt_ver, "precision": precision,
            "profiles": [{k: list(v) for k, v in p.items()} for p in profiles]}  # fmt: skip
    rows = []
    unfused = None
    if "trt" in targets:
        row = dict(base, target="trt")
        t0 = time.perf_counter()
        try:
            fused = fusion.fuse(str(path), passes=["layernorm"], target="trt")
        except Exception as e:  # noqa: BLE001
            row.update(built=False, error=f"fuse: {_err(e)}")
            rows.append(row)
            fused = None
        if fused is not None:
            row["fused_nodes"] = count_ops(fused, TRT_PLUGIN_OPS)
            try:
                ort = verify(str(path), fused)
                row.update(ort_max_abs_err=ort.max_abs, ort_passed=ort.passed)
            except Exception as e:  # noqa: BLE001
                row["ort_error"] = _err(e)
            if trt_ver is None:
                row.update(built=None, note="TensorRT not installed here: onnxruntime check only")
            else:
                unfused = build_and_check(str(path), path, profiles, precision, opts, f"{rec['file']} unfused", refs)
                if row["fused_nodes"]:
                    fres = build_and_check(fused, path, profiles, precision, opts, f"{rec['file']} trt", refs)
                else:  # nothing fused: the fused model is the original
                    fres = dict(unfused)
                    row["note"] = _nothing_fused_note(rec, path)
                row.update({k: v for k, v in fres.items() if k not in ("ms", "ms_min")})
                row.update(fused_ms=fres.get("ms"), unfused_ms=unfused.get("ms"),
                           unfused_built=unfused.get("built"), unfused_error=unfused.get("error"),
                           unfused_max_abs_err=unfused.get("max_abs_err"), unfused_passed=unfused.get("passed"),
                           unfused_plugin_layers=unfused.get("plugin_layers"),
                           unfused_seconds={k: unfused.get(k) for k in ("build_s", "build_wall_s", "verify_s", "timing_s")})  # fmt: skip
            row["seconds"] = round(time.perf_counter() - t0, 2)
            rows.append(row)
    if "onnx" in targets:
        rows.append(run_onnx_target(rec, path, profiles, precision, opts, trt_ver or as_trt, dict(base, trt_version=trt_ver or as_trt),
                                    unfused, refs))
    return rows


def _nothing_fused_note(rec: dict[str, Any], path: Path | None = None) -> str:
    if path is not None:  # the fusion's own reason, when there is one
        misses = fusion.inspect(str(path), ["layernorm"], target="trt").near_misses
        if misses:
            return f"nothing fused for target trt: {misses[0].reason}"
    if rec.get("native_layernorm_nodes"):
        return "nothing to fuse: the exporter wrote LayerNormalization nodes (no decomposed chain)"
    if rec.get("expected_rmsnorm_fusions"):
        return "nothing fused for target trt: TensorRT ships no RMSNorm plugin (the chain stays as is)"
    return "nothing to fuse for target trt (no LayerNorm chain)"


def run_onnx_target(rec, path, profiles, precision, opts, trt_ver, base, unfused, refs=None) -> dict[str, Any]:
    from fusion.trt.build import trt_version

    row = dict(base, target="onnx", built=None)
    try:
        fused = fusion.fuse(str(path), passes=["layernorm", "rmsnorm"], target="onnx")
    except Exception as e:  # noqa: BLE001
        row["error"] = f"fuse: {_err(e)}"
        return row
    row["fused_nodes"] = count_ops(fused, ONNX_NORM_OPS) - int(rec.get("native_layernorm_nodes") or 0) - int(
        rec.get("native_rmsnorm_nodes") or 0
    )
    try:
        ort = verify(str(path), fused)
        row.update(ort_max_abs_err=ort.max_abs, ort_passed=ort.passed)
    except Exception as e:  # noqa: BLE001
        row["ort_error"] = _err(e)
    has_ln = count_ops(fused, {"LayerNormalization"}) > 0
    if row["fused_nodes"] <= 0:
        row["note"] = (f"nothing fused for target onnx at opset {rec['opset']} (LayerNormalization needs opset 17, "
                       "RMSNormalization 23, or the exporter already wrote them)")  # fmt: skip
    elif trt_ver is None:
        row["note"] = "TensorRT not installed here: onnxruntime check only"
    elif has_ln and not trt_at_least(trt_ver, (8, 6)):
        row["note"] = f"not built: TensorRT {trt_ver}'s ONNX parser has no LayerNormalization importer (added in 8.6)"
    elif count_ops(fused, {"RMSNormalization"}) and not trt_at_least(trt_ver, (10, 0)):
        row["note"] = f"not built: TensorRT {trt_ver} has no RMSNormalization importer"
    elif trt_version() is None:
        row["note"] = f"would build on TensorRT {trt_ver}; TensorRT is not installed here: onnxruntime check only"
    else:
        res = build_and_check(fused, path, profiles, precision, opts, f"{rec['file']} onnx", refs)
        row.update({k: v for k, v in res.items() if k not in ("ms", "ms_min")})
        row.update(fused_ms=res.get("ms"), unfused_ms=(unfused or {}).get("ms"))
    return row


def merge(files: list[str], out_dir: Path) -> int:
    """One result file from several runs (the GPU machine's trt rows, this machine's onnx rows)."""
    rows: dict[tuple[str, str], dict[str, Any]] = {}
    meta: dict[str, Any] = {"merged_from": []}
    for f in files:
        data = json.loads(Path(f).read_text())
        meta["merged_from"].append({"file": Path(f).name, **data.get("meta", {})})
        for r in data["rows"]:
            rows[(r["model"], r.get("target", ""))] = r
    order = {r["file"]: i for i, r in enumerate(ordered_records())}
    merged = sorted(rows.values(), key=lambda r: (order.get(r["model"], 1 << 30), r.get("target", "")))
    out_dir.mkdir(parents=True, exist_ok=True)
    write_rows(out_dir / "trt_verify.json", merged, meta)
    print(table(merged))
    return 0


def write_rows(out: Path, rows: list[dict[str, Any]], meta: dict[str, Any]) -> None:
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1, default=str))
    os.replace(tmp, out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", help="output directory (required unless --make-references)")
    ap.add_argument("--match", help="regex on fixture file names")
    ap.add_argument("--targets", default="trt,onnx", help="comma-separated: trt, onnx")
    ap.add_argument("--budget-s", type=float, default=300, help="start no new model after this many seconds")
    ap.add_argument("--no-tactic-sources", action="store_true", help="TensorRT 8.5 with stubbed cuBLAS/cuDNN")
    ap.add_argument("--timing-cache", help="TensorRT timing cache shared by every build")
    ap.add_argument("--limit", type=int, help="at most this many models")
    ap.add_argument("--models", help="comma-separated fixture names, run in this order (instead of --match)")
    ap.add_argument("--references", help="stored onnxruntime outputs (--make-references), used where this "
                    "onnxruntime cannot run the original")  # fmt: skip
    ap.add_argument("--make-references", metavar="DIR", help="write the matched models' inputs and onnxruntime "
                    "outputs at the profile corners to DIR, and stop")  # fmt: skip
    ap.add_argument("--as-trt-version", help="without TensorRT here: judge the onnx target's rows for this "
                    "TensorRT version (its parser's importers)")  # fmt: skip
    ap.add_argument("--merge", nargs="+", metavar="JSON", help="merge these result files (later rows win per "
                    "model and target) into OUT/trt_verify.json, and stop")  # fmt: skip
    args = ap.parse_args(argv)
    if args.merge:
        return merge(args.merge, Path(args.out or "."))
    if args.make_references:
        for rec in ordered_records(args.match)[: args.limit]:
            print(make_reference(rec, Path(args.make_references)))
        return 0
    if not args.out:
        ap.error("--out is required")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("fusion").setLevel(logging.ERROR)
    out_dir = Path(args.out)
    out_dir.mkdir(parents=True, exist_ok=True)
    out = out_dir / "trt_verify.json"
    from fusion.trt.build import trt_version

    trt_ver = trt_version()
    opts: dict[str, Any] = {}
    if args.no_tactic_sources:
        opts["tactic_sources"] = []
    if args.timing_cache:
        opts["timing_cache"] = args.timing_cache
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    meta = {"trt_version": trt_ver, "device": device_name(), "commit": os.environ.get("FUSION_COMMIT", "unknown"),
            "tactic_sources": "none" if args.no_tactic_sources else "default", "targets": targets,
            "latency": "median of 5 batches of execute_async_v3 between CUDA events, device-resident buffers, opt shape",
            "tolerances": "fusion.verify defaults by output dtype (fp32 1e-4 abs / 1e-3 rel; fp16 2e-2 / 2e-2)"}  # fmt: skip
    recs = ordered_records(args.match)[: args.limit]
    if args.models:  # exactly these, in this order
        by_file = {r["file"]: r for r in load_manifest()}
        recs = [by_file[m if m.endswith(".onnx") else m + ".onnx"] for m in args.models.split(",")]
    rows: list[dict[str, Any]] = []
    t0 = time.perf_counter()
    for i, rec in enumerate(recs):
        if time.perf_counter() - t0 > args.budget_s:
            rows.extend({"model": r["file"], "target": t, "trt_version": trt_ver, "built": None,
                         "note": "not run: time budget"} for r in recs[i:] for t in targets)  # fmt: skip
            LOG.info("time budget spent: %d models not run", len(recs) - i)
            break
        try:
            new = run_model(rec, targets, opts, trt_ver, args.references, args.as_trt_version)
        except Exception as e:  # noqa: BLE001 - one model must not stop the rest
            LOG.error("%s: %s", rec["file"], traceback.format_exc())
            new = [{"model": rec["file"], "target": "trt", "trt_version": trt_ver, "built": False, "error": _err(e)}]
        rows.extend(new)
        for r in new:
            LOG.info("%s", fmt_row(r))
        write_rows(out, rows, meta)
    meta["seconds"] = round(time.perf_counter() - t0, 1)
    write_rows(out, rows, meta)
    print(table(rows))
    return 0


def device_name() -> str:
    try:
        import subprocess

        r = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True,
                           timeout=20, check=False)  # fmt: skip
        return r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _f(v: Any, spec: str = ".2g") -> str:
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return format(v, spec)
    return str(v)


def fmt_row(r: dict[str, Any]) -> str:
    return (f"{r['model']:<40} {r.get('target', ''):<5} built={_f(r.get('built'))} plugins={_f(r.get('plugin_layers'))} "
            f"err={_f(r.get('max_abs_err'))} passed={_f(r.get('passed'))} fused_ms={_f(r.get('fused_ms'), '.3f')} "
            f"unfused_ms={_f(r.get('unfused_ms'), '.3f')} {r.get('error') or r.get('verify_error') or r.get('note') or ''}")  # fmt: skip


def table(rows: list[dict[str, Any]]) -> str:
    head = (f"| {'model':<40} | target | built | plugin layers | max abs err | passed | fused ms | unfused ms | "
            f"unfused err | note |")  # fmt: skip
    lines = [head, "|" + "|".join("-" * (len(c)) for c in head.split("|")[1:-1]) + "|"]
    for r in rows:
        note = r.get("error") or r.get("verify_error") or r.get("note") or ""
        if not r.get("built") and r.get("unfused_error") and not note:
            note = r["unfused_error"]
        lines.append(
            f"| {r['model']:<40} | {r.get('target', ''):<6} | {_f(r.get('built')):<5} | {_f(r.get('plugin_layers')):<13} "
            f"| {_f(r.get('max_abs_err')):<11} | {_f(r.get('passed')):<6} | {_f(r.get('fused_ms'), '.3f'):<8} "
            f"| {_f(r.get('unfused_ms'), '.3f'):<10} | {_f(r.get('unfused_max_abs_err')):<11} | {note[:90]} |"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
