// Host launcher for the GroupNorm kernels (no TensorRT: shared by both plugin flavours and the
// C entry point the tests use to compare the launch policy with Python's copy).
#pragma once

#include "common/normLaunch.h"

#include <cstdint>
#include <cuda_runtime_api.h>

namespace fusion
{

// Kernel, grid and block for rows = N * G groups of cols elements: the register path with the
// smallest K (elements per thread) for which cols fits 1024 threads, else the loop path.
// vecOk: x and y are 16-byte aligned.  Keep in sync with
// fusion/plugins/library.py:groupnorm_launch_config (a test compares the two).
NormPlan planGroupNorm(ElemType type, int64_t rows, int64_t cols, bool vecOk);

// y = groupnorm(x) * gamma[c] + beta[c] (then SiLU if silu) for x [n, channels, spatial...].
// Returns the launch error; cudaErrorInvalidValue for bad sizes or a type it has no kernel for.
cudaError_t launchGroupNorm(ElemType type, void const* x, void const* gamma, void const* beta, void* y, int64_t n,
    int64_t channels, int64_t groups, int64_t spatial, float eps, bool silu, cudaStream_t stream);

} // namespace fusion
