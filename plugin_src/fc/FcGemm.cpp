#include "fc/FcGemm.h"
#include "fc/fcLaunch.h"

namespace fusion
{
namespace
{

cudaDataType_t cudaType(ElemType t)
{
    switch (t)
    {
    case ElemType::kFLOAT: return CUDA_R_32F;
    case ElemType::kHALF: return CUDA_R_16F;
    case ElemType::kBF16: return CUDA_R_16BF;
    }
    return CUDA_R_32F;
}

cublasLtEpilogue_t epilogue(Activation a)
{
    switch (a)
    {
    case Activation::kRELU: return CUBLASLT_EPILOGUE_RELU_BIAS;
    case Activation::kGELU_TANH: return CUBLASLT_EPILOGUE_GELU_BIAS; // cuBLASLt's GELU is the tanh form
    case Activation::kNONE:
    case Activation::kGELU_ERF: return CUBLASLT_EPILOGUE_BIAS; // erf-GELU: separate pass
    }
    return CUBLASLT_EPILOGUE_BIAS;
}

std::string statusText(char const* what, cublasStatus_t s)
{
    return std::string("FusedFC: ") + what + " failed with cublasStatus " + std::to_string(static_cast<int>(s));
}

} // namespace

uint32_t pointerAlignment(void const* const* ptrs, int32_t count) noexcept
{
    uint32_t align = 256;
    for (int32_t i = 0; i < count; ++i)
    {
        auto const p = reinterpret_cast<uintptr_t>(ptrs[i]);
        while (align > 1 && (p % align) != 0)
        {
            align >>= 1;
        }
    }
    return align;
}

LtGemm::~LtGemm()
{
    release();
    if (mApi != nullptr && mHandle != nullptr)
    {
        mApi->destroy(mHandle);
    }
}

void LtGemm::release() noexcept
{
    if (mApi == nullptr)
    {
        return;
    }
    if (mA != nullptr)
    {
        mApi->matrixLayoutDestroy(mA);
    }
    if (mB != nullptr)
    {
        mApi->matrixLayoutDestroy(mB);
    }
    if (mC != nullptr)
    {
        mApi->matrixLayoutDestroy(mC);
    }
    if (mDesc != nullptr)
    {
        mApi->matmulDescDestroy(mDesc);
    }
    mA = mB = mC = nullptr;
    mDesc = nullptr;
    mPlanned = false;
}

bool LtGemm::available(std::string& error)
{
    return loadCublasLt(error) != nullptr;
}

bool LtGemm::plan(GemmShape const& s, std::string& error)
{
    if (plannedFor(s))
    {
        return true;
    }
    if (mApi == nullptr && (mApi = loadCublasLt(error)) == nullptr)
    {
        return false;
    }
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    if (mHandle == nullptr && (st = mApi->create(&mHandle)) != CUBLAS_STATUS_SUCCESS)
    {
        mHandle = nullptr;
        error = statusText("cublasLtCreate", st);
        return false;
    }
    release();
    // Row-major Y[M,N] = X[M,K] W is column-major Y^T[N,M] = op(W)[N,K] X^T[K,M]:
    // A = W (stored [K,N] -> col-major N x K, or [N,K] -> col-major K x N transposed), B = X.
    cudaDataType_t const dt = cudaType(s.type);
    cublasOperation_t const opA = s.transposeWeight ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t const opB = CUBLAS_OP_N;
    cublasLtEpilogue_t const epi = epilogue(s.act);
    auto const u = [](int64_t v) { return static_cast<uint64_t>(v); };
    if ((st = mApi->matmulDescCreate(&mDesc, CUBLAS_COMPUTE_32F, CUDA_R_32F)) != CUBLAS_STATUS_SUCCESS
        || (st = mApi->matmulDescSetAttribute(mDesc, CUBLASLT_MATMUL_DESC_TRANSA, &opA, sizeof(opA)))
            != CUBLAS_STATUS_SUCCESS
        || (st = mApi->matmulDescSetAttribute(mDesc, CUBLASLT_MATMUL_DESC_TRANSB, &opB, sizeof(opB)))
            != CUBLAS_STATUS_SUCCESS
        || (st = mApi->matmulDescSetAttribute(mDesc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epi, sizeof(epi)))
            != CUBLAS_STATUS_SUCCESS
        || (st = s.transposeWeight ? mApi->matrixLayoutCreate(&mA, dt, u(s.k), u(s.n), s.k)
                                   : mApi->matrixLayoutCreate(&mA, dt, u(s.n), u(s.k), s.n))
            != CUBLAS_STATUS_SUCCESS
        || (st = mApi->matrixLayoutCreate(&mB, dt, u(s.k), u(s.m), s.k)) != CUBLAS_STATUS_SUCCESS
        || (st = mApi->matrixLayoutCreate(&mC, dt, u(s.n), u(s.m), s.n)) != CUBLAS_STATUS_SUCCESS)
    {
        error = statusText("descriptor setup", st);
        release();
        return false;
    }
    // The heuristic needs the bias epilogue's pointer to be set (any aligned value).
    void const* fakeBias = reinterpret_cast<void const*>(uintptr_t{256});
    mApi->matmulDescSetAttribute(mDesc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &fakeBias, sizeof(fakeBias));

    cublasLtMatmulPreference_t pref = nullptr;
    uint64_t const ws = s.workspace;
    uint32_t const align = s.alignment;
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    if ((st = mApi->preferenceCreate(&pref)) == CUBLAS_STATUS_SUCCESS
        && (st = mApi->preferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof(ws)))
            == CUBLAS_STATUS_SUCCESS)
    {
        for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                 CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
        {
            mApi->preferenceSetAttribute(pref, attr, &align, sizeof(align));
        }
        st = mApi->algoGetHeuristic(mHandle, mDesc, mA, mB, mC, mC, pref, 1, &result, &found);
    }
    if (pref != nullptr)
    {
        mApi->preferenceDestroy(pref);
    }
    if (st != CUBLAS_STATUS_SUCCESS || found == 0)
    {
        error = st != CUBLAS_STATUS_SUCCESS ? statusText("cublasLtMatmulAlgoGetHeuristic", st)
                                            : std::string("FusedFC: cuBLASLt has no algorithm for this GEMM");
        release();
        return false;
    }
    mAlgo = result.algo;
    mShape = s;
    mPlanned = true;
    return true;
}

bool LtGemm::run(void const* x, void const* w, void const* bias, void* y, float alpha, void* workspace,
    cudaStream_t stream, std::string& error)
{
    if (!mPlanned)
    {
        error = "FusedFC: GEMM run before it was planned";
        return false;
    }
    if (mShape.m == 0)
    {
        return true;
    }
    float const beta = 0.F;
    cublasStatus_t st = mApi->matmulDescSetAttribute(mDesc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias));
    if (st == CUBLAS_STATUS_SUCCESS)
    {
        st = mApi->matmul(mHandle, mDesc, &alpha, w, mA, x, mB, &beta, y, mC, y, mC, &mAlgo, workspace,
            mShape.workspace, stream);
    }
    if (st != CUBLAS_STATUS_SUCCESS)
    {
        error = statusText("cublasLtMatmul", st);
        return false;
    }
    if (mShape.act == Activation::kGELU_ERF)
    {
        cudaError_t const err = launchGeluErf(mShape.type, y, mShape.m * mShape.n, stream);
        if (err != cudaSuccess)
        {
            error = std::string("FusedFC: erf-GELU launch failed: ") + cudaGetErrorString(err);
            return false;
        }
    }
    return true;
}

} // namespace fusion
