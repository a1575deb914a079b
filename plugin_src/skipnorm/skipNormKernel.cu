// Skip LayerNorm and skip RMSNorm kernels (skipNormKernels.cuh).  No TensorRT here, so
// cupy.RawModule compiles this file as is (include path: plugin_src/).
#include "skipnorm/skipNormKernels.cuh"

FUSION_NORM_KERNELS(FUSION_SKIP_NORM_DEFINE_N, FUSION_SKIP_NORM_DEFINE_LOOP, layernorm, false)
FUSION_NORM_KERNELS(FUSION_SKIP_NORM_DEFINE_N, FUSION_SKIP_NORM_DEFINE_LOOP, rmsnorm, true)
