"""Our TRT8 plugins (libfusion_plugins_trt8.so) inside real TensorRT 8 engines.

    python bench/trt8_plugins.py models DIR                 # decomposed + fused ONNX models (needs fusion)
    python bench/trt8_plugins.py run --lib LIB --models DIR --out JSON [--commit SHA] [--only NAME]

``models`` writes, for each case (FusedLayerNorm, FusedRMSNorm, FusedFC with no activation,
ReLU and erf-GELU; fp32 and fp16), a small decomposed ONNX model with dynamic batch and
sequence dims and the model ``fusion.fuse(model, PASSES, target="plugin")`` makes of it (custom node
plus its ONNX function body).  ``run`` (TensorRT 8.x, onnxruntime, polygraphy: the bundle's
py310) imports tensorrt, loads the plugin library with ctypes (it registers its creators on
load), parses each fused model with the ONNX parser, checks that every fused node became one
of our plugin layers, builds an engine with one dynamic profile (tactic sources CUBLAS and
CUBLAS_LT only; fp16 cases pin the plugin layers to fp16), runs it at the profile's min, opt
and max shapes against onnxruntime running the *original* model, serializes the engine, and
deserializes and runs it again in a fresh process that only imports tensorrt and loads the
library.  Rows go to JSON after every case.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

import numpy as np

REPO = Path(__file__).resolve().parent.parent
LOG = logging.getLogger("trt8_plugins")

HIDDEN = 256  # norm width and FC input features
FC_OUT = 512
# (batch, seq) at the profile's min / opt / max
PROFILE = ((1, 1), (4, 32), (8, 128))
# Max abs error allowed against onnxruntime on the fp32 original (fp16: fp16 I/O and weights).
TOLERANCE = {"fp32": 1e-4, "fp16": 2e-2}
# Named: with no passes named the plugin target fuses nothing (fusion/passes/defaults.py).
PASSES = ["layernorm", "rmsnorm", "gemm"]
CASES = [
    ("layernorm", "none"),
    ("rmsnorm", "none"),
    ("fc", "none"),
    ("fc", "relu"),
    ("fc", "gelu"),
]


def case_name(kind: str, act: str, dtype: str) -> str:
    return f"{kind}{'' if act == 'none' else '_' + act}_{dtype}"


# --------------------------------------------------------------------------- models


def decomposed_model(kind: str, act: str, dtype: str, seed: int = 0):
    """X[batch, seq, HIDDEN] -> the decomposed chain -> Y, opset 13, weights of `dtype`."""
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    np_t = np.float16 if dtype == "fp16" else np.float32
    elem = TensorProto.FLOAT16 if dtype == "fp16" else TensorProto.FLOAT
    nodes, inits = [], []

    def const(name: str, value) -> str:
        inits.append(numpy_helper.from_array(np.asarray(value, dtype=np_t), name))
        return name

    def node(op: str, ins: list[str], out: str, **attrs) -> str:
        nodes.append(helper.make_node(op, ins, [out], name=out, **attrs))
        return out

    out_dim = HIDDEN
    if kind == "layernorm":
        mean = node("ReduceMean", ["X"], "mean", axes=[-1])
        d = node("Sub", ["X", mean], "d")
        sq = node("Pow", [d, const("two", 2.0)], "sq")
        var = node("ReduceMean", [sq], "var", axes=[-1])
        ve = node("Add", [var, const("eps", 1e-5)], "ve")
        sd = node("Sqrt", [ve], "sd")
        n = node("Div", [d, sd], "n")
        g = node("Mul", [n, const("gamma", 1 + 0.1 * rng.standard_normal(HIDDEN))], "g")
        node("Add", [g, const("beta", 0.1 * rng.standard_normal(HIDDEN))], "Y")
    elif kind == "rmsnorm":
        sq = node("Pow", ["X", const("two", 2.0)], "sq")
        ms = node("ReduceMean", [sq], "ms", axes=[-1])
        ve = node("Add", [ms, const("eps", 1e-6)], "ve")
        sd = node("Sqrt", [ve], "sd")
        n = node("Div", ["X", sd], "n")
        node("Mul", [const("gamma", 1 + 0.1 * rng.standard_normal(HIDDEN)), n], "Y")
    else:
        out_dim = FC_OUT
        w = const("W", rng.standard_normal((HIDDEN, FC_OUT)) / np.sqrt(HIDDEN))
        mm = node("MatMul", ["X", w], "mm")
        y = "Y" if act == "none" else "y"
        node("Add", [mm, const("bias", 0.1 * rng.standard_normal(FC_OUT))], y)
        if act == "relu":
            node("Relu", [y], "Y")
        elif act == "gelu":  # erf form, as torch exports nn.GELU()
            s = node("Div", [y, const("sqrt2", np.sqrt(2.0))], "s")
            e = node("Erf", [s], "e")
            p = node("Add", [e, const("one", 1.0)], "p")
            m = node("Mul", [y, p], "m")
            node("Mul", [m, const("half", 0.5)], "Y")
    graph = helper.make_graph(
        nodes,
        case_name(kind, act, dtype),
        [helper.make_tensor_value_info("X", elem, ["batch", "seq", HIDDEN])],
        [helper.make_tensor_value_info("Y", elem, ["batch", "seq", out_dim])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def make_models(out: Path) -> list[str]:
    sys.path.insert(0, str(REPO))
    import onnx

    import fusion

    out.mkdir(parents=True, exist_ok=True)
    names = []
    for kind, act in CASES:
        for dtype in ("fp32", "fp16"):
            name = case_name(kind, act, dtype)
            orig = decomposed_model(kind, act, dtype)
            fused = fusion.fuse(orig, PASSES, target="plugin")
            custom = [n.op_type for n in fused.graph.node if n.domain == "trt.plugins"]
            if len(custom) != 1:
                raise SystemExit(f"{name}: expected one fused node, got {[n.op_type for n in fused.graph.node]}")
            onnx.save(orig, str(out / f"{name}.orig.onnx"))
            onnx.save(fused, str(out / f"{name}.fused.onnx"))
            names.append(name)
            LOG.info("%s: %s", name, custom[0])
    return names


# --------------------------------------------------------------------------- TensorRT


def load_plugins(lib: Path) -> list[str]:
    """Import TensorRT first (libnvinfer must be loaded), then the library: it registers
    its creators from a load-time constructor.  Returns our creators as registered."""
    import tensorrt as trt

    ctypes.CDLL(str(lib))
    creators = trt.get_plugin_registry().plugin_creator_list
    return sorted(f"{c.name}/{c.plugin_version}/{c.plugin_namespace}" for c in creators if c.plugin_namespace == "fusion")


def shapes(width: int) -> list[tuple[int, int, int]]:
    return [(b, s, width) for b, s in PROFILE]


def build(fused_path: Path, dtype: str, logger) -> tuple[bytes | None, dict[str, Any]]:
    import tensorrt as trt

    info: dict[str, Any] = {}
    builder = trt.Builder(logger)
    network = builder.create_network(1 << int(trt.NetworkDefinitionCreationFlag.EXPLICIT_BATCH))
    parser = trt.OnnxParser(network, logger)
    if not parser.parse(fused_path.read_bytes()):
        info["parse_error"] = "; ".join(str(parser.get_error(i)) for i in range(parser.num_errors))
        return None, info
    plugin_layers = []
    for i in range(network.num_layers):
        layer = network.get_layer(i)
        if layer.type == trt.LayerType.PLUGIN_V2:
            layer.__class__ = trt.IPluginV2Layer
            plugin = layer.plugin
            plugin_layers.append(f"{plugin.plugin_type}/{plugin.plugin_version}/{plugin.plugin_namespace}")
            if dtype == "fp16":
                layer.precision = trt.float16
                layer.set_output_type(0, trt.float16)
    info["network_layers"] = network.num_layers
    info["plugin_layers"] = plugin_layers
    config = builder.create_builder_config()
    config.set_memory_pool_limit(trt.MemoryPoolType.WORKSPACE, 1 << 30)
    config.set_tactic_sources(1 << int(trt.TacticSource.CUBLAS) | 1 << int(trt.TacticSource.CUBLAS_LT))
    if dtype == "fp16":
        config.set_flag(trt.BuilderFlag.FP16)
        config.set_flag(trt.BuilderFlag.OBEY_PRECISION_CONSTRAINTS)
    profile = builder.create_optimization_profile()
    x = network.get_input(0)
    mn, opt, mx = shapes(x.shape[-1])
    profile.set_shape(x.name, mn, opt, mx)
    config.add_optimization_profile(profile)
    t = time.perf_counter()
    blob = builder.build_serialized_network(network, config)
    info["build_s"] = round(time.perf_counter() - t, 2)
    return (bytes(blob) if blob is not None else None), info


def run_engine(blob: bytes, feeds: list[np.ndarray]) -> list[np.ndarray]:
    """Y for each X, through polygraphy's runner (device buffers, shapes set per feed)."""
    import tensorrt as trt
    from polygraphy.backend.trt import TrtRunner

    logger = trt.Logger(trt.Logger.WARNING)
    runtime = trt.Runtime(logger)  # kept alive while the engine runs
    engine = runtime.deserialize_cuda_engine(blob)
    if engine is None:
        raise RuntimeError("deserialize_cuda_engine returned None")
    outs = []
    with TrtRunner(engine) as runner:
        for x in feeds:
            outs.append(np.array(runner.infer({"X": x})["Y"], copy=True))
    return outs


def as_fp32(model):
    """The same model computed in fp32: fp16 weights and I/O widened (exactly)."""
    import onnx
    from onnx import TensorProto, numpy_helper

    model = onnx.ModelProto.FromString(model.SerializeToString())
    for i, t in enumerate(model.graph.initializer):
        if t.data_type == TensorProto.FLOAT16:
            model.graph.initializer[i].CopyFrom(numpy_helper.from_array(numpy_helper.to_array(t).astype(np.float32), t.name))
    for v in list(model.graph.input) + list(model.graph.output):
        if v.type.tensor_type.elem_type == TensorProto.FLOAT16:
            v.type.tensor_type.elem_type = TensorProto.FLOAT
    return model


def reference(orig_path: Path, feeds: list[np.ndarray]) -> list[np.ndarray]:
    """The original (decomposed) model on onnxruntime's CPU provider, graph optimizations
    off; an fp16 model is computed in fp32 on the same (fp16) values."""
    import onnx
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    model = as_fp32(onnx.load(str(orig_path)))
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return [sess.run(None, {"X": x.astype(np.float32)})[0] for x in feeds]


def make_feeds(width: int, dtype: str, seed: int = 1) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    np_t = np.float16 if dtype == "fp16" else np.float32
    # A row offset keeps the norms honest about large means.
    return [(rng.standard_normal(s) + 0.5).astype(np_t) for s in shapes(width)]


def max_err(got: list[np.ndarray], want: list[np.ndarray]) -> list[float]:
    return [float(np.max(np.abs(g.astype(np.float64) - w.astype(np.float64)))) for g, w in zip(got, want)]


def reload_child(args: argparse.Namespace) -> int:
    """The fresh process: only tensorrt and the library, then the serialized engine."""
    data = np.load(args.feeds)
    feeds = [data[k] for k in sorted(data.files)]
    creators = load_plugins(Path(args.lib))
    outs = run_engine(Path(args.engine).read_bytes(), feeds)
    np.savez(args.result, *outs)
    print(json.dumps({"creators": creators}))
    return 0


def run_case(name: str, models: Path, lib: Path, work: Path, logger) -> dict[str, Any]:
    dtype = name.rsplit("_", 1)[1]
    orig, fused = models / f"{name}.orig.onnx", models / f"{name}.fused.onnx"
    import onnx

    fm = onnx.load(str(fused), load_external_data=False)
    custom = [n.op_type for n in fm.graph.node if n.domain == "trt.plugins"]
    width = fm.graph.input[0].type.tensor_type.shape.dim[-1].dim_value
    row: dict[str, Any] = {"case": name, "precision": dtype, "fused_nodes": custom,
                           "shapes": [list(s) for s in shapes(width)]}  # fmt: skip
    blob, info = build(fused, dtype, logger)
    row.update(info)
    row["built"] = blob is not None
    want_layers = sorted(f"{op}/1/fusion" for op in custom)
    row["all_fused_nodes_are_our_plugins"] = sorted(info.get("plugin_layers", [])) == want_layers
    if blob is None:
        row["passed"] = False
        return row
    feeds = make_feeds(width, dtype)
    ref = reference(orig, feeds)
    errs = max_err(run_engine(blob, feeds), ref)
    tol = TOLERANCE[dtype]
    row["max_abs_err"] = {"min": errs[0], "opt": errs[1], "max": errs[2]}
    row["passed_build_process"] = all(e <= tol for e in errs)
    engine = work / f"{name}.engine"
    engine.write_bytes(blob)
    row["engine_bytes"] = len(blob)
    npz, res = work / f"{name}.feeds.npz", work / f"{name}.out.npz"
    np.savez(npz, *feeds)
    proc = subprocess.run([sys.executable, __file__, "reload", "--lib", str(lib), "--engine", str(engine),
                           "--feeds", str(npz), "--result", str(res)], capture_output=True, text=True,
                          timeout=300)  # fmt: skip
    if proc.returncode != 0:
        row["reload_error"] = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
        row["passed"] = False
        return row
    back = np.load(res)
    reload_errs = max_err([back[k] for k in sorted(back.files)], ref)
    row["reload_max_abs_err"] = {"min": reload_errs[0], "opt": reload_errs[1], "max": reload_errs[2]}
    row["reload_creators"] = json.loads(proc.stdout.strip().splitlines()[-1])["creators"]
    row["passed_reload"] = all(e <= tol for e in reload_errs)
    row["tolerance"] = tol
    row["passed"] = bool(row["all_fused_nodes_are_our_plugins"] and row["passed_build_process"] and row["passed_reload"])
    return row


def device_name() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=30).stdout.strip()  # fmt: skip
        return out.splitlines()[0] if out else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def run_all(args: argparse.Namespace) -> int:
    import tensorrt as trt

    lib = Path(args.lib).resolve()
    models = Path(args.models)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="trt8_plugins_"))
    creators = load_plugins(lib)
    logger = trt.Logger(trt.Logger.WARNING)
    names = sorted(p.name[: -len(".fused.onnx")] for p in models.glob("*.fused.onnx"))
    if args.only:
        names = [n for n in names if n in args.only]
    result: dict[str, Any] = {
        "meta": {
            "what": "our TensorRT 8 plugins (IPluginV2DynamicExt, libfusion_plugins_trt8.so) in real engines",
            "script": "bench/trt8_plugins.py",
            "commit": args.commit,
            "device": device_name(),
            "trt_version": trt.__version__,
            "library": lib.name,
            "library_headers": args.headers,
            "registered_creators": creators,
            "tactic_sources": "CUBLAS, CUBLAS_LT",
            "profile": {"X": "[batch, seq, width], (batch, seq) min/opt/max = " + str(list(PROFILE))},
            "reference": "onnxruntime CPU, graph optimizations off, on the original decomposed model (fp16 models widened to fp32 exactly)",
            "fp16": "fp16 model I/O and weights, plugin layers pinned to fp16 (OBEY_PRECISION_CONSTRAINTS)",
            "cublaslt": os.environ.get("FUSION_CUBLASLT", "default search"),
        },
        "rows": [],
    }
    t0 = time.perf_counter()
    for name in names:
        LOG.info("case %s", name)
        try:
            row = run_case(name, models, lib, work, logger)
        except Exception as e:  # noqa: BLE001 - one case's failure is a row, not the end of the run
            row = {"case": name, "passed": False, "error": f"{type(e).__name__}: {e}",
                   "trace": traceback.format_exc().splitlines()[-3:]}  # fmt: skip
        result["rows"].append(row)
        LOG.info("  %s", json.dumps({k: row.get(k) for k in ("built", "plugin_layers", "max_abs_err", "reload_max_abs_err", "passed")}))
        result["meta"]["seconds"] = round(time.perf_counter() - t0, 1)
        out.write_text(json.dumps(result, indent=1))
    passed = sum(bool(r.get("passed")) for r in result["rows"])
    LOG.info("%d/%d cases passed", passed, len(result["rows"]))
    return 0 if passed == len(result["rows"]) and result["rows"] else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench/trt8_plugins.py")
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("models")
    m.add_argument("dir", type=Path)
    r = sub.add_parser("run")
    r.add_argument("--lib", required=True)
    r.add_argument("--models", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--commit", default="unknown")
    r.add_argument("--headers", default="own (plugin_src/trt8/NvInfer8Abi.h)")
    r.add_argument("--only", nargs="+")
    c = sub.add_parser("reload")
    for a in ("--lib", "--engine", "--feeds", "--result"):
        c.add_argument(a, required=True)
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    if args.cmd == "models":
        make_models(args.dir)
        return 0
    if args.cmd == "reload":
        return reload_child(args)
    return run_all(args)


if __name__ == "__main__":
    raise SystemExit(main())
