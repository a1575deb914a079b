// Host launcher for the FC plugin's erf-GELU kernel (no TensorRT).
#pragma once

#include "common/normLaunch.h" // ElemType

#include <cstdint>
#include <cuda_runtime_api.h>

namespace fusion
{

// y = 0.5 * y * (1 + erf(y / sqrt(2))) over n elements, in place.
cudaError_t launchGeluErf(ElemType type, void* y, int64_t n, cudaStream_t stream);

} // namespace fusion
