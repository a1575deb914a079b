"""The FusedGroupNorm kernel (the plugin's own source, via cupy.RawModule) against a float64
NumPy reference: UNet shapes, odd sizes, rank 2, a large mean, fp32/fp16, with and without the
fused SiLU.  Skipped without CuPy and a GPU (written for the next session with the H100)."""

from __future__ import annotations

import numpy as np
import pytest

from fusion.plugins.library import launch_groupnorm, load_kernel_module

pytestmark = pytest.mark.gpu

TOL = {"float32": (2e-5, 2e-5), "float16": (2e-3, 2e-3)}
SHAPES = [
    ((2, 64, 8, 8), 32),  # a UNet block
    ((1, 320, 16, 16), 32),  # batch 1: few CTAs
    ((3, 30, 7), 5),  # C / G = 6, spatial 7: no aligned rows
    ((4, 16), 4),  # rank 2: spatial 1
    ((2, 8, 3, 5, 7), 2),  # rank 5
    ((1, 32, 96, 96), 1),  # one group of 295k elements: the grid-stride loops
]


def reference(x, g, b, groups, eps, silu):
    n, c = x.shape[:2]
    v = x.astype(np.float64).reshape(n, groups, -1)
    mean = v.mean(axis=-1, keepdims=True)
    var = ((v - mean) ** 2).mean(axis=-1, keepdims=True)
    y = ((v - mean) / np.sqrt(var + eps)).reshape(x.shape)
    shape = [1, c] + [1] * (x.ndim - 2)
    y = y * g.astype(np.float64).reshape(shape) + b.astype(np.float64).reshape(shape)
    return y / (1 + np.exp(-y)) if silu else y


@pytest.fixture(scope="module")
def module(cp):
    m = load_kernel_module("groupnorm")
    m.compile()
    return m


@pytest.mark.parametrize("silu", [False, True])
@pytest.mark.parametrize("dtype", sorted(TOL))
@pytest.mark.parametrize("shape,groups", SHAPES, ids=[f"{'x'.join(map(str, s))}_g{g}" for s, g in SHAPES])
def test_groupnorm_kernel_matches_numpy(cp, module, kernel_report, shape, groups, dtype, silu):
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 2 + 8).astype(dtype)  # a large mean: the two-pass variance
    c = shape[1]
    g = rng.uniform(-1.5, 1.5, c).astype(dtype)
    b = rng.uniform(-1.5, 1.5, c).astype(dtype)
    dx, dg, db = cp.asarray(x), cp.asarray(g), cp.asarray(b)
    dy = cp.full(shape, np.nan, dtype=dtype)
    spatial = int(np.prod(shape[2:], dtype=np.int64))
    name = launch_groupnorm(module, dtype, dx.data.ptr, dg.data.ptr, db.data.ptr, dy.data.ptr, shape[0], c, groups,
                            spatial, 1e-5, silu)  # fmt: skip
    cp.cuda.runtime.deviceSynchronize()
    got = cp.asnumpy(dy).astype(np.float64)
    want = reference(x, g, b, groups, 1e-5, silu)
    atol, rtol = TOL[dtype]
    err = np.abs(got - want)
    kernel_report.append({"kernel": name, "shape": list(shape), "groups": groups, "silu": silu,
                          "max_abs_err": float(err.max())})  # fmt: skip
    assert np.all(np.isfinite(got))
    assert np.all(err <= atol + rtol * np.abs(want)), float(err.max())


def test_groupnorm_empty_batch_launches_nothing(cp, module):
    from fusion.plugins.library import groupnorm_launch_config

    with pytest.raises(ValueError, match="nothing to launch"):
        groupnorm_launch_config("float32", 0, 64, 32, 64)
