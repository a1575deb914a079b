// Skip LayerNorm / RMSNorm: s = x + skip (+ bias) rounded to T, as the residual Add it
// replaces did; y = norm(s) * g (+ b); sum = s where the caller asks (pre-norm).  One pass:
// x and skip are read once, y (and sum) written once, with the statistics of
// common/normKernels.cuh (fp32 accumulation, two-pass from the register cache).
//
// Same three paths and the same launch policy as the plain norms (plugin_src/README.md):
// the kernel name is the plain one's with "fusion_" -> "fusion_skip" (library.py).
// The loop path (rows too wide to cache) reads x and skip three times (L2-resident).
#pragma once

#include "common/normKernels.cuh"

namespace fusion_kernels
{

// x + skip (+ bias) for one pack, rounded to T.
template <typename T, int VEC>
__device__ __forceinline__ Pack<T, VEC> skipSum(Pack<T, VEC> const* __restrict__ xr, Pack<T, VEC> const* __restrict__ kr,
    T const* __restrict__ bias, int idx)
{
    using P = Pack<T, VEC>;
    P const xp = xr[idx];
    P const kp = kr[idx];
    P out;
    if (bias != nullptr)
    {
        P const bp = reinterpret_cast<P const*>(bias)[idx];
#pragma unroll
        for (int e = 0; e < VEC; ++e)
        {
            // Rounded after each add, as Add(Add(x, skip), bias) computes it.
            T const s = fromFloat<T>(toFloat(xp.v[e]) + toFloat(kp.v[e]));
            out.v[e] = fromFloat<T>(toFloat(s) + toFloat(bp.v[e]));
        }
    }
    else
    {
#pragma unroll
        for (int e = 0; e < VEC; ++e)
        {
            out.v[e] = fromFloat<T>(toFloat(xp.v[e]) + toFloat(kp.v[e]));
        }
    }
    return out;
}

// The row's first sum element: a pivot near the mean (any value of the row serves).
template <typename T>
__device__ __forceinline__ float firstSum(T const* x, T const* skip, T const* bias, long long at)
{
    float s = toFloat(fromFloat<T>(toFloat(x[at]) + toFloat(skip[at])));
    if (bias != nullptr)
    {
        s = toFloat(fromFloat<T>(s + toFloat(bias[0])));
    }
    return s;
}

// Cached paths: STEP lanes/threads per row starting at FIRST; ROW_OF(k) the k-th row, SUM the reduction.
template <typename T, int VEC, int N, bool RMS, typename SumFn>
__device__ __forceinline__ void skipNormRow(T const* __restrict__ x, T const* __restrict__ skip,
    T const* __restrict__ bias, T const* __restrict__ g, T const* __restrict__ b, T* __restrict__ y, T* __restrict__ sum,
    long long row, int cols, float eps, int first, int step, SumFn reduce)
{
    using P = Pack<T, VEC>;
    int const nv = cols / VEC;
    P const* xr = reinterpret_cast<P const*>(x + row * cols);
    P const* kr = reinterpret_cast<P const*>(skip + row * cols);
    P* yr = reinterpret_cast<P*>(y + row * cols);
    P cache[N];
#pragma unroll
    for (int i = 0; i < N; ++i)
    {
        int const idx = first + i * step;
        if (idx < nv)
        {
            cache[i] = skipSum<T, VEC>(xr, kr, bias, idx);
            if (sum != nullptr)
            {
                reinterpret_cast<P*>(sum + row * cols)[idx] = cache[i];
            }
        }
    }
    float const pivot = RMS ? 0.F : firstSum(x, skip, bias, row * cols);
    RowStats const s = cachedStats<T, VEC, N, RMS>(cache, pivot, first, step, nv, cols, eps, reduce);
#pragma unroll
    for (int i = 0; i < N; ++i)
    {
        int const idx = first + i * step;
        if (idx < nv)
        {
            yr[idx] = normalizePack<T, VEC>(cache[i], s, g, b, idx);
        }
    }
}

template <typename T, int VEC, int N, bool RMS>
__device__ __forceinline__ void skipNormWarpRows(T const* __restrict__ x, T const* __restrict__ skip,
    T const* __restrict__ bias, T const* __restrict__ g, T const* __restrict__ b, T* __restrict__ y, T* __restrict__ sum,
    long long rows, int cols, float eps)
{
    int const lane = threadIdx.x & 31;
    long long const warpsPerBlock = blockDim.x >> 5;
    long long const stride = warpsPerBlock * gridDim.x;
    for (long long row = blockIdx.x * warpsPerBlock + (threadIdx.x >> 5); row < rows; row += stride)
    {
        skipNormRow<T, VEC, N, RMS>(x, skip, bias, g, b, y, sum, row, cols, eps, lane, 32,
            [](float v, int) { return warpSum(v); });
    }
}

template <typename T, int VEC, int N, bool RMS>
__device__ __forceinline__ void skipNormBlockRows(T const* __restrict__ x, T const* __restrict__ skip,
    T const* __restrict__ bias, T const* __restrict__ g, T const* __restrict__ b, T* __restrict__ y, T* __restrict__ sum,
    long long rows, int cols, float eps)
{
    __shared__ float buf[2][32];
    for (long long row = blockIdx.x; row < rows; row += gridDim.x)
    {
        skipNormRow<T, VEC, N, RMS>(x, skip, bias, g, b, y, sum, row, cols, eps, threadIdx.x, blockDim.x,
            [&](float v, int k) { return blockSum(v, buf[k]); });
        __syncthreads(); // buf is rewritten by the next row
    }
}

template <typename T, int VEC, bool RMS>
__device__ __forceinline__ void skipNormLoopRows(T const* __restrict__ x, T const* __restrict__ skip,
    T const* __restrict__ bias, T const* __restrict__ g, T const* __restrict__ b, T* __restrict__ y, T* __restrict__ sum,
    long long rows, int cols, float eps)
{
    using P = Pack<T, VEC>;
    __shared__ float buf[2][32];
    int const nv = cols / VEC;
    for (long long row = blockIdx.x; row < rows; row += gridDim.x)
    {
        P const* xr = reinterpret_cast<P const*>(x + row * cols);
        P const* kr = reinterpret_cast<P const*>(skip + row * cols);
        P* yr = reinterpret_cast<P*>(y + row * cols);
        float const pivot = RMS ? 0.F : firstSum(x, skip, bias, row * cols);
        float shift = 0.F;
        if (!RMS)
        {
            float acc = 0.F;
            for (int idx = threadIdx.x; idx < nv; idx += blockDim.x)
            {
                acc += packSum(skipSum<T, VEC>(xr, kr, bias, idx), pivot);
            }
            shift = blockSum(acc, buf[0]) / static_cast<float>(cols);
        }
        float sq = 0.F;
        for (int idx = threadIdx.x; idx < nv; idx += blockDim.x)
        {
            sq += packSquares(skipSum<T, VEC>(xr, kr, bias, idx), pivot, shift);
        }
        RowStats const s{pivot, shift, rsqrtf(blockSum(sq, buf[1]) / static_cast<float>(cols) + eps)};
        for (int idx = threadIdx.x; idx < nv; idx += blockDim.x)
        {
            P const sp = skipSum<T, VEC>(xr, kr, bias, idx);
            if (sum != nullptr)
            {
                reinterpret_cast<P*>(sum + row * cols)[idx] = sp;
            }
            yr[idx] = normalizePack<T, VEC>(sp, s, g, b, idx);
        }
        __syncthreads(); // buf is rewritten by the next row
    }
}

} // namespace fusion_kernels

// extern "C" entry points: fusion_skip<op>_<path>_<dtype>_v<VEC>[_n<N>] with the signature
//   (T const* x, T const* skip, T const* bias, T const* g, T const* b, T* y, T* sum,
//    long long rows, int cols, float eps)
// bias, g, b, sum may be null; RMSNorm ignores b.  Instantiated with FUSION_NORM_KERNELS.
#define FUSION_SKIP_NORM_PARAMS(T)                                                                                 \
    (T const* __restrict__ x, T const* __restrict__ skip, T const* __restrict__ bias, T const* __restrict__ g,     \
        T const* __restrict__ b, T* __restrict__ y, T* __restrict__ sum, long long rows, int cols, float eps)

#define FUSION_SKIP_NORM_BODY_warp skipNormWarpRows
#define FUSION_SKIP_NORM_BODY_block skipNormBlockRows

#define FUSION_SKIP_NORM_DEFINE_N(OP, RMS, TN, T, VEC, PATH, N)                                                    \
    extern "C" __global__ void FUSION_NORM_BOUNDS_##PATH fusion_skip##OP##_##PATH##_##TN##_v##VEC##_n##N          \
        FUSION_SKIP_NORM_PARAMS(T)                                                                                 \
    {                                                                                                              \
        fusion_kernels::FUSION_SKIP_NORM_BODY_##PATH<T, VEC, N, RMS>(x, skip, bias, g, b, y, sum, rows, cols, eps); \
    }

#define FUSION_SKIP_NORM_DEFINE_LOOP(OP, RMS, TN, T, VEC)                                                          \
    extern "C" __global__ void __launch_bounds__(FUSION_NORM_LOOP_THREADS) fusion_skip##OP##_loop_##TN##_v##VEC   \
        FUSION_SKIP_NORM_PARAMS(T)                                                                                 \
    {                                                                                                              \
        fusion_kernels::skipNormLoopRows<T, VEC, RMS>(x, skip, bias, g, b, y, sum, rows, cols, eps);               \
    }
