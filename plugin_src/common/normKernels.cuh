// LayerNorm / RMSNorm forward over the last dimension of a [rows, cols] tensor.
//
// Device code only, no TensorRT and no host-only headers: the same source compiles
// under nvcc (plugin library) and NVRTC (cupy.RawModule, tests and benchmarks).
//
// Three paths, all fp32 accumulation and two-pass statistics (the mean of deviations from
// the row's first element, then the sum of squared deviations from the mean, both from
// registers: no cancellation for rows with a large mean):
//   warp  - one warp per row, the row cached in registers: V <= 32 * N vectors (N <= 8;
//           measured on H100: 12 or 16 packs per lane lose 3-30 % to the block path).
//   block - one CTA per row, the row cached in registers: V <= blockDim * N vectors
//           (blockDim <= 512 so that 8 packs per thread stay in registers).
//   loop  - one CTA per row, re-reads the row (L2-resident): any cols.
// VEC is the elements per load: 16 / sizeof(T) where the row is 16-byte aligned, else 1.
#pragma once

#include "common/kernelTypes.cuh"

namespace fusion_kernels
{

__device__ __forceinline__ float warpSum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1)
    {
        v += __shfl_xor_sync(0xffffffffu, v, o);
    }
    return v;
}

// Every thread gets the block total.  `buf` (32 floats) must not be reused before the
// next __syncthreads(): callers alternate two buffers.
__device__ __forceinline__ float blockSum(float v, float* buf)
{
    v = warpSum(v);
    int const lane = threadIdx.x & 31;
    int const warp = threadIdx.x >> 5;
    if (lane == 0)
    {
        buf[warp] = v;
    }
    __syncthreads();
    int const nbWarps = blockDim.x >> 5;
    return warpSum(lane < nbWarps ? buf[lane] : 0.F);
}

// blockSum of two values at once (one barrier).
__device__ __forceinline__ float2 blockSum2(float2 v, float2* buf)
{
    v.x = warpSum(v.x);
    v.y = warpSum(v.y);
    int const lane = threadIdx.x & 31;
    if (lane == 0)
    {
        buf[threadIdx.x >> 5] = v;
    }
    __syncthreads();
    float2 const w = lane < static_cast<int>(blockDim.x >> 5) ? buf[lane] : make_float2(0.F, 0.F);
    return make_float2(warpSum(w.x), warpSum(w.y));
}

// The row's mean is pivot + shift (LayerNorm; both 0 for RMSNorm).  x - pivot is exact
// for x near the pivot, so ((x - pivot) - shift) keeps the deviations' precision even when
// the mean itself is large.
struct RowStats
{
    float pivot; // the row's first element (LayerNorm) or 0
    float shift; // mean - pivot
    float scale; // 1 / sqrt(var + eps) or 1 / sqrt(mean(x^2) + eps)
};

// y = (x - mean) * scale * g + b for one pack; g, b may be null.
template <typename T, int VEC>
__device__ __forceinline__ Pack<T, VEC> normalizePack(
    Pack<T, VEC> const& xp, RowStats s, T const* __restrict__ g, T const* __restrict__ b, int idx)
{
    using P = Pack<T, VEC>;
    float f[VEC];
#pragma unroll
    for (int e = 0; e < VEC; ++e)
    {
        f[e] = ((toFloat(xp.v[e]) - s.pivot) - s.shift) * s.scale;
    }
    if (g != nullptr)
    {
        P const gp = reinterpret_cast<P const*>(g)[idx];
#pragma unroll
        for (int e = 0; e < VEC; ++e)
        {
            f[e] *= toFloat(gp.v[e]);
        }
    }
    if (b != nullptr)
    {
        P const bp = reinterpret_cast<P const*>(b)[idx];
#pragma unroll
        for (int e = 0; e < VEC; ++e)
        {
            f[e] += toFloat(bp.v[e]);
        }
    }
    P out;
#pragma unroll
    for (int e = 0; e < VEC; ++e)
    {
        out.v[e] = fromFloat<T>(f[e]);
    }
    return out;
}

// Sum of (x - pivot): summing deviations from a value of the row keeps the mean exact
// to fp32 for rows far from zero (a large mean would otherwise swamp the sum).
template <typename T, int VEC>
__device__ __forceinline__ float packSum(Pack<T, VEC> const& p, float pivot)
{
    float s = 0.F;
#pragma unroll
    for (int e = 0; e < VEC; ++e)
    {
        s += toFloat(p.v[e]) - pivot;
    }
    return s;
}

template <typename T, int VEC>
__device__ __forceinline__ float packSquares(Pack<T, VEC> const& p, float pivot, float shift)
{
    float s = 0.F;
#pragma unroll
    for (int e = 0; e < VEC; ++e)
    {
        float const d = (toFloat(p.v[e]) - pivot) - shift;
        s += d * d;
    }
    return s;
}

// Adds the pack's deviations from pivot to acc and their squares to sq.
template <typename T, int VEC>
__device__ __forceinline__ void packSumSquares(Pack<T, VEC> const& p, float pivot, float& acc, float& sq)
{
#pragma unroll
    for (int e = 0; e < VEC; ++e)
    {
        float const d = toFloat(p.v[e]) - pivot;
        acc += d;
        sq = fmaf(d, d, sq);
    }
}

// Row statistics from the register cache.  SUM reduces one float over the row's threads.
template <typename T, int VEC, int N, bool RMS, typename SumFn>
__device__ __forceinline__ RowStats cachedStats(
    Pack<T, VEC> const (&cache)[N], float pivot, int first, int step, int nv, int cols, float eps, SumFn sum)
{
    float shift = 0.F;
    if (!RMS)
    {
        float acc = 0.F;
#pragma unroll
        for (int i = 0; i < N; ++i)
        {
            if (first + i * step < nv)
            {
                acc += packSum(cache[i], pivot);
            }
        }
        shift = sum(acc, 0) / static_cast<float>(cols);
    }
    float sq = 0.F;
#pragma unroll
    for (int i = 0; i < N; ++i)
    {
        if (first + i * step < nv)
        {
            sq += packSquares(cache[i], pivot, shift);
        }
    }
    float const var = sum(sq, 1) / static_cast<float>(cols);
    return RowStats{pivot, shift, rsqrtf(var + eps)};
}

// One warp per row; blockDim.x is a multiple of 32, rows are grid-strided.
template <typename T, int VEC, int N, bool RMS>
__device__ __forceinline__ void normWarpRows(T const* __restrict__ x, T const* __restrict__ g,
    T const* __restrict__ b, T* __restrict__ y, long long rows, int cols, float eps)
{
    using P = Pack<T, VEC>;
    int const lane = threadIdx.x & 31;
    long long const warpsPerBlock = blockDim.x >> 5;
    long long const stride = warpsPerBlock * gridDim.x;
    int const nv = cols / VEC;
    for (long long row = blockIdx.x * warpsPerBlock + (threadIdx.x >> 5); row < rows; row += stride)
    {
        P const* xr = reinterpret_cast<P const*>(x + row * cols);
        P* yr = reinterpret_cast<P*>(y + row * cols);
        P cache[N];
#pragma unroll
        for (int i = 0; i < N; ++i)
        {
            int const idx = lane + i * 32;
            if (idx < nv)
            {
                cache[i] = xr[idx];
            }
        }
        float const pivot = RMS ? 0.F : toFloat(x[row * cols]); // same address: one broadcast load
        RowStats const s = cachedStats<T, VEC, N, RMS>(
            cache, pivot, lane, 32, nv, cols, eps, [](float v, int) { return warpSum(v); });
#pragma unroll
        for (int i = 0; i < N; ++i)
        {
            int const idx = lane + i * 32;
            if (idx < nv)
            {
                yr[idx] = normalizePack<T, VEC>(cache[i], s, g, b, idx);
            }
        }
    }
}

// One CTA per row, the row cached in registers (N packs per thread).
template <typename T, int VEC, int N, bool RMS>
__device__ __forceinline__ void normBlockRows(T const* __restrict__ x, T const* __restrict__ g,
    T const* __restrict__ b, T* __restrict__ y, long long rows, int cols, float eps)
{
    using P = Pack<T, VEC>;
    __shared__ float buf[2][32];
    int const nv = cols / VEC;
    int const tid = threadIdx.x;
    int const step = blockDim.x;
    for (long long row = blockIdx.x; row < rows; row += gridDim.x)
    {
        P const* xr = reinterpret_cast<P const*>(x + row * cols);
        P* yr = reinterpret_cast<P*>(y + row * cols);
        P cache[N];
#pragma unroll
        for (int i = 0; i < N; ++i)
        {
            int const idx = tid + i * step;
            if (idx < nv)
            {
                cache[i] = xr[idx];
            }
        }
        float const pivot = RMS ? 0.F : toFloat(x[row * cols]);
        RowStats const s = cachedStats<T, VEC, N, RMS>(
            cache, pivot, tid, step, nv, cols, eps, [&](float v, int k) { return blockSum(v, buf[k]); });
#pragma unroll
        for (int i = 0; i < N; ++i)
        {
            int const idx = tid + i * step;
            if (idx < nv)
            {
                yr[idx] = normalizePack<T, VEC>(cache[i], s, g, b, idx);
            }
        }
        __syncthreads(); // buf is rewritten by the next row
    }
}

// One CTA per row, no cache: reads the row two (RMS) or three (LN) times.
template <typename T, int VEC, bool RMS>
__device__ __forceinline__ void normLoopRows(T const* __restrict__ x, T const* __restrict__ g,
    T const* __restrict__ b, T* __restrict__ y, long long rows, int cols, float eps)
{
    using P = Pack<T, VEC>;
    __shared__ float buf[2][32];
    int const nv = cols / VEC;
    for (long long row = blockIdx.x; row < rows; row += gridDim.x)
    {
        P const* xr = reinterpret_cast<P const*>(x + row * cols);
        P* yr = reinterpret_cast<P*>(y + row * cols);
        float const pivot = RMS ? 0.F : toFloat(x[row * cols]);
        float shift = 0.F;
        if (!RMS)
        {
            float acc = 0.F;
            for (int idx = threadIdx.x; idx < nv; idx += blockDim.x)
            {
                acc += packSum(xr[idx], pivot);
            }
            shift = blockSum(acc, buf[0]) / static_cast<float>(cols);
        }
        float sq = 0.F;
        for (int idx = threadIdx.x; idx < nv; idx += blockDim.x)
        {
            sq += packSquares(xr[idx], pivot, shift);
        }
        RowStats const s{pivot, shift, rsqrtf(blockSum(sq, buf[1]) / static_cast<float>(cols) + eps)};
        for (int idx = threadIdx.x; idx < nv; idx += blockDim.x)
        {
            yr[idx] = normalizePack<T, VEC>(xr[idx], s, g, b, idx);
        }
        __syncthreads(); // buf is rewritten by the next row
    }
}

} // namespace fusion_kernels

// ---------------------------------------------------------------------------------------
// extern "C" entry points: fusion_<op>_<path>_<dtype>_v<VEC>[_n<N>] with the signature
//   (T const* x, T const* g, T const* b, T* y, long long rows, int cols, float eps)
// The X-macro lists every instantiation once; the kernel files define them, the host
// launcher (normLaunch.cu) declares them and builds its dispatch table from the same list.
#define FUSION_NORM_WARP_THREADS 128
#define FUSION_NORM_LOOP_THREADS 512
#define FUSION_NORM_BLOCK_MAX_THREADS 512
#define FUSION_NORM_MAX_N 8 // packs per lane (warp path) or thread (block path)

#define FUSION_NORM_FOR_N(X, OP, RMS, TN, T, VEC, PATH)                                                           \
    X(OP, RMS, TN, T, VEC, PATH, 1)                                                                                \
    X(OP, RMS, TN, T, VEC, PATH, 2)                                                                                \
    X(OP, RMS, TN, T, VEC, PATH, 3)                                                                                \
    X(OP, RMS, TN, T, VEC, PATH, 4)                                                                                \
    X(OP, RMS, TN, T, VEC, PATH, 5)                                                                                \
    X(OP, RMS, TN, T, VEC, PATH, 6)                                                                                \
    X(OP, RMS, TN, T, VEC, PATH, 7)                                                                                \
    X(OP, RMS, TN, T, VEC, PATH, 8)

#define FUSION_NORM_FOR_TYPE(XN, XL, OP, RMS, TN, T, VEC)                                                         \
    FUSION_NORM_FOR_N(XN, OP, RMS, TN, T, VEC, warp)                                                               \
    FUSION_NORM_FOR_N(XN, OP, RMS, TN, T, VEC, block)                                                              \
    XL(OP, RMS, TN, T, VEC)

// XN(op, rms, tn, T, vec, path, n) for the cached paths, XL(op, rms, tn, T, vec) for loop.
#define FUSION_NORM_KERNELS(XN, XL, OP, RMS)                                                                       \
    FUSION_NORM_FOR_TYPE(XN, XL, OP, RMS, f32, float, 4)                                                           \
    FUSION_NORM_FOR_TYPE(XN, XL, OP, RMS, f32, float, 1)                                                           \
    FUSION_NORM_FOR_TYPE(XN, XL, OP, RMS, f16, __half, 8)                                                          \
    FUSION_NORM_FOR_TYPE(XN, XL, OP, RMS, f16, __half, 1)                                                          \
    FUSION_NORM_FOR_TYPE(XN, XL, OP, RMS, bf16, __nv_bfloat16, 8)                                                  \
    FUSION_NORM_FOR_TYPE(XN, XL, OP, RMS, bf16, __nv_bfloat16, 1)

#define FUSION_NORM_PARAMS(T)                                                                                      \
    (T const* __restrict__ x, T const* __restrict__ g, T const* __restrict__ b, T* __restrict__ y, long long rows, \
        int cols, float eps)

#define FUSION_NORM_BOUNDS_warp __launch_bounds__(FUSION_NORM_WARP_THREADS)
#define FUSION_NORM_BOUNDS_block __launch_bounds__(FUSION_NORM_BLOCK_MAX_THREADS)
#define FUSION_NORM_BODY_warp normWarpRows
#define FUSION_NORM_BODY_block normBlockRows

#define FUSION_NORM_DEFINE_N(OP, RMS, TN, T, VEC, PATH, N)                                                         \
    extern "C" __global__ void FUSION_NORM_BOUNDS_##PATH fusion_##OP##_##PATH##_##TN##_v##VEC##_n##N               \
        FUSION_NORM_PARAMS(T)                                                                                      \
    {                                                                                                              \
        fusion_kernels::FUSION_NORM_BODY_##PATH<T, VEC, N, RMS>(x, g, b, y, rows, cols, eps);                      \
    }

#define FUSION_NORM_DEFINE_LOOP(OP, RMS, TN, T, VEC)                                                               \
    extern "C" __global__ void __launch_bounds__(FUSION_NORM_LOOP_THREADS) fusion_##OP##_loop_##TN##_v##VEC        \
        FUSION_NORM_PARAMS(T)                                                                                      \
    {                                                                                                              \
        fusion_kernels::normLoopRows<T, VEC, RMS>(x, g, b, y, rows, cols, eps);                                    \
    }
