// Host launcher for the GroupNorm kernels (no TensorRT: shared by both plugin flavours and the
// C entry point the tests use to compare the launch policy with Python's copy).
#pragma once

#include "common/normLaunch.h"

#include <cstdint>
#include <cuda_runtime_api.h>

namespace fusion
{

// Kernel, grid, block and shared memory for rows = N * G groups of cols elements: the register
// path (staged on a grid of stageSms CTAs where a CTA fills an SM and stageSms > 0), else the
// loop path; groupNormKernels.cuh has the policy.  vecOk: x and y are 16-byte aligned.
// stageSms: the device's SM count where it can run the staged kernels, else 0.  Keep in sync
// with fusion/plugins/library.py:groupnorm_plan (a test compares the two).
NormPlan planGroupNorm(ElemType type, int64_t rows, int64_t cols, bool vecOk, int stageSms = 0);

// y = groupnorm(x) * gamma[c] + beta[c] (then SiLU if silu) for x [n, channels, spatial...].
// Returns the launch error; cudaErrorInvalidValue for bad sizes or a type it has no kernel for.
cudaError_t launchGroupNorm(ElemType type, void const* x, void const* gamma, void const* beta, void* y, int64_t n,
    int64_t channels, int64_t groups, int64_t spatial, float eps, bool silu, cudaStream_t stream);

} // namespace fusion
