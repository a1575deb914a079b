// erf-GELU in place (see fcKernel.cuh).  No TensorRT here: cupy.RawModule compiles it as is.
#include "fc/fcKernel.cuh"

#define FUSION_GELU_DEFINE(TN, T, VEC)                                                                             \
    extern "C" __global__ void __launch_bounds__(FUSION_GELU_THREADS) fusion_gelu_erf_##TN##_v##VEC(               \
        T* __restrict__ y, long long n)                                                                            \
    {                                                                                                              \
        fusion_kernels::geluErfInPlace<T, VEC>(y, n);                                                              \
    }

FUSION_GELU_KERNELS(FUSION_GELU_DEFINE)
