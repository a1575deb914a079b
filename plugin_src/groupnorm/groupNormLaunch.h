// Host launcher for the GroupNorm kernel (no TensorRT: shared by both plugin flavours).
#pragma once

#include "common/normLaunch.h"

#include <cstdint>
#include <cuda_runtime_api.h>

namespace fusion
{

// Threads per CTA for groups of `cols` elements: about 4 elements per thread, 32 ... 1024.
// Keep in sync with fusion/plugins/library.py:groupnorm_launch_config.
int32_t groupNormThreads(int64_t cols);

// y = groupnorm(x) * gamma[c] + beta[c] (then SiLU if silu) for x [n, channels, spatial...].
// Returns the launch error; cudaErrorInvalidValue for bad sizes or a type it has no kernel for.
cudaError_t launchGroupNorm(ElemType type, void const* x, void const* gamma, void const* beta, void* y, int64_t n,
    int64_t channels, int64_t groups, int64_t spatial, float eps, bool silu, cudaStream_t stream);

} // namespace fusion
