"""LayerNorm / RMSNorm / erf-GELU kernels (the plugin's own sources, via cupy.RawModule)
against a float64 NumPy reference: edge shapes, every dtype, with and without γ/β,
unaligned pointers, NaN/Inf, large fp16 magnitudes and large means."""

from __future__ import annotations

import numpy as np
import pytest

from fusion.plugins.library import launch_norm, norm_launch_config

pytestmark = pytest.mark.gpu

DTYPES = ("float32", "float16", "bfloat16")
COLS = (1, 3, 255, 1023, 1025, 4097, 16384)
# |err| <= atol + rtol * |ref|: about two output roundings of each type.
TOL = {"float32": (2e-5, 2e-5), "float16": (2e-3, 2e-3), "bfloat16": (1.6e-2, 1.6e-2)}
AFFINE = {"layernorm": ("none", "scale", "scale+bias"), "rmsnorm": ("none", "scale")}


# ------------------------------------------------------------------ host <-> device dtypes


def to_bits(a: np.ndarray, dtype: str) -> np.ndarray:
    """float32 values -> the array uploaded for `dtype` (bf16 as uint16 bits, RNE)."""
    a = np.ascontiguousarray(a, dtype=np.float32)
    if dtype == "float32":
        return a
    if dtype == "float16":
        return a.astype(np.float16)
    u = a.view(np.uint32).astype(np.uint64)
    rounded = ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(np.isnan(a), np.uint16(0x7FC0), rounded).astype(np.uint16)


def from_bits(a: np.ndarray, dtype: str) -> np.ndarray:
    """Device array contents -> float64 values."""
    if dtype == "bfloat16":
        return (a.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    return a.astype(np.float64)


def quantized(a: np.ndarray, dtype: str) -> np.ndarray:
    return from_bits(to_bits(a, dtype), dtype)


# ------------------------------------------------------------------ reference and runner


def reference(op: str, x: np.ndarray, g, b, eps: float) -> np.ndarray:
    x = x.astype(np.float64)
    if op == "layernorm":
        mean = x.mean(axis=-1, keepdims=True)
        var = ((x - mean) ** 2).mean(axis=-1, keepdims=True)
        y = (x - mean) / np.sqrt(var + eps)
    else:
        y = x / np.sqrt((x * x).mean(axis=-1, keepdims=True) + eps)
    if g is not None:
        y = y * g
    if b is not None:
        y = y + b
    return y


def run_norm(cp, module, op, dtype, x, g=None, b=None, eps=1e-5, offset=0):
    """Upload (optionally `offset` elements past a 16-byte boundary), launch, download."""
    rows, cols = x.shape

    def upload(a):
        if a is None:
            return None, None
        bits = to_bits(a, dtype).ravel()
        buf = cp.zeros(bits.size + offset, dtype=bits.dtype)
        view = buf[offset:]
        view.set(bits)
        return buf, view

    keep = []
    ptrs = []
    for a in (x, g, b):
        buf, view = upload(a)
        keep.append(buf)
        ptrs.append(None if view is None else view.data.ptr)
    ybits = to_bits(np.zeros(1, np.float32), dtype)
    ybuf = cp.full(rows * cols + offset, np.nan if dtype != "bfloat16" else 0x7FC0, dtype=ybits.dtype)
    y = ybuf[offset:]
    name = launch_norm(module, op, dtype, ptrs[0], ptrs[1], ptrs[2], y.data.ptr, rows, cols, eps)
    cp.cuda.runtime.deviceSynchronize()
    return from_bits(y.get(), dtype).reshape(rows, cols), name


def inputs(rng, rows, cols, dtype, affine, op):
    x = quantized(rng.standard_normal((rows, cols)) * 2.0 + rng.uniform(-3, 3, (rows, 1)), dtype)
    g = quantized(rng.uniform(0.5, 1.5, cols), dtype) if affine != "none" else None
    b = quantized(rng.uniform(-1, 1, cols), dtype) if affine == "scale+bias" and op == "layernorm" else None
    return x, g, b


def errors(got, ref, dtype):
    atol, rtol = TOL[dtype]
    err = np.abs(got - ref)
    ok = bool(np.all(err <= atol + rtol * np.abs(ref)))
    return float(err.max()), float((err / np.maximum(np.abs(ref), 1e-3)).max()), ok


def large_rows(cols: int) -> int:
    # More rows than one wave of CTAs fills (132 SMs), odd so the last CTA is partial.
    return 4099 if cols <= 1025 else (1031 if cols <= 4097 else 517)


# ------------------------------------------------------------------ tests


@pytest.mark.parametrize("op", ["layernorm", "rmsnorm"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", COLS)
@pytest.mark.parametrize("rows_kind", ["1", "large"])
def test_edge_shapes(cp, kernels, kernel_report, op, dtype, cols, rows_kind):
    rows = 1 if rows_kind == "1" else large_rows(cols)
    rng = np.random.default_rng(cols * 7 + rows)
    for affine in AFFINE[op]:
        x, g, b = inputs(rng, rows, cols, dtype, affine, op)
        got, name = run_norm(cp, kernels[op], op, dtype, x, g, b, eps=1e-5)
        ref = reference(op, x, g, b, 1e-5)
        max_abs, max_rel, ok = errors(got, ref, dtype)
        kernel_report.append(
            {"op": op, "dtype": dtype, "rows": rows, "cols": cols, "affine": affine, "kernel": name,
             "max_abs_err": max_abs, "max_rel_err": max_rel, "tol": TOL[dtype], "ok": ok}
        )  # fmt: skip
        assert ok, f"{op} {dtype} {rows}x{cols} {affine} ({name}): max abs err {max_abs}"


@pytest.mark.parametrize("op", ["layernorm", "rmsnorm"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", [1536, 2048, 3072, 4096])
def test_mid_rows(cp, kernels, kernel_report, op, dtype, cols):
    """Rows of 192..1024 packs, vectorized: the warp/block boundary."""
    rng = np.random.default_rng(cols + 1)
    x, g, b = inputs(rng, 1031, cols, dtype, "scale+bias", op)
    got, name = run_norm(cp, kernels[op], op, dtype, x, g, b)
    max_abs, max_rel, ok = errors(got, reference(op, x, g, b, 1e-5), dtype)
    kernel_report.append(
        {"op": op, "dtype": dtype, "rows": 1031, "cols": cols, "affine": "scale+bias", "kernel": name,
         "max_abs_err": max_abs, "max_rel_err": max_rel, "tol": TOL[dtype], "ok": ok}
    )  # fmt: skip
    assert ok, f"{op} {dtype} {cols} ({name}): {max_abs}"


@pytest.mark.parametrize("op", ["layernorm", "rmsnorm"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", [768, 4096, 16384])
def test_unaligned_pointers(cp, kernels, kernel_report, op, dtype, cols):
    """One element past a 16-byte boundary: the scalar (v1) kernels must take over."""
    rng = np.random.default_rng(cols)
    x, g, b = inputs(rng, 67, cols, dtype, "scale+bias", op)
    got, name = run_norm(cp, kernels[op], op, dtype, x, g, b, offset=1)
    assert "_v1" in name
    max_abs, max_rel, ok = errors(got, reference(op, x, g, b, 1e-5), dtype)
    kernel_report.append(
        {"op": op, "dtype": dtype, "rows": 67, "cols": cols, "affine": "scale+bias (unaligned)", "kernel": name,
         "max_abs_err": max_abs, "max_rel_err": max_rel, "tol": TOL[dtype], "ok": ok}
    )  # fmt: skip
    assert ok, f"unaligned {op} {dtype} {cols}: {max_abs}"


@pytest.mark.parametrize("op", ["layernorm", "rmsnorm"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", [768, 1025, 8192])
def test_nan_inf_propagate(cp, kernels, op, dtype, cols):
    rng = np.random.default_rng(3)
    x, g, b = inputs(rng, 6, cols, dtype, "scale+bias", op)
    x[1, cols // 2] = np.nan
    x[2, 0] = np.inf
    x[3, cols - 1] = -np.inf
    got, _ = run_norm(cp, kernels[op], op, dtype, x, g, b)
    with np.errstate(invalid="ignore"):
        ref = reference(op, x, g, b, 1e-5)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    assert np.isnan(got[1]).all() and np.isnan(got[2, 0])
    finite = np.isfinite(ref)
    assert errors(got[finite], ref[finite], dtype)[2]
    assert np.isfinite(got[[0, 4, 5]]).all()  # other rows untouched


@pytest.mark.parametrize("op", ["layernorm", "rmsnorm"])
def test_large_fp16_magnitudes(cp, kernels, op):
    """Squares of 6e4 overflow fp16; the kernels accumulate in fp32."""
    rng = np.random.default_rng(5)
    x = quantized(rng.uniform(-65000, 65000, (33, 4096)), "float16")
    got, _ = run_norm(cp, kernels[op], op, "float16", x, eps=1e-5)
    assert np.isfinite(got).all()
    assert errors(got, reference(op, x, None, None, 1e-5), "float16")[2]


def test_large_mean_fp32(cp, kernels):
    """Rows at 1e4 with unit noise: E[x^2]-E[x]^2, or even x - mean with the mean rounded to
    fp32 (half an ulp of 1e4 is 5e-4), would miss this bound."""
    rng = np.random.default_rng(9)
    x = (1e4 + rng.standard_normal((64, 2048))).astype(np.float32).astype(np.float64)
    got, _ = run_norm(cp, kernels["layernorm"], "layernorm", "float32", x)
    ref = reference("layernorm", x, None, None, 1e-5)
    assert np.abs(got - ref).max() < 1e-4


@pytest.mark.parametrize("op", ["layernorm", "rmsnorm"])
def test_epsilon_honoured(cp, kernels, op):
    rng = np.random.default_rng(11)
    x = quantized(rng.standard_normal((16, 1024)) * 0.05, "float32")
    got, _ = run_norm(cp, kernels[op], op, "float32", x, eps=0.01)
    assert errors(got, reference(op, x, None, None, 0.01), "float32")[2]
    assert not errors(got, reference(op, x, None, None, 1e-5), "float32")[2]  # the check can fail


@pytest.mark.parametrize("dtype", DTYPES)
def test_every_path_covered(dtype):
    """The shapes above reach warp, block and loop kernels, vectorized and scalar."""
    names = {norm_launch_config("layernorm", dtype, 8, c, True)[0].split("_")[2] for c in COLS}
    names |= {norm_launch_config("layernorm", dtype, 8, 16384, False)[0].split("_")[2]}
    assert names == {"warp", "block", "loop"}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 1000, 4096 + 3, 65536])
def test_gelu_erf(cp, kernels, kernel_report, dtype, n):
    from math import erf

    rng = np.random.default_rng(n)
    x = quantized(rng.uniform(-5, 5, n), dtype)
    buf = cp.asarray(to_bits(x, dtype))
    vec = dtype == "float32" and n % 4 == 0 or dtype != "float32" and n % 8 == 0
    tag = {"float32": "f32", "float16": "f16", "bfloat16": "bf16"}[dtype]
    width = (4 if dtype == "float32" else 8) if vec else 1
    fn = kernels["fc"].get_function(f"fusion_gelu_erf_{tag}_v{width}")
    fn((max(1, -(-n // width) // 256 + 1),), (256,), (buf, np.int64(n)))
    got = from_bits(buf.get(), dtype)
    ref = np.array([0.5 * v * (1 + erf(v / np.sqrt(2))) for v in x])
    max_abs, max_rel, ok = errors(got, ref, dtype)
    kernel_report.append(
        {"op": "gelu_erf", "dtype": dtype, "rows": 1, "cols": n, "affine": "",
         "kernel": f"fusion_gelu_erf_{tag}_v{width}", "max_abs_err": max_abs, "max_rel_err": max_rel, "tol": TOL[dtype], "ok": ok}
    )  # fmt: skip
    assert ok
