// Host launcher for the skip-norm kernels (no TensorRT): the plain norms' launch policy
// (common/normLaunch.h planNorm), "fusion_skip" kernel names.
#pragma once

#include "common/normLaunch.h"

namespace fusion
{

// y = norm(x + skip + bias) * g + b over each row of cols elements; sum = x + skip + bias
// where sum is not null.  bias, g, b may be null; RMSNorm ignores b.
cudaError_t launchSkipNorm(NormOp op, ElemType type, void const* x, void const* skip, void const* bias, void const* g,
    void const* b, void* y, void* sum, int64_t rows, int64_t cols, float eps, cudaStream_t stream);

} // namespace fusion
