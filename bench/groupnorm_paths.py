"""A model of SDXL-sized GroupNorms, one per FusedGroupNorm kernel path, for checks inside
TensorRT engines (bench/run_gpu_groupnorm_paths.sh runs the whole thing on the GPU machine).

    python bench/groupnorm_paths.py model DIR     # DIR/gn.onnx (torch export, opset 17) and
                                                  # DIR/gn_fused.onnx (the groupnorm pass, target plugin)
    python bench/groupnorm_paths.py collect DIR --trt-version V [--out FILE] [--device NAME]
                                                  # DIR/verify_{fp32,fp16}.json -> one results file

Four inputs, each through GroupNorm(32) (+ SiLU on two), one per kernel path on an H100: 2 x
320 x 64 x 64 (fp32: the staged kernel), 9 x 640 x 64 x 64 (fp32: the wide kernel; fp16: the
wide kernel in two 512-thread CTAs an SM), 5 x 320 x 128 x 128 (fp32: a cluster of 8 CTAs, its
640 KB groups past the shared memory; fp16: the wide kernel) and 1 x 320 x 256 x 256 (a VAE decoder's
size; fp32: the loop path, its groups past a cluster; fp16: a cluster).  The original's engine
needs TensorRT's InstanceNormalization plugin, which runs through cuDNN (a stub in our TensorRT
8.5 bundle), so the check is accuracy only.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.bench_kernels import commit_info  # noqa: E402
from fusion.plugins.library import groupnorm_launch_config  # noqa: E402

RESULTS = REPO / "bench" / "results" / "trt_groupnorm_paths.json"
# b and c at batches whose groups outnumber the CTAs the wide path runs on an H100 (132 of 1024
# threads; fp16's 640 x 64 x 64: 264 of 512), so each CTA loads its next group as it writes
SHAPES = {"a": (2, 320, 64, 64), "b": (9, 640, 64, 64), "c": (5, 320, 128, 128), "d": (1, 320, 256, 256)}
SILU = {"a": True, "b": False, "c": True, "d": False}
GROUPS = 32
H100 = (132, 232448)  # (SMs, opt-in shared memory per CTA): the device groupnorm_plan is asked for
DTYPES = {"fp32": "float32", "fp16": "float16"}


def h100_kernel(shape: tuple[int, ...], precision: str) -> str:
    """The kernel the plugin's launch policy picks on an H100 for this input and precision."""
    n, c, h, w = shape
    return groupnorm_launch_config(DTYPES[precision], n, c, GROUPS, h * w, True, *H100)[0]


# the kernel each output's GroupNorm takes on an H100, by the plugin layer's precision
PATHS = {f"y{k}": {p: h100_kernel(shape, p) for p in DTYPES} for k, shape in SHAPES.items()}


def export_model(path: Path) -> None:
    import torch  # noqa: PLC0415 - the GPU machine's python3 has it

    torch.manual_seed(0)

    class Blocks(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norms = torch.nn.ModuleList(torch.nn.GroupNorm(GROUPS, s[1]) for s in SHAPES.values())
            for g in self.norms:
                torch.nn.init.uniform_(g.weight, 0.5, 1.5)
                torch.nn.init.uniform_(g.bias, -0.5, 0.5)

        def forward(self, *xs):  # noqa: ANN002, ANN202
            silu = torch.nn.functional.silu
            return tuple(silu(g(x)) if s else g(x) for g, x, s in zip(self.norms, xs, SILU.values(), strict=True))

    args = tuple(torch.randn(*s) for s in SHAPES.values())
    torch.onnx.export(Blocks(), args, str(path), opset_version=17, input_names=list(SHAPES),
                      output_names=list(PATHS), dynamo=False)  # fmt: skip


def make_models(out: Path) -> None:
    import onnx  # noqa: PLC0415

    import fusion  # noqa: PLC0415

    out.mkdir(parents=True, exist_ok=True)
    export_model(out / "gn.onnx")
    result = fusion.run(onnx.load(out / "gn.onnx"), ["groupnorm"], target="plugin")
    if result.counts() != {"groupnorm": len(SHAPES)}:
        raise SystemExit(f"expected {len(SHAPES)} GroupNorm fusions, got {result.counts()}")
    onnx.save(result.model, out / "gn_fused.onnx")


def collect(src: Path, trt_version: str, out: Path, device: str | None = None) -> dict:
    """The two verify reports as one results file.  In an fp16 build TensorRT picks each plugin
    layer's precision: an output whose error equals the fp32 build's ran in fp32 there."""
    reports = {p: json.loads((src / f"verify_{p}.json").read_text()) for p in ("fp32", "fp16")}
    fp32_err = {c["output"]: c["max_abs"] for c in reports["fp32"]["checks"]}
    runs = {}
    for precision, report in reports.items():
        outputs = []
        for c in report["checks"]:
            ran = "fp32" if precision == "fp32" or c["max_abs"] == fp32_err.get(c["output"]) else "fp16"
            outputs.append({"output": c["output"], "plugin_ran_in": ran, "kernel": PATHS[c["output"]][ran],
                            "max_abs": c["max_abs"], "atol": c["atol"], "rtol": c["rtol"], "passed": c["passed"]})
        runs[precision] = {"passed": report["passed"], "max_abs": report["max_abs"], "outputs": outputs}
    data = {"meta": {**commit_info(), "device": device or _device(), "trt_version": trt_version,
                     "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                     "shapes": {k: list(v) for k, v in SHAPES.items()}, "note": __doc__.split("\n\n")[2].replace("\n", " ")},
            "runs": runs}  # fmt: skip
    out.write_text(json.dumps(data, indent=1))
    return data


def _device() -> str:
    try:
        import torch  # noqa: PLC0415

        return torch.cuda.get_device_name()
    except Exception:  # noqa: BLE001 - the name is a label, not a requirement
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("model").add_argument("dir", type=Path)
    c = sub.add_parser("collect")
    c.add_argument("dir", type=Path)
    c.add_argument("--trt-version", required=True)
    c.add_argument("--out", type=Path, default=RESULTS)
    c.add_argument("--device", help="the GPU's name (default: torch's)")
    args = ap.parse_args(argv)
    if args.cmd == "model":
        make_models(args.dir)
    else:
        data = collect(args.dir, args.trt_version, args.out, args.device)
        print(json.dumps({p: (r["passed"], r["max_abs"]) for p, r in data["runs"].items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
