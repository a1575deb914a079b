"""A model of SDXL-sized GroupNorms, one per FusedGroupNorm kernel path, for checks inside
TensorRT engines (bench/run_gpu_groupnorm_paths.sh runs the whole thing on the GPU machine).

    python bench/groupnorm_paths.py model DIR     # DIR/gn.onnx (torch export, opset 17), DIR/gn16.onnx
                                                  # (the same in fp16) and their fusions (the groupnorm
                                                  # pass, target plugin): DIR/gn_fused.onnx, DIR/gn16_fused.onnx
    python bench/groupnorm_paths.py layers MODEL --precision P --plugins LIB [--out FILE]
                                                  # (TensorRT) each FusedGroupNorm's output -> the data
                                                  # type its layer reads in the engine, from the inspector
    python bench/groupnorm_paths.py collect DIR --trt-version V [--out FILE] [--device NAME]
                                                  # DIR/verify_{fp32,fp16,fp16_io}.json (and layers_*.json)
                                                  # -> one results file

Four inputs, each through GroupNorm(32) (+ SiLU on two), one per kernel path on an H100: 2 x
320 x 64 x 64 (fp32: the staged kernel), 9 x 640 x 64 x 64 (fp32: the stream path, 40 chunks a
group; fp16: the wide kernel in two 512-thread CTAs an SM), 5 x 320 x 128 x 128 (fp32: the stream
path, 80 chunks; fp16: the wide kernel) and 1 x 320 x 256 x 256 (a VAE decoder's size; the stream
path, 320 / 160 chunks a group: past the 96 partials warp 0 reads ahead).  Three engines: the fp32
model in fp32 and in fp16 (where TensorRT picks each plugin layer's precision), and the fp16
model in fp16 (fp16 inputs: the fp16 kernels).  The original's engine needs TensorRT's
InstanceNormalization plugin, which runs through cuDNN (a stub in our TensorRT 8.5 bundle), so
the check is accuracy only.
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
# b and c at batches whose groups outnumber what an H100 holds at once (fp16's 320 x 128 x 128:
# 132 CTAs of 1024 threads, its 640 x 64 x 64: 264 pairs of 512): the wide path's CTAs load their
# next group as they write, the pair takes K = 48; fp32's stream CTAs take several chunks each
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


def export_model(path: Path, half: bool = False) -> None:
    """The model, in fp16 (weights and inputs) where ``half``."""
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

    dtype = torch.float16 if half else torch.float32
    args = tuple(torch.randn(*s, dtype=dtype) for s in SHAPES.values())
    torch.onnx.export(Blocks().to(dtype), args, str(path), opset_version=17, input_names=list(SHAPES),
                      output_names=list(PATHS), dynamo=False)  # fmt: skip


def make_models(out: Path) -> None:
    import onnx  # noqa: PLC0415

    import fusion  # noqa: PLC0415

    out.mkdir(parents=True, exist_ok=True)
    for name, half in (("gn", False), ("gn16", True)):
        export_model(out / f"{name}.onnx", half)
        result = fusion.run(onnx.load(out / f"{name}.onnx"), ["groupnorm"], target="plugin")
        if result.counts() != {"groupnorm": len(SHAPES)}:
            raise SystemExit(f"{name}: expected {len(SHAPES)} GroupNorm fusions, got {result.counts()}")
        onnx.save(result.model, out / f"{name}_fused.onnx")


def layer_types(model: Path, precision: str, plugins: list[str]) -> dict[str, str]:
    """Each FusedGroupNorm's output -> "fp32" / "fp16", the data type its layer reads in the
    engine TensorRT builds for ``model`` (the engine inspector; its layers carry the nodes' names)."""
    import onnx  # noqa: PLC0415

    from fusion.trt.build import build_engine  # noqa: PLC0415 - TensorRT: the bundle's py310
    from fusion.trt.inspect import inspector_records  # noqa: PLC0415
    from fusion.trt.timing import EngineSession  # noqa: PLC0415

    nodes = {n.name: n.output[0] for n in onnx.load(model, load_external_data=False).graph.node
             if n.op_type == "FusedGroupNorm"}  # fmt: skip
    session = EngineSession(build_engine(model, plugins=plugins, precision=precision,
                                         tactic_sources=["cublas", "cublas_lt"]))  # fmt: skip
    try:
        records = inspector_records(session.trt, session.engine) or []
    finally:
        session.close()
    types = {}
    for r in records:
        if r.get("Name") in nodes:
            fmt = str((r.get("Inputs") or [{}])[0].get("Format/Datatype", ""))
            types[nodes[r["Name"]]] = "fp16" if "FP16" in fmt or "Half" in fmt else "fp32"
    if len(types) != len(nodes):
        raise SystemExit(f"the engine inspector named {sorted(types)} of the plugin layers {sorted(nodes)}")
    return types


# the runs: (fp32 or fp16 model, engine precision)
RUNS = {"fp32": ("gn", "fp32"), "fp16": ("gn", "fp16"), "fp16_io": ("gn16", "fp16")}


def collect(src: Path, trt_version: str, out: Path, device: str | None = None) -> dict:
    """The verify reports (fp16_io where present) as one results file, each output with the
    precision its plugin layer ran in: from src/layers_<run>.json where there is one (the engine
    inspector), else fp32 where the output's error equals the fp32 build's of the same model."""
    reports = {r: json.loads((src / f"verify_{r}.json").read_text()) for r in RUNS
               if r != "fp16_io" or (src / f"verify_{r}.json").exists()}  # fmt: skip
    fp32_err = {c["output"]: c["max_abs"] for c in reports["fp32"]["checks"]}
    runs = {}
    for run, report in reports.items():
        layers_file = src / f"layers_{run}.json"
        layers = json.loads(layers_file.read_text()) if layers_file.exists() else {}
        outputs = []
        for c in report["checks"]:
            same_as_fp32 = RUNS[run][0] == RUNS["fp32"][0] and c["max_abs"] == fp32_err.get(c["output"])
            ran = layers.get(c["output"]) or ("fp32" if RUNS[run][1] == "fp32" or same_as_fp32 else "fp16")
            seen_by = "inspector" if c["output"] in layers else "error"
            outputs.append({"output": c["output"], "plugin_ran_in": ran, "seen_by": seen_by,
                            "kernel": PATHS[c["output"]][ran], "max_abs": c["max_abs"], "atol": c["atol"],
                            "rtol": c["rtol"], "passed": c["passed"]})  # fmt: skip
        model, precision = RUNS[run]
        runs[run] = {"model": model, "precision": precision, "passed": report["passed"], "max_abs": report["max_abs"],
                     "outputs": outputs}  # fmt: skip
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
    la = sub.add_parser("layers")
    la.add_argument("model", type=Path)
    la.add_argument("--precision", choices=("fp32", "fp16"), required=True)
    la.add_argument("--plugins", nargs="+", default=[])
    la.add_argument("--out", type=Path)
    c = sub.add_parser("collect")
    c.add_argument("dir", type=Path)
    c.add_argument("--trt-version", required=True)
    c.add_argument("--out", type=Path, default=RESULTS)
    c.add_argument("--device", help="the GPU's name (default: torch's)")
    args = ap.parse_args(argv)
    if args.cmd == "model":
        make_models(args.dir)
    elif args.cmd == "layers":
        types = layer_types(args.model, args.precision, args.plugins)
        if args.out:
            args.out.write_text(json.dumps(types, indent=1))
        print(json.dumps(types))
    else:
        data = collect(args.dir, args.trt_version, args.out, args.device)
        print(json.dumps({p: (r["passed"], r["max_abs"]) for p, r in data["runs"].items()}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
