// Launch policy for the GroupNorm kernels: the register path (x read once) while the group
// fits 1024 threads x K elements, else the three-pass loop path.
#include "groupnorm/groupNormLaunch.h"
#include "groupnorm/groupNormKernels.cuh"

#include <climits>
#include <cstdio>
#include <string>
#include <unordered_map>

#define FUSION_GROUPNORM_DECLARE_K(TN, T, VEC, K)                                                                  \
    extern "C" __global__ void fusion_groupnorm_reg_##TN##_v##VEC##_k##K FUSION_GROUPNORM_PARAMS(T);
#define FUSION_GROUPNORM_DECLARE_LOOP(TN, T)                                                                       \
    extern "C" __global__ void fusion_groupnorm_loop_##TN FUSION_GROUPNORM_PARAMS(T);

FUSION_GROUPNORM_KERNELS(FUSION_GROUPNORM_DECLARE_K, FUSION_GROUPNORM_DECLARE_LOOP)

namespace fusion
{
namespace
{

#define FUSION_GROUPNORM_ENTRY_K(TN, T, VEC, K)                                                                    \
    {"fusion_groupnorm_reg_" #TN "_v" #VEC "_k" #K,                                                                \
        reinterpret_cast<void const*>(&fusion_groupnorm_reg_##TN##_v##VEC##_k##K)},
#define FUSION_GROUPNORM_ENTRY_LOOP(TN, T)                                                                         \
    {"fusion_groupnorm_loop_" #TN, reinterpret_cast<void const*>(&fusion_groupnorm_loop_##TN)},

std::unordered_map<std::string, void const*> const& groupNormTable()
{
    static std::unordered_map<std::string, void const*> const table{
        FUSION_GROUPNORM_KERNELS(FUSION_GROUPNORM_ENTRY_K, FUSION_GROUPNORM_ENTRY_LOOP)};
    return table;
}

} // namespace

NormPlan planGroupNorm(ElemType type, int64_t rows, int64_t cols, bool vecOk)
{
    NormPlan plan{};
    if (rows <= 0 || cols <= 0 || (type != ElemType::kFLOAT && type != ElemType::kHALF))
    {
        return plan;
    }
    char const* typeName = type == ElemType::kFLOAT ? "f32" : "f16";
    int64_t const vecMax = type == ElemType::kFLOAT ? 4 : 8;
    int64_t const vec = (vecOk && cols % vecMax == 0) ? vecMax : 1;
    int64_t const maxK = vec > 1 ? FUSION_GROUPNORM_MAX_K : FUSION_GROUPNORM_MAX_K_SCALAR;
    int64_t const nv = cols / vec;
    snprintf(plan.name, sizeof(plan.name), "fusion_groupnorm_loop_%s", typeName);
    plan.block = FUSION_GROUPNORM_THREADS;
    for (int64_t k = 8; k <= maxK; k += 8) // the instantiated K: 8, 16, ... (groupNormKernels.cuh)
    {
        int64_t const packs = k / vec; // per thread
        if (nv <= FUSION_GROUPNORM_THREADS * packs)
        {
            int64_t const threads = ((nv + packs - 1) / packs + 31) / 32 * 32;
            snprintf(plan.name, sizeof(plan.name), "fusion_groupnorm_reg_%s_v%d_k%d", typeName, int(vec), int(k));
            plan.block = static_cast<int32_t>(threads);
            break;
        }
    }
    plan.grid = rows > INT_MAX ? INT_MAX : rows; // rows are grid-strided
    auto const it = groupNormTable().find(plan.name);
    plan.kernel = it == groupNormTable().end() ? nullptr : it->second;
    return plan;
}

cudaError_t launchGroupNorm(ElemType type, void const* x, void const* gamma, void const* beta, void* y, int64_t n,
    int64_t channels, int64_t groups, int64_t spatial, float eps, bool silu, cudaStream_t stream)
{
    if (groups <= 0 || channels < 0 || channels > INT_MAX || groups > INT_MAX || channels % groups != 0 || n < 0
        || spatial < 0)
    {
        return cudaErrorInvalidValue;
    }
    int64_t const rows = n * groups;
    int64_t const cols = channels / groups * spatial;
    if (rows == 0 || cols == 0)
    {
        return cudaSuccess;
    }
    if (x == nullptr || y == nullptr || gamma == nullptr || beta == nullptr)
    {
        return cudaErrorInvalidValue;
    }
    auto aligned = [](void const* p) { return (reinterpret_cast<uintptr_t>(p) & 15U) == 0; };
    NormPlan const plan = planGroupNorm(type, rows, cols, aligned(x) && aligned(y));
    if (plan.kernel == nullptr)
    {
        return cudaErrorInvalidValue;
    }
    long long rowsArg = rows;
    int channelsArg = static_cast<int>(channels);
    int groupsArg = static_cast<int>(groups);
    long long spatialArg = spatial;
    int siluArg = silu ? 1 : 0;
    void* args[] = {&x, &gamma, &beta, &y, &rowsArg, &channelsArg, &groupsArg, &spatialArg, &eps, &siluArg};
    return cudaLaunchKernel(plan.kernel, dim3(static_cast<unsigned>(plan.grid)), dim3(plan.block), args, 0, stream);
}

} // namespace fusion

// C entry point for tests: the launch policy without a GPU (type: ElemType).  Returns 0, or -1 if none.
extern "C" __attribute__((visibility("default"))) int fusion_groupnorm_plan(
    int type, long long rows, long long cols, int vecOk, char* name, int nameCap, long long* grid, int* block)
{
    fusion::NormPlan const plan = fusion::planGroupNorm(static_cast<fusion::ElemType>(type), rows, cols, vecOk != 0);
    if (plan.kernel == nullptr || name == nullptr || nameCap <= 0)
    {
        return -1;
    }
    snprintf(name, static_cast<size_t>(nameCap), "%s", plan.name);
    *grid = plan.grid;
    *block = plan.block;
    return 0;
}
