// Launch policy for the GroupNorm kernels: the register path (x read once) while the group
// fits 1024 threads x K elements, in CTAs small enough to share an SM where a K allows (where a
// CTA would fill the SM: fp32 staged, fp16 the wide kernel in two CTAs an SM); past that, on
// sm_90+, fp32 the stream path (with a workspace) and fp16 the wide path, else the stream path;
// before sm_90 the wide path, else the stream path; else (no workspace, scalar packs) the
// three-pass loop path.
#include "groupnorm/groupNormLaunch.h"
#include "groupnorm/groupNormKernels.cuh"

#include <climits>
#include <cstdio>
#include <cstring>
#include <iterator>
#include <map>
#include <mutex>

#define FUSION_GROUPNORM_DECLARE_K(TN, T, VEC, K)                                                                  \
    extern "C" __global__ void fusion_groupnorm_reg_##TN##_v##VEC##_k##K FUSION_GROUPNORM_PARAMS(T);
#define FUSION_GROUPNORM_DECLARE_LOOP(TN, T, VEC)                                                                  \
    extern "C" __global__ void fusion_groupnorm_loop_##TN##_v##VEC FUSION_GROUPNORM_PARAMS(T);
#define FUSION_GROUPNORM_DECLARE_STAGED(TN, T, VEC, K)                                                             \
    extern "C" __global__ void fusion_groupnorm_staged_##TN##_v##VEC##_k##K FUSION_GROUPNORM_PARAMS(T);
#define FUSION_GROUPNORM_DECLARE_WIDE(TN, T, VEC, K, AHEAD)                                                        \
    extern "C" __global__ void fusion_groupnorm_wide_##TN##_v##VEC##_k##K FUSION_GROUPNORM_PARAMS(T);
#define FUSION_GROUPNORM_DECLARE_STREAM(TN, T, VEC)                                                                \
    extern "C" __global__ void fusion_groupnorm_stream_##TN##_v##VEC FUSION_GROUPNORM_STREAM_PARAMS(T);

FUSION_GROUPNORM_KERNELS(FUSION_GROUPNORM_DECLARE_K, FUSION_GROUPNORM_DECLARE_LOOP)
FUSION_GROUPNORM_STAGED_KERNELS(FUSION_GROUPNORM_DECLARE_STAGED)
FUSION_GROUPNORM_WIDE_KERNELS(FUSION_GROUPNORM_DECLARE_WIDE)
FUSION_GROUPNORM_STREAM_KERNELS(FUSION_GROUPNORM_DECLARE_STREAM)

namespace fusion
{
namespace
{

struct KernelEntry
{
    char const* type; // "f32" / "f16"
    int vec;
    int k; // 0 for the loop kernels
    char const* name;
    void const* fn;
    bool ahead; // a wide kernel that loads the next row's register head ahead
};

// The register-path kernels in their listed order (K ascending per type and pack width).
#define FUSION_GROUPNORM_ENTRY_K(TN, T, VEC, K)                                                                    \
    {#TN, VEC, K, "fusion_groupnorm_reg_" #TN "_v" #VEC "_k" #K,                                                   \
        reinterpret_cast<void const*>(&fusion_groupnorm_reg_##TN##_v##VEC##_k##K)},
#define FUSION_GROUPNORM_NO_LOOP(TN, T, VEC)
#define FUSION_GROUPNORM_NO_K(TN, T, VEC, K)
#define FUSION_GROUPNORM_ENTRY_LOOP(TN, T, VEC)                                                                    \
    {#TN, VEC, 0, "fusion_groupnorm_loop_" #TN "_v" #VEC, reinterpret_cast<void const*>(&fusion_groupnorm_loop_##TN##_v##VEC)},
KernelEntry const kKernelEntrys[] = {FUSION_GROUPNORM_KERNELS(FUSION_GROUPNORM_ENTRY_K, FUSION_GROUPNORM_NO_LOOP)};
KernelEntry const kLoopKernels[] = {FUSION_GROUPNORM_KERNELS(FUSION_GROUPNORM_NO_K, FUSION_GROUPNORM_ENTRY_LOOP)};
#define FUSION_GROUPNORM_ENTRY_STAGED(TN, T, VEC, K)                                                               \
    {#TN, VEC, K, "fusion_groupnorm_staged_" #TN "_v" #VEC "_k" #K,                                                \
        reinterpret_cast<void const*>(&fusion_groupnorm_staged_##TN##_v##VEC##_k##K)},
KernelEntry const kStagedKernels[] = {FUSION_GROUPNORM_STAGED_KERNELS(FUSION_GROUPNORM_ENTRY_STAGED)};
#define FUSION_GROUPNORM_ENTRY_WIDE(TN, T, VEC, K, AHEAD)                                                          \
    {#TN, VEC, K, "fusion_groupnorm_wide_" #TN "_v" #VEC "_k" #K,                                                  \
        reinterpret_cast<void const*>(&fusion_groupnorm_wide_##TN##_v##VEC##_k##K), AHEAD},
KernelEntry const kWideKernels[] = {FUSION_GROUPNORM_WIDE_KERNELS(FUSION_GROUPNORM_ENTRY_WIDE)};
#define FUSION_GROUPNORM_ENTRY_STREAM(TN, T, VEC)                                                                  \
    {#TN, VEC, 0, "fusion_groupnorm_stream_" #TN "_v" #VEC, reinterpret_cast<void const*>(&fusion_groupnorm_stream_##TN##_v##VEC)},
KernelEntry const kStreamKernels[] = {FUSION_GROUPNORM_STREAM_KERNELS(FUSION_GROUPNORM_ENTRY_STREAM)};

// The first kernel of [begin, end) for this type and pack width (K: any if 0).
KernelEntry const* findKernel(KernelEntry const* begin, KernelEntry const* end, char const* type, int64_t vec, int k = 0)
{
    for (KernelEntry const* kernel = begin; kernel != end; ++kernel)
    {
        if (std::strcmp(kernel->type, type) == 0 && kernel->vec == vec && (k == 0 || kernel->k == k))
        {
            return kernel;
        }
    }
    return nullptr;
}

// The stream path's chunk (packs) and dynamic shared memory (two chunks of 16-byte packs).
constexpr int64_t kStreamChunkPacks = FUSION_GROUPNORM_STREAM_PACKS * FUSION_GROUPNORM_STREAM_THREADS;
constexpr int32_t kStreamSmem = 2 * kStreamChunkPacks * 16;

// The stream kernel's CTAs `sms` SMs hold at once, at most STREAM_CTAS an SM (its launch bounds;
// fewer where an SM's shared memory or registers hold fewer: 5 in an RTX 3090's 100 KB); 0 where
// the library has no code for this device.  (The grid is that, so no CTA waits for one that has
// not started: the kernel would still finish, computing the missing partials itself, but slowly.)
int residentStreamCtas(int sms)
{
    int perSm = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&perSm,
            reinterpret_cast<void const*>(&fusion_groupnorm_stream_f32_v4), FUSION_GROUPNORM_STREAM_THREADS,
            kStreamSmem)
        != cudaSuccess)
    {
        (void) cudaGetLastError();
        return 0;
    }
    return sms * (perSm < FUSION_GROUPNORM_STREAM_CTAS ? perSm : FUSION_GROUPNORM_STREAM_CTAS);
}

// The current device's GroupNormDevice, asked of the runtime once a device; {} where a query
// fails.
GroupNormDevice currentDevice()
{
    int device = 0;
    if (cudaGetDevice(&device) != cudaSuccess)
    {
        (void) cudaGetLastError();
        return GroupNormDevice{};
    }
    static std::mutex mutex;
    static std::map<int, GroupNormDevice> known;
    std::lock_guard<std::mutex> const lock(mutex);
    auto const it = known.find(device);
    if (it != known.end())
    {
        return it->second;
    }
    int major = 0;
    int sms = 0;
    int optin = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess
        || cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess
        || cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device) != cudaSuccess)
    {
        (void) cudaGetLastError();
        return GroupNormDevice{};
    }
    GroupNormDevice const found{major >= 9 ? sms : 0, optin, residentStreamCtas(sms)};
    known.emplace(device, found);
    return found;
}

// Whether `kernel` may launch with `bytes` of dynamic shared memory (raising its limit once)
// and was compiled for at least PTX `minPtx` (the staged kernels: an sm_80 build's
// PTX, JIT-compiled on an sm_90 device, has them empty).
bool usableKernel(void const* kernel, int bytes, int minPtx)
{
    cudaFuncAttributes attr{};
    bool const ok = cudaFuncGetAttributes(&attr, kernel) == cudaSuccess && attr.ptxVersion >= minPtx
        && (attr.maxDynamicSharedSizeBytes >= bytes
            || cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes) == cudaSuccess);
    if (!ok)
    {
        (void) cudaGetLastError(); // a kernel without shared memory runs instead: leave no error behind
    }
    return ok;
}

int64_t threadsFor(int64_t packs, int64_t perThread)
{
    return ((packs + perThread - 1) / perThread + 31) / 32 * 32;
}

// The wide kernel's shared tail in bytes for a group of nv packs on `threads` threads (<= 0:
// the register head holds it all).
int64_t wideTailBytes(KernelEntry const& wide, int64_t nv, int64_t vec, int64_t threads)
{
    return (nv - wide.k / vec * threads) * 16;
}

// The wide kernel for groups of nv packs in CTAs of `threads` whose head is full and whose tail
// fits `smemFree`: with aheadFirst, one of those that reduce their head first (and load the next
// row's ahead, where CTAs take rows in turn) if its tail fits, else the first that fits; nullptr
// if none does.
KernelEntry const* wideKernel(
    char const* type, int64_t vec, int64_t nv, int64_t threads, int64_t smemFree, bool aheadFirst)
{
    for (bool const ahead : {true, false})
    {
        for (KernelEntry const& kernel : kWideKernels)
        {
            int64_t const tail = wideTailBytes(kernel, nv, vec, threads);
            if (std::strcmp(kernel.type, type) == 0 && kernel.vec == vec && kernel.ahead == ahead
                && (!ahead || aheadFirst) && tail > 0 && tail <= smemFree)
            {
                return &kernel;
            }
        }
    }
    return nullptr;
}

} // namespace

NormPlan planGroupNorm(ElemType type, int64_t rows, int64_t cols, bool vecOk, GroupNormDevice device)
{
    NormPlan plan{};
    if (rows <= 0 || cols <= 0 || (type != ElemType::kFLOAT && type != ElemType::kHALF))
    {
        return plan;
    }
    bool const f32 = type == ElemType::kFLOAT;
    char const* typeName = f32 ? "f32" : "f16";
    int64_t const elemBytes = f32 ? 4 : 2;
    int64_t const vecMax = f32 ? 4 : 8;
    int64_t const vec = (vecOk && cols % vecMax == 0) ? vecMax : 1;
    int64_t const nv = cols / vec;
    int64_t const smemFree = device.smemOptin - FUSION_GROUPNORM_STATIC_SMEM;
    plan.grid = rows > INT_MAX ? INT_MAX : rows; // rows are grid-strided
    // The smallest K whose CTA has at most TARGET threads, else the largest K within 1024.
    KernelEntry const* pick = nullptr;
    for (KernelEntry const& kernel : kKernelEntrys)
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
    KernelEntry const* use = pick;
    // A register-path CTA over STAGE threads fills the SM (sm_90+, with the device's SM count).
    bool const fillsSm
        = pick != nullptr && device.stageSms > 0 && vec > 1 && plan.block > FUSION_GROUPNORM_STAGE_THREADS;
    KernelEntry const* staged = fillsSm && cols * elemBytes <= smemFree
        ? findKernel(std::begin(kStagedKernels), std::end(kStagedKernels), typeName, vec, pick->k)
        : nullptr;
    if (staged != nullptr)
    {
        use = staged;
        plan.grid = rows < device.stageSms ? rows : device.stageSms;
        plan.smem = static_cast<int32_t>(cols * elemBytes);
        plan.minPtx = 90;
    }
    else if (fillsSm && !f32)
    {
        // fp16: the wide kernel in half-size CTAs, two an SM where two tails fit, one a group: the
        // hardware starts each as another ends, so an SM's two CTAs run their phases apart; the
        // kernels reducing their head first where the groups outnumber those pairs.
        KernelEntry const* wide = wideKernel(typeName, vec, nv, FUSION_GROUPNORM_PAIR_THREADS,
            device.smemOptin / 2 - FUSION_GROUPNORM_STATIC_SMEM, rows > 2 * device.stageSms);
        if (wide != nullptr)
        {
            use = wide;
            plan.block = FUSION_GROUPNORM_PAIR_THREADS;
            plan.smem = static_cast<int32_t>(wideTailBytes(*wide, nv, vec, FUSION_GROUPNORM_PAIR_THREADS));
        }
    }
    else if (pick == nullptr && vec > 1)
    {
        // sm_90+: fp32 takes the stream path (chunks on the CTAs the device holds, taking them
        // in turn; the kernel counts them in int); fp16 the wide path, one CTA an SM, each taking
        // its rows in turn and loading its next group as it writes this one, else the stream
        // path.  Before sm_90 the wide path, one CTA a group, else the stream path.
        bool const rowsInTurn = device.stageSms > 0 && rows > device.stageSms;
        KernelEntry const* wide = wideKernel(typeName, vec, nv, FUSION_GROUPNORM_THREADS, smemFree, rowsInTurn);
        int64_t const chunks = (nv + kStreamChunkPacks - 1) / kStreamChunkPacks; // a group's
        KernelEntry const* stream = device.streamCtas > 0 && cols <= INT_MAX && rows <= INT_MAX / chunks
            ? findKernel(std::begin(kStreamKernels), std::end(kStreamKernels), typeName, vec)
            : nullptr;
        if (wide != nullptr && !(f32 && stream != nullptr && device.stageSms > 0))
        {
            use = wide;
            plan.block = FUSION_GROUPNORM_THREADS;
            plan.smem = static_cast<int32_t>(wideTailBytes(*wide, nv, vec, FUSION_GROUPNORM_THREADS));
            if (rowsInTurn)
            {
                plan.grid = device.stageSms;
            }
        }
        else if (stream != nullptr)
        {
            use = stream;
            plan.grid = rows * chunks < device.streamCtas ? rows * chunks : device.streamCtas;
            plan.block = FUSION_GROUPNORM_STREAM_THREADS;
            plan.smem = kStreamSmem;
            plan.workspace = rows * chunks * static_cast<int64_t>(sizeof(unsigned long long));
        }
    }
    if (use != nullptr)
    {
        snprintf(plan.name, sizeof(plan.name), "%s", use->name);
        plan.kernel = use->fn;
    }
    else
    {
        KernelEntry const* loop = findKernel(std::begin(kLoopKernels), std::end(kLoopKernels), typeName, vec);
        snprintf(plan.name, sizeof(plan.name), "%s", loop->name);
        plan.block = FUSION_GROUPNORM_THREADS;
        plan.kernel = loop->fn;
    }
    return plan;
}

namespace
{

// rows and cols of x [n, channels, spatial...], false for sizes no kernel takes.
bool groupNormRows(int64_t n, int64_t channels, int64_t groups, int64_t spatial, int64_t& rows, int64_t& cols)
{
    if (groups <= 0 || channels < 0 || channels > INT_MAX || groups > INT_MAX || channels % groups != 0 || n < 0
        || spatial < 0)
    {
        return false;
    }
    rows = n * groups;
    cols = channels / groups * spatial;
    return true;
}

} // namespace

size_t groupNormWorkspace(ElemType type, int64_t n, int64_t channels, int64_t groups, int64_t spatial)
{
    int64_t rows = 0;
    int64_t cols = 0;
    if (!groupNormRows(n, channels, groups, spatial, rows, cols) || rows == 0 || cols == 0)
    {
        return 0;
    }
    // Aligned x and y: the plan that needs the most.  A smaller n or spatial plans the stream
    // path only past the same group size, with no more chunks.
    return static_cast<size_t>(planGroupNorm(type, rows, cols, true, currentDevice()).workspace);
}

cudaError_t launchGroupNorm(ElemType type, void const* x, void const* gamma, void const* beta, void* y, int64_t n,
    int64_t channels, int64_t groups, int64_t spatial, float eps, bool silu, void* workspace, size_t workspaceBytes,
    cudaStream_t stream)
{
    int64_t rows = 0;
    int64_t cols = 0;
    if (!groupNormRows(n, channels, groups, spatial, rows, cols))
    {
        return cudaErrorInvalidValue;
    }
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
    NormPlan plan = planGroupNorm(type, rows, cols, vecOk, currentDevice());
    bool const workspaceOk
        = plan.workspace == 0 || (workspace != nullptr && static_cast<int64_t>(workspaceBytes) >= plan.workspace);
    if (!workspaceOk || ((plan.smem > 0 || plan.minPtx > 0) && !usableKernel(plan.kernel, plan.smem, plan.minPtx)))
    {
        plan = planGroupNorm(type, rows, cols, vecOk); // the single-CTA kernels without shared memory
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
    int patience = FUSION_GROUPNORM_STREAM_PATIENCE;
    void* args[] = {&x, &gamma, &beta, &y, &rowsArg, &channelsArg, &groupsArg, &spatialArg, &eps, &siluArg, &workspace,
        &patience};
    if (plan.workspace > 0)
    {
        // Unwritten partials are all ones (groupNormKernels.cuh: kNoMoments).
        cudaError_t const err = cudaMemsetAsync(workspace, 0xFF, static_cast<size_t>(plan.workspace), stream);
        if (err != cudaSuccess)
        {
            return err;
        }
    }
    return cudaLaunchKernel(
        plan.kernel, dim3(static_cast<unsigned>(plan.grid)), dim3(plan.block), args, plan.smem, stream);
}

} // namespace fusion

// C entry point for tests: the launch policy without a GPU (type: ElemType; stageSms, smemOptin
// and streamCtas: a GroupNormDevice; workspace: bytes).  Returns 0, or -1 if none.
extern "C" __attribute__((visibility("default"))) int fusion_groupnorm_plan(int type, long long rows, long long cols,
    int vecOk, int stageSms, int smemOptin, int streamCtas, char* name, int nameCap, long long* grid, int* block,
    int* smem, long long* workspace)
{
    fusion::NormPlan const plan = fusion::planGroupNorm(static_cast<fusion::ElemType>(type), rows, cols, vecOk != 0,
        fusion::GroupNormDevice{stageSms, smemOptin, streamCtas});
    if (plan.kernel == nullptr || name == nullptr || nameCap <= 0)
    {
        return -1;
    }
    snprintf(name, static_cast<size_t>(nameCap), "%s", plan.name);
    *grid = plan.grid;
    *block = plan.block;
    *smem = plan.smem;
    *workspace = plan.workspace;
    return 0;
}

// C entry point for tests: the current device as the launcher sees it (a GroupNormDevice), to
// compare with Python's.  Returns 0, or -1 where the runtime cannot say.
extern "C" __attribute__((visibility("default"))) int fusion_groupnorm_device(
    int* stageSms, int* smemOptin, int* streamCtas)
{
    fusion::GroupNormDevice const device = fusion::currentDevice();
    *stageSms = device.stageSms;
    *smemOptin = device.smemOptin;
    *streamCtas = device.streamCtas;
    return device.smemOptin > 0 ? 0 : -1;
}
