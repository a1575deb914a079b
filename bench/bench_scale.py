#!/usr/bin/env python3
"""Scale: a model with >= 4 GB of external weights fused by the CLI in little memory, and
fusion time against the number of layers.

    python bench/bench_scale.py [--gib 4.2] [--hidden 4096] [--layers 16 64 256] [--out bench/results/scale.json]

1. Memory: a transformer-like stack (per layer: LayerNorm, FC H->4H + GELU, FC 4H->H,
   residual add) with H=4096 whose weights (real bytes, a repeating pattern written in 64 MiB
   chunks) add up to ``--gib`` GiB in one external file, generated in a temporary directory.
   ``python -m fusion fuse`` runs on it in a subprocess; its peak RSS comes from
   ``os.wait4`` in a small launcher process that forks it (see cli_peak) and its wall time
   from the clock.  The output's
   external data file must hold every weight (its size is checked, and a sample of tensors is
   compared byte for byte with the input's).
2. Linearity: the same stack with H=64 at 1x, 4x and 16x the layers.  The fusion itself is
   timed in-process (``fusion.run`` on a loaded ModelProto, median of rounds, validation
   included) and the whole CLI in a subprocess; the ratios t(4x)/t(1x) and t(16x)/t(1x)
   should be near 4 and 16 (below: fixed costs).

Results go to bench/results/scale.json with the commit and the machine: "memory" (1),
"rows" (2, one per size) and "linearity" (2, the ratios).  The temporary
directory (~2x ``--gib`` of disk) is removed at the end.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
CHUNK = 64 << 20
# Named: with no passes named the plugin target fuses nothing (fusion/passes/defaults.py).
PASSES = ["layernorm", "rmsnorm", "gemm"]


class Weights:
    """Initializers of one model; big ones go to one external file, written as they come."""

    def __init__(self, directory: Path | None, location: str = "weights.bin", threshold: int = 1 << 20):
        self.directory, self.location, self.threshold = directory, location, threshold
        self.initializers: list[TensorProto] = []
        self.offset = 0
        self._f = open(directory / location, "wb") if directory else None
        block = np.random.default_rng(0).standard_normal(CHUNK // 4).astype(np.float32) * 0.02
        self._pattern = block.tobytes()

    def add(self, name: str, shape: tuple[int, ...], value: np.ndarray | None = None) -> str:
        n = int(np.prod(shape)) * 4
        if self._f is None or n < self.threshold:
            if value is None:
                value = np.random.default_rng(len(self.initializers)).standard_normal(shape).astype(np.float32) * 0.02
            self.initializers.append(numpy_helper.from_array(value.astype(np.float32), name))
            return name
        pad = (-self.offset) % 4096
        self._f.write(b"\0" * pad)
        self.offset += pad
        left = n
        while left:  # real bytes, a repeating pattern
            k = min(left, CHUNK)
            self._f.write(self._pattern[:k])
            left -= k
        t = TensorProto(name=name, data_type=TensorProto.FLOAT, dims=list(shape), data_location=TensorProto.EXTERNAL)
        for key, v in (("location", self.location), ("offset", str(self.offset)), ("length", str(n))):
            e = t.external_data.add()
            e.key, e.value = key, v
        self.offset += n
        self.initializers.append(t)
        return name

    def close(self) -> None:
        if self._f:
            self._f.close()


def stack(layers: int, hidden: int, weights: Weights, opset: int = 13) -> onnx.ModelProto:
    """``layers`` x (LayerNorm -> FC 4H + GELU -> FC H -> residual), decomposed as exporters write it."""
    nodes: list[onnx.NodeProto] = []
    k = [0]

    def op(op_type: str, *inputs: str, **attrs) -> str:
        k[0] += 1
        out = f"{op_type.lower()}_{k[0]}"
        nodes.append(helper.make_node(op_type, list(inputs), [out], name=f"l{k[0]}/{op_type}", **attrs))
        return out

    def scalar(name: str, v: float) -> str:
        return weights.add(name, (), np.array(v, np.float32))

    two, eps, half, one, sqrt2 = scalar("two", 2.0), scalar("eps", 1e-5), scalar("half", 0.5), scalar("one", 1.0), scalar("sqrt2", math.sqrt(2))
    x = "x"
    for i in range(layers):
        mean = op("ReduceMean", x, axes=[-1])
        d = op("Sub", x, mean)
        var = op("ReduceMean", op("Pow", d, two), axes=[-1])
        n = op("Div", d, op("Sqrt", op("Add", var, eps)))
        ln = op("Add", op("Mul", n, weights.add(f"ln{i}.g", (hidden,), np.ones(hidden, np.float32))),
                weights.add(f"ln{i}.b", (hidden,), np.zeros(hidden, np.float32)))
        h = op("Add", op("MatMul", ln, weights.add(f"fc{i}.w1", (hidden, 4 * hidden))), weights.add(f"fc{i}.b1", (4 * hidden,)))
        h = op("Mul", op("Mul", h, op("Add", op("Erf", op("Div", h, sqrt2)), one)), half)
        h = op("Add", op("MatMul", h, weights.add(f"fc{i}.w2", (4 * hidden, hidden))), weights.add(f"fc{i}.b2", (hidden,)))
        x = op("Add", x, h)
    g = helper.make_graph(
        nodes, "stack",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "S", hidden])],
        [helper.make_tensor_value_info(x, TensorProto.FLOAT, ["B", "S", hidden])],
        weights.initializers,
    )
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


# Forks the CLI and reports its rusage.  Measuring from this (big) process would not do: a
# child's ru_maxrss starts from the RSS of the process it was forked from (on Linux the mm it
# leaves at exec counts), so the launcher is a fresh, small interpreter.
_LAUNCHER = """
import json, os, sys
pid = os.fork()
if pid == 0:
    os.execv(sys.executable, [sys.executable, "-m", "fusion"] + sys.argv[2:])
_, status, usage = os.wait4(pid, 0)
with open(sys.argv[1], "w") as f:
    json.dump({"rc": os.waitstatus_to_exitcode(status), "maxrss_kib": usage.ru_maxrss}, f)
"""


def cli_peak(args: list[str]) -> dict:
    """Run ``python -m fusion *args``: exit code, output, wall time and the peak RSS of that
    process alone.  Its output goes to files: a pipe nobody reads would block it."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err, tempfile.NamedTemporaryFile("r") as usage:
        t = time.perf_counter()
        subprocess.run([sys.executable, "-c", _LAUNCHER, usage.name, *args], stdout=out, stderr=err,
                       env=dict(os.environ, PYTHONPATH=str(ROOT)), check=False)
        wall = time.perf_counter() - t
        u = json.loads(open(usage.name).read())
        out.seek(0)
        err.seek(0)
        return {"rc": u["rc"], "stdout": out.read().decode(), "stderr": err.read().decode(), "wall_s": wall,
                "peak_rss_mib": u["maxrss_kib"] / 1024}


def _digest(path: Path, offset: int, length: int, n: int = 1 << 20) -> str:
    with open(path, "rb") as f:
        h = hashlib.sha256()
        for start in (offset, offset + max(0, length - n)):
            f.seek(start)
            h.update(f.read(min(n, length)))
    return h.hexdigest()


def _ext(t: TensorProto) -> dict:
    return {e.key: e.value for e in t.external_data}


def memory(tmp: Path, gib: float, hidden: int) -> dict:
    per_layer = 2 * hidden * 4 * hidden * 4  # two FC weights, fp32
    layers = max(1, math.ceil(gib * (1 << 30) / per_layer))
    src_dir = tmp / "big"
    src_dir.mkdir()
    t = time.perf_counter()
    w = Weights(src_dir)
    model = stack(layers, hidden, w)
    w.close()
    onnx.save(model, str(src_dir / "model.onnx"))
    gen_s = time.perf_counter() - t
    weights_bytes = (src_dir / "weights.bin").stat().st_size
    out = tmp / "out" / "fused.onnx"
    out.parent.mkdir()
    r = cli_peak(["fuse", str(src_dir / "model.onnx"), "-o", str(out), "--passes", ",".join(PASSES), "--json"])
    if r["rc"] != 0:
        raise SystemExit(f"fuse failed: {r['stderr']}")
    report = json.loads(r["stdout"])
    data = out.with_name(out.name + ".data")
    fused = onnx.load(str(out), load_external_data=False)
    src = {t.name: t for t in model.graph.initializer}
    checked = 0
    for t in fused.graph.initializer:  # the big weights: same bytes, now in the output's own file
        if t.data_location != TensorProto.EXTERNAL:
            continue
        a, b = _ext(src[t.name]), _ext(t)
        assert a["length"] == b["length"], t.name
        assert _digest(src_dir / a["location"], int(a["offset"]), int(a["length"])) == _digest(
            out.parent / b["location"], int(b["offset"]), int(b["length"])), t.name
        checked += 1
    counts: dict[str, int] = {}
    for f in report.get("fusions", []):
        counts[f["rule"]] = counts.get(f["rule"], 0) + 1
    return {
        "layers": layers,
        "hidden": hidden,
        "nodes": len(model.graph.node),
        "external_weights_gib": round(weights_bytes / (1 << 30), 3),
        "model_file_kib": round((src_dir / "model.onnx").stat().st_size / 1024, 1),
        "generate_s": round(gen_s, 1),
        "fuse_cli_wall_s": round(r["wall_s"], 2),
        "fuse_cli_peak_rss_mib": round(r["peak_rss_mib"], 1),
        "output_data_gib": round(data.stat().st_size / (1 << 30), 3),
        "output_tensors_compared": checked,
        "fusions": counts,
    }


def linearity(tmp: Path, base_layers: int, hidden: int, rounds: int) -> dict:
    import gc

    import fusion

    models, paths, times = {}, {}, {}
    for mult in (1, 4, 16):
        models[mult] = stack(base_layers * mult, hidden, Weights(None))
        paths[mult] = tmp / f"lin{mult}.onnx"
        onnx.save(models[mult], str(paths[mult]))
        times[mult] = []
    counts = {}
    # Round-robin over the sizes, so a change in the machine's load hits all of them alike.
    for r in range(rounds + 1):
        for mult, model in models.items():
            gc.collect()
            t = time.perf_counter()
            result = fusion.run(model, PASSES)
            if r:  # the first round warms up
                times[mult].append(time.perf_counter() - t)
            counts[mult] = result.counts()
    rows = []
    for mult, model in models.items():
        argv = ["fuse", str(paths[mult]), "-o", str(tmp / f"lin{mult}.fused.onnx"), "--passes", ",".join(PASSES)]
        cli = [cli_peak(argv) for _ in range(3)]
        med = statistics.median(times[mult])
        rows.append({
            "multiple": mult,
            "layers": base_layers * mult,
            "nodes": len(model.graph.node),
            "fusions": counts[mult],
            "fuse_median_s": round(med, 4),
            "fuse_us_per_node": round(med / len(model.graph.node) * 1e6, 1),
            "cli_wall_s": round(statistics.median(c["wall_s"] for c in cli), 3),
            "cli_peak_rss_mib": round(max(c["peak_rss_mib"] for c in cli), 1),
        })
    t1, c1 = rows[0]["fuse_median_s"], rows[0]["cli_wall_s"]
    return {
        "hidden": hidden,
        "rounds": rounds,
        "rows": rows,
        "ratio_fuse_4x": round(rows[1]["fuse_median_s"] / t1, 2),
        "ratio_fuse_16x": round(rows[2]["fuse_median_s"] / t1, 2),
        "ratio_fuse_16x_over_4x": round(rows[2]["fuse_median_s"] / rows[1]["fuse_median_s"], 2),
        # (the CLI's include a constant: interpreter start, imports, onnx's schema registry)
        "ratio_cli_4x": round(rows[1]["cli_wall_s"] / c1, 2),
        "ratio_cli_16x": round(rows[2]["cli_wall_s"] / c1, 2),
    }


def machine() -> dict:
    import onnxruntime

    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
        dirty = bool(subprocess.run(["git", "status", "--porcelain", "--", "fusion", "patterns"], capture_output=True, text=True, cwd=ROOT).stdout.strip())
    except OSError:
        commit, dirty = "", False
    cpu = ""
    try:
        cpu = next(ln.split(":", 1)[1].strip() for ln in open("/proc/cpuinfo") if ln.startswith("model name"))
    except (OSError, StopIteration):
        pass
    mem = ""
    try:
        mem = next(ln.split(":", 1)[1].strip() for ln in open("/proc/meminfo") if ln.startswith("MemTotal"))
    except (OSError, StopIteration):
        pass
    return {
        "commit": commit,
        "library_modified_since_commit": dirty,
        "platform": platform.platform(),
        "cpu": cpu,
        "cpus": os.cpu_count(),
        "memory": mem,
        "python": platform.python_version(),
        "onnx": onnx.__version__,
        "onnxruntime": onnxruntime.__version__,
        "numpy": np.__version__,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gib", type=float, default=4.2, help="external weights of the memory model (GiB)")
    ap.add_argument("--hidden", type=int, default=4096, help="hidden size of the memory model")
    ap.add_argument("--layers", type=int, default=24, help="layers at 1x for the linearity runs (then 4x, 16x)")
    ap.add_argument("--lin-hidden", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--tmp", help="directory for the generated models (default: a new temporary one)")
    ap.add_argument("--out", default=str(ROOT / "bench" / "results" / "scale.json"))
    args = ap.parse_args()

    tmp = Path(tempfile.mkdtemp(prefix="fusion-scale-", dir=args.tmp))
    try:
        result = {"machine": machine()}
        result["memory"] = memory(tmp, args.gib, args.hidden)
        print(json.dumps(result["memory"], indent=1), flush=True)
        shutil.rmtree(tmp / "big")
        shutil.rmtree(tmp / "out")
        lin = linearity(tmp, args.layers, args.lin_hidden, args.rounds)
        result["rows"] = lin.pop("rows")  # top level: notebooks/03_performance.ipynb plots "rows"
        result["linearity"] = lin
        print(json.dumps(result["rows"], indent=1), json.dumps(lin, indent=1), flush=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    mem = result["memory"]
    result["checks"] = {
        "weights_at_least_4_gib": mem["external_weights_gib"] >= 4.0,
        "peak_rss_under_512_mib": mem["fuse_cli_peak_rss_mib"] < 512,
        "output_data_holds_the_weights": mem["output_data_gib"] >= mem["external_weights_gib"],
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps(result["checks"]), "->", args.out)


if __name__ == "__main__":
    main()
