"""TensorRT's shipped LayerNorm plugin (libnvinfer_plugin "LayerNorm" v1) timed on the kernel grid.

    python bench/bench_trt_layernorm.py --out DIR [--quick] [--no-tactic-sources]

One engine per (dtype, cols): an ONNX graph holding just the LayerNorm node the fusion's
``trt`` target emits ([rows, 1, cols] in, γ/β [cols]), built with a dynamic ``rows`` profile
over the grid's rows.  Each point runs on device-resident buffers rotated over >= 256 MB per
cycle (so L2 holds none of it), launches captured into a CUDA graph where that works (else
plain launches), timed with CUDA events: median of 5 batches.  GB/s counts the bytes of x
read and y written, like bench/bench_kernels.py.  Rows go to DIR/trt_layernorm.json.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import logging
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import numpy as np
import onnx
from onnx import TensorProto, helper

from fusion.rewrite import specs

LOG = logging.getLogger("bench_trt_layernorm")
# bench/bench_kernels.py's GRID (rows x cols); TensorRT 8.5's LayerNorm takes fp32/fp16 only.
# tests/test_trt_cpu.py checks that the two grids agree.
GRID = {"dtypes": ("float32", "float16"), "rows": (2048, 8192, 32768), "cols": (768, 1024, 2048, 4096, 8192)}
QUICK = {"dtypes": ("float32", "float16"), "rows": (2048,), "cols": (768, 4096)}
EPS = 1e-5
ROTATE_BYTES = 256 << 20
CHUNK_ROWS = 256  # host rows generated once and copied over each device buffer


def ln_model(cols: int, dtype: str, dims: tuple = ("rows", 1)) -> onnx.ModelProto:
    """x [*dims, cols] -> TensorRT's LayerNorm plugin node, as the fusion's trt target writes it
    ([rows, 1, cols] views by default; γ = 1 + 0.1·N(0,1), β = 0.1·N(0,1), seeded by cols)."""
    t = TensorProto.FLOAT if dtype == "float32" else TensorProto.FLOAT16
    np_t = np.float32 if dtype == "float32" else np.float16
    rng = np.random.default_rng(cols)
    gamma = (1 + 0.1 * rng.standard_normal(cols)).astype(np_t)
    beta = (0.1 * rng.standard_normal(cols)).astype(np_t)
    spec = specs.TRT_LAYER_NORM
    node = helper.make_node(spec.op_type, ["x", "gamma", "beta"], ["y"], domain=spec.domain,
                            **spec.attributes({"epsilon": EPS}))  # fmt: skip
    graph = helper.make_graph(
        [node], "trt_layernorm",
        [helper.make_tensor_value_info("x", t, [*dims, cols])],
        [helper.make_tensor_value_info("y", t, [*dims, cols])],
        [onnx.numpy_helper.from_array(gamma, "gamma"), onnx.numpy_helper.from_array(beta, "beta")],
    )  # fmt: skip
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid(spec.domain, 1)],
                             ir_version=8)  # fmt: skip


def rotations(moved_bytes: int) -> int:
    return max(1, -(-ROTATE_BYTES // moved_bytes))


class Graph:
    """A CUDA graph of launches captured on a stream (cudart through polygraphy's wrapper)."""

    def __init__(self, rt, stream_ptr: int, capture):
        self.rt, self.stream = rt, ctypes.c_void_p(stream_ptr)
        self.graph, self.exec = ctypes.c_void_p(), ctypes.c_void_p()
        _check(rt.cudaStreamBeginCapture(self.stream, ctypes.c_int(2)), "cudaStreamBeginCapture")  # relaxed
        try:
            capture()
        finally:
            status = rt.cudaStreamEndCapture(self.stream, ctypes.byref(self.graph))
        _check(status, "cudaStreamEndCapture")
        _check(rt.cudaGraphInstantiateWithFlags(ctypes.byref(self.exec), self.graph, ctypes.c_ulonglong(0)),
               "cudaGraphInstantiateWithFlags")  # fmt: skip

    def launch(self, _i: int = 0) -> None:
        _check(self.rt.cudaGraphLaunch(self.exec, self.stream), "cudaGraphLaunch")

    def close(self) -> None:
        self.rt.cudaGraphExecDestroy(self.exec)
        self.rt.cudaGraphDestroy(self.graph)


def _check(status: int, what: str) -> None:
    if status != 0:
        raise RuntimeError(f"{what} failed with CUDA error {status}")


def bench_engine(built, params: dict[str, np.ndarray], dtype: str, cols: int, rows_list, repeats: int = 5) -> list[dict[str, Any]]:
    from polygraphy import cuda

    from fusion.trt.build import import_trt, load_plugins, make_logger
    from fusion.trt.run import CudaTimer

    trt = import_trt()
    load_plugins()
    logger = make_logger(trt)
    engine = trt.Runtime(logger).deserialize_cuda_engine(built.engine)
    context = engine.create_execution_context()
    stream = cuda.Stream()
    rt = cuda.wrapper().handle
    np_t = np.dtype(np.float32 if dtype == "float32" else np.float16)
    elem = np_t.itemsize
    rng = np.random.default_rng(cols)
    chunk = rng.standard_normal((CHUNK_ROWS, 1, cols)).astype(np_t)
    out = []
    for rows in rows_list:
        xbytes = rows * cols * elem
        n = rotations(2 * xbytes)
        xs = [cuda.DeviceArray(shape=(rows, 1, cols), dtype=np_t) for _ in range(n)]
        ys = [cuda.DeviceArray(shape=(rows, 1, cols), dtype=np_t) for _ in range(n)]
        graph = None
        try:
            for x in xs:  # fill each input with the chunk, repeated
                for r0 in range(0, rows, CHUNK_ROWS):
                    k = min(CHUNK_ROWS, rows - r0)
                    cuda.wrapper().memcpy(x.ptr + r0 * cols * elem, chunk.ctypes.data, k * cols * elem,
                                          cuda.MemcpyKind.HostToDevice, stream.ptr)  # fmt: skip
            context.set_input_shape("x", (rows, 1, cols))

            def enqueue(i: int, xs=xs, ys=ys, n=n) -> None:
                context.set_tensor_address("x", xs[i % n].ptr)
                context.set_tensor_address("y", ys[i % n].ptr)
                if not context.execute_async_v3(stream.ptr):
                    raise RuntimeError("execute_async_v3 failed")

            for i in range(max(3, n)):
                enqueue(i)
            stream.synchronize()
            err = _check_output(ys[0], chunk, params, rows, cols, np_t, stream)
            how = "CUDA graph of enqueues, CUDA events"
            per_launch = n
            try:
                graph = Graph(rt, stream.ptr, lambda n=n: [enqueue(i) for i in range(n)])
                launch = graph.launch
            except Exception as e:  # noqa: BLE001 - fall back to plain launches
                LOG.warning("CUDA graph capture failed (%s): plain launches", e)
                graph, how, per_launch, launch = None, "execute_async_v3 launches, CUDA events", 1, enqueue
            timer = CudaTimer()
            try:
                launch(0)
                probe = timer.time(stream.ptr, launch, 3) / per_launch
                reps = int(min(200, max(3, 20.0 / max(probe * per_launch, 1e-4))))
                ms = [timer.time(stream.ptr, launch, reps) / per_launch for _ in range(repeats)]
            finally:
                timer.close()
            med = statistics.median(ms)
            moved = 2 * xbytes
            out.append({"op": "trt85_layernorm", "dtype": dtype, "rows": rows, "cols": cols, "ms": med,
                        "gbps": moved / (med * 1e-3) / 1e9, "bytes_moved": moved, "rotated_buffers": n,
                        "timing": how, "max_abs_err_vs_numpy": err})  # fmt: skip
            LOG.info("%s rows=%d cols=%d: %.4f ms, %.0f GB/s, err %.2g (%s)", dtype, rows, cols, med,
                     out[-1]["gbps"], err, how)  # fmt: skip
        finally:
            if graph is not None:
                graph.close()
            for b in xs + ys:
                b.free()
    stream.free()
    return out


def _check_output(y, chunk: np.ndarray, params: dict[str, np.ndarray], rows: int, cols: int, np_t, stream) -> float:
    from polygraphy import cuda

    k = min(CHUNK_ROWS, rows)
    host = np.empty((k, 1, cols), dtype=np_t)
    cuda.wrapper().memcpy(host.ctypes.data, y.ptr, host.nbytes, cuda.MemcpyKind.DeviceToHost, stream.ptr)
    stream.synchronize()
    x = chunk[:k].astype(np.float64)
    mean = x.mean(-1, keepdims=True)
    var = ((x - mean) ** 2).mean(-1, keepdims=True)
    ref = (x - mean) / np.sqrt(var + EPS) * params["gamma"].astype(np.float64) + params["beta"].astype(np.float64)
    return float(np.abs(host[:k].astype(np.float64) - ref).max())


def build_point(dtype: str, cols: int, rows_list, opts: dict):
    from fusion.trt.build import build_engine

    model = ln_model(cols, dtype)
    lo, hi = min(rows_list), max(rows_list)
    built = build_engine(model, shapes={"rows": (lo, sorted(rows_list)[len(rows_list) // 2], hi)},
                         precision="fp16" if dtype == "float16" else "fp32", **opts)  # fmt: skip
    if not built.plugin_layers:
        raise RuntimeError("the engine has no plugin layer: the parser did not import LayerNorm as a plugin")
    return built, {t.name: onnx.numpy_helper.to_array(t) for t in model.graph.initializer}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True)
    ap.add_argument("--quick", action="store_true", help="a few points only")
    ap.add_argument("--no-tactic-sources", action="store_true")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("fusion").setLevel(logging.ERROR)
    grid = QUICK if args.quick else GRID
    opts = {"tactic_sources": []} if args.no_tactic_sources else {}
    from fusion.trt.build import trt_version

    sys.path.insert(0, str(REPO / "bench"))
    from trt_verify import device_name

    device, ver = device_name(), trt_version()
    commit = os.environ.get("FUSION_COMMIT", "unknown")
    rows_out: list[dict[str, Any]] = []
    out = Path(args.out) / "trt_layernorm.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    for dtype in grid["dtypes"]:
        for cols in grid["cols"]:
            try:
                built, params = build_point(dtype, cols, grid["rows"], opts)
                new = bench_engine(built, params, dtype, cols, grid["rows"])
            except Exception as e:
                LOG.exception("%s cols=%d", dtype, cols)
                new = [{"op": "trt85_layernorm", "dtype": dtype, "rows": r, "cols": cols, "gbps": None,
                        "error": f"{type(e).__name__}: {e}"[:300]} for r in grid["rows"]]  # fmt: skip
            for r in new:
                r.update(device=device, commit=commit, trt_version=ver)
            rows_out.extend(new)
            out.write_text(json.dumps(rows_out, indent=1))
    LOG.info("done in %.0fs", time.perf_counter() - t0)
    print(f"{'dtype':<8} {'rows':>6} {'cols':>5} {'ms':>9} {'GB/s':>7}  err")
    for r in rows_out:
        if r.get("gbps"):
            print(f"{r['dtype']:<8} {r['rows']:>6} {r['cols']:>5} {r['ms']:>9.4f} {r['gbps']:>7.0f}  {r['max_abs_err_vs_numpy']:.2g}")
        else:
            print(f"{r['dtype']:<8} {r['rows']:>6} {r['cols']:>5} failed: {r.get('error')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
