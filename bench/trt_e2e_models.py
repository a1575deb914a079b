"""Models of realistic size through our TensorRT 8 plugins (target ``plugin``) in real engines.

On the GPU machine, after ``python3 bench/trt_engines.py export --model M --out /tmp/trt_models``
for each model (torch + transformers, random weights):

    py310 bench/trt_e2e_models.py --plugins LIB --out JSON [--models bert,bert384,vit,gpt2,llama]
                                  [--precisions fp32,fp16] [--unfused] [--models-dir /tmp/trt_models]

Each model gets the treatment of bench/trt_e2e_fixtures.py's rows: fuse (layernorm, rmsnorm,
gemm by default), build with a dynamic profile (batch 1..8, seq 16..128; ``bert384``: the BERT
export with seq up to 384), count our plugin layers against the fused nodes, verify against
onnxruntime at min/opt/max, then reload every engine in a fresh process that only loads the
library and verify again.  ``--unfused`` also builds and times the unfused engine at opt.
Rows are written after every step.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import trt_e2e_fixtures as fx  # noqa: E402 - sets up fusion.patterns for the source tree
from bench.trt_engines import MODELS  # noqa: E402
from bench.trt_verify import build_and_check, corner_inputs, device_name, model_path, profile_spec, write_rows  # noqa: E402

LOG = logging.getLogger("trt_e2e_models")

# name -> (export in trt_engines.MODELS, inputs, dim ranges (lo, hi), opt dims)
SIZES: dict[str, tuple[str, tuple[str, ...], dict[str, tuple[int, int]], dict[str, int]]] = {
    "bert": ("bert", ("input_ids",), {"batch": (1, 8), "seq": (16, 128)}, {"batch": 8, "seq": 128}),
    "bert384": ("bert", ("input_ids",), {"batch": (1, 8), "seq": (16, 384)}, {"batch": 8, "seq": 384}),
    "vit": ("vit", ("pixel_values",), {"batch": (1, 8)}, {"batch": 8}),
    "gpt2": ("gpt2", ("input_ids", "attention_mask"), {"batch": (1, 8), "seq": (16, 128)}, {"batch": 8, "seq": 128}),
    "llama": ("llama", ("input_ids", "attention_mask"), {"batch": (1, 8), "seq": (16, 128)}, {"batch": 8, "seq": 128}),
}


def record(name: str, precision: str, models_dir: Path) -> dict[str, Any]:
    """A manifest-like record for one exported model at one precision (what the fixture rows use)."""
    export, inputs, ranges, opt = SIZES[name]
    return {"family": name, "file": f"{name}_{precision}.onnx", "path": str(models_dir / f"{export}.onnx"),
            "exporter": "legacy", "opset": 13, "dtype": precision, "what": MODELS[export]["what"],
            "inputs": [{"name": i, "ranges": {d: list(r) for d, r in ranges.items()}, "export_dims": opt} for i in inputs]}  # fmt: skip


def run(args: argparse.Namespace) -> int:
    from fusion.trt.build import trt_version

    lib, out, work, opts = fx.setup(args, "trt_e2e_models_")
    meta = {"what": "models of realistic size (random weights), target plugin (our TensorRT 8 plugins)",
            "script": "bench/trt_e2e_models.py", "commit": args.commit, "device": device_name(),
            "trt_version": trt_version(), "library": Path(lib).name, "passes": args.passes,
            "tactic_sources": "+".join(fx.TACTIC_SOURCES),
            "pass": "built, our plugin layers == fused nodes (per op), verified at min/opt/max, and again after reload",
            "tolerances": "fusion.verify defaults by output dtype; fp32 outputs of fp16 engines 2e-2 abs / 2e-2 rel"}  # fmt: skip
    recs = [record(m, p, Path(args.models_dir)) for p in args.precisions for m in args.models]
    rows: list[dict[str, Any]] = []
    jobs: list[dict[str, Any]] = []
    t0 = time.perf_counter()

    def save() -> None:
        meta["seconds"] = round(time.perf_counter() - t0, 1)
        write_rows(out, rows, meta)

    for rec in recs:
        if not model_path(rec).is_file():
            rows.append(dict(fx.base_row(rec, None), error=f"no export at {model_path(rec)}"))
            continue
        if time.perf_counter() - t0 > args.budget_s:
            rows.append(dict(fx.base_row(rec, None), note="not run: time budget"))
            continue
        row, job = fx.run_fused(rec, lib, opts, None, work, args.passes)
        row["what"] = rec["what"]
        rows.append(row)
        if job:
            jobs.append(job)
        LOG.info("%s", fx.fmt(row))
        save()
        if args.unfused and row.get("built"):
            model, _ = fx.source_model(rec)
            res = build_and_check(model, model_path(rec), profile_spec(rec), row["precision"], opts,
                                  f"{rec['file']} unfused", None, inputs=corner_inputs(rec))  # fmt: skip
            fx.apply_unfused(row, res)
            save()
    if jobs:
        got = fx.reload_all(jobs, lib, args.reload_limit_s, work)
        for row in rows:
            if row["model"] in got:
                fx.apply_reload(row, got[row["model"]])
        save()
    print(fx.table(rows))
    return 0 if rows and all(r["pass"] for r in rows) else 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    def names(v: str) -> list[str]:
        return [x.strip() for x in v.split(",") if x.strip()]

    ap = argparse.ArgumentParser(prog="bench/trt_e2e_models.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--plugins", required=True, help="libfusion_plugins_trt8.so")
    ap.add_argument("--out", required=True, help="result JSON")
    ap.add_argument("--models", type=names, default=list(SIZES), help=f"comma-separated, of {', '.join(SIZES)}")
    ap.add_argument("--models-dir", default="/tmp/trt_models", help="where trt_engines.py export wrote the models")
    ap.add_argument("--precisions", type=names, default=["fp32", "fp16"])
    ap.add_argument("--passes", type=names, default=fx.PASSES)
    ap.add_argument("--unfused", action="store_true", help="also build and time the unfused engine")
    ap.add_argument("--budget-s", type=float, default=480, help="start no model after this many seconds")
    ap.add_argument("--reload-limit-s", type=float, default=150)
    ap.add_argument("--timing-cache", help="TensorRT timing cache shared by every build")
    ap.add_argument("--commit", default=fx.os.environ.get("FUSION_COMMIT", "unknown"))
    args = ap.parse_args(argv)
    bad = [m for m in args.models if m not in SIZES] + [p for p in args.precisions if p not in ("fp32", "fp16")]
    if bad:
        ap.error(f"unknown model or precision {bad[0]!r}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("fusion").setLevel(logging.ERROR)
    from fusion.errors import FusionError

    try:
        return run(args)
    except FusionError as e:
        LOG.error("%s", e)
        return 2


if __name__ == "__main__":
    sys.exit(main())
