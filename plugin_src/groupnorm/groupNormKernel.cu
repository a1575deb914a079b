// GroupNorm kernels (fp32, fp16): the extern "C" entry points of groupNormKernels.cuh.
// No TensorRT here, so cupy.RawModule compiles this file as is (include path: plugin_src/).
#include "groupnorm/groupNormKernels.cuh"

FUSION_GROUPNORM_KERNELS(FUSION_GROUPNORM_DEFINE_K, FUSION_GROUPNORM_DEFINE_LOOP)
FUSION_GROUPNORM_STAGED_KERNELS(FUSION_GROUPNORM_DEFINE_STAGED)
FUSION_GROUPNORM_WIDE_KERNELS(FUSION_GROUPNORM_DEFINE_WIDE)
FUSION_GROUPNORM_STREAM_KERNELS(FUSION_GROUPNORM_DEFINE_STREAM)
