// cuBLASLt, opened with dlopen the first time an FC plugin is configured: the library
// itself never links cuBLAS, so it loads (and `fusion plugins check` runs) without it.
#pragma once

#include <cublasLt.h>
#include <string>

namespace fusion
{

struct CublasLtApi
{
    decltype(&cublasLtCreate) create;
    decltype(&cublasLtDestroy) destroy;
    decltype(&cublasLtGetVersion) getVersion;
    decltype(&cublasLtMatmulDescCreate) matmulDescCreate;
    decltype(&cublasLtMatmulDescDestroy) matmulDescDestroy;
    decltype(&cublasLtMatmulDescSetAttribute) matmulDescSetAttribute;
    decltype(&cublasLtMatrixLayoutCreate) matrixLayoutCreate;
    decltype(&cublasLtMatrixLayoutDestroy) matrixLayoutDestroy;
    decltype(&cublasLtMatmulPreferenceCreate) preferenceCreate;
    decltype(&cublasLtMatmulPreferenceDestroy) preferenceDestroy;
    decltype(&cublasLtMatmulPreferenceSetAttribute) preferenceSetAttribute;
    decltype(&cublasLtMatmulAlgoGetHeuristic) algoGetHeuristic;
    decltype(&cublasLtMatmul) matmul;
};

// The loaded API, or null with `error` saying what was tried.  Tries $FUSION_CUBLASLT
// alone when set, else libcublasLt.so.13 then libcublasLt.so.  Loads once per process.
CublasLtApi const* loadCublasLt(std::string& error);

} // namespace fusion
