// Launch policy for the norm kernels: warp per row while the row fits 32 lanes x 8 packs,
// a CTA per row (register cache) up to 512 threads x 8 packs, then the re-reading loop.
#include "common/normLaunch.h"
#include "common/normKernels.cuh"

#include <climits>
#include <cstdio>
#include <cstring>
#include <string>
#include <unordered_map>

#define FUSION_NORM_DECLARE_N(OP, RMS, TN, T, VEC, PATH, N)                                                        \
    extern "C" __global__ void fusion_##OP##_##PATH##_##TN##_v##VEC##_n##N FUSION_NORM_PARAMS(T);
#define FUSION_NORM_DECLARE_LOOP(OP, RMS, TN, T, VEC)                                                              \
    extern "C" __global__ void fusion_##OP##_loop_##TN##_v##VEC FUSION_NORM_PARAMS(T);

FUSION_NORM_KERNELS(FUSION_NORM_DECLARE_N, FUSION_NORM_DECLARE_LOOP, layernorm, false)
FUSION_NORM_KERNELS(FUSION_NORM_DECLARE_N, FUSION_NORM_DECLARE_LOOP, rmsnorm, true)

namespace fusion
{
namespace
{

#define FUSION_NORM_ENTRY_N(OP, RMS, TN, T, VEC, PATH, N)                                                          \
    {"fusion_" #OP "_" #PATH "_" #TN "_v" #VEC "_n" #N,                                                            \
        reinterpret_cast<void const*>(&fusion_##OP##_##PATH##_##TN##_v##VEC##_n##N)},
#define FUSION_NORM_ENTRY_LOOP(OP, RMS, TN, T, VEC)                                                                \
    {"fusion_" #OP "_loop_" #TN "_v" #VEC, reinterpret_cast<void const*>(&fusion_##OP##_loop_##TN##_v##VEC)},

std::unordered_map<std::string, void const*> const& kernelTable()
{
    static std::unordered_map<std::string, void const*> const table{
        FUSION_NORM_KERNELS(FUSION_NORM_ENTRY_N, FUSION_NORM_ENTRY_LOOP, layernorm, false)
            FUSION_NORM_KERNELS(FUSION_NORM_ENTRY_N, FUSION_NORM_ENTRY_LOOP, rmsnorm, true)};
    return table;
}

int64_t ceilDiv(int64_t a, int64_t b)
{
    return (a + b - 1) / b;
}

} // namespace

NormPlan planNorm(NormOp op, ElemType type, int64_t rows, int64_t cols, bool vecOk)
{
    NormPlan plan{};
    if (rows <= 0 || cols <= 0 || cols > INT_MAX)
    {
        return plan;
    }
    char const* opName = op == NormOp::kLAYER_NORM ? "layernorm" : "rmsnorm";
    char const* typeName = type == ElemType::kFLOAT ? "f32" : type == ElemType::kHALF ? "f16" : "bf16";
    int64_t const vecMax = type == ElemType::kFLOAT ? 4 : 8;
    int64_t const vec = (vecOk && cols % vecMax == 0) ? vecMax : 1;
    int64_t const nv = cols / vec;
    int64_t const maxN = FUSION_NORM_MAX_N;
    if (nv <= 32 * maxN)
    {
        int64_t const n = ceilDiv(nv, 32);
        int64_t const warps = FUSION_NORM_WARP_THREADS / 32;
        snprintf(plan.name, sizeof(plan.name), "fusion_%s_warp_%s_v%d_n%d", opName, typeName, int(vec), int(n));
        plan.block = FUSION_NORM_WARP_THREADS;
        plan.grid = ceilDiv(rows, warps);
    }
    else if (nv <= FUSION_NORM_BLOCK_MAX_THREADS * maxN)
    {
        // Aim for <= 256 threads per row; wider rows take more threads, never more packs.
        int64_t n = ceilDiv(nv, 256);
        n = n > maxN ? maxN : n;
        int64_t const threads = ceilDiv(ceilDiv(nv, n), 32) * 32;
        snprintf(plan.name, sizeof(plan.name), "fusion_%s_block_%s_v%d_n%d", opName, typeName, int(vec), int(n));
        plan.block = static_cast<int32_t>(threads);
        plan.grid = rows;
    }
    else
    {
        snprintf(plan.name, sizeof(plan.name), "fusion_%s_loop_%s_v%d", opName, typeName, int(vec));
        plan.block = FUSION_NORM_LOOP_THREADS;
        plan.grid = rows;
    }
    plan.grid = plan.grid > INT_MAX ? INT_MAX : plan.grid; // rows are grid-strided
    auto const it = kernelTable().find(plan.name);
    plan.kernel = it == kernelTable().end() ? nullptr : it->second;
    return plan;
}

cudaError_t launchNorm(NormOp op, ElemType type, void const* x, void const* g, void const* b, void* y, int64_t rows,
    int64_t cols, float eps, cudaStream_t stream)
{
    if (rows == 0 || cols == 0)
    {
        return cudaSuccess;
    }
    if (rows < 0 || cols < 0 || cols > INT_MAX || x == nullptr || y == nullptr)
    {
        return cudaErrorInvalidValue;
    }
    auto aligned = [](void const* p) { return (reinterpret_cast<uintptr_t>(p) & 15U) == 0; };
    if (op == NormOp::kRMS_NORM)
    {
        b = nullptr;
    }
    bool const vecOk = aligned(x) && aligned(y) && (g == nullptr || aligned(g)) && (b == nullptr || aligned(b));
    NormPlan const plan = planNorm(op, type, rows, cols, vecOk);
    if (plan.kernel == nullptr)
    {
        return cudaErrorInvalidDeviceFunction;
    }
    long long rowsArg = rows;
    int colsArg = static_cast<int>(cols);
    void* args[] = {&x, &g, &b, &y, &rowsArg, &colsArg, &eps};
    return cudaLaunchKernel(plan.kernel, dim3(static_cast<unsigned>(plan.grid)), dim3(plan.block), args, 0, stream);
}

} // namespace fusion

// C entry point for tests: the launch policy without a GPU.  Returns 0, or -1 if none.
extern "C" __attribute__((visibility("default"))) int fusion_norm_plan(int op, int type, long long rows,
    long long cols, int vecOk, char* name, int nameCap, long long* grid, int* block)
{
    fusion::NormPlan const plan = fusion::planNorm(
        static_cast<fusion::NormOp>(op), static_cast<fusion::ElemType>(type), rows, cols, vecOk != 0);
    if (plan.kernel == nullptr || name == nullptr || nameCap <= 0)
    {
        return -1;
    }
    snprintf(name, static_cast<size_t>(nameCap), "%s", plan.name);
    *grid = plan.grid;
    *block = plan.block;
    return 0;
}
