// One FC GEMM through cuBLASLt: Y[M,N] = act(alpha * X[M,K] @ W + B[N]), row-major, with
// the bias (and ReLU / tanh-GELU) fused as an epilogue.  The algorithm is chosen by
// cuBLASLt's heuristic when the shape is planned (configure / onShapeChange), so run()
// only sets the bias pointer and calls cublasLtMatmul.  No TensorRT in here.
#pragma once

#include "common/normLaunch.h" // ElemType
#include "fc/cublasLtApi.h"

#include <cstddef>
#include <cstdint>
#include <string>

namespace fusion
{

enum class Activation : int32_t
{
    kNONE = 0,
    kRELU = 1,
    kGELU_ERF = 2,
    kGELU_TANH = 3,
};

struct GemmShape
{
    int64_t m{0};
    int64_t n{0};
    int64_t k{0};
    ElemType type{ElemType::kFLOAT};
    bool transposeWeight{false};
    Activation act{Activation::kNONE};
    size_t workspace{0};     // bytes the algorithm may use
    uint32_t alignment{256}; // bytes every pointer is aligned to

    bool operator==(GemmShape const& o) const noexcept
    {
        return m == o.m && n == o.n && k == o.k && type == o.type && transposeWeight == o.transposeWeight
            && act == o.act && workspace == o.workspace && alignment == o.alignment;
    }
};

class LtGemm
{
public:
    LtGemm() = default;
    LtGemm(LtGemm const&) = delete;
    LtGemm& operator=(LtGemm const&) = delete;
    ~LtGemm();

    // Loads cuBLASLt (no GPU needed); false with `error` if it cannot.
    static bool available(std::string& error);
    // Descriptors + heuristic algorithm for `shape` (no-op if already planned for it).
    bool plan(GemmShape const& shape, std::string& error);
    bool plannedFor(GemmShape const& shape) const noexcept
    {
        return mPlanned && mShape == shape;
    }
    // Runs the planned GEMM (+ erf-GELU pass for kGELU_ERF) on `stream`.
    bool run(void const* x, void const* w, void const* bias, void* y, float alpha, void* workspace,
        cudaStream_t stream, std::string& error);

private:
    void release() noexcept;

    CublasLtApi const* mApi{nullptr};
    cublasLtHandle_t mHandle{nullptr};
    cublasLtMatmulDesc_t mDesc{nullptr};
    cublasLtMatrixLayout_t mA{nullptr};
    cublasLtMatrixLayout_t mB{nullptr};
    cublasLtMatrixLayout_t mC{nullptr};
    cublasLtMatmulAlgo_t mAlgo{};
    GemmShape mShape{};
    bool mPlanned{false};
};

// Largest power of two (<= 256) that divides every pointer's address.
uint32_t pointerAlignment(void const* const* ptrs, int32_t count) noexcept;

} // namespace fusion
