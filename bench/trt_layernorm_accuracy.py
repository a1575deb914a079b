"""Where TensorRT's shipped LayerNorm plugin is accurate: max error against NumPy by width.

    py310 bench/trt_layernorm_accuracy.py --out DIR [--no-tactic-sources]

The fusion's ``trt`` target emits the shipped ``LayerNorm`` v1 plugin on rank-3 tensors
(directly for [B, S, C], or through a [rows, 1, C] view).  It was seen to be exact at 768
columns and off at 32 (bench/results/trt_verify.json), so this measures, per normalized size
C and input shape, the largest error against a float64 NumPy LayerNorm: the table the
target's minimum-width rule is set from.  Rows go to DIR/trt_layernorm_accuracy.json.
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

import numpy as np  # noqa: E402
import onnx  # noqa: E402

LOG = logging.getLogger("trt_layernorm_accuracy")
WIDTHS = (16, 32, 48, 64, 96, 128, 192, 256, 320, 384, 512, 640, 768, 1024, 2048, 4096)
SHAPES = ((1, 1), (1, 7), (4, 16), (64, 1), (1, 64), (8, 125), (512, 1))  # (dim0, dim1) of [dim0, dim1, C]
EPS = 1e-5


def model(cols: int, dtype: str) -> tuple[onnx.ModelProto, np.ndarray, np.ndarray]:
    """The plugin node on [a, b, cols], and its γ and β."""
    from bench_trt_layernorm import ln_model

    m = ln_model(cols, dtype, dims=("a", "b"))
    params = {t.name: onnx.numpy_helper.to_array(t) for t in m.graph.initializer}
    return m, params["gamma"], params["beta"]


def reference(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> np.ndarray:
    x = x.astype(np.float64)
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    return (x - mean) / np.sqrt(var + EPS) * gamma.astype(np.float64) + beta.astype(np.float64)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--no-tactic-sources", action="store_true")
    args = ap.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    from polygraphy.backend.trt import EngineFromBytes, TrtRunner

    from fusion.trt.build import build_engine, trt_version
    from trt_verify import device_name

    opts = {"tactic_sources": []} if args.no_tactic_sources else {}
    rows = []
    rng = np.random.default_rng(0)
    for dtype in ("float32", "float16"):
        for cols in WIDTHS:
            m, gamma, beta = model(cols, dtype)
            try:
                built = build_engine(m, shapes={"x": ((1, 1, cols), (8, 16, cols), (512, 128, cols))},
                                     precision="fp16" if dtype == "float16" else "fp32", **opts)  # fmt: skip
            except Exception as e:  # noqa: BLE001 - record and go on
                rows.append({"dtype": dtype, "cols": cols, "error": f"{type(e).__name__}: {e}"[:300]})
                continue
            with TrtRunner(EngineFromBytes(built.engine)) as runner:
                for a, b in SHAPES:
                    x = (rng.standard_normal((a, b, cols)) * 2 + 0.5).astype(np.float32 if dtype == "float32" else np.float16)
                    y = runner.infer({"x": x})["y"]
                    err = float(np.abs(np.asarray(y, np.float64) - reference(x, gamma, beta)).max())
                    rows.append({"dtype": dtype, "cols": cols, "shape": [a, b, cols], "max_abs_err": err})
                    LOG.info("%s C=%d [%d,%d,C]: %.3g", dtype, cols, a, b, err)
    meta = {"trt_version": trt_version(), "device": device_name(), "commit": os.environ.get("FUSION_COMMIT", "unknown")}
    out = Path(args.out) / "trt_layernorm_accuracy.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"meta": meta, "rows": rows}, indent=1) + "\n")
    worst: dict[tuple, float] = {}
    for r in rows:
        if "max_abs_err" in r:
            k = (r["dtype"], r["cols"])
            worst[k] = max(worst.get(k, 0.0), r["max_abs_err"])
    print("dtype    cols  worst max abs err")
    for (dtype, cols), err in sorted(worst.items()):
        print(f"{dtype:<8} {cols:>5} {err:.3g}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
