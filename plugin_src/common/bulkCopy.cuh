// Staging global memory in shared memory with the copy engine (cp.async.bulk completing on an
// mbarrier): no registers and no per-element instructions, so a CTA can bring in its next
// tile while it computes on this one.  sm_90+; older targets compile these empty, and their
// launchers never call them.  Device code only (nvcc and NVRTC).
#pragma once

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900
#define FUSION_BULK_COPY 1
#else
#define FUSION_BULK_COPY 0
#endif

namespace fusion_kernels
{

// Bytes per bulk copy instruction (measured on H100: 32 KiB pieces slightly ahead of 8 KiB).
constexpr unsigned kBulkPiece = 32768;

__device__ __forceinline__ unsigned sharedAddress(void const* p)
{
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// One thread initializes; a __syncthreads() must follow before any other thread uses `bar`.
__device__ __forceinline__ void mbarrierInit(unsigned long long* bar, unsigned count)
{
#if FUSION_BULK_COPY
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n\t"
                 "fence.mbarrier_init.release.cluster;" ::"r"(sharedAddress(bar)),
        "r"(count)
        : "memory");
#endif
}

// Spin until the phase of `bar` with this parity has completed.
__device__ __forceinline__ void mbarrierWait(unsigned long long* bar, unsigned parity)
{
#if FUSION_BULK_COPY
    unsigned done = 0;
    do
    {
        asm volatile(
            "{\n\t.reg .pred p;\n\t"
            "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n\t"
            "selp.u32 %0, 1, 0, p;\n\t}"
            : "=r"(done)
            : "r"(sharedAddress(bar)), "r"(parity)
            : "memory");
    } while (done == 0);
#endif
}

// Copy `bytes` (a multiple of 16, both addresses 16-byte aligned, < 2^20) global -> shared and
// arm `bar` (count 1) to complete when all of it has landed.  The caller's barrier orders the
// threads' earlier reads of dst; the proxy fence orders them before the copy engine's writes.
__device__ __forceinline__ void bulkLoad(void* dst, void const* src, unsigned bytes, unsigned long long* bar)
{
#if FUSION_BULK_COPY
    asm volatile("fence.proxy.async.shared::cta;\n\t"
                 "mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sharedAddress(bar)),
        "r"(bytes)
        : "memory");
    for (unsigned off = 0; off < bytes; off += kBulkPiece)
    {
        unsigned const n = min(bytes - off, kBulkPiece);
        asm volatile(
            "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                sharedAddress(static_cast<unsigned char*>(dst) + off)),
            "l"(static_cast<unsigned char const*>(src) + off), "r"(n), "r"(sharedAddress(bar))
            : "memory");
    }
#endif
}

// One thread's 16-byte global -> shared copy (cp.async, sm_80+; a plain copy before).  `after`
// is a register the caller computed from dst's old contents: as an operand it makes the copy
// wait for that read, so the copy cannot overwrite what the thread has not read yet.
__device__ __forceinline__ void copyAsync16(void* dst, void const* src, unsigned after)
{
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16; // after %2" ::"r"(sharedAddress(dst)), "l"(src),
        "r"(after)
        : "memory");
#else
    *static_cast<uint4*>(dst) = *static_cast<uint4 const*>(src);
#endif
}

// This thread's cp.async copies have landed.
__device__ __forceinline__ void copyAsyncWait()
{
#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
    asm volatile("cp.async.wait_all;" ::: "memory");
#endif
}

} // namespace fusion_kernels
