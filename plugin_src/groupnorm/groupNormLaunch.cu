// Launch policy for the GroupNorm kernels: the register path (x read once) while the group
// fits a CTA, or a cluster of CTAs, of at most 1024 threads x K elements, in CTAs small enough
// to share an SM where a cluster size and K allow; else the three-pass loop path.
#include "groupnorm/groupNormLaunch.h"
#include "groupnorm/groupNormKernels.cuh"

#include <atomic>
#include <climits>
#include <cstdio>
#include <cstring>

#define FUSION_GROUPNORM_DECLARE_K(TN, T, VEC, K)                                                                  \
    extern "C" __global__ void fusion_groupnorm_reg_##TN##_v##VEC##_k##K FUSION_GROUPNORM_PARAMS(T);
#define FUSION_GROUPNORM_DECLARE_KC(TN, T, VEC, K, CL)                                                             \
    extern "C" __global__ void fusion_groupnorm_reg_##TN##_v##VEC##_k##K##_c##CL FUSION_GROUPNORM_PARAMS(T);
#define FUSION_GROUPNORM_DECLARE_LOOP(TN, T)                                                                       \
    extern "C" __global__ void fusion_groupnorm_loop_##TN FUSION_GROUPNORM_PARAMS(T);

FUSION_GROUPNORM_KERNELS(FUSION_GROUPNORM_DECLARE_K, FUSION_GROUPNORM_DECLARE_KC, FUSION_GROUPNORM_DECLARE_LOOP)

namespace fusion
{
namespace
{

struct RegKernel
{
    char const* type; // "f32" / "f16"
    int vec;
    int k;
    int cluster; // CTAs per group
    char const* name;
    void const* fn;
};

// The register-path kernels in their listed order: single CTAs by K, then clusters by size and K.
#define FUSION_GROUPNORM_ENTRY_K(TN, T, VEC, K)                                                                    \
    {#TN, VEC, K, 1, "fusion_groupnorm_reg_" #TN "_v" #VEC "_k" #K,                                                \
        reinterpret_cast<void const*>(&fusion_groupnorm_reg_##TN##_v##VEC##_k##K)},
#define FUSION_GROUPNORM_ENTRY_KC(TN, T, VEC, K, CL)                                                               \
    {#TN, VEC, K, CL, "fusion_groupnorm_reg_" #TN "_v" #VEC "_k" #K "_c" #CL,                                      \
        reinterpret_cast<void const*>(&fusion_groupnorm_reg_##TN##_v##VEC##_k##K##_c##CL)},
#define FUSION_GROUPNORM_NO_LOOP(TN, T)
RegKernel const kRegKernels[] = {
    FUSION_GROUPNORM_KERNELS(FUSION_GROUPNORM_ENTRY_K, FUSION_GROUPNORM_ENTRY_KC, FUSION_GROUPNORM_NO_LOOP)};
int const kClusterSizes[] = {1, 2, 4};

int64_t threadsFor(int64_t packs, int64_t perThread)
{
    return ((packs + perThread - 1) / perThread + 31) / 32 * 32;
}

// Whether this device runs the cluster kernels: compute capability 9+ and a cluster kernel
// built for it (an sm_80 build's PTX, JIT-compiled on an H100, has only the trap).  Cached per
// device: enqueue must stay cheap.
bool clustersOnCurrentDevice()
{
    constexpr int kMaxDevices = 64;
    static std::atomic<int> known[kMaxDevices]; // 0 unknown, 1 yes, 2 no
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kMaxDevices)
    {
        return false;
    }
    int state = known[device].load(std::memory_order_relaxed);
    if (state == 0)
    {
        int major = 0;
        cudaFuncAttributes attr{};
        bool const ok = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) == cudaSuccess
            && major >= 9
            && cudaFuncGetAttributes(&attr, reinterpret_cast<void const*>(&fusion_groupnorm_reg_f32_v4_k40_c2))
                == cudaSuccess
            && attr.binaryVersion >= 90;
        cudaGetLastError(); // a failed query must not stick to the next launch
        state = ok ? 1 : 2;
        known[device].store(state, std::memory_order_relaxed);
    }
    return state == 1;
}

} // namespace

NormPlan planGroupNorm(ElemType type, int64_t rows, int64_t cols, bool vecOk, bool clusterOk)
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
    // The smallest cluster, and in it the smallest K, whose CTA has at most TARGET threads; else
    // the smallest cluster that holds the group in 1024 threads, with its largest K.
    RegKernel const* pick = nullptr;
    int64_t pickThreads = 0;
    bool small = false;
    for (int cl : kClusterSizes)
    {
        if (cl > 1 && !clusterOk)
        {
            break;
        }
        RegKernel const* fit = nullptr;
        int64_t fitThreads = 0;
        for (RegKernel const& kernel : kRegKernels)
        {
            if (kernel.cluster != cl || kernel.vec != vec || std::strcmp(kernel.type, typeName) != 0)
            {
                continue;
            }
            int64_t const threads = threadsFor((nv + cl - 1) / cl, kernel.k / vec);
            if (threads <= FUSION_GROUPNORM_THREADS)
            {
                fit = &kernel;
                fitThreads = threads;
                if (threads <= FUSION_GROUPNORM_TARGET_THREADS)
                {
                    small = true;
                    break;
                }
            }
        }
        if (fit != nullptr && (small || pick == nullptr))
        {
            pick = fit;
            pickThreads = fitThreads;
        }
        if (small)
        {
            break;
        }
    }
    if (pick != nullptr)
    {
        snprintf(plan.name, sizeof(plan.name), "%s", pick->name);
        plan.kernel = pick->fn;
        plan.block = static_cast<int32_t>(pickThreads);
        plan.cluster = pick->cluster;
    }
    else
    {
        snprintf(plan.name, sizeof(plan.name), "fusion_groupnorm_loop_%s", typeName);
        plan.block = FUSION_GROUPNORM_THREADS;
        plan.kernel = f32 ? reinterpret_cast<void const*>(&fusion_groupnorm_loop_f32)
                          : reinterpret_cast<void const*>(&fusion_groupnorm_loop_f16);
        plan.cluster = 1;
    }
    // Rows go to clusters, grid-strided.
    plan.grid = (rows > INT_MAX / plan.cluster ? INT_MAX / plan.cluster : rows) * plan.cluster;
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
    NormPlan const plan = planGroupNorm(type, rows, cols, aligned(x) && aligned(y), clustersOnCurrentDevice());
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
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(static_cast<unsigned>(plan.grid));
    config.blockDim = dim3(plan.block);
    config.stream = stream;
    cudaLaunchAttribute cluster{};
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = static_cast<unsigned>(plan.cluster);
    cluster.val.clusterDim.y = 1;
    cluster.val.clusterDim.z = 1;
    config.attrs = &cluster;
    config.numAttrs = plan.cluster > 1 ? 1 : 0;
    return cudaLaunchKernelExC(&config, plan.kernel, args);
}

} // namespace fusion

// C entry point for tests: the launch policy without a GPU (type: ElemType).  Returns 0, or -1 if none.
extern "C" __attribute__((visibility("default"))) int fusion_groupnorm_plan(int type, long long rows, long long cols,
    int vecOk, int clusterOk, char* name, int nameCap, long long* grid, int* block)
{
    fusion::NormPlan const plan
        = fusion::planGroupNorm(static_cast<fusion::ElemType>(type), rows, cols, vecOk != 0, clusterOk != 0);
    if (plan.kernel == nullptr || name == nullptr || nameCap <= 0)
    {
        return -1;
    }
    snprintf(name, static_cast<size_t>(nameCap), "%s", plan.name);
    *grid = plan.grid;
    *block = plan.block;
    return 0;
}
