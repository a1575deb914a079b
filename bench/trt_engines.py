"""Whole models on TensorRT, unfused vs fused: engine build time, latency, accuracy.

Two steps, on the GPU machine:

    python3 bench/trt_engines.py export --model bert --out /tmp/trt_models     # torch + transformers
    PYTHONPATH=DIR python3 bench/trt_engines.py export --model unet ...       # + diffusers (in DIR)
    py310 bench/trt_engines.py run --model bert --onnx /tmp/trt_models/bert.onnx \\
        [--plugins libfusion_plugins_trt8.so] [--engines unfused,trt_ln,trt_ln_fc] [--precision fp32]

``export`` builds BERT-base (batch 8 x seq 128, input_ids only: no attention-mask input),
ViT-base (batch 8, 3x224x224), ... (``MODELS``) from its config with random weights (seed 0; no
download) and exports it with torch's TorchScript exporter at opset 13, dims batch/seq dynamic.
``unet`` is a diffusers ``UNet2DModel`` (``sample`` [batch, 4, 64, 64] and ``timestep`` [batch],
both float32) whose GroupNorms export as Reshape -> InstanceNormalization -> Reshape -> Mul -> Add:
it needs diffusers (0.42.1, pure Python; its other needs are on the GPU machine), which
bench/run_gpu_engines.sh installs from a carried ``.whl/diffusers-*.whl`` when python3 lacks it.

``run`` (TensorRT's Python: tensorrt, polygraphy, onnx, onnxruntime, numpy) does, for one model
(one per invocation: each fits a 10-minute device call; BERT-base fp32 builds take 50-105 s):

* ``unfused``: the exported model as is;
* ``trt_ln`` / ``trt_ln_fc``: target ``trt`` (TensorRT's shipped plugins), LayerNorm only /
  LayerNorm + FC (``CustomFCPluginDynamic``);
* ``plugin_ln`` / ``plugin_ln_fc`` (only with ``--plugins``): target ``plugin`` (this
  project's plugins), Layer/RMSNorm only / Layer/RMSNorm + FC;
* ``trt_gn`` / ``plugin_gn`` (the latter only with ``--plugins``): GroupNorm only, as TensorRT's
  GroupNormalizationPlugin (fp32 and static shapes only: this engine's model has the profile's
  dims fixed, row field ``static_dims``; the others' profiles are one point, so the same
  shapes) / as FusedGroupNorm with the SiLU that follows it fused;

each built with tactic sources CUBLAS + CUBLAS_LT and one shared timing cache, timed with
:mod:`fusion.trt.timing` (what ``verify --trt`` and ``fuse --tune`` use) paired with the
unfused engine, taking turns, and checked against onnxruntime on the same inputs (the fused
engine's outputs from the timed bindings).  Rows go to ``--out`` (default
bench/results/trt_engines.json) after every engine, replacing earlier rows of the same
model, engine and precision; engines are kept in ``--engine-dir`` so a later call reuses
them (the unfused one above all) instead of building again.

TensorRT 8.5 runs ONNX InstanceNormalization through cuDNN, a stub in the bundle: an engine
whose model has some (the unfused UNet; any not fused in a fused one) is built from the model
with each written as ReduceMean/Sub/Mul/Sqrt/Div (bench/trt_e2e_fixtures.buildable_baseline),
and the row's ``baseline`` says so.  The onnxruntime reference is always the exported model's.
For the UNet: ``MODEL=unet ENGINES=unfused,plugin_gn,trt_gn PLUGINS=... bash bench/run_gpu_engines.sh``.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import logging
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

LOG = logging.getLogger("trt_engines")
RESULTS = REPO / "bench" / "results" / "trt_engines.json"
ENGINE_DIR = "/tmp/trt_engines_cache"
TIMING_CACHE = "/tmp/trt_engines_timing.cache"
TACTICS = ["CUBLAS", "CUBLAS_LT"]

# engine -> (target, passes); None: the unfused model
ENGINES: dict[str, tuple[str, list[str]] | None] = {
    "unfused": None,
    "trt_ln": ("trt", ["layernorm"]),
    "trt_ln_fc": ("trt", ["layernorm", "gemm"]),
    "plugin_ln": ("plugin", ["layernorm", "rmsnorm"]),
    "plugin_ln_fc": ("plugin", ["layernorm", "rmsnorm", "gemm"]),
    "trt_skip": ("trt", ["layernorm", "skipnorm"]),
    "plugin_skip": ("plugin", ["layernorm", "rmsnorm", "skipnorm"]),
    "plugin_skip_fc": ("plugin", ["layernorm", "rmsnorm", "skipnorm", "gemm"]),
    "plugin_default": ("plugin", None),  # the plugin target's default passes
    "trt_gn": ("trt", ["groupnorm"]),
    "plugin_gn": ("plugin", ["groupnorm"]),
}
NEEDS_PLUGINS = {"plugin_ln", "plugin_ln_fc", "plugin_skip", "plugin_skip_fc", "plugin_default", "plugin_gn"}
# TensorRT's GroupNormalizationPlugin asserts static shapes (configurePlugin): its engine's model
# has the profile's dims fixed (min = opt = max in every profile here, so the same shapes).
STATIC_ENGINES = {"trt_gn"}
MODELS = {
    "bert": {"what": "BERT-base (12 layers, hidden 768), random weights", "batch": 8, "seq": 128, "vocab": 30522},
    "vit": {"what": "ViT-base/16 (12 layers, hidden 768, 197 tokens), random weights", "batch": 8, "image": 224},
    "bert4": {"what": "BERT-base width (hidden 768, 12 heads, MLP 3072) with 4 layers, random weights: for fp16, whose "
                      "12-layer builds take ~470 s", "batch": 8, "seq": 128, "vocab": 30522, "layers": 4},  # fmt: skip
    "gpt2": {"what": "GPT-2-small (12 layers, hidden 768), random weights", "batch": 8, "seq": 128, "vocab": 50257},
    "llama": {"what": "small LLaMA (8 layers, hidden 1024, 16 heads, MLP 2816, RMSNorm), random weights", "batch": 8,
              "seq": 128, "vocab": 32000},  # fmt: skip
    "unet": {"what": "diffusers UNet2DModel (block_out_channels 128/256/512/512, 1 layer per block, attention at "
                     "32x32, 16x16 and the 8x8 mid block, 32 groups: 36 GroupNorms, 69.9M parameters), 4x64x64 "
                     "latents, random weights", "batch": 8, "image": 64, "channels": 4},  # fmt: skip
}
TOKEN_MODELS = ("bert", "bert4", "gpt2", "llama")
CAUSAL_MODELS = ("gpt2", "llama")  # exported with an attention_mask input too


# -- export (the GPU machine's python3: torch + transformers, diffusers for the UNet) ----------------


def export(model: str, out_dir: Path) -> Path:
    import torch

    torch.manual_seed(0)
    spec = MODELS[model]
    if model == "unet":
        net = unet_module(spec)
        example = (torch.randn(spec["batch"], spec["channels"], spec["image"], spec["image"]),
                   torch.randint(0, 1000, (spec["batch"],)).float())  # fmt: skip
        names, out_name = ["sample", "timestep"], "out_sample"
        dyn = {"sample": {0: "batch"}, "timestep": {0: "batch"}, out_name: {0: "batch"}}
    else:
        net = transformers_module(model, spec)
        out_name = "last_hidden_state"
        if model in TOKEN_MODELS:
            ids = torch.randint(0, spec["vocab"], (spec["batch"], spec["seq"]))
            name, axes = "input_ids", {0: "batch", 1: "seq"}
        else:
            ids = torch.randn(spec["batch"], 3, spec["image"], spec["image"])
            name, axes = "pixel_values", {0: "batch"}
        example, names = (ids,), [name]
        dyn = {name: axes, out_name: {0: "batch", 1: "seq"} if model in TOKEN_MODELS else {0: "batch"}}
        if model in CAUSAL_MODELS:  # without a mask, transformers 5 looks for packed sequences (aten::diff: no ONNX)
            example, names = (ids, torch.ones_like(ids)), [name, "attention_mask"]
            dyn["attention_mask"] = axes
    # Fresh modules have γ = 1 and every bias 0, identical across layers: the exporter then keeps one
    # initializer and reads it through Identity nodes, which TensorRT runs as copy layers outside
    # Myelin.  Trained models have distinct values: perturb them so the graph looks like theirs.
    with torch.no_grad():
        for p in net.parameters():
            if p.dim() == 1:
                p.add_(0.05 * torch.randn_like(p))
    net.eval()

    class Output(torch.nn.Module):
        """The one output tensor: the UNet's sample, a transformer's last hidden state."""

        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x, *rest):
            if model == "unet":
                return self.inner(x, rest[0]).sample
            extra = {"use_cache": False, "attention_mask": rest[0]} if model in CAUSAL_MODELS else {}
            return self.inner(**{names[0]: x}, **extra).last_hidden_state

    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / f"{model}.onnx"
    params = sum(p.numel() for p in net.parameters())
    t0 = time.perf_counter()
    with torch.no_grad():
        torch.onnx.export(Output(net), example, str(path), input_names=names, output_names=[out_name],
                          dynamic_axes=dyn, opset_version=13, do_constant_folding=True, dynamo=False)  # fmt: skip
    LOG.info("%s: %.0f MB, %.1fM parameters, exported in %.1fs (%s)", path, path.stat().st_size / 1e6, params / 1e6,
             time.perf_counter() - t0, spec["what"])  # fmt: skip
    return path


def transformers_module(model: str, spec: dict[str, Any]):
    """The transformers model of ``model`` from its config (random weights), eager attention."""
    import transformers

    if model in ("bert", "bert4"):
        cfg = transformers.BertConfig(hidden_size=768, num_hidden_layers=spec.get("layers", 12), num_attention_heads=12,
                                      intermediate_size=3072, vocab_size=30522, max_position_embeddings=512)  # fmt: skip
        net = transformers.BertModel(cfg, add_pooling_layer=False)
    elif model == "gpt2":
        cfg = transformers.GPT2Config(n_embd=768, n_layer=12, n_head=12, n_positions=1024, vocab_size=spec["vocab"])
        net = transformers.GPT2Model(cfg)
    elif model == "llama":
        cfg = transformers.LlamaConfig(hidden_size=1024, num_hidden_layers=8, num_attention_heads=16, num_key_value_heads=16,
                                       intermediate_size=2816, vocab_size=spec["vocab"], max_position_embeddings=2048)  # fmt: skip
        net = transformers.LlamaModel(cfg)
    else:
        cfg = transformers.ViTConfig(image_size=spec["image"], patch_size=16, hidden_size=768, num_hidden_layers=12,
                                     num_attention_heads=12, intermediate_size=3072)  # fmt: skip
        net = transformers.ViTModel(cfg, add_pooling_layer=False)
    try:  # the eager attention (matmul, softmax, matmul), which the TorchScript exporter writes out
        net.config._attn_implementation = "eager"
    except Exception:  # noqa: BLE001 - older/newer transformers: its default then
        pass
    return net


def unet_module(spec: dict[str, Any]):
    """diffusers UNet2DModel from its config (random weights), the classic attention."""
    from diffusers import UNet2DModel
    from diffusers.models.attention_processor import Attention, AttnProcessor

    net = UNet2DModel(sample_size=spec["image"], in_channels=spec["channels"], out_channels=spec["channels"],
                      block_out_channels=(128, 256, 512, 512), layers_per_block=1, norm_num_groups=32,
                      attention_head_dim=64,
                      down_block_types=("DownBlock2D", "AttnDownBlock2D", "AttnDownBlock2D", "DownBlock2D"),
                      up_block_types=("UpBlock2D", "AttnUpBlock2D", "AttnUpBlock2D", "UpBlock2D"))  # fmt: skip
    # baddbmm + softmax: torch's SDPA has no ONNX export before opset 14.
    for mod in net.modules():
        if isinstance(mod, Attention):
            mod.set_processor(AttnProcessor())
    return net


# -- run (TensorRT's Python 3.10) ----------------------------------------------------------------


def engines_to_run(names: list[str] | None, plugins: list[str]) -> tuple[list[str], list[str]]:
    """-> (engines to run in order, notes on those skipped).  ``unfused`` always comes first:
    every other engine is timed against it."""
    wanted = names or list(ENGINES)
    unknown = [n for n in wanted if n not in ENGINES]
    if unknown:
        raise SystemExit(f"unknown engine {unknown[0]!r} (choose from {', '.join(ENGINES)})")
    notes = [f"{n}: skipped (needs --plugins, the TensorRT 8 build of this project's plugins)"
             for n in wanted if n in NEEDS_PLUGINS and not plugins]  # fmt: skip
    run = ["unfused"] + [n for n in wanted if n != "unfused" and not (n in NEEDS_PLUGINS and not plugins)]
    return run, notes


def profile_for(model: str, batch: int | None, seq: int | None) -> dict[str, Any]:
    spec = MODELS[model]
    b = batch or spec["batch"]
    return {"batch": b, "seq": seq or spec["seq"]} if model in TOKEN_MODELS else {"batch": b}


def make_feed(model: str, proto, profile: dict[str, Any], seed: int = 0) -> dict[str, Any]:
    import numpy as np

    rng = np.random.default_rng(seed)
    if model in TOKEN_MODELS:
        vocab = MODELS[model]["vocab"]
        ids = rng.integers(0, vocab, (profile["batch"], profile["seq"])).astype(np.int64)
        return {"input_ids": ids, **({"attention_mask": np.ones_like(ids)} if model in CAUSAL_MODELS else {})}
    if model == "unet":  # latents and one diffusion step per sample
        spec, b = MODELS["unet"], profile["batch"]
        sample = rng.standard_normal((b, spec["channels"], spec["image"], spec["image"])).astype(np.float32)
        return {"sample": sample, "timestep": rng.integers(0, 1000, b).astype(np.float32)}
    size = MODELS["vit"]["image"]
    return {"pixel_values": rng.standard_normal((profile["batch"], 3, size, size)).astype(np.float32)}


def engine_model(original, name: str, profile: dict[str, Any]):
    """-> (the model engine ``name`` builds, fusion counts, row fields saying how it differs from
    the exported model): fused by the engine's target and passes, on the model with its dims
    fixed to the profile's for STATIC_ENGINES, then with any InstanceNormalization left written
    as reductions (:func:`buildable`)."""
    import fusion

    extra: dict[str, Any] = {}
    if ENGINES[name] is None:
        proto, fused = original, {}
    else:
        target, passes = ENGINES[name]
        source = original
        if name in STATIC_ENGINES:
            source, fixed = with_static_dims(original, profile)
            if fixed:
                extra["static_dims"] = fixed
        result = fusion.run(source, passes, target=target)
        proto, fused = result.model, result.counts()
    proto, note = buildable(proto, fused=ENGINES[name] is not None)
    if note:
        extra["baseline"] = note
    return proto, fused, extra


def buildable(model, fused: bool = False):
    """-> (``model`` as TensorRT 8.5 can build it, a note or None): its InstanceNormalization
    nodes (the TorchScript export of GroupNorm) need cuDNN, a stub in the bundle, so each is
    written as ReduceMean/Sub/Mul/Sqrt/Div (bench/trt_e2e_fixtures.py, imported only then)."""
    n = sum(node.op_type == "InstanceNormalization" for node in model.graph.node)
    if not n:
        return model, None
    from trt_e2e_fixtures import buildable_baseline, instancenorm_as_reductions

    if not fused:
        return buildable_baseline(model)
    return instancenorm_as_reductions(model), (f"the {n} InstanceNormalization ops left unfused written as "
                                               "ReduceMean/Sub/Mul/Sqrt/Div, as in the unfused baseline "
                                               "(TensorRT 8.5 runs InstanceNormalization through cuDNN, a stub here)")  # fmt: skip


def with_static_dims(model, profile: dict[str, Any]):
    """-> (``model`` with its graph inputs' and outputs' dims named in ``profile`` fixed to those
    sizes and every tensor's shape annotated, the dims fixed).  Shape inference runs at opset
    >= 15 (the annotations only): Shape-13 has no data propagation, and without it the
    GroupNorm's Reshape(y, Shape(x)) leaves every later shape unknown."""
    import onnx

    tmp = onnx.ModelProto()
    tmp.CopyFrom(model)
    fixed: dict[str, int] = {}
    for v in (*tmp.graph.input, *tmp.graph.output):
        for d in v.type.tensor_type.shape.dim:
            if d.dim_param in profile and isinstance(profile[d.dim_param], int):
                fixed[d.dim_param] = size = profile[d.dim_param]
                d.Clear()
                d.dim_value = size
    if not fixed:
        return model, {}
    default = [o for o in tmp.opset_import if o.domain in ("", "ai.onnx")]
    opset = default[0].version if default else None
    if opset is not None and 13 <= opset < 15:  # ops revised in 14-17 keep 13's behaviour by default
        default[0].version = 17
    out = onnx.shape_inference.infer_shapes(tmp, data_prop=True)
    if opset is not None:
        next(o for o in out.opset_import if o.domain in ("", "ai.onnx")).version = opset
    return out, fixed


def make_row(model: str, engine: str, precision: str, *, timing=None, unfused_timing=None, build_s=None,
             max_abs_err=None, fused=None, plugin_layers=None, error: str | None = None,
             meta: dict[str, Any] | None = None) -> dict[str, Any]:  # fmt: skip
    """One result row; the speed-up is the unfused engine's median over this engine's, both
    from the same paired timing run."""
    target = ENGINES[engine][0] if ENGINES[engine] else None
    row: dict[str, Any] = {"model": model, "engine": engine, "target": target, "precision": precision,
                           "passes": (ENGINES[engine][1] or "default") if ENGINES[engine] else [], "fused": fused or {},
                           "plugin_layers": plugin_layers, "build_s": _r(build_s, 2)}  # fmt: skip
    if timing is not None:
        row.update(median_ms=_r(timing.median_ms), p10_ms=_r(timing.p10_ms), p90_ms=_r(timing.p90_ms),
                   launches=timing.launches, repeats=timing.repeats, api=timing.api)  # fmt: skip
    if unfused_timing is not None and timing is not None:
        row["unfused_ms"] = _r(unfused_timing.median_ms)
        row["speedup"] = _r(unfused_timing.median_ms / timing.median_ms, 4)
    if max_abs_err is not None:
        row["max_abs_err"] = float(f"{max_abs_err:.3g}")
    if error:
        row["error"] = error
    row.update(meta or {})
    return row


def _r(v, nd: int = 5):
    return None if v is None else round(float(v), nd)


def merge(path: Path, rows: list[dict[str, Any]], meta: dict[str, Any]) -> dict[str, Any]:
    """The results file with ``rows`` replacing those of the same model, engine, precision and
    input shapes (so a run at another batch adds its rows instead of replacing the others)."""
    data = json.loads(path.read_text()) if path.is_file() else {"rows": []}
    key = lambda r: (r["model"], r["engine"], r["precision"], json.dumps(r.get("shapes"), sort_keys=True))  # noqa: E731
    new = {key(r) for r in rows}
    data["rows"] = [r for r in data.get("rows", []) if key(r) not in new] + rows
    data["rows"].sort(key=lambda r: (r["model"], r["precision"], key(r)[3], list(ENGINES).index(r["engine"])))
    data["meta"] = meta
    return data


def write(path: Path, data: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(json.dumps(data, indent=1) + "\n")
    os.replace(tmp, path)


def table(rows: list[dict[str, Any]]) -> str:
    head = f"{'model':<6} {'engine':<13} {'prec':<5} {'build s':>8} {'median ms':>10} {'p10-p90':>15} {'speed-up':>9} {'max err':>9}"
    lines = [head, "-" * len(head)]
    for r in rows:
        spread = f"{r['p10_ms']:.3f}-{r['p90_ms']:.3f}" if r.get("p10_ms") is not None else "-"
        med = f"{r['median_ms']:.3f}" if r.get("median_ms") is not None else "-"
        sp = f"{r['speedup']:.3f}x" if r.get("speedup") is not None else "-"
        err = f"{r['max_abs_err']:.2g}" if r.get("max_abs_err") is not None else "-"
        b = f"{r['build_s']:.1f}" if r.get("build_s") is not None else "-"
        lines.append(f"{r['model']:<6} {r['engine']:<13} {r['precision']:<5} {b:>8} {med:>10} {spread:>15} {sp:>9} {err:>9}"
                     + (f"  error: {r['error'][:80]}" if r.get("error") else ""))  # fmt: skip
    return "\n".join(lines)


def device_name() -> str:
    try:
        r = subprocess.run(["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"], capture_output=True, text=True,
                           timeout=20)  # fmt: skip
        return r.stdout.strip().splitlines()[0] if r.returncode == 0 and r.stdout.strip() else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def commit() -> str:
    if os.environ.get("FUSION_COMMIT"):
        return os.environ["FUSION_COMMIT"]
    try:
        r = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        return r.stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _err(e: BaseException) -> str:
    lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
    return (f"{type(e).__name__}: {lines[0]}" if lines else type(e).__name__)[:400]


class Engines:
    """Builds (or reloads from ``engine_dir``) the engines of one model with one set of options."""

    def __init__(self, profile, precision: str, plugins: list[str], timing_cache: str, engine_dir: str | None):
        self.profile, self.precision, self.plugins = profile, precision, plugins
        self.timing_cache, self.engine_dir = timing_cache, engine_dir

    def get(self, proto, name: str):
        from fusion.trt import build as ftrt
        from fusion.trt.build import BuiltEngine, build_engine
        from fusion.trt.profiles import derive_profiles, model_inputs

        data = proto.SerializeToString()
        key = hashlib.sha1(data).hexdigest()[:12]
        tag = f"{name}_{self.precision}_{key}_{ftrt.trt_version()}"
        inputs = model_inputs(proto)
        shapes = self.profile if any(i.dynamic for i in inputs) else None  # a static model takes no profile
        path = Path(self.engine_dir) / f"{tag}.engine" if self.engine_dir else None
        if path is not None and path.is_file() and path.with_suffix(".json").is_file():
            ftrt.load_plugins(self.plugins)
            info = json.loads(path.with_suffix(".json").read_text())
            LOG.info("%s: engine reused from %s (built in %.1fs)", name, path, info["build_s"])
            return BuiltEngine(path.read_bytes(), derive_profiles(inputs, shapes), inputs, info["trt_version"],
                               self.precision, build_s=info["build_s"], path=str(path)), info["plugin_layers"]  # fmt: skip
        built = build_engine(data, shapes=shapes, plugins=self.plugins, precision=self.precision,
                             tactic_sources=TACTICS, timing_cache=self.timing_cache)  # fmt: skip
        plugin_layers = len(built.plugin_layers)
        if path is not None:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(built.engine)
            path.with_suffix(".json").write_text(json.dumps({"build_s": built.build_s, "trt_version": built.trt_version,
                                                             "plugin_layers": plugin_layers}))  # fmt: skip
        return built, plugin_layers


def run(args: argparse.Namespace) -> int:
    import numpy as np
    import onnx
    import onnxruntime as ort

    from trt_verify import use_source_tree_patterns  # fusion.patterns from patterns/ in a checkout

    use_source_tree_patterns()
    from fusion.trt.build import trt_version
    from fusion.trt.timing import METHOD, time_engines

    names, notes = engines_to_run(args.engines, args.plugins)
    for n in notes:
        LOG.warning("%s", n)
    profile = profile_for(args.model, args.batch, args.seq)
    meta = {"commit": commit(), "device": device_name(), "trt_version": trt_version(), "date": datetime.date.today().isoformat(),
            "tactic_sources": TACTICS, "timing": METHOD.format(repeats=args.repeats) + "; each engine paired with the unfused one",
            "accuracy": "max abs error vs onnxruntime (CPU, graph optimizations off) on the same inputs",
            "models": {k: v["what"] for k, v in MODELS.items()}}  # fmt: skip
    original = onnx.load(args.onnx)
    feed = make_feed(args.model, original, profile)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    t0 = time.perf_counter()
    reference = ort.InferenceSession(args.onnx, so, providers=["CPUExecutionProvider"]).run(None, feed)[0]
    LOG.info("onnxruntime reference in %.1fs", time.perf_counter() - t0)
    row_meta = {"shapes": {k: list(v.shape) for k, v in feed.items()}, "commit": meta["commit"], "device": meta["device"],
                "trt_version": meta["trt_version"]}  # fmt: skip
    engines = Engines(profile, args.precision, args.plugins, args.timing_cache, args.engine_dir)
    rows: list[dict[str, Any]] = []
    unfused = None
    for name in names:
        t0 = time.perf_counter()
        try:
            proto, fused, extra = engine_model(original, name, profile)
            for k, v in extra.items():
                LOG.info("%s: %s %s", name, k, v)
            built, plugin_layers = engines.get(proto, name)
            pair = [built] if unfused is None else [unfused, built]
            timings, outputs = time_engines(pair, [feed], repeats=args.repeats, fetch=True)
            out = next(iter(outputs[-1][0].values()))
            err = float(np.max(np.abs(out.astype(np.float64) - reference.astype(np.float64))))
            if unfused is None:
                unfused = built
            row = make_row(args.model, name, args.precision, timing=timings[-1][0],
                           unfused_timing=timings[0][0], build_s=built.build_s, max_abs_err=err, fused=fused,
                           plugin_layers=plugin_layers, meta={**row_meta, **extra})  # fmt: skip
            if args.layers:
                row["layer_kinds"] = layer_profile(built, feed, args.layers / f"{args.model}_{name}_{args.precision}.json")
        except Exception as e:  # noqa: BLE001 - recorded per row
            LOG.error("%s: %s\n%s", name, _err(e), traceback.format_exc(limit=5))
            row = make_row(args.model, name, args.precision, error=_err(e), meta=row_meta)
        row["wall_s"] = round(time.perf_counter() - t0, 1)
        rows.append(row)
        write(args.out, merge(args.out, rows, meta))
        if unfused is None:  # nothing to compare with
            break
        LOG.info("%s: %s", name, json.dumps({k: row.get(k) for k in ("build_s", "median_ms", "speedup", "max_abs_err")}))
    print(table(rows))
    for n in notes:
        print(n)
    return 0 if all("error" not in r for r in rows) else 1


def layer_profile(built, feed, path: Path) -> dict[str, Any]:
    """The engine's per-layer times (fusion.trt.layers), written to ``path``; -> time per kind."""
    from fusion.trt.layers import profile_layers

    prof = profile_layers(built, feed)
    LOG.info("layer profile of %s:\n%s", path.stem, prof.text())
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(prof.to_dict(), indent=1) + "\n")
    return prof.by_kind()


E2E = REPO / "bench" / "results" / "trt_e2e.json"
TUNE_RESULTS = REPO / "bench" / "results" / "trt_tune_bert.json"


def e2e_rows(rows: list[dict[str, Any]], tune: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """The model x precision x target table of issue 11 from trt_engines.json's rows (and the
    tuning record): target none/trt/plugin/tuned, plugin layers, error, ms, ratio, build s."""
    out = []
    for r in rows:
        if r.get("error") or r.get("median_ms") is None:
            continue
        out.append({"model": r["model"], "precision": r["precision"], "target": r["target"] or "none",
                    "engine": r["engine"], "passes": r["passes"], "fused": r["fused"],
                    "plugin_layers": r["plugin_layers"], "max_abs_err": r.get("max_abs_err"),
                    "engine_ms": r["median_ms"], "unfused_ms": r.get("unfused_ms"), "ratio": r.get("speedup"),
                    "build_s": r.get("build_s"), "commit": r.get("commit"), "device": r.get("device"),
                    "trt_version": r.get("trt_version"),
                    **{k: r[k] for k in ("baseline", "static_dims") if r.get(k)}})  # fmt: skip
    if tune:
        kept = tune.get("kept") or []
        base = next((r for r in out if r["model"] == tune.get("model") and r["precision"] == tune.get("precision")
                     and r["target"] == "none"), None)  # fmt: skip
        if base is not None and not kept:  # tuning kept nothing: the tuned model is the original
            out.append({**base, "target": "tuned", "engine": f"tuned ({tune.get('target')} target)", "passes": [],
                        "ratio": 1.0, "build_s": tune.get("seconds"), "commit": tune.get("commit"),
                        "note": "fuse --tune kept no fusion: the tuned model is the unfused one"})  # fmt: skip
    order = {"none": 0, "trt": 1, "plugin": 2, "tuned": 3}
    out.sort(key=lambda r: (r["model"], r["precision"], order.get(r["target"], 9), r["engine"]))
    return out


def summarize(engines: Path = RESULTS, tune_path: Path = TUNE_RESULTS, out: Path = E2E) -> list[dict[str, Any]]:
    data = json.loads(engines.read_text())
    tune = _tune_record(tune_path)
    rows = e2e_rows(data["rows"], tune)
    write(out, {"meta": {"from": [str(engines.relative_to(REPO)), str(tune_path.relative_to(REPO))],
                         "ratio": "unfused engine ms / this engine ms, timed as a pair (> 1: faster)",
                         "models": {k: v["what"] for k, v in MODELS.items()}}, "rows": rows})  # fmt: skip
    return rows


def _tune_record(path: Path) -> dict[str, Any] | None:
    """model, precision, target, kept passes, seconds and commit of the tuning run, if recorded."""
    if not path.is_file():
        return None
    d = json.loads(path.read_text())
    rec = d.get("record", {})
    return {"model": "bert", "precision": rec.get("precision", "fp32"), "target": rec.get("target", "trt"),
            "kept": rec.get("kept", []), "seconds": rec.get("seconds"), "commit": d.get("meta", {}).get("commit")}


def make_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    e = sub.add_parser("export", help="export the model to ONNX (torch + transformers)")
    e.add_argument("--model", choices=list(MODELS), required=True)
    e.add_argument("--out", type=Path, default=Path("/tmp/trt_models"))
    r = sub.add_parser("run", help="build, time and check the engines (TensorRT)")
    r.add_argument("--model", choices=list(MODELS), required=True)
    r.add_argument("--onnx", required=True, help="the exported model")
    r.add_argument("--plugins", nargs="+", default=[], help="this project's TensorRT 8 plugin library")
    r.add_argument("--engines", type=lambda s: [x.strip() for x in s.split(",") if x.strip()],
                   help=f"comma-separated subset of {','.join(ENGINES)} (unfused always runs)")  # fmt: skip
    r.add_argument("--precision", choices=("fp32", "fp16"), default="fp32")
    r.add_argument("--batch", type=int)
    r.add_argument("--seq", type=int)
    r.add_argument("--repeats", type=int, default=15)
    r.add_argument("--timing-cache", default=TIMING_CACHE)
    r.add_argument("--engine-dir", default=ENGINE_DIR, help="keep engines here and reuse them ('' to disable)")
    r.add_argument("--out", type=Path, default=RESULTS)
    sub.add_parser("summarize", help=f"write {E2E.relative_to(REPO)} from {RESULTS.relative_to(REPO)}")
    r.add_argument("--layers", type=Path, help="also profile each engine's layers; one JSON per engine in this folder")
    return p


def main(argv: list[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if args.command == "export":
        export(args.model, args.out)
        return 0
    if args.command == "summarize":
        print(table([{**r, "median_ms": r["engine_ms"], "speedup": r["ratio"]} for r in summarize()]))
        return 0
    sys.path.insert(0, str(REPO / "bench"))
    return run(args)


if __name__ == "__main__":
    sys.exit(main())
