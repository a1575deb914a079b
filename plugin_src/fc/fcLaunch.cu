#include "fc/fcLaunch.h"
#include "fc/fcKernel.cuh"

#define FUSION_GELU_DECLARE(TN, T, VEC)                                                                            \
    extern "C" __global__ void fusion_gelu_erf_##TN##_v##VEC(T* __restrict__ y, long long n);

FUSION_GELU_KERNELS(FUSION_GELU_DECLARE)

namespace fusion
{

cudaError_t launchGeluErf(ElemType type, void* y, int64_t n, cudaStream_t stream)
{
    if (n <= 0)
    {
        return cudaSuccess;
    }
    bool const aligned = (reinterpret_cast<uintptr_t>(y) & 15U) == 0;
    int64_t const vecMax = type == ElemType::kFLOAT ? 4 : 8;
    bool const vec = aligned && n % vecMax == 0;
    void const* fn = nullptr;
    switch (type)
    {
    case ElemType::kFLOAT:
        fn = vec ? reinterpret_cast<void const*>(&fusion_gelu_erf_f32_v4)
                 : reinterpret_cast<void const*>(&fusion_gelu_erf_f32_v1);
        break;
    case ElemType::kHALF:
        fn = vec ? reinterpret_cast<void const*>(&fusion_gelu_erf_f16_v8)
                 : reinterpret_cast<void const*>(&fusion_gelu_erf_f16_v1);
        break;
    case ElemType::kBF16:
        fn = vec ? reinterpret_cast<void const*>(&fusion_gelu_erf_bf16_v8)
                 : reinterpret_cast<void const*>(&fusion_gelu_erf_bf16_v1);
        break;
    }
    int64_t const packs = vec ? n / vecMax : n;
    int64_t blocks = (packs + FUSION_GELU_THREADS - 1) / FUSION_GELU_THREADS;
    blocks = blocks > 8192 ? 8192 : blocks; // grid-stride beyond
    long long nArg = n;
    void* args[] = {&y, &nArg};
    return cudaLaunchKernel(fn, dim3(static_cast<unsigned>(blocks)), dim3(FUSION_GELU_THREADS), args, 0, stream);
}

} // namespace fusion
