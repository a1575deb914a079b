"""The FusedGroupNorm kernels (the plugin's own source, via cupy.RawModule) against a float64
NumPy reference: every register-path instantiation (each K, vector and scalar packs, fp32/fp16),
the staged kernels (sm_90+; bit for bit the register path's outputs), the wide kernels (a
register head and a shared tail), the stream kernels (sm_90+: a group's chunks on many CTAs, on
any grid bit for bit the same), unaligned
pointers, odd sizes, spatial sizes that split a vector between channels, the loop path for
large groups, rank 2 and 5, a large mean, with and without the fused SiLU.  Skipped without
CuPy and a GPU; tests/test_plugins.py checks (without a GPU) that CASES reach every kernel the
library instantiates."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from fusion.plugins.library import (
    GROUPNORM_STATIC_SMEM, GROUPNORM_STREAM_THREADS, device_groupnorm_limits, groupnorm_blocks, groupnorm_launch_config,
    groupnorm_reg_kernel, groupnorm_smem, groupnorm_staged_kernel, groupnorm_stream_chunks, groupnorm_stream_kernel,
    groupnorm_stream_launch, groupnorm_wide_kernel, launch_groupnorm, library_groupnorm_device,
    load_kernel_module)  # fmt: skip

TOL = {"float32": (2e-5, 2e-5), "float16": (2e-3, 2e-3)}
# (shape, groups, offset): offset > 0 starts x and y that many elements past a 16-byte boundary.
# The comments name the kernel fp32 / fp16 get (groupnorm_launch_config; checked below) on an
# H100, [and before sm_90] where that differs.
CASES = [
    ((2, 64, 8, 8), 32, 0),  # cols 128: v4_k4 / v8_k8
    ((2, 32, 16, 16), 4, 0),  # cols 2048: v4_k8 / v8_k8
    ((1, 320, 16, 16), 32, 0),  # batch 1 (few CTAs), cols 2560: v4_k16 / v8_k16
    ((2, 96, 8, 8), 1, 0),  # cols 6144: v4_k24 / v8_k32
    ((1, 128, 8, 8), 1, 0),  # cols 8192: v4_k32 / v8_k32
    ((2, 64, 48, 48), 16, 0),  # cols 9216: v4_k40 / v8_k48
    ((2, 1280, 16, 16), 32, 0),  # SD-UNet 1280x16x16, cols 10240: v4_k40 / v8_k48
    ((2, 64, 16, 16), 1, 0),  # cols 16384: v4_k40 / v8_k64
    ((2, 640, 32, 32), 32, 0),  # SD-UNet 640x32x32, cols 20480: v4_k40 / v8_k80
    ((1, 56, 32, 32), 2, 0),  # cols 28672: v4_k40 / v8_k80
    ((2, 320, 64, 64), 32, 0),  # SD-UNet 320x64x64, cols 40960: v4_k40 (1024 threads; staged) / v8_k80
    ((200, 24, 32, 32), 1, 0),  # cols 24576: v4_k40 in 640 threads (staged: 200 rows > SMs) / v8_k80
    ((1, 80, 32, 32), 1, 0),  # SDXL's 640x64x64 groups, cols 81920: stream [wide_k32] / wide_k64 in 512 threads
    ((1, 4096, 3, 3), 1, 0),  # cols 36864, spatial 9: v4_k40 / v8_k80, packs span channels
    ((1, 41, 32, 32), 1, 0),  # cols 41984 > 1024 x 40: stream, 21 chunks [wide_k32, a 36 KB tail] / wide_k64 in 512 threads
    ((140, 41, 32, 32), 1, 0),  # 140 groups of 41984: stream [wide_k32] / as above
    ((300, 41, 32, 32), 1, 0),  # 300 groups of 41984 > 2 x SMs: as above / wide_k48 in 512 threads, head first
    ((140, 82, 32, 32), 1, 0),  # 140 groups of 83968 > SMs: stream [wide_k32] / wide_k48, the next head ahead
    ((3, 20, 2601), 1, 0),  # cols 52020, spatial 2601: stream, packs span channels [wide_k32] / loop (scalar)
    ((1, 64, 64, 64), 2, 0),  # cols 131072: stream, 64 chunks [loop; a 384 KB tail] / wide_k64 (128 KB)
    ((1, 48, 47, 49), 1, 0),  # cols 110544, spatial 2303: stream, packs span channels [loop] / wide_k64
    ((3, 30, 7), 5, 0),  # C / G = 6, spatial 7, cols 42: v1_k8 (no aligned rows)
    ((2, 16, 2, 3), 2, 0),  # cols 48, spatial 6: v4_k4 / v8_k8, packs span channels
    ((2, 32, 2, 2), 4, 0),  # cols 32, spatial 4: v4_k4 / v8_k8 (fp16 packs span channels)
    ((4, 16), 4, 0),  # rank 2, spatial 1, cols 4: v4_k4 (a channel per element) / v1_k8
    ((2, 8, 3, 5, 7), 2, 0),  # rank 5, cols 420: v4_k4 / v1_k8
    ((2, 64, 8, 8), 32, 1),  # unaligned x, y, cols 128: v1_k8
    ((1, 3, 1000), 1, 1),  # unaligned, cols 3000: v1_k16
    ((2, 40, 25, 25), 2, 1),  # unaligned, cols 12500: v1_k24
    ((1, 96, 16, 16), 1, 1),  # unaligned, cols 24576: v1_k24 (the scalar path's largest)
    ((2, 5, 5005), 1, 0),  # cols 25025, odd, > 1024 x 24: loop
    ((1, 32, 100, 100), 4, 1),  # unaligned, cols 80000: loop
    ((1, 32, 96, 96), 1, 0),  # one group of 294912: stream, 144 / 72 chunks (past the 96 read ahead) [loop]
    ((1, 8, 256, 256), 1, 0),  # one group of 524288: stream, 256 / 128 chunks [loop]
]


def case_id(case) -> str:
    shape, groups, offset = case
    return f"{'x'.join(map(str, shape))}_g{groups}" + (f"_off{offset}" if offset else "")


def planned(dtype: str, case, device: tuple[int, ...] | None = None) -> str:
    """The kernel the launch policy picks for a case (offset elements past an aligned base) on a
    device (stage_sms, smem_optin, stream_ctas) (None: CuPy's current device)."""
    shape, groups, offset = case
    spatial = int(np.prod(shape[2:], dtype=np.int64))
    itemsize = np.dtype(dtype).itemsize
    aligned = (offset * itemsize) % 16 == 0
    device = device_groupnorm_limits() if device is None else device
    return groupnorm_launch_config(dtype, shape[0], shape[1], groups, spatial, aligned, *device)[0]


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


@pytest.mark.gpu
@pytest.mark.parametrize("silu", [False, True])
@pytest.mark.parametrize("dtype", sorted(TOL))
@pytest.mark.parametrize("case", CASES, ids=[case_id(c) for c in CASES])
def test_groupnorm_kernel_matches_numpy(cp, module, kernel_report, case, dtype, silu):
    shape, groups, offset = case
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 2 + 8).astype(dtype)  # a large mean: the two-pass variance
    c = shape[1]
    g = rng.uniform(-1.5, 1.5, c).astype(dtype)
    b = rng.uniform(-1.5, 1.5, c).astype(dtype)
    xbuf = cp.zeros(x.size + offset, dtype=dtype)
    xbuf[offset:] = cp.asarray(x.ravel())
    ybuf = cp.full(x.size + offset, np.nan, dtype=dtype)
    dx, dy = xbuf[offset:], ybuf[offset:]
    dg, db = cp.asarray(g), cp.asarray(b)
    spatial = int(np.prod(shape[2:], dtype=np.int64))
    name = launch_groupnorm(module, dtype, dx.data.ptr, dg.data.ptr, db.data.ptr, dy.data.ptr, shape[0], c, groups,
                            spatial, 1e-5, silu)  # fmt: skip
    cp.cuda.runtime.deviceSynchronize()
    assert name == planned(dtype, case)
    got = cp.asnumpy(dy).astype(np.float64).reshape(shape)
    want = reference(x, g, b, groups, 1e-5, silu)
    atol, rtol = TOL[dtype]
    err = np.abs(got - want)
    kernel_report.append({"kernel": name, "shape": list(shape), "groups": groups, "offset": offset, "silu": silu,
                          "max_abs_err": float(err.max())})  # fmt: skip
    assert np.all(np.isfinite(got))
    assert np.all(err <= atol + rtol * np.abs(want)), float(err.max())
    if offset:
        assert bool(cp.isnan(ybuf[:offset]).all())  # nothing written before y


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", sorted(TOL))
def test_groupnorm_constant_group_is_beta(cp, module, dtype):
    """A constant group (variance 0) normalizes to 0: y = beta, no NaN from the register path."""
    shape, groups = (2, 320, 16, 16), 32
    x = np.full(shape, 3.0, dtype=dtype)
    g = np.ones(shape[1], dtype=dtype)
    b = np.linspace(-1, 1, shape[1]).astype(dtype)
    dx, dg, db = cp.asarray(x), cp.asarray(g), cp.asarray(b)  # kept alive: the pool reuses freed memory
    dy = cp.full(shape, np.nan, dtype=dtype)
    launch_groupnorm(module, dtype, dx.data.ptr, dg.data.ptr, db.data.ptr, dy.data.ptr, shape[0], shape[1], groups,
                     256, 1e-5, False)  # fmt: skip
    got = cp.asnumpy(dy).astype(np.float64)
    np.testing.assert_allclose(got, np.broadcast_to(b.astype(np.float64).reshape(1, -1, 1, 1), shape), atol=1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", sorted(TOL))
def test_groupnorm_silu_far_from_zero(cp, module, dtype):
    """The fast SiLU at its limits: y = beta (gamma 0) from -100 (exp(-y) overflows: -0) to 100."""
    beta = np.array([-100, -88, -87, -30, -5, -0.5, 0, 0.5, 5, 30, 87, 100], dtype=dtype)
    shape, groups = (2, beta.size, 4, 4), 3
    x = np.random.default_rng(1).standard_normal(shape).astype(dtype)
    dx, dg, db = cp.asarray(x), cp.zeros(beta.size, dtype=dtype), cp.asarray(beta)
    dy = cp.full(shape, np.nan, dtype=dtype)
    launch_groupnorm(module, dtype, dx.data.ptr, dg.data.ptr, db.data.ptr, dy.data.ptr, shape[0], shape[1], groups, 16,
                     1e-5, True)  # fmt: skip
    got = cp.asnumpy(dy).astype(np.float64)
    b = beta.astype(np.float64)
    want = np.broadcast_to((b / (1 + np.exp(-b))).reshape(1, -1, 1, 1), shape)
    atol, rtol = TOL[dtype]
    np.testing.assert_allclose(got, want, atol=atol, rtol=rtol)


STRIDED = [("float32", 4, 40, False), ("float32", 4, 16, False), ("float32", 4, 4, False),
           ("float16", 8, 80, False), ("float16", 8, 48, False), ("float16", 8, 16, False),
           ("float32", 1, 24, False), ("float32", 4, 40, True)]  # fmt: skip


def needs_sm90(cp) -> None:
    if int(cp.cuda.Device().compute_capability) < 90:
        pytest.skip("the staged and stream kernels need sm_90+")


@pytest.mark.gpu
@pytest.mark.parametrize("kernel", STRIDED, ids=[f"{d}_v{v}_k{k}{'_staged' * s}" for d, v, k, s in STRIDED])
def test_groupnorm_rows_grid_strided(cp, module, kernel):
    """Fewer CTAs than groups (the launcher caps the grid at INT_MAX CTAs; the staged kernels run
    one CTA per SM): each CTA takes its rows in turn, reusing its shared sums (and, staged, its
    shared row buffer and barrier, whose phase flips each row)."""
    dtype, vec, k, staged = kernel
    if staged:
        needs_sm90(cp)
    name = (groupnorm_staged_kernel if staged else groupnorm_reg_kernel)(dtype, vec, k)
    block = dict(groupnorm_blocks(vec, 2560))[k]
    check_grids(cp, module, dtype, (3, 320, 16, 16), 32, name, block, (1, 5, 95), seed=2)  # 96 groups of 2560


def check_grids(cp, module, dtype: str, shape: tuple, groups: int, name: str, block: int, grids: tuple,
                seed: int) -> list:  # fmt: skip
    """Launch `name` (with SiLU) on each grid and compare with the float64 reference; the outputs."""
    rng = np.random.default_rng(seed)
    x = (rng.standard_normal(shape) * 3 - 5).astype(dtype)
    g = rng.uniform(-1.5, 1.5, shape[1]).astype(dtype)
    b = rng.uniform(-1.5, 1.5, shape[1]).astype(dtype)
    dx, dg, db = cp.asarray(x), cp.asarray(g), cp.asarray(b)
    spatial = int(np.prod(shape[2:], dtype=np.int64))
    atol, rtol = TOL[dtype]
    outs = []
    for grid in grids:
        patience = grid[1] if isinstance(grid, tuple) else 64
        grid = grid[0] if isinstance(grid, tuple) else grid
        dy = cp.full(shape, np.nan, dtype=dtype)
        launch_groupnorm(module, dtype, dx.data.ptr, dg.data.ptr, db.data.ptr, dy.data.ptr, shape[0], shape[1],
                         groups, spatial, 1e-5, True, (name, grid, block), patience)  # fmt: skip
        got = cp.asnumpy(dy)
        np.testing.assert_allclose(got.astype(np.float64), reference(x, g, b, groups, 1e-5, True), atol=atol, rtol=rtol,
                                   err_msg=str(grid))  # fmt: skip
        outs.append(got)
    return outs


@pytest.mark.gpu
@pytest.mark.parametrize("silu", [False, True])
def test_groupnorm_staged_is_the_register_path_bit_for_bit(cp, module, silu):
    """Staging changes where a row waits, not what is computed: outputs equal the register
    path's exactly, on one CTA, a few, one per SM and one per row."""
    needs_sm90(cp)
    dtype, vec, k = "float32", 4, 40
    shape, groups = (40, 64, 32, 32), 2  # 80 groups of 32768: > 512 threads at the largest K
    cols = shape[1] // groups * 32 * 32
    block = dict(groupnorm_blocks(vec, cols))[k]
    rng = np.random.default_rng(3)
    x = (rng.standard_normal(shape) * 4 + 20).astype(dtype)
    g = rng.uniform(-1.5, 1.5, shape[1]).astype(dtype)
    b = rng.uniform(-1.5, 1.5, shape[1]).astype(dtype)
    dx, dg, db = cp.asarray(x), cp.asarray(g), cp.asarray(b)

    def run(name: str, grid: int):
        dy = cp.full(shape, np.nan, dtype=dtype)
        launch_groupnorm(module, dtype, dx.data.ptr, dg.data.ptr, db.data.ptr, dy.data.ptr, shape[0], shape[1],
                         groups, 32 * 32, 1e-5, silu, (name, grid, block))  # fmt: skip
        return cp.asnumpy(dy)

    want = run(groupnorm_reg_kernel(dtype, vec, k), 80)
    assert np.all(np.isfinite(want))
    for grid in (1, 3, 79, 80):
        np.testing.assert_array_equal(run(groupnorm_staged_kernel(dtype, vec, k), grid), want, err_msg=str(grid))


WIDE = [("float32", 4, 32), ("float16", 8, 48), ("float16", 8, 64)]


@pytest.mark.gpu
@pytest.mark.parametrize("block", [1024, 512])
@pytest.mark.parametrize("kernel", WIDE, ids=[f"{d}_v{v}_k{k}" for d, v, k in WIDE])
def test_groupnorm_wide_rows_grid_strided(cp, module, kernel, block):
    """The wide path on fewer CTAs than groups: each CTA reuses its shared tail row after row,
    loading its next row's tail as it writes (and its head, fp16 K = 48) (uneven: 10 rows on 3
    CTAs); a tail of one pack less than the threads, so some threads hold none.  In 1024-thread
    CTAs and in the 512-thread ones fp16 takes where a register-path CTA would fill the SM."""
    dtype, vec, k = kernel
    # 10 groups of vec channels x ((k / vec + 1) * block - 1): k / vec * block packs in the head,
    # block - 1 in the tail, and packs that span two channels (odd spatial).
    spatial = (k // vec + 1) * block - 1
    check_grids(cp, module, dtype, (5, 2 * vec, spatial), 2, groupnorm_wide_kernel(dtype, vec, k), block, (1, 3, 10),
                seed=4)  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("path", ["policy", "wide"])
@pytest.mark.parametrize("data", ["tiny_spread", "sampled_part_off", "outlier_first"])
@pytest.mark.parametrize("shape", [(2, 384, 64, 64), (1, 320, 128, 128)], ids=["g49152", "g163840"])
@pytest.mark.parametrize("dtype", sorted(TOL))
def test_groupnorm_large_group_statistics(cp, module, dtype, shape, data, path):
    """The statistics of the paths past the registers against float64 on the data that breaks a
    careless variance: a spread far below the mean, the sampled packs' region far from the rest of
    the group, an outlier as the first element.  The wide path's one pass (about the mean of each
    thread's first pack), the stream path's chunks (one pass each about the mean of its threads'
    first packs, published about the row's first element, merged about chunk 0's).  path
    "policy": the launcher's pick on this device (H100: fp32 the stream path, fp16 the wide kernel
    in 512 or 1024 threads); "wide": the wide kernel on one CTA a group where its tail fits the
    device."""
    cols = shape[1] // 32 * shape[2] * shape[3]
    limits = device_groupnorm_limits()
    config = None
    if path == "wide":
        vec, k = (4, 32) if dtype == "float32" else (8, 64)
        name = groupnorm_wide_kernel(dtype, vec, k)
        if not 0 < groupnorm_smem(name, dtype, cols) <= limits[1] - GROUPNORM_STATIC_SMEM:
            pytest.skip(f"{name}'s tail does not fit this device")
        config = (name, shape[0] * 32, 1024)
    else:
        name = groupnorm_launch_config(dtype, shape[0], shape[1], 32, shape[2] * shape[3], True, *limits)[0]
        if "_wide_" not in name and "_stream_" not in name:
            pytest.skip(f"{dtype} {shape} takes {name} here")
    rng = np.random.default_rng(11)
    x = rng.standard_normal(shape)
    rows = x.reshape(shape[0] * 32, -1)
    big = 1000.0 if dtype == "float32" else 100.0
    if data == "tiny_spread":
        x = x * (big * 1e-4) + big
    elif data == "sampled_part_off":
        rows[:, :4096] += big  # the threads' first packs (and a little more) sit far from the rest
    else:
        rows[:, 0] = 30 * big
    x = x.astype(dtype)
    g = rng.uniform(-1.5, 1.5, shape[1]).astype(dtype)
    b = rng.uniform(-1.5, 1.5, shape[1]).astype(dtype)
    dx, dg, db, dy = cp.asarray(x), cp.asarray(g), cp.asarray(b), cp.full(shape, np.nan, dtype=dtype)
    assert launch_groupnorm(module, dtype, dx.data.ptr, dg.data.ptr, db.data.ptr, dy.data.ptr, shape[0], shape[1], 32,
                            shape[2] * shape[3], 1e-5, False, config) == name  # fmt: skip
    atol, rtol = TOL[dtype]
    np.testing.assert_allclose(cp.asnumpy(dy).astype(np.float64), reference(x, g, b, 32, 1e-5, False), atol=atol,
                               rtol=rtol)  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", sorted(TOL))
def test_groupnorm_stream_any_grid_bit_for_bit(cp, module, dtype):
    """The stream path's outputs do not depend on who computes a chunk's partial: on one CTA
    (which computes the chunks of its group that come later itself), a few, one a chunk, and with
    no patience (a CTA computes every partial not yet there on its first poll), the outputs are
    equal bit for bit and close to float64.  12 groups of 110544 (54 / 27 chunks, the last one
    partial), packs spanning channels (spatial 2303)."""
    needs_sm90(cp)
    vec = 4 if dtype == "float32" else 8
    shape, groups = (6, 96, 47, 49), 2
    cols = 48 * 47 * 49
    name, grid, block = groupnorm_stream_launch(dtype, vec, 12, cols, device_groupnorm_limits()[2])
    assert block == GROUPNORM_STREAM_THREADS and name == groupnorm_stream_kernel(dtype, vec)
    chunks = groupnorm_stream_chunks(vec, cols)
    outs = check_grids(cp, module, dtype, shape, groups, name, block,
                       ((1, 64), (3, 64), (grid, 64), (12 * chunks, 64), (1, 0), (7, 0), (grid, 0)), seed=5)  # fmt: skip
    for i, out in enumerate(outs[1:], 1):
        np.testing.assert_array_equal(out, outs[0], err_msg=f"launch {i}")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", sorted(TOL))
def test_groupnorm_stream_repeats_bit_for_bit(cp, module, dtype):
    """The stream kernels' CTAs meet only through the partials they publish and poll: a race there
    (a partial read half written, or before the workspace is reset) shows as a launch whose
    outputs differ.  200 launches of 34 groups of 42240 fp32 / 84480 fp16 elements (21 chunks,
    the last one partial) on the policy's grid, every output equal bit for bit to the first and
    close to float64."""
    needs_sm90(cp)
    vec = 4 if dtype == "float32" else 8
    shape, groups = (17, 64 if dtype == "float32" else 128, 33, 40), 2
    cols = shape[1] // groups * 33 * 40
    name, grid, block = groupnorm_stream_launch(dtype, vec, 34, cols, device_groupnorm_limits()[2])
    rng = np.random.default_rng(9)
    x = (rng.standard_normal(shape) * 2 + 3).astype(dtype)
    g = rng.uniform(-1.5, 1.5, shape[1]).astype(dtype)
    b = rng.uniform(-1.5, 1.5, shape[1]).astype(dtype)
    dx, dg, db = cp.asarray(x), cp.asarray(g), cp.asarray(b)
    ys = [cp.full(shape, np.nan, dtype=dtype) for _ in range(200)]
    for dy in ys:
        launch_groupnorm(module, dtype, dx.data.ptr, dg.data.ptr, db.data.ptr, dy.data.ptr, shape[0], shape[1], groups,
                         33 * 40, 1e-5, True, (name, grid, block))  # fmt: skip
    first = cp.asnumpy(ys[0])
    atol, rtol = TOL[dtype]
    np.testing.assert_allclose(first.astype(np.float64), reference(x, g, b, groups, 1e-5, True), atol=atol, rtol=rtol)
    differ = [i for i, dy in enumerate(ys) if not bool(cp.array_equal(dy, ys[0]))]
    assert differ == [], f"launches {differ[:10]} differ from the first"


def test_groupnorm_empty_batch_launches_nothing():
    with pytest.raises(ValueError, match="nothing to launch"):
        groupnorm_launch_config("float32", 0, 64, 32, 64)


@pytest.mark.gpu
def test_launcher_sees_the_device_as_python(module):
    """The plugin library's launcher and the Python mirror see this GPU alike (its SMs for the
    staged and wide grids, the opt-in shared memory, the stream kernel's CTAs it holds by the
    occupancy calculator, at most 9 an SM), so the policy the tests here run is the plugin's.
    FUSION_PLUGIN_LIB: the built library (bench/run_gpu_kernels.sh sets it)."""
    lib = os.environ.get("FUSION_PLUGIN_LIB")
    if not lib:
        pytest.skip("FUSION_PLUGIN_LIB is not set")
    device = device_groupnorm_limits(module)
    assert library_groupnorm_device(Path(lib)) == device
    assert device[2] > 0  # every GPU these tests run on holds stream CTAs
