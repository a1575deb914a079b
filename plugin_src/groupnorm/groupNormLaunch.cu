// Launch policy for the GroupNorm kernels: the register path (x read once) while the group
// fits 1024 threads x K elements, in CTAs small enough to share an SM where a K allows; else
// the three-pass loop path.
#include "groupnorm/groupNormLaunch.h"
#include "groupnorm/groupNormKernels.cuh"

#include <climits>
#include <cstdio>
#include <cstring>

#define FUSION_GROUPNORM_DECLARE_K(TN, T, VEC, K)                                                                  \
    extern "C" __global__ void fusion_groupnorm_reg_##TN##_v##VEC##_k##K FUSION_GROUPNORM_PARAMS(T);
#define FUSION_GROUPNORM_DECLARE_LOOP(TN, T)                                                                       \
    extern "C" __global__ void fusion_groupnorm_loop_##TN FUSION_GROUPNORM_PARAMS(T);

FUSION_GROUPNORM_KERNELS(FUSION_GROUPNORM_DECLARE_K, FUSION_GROUPNORM_DECLARE_LOOP)

namespace fusion
{
namespace
{

struct RegKernel
{
    char const* type; // "f32" / "f16"
    int vec;
    int k;
    char const* name;
    void const* fn;
};

// The register-path kernels in their listed order (K ascending per type and pack width).
#define FUSION_GROUPNORM_ENTRY_K(TN, T, VEC, K)                                                                    \
    {#TN, VEC, K, "fusion_groupnorm_reg_" #TN "_v" #VEC "_k" #K,                                                   \
        reinterpret_cast<void const*>(&fusion_groupnorm_reg_##TN##_v##VEC##_k##K)},
#define FUSION_GROUPNORM_NO_LOOP(TN, T)
RegKernel const kRegKernels[] = {FUSION_GROUPNORM_KERNELS(FUSION_GROUPNORM_ENTRY_K, FUSION_GROUPNORM_NO_LOOP)};

int64_t threadsFor(int64_t packs, int64_t perThread)
{
    return ((packs + perThread - 1) / perThread + 31) / 32 * 32;
}

} // namespace

NormPlan planGroupNorm(ElemType type, int64_t rows, int64_t cols, bool vecOk)
{
    NormPlan plan{};
    if (rows <= 0 || cols <= 0 || (type != ElemType::kFLOAT && type != ElemType::kHALF))
    {
        return plan;
    }
    bool const f32 = type == ElemType::kFLOAT;
    char const* typeName = f32 ? "f32" : "f16";
    int64_t const vecMax = f32 ? 4 : 8;
    int64_t const vec = (vecOk && cols % vecMax == 0) ? vecMax : 1;
    int64_t const nv = cols / vec;
    // The smallest K whose CTA has at most TARGET threads, else the largest K within 1024.
    RegKernel const* pick = nullptr;
    for (RegKernel const& kernel : kRegKernels)
    {
        if (std::strcmp(kernel.type, typeName) != 0 || kernel.vec != vec)
        {
            continue;
        }
        int64_t const threads = threadsFor(nv, kernel.k / vec);
        if (threads <= FUSION_GROUPNORM_THREADS)
        {
            pick = &kernel;
            plan.block = static_cast<int32_t>(threads);
            if (threads <= FUSION_GROUPNORM_TARGET_THREADS)
            {
                break;
            }
        }
    }
    if (pick != nullptr)
    {
        snprintf(plan.name, sizeof(plan.name), "%s", pick->name);
        plan.kernel = pick->fn;
    }
    else
    {
        snprintf(plan.name, sizeof(plan.name), "fusion_groupnorm_loop_%s", typeName);
        plan.block = FUSION_GROUPNORM_THREADS;
        plan.kernel = f32 ? reinterpret_cast<void const*>(&fusion_groupnorm_loop_f32)
                          : reinterpret_cast<void const*>(&fusion_groupnorm_loop_f16);
    }
    plan.grid = rows > INT_MAX ? INT_MAX : rows; // rows are grid-strided
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
