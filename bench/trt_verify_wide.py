"""trt_verify at a width where TensorRT's LayerNorm plugin is exact (768, as in BERT-base).

    python bench/trt_verify_wide.py --export DIR          # here, with torch: write the models
    py310 bench/trt_verify_wide.py --models DIR --out OUT [--no-tactic-sources]   # on the GPU

The fixture models are 16-32 wide, where TensorRT 8.5.3's shipped LayerNorm plugin is off by
up to 1e-2 (bench/results/trt_layernorm_accuracy.json), so the trt target leaves them alone.
This exports the fixture's four hand-written LayerNorm spellings (div/sqrt, rsqrt, x*x,
torch.var) at hidden size 768 with the TorchScript exporter (opset 13), and runs them through
bench/trt_verify.py's row logic: fuse for the trt target, build fused and unfused engines
with a dynamic profile, verify each against onnxruntime, time both.  Rows are appended to
OUT/trt_verify_wide.json in trt_verify.json's format.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "bench"))

WIDTH = 768
RECORD = {
    "file": "ln_wide_legacy_op13_{dtype}.onnx",
    "family": "ln_wide",
    "exporter": "legacy",
    "opset": 13,
    "inputs": [{"name": "x", "dtype": "{np}", "shape": ["batch", "seq", WIDTH], "ranges": {"batch": [1, 4], "seq": [1, 128]},
                "export_dims": {"batch": 2, "seq": 16}}],
    "expected_layernorm_fusions": 4,
    "native_layernorm_nodes": 0,
}


def record(dtype: str) -> dict:
    r = json.loads(json.dumps(RECORD).replace("{dtype}", dtype).replace("{np}", "float32" if dtype == "fp32" else "float16"))
    r["dtype"] = dtype
    return r


def export(out: Path) -> None:
    import torch
    from torch import nn

    from tests.fixtures.make_fixtures import ManualLayerNorm

    class WideNorms(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norms = nn.ModuleList(
                [ManualLayerNorm(WIDTH, 1e-5, v) for v in ("div_sqrt", "rsqrt", "mul_sq", "torch_var")]
            )
            for n in self.norms:  # trained-looking γ/β
                nn.init.normal_(n.weight, 1.0, 0.1)
                nn.init.normal_(n.bias, 0.0, 0.1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            for n in self.norms:
                x = torch.nn.functional.gelu(n(x) * 1.5 + 0.25)
            return x

    torch.manual_seed(0)
    out.mkdir(parents=True, exist_ok=True)
    for dtype in ("fp32", "fp16"):
        m = WideNorms().eval()
        x = torch.randn(2, 16, WIDTH)
        if dtype == "fp16":
            m, x = m.half(), x.half()
        path = out / record(dtype)["file"]
        torch.onnx.export(m, (x,), str(path), opset_version=13, dynamo=False, input_names=["x"], output_names=["y"],
                          dynamic_axes={"x": {0: "batch", 1: "seq"}, "y": {0: "batch", 1: "seq"}})  # fmt: skip
        logging.info("wrote %s", path)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--export", type=Path, help="write the models here (needs torch)")
    ap.add_argument("--models", type=Path, help="where the exported models are")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--dtypes", default="fp32,fp16")
    ap.add_argument("--no-tactic-sources", action="store_true")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.export:
        export(args.export)
        return 0
    import trt_verify
    from fusion.trt.build import trt_version

    trt_verify.fixture_path = lambda rec: args.models / rec["file"]  # the rows' logic, our models
    opts = {"tactic_sources": []} if args.no_tactic_sources else {}
    rows = []
    out = args.out / "trt_verify_wide.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    for dtype in args.dtypes.split(","):
        rows += trt_verify.run_model(record(dtype), ["trt"], opts, trt_version())
        for r in rows:
            r.setdefault("commit", os.environ.get("FUSION_COMMIT", "unknown"))
            r.setdefault("device", trt_verify.device_name())
        out.write_text(json.dumps(rows, indent=1, default=str) + "\n")
    print(trt_verify.table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
