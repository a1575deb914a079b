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
//   stream - fp32 groups past the registers, fp16 ones past the wide path (sm_90+, VEC packs, a
//            workspace): chunks of a group on many CTAs, each chunk's mean and M2 through global
//            memory, the chunk held in shared memory meanwhile; x still read once.
//   loop   - any cols: three passes over the group (mean, squared deviations, normalize), in
//            VEC packs or scalars; passes 2 and 3 re-read it (from L2 where it fits).
#pragma once

#include "common/bulkCopy.cuh"
#include "common/normKernels.cuh"

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

// A row's element i's channel, i / spatial, without a division a pack: q = umulhi(i, m) with
// m = floor((2^32 - 1) / spatial) + 1 >= 2^32 / spatial is i / spatial or, for i < 2^31, one
// more, which one compare corrects.  The division's dozen instructions a pack cost the register
// and pair launches 0.6-2 points of the copy, most with SiLU (the sweep's ab_diet3).
// spatial >= 2; the rows' cols < 2^31 (the launcher checks).
struct SpatialMultiply
{
    unsigned n;
    unsigned m;

    __device__ __forceinline__ explicit SpatialMultiply(int spatial)
        : n(static_cast<unsigned>(spatial))
        , m(0xFFFFFFFFU / static_cast<unsigned>(spatial) + 1U)
    {
    }

    __device__ __forceinline__ unsigned channel(unsigned i) const
    {
        unsigned const q = __umulhi(i, m);
        return q * n > i ? q - 1U : q;
    }
};

// The same by division: the stream kernel, where the multiply measured 0.6-1.2 points slower
// (the sweep's ab_diet2).
struct SpatialDivide
{
    unsigned n;

    __device__ __forceinline__ explicit SpatialDivide(int spatial)
        : n(static_cast<unsigned>(spatial))
    {
    }

    __device__ __forceinline__ unsigned channel(unsigned i) const
    {
        return i / n;
    }
};

// The output pack of elements first .. first + VEC - 1 of a row.  A pack's elements share one
// channel when a channel's elements are whole packs (packChannel), else span two where a
// channel has at least VEC elements (one division a pack, not one an element: SD at 720 x 720,
// a 90 x 90 latent, has fp16 packs across channels), else more.
template <typename T, int VEC, typename Spatial>
__device__ __forceinline__ Pack<T, VEC> groupNormPack(Pack<T, VEC> const& in, unsigned first, RowStats const& s,
    T const* gr, T const* br, Spatial const& sp, bool packChannel, int silu)
{
    unsigned const spatial = sp.n;
    float v[VEC];
    if (packChannel)
    {
        unsigned const c = VEC > 1 ? sp.channel(first) : first / spatial; // (VEC 1: spatial may be 1)
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
// reduces its head while its tail still lands (fp16 K = 48 at 8 x 320 x 128 x 128: 0.82 ->
// 0.84-0.85 of the copy; fp32 K = 24, since replaced by the stream path, 0.87 -> 0.90 at 8 x 640
// x 64 x 64, the bound measured with no statistics at all; on the K = 64 kernel, which asks for
// its head at the row's top, -1 to +0.5 points: the sweep's ab_head_first).
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

// The group of each row cached in registers: K elements (K / VEC packs) per thread, rows
// grid-strided; thread tid holds packs tid + i * blockDim.
template <typename T, int VEC, int K, bool STAGED = false>
__device__ __forceinline__ void groupNormRegRows(T const* __restrict__ x, T const* __restrict__ gamma,
    T const* __restrict__ beta, T* __restrict__ y, long long rows, int channels, int groups, int spatial, float eps,
    int silu)
{
    static_assert(K % VEC == 0, "K must be a multiple of VEC");
    constexpr int N = K / VEC;
    using P = Pack<T, VEC>;
    __shared__ float buf[2][32];
    int const perGroup = channels / groups;
    int const cols = perGroup * spatial; // <= 1024 * K: the launcher checks
    int const nv = cols / VEC;
    int const tid = threadIdx.x;
    int const step = blockDim.x;
    SpatialMultiply const sp(spatial);
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
    unsigned parity = 0; // the row's staged bytes' phase
    for (long long row = blockIdx.x; row < rows; row += gridDim.x)
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
            [&](float v, int k) { return blockSum(v, buf[k]); });
#pragma unroll
        for (int i = 0; i < N; ++i)
        {
            int const idx = tid + i * step;
            if (i < mine)
            {
                yr[idx] = groupNormPack<T, VEC>(cache[i], static_cast<unsigned>(idx) * VEC, s, gamma + firstChannel,
                    beta + firstChannel, sp, packChannel, silu);
            }
        }
        if constexpr (!STAGED)
        {
            // buf is rewritten by the next row (STAGED: after the next row's barrier)
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
    SpatialMultiply const sp(spatial);
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
            r.y[idx] = groupNormPack<T, VEC>(cache[i], static_cast<unsigned>(idx) * VEC, s, r.gamma, r.beta, sp,
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
                sp, packChannel, silu);
            if (more)
            {
                copyAsync16(tail + p, next + idx, packWord(out));
            }
            r.y[idx] = out;
        }
        __syncthreads(); // buf is rewritten by the next row
    }
}

// The stream path's shape: CTAs of STREAM_THREADS, STREAM_CTAS of them an SM (its launch
// bounds: 56 registers; at 48, 10 CTAs an SM, fp32 spills 24 bytes and measured 1.5-4 points
// slower, fp16 148 bytes), each chunk STREAM_PACKS packs a thread (8 KB of fp32 or fp16); the
// launcher gives each chunk a 64-bit word of workspace.  A CTA polls a missing partial
// STREAM_PATIENCE times before computing it itself.
#define FUSION_GROUPNORM_STREAM_THREADS 128
#define FUSION_GROUPNORM_STREAM_CTAS 9
#define FUSION_GROUPNORM_STREAM_PACKS 4
#define FUSION_GROUPNORM_STREAM_PATIENCE 64

// A chunk's statistics as one 64-bit word, (mean - P, M2) with P its row's first element: a
// mean itself, rounded to fp32, is off by up to 2^-24 |mean|, which for a group of mean 1000 and
// spread 0.1 moves every output by 3e-4; its distance from a value of the group keeps the
// spread's precision (an outlier as P rounds each chunk's distance once, by 2^-24 |P - mean|,
// and the merge works about chunk 0's distance, so the rounding is not summed up).  One relaxed
// store, so a reader sees both halves or neither; unwritten words are all ones (the launcher
// fills the workspace with 0xFF), so a value with all bits set (a NaN) is stored as another NaN.
constexpr unsigned long long kNoMoments = ~0ULL;

__device__ __forceinline__ void storeMoments(unsigned long long* slot, float dev, float m2)
{
    unsigned const lo = __float_as_uint(dev);
    unsigned long long const v
        = (static_cast<unsigned long long>(__float_as_uint(m2)) << 32) | (lo == ~0U ? 0x7FFFFFFFU : lo);
    asm volatile("st.relaxed.gpu.global.u64 [%0], %1;" ::"l"(slot), "l"(v) : "memory");
}

__device__ __forceinline__ unsigned long long loadMoments(unsigned long long const* slot)
{
    unsigned long long v;
    asm volatile("ld.relaxed.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(slot) : "memory");
    return v;
}

__device__ __forceinline__ float momentsDev(unsigned long long v)
{
    return __uint_as_float(static_cast<unsigned>(v));
}

__device__ __forceinline__ float momentsM2(unsigned long long v)
{
    return __uint_as_float(static_cast<unsigned>(v >> 32));
}

// A chunk's packs [start, end) of its row: thread tid's are start + tid + j * blockDim, pack(j)
// gives them.  One pass, as the wide path's onePassStats: sums and squares of the deviations
// from a pivot q near the chunk's mean, the mean of the threads' first packs (a fraction f >= 1/4
// of the chunk, so (mean - q)^2 <= var (1 - f) / f whatever the data); returns (mean - P, M2)
// with P the row's first element.  The owner and a CTA that computes a missing chunk run this
// same arithmetic, so they write the same bits.
template <typename T, int VEC, int KP, typename PackAt>
__device__ __forceinline__ float2 chunkMoments(
    PackAt pack, int start, int end, float rowFirst, float* buf, float2* buf2)
{
    int const first = start + static_cast<int>(threadIdx.x);
    int const heads = min(static_cast<int>(blockDim.x), end - start); // threads with a pack
    float const q = blockSum(first < end ? packSum(pack(0), 0.F) : 0.F, buf) / static_cast<float>(heads * VEC);
    float acc = 0.F;
    float sq = 0.F;
#pragma unroll
    for (int j = 0; j < KP; ++j)
    {
        if (first + j * static_cast<int>(blockDim.x) < end)
        {
            packSumSquares(pack(j), q, acc, sq);
        }
    }
    float2 const t = blockSum2(make_float2(acc, sq), buf2);
    float const n = static_cast<float>((end - start) * VEC);
    float const shift = t.x / n;
    return make_float2((q - rowFirst) + shift, fmaxf(t.y - t.x * shift, 0.F));
}

// Warp 0: each lane's partials lane + 32 r (r < MS) of a group's `chunks`, kNoMoments past them.
template <int MS>
__device__ __forceinline__ void readMoments(unsigned long long (&pv)[MS], unsigned long long const* parts, int chunks)
{
    int const lane = threadIdx.x & 31;
#pragma unroll
    for (int r = 0; r < MS; ++r)
    {
        pv[r] = lane + 32 * r < chunks ? loadMoments(parts + lane + 32 * r) : kNoMoments;
    }
}

// Warp 0: whether all `chunks` partials of a group are written, polling up to `patience` more
// times.  pv holds lane + 32 r's, read ahead by the caller (later ones are read here).
template <int MS>
__device__ __forceinline__ bool pollMoments(
    unsigned long long (&pv)[MS], unsigned long long const* parts, int chunks, int patience)
{
    int const lane = threadIdx.x & 31;
    for (int tries = 0;; ++tries)
    {
        bool ok = true;
#pragma unroll
        for (int r = 0; r < MS; ++r)
        {
            ok = ok && (lane + 32 * r >= chunks || pv[r] != kNoMoments);
        }
        for (int i = lane + 32 * MS; i < chunks; i += 32)
        {
            ok = ok && loadMoments(parts + i) != kNoMoments;
        }
        if (__all_sync(0xFFFFFFFFU, ok))
        {
            return true;
        }
        if (tries >= patience)
        {
            return false;
        }
        __nanosleep(64);
        readMoments(pv, parts, chunks);
    }
}

// Warp 0: the group's statistics from its chunks' partials d_i = m_i - P (P the row's first
// element, `pivot`), merged about chunk 0's (Chan: shift = sum n_i (d_i - d_0) / cols, M2 = sum
// M2_i + n_i (d_i - d_0 - shift)^2; near the mean, so an outlier as P rounds nothing that the sum
// amplifies), in the same order in every CTA, so every chunk of a group is written with the same
// statistics.  The mean, P + d_0 + shift, is handed on as the fp32 value nearest it and the
// exact residual (TwoSum), so x - mean stays exact whatever P.
template <int MS>
__device__ __forceinline__ RowStats mergeMoments(unsigned long long const (&pv)[MS],
    unsigned long long const* parts, int chunks, long long chunkElems, long long cols, float pivot, float eps)
{
    int const lane = threadIdx.x & 31;
    auto count = [&](int i) { return static_cast<float>(min(chunkElems, cols - i * chunkElems)); };
    float const d0 = __shfl_sync(0xFFFFFFFFU, momentsDev(pv[0]), 0);
    float a = 0.F;
#pragma unroll
    for (int r = 0; r < MS; ++r)
    {
        if (lane + 32 * r < chunks)
        {
            a += count(lane + 32 * r) * (momentsDev(pv[r]) - d0);
        }
    }
    for (int i = lane + 32 * MS; i < chunks; i += 32)
    {
        a += count(i) * (momentsDev(loadMoments(parts + i)) - d0);
    }
    float const shift = warpSum(a) / static_cast<float>(cols);
    float q = 0.F;
#pragma unroll
    for (int r = 0; r < MS; ++r)
    {
        if (lane + 32 * r < chunks)
        {
            float const d = (momentsDev(pv[r]) - d0) - shift;
            q += momentsM2(pv[r]) + count(lane + 32 * r) * d * d;
        }
    }
    for (int i = lane + 32 * MS; i < chunks; i += 32)
    {
        unsigned long long const v = loadMoments(parts + i);
        float const d = (momentsDev(v) - d0) - shift;
        q += momentsM2(v) + count(i) * d * d;
    }
    float const var = fmaxf(warpSum(q) / static_cast<float>(cols), 0.F);
    auto twoSum = [](float u, float v, float& err) {
        float const s = u + v;
        float const back = s - u;
        err = (u - (s - back)) + (v - back);
        return s;
    };
    float e0 = 0.F;
    float e1 = 0.F;
    float const c0 = twoSum(pivot, d0, e0);          // chunk 0's mean, c0 + e0
    float const mean = twoSum(c0, shift + e0, e1);   // + the shift
    return RowStats{mean, e1, rsqrtf(var + eps)};
}

// A CTA's rare path: the partials of row x's chunks still unwritten, computed here with their
// owners' arithmetic.
template <typename T, int VEC, int KP>
__device__ __forceinline__ void missingMoments(T const* x, int rowPacks, int chunks, unsigned long long* parts,
    float rowFirst, float* buf, float2* buf2, int* gap)
{
    using P = Pack<T, VEC>;
    int const chunkPacks = KP * static_cast<int>(blockDim.x);
    for (int i = 0; i < chunks; ++i)
    {
        if (threadIdx.x == 0)
        {
            *gap = loadMoments(parts + i) == kNoMoments;
        }
        __syncthreads();
        if (*gap)
        {
            int const start = i * chunkPacks;
            int const end = min(rowPacks, start + chunkPacks);
            P const* xr = reinterpret_cast<P const*>(x) + start + threadIdx.x;
            float2 const m = chunkMoments<T, VEC, KP>(
                [&](int j) { return xr[j * static_cast<int>(blockDim.x)]; }, start, end, rowFirst, buf, buf2);
            if (threadIdx.x == 0)
            {
                storeMoments(parts + i, m.x, m.y);
            }
        }
        __syncthreads();
    }
}

// Groups past the wide path (the "stream" path): each group is cut into chunks of KP packs a
// thread, which the CTAs take in turn (chunk t at the CTA's step t / gridDim).  A step (A)
// reduces the CTA's chunk from registers to its (mean - pivot, M2), published to partials[t],
// and moves the packs to shared memory, each thread its own; the next chunk's loads are issued;
// then (B) the previous step's chunk is written: warp 0 merges its group's partials, and the CTA
// writes y from shared memory.  So x is read once, from HBM, and every SM reads and writes all
// the time, like a copy; the partials B needs were published a step earlier, and warp 0 asks for
// them at the step's top.  No CTA depends on another being resident (a concurrent kernel may
// hold the SMs): a partial still missing after `patience` polls is computed by the waiting CTA
// itself from x, with the owner's arithmetic, so it writes the same bits.  Measured (the sweep's
// ab_stream, same calls): fp32 8 x 320 x 128 x 128 0.83 -> 0.93 of the copy (a cluster of 8
// before), with SiLU 0.82 -> 0.91; with 2-4 CTAs an SM, 16-32 KB chunks, the chunk re-read from
// L2 instead of held, or no barrier a step (every warp merging the partials itself) 0.2-0.86;
// with each chunk's first element read again for the merge (in double) 0.79-0.83, with the
// row's median of three elements as pivot, loaded where used, 0.86-0.90.
template <typename T, int VEC>
__device__ __forceinline__ void groupNormStreamRows(T const* __restrict__ x, T const* __restrict__ gamma,
    T const* __restrict__ beta, T* __restrict__ y, long long rows, int channels, int groups, int spatial,
    float eps, int silu, unsigned long long* __restrict__ partials, int patience)
{
    constexpr int KP = FUSION_GROUPNORM_STREAM_PACKS;
    constexpr int MS = 3; // partials warp 0's lanes read ahead: groups of <= 96 chunks
    using P = Pack<T, VEC>;
    extern __shared__ __align__(16) unsigned char streamStash[]; // [2][KP * blockDim] packs
    __shared__ float buf[32];   // the chunk's pivot sum
    __shared__ float2 buf2[32]; // its sums and squares
    __shared__ float4 stat[2];
    __shared__ int helping;
    __shared__ int gap;
    P* const stash = reinterpret_cast<P*>(streamStash);
    int const perGroup = channels / groups;
    long long const cols = static_cast<long long>(perGroup) * spatial;
    int const rowPacks = static_cast<int>(cols / VEC);
    int const chunkPacks = KP * static_cast<int>(blockDim.x);
    int const chunks = (rowPacks + chunkPacks - 1) / chunkPacks; // a row's
    int const total = static_cast<int>(rows) * chunks; // < 2^31: the launcher checks
    int const grid = gridDim.x;
    int const tid = threadIdx.x;
    bool const packChannel = spatial % VEC == 0;
    auto bounds = [&](int t, int& row, int& start, int& end) {
        row = t / chunks;
        start = static_cast<int>(t - row * chunks) * chunkPacks;
        end = min(rowPacks, start + chunkPacks);
    };

    P cache[KP];
    float first = 0.F;  // the chunk's row's first element (its chunks' pivot)
    float firstB = 0.F; // the previous chunk's row's
    auto load = [&](int t) {
        if (t < total)
        {
            int row;
            int start, end;
            bounds(t, row, start, end);
            T const* xr = x + row * cols + static_cast<long long>(start) * VEC;
#pragma unroll
            for (int j = 0; j < KP; ++j)
            {
                int const p = tid + j * static_cast<int>(blockDim.x);
                if (start + p < end)
                {
                    cache[j] = reinterpret_cast<P const*>(xr)[p];
                }
            }
            first = toFloat(x[row * cols]);
        }
    };
    load(blockIdx.x);
    for (int k = 0;; ++k)
    {
        int const t = static_cast<int>(blockIdx.x) + k * grid;
        int const tb = t - grid; // the chunk this step writes: the CTA's previous one
        if (tb >= total)
        {
            break;
        }
        int rowB = 0;
        int startB = 0;
        int endB = 0;
        unsigned long long* parts = partials; // the group's partials
        unsigned long long pv[MS];
        if (tb >= 0)
        {
            bounds(tb, rowB, startB, endB);
            parts = partials + rowB * chunks;
            if (tid < 32)
            {
                readMoments(pv, parts, chunks);
            }
        }
        P* const mine = stash + (k & 1) * chunkPacks;
        if (t < total)
        {
            int row;
            int start, end;
            bounds(t, row, start, end);
            float2 const m
                = chunkMoments<T, VEC, KP>([&](int j) { return cache[j]; }, start, end, first, buf, buf2);
#pragma unroll
            for (int j = 0; j < KP; ++j)
            {
                if (start + tid + j * static_cast<int>(blockDim.x) < end)
                {
                    mine[tid + j * blockDim.x] = cache[j];
                }
            }
            if (tid == 0)
            {
                storeMoments(partials + t, m.x, m.y);
            }
        }
        float const pivotB = firstB; // (the chunk B writes is the one A reduced a step ago)
        firstB = first;
        if (tb < 0)
        {
            load(t + grid);
            continue;
        }
        // The previous chunk's group: its partials ready?  (Before the next loads, so that the
        // rare path finds the registers free.)
        if (tid < 32)
        {
            bool const ready = pollMoments<MS>(pv, parts, chunks, patience);
            if (tid == 0)
            {
                helping = !ready;
            }
        }
        __syncthreads();
        if (helping)
        {
            missingMoments<T, VEC, KP>(x + rowB * cols, rowPacks, chunks, parts, pivotB, buf, buf2, &gap);
            if (tid < 32)
            {
                readMoments(pv, parts, chunks);
            }
        }
        load(t + grid); // the next chunk's loads fly while this step writes
        if (tid < 32)
        {
            RowStats const s = mergeMoments<MS>(
                pv, parts, chunks, static_cast<long long>(chunkPacks) * VEC, cols, pivotB, eps);
            if (tid == 0)
            {
                stat[k & 1] = make_float4(s.pivot, s.shift, s.scale, 0.F);
            }
        }
        __syncthreads();
        float4 const sv = stat[k & 1];
        RowStats const s{sv.x, sv.y, sv.z};
        P const* prev = stash + ((k - 1) & 1) * chunkPacks;
        P* yr = reinterpret_cast<P*>(y + rowB * cols);
        int const firstChannel = static_cast<int>(rowB % groups) * perGroup;
#pragma unroll
        for (int j = 0; j < KP; ++j)
        {
            int const p = startB + tid + j * static_cast<int>(blockDim.x);
            if (p < endB)
            {
                yr[p] = groupNormPack<T, VEC>(prev[tid + j * blockDim.x], static_cast<unsigned>(p) * VEC, s,
                    gamma + firstChannel, beta + firstChannel, SpatialDivide(spatial), packChannel, silu);
            }
        }
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
//   fusion_groupnorm_stream_<dtype>_v<VEC>        chunks on many CTAs (two more parameters: the
//                                                 partials, one 64-bit word a chunk filled with
//                                                 0xFF, and the polls before computing a missing
//                                                 one; dynamic shared memory: 2 * 4 * 128 * 16)
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
// groups take the stream path (fp32, sm_90+), else the wide path where it fits, else the stream
// path (fp16, sm_90+), else the loop path.
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
// 64, whose builds barely spill (K = 40 / 80 spill ~100 bytes and measured 5-7% slower).  fp16
// CTAs that take rows in turn (one an SM, more rows than SMs) load the next row's head ahead
// where its tail fits (K = 48, H100: groups <= 164864), reducing it while the tail still lands:
// fp16 8 x 320 x 128 x 128 0.82 -> 0.84-0.85, with SiLU 0.79 -> 0.81 (ab_head_ahead,
// ab_head_first; K = 64 ahead spills 176 bytes and measured 0.69; fp32's K = 24 ahead, 0.87 ->
// 0.90 at 8 x 640 x 64 x 64, gave way to the stream path).  Measured on SDXL's groups (x >= 40
// MB): fp32 640 x 64 x 64 0.34 -> 0.79-0.80 of the copy (0.93x -> 2.1x torch), fp16 320 x 128 x
// 128 0.22 -> 0.72-0.75 (1.0x -> 3.4x torch); with the next group's tail loaded as each CTA
// writes (one CTA an SM), 0.83 and 0.74-0.79 (ab_next_row: the same for the register head
// measured 0.56-0.71 where it was 0.82-0.92, so only the shared tail is loaded ahead); with
// one-pass statistics, 0.85 and 0.78-0.82 (ab_one_pass, the same call: +1.5 to +7 points on
// every wide and pair launch).
// Stream: on sm_90+ with 16-byte packs and a workspace (the launcher falls back without one),
// fp32 groups past the registers and fp16 ones past the wide path (> 181248 elements on the
// H100): chunks of 4 packs a thread in 128-thread CTAs, 9 an SM.  Measured (the sweep's
// ab_stream, same calls): fp32 8 x 320 x 128 x 128 0.83 -> 0.93 of the copy, with SiLU 0.82 ->
// 0.91, against the cluster path it replaces (a group over a cluster of 8 CTAs holding it in
// registers, sums by st.async: the loop's 0.42 -> 0.83); fp32 8 / 16 x 640 x 64 x 64 0.89 /
// 0.90 -> 0.91 / 0.92 against the wide path, with SiLU 0.88 / 0.905 -> 0.875 / 0.91; on the fp16
// wide and pair launches' groups 2-6 points below, so those keep theirs.
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
    XW(f32, float, 4, 32, false)                                                                                   \
    XW(f16, __half, 8, 48, true) XW(f16, __half, 8, 64, false)
// XS(tn, T, vec) for the stream kernels.
#define FUSION_GROUPNORM_STREAM_KERNELS(XS) XS(f32, float, 4) XS(f16, __half, 8)

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

#define FUSION_GROUPNORM_STREAM_PARAMS(T)                                                                          \
    (T const* __restrict__ x, T const* __restrict__ gamma, T const* __restrict__ beta, T* __restrict__ y,          \
        long long rows, int channels, int groups, long long spatial, float eps, int silu,                          \
        unsigned long long* __restrict__ partials, int patience)

#define FUSION_GROUPNORM_DEFINE_STREAM(TN, T, VEC)                                                                 \
    extern "C" __global__ void __launch_bounds__(FUSION_GROUPNORM_STREAM_THREADS, FUSION_GROUPNORM_STREAM_CTAS)    \
        fusion_groupnorm_stream_##TN##_v##VEC FUSION_GROUPNORM_STREAM_PARAMS(T)                                    \
    {                                                                                                              \
        fusion_kernels::groupNormStreamRows<T, VEC>(                                                               \
            x, gamma, beta, y, rows, channels, groups, static_cast<int>(spatial), eps, silu, partials, patience);  \
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
