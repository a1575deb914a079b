#!/usr/bin/env python3
"""Coverage on real exports: how many decomposed norms each tool fuses in the fixture models.

    python bench/bench_coverage.py [--out bench/results/coverage.json]

Per fixture (tests/fixtures/manifest.json, ground truth from the torch modules; and
tests/fixtures/exporters: tf2onnx, jax2onnx, paddle2onnx, torch.var_mean) and tool:
ours (``fusion.run`` with the layernorm and rmsnorm passes), onnxruntime's transformers
fusions (FusionLayerNormalization, FusionLayerNormalizationTF, FusionSimplifiedLayerNormalization
on an OnnxModel) and onnxscript's rules (layer_normalization and rms_normalization rule sets,
after the passes they need: Constant nodes lifted, default attributes spelled out, shape
inference).  A fused count above the ground truth is counted as false positives.

Dense layers too, ours only (``fusion.run`` with the gemm pass; neither other tool has an FC
fusion to compare): against the manifests' ``linear_modules`` (nn.Linear, GPT-2 Conv1D, Keras
Dense / EinsumDense, Flax / Paddle Linear), under ``dense`` in the summary, per family and per row.

Skip norms (residual Add + norm, bench/skip_coverage.py): against the manifests'
``residual_norm_sites`` (counted from the source model), ours (``fusion.run`` with the
skipnorm, layernorm and rmsnorm passes, target plugin; every fused model verified on
onnxruntime with ``fusion.verify``) and onnxruntime's transformers optimizer
(SkipLayerNormalization + SkipSimplifiedLayerNormalization nodes, model_type per family, the
better of its default opt_level and 0: on CPU the former recasts fp16 models); each fused node
is checked against the original graph's Add + norm, under ``skip`` (``ours_verified`` of
``ours_checked``: fused models that verify; ``onnxruntime_errors``: models its optimizer
crashed on).
"""

from __future__ import annotations

import argparse
import collections
import json
import logging
import sys
from pathlib import Path

import onnx

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.bench_fusion import _meta  # noqa: E402
from bench.skip_coverage import skip_row  # noqa: E402
from tests.fixtures.catalog import fixture_path, load_manifest  # noqa: E402

EXPORTERS = ROOT / "tests" / "fixtures" / "exporters" / "manifest.json"
NORM_OPS = {"LayerNormalization", "SimplifiedLayerNormalization", "RMSNormalization", "SkipLayerNormalization"}


def ours(model: onnx.ModelProto) -> int:
    import fusion

    c = fusion.run(model, ["layernorm", "rmsnorm"], validate=False).counts()
    return c.get("layernorm", 0) + c.get("rmsnorm", 0)


def ours_dense(model: onnx.ModelProto) -> int:
    import fusion

    return fusion.run(model, ["gemm"], validate=False).counts().get("gemm", 0)


def onnxruntime_fusions(model: onnx.ModelProto) -> int:
    from onnxruntime.transformers.fusion_layernorm import FusionLayerNormalization, FusionLayerNormalizationTF
    from onnxruntime.transformers.fusion_simplified_layernorm import FusionSimplifiedLayerNormalization
    from onnxruntime.transformers.onnx_model import OnnxModel

    before = _norm_nodes(model)
    m = OnnxModel(model)
    for fusion_class in (FusionLayerNormalization, FusionLayerNormalizationTF, FusionSimplifiedLayerNormalization):
        try:  # one fusion crashing on a model must not hide what the others did
            fusion_class(m).apply()
        except Exception as e:  # noqa: BLE001
            logging.info("onnxruntime %s failed: %s: %s", fusion_class.__name__, type(e).__name__, e)
    return _norm_nodes(m.model) - before


def onnxscript_rules(model: onnx.ModelProto) -> int:
    import onnx_ir as ir
    import onnx_ir.passes.common as common
    from onnxscript.rewriter.rules.fusion._layer_norm import fuse_layer_normalization
    from onnxscript.rewriter.rules.fusion._rms_normalization import fuse_rms_normalization

    before = _norm_nodes(model)
    irm = ir.from_proto(model)
    common.LiftConstantsToInitializersPass(lift_all_constants=True, size_limit=1)(irm)
    common.AddDefaultAttributesPass()(irm)
    common.ShapeInferencePass()(irm)
    fuse_layer_normalization(irm)
    fuse_rms_normalization(irm)
    return _norm_nodes(ir.to_proto(irm)) - before


def _norm_nodes(model: onnx.ModelProto) -> int:
    return sum(n.op_type in NORM_OPS for n in model.graph.node)


TOOLS = {"ours": ours, "onnxruntime": onnxruntime_fusions, "onnxscript": onnxscript_rules}


def _records():
    """The torch fixtures, then the other exporters' (tests/fixtures/exporters)."""
    for rec in load_manifest():
        yield rec, fixture_path(rec["file"])
    for rec in json.loads(EXPORTERS.read_text()):
        yield rec, EXPORTERS.parent / rec["file"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "coverage.json")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    for noisy in ("onnxruntime", "onnxscript", "onnx_ir"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    rows = []
    totals: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    by_family: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for rec, path in _records():
        expected = rec["expected_layernorm_fusions"] + rec["expected_rmsnorm_fusions"]
        row = {"model": rec["file"], "family": rec["family"], "expected": expected}
        for name, tool in TOOLS.items():
            try:
                found = tool(onnx.load(str(path)))
            except Exception as e:  # noqa: BLE001 - a tool that crashes found nothing
                row[f"{name}_error"] = f"{type(e).__name__}: {e}"[:200]
                found = 0
            row[name] = found
            totals[name]["found"] += min(found, expected)
            totals[name]["false_positives"] += max(0, found - expected)
            by_family[rec["family"]][name] += min(found, expected)
        totals["expected"]["found"] += expected
        by_family[rec["family"]]["expected"] += expected
        _count_dense(rec, path, row, totals["dense"], by_family[rec["family"]])
        _count_skip(rec, path, row, totals["skip"], by_family[rec["family"]])
        rows.append(row)
    summary = {k: dict(v) for k, v in totals.items()}
    families = {k: dict(v) for k, v in sorted(by_family.items())}
    args.out.write_text(json.dumps({"meta": _meta(), "summary": summary, "by_family": families, "rows": rows}, indent=1) + "\n")
    for name in TOOLS:
        t = totals[name]
        logging.info("%-12s %d/%d norms fused, %d false positives", name, t["found"], totals["expected"]["found"], t["false_positives"])
    d = totals["dense"]
    logging.info("%-12s %d/%d dense layers fused, %d false positives", "ours", d["found"], d["expected"], d["false_positives"])
    k = totals["skip"]
    logging.info("%-12s %d/%d skip norms fused, %d false positives, %d models verified", "ours", k["ours"],
                 k["expected"], k["ours_false_positives"], k["ours_verified"])
    logging.info("%-12s %d/%d skip norms fused, %d false positives", "onnxruntime", k["onnxruntime"], k["expected"],
                 k["onnxruntime_false_positives"])
    logging.info("wrote %s", args.out)
    return 0


def _count_dense(rec: dict, path: Path, row: dict, total: collections.Counter, family: collections.Counter) -> None:
    expected = rec["linear_modules"]
    try:
        found = ours_dense(onnx.load(str(path)))
    except Exception as e:  # noqa: BLE001 - a crash found nothing
        row["dense_error"] = f"{type(e).__name__}: {e}"[:200]
        found = 0
    row["dense_expected"], row["dense_ours"] = expected, found
    total["expected"] += expected
    total["found"] += min(found, expected)
    total["false_positives"] += max(0, found - expected)
    family["dense_expected"] += expected
    family["dense_ours"] += min(found, expected)


def _count_skip(rec: dict, path: Path, row: dict, total: collections.Counter, family: collections.Counter) -> None:
    fields = skip_row(rec, path)
    row.update(fields)
    if fields["skip_expected"] is None:
        total["no_ground_truth"] += 1
        return
    total["expected"] += fields["skip_expected"]
    family["skip_expected"] += fields["skip_expected"]
    for tool in ("ours", "onnxruntime"):
        total[tool] += fields[f"skip_{tool}"]
        total[f"{tool}_false_positives"] += fields[f"skip_{tool}_false_positives"]
        family[f"skip_{tool}"] += fields[f"skip_{tool}"]
        if f"skip_{tool}_error" in fields:
            total[f"{tool}_errors"] += 1
    if "skip_ours_verified" in fields:
        total["ours_verified"] += fields["skip_ours_verified"]
        total["ours_checked"] += 1


if __name__ == "__main__":
    sys.exit(main())
