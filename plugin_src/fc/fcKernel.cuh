// The FC plugin's own kernel: erf-GELU applied in place after the cuBLASLt GEMM + bias
// (cuBLASLt's GELU epilogue is the tanh approximation).  Device code only; the entry
// points are extern "C" fusion_gelu_erf_<dtype>_v<VEC>(T* y, long long n).
#pragma once

#include "common/kernelTypes.cuh"

namespace fusion_kernels
{

template <typename T, int VEC>
__device__ __forceinline__ void geluErfInPlace(T* __restrict__ y, long long n)
{
    using P = Pack<T, VEC>;
    long long const nv = n / VEC;
    long long const stride = static_cast<long long>(gridDim.x) * blockDim.x;
    for (long long i = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x; i < nv; i += stride)
    {
        P p = reinterpret_cast<P*>(y)[i];
#pragma unroll
        for (int e = 0; e < VEC; ++e)
        {
            float const v = toFloat(p.v[e]);
            p.v[e] = fromFloat<T>(0.5F * v * (1.F + erff(v * 0.7071067811865476F)));
        }
        reinterpret_cast<P*>(y)[i] = p;
    }
}

} // namespace fusion_kernels

#define FUSION_GELU_KERNELS(X)                                                                                     \
    X(f32, float, 4)                                                                                               \
    X(f32, float, 1)                                                                                               \
    X(f16, __half, 8)                                                                                              \
    X(f16, __half, 1)                                                                                              \
    X(bf16, __nv_bfloat16, 8)                                                                                      \
    X(bf16, __nv_bfloat16, 1)

#define FUSION_GELU_THREADS 256
