// GroupNorm forward on NC* tensors: one CTA per (n, group), rows grid-strided.  A group's
// C / G channels are contiguous (cols = C / G * spatial elements), so each group is a row of
// [N * G, cols]; element i of a row is in its group's channel i / spatial.
//
// Device code only, no TensorRT: the same source compiles under nvcc (plugin library) and
// NVRTC (cupy.RawModule, tests/gpu).  Statistics in fp32, two-pass (common/normKernels.cuh
// cachedStats: the mean of deviations from the row's first element, then the sum of squared
// deviations from the mean: no cancellation for groups with a large mean), except on the wide
// path: one pass about a pivot near the mean (onePassStats); the last step normalizes, applies
// the per-channel affine and, if silu != 0, y * sigmoid(y).
//
// Five paths:
//   reg    - the group held in registers: each thread caches K elements as K / VEC packs of T
//            (fp16 stays packed, two per register), so x is read once and y written once.
//            VEC = 16 / sizeof(T) where x and y are 16-byte aligned and cols % VEC == 0
//            (rows then start aligned), else 1.  cols <= 1024 * K.
//   staged - reg on a grid of one CTA per SM (sm_90+, VEC packs), for groups so large that a
//            CTA fills the SM: the copy engine brings the CTA's next group into shared
//            memory while this one is reduced and written, so the SM reads and writes at
//            once.  (Where two or more CTAs share an SM they overlap that way already, and
//            staging measured slower.)  Same arithmetic as reg: the same outputs, bit for bit.
//   wide   - groups past the register cache (VEC packs): 1024 threads hold K elements each in
//            registers and the rest in shared memory (up to the device's opt-in), x read once;
//            on a grid of one CTA per SM, each CTA loads its next group's shared part as it
//            writes this one (cp.async); statistics in one pass.  fp16 also takes it, in
//            512-thread CTAs two an SM (one a group), for groups whose register-path CTA
//            would fill the SM.
//   cluster - reg with a group spread over a cluster of CL CTAs (sm_90+, VEC packs), for groups
//            past the wide path: x still read once; the CTAs add their sums through
//            distributed shared memory.
//   loop   - any cols: three passes over the group (mean, squared deviations, normalize), in
//            VEC packs or scalars; passes 2 and 3 re-read it (from L2 where it fits).
#pragma once

#include "common/bulkCopy.cuh"
#include "common/normKernels.cuh"

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define FUSION_GROUPNORM_HAS_CLUSTERS 1
#else
#define FUSION_GROUPNORM_HAS_CLUSTERS 0
#endif

namespace fusion_kernels
{

// y for the elements of one channel: ((x - pivot) - shift) * a + b with a = scale * gamma, then
// SiLU if asked.  fp16 subtracts the mean in one step, (x - mean) * a + b: its rounding,
// 2^-24 |mean| / sigma of the output's scale, is far below what an fp16 x resolves, a constant
// group still gives b exactly, and it saves an instruction of the few an element the fp16
// kernels can afford.  fp32 keeps the deviations exact.  SiLU uses the fast exp and divide:
// their few-ulp error is far below the tolerance, and the accurate expf + IEEE division made
// the fp16 kernels compute-bound.  (v < -87: exp(-v) is inf and the quotient -0, SiLU's limit.)
template <typename T>
struct ChannelAffine
{
    static constexpr bool kOneStep = sizeof(T) == 2;
    float mean;
    float a;
    float b;

    __device__ __forceinline__ ChannelAffine(RowStats const& s, float gamma, float beta)
        : mean(s.pivot + s.shift)
        , a(s.scale * gamma)
        , b(beta)
    {
    }

    __device__ __forceinline__ float operator()(float x, RowStats const& s) const
    {
        return (kOneStep ? x - mean : (x - s.pivot) - s.shift) * a + b;
    }
};

__device__ __forceinline__ float silu(float v)
{
    return __fdividef(v, 1.F + __expf(-v));
}

// The output pack of elements first .. first + VEC - 1 of a row.  A pack's elements share one
// channel when a channel's elements are whole packs (packChannel), else span two where a
// channel has at least VEC elements (one division a pack, not one an element: SD at 720 x 720,
// a 90 x 90 latent, has fp16 packs across channels), else more.
template <typename T, int VEC>
__device__ __forceinline__ Pack<T, VEC> groupNormPack(Pack<T, VEC> const& in, unsigned first, RowStats const& s,
    T const* gr, T const* br, unsigned spatial, bool packChannel, int silu)
{
    float v[VEC];
    if (packChannel)
    {
        unsigned const c = first / spatial;
        ChannelAffine<T> const f(s, toFloat(gr[c]), toFloat(br[c]));
#pragma unroll
        for (int e = 0; e < VEC; ++e)
        {
            v[e] = f(toFloat(in.v[e]), s);
        }
    }
    else if (spatial >= VEC)
    {
        unsigned const c0 = first / spatial;
        unsigned const inFirst = (c0 + 1) * spatial - first; // elements still in channel c0 (>= 1)
#pragma unroll
        for (int e = 0; e < VEC; ++e)
        {
            unsigned const c = static_cast<unsigned>(e) < inFirst ? c0 : c0 + 1;
            v[e] = ChannelAffine<T>(s, toFloat(gr[c]), toFloat(br[c]))(toFloat(in.v[e]), s);
        }
    }
    else
    {
#pragma unroll
        for (int e = 0; e < VEC; ++e)
        {
            unsigned const c = (first + e) / spatial;
            v[e] = ChannelAffine<T>(s, toFloat(gr[c]), toFloat(br[c]))(toFloat(in.v[e]), s);
        }
    }
    Pack<T, VEC> out;
#pragma unroll
    for (int e = 0; e < VEC; ++e)
    {
        out.v[e] = fromFloat<T>(silu ? fusion_kernels::silu(v[e]) : v[e]);
    }
    return out;
}

// Row `row`'s x and y packs and its group's gamma and beta (perGroup channels from its first),
// for the wide and loop paths.  (The reg path keeps its own arithmetic: held in this struct,
// the pointers cost the scalar K = 24 build 32 bytes of spills.)
template <typename T, int VEC>
struct GroupRow
{
    Pack<T, VEC> const* x;
    Pack<T, VEC>* y;
    T const* gamma;
    T const* beta;

    __device__ __forceinline__ GroupRow(T const* x0, T* y0, T const* gamma0, T const* beta0, long long row,
        long long cols, int groups, int perGroup)
        : x(reinterpret_cast<Pack<T, VEC> const*>(x0 + row * cols))
        , y(reinterpret_cast<Pack<T, VEC>*>(y0 + row * cols))
        , gamma(gamma0 + static_cast<int>(row % groups) * perGroup)
        , beta(beta0 + static_cast<int>(row % groups) * perGroup)
    {
    }
};

// The wide path's row statistics in one pass: sums and squares of the deviations from a pivot,
// the mean of the threads' first packs (cache[0]), so no cancellation: those packs being a
// fraction f of the row, (mean - pivot)^2 <= var * (1 - f) / f whatever the data (f >= 1/24
// here; the first element as pivot needs the second pass).  One barrier a sum: with one CTA an
// SM nothing hides the statistics, and the second pass over the group cost 2-7 points of the
// copy (the sweep's ab_one_pass; on the register path, where CTAs share SMs, one pass measured
// 2-5 points slower: its build spills).  tail: shared packs tid, tid + step, ... below tailPacks,
// this thread's cp.async copies (no other thread reads them), which the statistics wait for.
// HEAD_FIRST: the pivot and the head's sums before that wait, for a head loaded ahead: the SM
// reduces its head while its tail still lands (fp32 8 x 640 x 64 x 64: 0.87 -> 0.90 of the
// copy, the bound measured with no statistics at all; on the K = 64 kernel, which asks for its
// head at the row's top, -1 to +0.5 points: the sweep's ab_head_first).
template <typename T, int VEC, int N, bool HEAD_FIRST>
__device__ __forceinline__ RowStats onePassStats(Pack<T, VEC> const (&cache)[N], Pack<T, VEC> const* tail, int tid,
    int step, int tailPacks, float inverseCols, float eps, float* buf, float2* buf2)
{
    if constexpr (!HEAD_FIRST)
    {
        copyAsyncWait();
    }
    float const pivot = blockSum(packSum(cache[0], 0.F), buf) / static_cast<float>(step * VEC);
    float acc = 0.F;
    float sq = 0.F;
#pragma unroll
    for (int i = 0; i < N; ++i)
    {
        packSumSquares(cache[i], pivot, acc, sq);
    }
    if constexpr (HEAD_FIRST)
    {
        copyAsyncWait();
    }
    for (int p = tid; p < tailPacks; p += step)
    {
        packSumSquares(tail[p], pivot, acc, sq);
    }
    float2 const t = blockSum2(make_float2(acc, sq), buf2);
    float const shift = t.x * inverseCols;
    float const var = fmaxf(t.y * inverseCols - shift * shift, 0.F);
    return RowStats{pivot, shift, rsqrtf(var + eps)};
}

// A pack's first 32 bits (a dependency for copyAsync16).
template <typename P>
__device__ __forceinline__ unsigned packWord(P const& p)
{
    return *reinterpret_cast<unsigned const*>(&p); // (packs are 16-byte aligned)
}

// A cluster's sums (CL > 1, sm_90+): CTA r's thread p sends the CTA's total to CTA p's slot r
// with st.async, which completes on CTA p's mbarrier.  No CTA waits at a cluster barrier, whose
// release is a MEMBAR.GPU: it held every sum until the CTA's stores had drained (measured,
// fp32 8 x 320 x 128 x 128: 0.80 -> 0.83 of the copy, with SiLU 0.77 -> 0.82).  Sums alternate
// between k = 0 and 1, so a slot is written again only after its reader has sent the next sum,
// which the writer waits for; each barrier is armed for its next phase as soon as a phase
// completes, before this CTA sends the sum a peer must see to send again.
template <int CL>
struct ClusterSums
{
    float slot[2][CL];         // slot[k][r]: CTA r's total of sum k
    unsigned long long got[2]; // phase completes when the CL totals of sum k have landed
};

template <int CL>
__device__ __forceinline__ void armClusterSum(ClusterSums<CL>& sums, int k)
{
    asm volatile("mbarrier.arrive.expect_tx.relaxed.cluster.shared::cta.b64 _, [%0], %1;" ::"r"(
                     sharedAddress(&sums.got[k])),
        "r"(static_cast<unsigned>(CL * sizeof(float)))
        : "memory");
}

// Once per CTA, before any sum: the barriers are armed before any peer sends to them.
template <int CL>
__device__ __forceinline__ void clusterSumsInit(ClusterSums<CL>& sums)
{
#if FUSION_GROUPNORM_HAS_CLUSTERS
    if (threadIdx.x == 0)
    {
        mbarrierInit(&sums.got[0], 1);
        mbarrierInit(&sums.got[1], 1);
        armClusterSum(sums, 0);
        armClusterSum(sums, 1);
    }
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
#endif
}

// The sum of v over the CTA (CL == 1) or over the CL CTAs of its cluster, added in rank order
// everywhere, so the cluster's CTAs agree bit for bit.  parity: the row's, for sum k's barrier.
template <int CL>
__device__ __forceinline__ float groupSum(float v, float* buf, ClusterSums<CL>& sums, int k, unsigned parity)
{
    float const mine = blockSum(v, buf);
    if constexpr (CL == 1)
    {
        return mine;
    }
    else
    {
#if FUSION_GROUPNORM_HAS_CLUSTERS
        if (threadIdx.x < CL)
        {
            unsigned const slot = sharedAddress(&sums.slot[k][blockIdx.x % CL]);
            unsigned const bar = sharedAddress(&sums.got[k]);
            unsigned remoteSlot = 0;
            unsigned remoteBar = 0;
            asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remoteSlot) : "r"(slot), "r"(threadIdx.x));
            asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remoteBar) : "r"(bar), "r"(threadIdx.x));
            asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.b32 [%0], %1, [%2];" ::"r"(remoteSlot),
                "r"(__float_as_uint(mine)), "r"(remoteBar)
                : "memory");
        }
        mbarrierWait<true>(&sums.got[k], parity);
        if (threadIdx.x == 0)
        {
            armClusterSum(sums, k);
        }
        float total = 0.F;
#pragma unroll
        for (int r = 0; r < CL; ++r)
        {
            total += sums.slot[k][r];
        }
        return total;
#else
        __trap(); // the launcher runs cluster kernels only from sm_90+ builds
        return mine;
#endif
    }
}

// The group of each row cached in registers: K elements (K / VEC packs) per thread, spread
// over a cluster of CL CTAs (CL == 1: one CTA).  Rows go to clusters, grid-strided; CTA rank r
// of a cluster holds packs r * blockDim + tid + i * CL * blockDim.
template <typename T, int VEC, int K, bool STAGED = false, int CL = 1>
__device__ __forceinline__ void groupNormRegRows(T const* __restrict__ x, T const* __restrict__ gamma,
    T const* __restrict__ beta, T* __restrict__ y, long long rows, int channels, int groups, int spatial, float eps,
    int silu)
{
    static_assert(K % VEC == 0, "K must be a multiple of VEC");
    static_assert(!(STAGED && CL > 1), "staging is for single CTAs");
    constexpr int N = K / VEC;
    using P = Pack<T, VEC>;
    __shared__ float buf[2][32];
    __shared__ ClusterSums<CL> sums; // (CL > 1)
    int const perGroup = channels / groups;
    int const cols = perGroup * spatial; // <= CL * 1024 * K: the launcher checks
    int const nv = cols / VEC;
    int const tid = static_cast<int>(blockIdx.x % CL) * blockDim.x + threadIdx.x;
    int const step = CL * blockDim.x;
    unsigned const uspatial = static_cast<unsigned>(spatial);
    // Packs tid, tid + step, ... below nv are this thread's: the first `mine` of its N slots.
    // (One bound instead of N index compares keeps the predicates out of the register budget.)
    int const mine = tid < nv ? (nv - tid + step - 1) / step : 0;
    bool const packChannel = VEC == 1 || spatial % VEC == 0;
    // STAGED: the row's bytes land in stagedRow (dynamic shared memory, cols * sizeof(T)).
    extern __shared__ __align__(128) unsigned char stagedRow[];
    __shared__ unsigned long long landed;
    unsigned const rowBytes = static_cast<unsigned>(cols) * sizeof(T);
    if constexpr (STAGED)
    {
        if (tid == 0)
        {
            mbarrierInit(&landed, 1);
            if (blockIdx.x < rows)
            {
                bulkLoad(stagedRow, x + static_cast<long long>(blockIdx.x) * cols, rowBytes, &landed);
            }
        }
        __syncthreads();
    }
    if constexpr (CL > 1)
    {
        clusterSumsInit(sums);
    }
    unsigned parity = 0; // the row's: its staged bytes' phase, or its cluster sums'
    for (long long row = blockIdx.x / CL; row < rows; row += gridDim.x / CL)
    {
        P const* xr = reinterpret_cast<P const*>(x + row * cols);
        P* yr = reinterpret_cast<P*>(y + row * cols);
        int const firstChannel = static_cast<int>(row % groups) * perGroup;
        P cache[N];
        float pivot;
        if constexpr (STAGED)
        {
            mbarrierWait(&landed, parity);
            parity ^= 1U;
            P const* sr = reinterpret_cast<P const*>(stagedRow);
#pragma unroll
            for (int i = 0; i < N; ++i)
            {
                if (i < mine)
                {
                    cache[i] = sr[tid + i * step];
                }
            }
            pivot = toFloat(reinterpret_cast<T const*>(stagedRow)[0]);
            __syncthreads(); // every thread has its packs: the buffer takes the next row
            if (tid == 0 && row + gridDim.x < rows)
            {
                bulkLoad(stagedRow, x + (row + gridDim.x) * cols, rowBytes, &landed);
            }
        }
        else
        {
#pragma unroll
            for (int i = 0; i < N; ++i)
            {
                if (i < mine)
                {
                    cache[i] = xr[tid + i * step];
                }
            }
            pivot = toFloat(x[row * cols]); // same address: one broadcast load
        }
        // Valid packs are i < mine: (first, step, nv) = (0, 1, mine) in cachedStats' terms.
        RowStats const s = cachedStats<T, VEC, N, false>(
            cache, pivot, 0, 1, mine, cols, eps,
            [&](float v, int k) { return groupSum<CL>(v, buf[k], sums, k, parity); });
        if constexpr (CL > 1)
        {
            parity ^= 1U;
        }
#pragma unroll
        for (int i = 0; i < N; ++i)
        {
            int const idx = tid + i * step;
            if (i < mine)
            {
                yr[idx] = groupNormPack<T, VEC>(cache[i], static_cast<unsigned>(idx) * VEC, s, gamma + firstChannel,
                    beta + firstChannel, uspatial, packChannel, silu);
            }
        }
        if constexpr (!STAGED && CL == 1)
        {
            // buf is rewritten by the next row (STAGED: after the next row's barrier; CL > 1:
            // after this row's second sum's barrier, passed after reading the first's buf)
            __syncthreads();
        }
    }
}

// Groups past the register cache (the "wide" path): the first N * blockDim packs of a row in
// registers as in the reg path, the rest in dynamic shared memory, so x is still read once.
// Each thread keeps its own tail packs (tid, tid + blockDim, ...), so the shared tail needs no
// barrier: it is per-thread storage that stays on chip.  Rows are grid-strided, and as each
// tail pack's output is made, the pack takes the CTA's next row's (cp.async): on a grid of
// one CTA per SM the SM reads its next group while it writes this one.  AHEAD: the register
// head takes the next row's packs too, as soon as this row's head is written (before the
// tail), else at the top of the next row; its statistics then start on the head while the
// tail lands.  Held across the tail loop, a head of 8 packs spills (6: none in fp32, 12 bytes in
// fp16).  The launcher checks that the tail fits the device's shared memory and that the head
// is full (nv > N * blockDim).
template <typename T, int VEC, int K, bool AHEAD>
__device__ __forceinline__ void groupNormWideRows(T const* __restrict__ x, T const* __restrict__ gamma,
    T const* __restrict__ beta, T* __restrict__ y, long long rows, int channels, int groups, int spatial, float eps,
    int silu)
{
    constexpr int N = K / VEC;
    using P = Pack<T, VEC>;
    static_assert(VEC > 1, "the wide path moves vector packs");
    __shared__ float buf[32];
    __shared__ float2 buf2[32];
    extern __shared__ __align__(16) unsigned char wideTail[];
    P* const tail = reinterpret_cast<P*>(wideTail);
    int const perGroup = channels / groups;
    int const cols = perGroup * spatial;
    int const tid = threadIdx.x;
    int const step = blockDim.x;
    int const head = N * step;
    int const tailPacks = cols / VEC - head;
    unsigned const uspatial = static_cast<unsigned>(spatial);
    bool const packChannel = spatial % VEC == 0;
    float const inverseCols = 1.F / static_cast<float>(cols);
    P cache[N];
    auto const loadHead = [&](P const* xr)
    {
#pragma unroll
        for (int i = 0; i < N; ++i)
        {
            cache[i] = xr[tid + i * step];
        }
    };
    if (blockIdx.x < rows)
    {
        P const* first = reinterpret_cast<P const*>(x + static_cast<long long>(blockIdx.x) * cols);
        for (int p = tid; p < tailPacks; p += step)
        {
            copyAsync16(tail + p, first + head + p, 0U);
        }
        if constexpr (AHEAD)
        {
            loadHead(first);
        }
    }
    for (long long row = blockIdx.x; row < rows; row += gridDim.x)
    {
        GroupRow<T, VEC> const r(x, y, gamma, beta, row, cols, groups, perGroup);
        if constexpr (!AHEAD)
        {
            loadHead(r.x);
        }
        RowStats const s
            = onePassStats<T, VEC, N, AHEAD>(cache, tail, tid, step, tailPacks, inverseCols, eps, buf, buf2);
#pragma unroll
        for (int i = 0; i < N; ++i)
        {
            int const idx = tid + i * step;
            r.y[idx] = groupNormPack<T, VEC>(cache[i], static_cast<unsigned>(idx) * VEC, s, r.gamma, r.beta, uspatial,
                packChannel, silu);
        }
        P const* next = reinterpret_cast<P const*>(x + (row + gridDim.x) * cols);
        bool const more = row + gridDim.x < rows;
        if (AHEAD && more)
        {
            loadHead(next);
        }
        for (int p = tid; p < tailPacks; p += step)
        {
            int const idx = head + p;
            P const out = groupNormPack<T, VEC>(tail[p], static_cast<unsigned>(idx) * VEC, s, r.gamma, r.beta,
                uspatial, packChannel, silu);
            if (more)
            {
                copyAsync16(tail + p, next + idx, packWord(out));
            }
            r.y[idx] = out;
        }
        __syncthreads(); // buf is rewritten by the next row
    }
}

// Groups too large for the register cache (or the wide path's shared tail): reads each group
// three times, in VEC packs (16-byte aligned rows) or scalars; passes 2 and 3 hit L2 where
// the CTAs' groups fit it.
template <typename T, int VEC>
__device__ __forceinline__ void groupNormLoopRows(T const* __restrict__ x, T const* __restrict__ gamma,
    T const* __restrict__ beta, T* __restrict__ y, long long rows, int channels, int groups, long long spatial,
    float eps, int silu)
{
    using P = Pack<T, VEC>;
    __shared__ float buf[2][32];
    int const perGroup = channels / groups;
    long long const cols = static_cast<long long>(perGroup) * spatial;
    long long const nv = cols / VEC;
    float const inverseCols = 1.F / static_cast<float>(cols);
    for (long long row = blockIdx.x; row < rows; row += gridDim.x)
    {
        GroupRow<T, VEC> const r(x, y, gamma, beta, row, cols, groups, perGroup);
        float const pivot = toFloat(x[row * cols]);
        float s = 0.F;
#pragma unroll 4
        for (long long i = threadIdx.x; i < nv; i += blockDim.x)
        {
            s += packSum(r.x[i], pivot);
        }
        float const shift = blockSum(s, buf[0]) * inverseCols;
        float q = 0.F;
#pragma unroll 4
        for (long long i = threadIdx.x; i < nv; i += blockDim.x)
        {
            q += packSquares(r.x[i], pivot, shift);
        }
        RowStats const st{pivot, shift, rsqrtf(blockSum(q, buf[1]) * inverseCols + eps)};
#pragma unroll 2
        for (long long i = threadIdx.x; i < nv; i += blockDim.x)
        {
            P const in = r.x[i];
            P out;
#pragma unroll
            for (int e = 0; e < VEC; ++e)
            {
                int const c = static_cast<int>((i * VEC + e) / spatial);
                float const v = ChannelAffine<T>(st, toFloat(r.gamma[c]), toFloat(r.beta[c]))(toFloat(in.v[e]), st);
                out.v[e] = fromFloat<T>(silu ? fusion_kernels::silu(v) : v);
            }
            r.y[i] = out;
        }
        __syncthreads(); // the next row writes buf again
    }
}

} // namespace fusion_kernels

// ---------------------------------------------------------------------------------------
// extern "C" entry points, all with the signature
//   (x, gamma, beta, y, rows = N * G, channels, groups, spatial, eps, silu):
//   fusion_groupnorm_reg_<dtype>_v<VEC>_k<K>      register path, K elements per thread
//   fusion_groupnorm_staged_<dtype>_v<VEC>_k<K>   the same, rows staged (dynamic shared memory:
//                                                 cols * sizeof(T) bytes; sm_90+)
//   fusion_groupnorm_wide_<dtype>_v<VEC>_k<K>     register head, shared tail (1024 threads; dynamic
//                                                 shared memory: cols * sizeof(T) - 1024 * K * sizeof(T))
//   fusion_groupnorm_cluster_<dtype>_v<VEC>_k<K>_c<CL>
//                                                 register path over a cluster of CL CTAs (sm_90+;
//                                                 the grid counts CTAs, CL per group)
//   fusion_groupnorm_loop_<dtype>_v<VEC>          three-pass path, any cols
// The X-macros list every instantiation once; groupNormKernel.cu defines them, the launcher
// (groupNormLaunch.cu) declares them and builds its table from the same lists.
//
// K, the elements a thread caches, is listed per pack width so that each list runs over the same
// packs per thread (K / VEC = 1, 2, 4, 6, 8, 10): fp16 packs hold two elements per register, so
// its K goes twice as far on the same registers.  Policy (groupNormLaunch.cu): the smallest K
// whose CTA has at most FUSION_GROUPNORM_TARGET_THREADS threads, else the largest K that fits
// 1024 threads, else the loop path.  Small CTAs matter more than few packs: several CTAs share
// an SM, so one CTA's loads overlap another's reductions and stores.  Measured on the H100
// (bench/results/kernels_groupnorm_sweep.json, x >= 64 MB): 640-1024-thread CTAs, one or two per
// SM, reach 0.65-0.91 of the same-bytes copy, 128-512-thread ones 0.84-0.96.  (One block-wide
// merge of (count, mean, M2) instead of the two sums, one barrier a row instead of three, was
// 1-10% slower there: its merges cost more than the barriers.)
// Register budget: __launch_bounds__(1024, 1) gives a thread 64 registers; ptxas -v (CUDA 13.0,
// sm_90) shows 8-24 bytes of spills at 8-10 packs (fp16 K = 64 and 80, fp32 K = 40: 32-40
// registers of cache), none below; scalar packs spill from K = 32 (each element's own
// address and channel), hence K <= 24 there.  fp16 K = 80 holds the largest SD-UNet group (320
// channels / 32 groups x 64 x 64 = 40960) in 512 threads; fp32 needs 1024 there.  Up to 2 packs
// per thread ask for 2 CTAs per SM (<= 32 registers, no spills; scalar K = 8 would spill), as
// does the scalar loop path (the vector one takes 64 registers: 32 spill its packs).  Larger
// groups take the wide path where it fits, else a cluster (sm_90+), else the loop path.
// Staging: where the pick's CTA has more than FUSION_GROUPNORM_STAGE_THREADS threads (it fills
// an SM: 64 registers a thread), on sm_90+ with 16-byte packs, the staged kernel runs on a grid
// of one CTA per SM instead.  Measured (kernels_groupnorm_sweep.json): fp32 16x320x64x64 0.89 ->
// 0.93-0.94 of the same-bytes copy, with SiLU 0.86 -> 0.90-0.91; 2-4 CTAs an SM staged were
// 1-15% slower than unstaged, and fp16 K = 80 in 1024 threads (groups of 81920, SDXL's 640 x
// 64 x 64) 0.834-0.844 against 0.856 (its staged build spills), so only fp32 K = 40 stages.
// Pairs: fp16 there instead takes the wide kernel in FUSION_GROUPNORM_PAIR_THREADS-thread CTAs,
// two an SM where two tails fit the opt-in, one CTA a group: one CTA's reductions and SiLU
// overlap the other's loads, and as the hardware starts each CTA when another ends, the SM's two
// drift apart in phase.  K = 64, or K = 48 with its statistics starting on the head where the
// groups outnumber the pairs the SMs hold.  Measured (the sweep's ab_wide512): with SiLU
// 0.69-0.75 -> 0.73-0.85 of the copy (groups of 45056-81920), without it 0.82-0.85 -> 0.82-0.86
// (-1.4 to +4.9 points); at 16 / 32 x 640 x 64 x 64, one CTA a group against two an SM taking
// rows in turn 0.89 -> 0.90 and 0.88 -> 0.93, with SiLU 0.84 -> 0.84 and 0.87 -> 0.89
// (ab_pair_grids); K = 48 against K = 64 +0.5 to +1.5 on 384-512 groups, -2 with SiLU on 128-256
// (one wave; ab_pair_k).
// Wide: groups the registers cannot hold (fp32 > 40960, fp16 > 81920 elements) with 16-byte packs,
// where the tail fits the device's shared memory (H100: fp32 <= 90624, fp16 <= 181248): K = 32 /
// 64, whose builds barely spill (K = 40 / 80 spill ~100 bytes and measured 5-7% slower).  CTAs
// that take rows in turn (one an SM, more rows than SMs) load the next row's head ahead where its
// tail fits (K = 24 / 48, H100: groups <= 82432 / 164864), reducing it while the tail still lands:
// fp32 8 x 640 x 64 x 64 0.87 -> 0.90 of the copy, with SiLU 0.86 -> 0.88; fp16 8 x 320 x 128 x
// 128 0.82 -> 0.84-0.85, with SiLU 0.79 -> 0.81 (ab_head_ahead, ab_head_first; K = 32 / 64 ahead
// spill 64 / 176 bytes and measured 0.82 / 0.69).  Measured on SDXL's groups (x >= 40 MB): fp32
// 640 x 64 x 64 0.34 -> 0.79-0.80 of the copy (0.93x -> 2.1x torch), fp16 320 x 128 x 128 0.22 ->
// 0.72-0.75 (1.0x -> 3.4x torch); with the next group's tail loaded as each CTA writes (one CTA an
// SM), 0.83 and 0.74-0.79 (ab_next_row: the same for the register head measured 0.56-0.71 where it
// was 0.82-0.92, so only the shared tail is loaded ahead); with one-pass statistics, 0.85 and
// 0.78-0.82 (ab_one_pass, the same call: +1.5 to +7 points on every wide and pair launch).
// Clusters: groups past the wide path too (fp32 > 90624, fp16 > 181248 elements on the H100), on
// sm_90+ with 16-byte packs, spread over a cluster of 8 CTAs (the portable maximum) of K = 40 / 80
// each, so x is still read once up to 8 x 1024 x K; two st.async exchanges a row.  Measured
// (kernels_groupnorm_sweep.json): fp32 320 x 128 x 128 0.42 (loop) -> 0.79 of the copy in
// 512-thread CTAs (0.75 in 4 CTAs of 1024) with a cluster barrier a sum, 0.83 with st.async
// (ab_cluster_sums; fp16 4 x 320 x 256 x 256 0.65 -> 0.70).  Where one CTA or the wide path holds
// the group, clusters (of 2, 4 or 8) were slower: fp32 40960 0.73-0.85 against 0.86-0.93 staged;
// fp16 640 x 64 x 64 0.64-0.78 against 0.72-0.85 in one CTA of 1024; the wide path's groups
// 0.64-0.80 against 0.73-0.81.
// FUSION_GROUPNORM_STATIC_SMEM: what the opt-in must also leave for the kernels' static shared
// memory (buf, the barrier).
#define FUSION_GROUPNORM_THREADS 1024
#define FUSION_GROUPNORM_TARGET_THREADS 256
#define FUSION_GROUPNORM_STAGE_THREADS 512
#define FUSION_GROUPNORM_PAIR_THREADS 512
#define FUSION_GROUPNORM_STATIC_SMEM 1024
#define FUSION_GROUPNORM_MIN_BLOCKS(VEC, K) ((K) <= 2 * (VEC) && (VEC) > 1 ? 2 : 1)

#define FUSION_GROUPNORM_FOR_K_SCALAR(X, TN, T) X(TN, T, 1, 8) X(TN, T, 1, 16) X(TN, T, 1, 24)
#define FUSION_GROUPNORM_FOR_K_V4(X, TN, T)                                                                        \
    X(TN, T, 4, 4) X(TN, T, 4, 8) X(TN, T, 4, 16) X(TN, T, 4, 24) X(TN, T, 4, 32) X(TN, T, 4, 40)
#define FUSION_GROUPNORM_FOR_K_V8(X, TN, T)                                                                        \
    X(TN, T, 8, 8) X(TN, T, 8, 16) X(TN, T, 8, 32) X(TN, T, 8, 48) X(TN, T, 8, 64) X(TN, T, 8, 80)

// XK(tn, T, vec, k) for the register path, XL(tn, T, vec) for the loop path.
#define FUSION_GROUPNORM_KERNELS(XK, XL)                                                                           \
    FUSION_GROUPNORM_FOR_K_V4(XK, f32, float)                                                                      \
    FUSION_GROUPNORM_FOR_K_SCALAR(XK, f32, float)                                                                  \
    FUSION_GROUPNORM_FOR_K_V8(XK, f16, __half)                                                                     \
    FUSION_GROUPNORM_FOR_K_SCALAR(XK, f16, __half)                                                                 \
    XL(f32, float, 1) XL(f32, float, 4) XL(f16, __half, 1) XL(f16, __half, 8)

// XS(tn, T, vec, k) for the staged kernels, XW(tn, T, vec, k, ahead) for the wide ones, those
// loading the next head ahead (and reducing their head first) first: the launcher's preference
// where CTAs take rows in turn, or where pairs start as others end.
#define FUSION_GROUPNORM_STAGED_KERNELS(XS) XS(f32, float, 4, 40)
#define FUSION_GROUPNORM_WIDE_KERNELS(XW)                                                                          \
    XW(f32, float, 4, 24, true) XW(f32, float, 4, 32, false)                                                       \
    XW(f16, __half, 8, 48, true) XW(f16, __half, 8, 64, false)
// XC(tn, T, vec, k, cl) for the cluster kernels.
#define FUSION_GROUPNORM_CLUSTER_KERNELS(XC) XC(f32, float, 4, 40, 8) XC(f16, __half, 8, 80, 8)

#define FUSION_GROUPNORM_PARAMS(T)                                                                                 \
    (T const* __restrict__ x, T const* __restrict__ gamma, T const* __restrict__ beta, T* __restrict__ y,          \
        long long rows, int channels, int groups, long long spatial, float eps, int silu)

#define FUSION_GROUPNORM_DEFINE_K(TN, T, VEC, K)                                                                   \
    extern "C" __global__ void __launch_bounds__(FUSION_GROUPNORM_THREADS, FUSION_GROUPNORM_MIN_BLOCKS(VEC, K))    \
        fusion_groupnorm_reg_##TN##_v##VEC##_k##K FUSION_GROUPNORM_PARAMS(T)                                       \
    {                                                                                                              \
        fusion_kernels::groupNormRegRows<T, VEC, K>(                                                               \
            x, gamma, beta, y, rows, channels, groups, static_cast<int>(spatial), eps, silu);                      \
    }

#define FUSION_GROUPNORM_DEFINE_STAGED(TN, T, VEC, K)                                                              \
    extern "C" __global__ void __launch_bounds__(FUSION_GROUPNORM_THREADS, FUSION_GROUPNORM_MIN_BLOCKS(VEC, K))    \
        fusion_groupnorm_staged_##TN##_v##VEC##_k##K FUSION_GROUPNORM_PARAMS(T)                                    \
    {                                                                                                              \
        fusion_kernels::groupNormRegRows<T, VEC, K, true>(                                                         \
            x, gamma, beta, y, rows, channels, groups, static_cast<int>(spatial), eps, silu);                      \
    }

// The plugin library sets a launch's cluster size at run time (cudaLaunchKernelEx): its builds
// for older GPUs cannot carry the attribute.  CuPy cannot launch with one, so NVRTC builds for
// sm_90+ (fusion.plugins.library.load_kernel_module) define FUSION_GROUPNORM_STATIC_CLUSTERS.
#ifdef FUSION_GROUPNORM_STATIC_CLUSTERS
#define FUSION_GROUPNORM_CLUSTER_DIMS(CL) __cluster_dims__(CL, 1, 1)
#else
#define FUSION_GROUPNORM_CLUSTER_DIMS(CL)
#endif

#define FUSION_GROUPNORM_DEFINE_CLUSTER(TN, T, VEC, K, CL)                                                         \
    extern "C" __global__ void __launch_bounds__(FUSION_GROUPNORM_THREADS, 1) FUSION_GROUPNORM_CLUSTER_DIMS(CL)    \
        fusion_groupnorm_cluster_##TN##_v##VEC##_k##K##_c##CL FUSION_GROUPNORM_PARAMS(T)                           \
    {                                                                                                              \
        fusion_kernels::groupNormRegRows<T, VEC, K, false, CL>(                                                    \
            x, gamma, beta, y, rows, channels, groups, static_cast<int>(spatial), eps, silu);                      \
    }

#define FUSION_GROUPNORM_DEFINE_WIDE(TN, T, VEC, K, AHEAD)                                                         \
    extern "C" __global__ void __launch_bounds__(FUSION_GROUPNORM_THREADS, 1)                                     \
        fusion_groupnorm_wide_##TN##_v##VEC##_k##K FUSION_GROUPNORM_PARAMS(T)                                      \
    {                                                                                                              \
        fusion_kernels::groupNormWideRows<T, VEC, K, AHEAD>(                                                       \
            x, gamma, beta, y, rows, channels, groups, static_cast<int>(spatial), eps, silu);                      \
    }

#define FUSION_GROUPNORM_DEFINE_LOOP(TN, T, VEC)                                                                   \
    extern "C" __global__ void __launch_bounds__(FUSION_GROUPNORM_THREADS, (VEC) > 1 ? 1 : 2)                     \
        fusion_groupnorm_loop_##TN##_v##VEC FUSION_GROUPNORM_PARAMS(T)                                             \
    {                                                                                                              \
        fusion_kernels::groupNormLoopRows<T, VEC>(x, gamma, beta, y, rows, channels, groups, spatial, eps, silu); \
    }
