#!/usr/bin/env python3
"""Fusion-pass speed: fuse_layernorm against onnxruntime's and onnxscript's LayerNorm fusions.

    python bench/bench_fusion.py [--layers 12 24 48] [--rounds 7] [--out bench/results/fusion_speed.json]

Models: BERT (hidden 256, 4 heads) exported by torch.onnx's TorchScript exporter at opset 13,
built from a config by tests/fixtures/make_fixtures.py (cached under bench/.cache), and the
same graphs converted to opset 18 (onnxscript's rule only matches ReduceMean axes given as an
input).  Every tool gets a ModelProto and hands back a ModelProto:

* ours: ``fusion.fuse_layernorm(model)`` with its defaults (LayerNorm and RMSNorm passes,
  validation with the full ONNX checker, the input left untouched, so the weights are copied),
  and the variants without validation (``validate=False``) and in place (``inplace=True``);
* onnxruntime: ``OnnxModel(model)`` + ``FusionLayerNormalization(...).apply()`` (edits in place);
* onnxscript: ``ir.from_proto`` -> the passes its rule needs to match these exports
  (lift Constant nodes to initializers, spell out default attributes, shape inference for
  dtypes) -> ``fuse_layer_normalization`` -> ``ir.to_proto``; and the rule alone on a model
  already prepared.

Tools run in turn, round after round, so machine noise hits all alike; medians are reported
with ratios (their time / ours) and the number of LayerNorms each found.
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

import onnx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
log = logging.getLogger("bench_fusion")
CACHE = ROOT / "bench" / ".cache"


def bert(layers: int) -> Path:
    """A BERT export with ``layers`` layers (cached)."""
    path = CACHE / f"bert{layers}_op13.onnx"
    if not path.exists():
        try:
            import transformers  # noqa: F401
        except ImportError:
            raise SystemExit(f"{path.name} is not cached: building it needs transformers (pip install -e '.[fixtures]')")
        from tests.fixtures import make_fixtures as mf

        CACHE.mkdir(parents=True, exist_ok=True)
        import torch

        torch.manual_seed(mf.SEED)
        model = mf._hf_bert(layers=layers, hidden=256, heads=4, intermediate=1024, vocab=1000, max_pos=512)
        # Trained-looking γ/β (not the 1/0 init, which the exporter de-duplicates into one tensor).
        mf.perturb_parameters(model, torch.Generator().manual_seed(mf.SEED + 1))
        model.eval()
        family = mf.FAMILIES["bert"]
        feeds = mf.random_feeds({"file": path.name, "inputs": mf.input_records(family, "fp32")}, "export")
        mf.export_model(model, family, "legacy", 13, mf.torch_inputs(feeds, family), path)
    return path


def opset18(path: Path) -> Path:
    out = path.with_name(path.stem.replace("op13", "op18") + ".onnx")
    if not out.exists():
        from onnx import version_converter

        onnx.save(version_converter.convert_version(onnx.load(str(path)), 18), str(out))
    return out


# -- the tools ---------------------------------------------------------------------------


def ours(**options) -> Callable[[onnx.ModelProto], tuple[float, int]]:
    """``fusion.fuse_layernorm(model, **options)``: no options is the default a user gets."""
    import fusion
    from fusion.rewrite.specs import FUSED_LAYER_NORM as spec

    def run(model: onnx.ModelProto) -> tuple[float, int]:
        t = time.perf_counter()
        out = fusion.fuse_layernorm(model, **options)
        dt = time.perf_counter() - t
        return dt, sum(n.op_type == spec.op_type and n.domain == spec.domain for n in out.graph.node)

    return run


def onnxruntime_fusion(model: onnx.ModelProto) -> tuple[float, int]:
    from onnxruntime.transformers.fusion_layernorm import FusionLayerNormalization
    from onnxruntime.transformers.onnx_model import OnnxModel

    t = time.perf_counter()
    m = OnnxModel(model)
    FusionLayerNormalization(m).apply()
    dt = time.perf_counter() - t
    return dt, sum(n.op_type == "LayerNormalization" for n in m.model.graph.node)


def onnxscript_fusion(prepared: bool) -> Callable[[onnx.ModelProto], tuple[float, int]]:
    import onnx_ir as ir
    import onnx_ir.passes.common as common
    from onnxscript.rewriter.rules.fusion._layer_norm import fuse_layer_normalization

    def prepare(irm) -> None:
        common.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=1)(irm)
        common.AddDefaultAttributesPass()(irm)
        common.ShapeInferencePass()(irm)

    def run(model: onnx.ModelProto) -> tuple[float, int]:
        if prepared:
            irm = ir.from_proto(model)
            prepare(irm)
            t = time.perf_counter()
            n = fuse_layer_normalization(irm)
            return time.perf_counter() - t, n // 2 if n else 0
        t = time.perf_counter()
        irm = ir.from_proto(model)
        prepare(irm)
        fuse_layer_normalization(irm)
        out = ir.to_proto(irm)
        dt = time.perf_counter() - t
        return dt, sum(n.op_type == "LayerNormalization" for n in out.graph.node)

    return run


def measure(path: Path, tools: dict[str, Callable], rounds: int, fresh: set[str]) -> dict[str, dict]:
    base = onnx.load(str(path))
    times: dict[str, list[float]] = {k: [] for k in tools}
    found: dict[str, int] = {}
    for r in range(rounds + 1):  # the first round warms up and is not counted
        for name, tool in tools.items():
            model = base
            if name in fresh:  # tools that edit their input get their own copy, untimed
                model = onnx.ModelProto()
                model.CopyFrom(base)
            gc.collect()  # no tool pays for another's garbage
            dt, n = tool(model)
            if r:
                times[name].append(dt)
            found[name] = n
    return {k: {"median_s": statistics.median(v), "min_s": min(v), "found": found[k]} for k, v in times.items()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, nargs="+", default=[12, 24, 48])
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "fusion_speed.json")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    logging.getLogger("onnxruntime").setLevel(logging.ERROR)

    rows = []
    for layers in args.layers:
        p13 = bert(layers)
        p18 = opset18(p13)
        nodes = len(onnx.load(str(p13), load_external_data=False).graph.node)
        tools13 = {
            "ours": ours(),
            "ours_no_validate": ours(validate=False),
            "ours_inplace_no_validate": ours(validate=False, inplace=True),
            "onnxruntime": onnxruntime_fusion,
        }
        tools18 = {
            "ours": ours(),
            "ours_no_validate": ours(validate=False),
            "onnxscript": onnxscript_fusion(prepared=False),
            "onnxscript_rule_only": onnxscript_fusion(prepared=True),
        }
        fresh = {"ours_inplace_no_validate", "onnxruntime"}
        for opset, path, tools in ((13, p13, tools13), (18, p18, tools18)):
            res = measure(path, tools, args.rounds, fresh)
            row = {"layers": layers, "opset": opset, "nodes": nodes, "results": res}
            ref = res["ours"]["median_s"]
            row["ratios_vs_ours"] = {k: v["median_s"] / ref for k, v in res.items() if not k.startswith("ours")}
            rows.append(row)
            log.info(
                "BERT-%d opset %d (%d nodes): %s",
                layers,
                opset,
                nodes,
                "  ".join(f"{k} {v['median_s'] * 1000:.0f} ms ({v['found']} LN)" for k, v in res.items()),
            )
            for k, ratio in row["ratios_vs_ours"].items():
                log.info("    %s / ours = %.1fx", k, ratio)

    # Linearity: our time per node at each size, relative to the smallest model.
    ours13 = [(r["nodes"], r["results"]["ours"]["median_s"]) for r in rows if r["opset"] == 13]
    per_node = [t / n for n, t in ours13]
    linearity = [p / per_node[0] for p in per_node]
    log.info("ours, time per node relative to the smallest model: %s", ", ".join(f"{x:.2f}" for x in linearity))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    meta = {
        **_meta(),
        "model": MODEL,
        "torch": _version("torch"),
        "transformers": _version("transformers"),
        "ours": "fusion.fuse_layernorm(model) with its defaults; _no_validate: validate=False; _inplace: inplace=True",
    }
    args.out.write_text(json.dumps({"meta": meta, "rows": rows, "per_node_relative": linearity}, indent=2) + "\n")
    log.info("wrote %s", args.out)
    return 0


def _meta() -> dict:
    import onnxruntime
    import onnxscript

    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    dirty = bool(subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True, text=True, cwd=ROOT).stdout.strip())
    cpu = next((ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name")), platform.processor())
    return {
        "commit": commit,
        "dirty": dirty,
        "device": f"CPU: {cpu}",
        "python": platform.python_version(),
        "onnx": onnx.__version__,
        "onnxruntime": onnxruntime.__version__,
        "onnxscript": onnxscript.__version__,
        "date": time.strftime("%Y-%m-%d"),
    }


MODEL = (
    "transformers BertModel (hidden 256, 4 heads, intermediate 1024, vocab 1000, random trained-looking weights) "
    "exported by torch.onnx's TorchScript exporter at opset 13 (tests/fixtures/make_fixtures.py), converted to "
    "opset 18 by onnx.version_converter; cached under bench/.cache"
)


def _version(package: str) -> str | None:
    """The installed version (what builds a model that is not cached yet), or None."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


if __name__ == "__main__":
    sys.exit(main())
