"""Skip LayerNorm / RMSNorm kernels (plugin_src/skipnorm, via cupy.RawModule) against NumPy:
every path (warp, block, loop), dtype, with and without bias / γ / β / the sum output,
unaligned pointers.  The sum is x + skip (+ bias) rounded to the type after each add."""

from __future__ import annotations

import numpy as np
import pytest

from fusion.plugins.library import launch_skip_norm, load_kernel_module

from .test_norm_kernels import TOL, from_bits, quantized, reference, to_bits

pytestmark = pytest.mark.gpu

DTYPES = ("float32", "float16", "bfloat16")
COLS = (1, 3, 64, 768, 1025, 4096, 16384)


@pytest.fixture(scope="module")
def module(cp):
    m = load_kernel_module("skipnorm")
    m.compile()
    return m


def _run(cp, module, op, dtype, x, k, bias, g, b, with_sum, eps, offset):
    rows, cols = x.shape
    keep, ptrs = [], []
    for a in (x, k, bias, g, b):
        if a is None:
            ptrs.append(None)
            continue
        bits = to_bits(a, dtype).ravel()
        buf = cp.zeros(bits.size + offset, dtype=bits.dtype)
        buf[offset:].set(bits)
        keep.append(buf)
        ptrs.append(buf[offset:].data.ptr)
    store = to_bits(np.zeros(1, np.float32), dtype).dtype
    y = cp.zeros(rows * cols + offset, dtype=store)
    s = cp.zeros(rows * cols + offset, dtype=store) if with_sum else None
    launch_skip_norm(module, op, dtype, ptrs[0], ptrs[1], ptrs[2], ptrs[3], ptrs[4], y[offset:].data.ptr,
                     None if s is None else s[offset:].data.ptr, rows, cols, eps)
    cp.cuda.runtime.deviceSynchronize()
    out_y = from_bits(y[offset:].get(), dtype).reshape(rows, cols)
    out_s = None if s is None else from_bits(s[offset:].get(), dtype).reshape(rows, cols)
    return out_y, out_s


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("cols", COLS)
@pytest.mark.parametrize("op", ["layernorm", "rmsnorm"])
@pytest.mark.parametrize("variant", ["plain", "bias+sum", "bias+sum+unaligned"])
def test_skip_norm_matches_numpy(cp, module, op, dtype, cols, variant):
    rng = np.random.default_rng(cols)
    rows = 37
    x = quantized(rng.standard_normal((rows, cols)) * 2 + 3, dtype)
    k = quantized(rng.standard_normal((rows, cols)), dtype)
    has_bias = "bias" in variant
    bias = quantized(rng.standard_normal(cols), dtype) if has_bias else None
    g = quantized(rng.standard_normal(cols), dtype)
    b = quantized(rng.standard_normal(cols), dtype) if op == "layernorm" else None
    s = quantized(x + k, dtype)
    if has_bias:
        s = quantized(s + bias, dtype)
    want = reference(op, s, g, b, 1e-5)
    y, got_sum = _run(cp, module, op, dtype, x, k, bias, g, b, "sum" in variant, 1e-5, 1 if "unaligned" in variant else 0)
    atol, rtol = TOL[dtype]
    assert np.all(np.abs(y - want) <= atol + rtol * np.abs(want)), float(np.abs(y - want).max())
    if got_sum is not None:
        assert np.array_equal(got_sum, s)
