// RMSNorm kernels: y = x / sqrt(mean(x^2) + eps) * g per row, fp32 accumulation.
// Defines the extern "C" entry points listed in common/normKernels.cuh (b is ignored);
// no TensorRT here, so cupy.RawModule compiles this file as is (include path: plugin_src/).
#include "common/normKernels.cuh"

FUSION_NORM_KERNELS(FUSION_NORM_DEFINE_N, FUSION_NORM_DEFINE_LOOP, rmsnorm, true)
