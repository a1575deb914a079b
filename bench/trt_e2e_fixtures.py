"""Every fixture family through our TensorRT 8 plugins (target ``plugin``) in real engines.

    python bench/trt_e2e_fixtures.py --list                        # the selection, no TensorRT
    python bench/trt_e2e_fixtures.py --cpu-check                   # fuse + onnxruntime, no TensorRT
    python bench/trt_e2e_fixtures.py --make-references DIR         # original's outputs at the corners
    python bench/trt_e2e_fixtures.py --plugins LIB --out JSON [--references DIR] [--budget-s 330]

One fixture per family and precision (tests/fixtures/manifest.json): the legacy opset-13
export, else the first of opset 17, 14, dynamo 18, 11 that exists.  Legacy exports of the
attention models carry a bool Flatten on the attention mask that TensorRT 8.5 cannot build,
fused or not (bench/results/trt_verify.json); those run as a *variant*: the same graph with
every bool data-movement op done in int32 between Casts (same outputs on onnxruntime).

Phase 1, per model: fuse with target ``plugin`` (layernorm, rmsnorm, gemm), build the engine
with the fixture's dynamic profile (tactic sources CUBLAS + CUBLAS_LT), count our plugin
layers in the parsed network (must equal the fused nodes, per op), verify against the
original on onnxruntime at min/opt/max, time at opt, serialize.  Then one fresh process that
only loads the library deserializes every engine and checks it again.  Phase 2, while time
is left: the unfused model's engine, timed at opt.  Built, verified and timed by
bench/trt_verify.py's ``build_and_check``.  Rows are written after every step.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import logging
import os
import pickle
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import onnx  # noqa: E402
from onnx import TensorProto, helper  # noqa: E402

from bench.trt_verify import (  # noqa: E402 - sets up fusion.patterns for the source tree
    _err,
    build_and_check,
    check_against_reference,
    corner_inputs,
    device_name,
    make_reference,
    model_path,
    profile_spec,
    write_rows,
)
from tests.fixtures.catalog import fixture_path, load_manifest  # noqa: E402

LOG = logging.getLogger("trt_e2e_fixtures")

PASSES = ["layernorm", "rmsnorm", "gemm"]
PLUGIN_DOMAIN = "trt.plugins"
OUR_PLUGINS = {"FusedLayerNorm", "FusedRMSNorm", "FusedFC", "FusedSkipLayerNorm", "FusedSkipRMSNorm", "FusedGroupNorm"}
TACTIC_SOURCES = ["CUBLAS", "CUBLAS_LT"]
# The exports to prefer, best first (the issue asks for opset 13 legacy).
PREFERENCE = [("legacy", 13), ("legacy", 17), ("legacy", 14), ("dynamo", 18), ("legacy", 11)]
FAMILY_ORDER = ["bert", "gpt2", "vit", "t5", "llama", "convnext", "convnext_manual", "mlp2d", "mlp3d",
                "ln_module", "ln_noaffine", "rms_module", "rms_torch", "vector_norm"]  # fmt: skip
# Ops that only move or select data: doing them on int32 instead of bool changes nothing
# (TensorRT 8.5 has no bool formats for the Shuffle/Slice/Gather layers they become).
MOVE_OPS = {"Flatten", "Gather", "Reshape", "Expand", "Squeeze", "Unsqueeze", "Transpose", "Slice", "Tile",
            "Concat"}  # fmt: skip
BOOL_FLATTEN_NOTE = ("the {tag} export has a bool Flatten on the attention mask, which TensorRT 8.5 cannot "
                     "build, fused or not (bench/results/trt_verify.json): run on a variant with its bool "
                     "data-movement ops done in int32 between Casts ({n} ops; same outputs on onnxruntime)")  # fmt: skip


# --------------------------------------------------------------------------- selection


def select(families: list[str] | None = None, precisions: tuple[str, ...] = ("fp32", "fp16"),
           prefer: tuple[str, int] | None = None) -> list[dict[str, Any]]:
    """One manifest record per family and precision, fp32 of every family first, then fp16.
    Each gets ``why`` when it is not the preferred export (``prefer``, else legacy opset 13)."""
    order = [prefer, *(t for t in PREFERENCE if t != prefer)] if prefer else PREFERENCE
    every = load_manifest(include_skipped=True)
    recs = [r for r in every if r.get("status", "ok") == "ok" and fixture_path(r).is_file()]
    skipped = {r["file"]: r.get("reason") for r in every if r not in recs}
    fams = [f for f in FAMILY_ORDER if any(r["family"] == f for r in recs)]
    fams += sorted({r["family"] for r in recs} - set(fams))
    if families:
        fams = [f for f in fams if f in families]
    out = []
    for dtype in precisions:
        for fam in fams:
            by_tag = {(r["exporter"], r["opset"]): r for r in recs if r["family"] == fam and r["dtype"] == dtype}
            for k, tag in enumerate(order):
                if tag in by_tag:
                    rec = dict(by_tag[tag])
                    if k:
                        first = f"{fam}_{order[0][0]}_op{order[0][1]}_{dtype}.onnx"
                        rec["why"] = (f"no {order[0][0]} opset-{order[0][1]} {dtype} export "
                                      f"({str(skipped.get(first) or 'absent')[:120]})")  # fmt: skip
                    out.append(rec)
                    break
    return out


def has_bool_flatten(model: onnx.ModelProto, types: dict[str, int] | None = None) -> bool:
    flattens = [n for n in model.graph.node if n.op_type == "Flatten"]
    if not flattens:
        return False
    types = types or _elem_types(model)
    return any(types.get(n.input[0]) == TensorProto.BOOL for n in flattens)


def _tensor_types(model: onnx.ModelProto) -> dict[str, onnx.TypeProto.Tensor]:
    """Inferred tensor types by name (shape inference serializes the whole model: run it once)."""
    inferred = onnx.shape_inference.infer_shapes(model)
    vis = list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output)
    return {v.name: v.type.tensor_type for v in vis}


def _elem_types(model: onnx.ModelProto) -> dict[str, int]:
    return {k: t.elem_type for k, t in _tensor_types(model).items()}


def int32_bool_moves(model: onnx.ModelProto, types: dict[str, int] | None = None) -> tuple[onnx.ModelProto, int]:
    """The model with every data-movement op on bool data (MOVE_OPS) run on int32:
    Cast(to INT32) on its bool data inputs, Cast(to BOOL) on its output; a bool
    ConstantOfShape makes int32 and is cast to bool.  Same values.  ``types``: the
    model's element types, where the caller has them."""
    types = types or _elem_types(model)
    model = onnx.ModelProto.FromString(model.SerializeToString())
    nodes, changed = [], 0
    for n in model.graph.node:
        if n.op_type == "ConstantOfShape" and _bool_value(n):  # its broadcast is a bool Slice in TensorRT
            out = n.output[0]
            n.output[0] = f"{out}__i32"
            nodes.append(n)
            nodes.append(helper.make_node("Cast", [n.output[0]], [out], name=f"{n.name or out}__to_bool",
                                          to=TensorProto.BOOL))  # fmt: skip
            changed += 1
            continue
        data_inputs = range(len(n.input)) if n.op_type == "Concat" else [0]
        if n.op_type not in MOVE_OPS or not n.input or types.get(n.input[0]) != TensorProto.BOOL:
            nodes.append(n)
            continue
        tag = n.name or n.output[0]
        for i in data_inputs:
            if types.get(n.input[i]) == TensorProto.BOOL:
                cast_out = f"{n.input[i]}__i32_{tag}_{i}"
                nodes.append(helper.make_node("Cast", [n.input[i]], [cast_out], name=f"{tag}__to_i32_{i}",
                                              to=TensorProto.INT32))  # fmt: skip
                n.input[i] = cast_out
        out = n.output[0]
        n.output[0] = f"{out}__i32"
        nodes.append(n)
        nodes.append(helper.make_node("Cast", [n.output[0]], [out], name=f"{tag}__to_bool", to=TensorProto.BOOL))
        changed += 1
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    # value_info of the moved tensors said bool: drop them (shape inference redoes them).
    moved = {n.output[0] for n in nodes if n.output and n.output[0].endswith("__i32")}
    keep = [v for v in model.graph.value_info if v.name + "__i32" not in moved]
    del model.graph.value_info[:]
    model.graph.value_info.extend(keep)
    return model, changed


def _bool_value(node: onnx.NodeProto) -> bool:
    """A bool ConstantOfShape's value becomes int32 (same 0/1); True when it was bool."""
    from onnx import numpy_helper

    for a in node.attribute:
        if a.name == "value" and a.t.data_type == TensorProto.BOOL:
            a.t.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(a.t).astype("int32"), a.t.name))
            return True
    return False


def isinf_as_equal(model: onnx.ModelProto, types: dict[str, int] | None = None) -> tuple[onnx.ModelProto, int]:
    """The same graph with every IsInf(x) written Equal(Abs(x), inf) (or Equal(x, +-inf) when
    it detects one sign): TensorRT 8.5's parser has no IsInf importer (T5's fp16 clamp)."""
    from onnx import numpy_helper

    types = types or _elem_types(model)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    nodes, n = [], 0
    for node in out.graph.node:
        if node.op_type != "IsInf" or node.domain not in ("", "ai.onnx"):
            nodes.append(node)
            continue
        attrs = {a.name: a.i for a in node.attribute}
        pos, neg = attrs.get("detect_positive", 1), attrs.get("detect_negative", 1)
        np_type = helper.tensor_dtype_to_np_dtype(types[node.input[0]])
        base = f"{node.name or node.output[0]}_as_equal"
        value = float("-inf") if neg and not pos else float("inf")
        inf = numpy_helper.from_array(__import__("numpy").array(value, dtype=np_type), f"{base}_inf")
        out.graph.initializer.append(inf)
        x = node.input[0]
        if pos and neg:
            nodes.append(helper.make_node("Abs", [x], [f"{base}_abs"], name=f"{base}_abs"))
            x = f"{base}_abs"
        if pos or neg:
            nodes.append(helper.make_node("Equal", [x, inf.name], list(node.output), name=base))
        else:  # detects nothing: always false
            nodes.append(helper.make_node("Equal", [x, x], [f"{base}_self"], name=f"{base}_self"))
            nodes.append(helper.make_node("Not", [f"{base}_self"], list(node.output), name=base))
        n += 1
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out, n


ISINF_NOTE = ("TensorRT 8.5's ONNX parser has no IsInf importer: run on a variant with each IsInf(x) written "
              "Equal(Abs(x), inf) ({n} ops; same outputs on onnxruntime)")  # fmt: skip


def source_model(rec: dict[str, Any]) -> tuple[onnx.ModelProto, str | None]:
    """The model to fuse and build (the fixture, or its variant) and the note saying why."""
    model = onnx.load(str(model_path(rec)))
    note = rec.get("why")
    ops = {node.op_type for node in model.graph.node}
    # One inference for both rewrites: the int32 moves keep every original name's type.
    types = _elem_types(model) if ops & {"Flatten", "IsInf"} else {}
    if has_bool_flatten(model, types):
        model, n = int32_bool_moves(model, types)
        note = _join(note, BOOL_FLATTEN_NOTE.format(tag=f"{rec['exporter']} opset-{rec['opset']}", n=n))
    if "IsInf" in ops:
        model, n = isinf_as_equal(model, types)
        note = _join(note, ISINF_NOTE.format(n=n))
    return model, note


def fuse(model: onnx.ModelProto, passes: list[str] = PASSES) -> tuple[onnx.ModelProto, dict[str, int]]:
    import fusion

    fused = fusion.fuse(model, passes=passes, target="plugin")
    counts = collections.Counter(n.op_type for n in fused.graph.node if n.domain == PLUGIN_DOMAIN)
    return fused, dict(sorted(counts.items()))


def buildable_baseline(model: onnx.ModelProto) -> tuple[onnx.ModelProto, str | None]:
    """The unfused model as TensorRT 8.5 can build it: its InstanceNormalization layers need
    cuDNN (a stub in the bundle), so each is written as the reductions it stands for --
    what TensorRT runs for a GroupNorm when no plugin does (Myelin fuses them)."""
    n = sum(node.op_type == "InstanceNormalization" for node in model.graph.node)
    if not n:
        return model, None
    return instancenorm_as_reductions(model), (f"unfused baseline: its {n} InstanceNormalization ops written as "
                                               "ReduceMean/Sub/Mul/Sqrt/Div (TensorRT 8.5 runs InstanceNormalization "
                                               "through cuDNN, a stub here)")  # fmt: skip


def instancenorm_as_reductions(model: onnx.ModelProto) -> onnx.ModelProto:
    """y = (x - mean) / sqrt(var + eps) * scale + bias over the spatial axes, per (n, c)."""
    import numpy as np
    from onnx import numpy_helper

    opset = next(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))
    tensor_types = _tensor_types(model)
    ranks = {k: len(t.shape.dim) for k, t in tensor_types.items() if t.HasField("shape")}
    types = {k: t.elem_type for k, t in tensor_types.items()}
    out = onnx.ModelProto()
    out.CopyFrom(model)
    nodes = []
    for node in out.graph.node:
        if node.op_type != "InstanceNormalization":
            nodes.append(node)
            continue
        x, scale, bias = node.input
        y = node.output[0]
        rank = ranks.get(x)
        if not rank or rank < 3:
            raise ValueError(f"InstanceNormalization {node.name!r}: input rank unknown")
        eps = next((a.f for a in node.attribute if a.name == "epsilon"), 1e-5)
        np_type = helper.tensor_dtype_to_np_dtype(types[x])
        b = f"{node.name or y}_red"
        axes = list(range(2, rank))
        consts = {f"{b}_eps": np.array(eps, np_type), f"{b}_caxes": np.array(list(range(1, rank - 1)), np.int64)}
        if opset >= 18:  # ReduceMean's axes as an input (an attribute before)
            consts[f"{b}_axes"] = np.array(axes, np.int64)
        out.graph.initializer.extend(numpy_helper.from_array(v, k) for k, v in consts.items())

        def mean(src: str, dst: str) -> None:
            if opset >= 18:
                nodes.append(helper.make_node("ReduceMean", [src, f"{b}_axes"], [dst], name=dst))
            else:
                nodes.append(helper.make_node("ReduceMean", [src], [dst], name=dst, axes=axes))

        mean(x, f"{b}_mean")
        nodes.append(helper.make_node("Sub", [x, f"{b}_mean"], [f"{b}_d"], name=f"{b}_d"))
        nodes.append(helper.make_node("Mul", [f"{b}_d", f"{b}_d"], [f"{b}_sq"], name=f"{b}_sq"))
        mean(f"{b}_sq", f"{b}_var")
        nodes.append(helper.make_node("Add", [f"{b}_var", f"{b}_eps"], [f"{b}_ve"], name=f"{b}_ve"))
        nodes.append(helper.make_node("Sqrt", [f"{b}_ve"], [f"{b}_std"], name=f"{b}_std"))
        nodes.append(helper.make_node("Div", [f"{b}_d", f"{b}_std"], [f"{b}_n"], name=f"{b}_n"))
        for p, op in ((scale, "Mul"), (bias, "Add")):  # [C] -> [C, 1, ...] to broadcast over the spatial axes
            nodes.append(helper.make_node("Unsqueeze", [p, f"{b}_caxes"], [f"{b}_{op}_p"], name=f"{b}_{op}_p"))
        nodes.append(helper.make_node("Mul", [f"{b}_n", f"{b}_Mul_p"], [f"{b}_s"], name=f"{b}_s"))
        nodes.append(helper.make_node("Add", [f"{b}_s", f"{b}_Add_p"], [y], name=f"{b}_y"))
    del out.graph.node[:]
    out.graph.node.extend(nodes)
    return out


# --------------------------------------------------------------------------- rows


def base_row(rec: dict[str, Any], note: str | None) -> dict[str, Any]:
    return {"family": rec["family"], "model": rec["file"], "exporter": rec["exporter"], "opset": rec["opset"],
            "precision": "fp16" if rec["dtype"] == "fp16" else "fp32",
            "variant": _variant(note),
            "profile": [{k: list(v) for k, v in p.items()} for p in profile_spec(rec)],
            "fused_nodes": None, "plugin_layers": None, "max_abs_err": None, "passed": None,
            "reload_passed": None, "fused_ms": None, "unfused_ms": None, "ratio": None, "build_s": None,
            "pass": False, "note": note}  # fmt: skip


def _variant(note: str | None) -> str | None:
    kinds = [k for k, says in (("int32 bool moves", "bool data-movement"), ("IsInf as Equal", "IsInf(x)"))
             if note and says in note]  # fmt: skip
    return " + ".join(kinds) or None


def apply_fused(row: dict[str, Any], fused_nodes: dict[str, int], res: dict[str, Any]) -> dict[str, Any]:
    """Fold build_and_check's result for the fused engine into the row."""
    row["fused_nodes"] = fused_nodes
    row["built"] = res.get("built", False)
    layers = res.get("plugin_layer_counts")
    row["plugin_layers"] = {k: v for k, v in sorted((layers or {}).items()) if k in OUR_PLUGINS} if layers is not None else None
    row["other_plugin_layers"] = {k: v for k, v in (layers or {}).items() if k not in OUR_PLUGINS} or None
    row["plugin_layers_match"] = row["plugin_layers"] == fused_nodes and not row["other_plugin_layers"]
    for k in ("max_abs_err", "passed", "build_s", "points", "worst", "failed", "reference", "engine_plugin_layers",
              "network_layers", "error", "verify_error", "timing_error", "opt_shapes"):  # fmt: skip
        if k in res:
            row[k] = res[k]
    row["fused_ms"] = res.get("ms")
    _finish(row)
    return row


def apply_reload(row: dict[str, Any], res: dict[str, Any]) -> dict[str, Any]:
    row["reload_passed"] = res.get("passed")
    row["reload_max_abs_err"] = res.get("max_abs_err")
    if res.get("failed"):
        row["reload_failed"] = res["failed"]
    if res.get("error"):
        row["reload_error"] = res["error"]
    _finish(row)
    return row


def apply_unfused(row: dict[str, Any], res: dict[str, Any]) -> dict[str, Any]:
    row.pop("unfused_note", None)
    row["unfused_built"] = res.get("built", False)
    row["unfused_ms"] = res.get("ms")
    row["unfused_build_s"] = res.get("build_s")
    row["unfused_passed"] = res.get("passed")
    if res.get("failed"):
        row["unfused_failed"] = res["failed"]
    if res.get("error") or res.get("timing_error"):
        row["unfused_error"] = res.get("error") or res.get("timing_error")
    _finish(row)
    return row


def _finish(row: dict[str, Any]) -> None:
    f, u = row.get("fused_ms"), row.get("unfused_ms")
    row["ratio"] = round(u / f, 3) if f and u else None  # unfused / fused: > 1 means the fused engine is faster
    row["pass"] = bool(row.get("built") and row.get("plugin_layers_match") and row.get("passed")
                       and row.get("reload_passed"))  # fmt: skip


# --------------------------------------------------------------------------- running


def reference_for(rec: dict[str, Any], refs: str | None, work: Path) -> Path | None:
    """Stored onnxruntime outputs of the original (``--make-references``), else made here."""
    stored = Path(refs or "") / (Path(rec["file"]).stem + ".npz")
    if refs and stored.is_file():
        return stored
    try:
        return make_reference(rec, work / "refs")
    except Exception as e:  # noqa: BLE001 - this onnxruntime may not run the original
        LOG.info("%s: no reference: %s", rec["file"], _err(e))
        return None


def run_fused(rec, lib: str, opts: dict, refs: str | None, work: Path,
              passes: list[str] = PASSES) -> tuple[dict, dict | None]:
    """Phase 1 for one model: the row and the reload job (or None)."""
    model, note = source_model(rec)
    row = base_row(rec, note)
    try:
        fused, counts = fuse(model, passes)
    except Exception as e:  # noqa: BLE001
        row.update(built=False, error=f"fuse: {_err(e)}")
        return row, None
    if not counts:
        row.update(fused_nodes={}, built=None, note=_join(note, "nothing fused (no norm or FC chain): nothing of ours to build"))
        return row, None
    stem = Path(rec["file"]).stem
    fused_path, engine = work / f"{stem}.plugin.onnx", work / f"{stem}.plugin.engine"
    onnx.save(fused, str(fused_path))
    built_box: list[Any] = []
    res = build_and_check(fused, model_path(rec), profile_spec(rec), row["precision"],
                          dict(opts, plugins=[lib], out=str(engine)), f"{stem} plugin", refs, keep=built_box,
                          inputs=corner_inputs(rec))  # fmt: skip
    apply_fused(row, counts, res)
    if not row.get("built") or not built_box:
        return row, None
    meta = work / f"{stem}.built.pkl"
    meta.write_bytes(pickle.dumps(dataclasses.replace(built_box[0], engine=b"")))
    ref = reference_for(rec, refs, work)
    if ref is None:
        row["reload_error"] = "no onnxruntime reference for the reload check"
        return row, None
    return row, {"model": rec["file"], "fused": str(fused_path), "engine": str(engine), "meta": str(meta), "ref": str(ref)}


def _join(a: str | None, b: str) -> str:
    return f"{a}; {b}" if a else b


def reload_all(jobs: list[dict], lib: str, timeout: float, work: Path) -> dict[str, dict]:
    """One fresh process: load the library, deserialize and check every engine."""
    path = work / "reload_jobs.json"
    path.write_text(json.dumps(jobs))
    cmd = [sys.executable, __file__, "--reload", str(path), "--plugins", lib]
    got: dict[str, dict] = {}
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        stdout, tail = proc.stdout, (proc.stderr or "").strip().splitlines()[-1:]
        why = f"reload process exited {proc.returncode}: {' '.join(tail) or 'no output'}"
    except subprocess.TimeoutExpired as e:
        stdout = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
        why = f"reload process passed its {timeout:.0f} s limit"
    for line in stdout.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            got[r.pop("model")] = r
    for j in jobs:
        got.setdefault(j["model"], {"passed": None, "error": why[:400]})
    return got


def reload_child(jobs_path: str, lib: str) -> int:
    from fusion.trt.build import load_plugins

    load_plugins([lib])  # nothing else of ours is loaded in this process
    for j in json.loads(Path(jobs_path).read_text()):
        try:
            built = pickle.loads(Path(j["meta"]).read_bytes())
            built.engine = Path(j["engine"]).read_bytes()
            res = check_against_reference(j["fused"], built, Path(j["ref"]))
            out = {k: res[k] for k in ("passed", "max_abs_err", "failed") if k in res}
        except Exception as e:  # noqa: BLE001
            out = {"passed": False, "error": _err(e)}
        print(json.dumps({"model": j["model"], **out}), flush=True)
    return 0


def setup(args: argparse.Namespace, prefix: str) -> tuple[str, Path, Path, dict[str, Any]]:
    """What a run needs: the loaded library's path, the result file, a work folder, build options."""
    from fusion.trt.build import load_plugins

    lib = str(Path(args.plugins).resolve())
    load_plugins([lib])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    opts: dict[str, Any] = {"tactic_sources": TACTIC_SOURCES}
    if args.timing_cache:
        opts["timing_cache"] = args.timing_cache
    return lib, out, Path(tempfile.mkdtemp(prefix=prefix)), opts


def run(args: argparse.Namespace) -> int:
    from fusion.trt.build import trt_version

    lib, out, work, opts = setup(args, "trt_e2e_")
    meta = {"what": "fixture families, target plugin (our TensorRT 8 plugins), fused vs unfused engines",
            "script": "bench/trt_e2e_fixtures.py", "commit": args.commit, "device": device_name(),
            "trt_version": trt_version(), "library": Path(lib).name, "passes": args.passes,
            "tactic_sources": "+".join(TACTIC_SOURCES), "cublaslt": os.environ.get("FUSION_CUBLASLT", "default search"),
            "ratio": "unfused_ms / fused_ms at the profile's opt shape (> 1: the fused engine is faster)",
            "pass": "built, our plugin layers == fused nodes (per op), verified at min/opt/max, and again after reload",
            "tolerances": "fusion.verify defaults by output dtype (fp32 1e-4 abs / 1e-3 rel; fp16 2e-2 / 2e-2)",
            "inputs": "random at each profile's min/opt/max; attention masks keep their first token (trt_verify.keep_first_token)"}  # fmt: skip
    recs = select(args.families.split(",") if args.families else None, tuple(args.precisions.split(",")), args.prefer)[: args.limit]
    rows: list[dict] = []
    jobs: list[dict] = []
    sources: dict[str, Any] = {}
    t0 = time.perf_counter()

    def save() -> None:
        meta["seconds"] = round(time.perf_counter() - t0, 1)
        write_rows(out, rows, meta)

    for rec in recs:
        if time.perf_counter() - t0 > args.fused_budget_s:
            model, note = source_model(rec)
            rows.append(dict(base_row(rec, note), note=_join(note, "not run: time budget")))
            continue
        try:
            row, job = run_fused(rec, lib, opts, args.references, work, args.passes)
        except Exception as e:  # noqa: BLE001 - one model must not stop the rest
            LOG.error("%s: %s", rec["file"], traceback.format_exc())
            row, job = dict(base_row(rec, None), built=False, error=_err(e)), None
        rows.append(row)
        if job:
            jobs.append(job)
            sources[rec["file"]] = rec
        LOG.info("%s", fmt(row))
        save()
    if jobs:
        left = args.budget_s - (time.perf_counter() - t0)
        got = reload_all(jobs, lib, max(30.0, min(args.reload_limit_s, left)), work)
        for row in rows:
            if row["model"] in got:
                apply_reload(row, got[row["model"]])
        save()
    for row in rows:  # phase 2: the unfused engines, while time is left
        if row["model"] not in sources:
            continue
        if time.perf_counter() - t0 > args.budget_s:
            row["unfused_note"] = "unfused engine not built: time budget"
            continue
        row["unfused_note"] = "unfused build started, did not finish (run cut short)"
        save()
        rec = sources[row["model"]]
        model, _ = source_model(rec)
        model, why = buildable_baseline(model)
        if why:
            row["unfused_note"] = why
        res = build_and_check(model, model_path(rec), profile_spec(rec), row["precision"], opts,
                              f"{row['model']} unfused", args.references, inputs=corner_inputs(rec))  # fmt: skip
        apply_unfused(row, res)
        LOG.info("%s", fmt(row))
        save()
    save()
    print(table(rows))
    return 0 if rows and all(r["pass"] or r.get("built") is None for r in rows) else 1


# --------------------------------------------------------------------------- CPU modes


def cpu_check(recs: list[dict[str, Any]], passes: list[str] = PASSES) -> int:
    """Every selected model (or its variant) fuses for target plugin and runs on onnxruntime,
    and the variant computes what the fixture does."""
    from fusion.compare.verify import verify

    bad = 0
    for rec in recs:
        model, note = source_model(rec)
        path = str(model_path(rec))
        try:
            if note and "variant" in note:
                v = verify(path, model)
                assert v.passed, f"variant differs: {v.max_abs}"
            fused, counts = fuse(model, passes)
            rep = verify(path, fused)
            ok = rep.passed and (counts or rec["family"] == "vector_norm")
            print(f"{rec['file']:<42} {'ok  ' if ok else 'FAIL'} fused={counts} ort_max_abs={rep.max_abs:.2g}"
                  f"{' (variant)' if note and 'variant' in note else ''}")  # fmt: skip
            bad += not ok
        except Exception as e:  # noqa: BLE001
            print(f"{rec['file']:<42} FAIL {_err(e)}")
            bad += 1
    return 1 if bad else 0


def fmt(r: dict[str, Any]) -> str:
    return (f"{r['model']:<40} {r['precision']} built={r.get('built')} fused={r.get('fused_nodes')} "
            f"plugins={r.get('plugin_layers')} err={r.get('max_abs_err')} passed={r.get('passed')} "
            f"reload={r.get('reload_passed')} ms={r.get('fused_ms')}/{r.get('unfused_ms')} "
            f"{r.get('error') or r.get('verify_error') or r.get('reload_error') or ''}")  # fmt: skip


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| family | model | prec | fused nodes | plugin layers | max abs err | pass | reload | fused ms | unfused ms | ratio | build s | note |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]  # fmt: skip
    for r in rows:
        fn = ", ".join(f"{k} {v}" for k, v in (r.get("fused_nodes") or {}).items()) or "-"
        pl = ", ".join(f"{k} {v}" for k, v in (r.get("plugin_layers") or {}).items()) or "-"
        err = r.get("max_abs_err")
        note = r.get("error") or r.get("verify_error") or r.get("reload_error") or r.get("note") or ""
        lines.append(f"| {r['family']} | {r['model']} | {r['precision']} | {fn} | {pl} | "
                     f"{'-' if err is None else format(err, '.2g')} | {r.get('passed')} | {r.get('reload_passed')} | "
                     f"{r.get('fused_ms')} | {r.get('unfused_ms')} | {r.get('ratio')} | {r.get('build_s')} | {note[:100]} |")  # fmt: skip
    return "\n".join(lines)


def _export_tag(v: str) -> tuple[str, int]:
    exporter, _, opset = v.partition(":")
    if exporter not in ("legacy", "dynamo") or not opset.isdigit():
        raise argparse.ArgumentTypeError(f"{v!r}: expected EXPORTER:OPSET, e.g. legacy:17")
    return exporter, int(opset)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="bench/trt_e2e_fixtures.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--list", action="store_true", help="print the selected fixtures and stop")
    ap.add_argument("--cpu-check", action="store_true", help="fuse each selected model and verify it on onnxruntime")
    ap.add_argument("--make-references", metavar="DIR", help="write the selected originals' corner inputs and outputs")
    ap.add_argument("--plugins", help="libfusion_plugins_trt8.so (required to run)")
    ap.add_argument("--out", help="result JSON (required to run)")
    ap.add_argument("--references", help="stored onnxruntime outputs (--make-references), where this onnxruntime cannot run a model")
    ap.add_argument("--families", help="comma-separated families (default: all)")
    ap.add_argument("--limit", type=int, help="at most this many models")
    ap.add_argument("--precisions", default="fp32,fp16", help="comma-separated: fp32, fp16 (default: both, fp32 first)")
    ap.add_argument("--budget-s", type=float, default=330, help="start no unfused build after this many seconds")
    ap.add_argument("--fused-budget-s", type=float, default=200, help="start no fused model after this many seconds")
    ap.add_argument("--reload-limit-s", type=float, default=90, help="time limit of the reload process")
    ap.add_argument("--timing-cache", help="TensorRT timing cache shared by every build")
    ap.add_argument("--prefer", type=_export_tag, help="the export to pick per family, EXPORTER:OPSET "
                    "(default legacy:13; e.g. legacy:17, whose models carry native LayerNormalization)")
    ap.add_argument("--passes", type=lambda v: [p.strip() for p in v.split(",") if p.strip()], default=PASSES,
                    help=f"fusion passes, comma-separated (default: {','.join(PASSES)})")
    ap.add_argument("--commit", default=os.environ.get("FUSION_COMMIT", "unknown"))
    ap.add_argument("--reload", metavar="JOBS", help=argparse.SUPPRESS)  # the fresh process
    args = ap.parse_args(argv)
    if not (args.list or args.cpu_check or args.make_references or args.reload) and not (args.plugins and args.out):
        ap.error("--plugins and --out are required (or --list / --cpu-check / --make-references)")
    if args.reload and not args.plugins:
        ap.error("--reload needs --plugins")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s")
    logging.getLogger("fusion").setLevel(logging.ERROR)
    if args.reload:
        return reload_child(args.reload, args.plugins)
    recs = select(args.families.split(",") if args.families else None, tuple(args.precisions.split(",")), args.prefer)[: args.limit]
    if args.list:
        for rec in recs:
            _, note = source_model(rec)
            print(f"{rec['family']:<16} {rec['dtype']}  {rec['file']:<42} {note or ''}")
        return 0
    if args.cpu_check:
        return cpu_check(recs, args.passes)
    if args.make_references:
        for rec in recs:
            print(make_reference(rec, Path(args.make_references)))
        return 0
    from fusion.errors import FusionError

    try:
        return run(args)
    except FusionError as e:  # no TensorRT, or the library does not load: one line, not a traceback
        LOG.error("%s", e)
        return 2


if __name__ == "__main__":
    sys.exit(main())
