"""The properties every fuzz model must have once fused, and saving failures as regressions.

For a :class:`~tests.fuzz.spec.Case`:

1. the input is a valid model (full checker) and fusing leaves it untouched;
2. the fusions per rule are exactly the expected counts, and as many fused nodes are in it;
3. no warnings (every custom node has a function body); the output passes ``onnx.checker``
   (full) and strict shape inference, keeps the graph's inputs and outputs, and
   onnxruntime computes the same outputs (tolerance by dtype; where
   an ill-conditioned output amplifies rounding beyond it, both models are compared again
   computing in float64 — see :func:`_compare`);
4. fusing the output again changes nothing (same bytes), and fusing the input again gives the
   same bytes (determinism);
5. (a quarter of the examples) fusing without function bodies gives the same fusions (but
   for those refused only for want of a body: ``Case.bare``) and validates.

Every run names the passes (``NORM_FC_PASSES``): with none named the plugin target fuses nothing.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

import fusion
from fusion.rewrite import specs
from fusion.ir.graph import node_lists

from ..builders import NORM_FC_PASSES
from .builder import DOUBLE, FLOAT, FLOAT16, Feed
from .spec import Case

# (atol, rtol) by the model's element type.
TOL = {FLOAT: (1e-4, 1e-3), FLOAT16: (2e-2, 2e-2), DOUBLE: (1e-8, 1e-7)}
# Beyond TOL (see _compare): both models computed in float64, and a loose bound.
AS_FP64 = {FLOAT: (1e-6, 1e-5), FLOAT16: (1e-6, 1e-5), DOUBLE: (1e-9, 1e-7)}
LOOSE = {FLOAT: (0.05, 0.05), DOUBLE: (1e-6, 1e-6)}
# Relative nudge of the float inputs that tells a conditioned output from noise (see _compare).
NUDGE = 1e-10
REGRESSIONS = Path(__file__).resolve().parents[1] / "regressions"
_OURS = {(s.domain, s.op_type) for s in specs.SPECS}


def _graphs(model: onnx.ModelProto):
    """Every GraphProto: the main graph and all bodies, in it and in the model's functions."""
    return (c for c in node_lists(model).values() if isinstance(c, onnx.GraphProto))


def fused_nodes(model: onnx.ModelProto) -> int:
    """Custom nodes in the graph, its bodies and the model's own functions (not in our op bodies)."""
    n = 0
    for g in _graphs(model):
        n += sum((node.domain, node.op_type) in _OURS for node in g.node)
    for f in model.functions:
        if (f.domain, f.name) not in _OURS:
            n += sum((node.domain, node.op_type) in _OURS for node in f.node)
    return n


def feeds_for(case: Case, seed: int | None = None) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(case.seed if seed is None else seed)
    return {f.name: f.make(rng, case.dims) for f in case.feeds}


def _run(model_bytes: bytes, feeds: dict) -> list[np.ndarray]:
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    opts.log_severity_level = 3
    opts.intra_op_num_threads = 1
    sess = ort.InferenceSession(model_bytes, opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def _explain(result: fusion.PassResult) -> str:
    lines = [f"fused {result.counts()}"]
    lines += [f"  fusion {f.rule} at {f.scope}:{f.root}" for f in result.fusions]
    lines += [f"  near-miss {m.rule} at {m.scope}:{m.node}: {m.reason}" for m in result.near_misses]
    return "\n".join(lines)


class GeneratorBug(Exception):
    """The generator made an invalid model: a bug in tests/fuzz, not in the library."""


def check(case: Case) -> fusion.PassResult:
    """Assert every property; returns the fusion result."""
    model = case.model
    before = model.SerializeToString()
    try:
        onnx.checker.check_model(model, full_check=True)
    except Exception as e:
        raise GeneratorBug(f"the generated model is invalid: {e}") from e

    result = fusion.run(model, NORM_FC_PASSES)
    assert model.SerializeToString() == before, "fusing modified the input model"
    assert result.counts() == case.expected, f"expected {case.expected}\n{_explain(result)}"
    fused = result.model
    assert fused_nodes(fused) == sum(case.expected.values()), _explain(result)
    assert result.modified == bool(case.expected)
    fused_bytes = fused.SerializeToString()

    # Every custom node has a function body (what none could serve was refused: issue 16, defect 8).
    assert not result.warnings, result.warnings
    if result.modified:
        onnx.checker.check_model(fused, full_check=True)
        onnx.shape_inference.infer_shapes(fused, check_type=True, strict_mode=True)
    assert list(fused.graph.input) == list(model.graph.input)
    assert list(fused.graph.output) == list(model.graph.output)
    if result.modified:
        feeds = feeds_for(case)
        want = _run(before, feeds)
        got = _run(fused_bytes, feeds)
        _compare(case, model, want, got, feeds, result)

    again = fusion.run(fused, NORM_FC_PASSES)
    assert not again.modified and not again.fusions, _explain(again)
    assert again.model.SerializeToString() == fused_bytes, "fusing twice differs from fusing once"
    second = fusion.run(onnx.load_from_string(before), NORM_FC_PASSES, validate=False)
    assert second.model.SerializeToString() == fused_bytes, "two runs gave different bytes"
    if case.seed % 4 == 0:  # (a quarter of the examples: it costs a whole fusion again)
        # Without function bodies (--no-functions): the same fusions, but for those refused only
        # because no body could serve them; and it still validates.
        bare = fusion.run(model, NORM_FC_PASSES, functions=False)
        assert bare.counts() == (case.expected if case.bare is None else case.bare), _explain(bare)
    return result


def _compare(case: Case, model: onnx.ModelProto, want: list, got: list, feeds: dict, result) -> None:
    """Outputs agree within the dtype's tolerance.

    Where they do not, the cause can be the conditioning of the output rather than the
    fusion: a normalization over a row whose spread is a few ulps turns a one-ulp difference
    upstream into any difference at all (the fused ops compute in fp32 and round once; the
    original rounds after every op — and onnxruntime's CPU provider, which has few fp16
    kernels, runs fp16 chains through fp32 casts it inserts and then elides, so it does not
    even round where the model says).  There both models are run again in float64 (every
    float type, constant and Cast made double), where that noise is 10⁻¹⁶, and must agree
    tightly: the fused graph computes what the original does.  The outputs in the model's
    own type must then still be finite where the original's are, and (fp32) within a loose
    bound plus twice the original's worst error of the float64 value.  Elements that a
    nudge of the inputs (NUDGE, relative) moves beyond the float64 bound are noise, and are not
    judged.
    """
    atol, rtol = TOL[case.dtype]
    fp64 = None
    for i, (a, b) in enumerate(zip(want, got)):
        assert a.shape == b.shape and a.dtype == b.dtype, (i, a.shape, b.shape, a.dtype, b.dtype)
        bad = ~_close(a, b, atol, rtol)
        if bad.any():
            if fp64 is None:
                f64 = {k: v.astype(np.float64) if v.dtype.kind == "f" else v for k, v in feeds.items()}
                nudged = {k: np.asarray(v * (1 + NUDGE), v.dtype) if v.dtype.kind == "f" else v for k, v in f64.items()}
                original64 = to_fp64(model).SerializeToString()
                fp64 = (_run(original64, f64), _run(to_fp64(result.model).SerializeToString(), f64),
                        _run(original64, nudged))  # fmt: skip
            exact = fp64[0][i]
            bad = ~_close(exact, fp64[1][i], *AS_FP64[case.dtype])
            if a.dtype.kind == "f":
                bad |= np.isfinite(a) != np.isfinite(b)
            if case.dtype in LOOSE:
                # The fused output may be off the exact (float64) value by a loose bound plus twice
                # the original's worst error in this output: where rounding errors are amplified
                # (badly conditioned rows) they land on other elements in the fused graph.
                la, lr = LOOSE[case.dtype]
                with np.errstate(invalid="ignore"):
                    err_a, err_b = np.abs(a - exact), np.abs(b - exact)
                    worst = float(np.nanmax(err_a, initial=0.0, where=np.isfinite(err_a)))
                    bad |= err_b > la + lr * np.abs(exact) + 2 * worst
            # Where a nudge of the inputs by NUDGE moves the original's float64 output beyond the
            # tight bound, the output is rounding noise, not a function of the inputs (a norm
            # without eps over a row constant in exact arithmetic: 1e-17 normalized to O(1)); no
            # graph can match noise, so those elements are not judged.
            bad &= _close(exact, fp64[2][i], *AS_FP64[case.dtype])
        if bad.any():
            a64, b64 = a.astype(np.float64), b.astype(np.float64)
            raise AssertionError(
                f"output {i} ({model.graph.output[i].name}) differs: max abs error "
                f"{np.nanmax(np.abs(a64 - b64)):.3g} at {np.argwhere(bad)[0].tolist()}\n{_explain(result)}"
            )


def _close(a: np.ndarray, b: np.ndarray, atol: float, rtol: float) -> np.ndarray:
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    with np.errstate(invalid="ignore"):
        close = (a64 == b64) | (np.abs(a64 - b64) <= atol + rtol * np.abs(a64))
    return close | (np.isnan(a64) & np.isnan(b64))


# No double kernel in onnxruntime; used by the function bodies only to turn a float attribute
# into a tensor (LeakyRelu(-1) = -alpha), which float computes exactly.
_FLOAT_ONLY = {"LeakyRelu"}
_GELU_CONSTANTS = (np.sqrt(2.0), 1 / np.sqrt(2.0), 0.044715, np.sqrt(2 / np.pi))
_FLOATS = {onnx.TensorProto.FLOAT16, onnx.TensorProto.FLOAT, onnx.TensorProto.BFLOAT16, onnx.TensorProto.DOUBLE}
_D = onnx.TensorProto.DOUBLE


def to_fp64(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy computing in float64 wherever ``model`` computes in a float type.

    onnxruntime has no double Erf: Erf(x) becomes tanh(2x/√π) (and Gelu its decomposition
    with that), in both models alike, so they still compute the same function.  One-element
    constants that are GELU's irrational constants as an exporter rounded them (in the fp16
    or fp32 of the model) become the exact values, which is what the fusion takes them for.
    """
    out = onnx.ModelProto()
    out.CopyFrom(model)
    counter = [0]

    def fresh() -> str:
        counter[0] += 1
        return f"__f64_{counter[0]}"

    def tensor(t: onnx.TensorProto) -> None:
        if t.data_type in _FLOATS and t.data_type != _D:
            rtol = 1e-3 if t.data_type == onnx.TensorProto.FLOAT16 else 1e-6
            value = onnx.numpy_helper.to_array(t).astype(np.float64)
            if value.size == 1:  # GELU's irrational constants as rounded: exactly, as the fused node has them
                exact = [c for c in _GELU_CONSTANTS if abs(float(value.reshape(-1)[0]) - c) <= rtol * c]
                value = np.full(value.shape, exact[0]) if exact else value
            t.CopyFrom(onnx.numpy_helper.from_array(value, t.name))

    def const(v: float) -> tuple[str, onnx.NodeProto]:
        name = fresh()
        return name, onnx.helper.make_node("Constant", [], [name], value=onnx.numpy_helper.from_array(np.array(v, np.float64)))

    def erf(x: str, y: str) -> list:
        c, k = const(2.0 / np.sqrt(np.pi))
        m = fresh()
        return [k, onnx.helper.make_node("Mul", [x, c], [m]), onnx.helper.make_node("Tanh", [m], [y])]

    def nodes(container) -> None:
        new = []
        for n in container.node:
            for a in n.attribute:
                if a.type == onnx.AttributeProto.TENSOR:
                    tensor(a.t)
                elif n.op_type == "Cast" and a.name == "to" and a.i in _FLOATS:
                    a.i = _D
            if n.op_type == "Erf" and n.domain in ("", "ai.onnx"):
                new += erf(n.input[0], n.output[0])
                continue
            approx = next((a.s for a in n.attribute if a.name == "approximate"), b"none")
            if n.op_type == "Gelu" and n.domain in ("", "ai.onnx") and approx == b"none":
                x, y = n.input[0], n.output[0]
                r2, k1 = const(1 / np.sqrt(2.0))
                one, k2 = const(1.0)
                half, k3 = const(0.5)
                s, e, p, h = fresh(), fresh(), fresh(), fresh()
                new += [k1, k2, k3, onnx.helper.make_node("Mul", [x, r2], [s])] + erf(s, e)
                new += [onnx.helper.make_node("Add", [e, one], [p]), onnx.helper.make_node("Mul", [x, half], [h])]
                new.append(onnx.helper.make_node("Mul", [h, p], [y]))
                continue
            if n.op_type in _FLOAT_ONLY and n.domain in ("", "ai.onnx"):  # exact here: see _FLOAT_ONLY
                ins = [fresh() for _ in n.input]
                new += [onnx.helper.make_node("Cast", [i], [j], to=onnx.TensorProto.FLOAT) for i, j in zip(n.input, ins)]
                y = n.output[0]
                n.input[:] = ins
                n.output[0] = fresh()
                new += [n, onnx.helper.make_node("Cast", [n.output[0]], [y], to=_D)]
                continue
            if n.op_type == "Constant" and any(a.name in ("value_float", "value_floats") for a in n.attribute):
                raw = fresh()
                y = n.output[0]
                n.output[0] = raw
                new += [n, onnx.helper.make_node("Cast", [raw], [y], to=_D)]
                continue
            new.append(n)
        del container.node[:]
        container.node.extend(new)

    graphs = list(_graphs(out))  # before any node list is rebuilt (bodies are copied with it)
    for g in reversed(graphs):  # innermost first
        for vi in (*g.input, *g.output, *g.value_info):
            if vi.type.tensor_type.elem_type in _FLOATS:
                vi.type.tensor_type.elem_type = _D
        for t in g.initializer:
            tensor(t)
        nodes(g)
    for f in out.functions:
        nodes(f)
    return out


# -- the trouble families (tests/fuzz/trouble.py) -------------------------------------------


def check_semantics(case) -> fusion.PassResult:
    """Fusing a :class:`~tests.fuzz.trouble.TroubleCase` does not crash, and either nothing is
    fused or the fused model is valid and computes what the original does on the case's feeds
    and on fusion.verify's own default checks (DEFAULT_EXTRA_CHECKS)."""
    from fusion.compare.verify import verify  # noqa: PLC0415

    model = case.model
    try:
        onnx.checker.check_model(model, full_check=True)
        _run(model.SerializeToString(), case.feeds[0])
    except Exception as e:
        raise GeneratorBug(f"the generated model is invalid: {e}") from e
    before = model.SerializeToString()
    # The plugin target fuses nothing unless passes are named; the others keep their defaults.
    result = fusion.run(model, NORM_FC_PASSES if case.target == "plugin" else None, target=case.target)
    assert model.SerializeToString() == before, "fusing modified the input model"
    if case.must_not_fuse:
        assert not result.fusions, f"{case.what}: must not fuse\n{_explain(result)}"
        return result
    keep = case.extra.get("keep")
    if keep:  # (random outputs: what must stay unfused is checked, not the values)
        assert any(n.op_type == keep for n in result.model.graph.node), f"{case.what}: {keep} was fused\n{_explain(result)}"
        onnx.checker.check_model(result.model, full_check=True)
        return result
    if not result.modified:
        return result
    onnx.checker.check_model(result.model, full_check=True)
    assert not [w for w in result.warnings if "no ONNX function attached" in w], result.warnings
    for label, kwargs in (("case feeds", {"inputs": case.feeds, "extra_checks": False}), ("verify", {"extra_checks": True})):
        try:
            rep = verify(model, result.model, **kwargs)
        except fusion.FusionError as e:  # (made inputs the original cannot run: nothing to compare)
            if label == "verify":
                continue
            raise
        if label == "case feeds" and rep.skipped:
            raise GeneratorBug(f"{case.family}: the original fails on a feed: {rep.skipped[0]}")
        assert rep.passed, f"{case.family} ({case.what}), {label}:\n{rep.table()}\n{_explain(result)}"
    return result


# -- regressions --------------------------------------------------------------------------


def save_regression(case: Case, error: BaseException | str, directory: Path | None = None, note: str = "") -> Path:
    """Write the failing model and what it must give to ``tests/regressions/<hash>.onnx/.json``.

    FUSION_REGRESSIONS_DIR overrides the directory (CI can collect them as artifacts).
    """
    directory = Path(os.environ.get("FUSION_REGRESSIONS_DIR", directory or REGRESSIONS))
    directory.mkdir(parents=True, exist_ok=True)
    data = case.model.SerializeToString()
    stem = hashlib.sha256(data).hexdigest()[:16]
    (directory / f"{stem}.onnx").write_bytes(data)
    meta = {
        "expected": case.expected,
        "feeds": [f.to_json() for f in case.feeds],
        "dims": case.dims,
        "seed": case.seed,
        "dtype": case.dtype,
        "spec": repr(case.spec),
        "error": (str(error).strip().splitlines() or [type(error).__name__])[0][:500],
    }
    if case.bare is not None and case.bare != case.expected:
        meta["bare"] = case.bare
    if note:
        meta["note"] = note
    (directory / f"{stem}.json").write_text(json.dumps(meta, indent=1, sort_keys=True) + "\n")
    return directory / f"{stem}.onnx"


def load_regression(path: Path) -> Case:
    meta = json.loads(path.with_suffix(".json").read_text())
    model = onnx.load(str(path))
    return Case(
        model,
        {k: int(v) for k, v in meta["expected"].items()},
        [Feed.from_json(f) for f in meta["feeds"]],
        meta["dims"],
        meta["seed"],
        meta["dtype"],
        meta.get("spec"),
        {k: int(v) for k, v in meta["bare"].items()} if "bare" in meta else None,
    )
