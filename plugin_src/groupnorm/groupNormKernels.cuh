// GroupNorm forward on NC* tensors: one CTA per (n, group).  A group's C / G channels are
// contiguous (cols = C / G * spatial elements), so each group is a row of [N * G, cols].
//
// Device code only, no TensorRT: the same source compiles under nvcc (plugin library) and
// NVRTC (cupy.RawModule, tests/gpu).  Two-pass statistics in fp32: the mean, then the sum of
// squared deviations from it (no cancellation for groups with a large mean); the third pass
// normalizes, applies the per-channel affine and, if silu != 0, y * sigmoid(y).  Passes 2 and 3
// re-read the group (L2-resident for the group sizes of diffusion UNets).
#pragma once

#include "common/normKernels.cuh"

namespace fusion_kernels
{

template <typename T>
__device__ __forceinline__ void groupNormRows(T const* __restrict__ x, T const* __restrict__ gamma,
    T const* __restrict__ beta, T* __restrict__ y, long long rows, int channels, int groups, long long spatial,
    float eps, int silu)
{
    __shared__ float buf[2][32];
    int const perGroup = channels / groups;
    long long const cols = static_cast<long long>(perGroup) * spatial;
    float const inverseCols = 1.F / static_cast<float>(cols);
    for (long long row = blockIdx.x; row < rows; row += gridDim.x)
    {
        T const* xr = x + row * cols;
        T* yr = y + row * cols;
        int const firstChannel = static_cast<int>(row % groups) * perGroup;
        float s = 0.F;
        for (long long i = threadIdx.x; i < cols; i += blockDim.x)
        {
            s += toFloat(xr[i]);
        }
        float const mean = blockSum(s, buf[0]) * inverseCols;
        float q = 0.F;
        for (long long i = threadIdx.x; i < cols; i += blockDim.x)
        {
            float const d = toFloat(xr[i]) - mean;
            q += d * d;
        }
        float const scale = rsqrtf(blockSum(q, buf[1]) * inverseCols + eps);
        for (long long i = threadIdx.x; i < cols; i += blockDim.x)
        {
            int const c = firstChannel + static_cast<int>(i / spatial);
            float v = (toFloat(xr[i]) - mean) * scale * toFloat(gamma[c]) + toFloat(beta[c]);
            if (silu)
            {
                v = v / (1.F + expf(-v));
            }
            yr[i] = fromFloat<T>(v);
        }
        __syncthreads(); // the next row writes buf again
    }
}

} // namespace fusion_kernels

// (x, gamma, beta, y, rows = N * G, channels, groups, spatial, eps, silu)
#define FUSION_GROUPNORM_PARAMS(T)                                                                                 \
    (T const* __restrict__ x, T const* __restrict__ gamma, T const* __restrict__ beta, T* __restrict__ y,          \
        long long rows, int channels, int groups, long long spatial, float eps, int silu)

#define FUSION_GROUPNORM_DEFINE(TN, T)                                                                             \
    extern "C" __global__ void fusion_groupnorm_##TN FUSION_GROUPNORM_PARAMS(T)                                    \
    {                                                                                                              \
        fusion_kernels::groupNormRows<T>(x, gamma, beta, y, rows, channels, groups, spatial, eps, silu);          \
    }

#define FUSION_GROUPNORM_KERNELS(X) X(f32, float) X(f16, __half)
