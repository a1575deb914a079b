// Launch policy for the GroupNorm kernels: the register path (x read once) while the group
// fits 1024 threads x K elements, in CTAs small enough to share an SM where a K allows (staged
// where a CTA fills the SM); else the three-pass loop path.
#include "groupnorm/groupNormLaunch.h"
#include "groupnorm/groupNormKernels.cuh"

#include <climits>
#include <cstdio>
#include <cstring>
#include <iterator>

#define FUSION_GROUPNORM_DECLARE_K(TN, T, VEC, K)                                                                  \
    extern "C" __global__ void fusion_groupnorm_reg_##TN##_v##VEC##_k##K FUSION_GROUPNORM_PARAMS(T);
#define FUSION_GROUPNORM_DECLARE_LOOP(TN, T)                                                                       \
    extern "C" __global__ void fusion_groupnorm_loop_##TN FUSION_GROUPNORM_PARAMS(T);
#define FUSION_GROUPNORM_DECLARE_STAGED(TN, T, VEC, K)                                                             \
    extern "C" __global__ void fusion_groupnorm_staged_##TN##_v##VEC##_k##K FUSION_GROUPNORM_PARAMS(T);

FUSION_GROUPNORM_KERNELS(FUSION_GROUPNORM_DECLARE_K, FUSION_GROUPNORM_DECLARE_LOOP)
FUSION_GROUPNORM_STAGED_KERNELS(FUSION_GROUPNORM_DECLARE_STAGED)

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
#define FUSION_GROUPNORM_ENTRY_STAGED(TN, T, VEC, K)                                                               \
    {#TN, VEC, K, "fusion_groupnorm_staged_" #TN "_v" #VEC "_k" #K,                                                \
        reinterpret_cast<void const*>(&fusion_groupnorm_staged_##TN##_v##VEC##_k##K)},
RegKernel const kStagedKernels[] = {FUSION_GROUPNORM_STAGED_KERNELS(FUSION_GROUPNORM_ENTRY_STAGED)};

RegKernel const* findKernel(RegKernel const* begin, RegKernel const* end, char const* type, int64_t vec, int k)
{
    for (RegKernel const* kernel = begin; kernel != end; ++kernel)
    {
        if (std::strcmp(kernel->type, type) == 0 && kernel->vec == vec && kernel->k == k)
        {
            return kernel;
        }
    }
    return nullptr;
}

// The SM count where the current device runs the staged kernels (sm_90+, compiled for sm_90+:
// an older build's PTX JIT-compiled here would have them empty), the shared memory a row needs
// allowed; else 0.
int stagingSms(void const* stagedKernel, int64_t rowBytes)
{
    int device = 0;
    int major = 0;
    int sms = 0;
    int optin = 0;
    if (cudaGetDevice(&device) != cudaSuccess
        || cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess || major < 9
        || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess
        || cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess
        || rowBytes > optin)
    {
        return 0;
    }
    cudaFuncAttributes attr{};
    bool const ok = cudaFuncGetAttributes(&attr, stagedKernel) == cudaSuccess && attr.ptxVersion >= 90
        && (attr.maxDynamicSharedSizeBytes >= rowBytes
            || cudaFuncSetAttribute(stagedKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin) == cudaSuccess);
    if (!ok)
    {
        (void) cudaGetLastError(); // the unstaged kernel runs instead: leave no error behind
    }
    return ok ? sms : 0;
}

int64_t threadsFor(int64_t packs, int64_t perThread)
{
    return ((packs + perThread - 1) / perThread + 31) / 32 * 32;
}

} // namespace

NormPlan planGroupNorm(ElemType type, int64_t rows, int64_t cols, bool vecOk, int stageSms)
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
    RegKernel const* staged = nullptr;
    if (pick != nullptr && stageSms > 0 && vec > 1 && plan.block > FUSION_GROUPNORM_STAGE_THREADS)
    {
        staged = findKernel(std::begin(kStagedKernels), std::end(kStagedKernels), typeName, vec, pick->k);
    }
    if (staged != nullptr)
    {
        snprintf(plan.name, sizeof(plan.name), "%s", staged->name);
        plan.kernel = staged->fn;
        plan.grid = rows < stageSms ? rows : stageSms;
        plan.smem = static_cast<int32_t>(cols * (f32 ? 4 : 2));
        return plan;
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
    bool const vecOk = aligned(x) && aligned(y);
    NormPlan plan = planGroupNorm(type, rows, cols, vecOk);
    if (plan.block > FUSION_GROUPNORM_STAGE_THREADS)
    {
        // A CTA fills the SM: staged where the device can.
        int64_t const elemBytes = type == ElemType::kFLOAT ? 4 : 2;
        NormPlan const staged = planGroupNorm(type, rows, cols, vecOk, 1);
        int const sms = staged.smem > 0 ? stagingSms(staged.kernel, cols * elemBytes) : 0;
        if (sms > 0)
        {
            plan = planGroupNorm(type, rows, cols, vecOk, sms);
        }
    }
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
    return cudaLaunchKernel(
        plan.kernel, dim3(static_cast<unsigned>(plan.grid)), dim3(plan.block), args, plan.smem, stream);
}

} // namespace fusion

// C entry point for tests: the launch policy without a GPU (type: ElemType; stageSms as
// planGroupNorm's).  Returns 0, or -1 if none.
extern "C" __attribute__((visibility("default"))) int fusion_groupnorm_plan(int type, long long rows, long long cols,
    int vecOk, int stageSms, char* name, int nameCap, long long* grid, int* block)
{
    fusion::NormPlan const plan
        = fusion::planGroupNorm(static_cast<fusion::ElemType>(type), rows, cols, vecOk != 0, stageSms);
    if (plan.kernel == nullptr || name == nullptr || nameCap <= 0)
    {
        return -1;
    }
    snprintf(name, static_cast<size_t>(nameCap), "%s", plan.name);
    *grid = plan.grid;
    *block = plan.block;
    return 0;
}
