// Host launcher for the LayerNorm / RMSNorm kernels (no TensorRT: shared by the plugins
// and the C entry point the tests use to compare the launch policy with Python's copy).
#pragma once

#include <cstdint>
#include <cuda_runtime_api.h>

namespace fusion
{

enum class NormOp : int32_t
{
    kLAYER_NORM = 0,
    kRMS_NORM = 1,
};

enum class ElemType : int32_t
{
    kFLOAT = 0,
    kHALF = 1,
    kBF16 = 2,
};

struct NormPlan
{
    void const* kernel; // null: nothing to launch (empty tensor) or no such kernel
    char name[64];
    int64_t grid;
    int32_t block;
    int32_t smem;      // dynamic shared memory bytes (0 but for GroupNorm's staged, wide and stream kernels)
    int32_t minPtx;    // the PTX version below which the kernel was compiled empty (90: GroupNorm's
                       // staged kernels), else 0
    int64_t workspace; // bytes of workspace the launch needs (GroupNorm's stream kernels), else 0
};

// Kernel, grid and block for rows x cols.  vecOk: x, y, g, b are all 16-byte aligned.
// Keep in sync with fusion/plugins/library.py:norm_launch_config (a test compares the two).
NormPlan planNorm(NormOp op, ElemType type, int64_t rows, int64_t cols, bool vecOk);

// y = norm(x) * g + b over each row of cols elements.  g and b may be null; RMSNorm
// ignores b.  Returns the launch error, cudaErrorInvalidValue for cols > INT32_MAX.
cudaError_t launchNorm(NormOp op, ElemType type, void const* x, void const* g, void const* b, void* y, int64_t rows,
    int64_t cols, float eps, cudaStream_t stream);

} // namespace fusion
