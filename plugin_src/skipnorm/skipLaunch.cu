#include "skipnorm/skipLaunch.h"
#include "skipnorm/skipNormKernels.cuh"

#include <climits>
#include <cstring>
#include <string>
#include <unordered_map>

#define FUSION_SKIP_DECLARE_N(OP, RMS, TN, T, VEC, PATH, N)                                                        \
    extern "C" __global__ void fusion_skip##OP##_##PATH##_##TN##_v##VEC##_n##N FUSION_SKIP_NORM_PARAMS(T);
#define FUSION_SKIP_DECLARE_LOOP(OP, RMS, TN, T, VEC)                                                              \
    extern "C" __global__ void fusion_skip##OP##_loop_##TN##_v##VEC FUSION_SKIP_NORM_PARAMS(T);

FUSION_NORM_KERNELS(FUSION_SKIP_DECLARE_N, FUSION_SKIP_DECLARE_LOOP, layernorm, false)
FUSION_NORM_KERNELS(FUSION_SKIP_DECLARE_N, FUSION_SKIP_DECLARE_LOOP, rmsnorm, true)

namespace fusion
{
namespace
{

#define FUSION_SKIP_ENTRY_N(OP, RMS, TN, T, VEC, PATH, N)                                                          \
    {"fusion_" #OP "_" #PATH "_" #TN "_v" #VEC "_n" #N,                                                            \
        reinterpret_cast<void const*>(&fusion_skip##OP##_##PATH##_##TN##_v##VEC##_n##N)},
#define FUSION_SKIP_ENTRY_LOOP(OP, RMS, TN, T, VEC)                                                                \
    {"fusion_" #OP "_loop_" #TN "_v" #VEC, reinterpret_cast<void const*>(&fusion_skip##OP##_loop_##TN##_v##VEC)},

// Keyed by the plain norm's kernel name, which planNorm chooses.
std::unordered_map<std::string, void const*> const& skipTable()
{
    static std::unordered_map<std::string, void const*> const table{
        FUSION_NORM_KERNELS(FUSION_SKIP_ENTRY_N, FUSION_SKIP_ENTRY_LOOP, layernorm, false)
            FUSION_NORM_KERNELS(FUSION_SKIP_ENTRY_N, FUSION_SKIP_ENTRY_LOOP, rmsnorm, true)};
    return table;
}

} // namespace

cudaError_t launchSkipNorm(NormOp op, ElemType type, void const* x, void const* skip, void const* bias, void const* g,
    void const* b, void* y, void* sum, int64_t rows, int64_t cols, float eps, cudaStream_t stream)
{
    if (rows == 0 || cols == 0)
    {
        return cudaSuccess;
    }
    if (rows < 0 || cols < 0 || cols > INT_MAX || x == nullptr || skip == nullptr || y == nullptr)
    {
        return cudaErrorInvalidValue;
    }
    if (op == NormOp::kRMS_NORM)
    {
        b = nullptr;
    }
    auto aligned = [](void const* p) { return p == nullptr || (reinterpret_cast<uintptr_t>(p) & 15U) == 0; };
    bool const vecOk = aligned(x) && aligned(skip) && aligned(bias) && aligned(g) && aligned(b) && aligned(y)
        && aligned(sum);
    NormPlan const plan = planNorm(op, type, rows, cols, vecOk);
    auto const it = skipTable().find(plan.name);
    if (plan.kernel == nullptr || it == skipTable().end())
    {
        return cudaErrorInvalidDeviceFunction;
    }
    long long rowsArg = rows;
    int colsArg = static_cast<int>(cols);
    void* args[] = {&x, &skip, &bias, &g, &b, &y, &sum, &rowsArg, &colsArg, &eps};
    return cudaLaunchKernel(it->second, dim3(static_cast<unsigned>(plan.grid)), dim3(plan.block), args, 0, stream);
}

} // namespace fusion
