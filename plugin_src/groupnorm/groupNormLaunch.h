// Host launcher for the GroupNorm kernels (no TensorRT: shared by both plugin flavours and the
// C entry point the tests use to compare the launch policy with Python's copy).
#pragma once

#include "common/normLaunch.h"

#include <cstddef>
#include <cstdint>
#include <cuda_runtime_api.h>

namespace fusion
{

// What the device offers the GroupNorm kernels beyond the register path ({}: nothing).
struct GroupNormDevice
{
    int stageSms;   // its SM count where it runs the staged kernels, prefers the stream path for
                    // fp32 and sizes the wide path's grid by it (sm_90+), else 0
    int smemOptin;  // the dynamic shared memory a CTA may opt in to (staged and wide kernels)
    int streamCtas; // the stream kernel's CTAs it holds at once (its grid), 0: no stream path
};

// Kernel, grid, block, shared memory and workspace for rows = N * G groups of cols elements:
// the register path (where a CTA fills an SM: fp32 staged, fp16 the wide kernel in two CTAs an
// SM), else the wide path (a register head and a shared tail; on sm_90+ fp32 the stream path
// first), else the stream path (chunks on many CTAs, their statistics through the workspace),
// else the loop path; groupNormKernels.cuh has the kernels.  vecOk: x and y are 16-byte aligned.
// Keep in sync with fusion/plugins/library.py:groupnorm_plan (a test compares them).
NormPlan planGroupNorm(ElemType type, int64_t rows, int64_t cols, bool vecOk, GroupNormDevice device = {});

// The workspace bytes launchGroupNorm wants on the current device for x [n, channels,
// spatial...] (0 for bad sizes): enough for any smaller n or spatial too.
size_t groupNormWorkspace(ElemType type, int64_t n, int64_t channels, int64_t groups, int64_t spatial);

// y = groupnorm(x) * gamma[c] + beta[c] (then SiLU if silu) for x [n, channels, spatial...].
// workspace: device memory of workspaceBytes (may be null); where the plan needs more than
// that, a kernel that needs none runs instead.  Returns the launch error; cudaErrorInvalidValue
// for bad sizes or a type it has no kernel for.
cudaError_t launchGroupNorm(ElemType type, void const* x, void const* gamma, void const* beta, void* y, int64_t n,
    int64_t channels, int64_t groups, int64_t spatial, float eps, bool silu, void* workspace, size_t workspaceBytes,
    cudaStream_t stream);

} // namespace fusion
