"""Whole transformers on TensorRT, unfused vs fused: engine build time, latency, accuracy.

Two steps, on the GPU machine:

    python3 bench/trt_engines.py export --model bert --out /tmp/trt_models     # torch + transformers
    py310 bench/trt_engines.py run --model bert --onnx /tmp/trt_models/bert.onnx \\
        [--plugins libfusion_plugins_trt8.so] [--engines unfused,trt_ln,trt_ln_fc] [--precision fp32]

``export`` builds BERT-base (batch 8 x seq 128, input_ids only: no attention-mask input) or
ViT-base (batch 8, 3x224x224) from its config with random weights (seed 0; no download) and
exports it with torch's TorchScript exporter at opset 13, dims batch/seq dynamic.

``run`` (TensorRT's Python: tensorrt, polygraphy, onnx, onnxruntime, numpy) does, for one model
(one per invocation: each fits a 10-minute device call; BERT-base fp32 builds take 50-105 s):

* ``unfused``: the exported model as is;
* ``trt_ln`` / ``trt_ln_fc``: target ``trt`` (TensorRT's shipped plugins), LayerNorm only /
  LayerNorm + FC (``CustomFCPluginDynamic``);
* ``plugin_ln`` / ``plugin_ln_fc`` (only with ``--plugins``): target ``plugin`` (this
  project's plugins), Layer/RMSNorm only / Layer/RMSNorm + FC;

each built with tactic sources CUBLAS + CUBLAS_LT and one shared timing cache, timed with
:mod:`fusion.trt.timing` (what ``verify --trt`` and ``fuse --tune`` use) paired with the
unfused engine, taking turns, and checked against onnxruntime on the same inputs (the fused
engine's outputs from the timed bindings).  Rows go to ``--out`` (default
bench/results/trt_engines.json) after every engine, replacing earlier rows of the same
model, engine and precision; engines are kept in ``--engine-dir`` so a later call reuses
them (the unfused one above all) instead of building again.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import logging
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

LOG = logging.getLogger("trt_engines")
RESULTS = REPO / "bench" / "results" / "trt_engines.json"
ENGINE_DIR = "/tmp/trt_engines_cache"
TIMING_CACHE = "/tmp/trt_engines_timing.cache"
TACTICS = ["CUBLAS", "CUBLAS_LT"]

# engine -> (target, passes); None: the unfused model
ENGINES: dict[str, tuple[str, list[str]] | None] = {
    "unfused": None,
    "trt_ln": ("trt", ["layernorm"]),
    "trt_ln_fc": ("trt", ["layernorm", "gemm"]),
    "plugin_ln": ("plugin", ["layernorm", "rmsnorm"]),
    "plugin_ln_fc": ("plugin", ["layernorm", "rmsnorm", "gemm"]),
    "trt_skip": ("trt", ["layernorm", "skipnorm"]),
    "plugin_skip": ("plugin", ["layernorm", "rmsnorm", "skipnorm"]),
    "plugin_skip_fc": ("plugin", ["layernorm", "rmsnorm", "skipnorm", "gemm"]),
    "plugin_default": ("plugin", None),  # the plugin target's default passes
}
NEEDS_PLUGINS = {"plugin_ln", "plugin_ln_fc", "plugin_skip", "plugin_skip_fc", "plugin_default"}
MODELS = {
    "bert": {"what": "BERT-base (12 layers, hidden 768), random weights", "batch": 8, "seq": 128, "vocab": 30522},
    "vit": {"what": "ViT-base/16 (12 layers, hidden 768, 197 tokens), random weights", "batch": 8, "image": 224},
    "bert4": {"what": "BERT-base width (hidden 768, 12 heads, MLP 3072) with 4 layers, random weights: for fp16, whose "
                      "12-layer builds take ~470 s", "batch": 8, "seq": 128, "vocab": 30522, "layers": 4},  # fmt: skip
    "gpt2": {"what": "GPT-2-small (12 layers, hidden 768), random weights", "batch": 8, "seq": 128, "vocab": 50257},
    "llama": {"what": "small LLaMA (8 layers, hidden 1024, 16 heads, MLP 2816, RMSNorm), random weights", "batch": 8,
              "seq": 128, "vocab": 32000},  # fmt: skip
}
TOKEN_MODELS = ("bert", "bert4", "gpt2", "llama")
CAUSAL_MODELS = ("gpt2", "llama")  # exported with an attention_mask input too


# -- export (the GPU machine's python3: torch + transformers) -----------------------------------


def export(model: str, out_dir: Path) -> Path:
    import torch
    import transformers

    torch.manual_seed(0)
    spec = MODELS[model]
    if model in ("bert", "bert4"):
        cfg = transformers.BertConfig(hidden_size=768, num_hidden_layers=spec.get("layers", 12), num_attention_heads=12,
                                      intermediate_size=3072, vocab_size=30522, max_position_embeddings=512)  # fmt: skip
        net = transformers.BertModel(cfg, add_pooling_layer=False)
        example = torch.randint(0, cfg.vocab_size, (spec["batch"], spec["seq"]))
        name, axes = "input_ids", {0: "batch", 1: "seq"}
    elif model == "gpt2":
        cfg = transformers.GPT2Config(n_embd=768, n_layer=12, n_head=12, n_positions=1024, vocab_size=spec["vocab"])
        net = transformers.GPT2Model(cfg)
    elif model == "llama":
        cfg = transformers.LlamaConfig(hidden_size=1024, num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=16,
                                       intermediate_size=2816, vocab_size=spec["vocab"], max_position_embeddings=2048)  # fmt: skip
        net = transformers.LlamaModel(cfg)
    else:
        cfg = transformers.ViTConfig(image_size=spec["image"], patch_size=16, hidden_size=768, num_hidden_layers=12,
                                     num_attention_heads=12, intermediate_size=3072)  # fmt: skip
        net = transformers.ViTModel(cfg, add_pooling_layer=False)
        example = torch.randn(spec["batch"], 3, spec["image"], spec["image"])
        name, axes = "pixel_values", {0: "batch"}
    if model in ("gpt2", "llama"):
        example = torch.randint(0, spec["vocab"], (spec["batch"], spec["seq"]))
        name, axes = "input_ids", {0: "batch", 1: "seq"}
    # Fresh modules have γ = 1 and every bias 0, identical across layers: the exporter then keeps one
    # initializer and reads it through Identity nodes, which TensorRT runs as copy layers outside
    # Myelin.  Trained models have distinct values: perturb them so the graph looks like theirs.
    with torch.no_grad():
        for p in net.parameters():
            if p.dim() == 1:
                p.add_(0.05 * torch.randn_like(p))
    try:  # the eager attention (matmul, softmax, matmul), which the TorchScript exporter writes out
        net.config._attn_implementation = "eager"
    except Exception:  # noqa: BLE001 - older/newer transformers: its default then
        pass
    net.eval()

    class LastHidden(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x, *mask):
            extra = {"use_cache": False, "attention_mask": mask[0]} if model in CAUSAL_MODELS else {}
            return self.inner(**{name: x}, **extra).last_hidden_state

    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{model}.onnx"
    out_axes = {0: "batch", 1: "seq"} if model in TOKEN_MODELS else {0: "batch"}
    args, names, dyn = (example,), [name], {name: axes, "last_hidden_state": out_axes}
    if model in CAUSAL_MODELS:  # without a mask, transformers 5 looks for packed sequences (aten::diff: no ONNX)
        args, names = (example, torch.ones_like(example)), [name, "attention_mask"]
        dyn["attention_mask"] = axes
    with torch.no_grad():
        torch.onnx.export(LastHidden(net), args, str(path), input_names=names, output_names=["last_hidden_state"],
                          dynamic_axes=dyn, opset_version=13, do_constant_folding=True, dynamo=False)  # fmt: skip
    print(f"{path}: {path.stat().st_size / 1e6:.0f} MB ({spec['what']})")
    return path


# -- run (TensorRT's Python 3.10) ----------------------------------------------------------------


def engines_to_run(names: list[str] | None, plugins: list[str]) -> tuple[list[str], list[str]]:
    """-> (engines to run in order, notes on those skipped).  ``unfused`` always comes first:
    every other engine is timed against it."""
    wanted = names or list(ENGINES)
    unknown = [n for n in wanted if n not in ENGINES]
    if unknown:
        raise SystemExit(f"unknown engine {unknown[0]!r} (choose from {', '.join(ENGINES)})")
    notes = [f"{n}: skipped (needs --plugins, the TensorRT 8 build of this project's plugins)"
             for n in wanted if n in NEEDS_PLUGINS and not plugins]  # fmt: skip
    run = ["unfused"] + [n for n in wanted if n != "unfused" and not (n in NEEDS_PLUGINS and not plugins)]
    return run, notes


def profile_for(model: str, batch: int | None, seq: int | None) -> dict[str, Any]:
    spec = MODELS[model]
    b = batch or spec["batch"]
    return {"batch": b, "seq": seq or spec["seq"]} if model in TOKEN_MODELS else {"batch": b}


def make_feed(model: str, proto, profile: dict[str, Any], seed: int = 0) -> dict[str, Any]:
    import numpy as np

    rng = np.random.default_rng(seed)
    if model in TOKEN_MODELS:
        vocab = MODELS[model]["vocab"]
        ids = rng.integers(0, vocab, (profile["batch"], profile["seq"])).astype(np.int64)
        return {"input_ids": ids, **({"attention_mask": np.ones_like(ids)} if model in CAUSAL_MODELS else {})}
    size = MODELS["vit"]["image"]
    return {"pixel_values": rng.standard_normal((profile["batch"], 3, size, size)).astype(np.float32)}


def make_row(model: str, engine: str, precision: str, *, timing=None, unfused_timing=None, build_s=None,
             max_abs_err=None, fused=None, plugin_layers=None, error: str | None = None,
             meta: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """One result row; the speed-up is the unfused engine's median over this engine's, both
    from the same paired timing run."""
    target = ENGINES[engine][0] if ENGINES[engine] else None
    row: dict[str, Any] = {"model": model, "engine": engine, "target": target, "precision": precision,
                           "passes": (ENGINES[engine][1] or "default") if ENGINES[engine] else [], "fused": fused or {},
                           "plugin_layers": plugin_layers, "build_s": _r(build_s, 2)}  # fmt: skip
    if timing is not None:
        row.update(median_ms=_r(timing.median_ms), p10_ms=_r(timing.p10_ms), p90_ms=_r(timing.p90_ms),
                   launches=timing.launches, repeats=timing.repeats, api=timing.api)  # fmt: skip
    if unfused_timing is not None and timing is not None:
        row["unfused_ms"] = _r(unfused_timing.median_ms)
        row["speedup"] = _r(unfused_timing.median_ms / timing.median_ms, 4)
    if max_abs_err is not None:
        row["max_abs_err"] = float(f"{max_abs_err:.3g}")
    if error:
        row["error"] = error
    row.update(meta or {})
    return row


def _r(v, nd: int = 5):
    return None if v is None else round(float(v), nd)


def merge(path: Path, rows: list[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    """The results file with ``rows`` replacing those of the same model, engine and precision."""
    data = json.loads(path.read_text()) if path.is_file() else {"rows": []}
    key = lambda r: (r["model"], r["engine"], r["precision"])  # noqa: E731
    new = {key(r) for r in rows}
    data["rows"] = [r for r in data.get("rows", []) if key(r) not in new] + rows
    data["rows"].sort(key=lambda r: (r["model"], r["precision"], list(ENGINES).index(r["engine"])))
    data["meta"] = meta
    return data


def write(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


def table(rows: list[dict[str, Any]]) -> str:
    head = f"{'model':<6} {'engine':<13} {'prec':<5} {'build s':>8} {'median ms':>10} {'p10-p90':>15} {'speed-up':>9} {'max err':>9}"
    lines = [head, "-" * len(head)]
    for r in rows:
        spread = f"{r['p10_ms']:.3f}-{r['p90_ms']:.3f}" if r.get("p10_ms") is not None else "-"
        med = f"{r['median_ms']:.3f}" if r.get("median_ms") is not None else "-"
        sp = f"{r['speedup']:.3f}x" if r.get("speedup") is not None else "-"
        err = f"{r['max_abs_err']:.2g}" if r.get("max_abs_err") is not None else "-"
        b = f"{r['build_s']:.1f}" if r.get("build_s") is not None else "-"
        lines.append(f"{r['model']:<6} {r['engine']:<13} {r['precision']:<5} {b:>8} {med:>10} {spread:>15} {sp:>9} {err:>9}"
                     + (f"  error: {r['error'][:80]}" if r.get("error") else ""))  # fmt: skip
    return "\n".join(lines)


def device_name() -> str:
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True,
                           timeout=20)  # fmt: skip
        return r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def commit() -> str:
    if os.environ.get("FUSION_COMMIT"):
        return os.environ["FUSION_COMMIT"]
    try:
        r = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        return r.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _err(e: BaseException) -> str:
    lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
    return (f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__)[:400]


class Engines:
    """Builds (or reloads from ``engine_dir``) the engines of one model with one set of options."""

    def __init__(self, profile, precision: str, plugins: list[str], timing_cache: str, engine_dir: str | None):
        self.profile, self.precision, self.plugins = profile, precision, plugins
        self.timing_cache, self.engine_dir = timing_cache, engine_dir

    def get(self, proto, name: str):
        from fusion.trt import build as ftrt
        from fusion.trt.build import BuiltEngine, build_engine
        from fusion.trt.profiles import derive_profiles, model_inputs

        data = proto.SerializeToString()
        key = hashlib.sha1(data).hexdigest()[:12]
        tag = f"{name}_{self.precision}_{key}_{ftrt.trt_version()}"
        path = Path(self.engine_dir) / f"{tag}.engine" if self.engine_dir else None
        if path is not None and path.is_file() and path.with_suffix(".json").is_file():
            ftrt.load_plugins(self.plugins)
            info = json.loads(path.with_suffix(".json").read_text())
            inputs = model_inputs(proto)
            LOG.info("%s: engine reused from %s (built in %.1fs)", name, path, info["build_s"])
            return BuiltEngine(path.read_bytes(), derive_profiles(inputs, self.profile), inputs, info["trt_version"],
                               self.precision, build_s=info["build_s"], path=str(path)), info["plugin_layers"]  # fmt: skip
        built = build_engine(data, shapes=self.profile, plugins=self.plugins, precision=self.precision,
                             tactic_sources=TACTICS, timing_cache=self.timing_cache)  # fmt: skip
        plugin_layers = len(built.plugin_layers)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(built.engine)
            path.with_suffix(".json").write_text(json.dumps({"build_s": built.build_s, "trt_version": built.trt_version,
                                                             "plugin_layers": plugin_layers}))  # fmt: skip
        return built, plugin_layers


def run(args: argparse.Namespace) -> int:
    import numpy as np
    import onnx
    import onnxruntime as ort

    from trt_verify import use_source_tree_patterns  # fusion.patterns from patterns/ in a checkout

    use_source_tree_patterns()
    import fusion
    from fusion.trt.build import trt_version
    from fusion.trt.timing import METHOD, time_engines

    names, notes = engines_to_run(args.engines, args.plugins)
    for n in notes:
        LOG.warning("%s", n)
    profile = profile_for(args.model, args.batch, args.seq)
    meta = {"commit": commit(), "device": device_name(), "trt_version": trt_version(), "date": datetime.date.today().isoformat(),
            "tactic_sources": TACTICS, "timing": METHOD.format(repeats=args.repeats) + "; each engine paired with the unfused one",
            "accuracy": "max abs error vs onnxruntime (CPU, graph optimizations off) on the same inputs",
            "models": {k: v["what"] for k, v in MODELS.items()}}  # fmt: skip
    original = onnx.load(args.onnx)
    feed = make_feed(args.model, original, profile)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    t0 = time.perf_counter()
    reference = ort.InferenceSession(args.onnx, so, providers=["CPUExecutionProvider"]).run(None, feed)[0]
    LOG.info("onnxruntime reference in %.1fs", time.perf_counter() - t0)
    row_meta = {"shapes": {k: list(v.shape) for k, v in feed.items()}, "commit": meta["commit"], "device": meta["device"],
                "trt_version": meta["trt_version"]}  # fmt: skip
    engines = Engines(profile, args.precision, args.plugins, args.timing_cache, args.engine_dir)
    rows: list[dict[str, Any]] = []
    unfused = None
    for name in names:
        t0 = time.perf_counter()
        try:
            if ENGINES[name] is None:
                proto, fused = original, {}
            else:
                target, passes = ENGINES[name]
                result = fusion.run(original, passes, target=target)
                proto, fused = result.model, result.counts()
            built, plugin_layers = engines.get(proto, name)
            pair = [built] if unfused is None else [unfused, built]
            timings, outputs = time_engines(pair, [feed], repeats=args.repeats, fetch=True)
            out = next(iter(outputs[-1][0].values()))
            err = float(np.max(np.abs(out.astype(np.float64) - reference.astype(np.float64))))
            if unfused is None:
                unfused = built
            row = make_row(args.model, name, args.precision, timing=timings[-1][0],
                           unfused_timing=timings[0][0], build_s=built.build_s, max_abs_err=err, fused=fused,
                           plugin_layers=plugin_layers, meta=row_meta)  # fmt: skip
            if args.layers:
                row["layer_kinds"] = layer_profile(built, feed, args.layers / f"{args.model}_{name}_{args.precision}.json")
        except Exception as e:  # noqa: BLE001 - recorded per row
            LOG.error("%s: %s\n%s", name, _err(e), traceback.format_exc(limit=5))
            row = make_row(args.model, name, args.precision, error=_err(e), meta=row_meta)
        row["wall_s"] = round(time.perf_counter() - t0, 1)
        rows.append(row)
        write(args.out, merge(args.out, rows, meta))
        if unfused is None:  # nothing to compare with
            break
        LOG.info("%s: %s", name, json.dumps({k: row.get(k) for k in ("build_s", "median_ms", "speedup", "max_abs_err")}))
    print(table(rows))
    for n in notes:
        print(n)
    return 0 if all("error" not in r for r in rows) else 1


def layer_profile(built, feed, path: Path) -> dict[str, Any]:
    """The engine's per-layer times (fusion.trt.layers), written to ``path``; -> time per kind."""
    from fusion.trt.layers import profile_layers

    prof = profile_layers(built, feed)
    LOG.info("layer profile of %s:\n%s", path.stem, prof.text())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(prof.to_dict(), indent=1) + "\n")
    return prof.by_kind()


E2E = REPO / "bench" / "results" / "trt_e2e.json"
TUNE_RESULTS = REPO / "bench" / "results" / "trt_tune_bert.json"


def e2e_rows(rows: list[dict[str, Any]], tune: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The model x precision x target table of issue 11 from trt_engines.json's rows (and the
    tuning record): target none/trt/plugin/tuned, plugin layers, error, ms, ratio, build s."""
    out = []
    for r in rows:
        if r.get("error") or r.get("median_ms") is None:
            continue
        out.append({"model": r["model"], "precision": r["precision"], "target": r["target"] or "none",
                    "engine": r["engine"], "passes": r["passes"], "fused": r["fused"],
                    "plugin_layers": r["plugin_layers"], "max_abs_err": r.get("max_abs_err"),
                    "engine_ms": r["median_ms"], "unfused_ms": r.get("unfused_ms"), "ratio": r.get("speedup"),
                    "build_s": r.get("build_s"), "commit": r.get("commit"), "device": r.get("device"),
                    "trt_version": r.get("trt_version")})  # fmt: skip
    if tune:
        kept = tune.get("kept") or []
        base = next((r for r in out if r["model"] == tune.get("model") and r["precision"] == tune.get("precision")
                     and r["target"] == "none"), None)  # fmt: skip
        if base is not None and not kept:  # tuning kept nothing: the tuned model is the original
            out.append({**base, "target": "tuned", "engine": f"tuned ({tune.get('target')} target)", "passes": [],
                        "ratio": 1.0, "build_s": tune.get("seconds"), "commit": tune.get("commit"),
                        "note": "fuse --tune kept no fusion: the tuned model is the unfused one"})  # fmt: skip
    order = {"none": 0, "trt": 1, "plugin": 2, "tuned": 3}
    out.sort(key=lambda r: (r["model"], r["precision"], order.get(r["target"], 9), r["engine"]))
    return out


def summarize(engines: Path = RESULTS, tune_path: Path = TUNE_RESULTS, out: Path = E2E) -> list[dict[str, Any]]:
    data = json.loads(engines.read_text())
    tune = _tune_record(tune_path)
    rows = e2e_rows(data["rows"], tune)
    write(out, {"meta": {"from": [str(engines.relative_to(REPO)), str(tune_path.relative_to(REPO))],
                         "ratio": "unfused engine ms / this engine ms, timed as a pair (> 1: faster)",
                         "models": {k: v["what"] for k, v in MODELS.items()}}, "rows": rows})  # fmt: skip
    return rows


def _tune_record(path: Path) -> dict[str, Any] | None:
    """model, precision, target, kept passes, seconds and commit of the tuning run, if recorded."""
    if not path.is_file():
        return None
    d = json.loads(path.read_text())
    rec = d.get("record", {})
    return {"model": "bert", "precision": rec.get("precision", "fp32"), "target": rec.get("target", "trt"),
            "kept": rec.get("kept", []), "seconds": rec.get("seconds"), "commit": d.get("meta", {}).get("commit")}


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    e = sub.add_parser("export", help="export the model to ONNX (torch + transformers)")
    e.add_argument("--model", choices=list(MODELS), required=True)
    e.add_argument("--out", type=Path, default=Path("/tmp/trt_models"))
    r = sub.add_parser("run", help="build, time and check the engines (TensorRT)")
    r.add_argument("--model", choices=list(MODELS), required=True)
    r.add_argument("--onnx", required=True, help="the exported model")
    r.add_argument("--plugins", nargs="+", default=[], help="this project's TensorRT 8 plugin library")
    r.add_argument("--engines", type=lambda s: [x.strip() for x in s.split(",") if x.strip()],
                   help=f"comma-separated subset of {','.join(ENGINES)} (unfused always runs)")  # fmt: skip
    r.add_argument("--precision", choices=("fp32", "fp16"), default="fp32")
    r.add_argument("--batch", type=int)
    r.add_argument("--seq", type=int)
    r.add_argument("--repeats", type=int, default=15)
    r.add_argument("--timing-cache", default=TIMING_CACHE)
    r.add_argument("--engine-dir", default=ENGINE_DIR, help="keep engines here and reuse them ('' to disable)")
    r.add_argument("--out", type=Path, default=RESULTS)
    sub.add_parser("summarize", help=f"write {E2E.relative_to(REPO)} from {RESULTS.relative_to(REPO)}")
    r.add_argument("--layers", type=Path, help="also profile each engine's layers; one JSON per engine in this folder")
    return p


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "export":
        export(args.model, args.out)
        return 0
    if args.command == "summarize":
        print(table([{**r, "median_ms": r["engine_ms"], "speedup": r["ratio"]} for r in summarize()]))
        return 0
    sys.path.insert(0, str(REPO / "bench"))
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
