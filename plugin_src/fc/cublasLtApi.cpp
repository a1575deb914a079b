#include "fc/cublasLtApi.h"

#include <cstdlib>
#include <dlfcn.h>
#include <mutex>
#include <vector>

namespace fusion
{
namespace
{

template <typename F>
bool bind(void* lib, char const* name, F& fn, std::string& missing)
{
    fn = reinterpret_cast<F>(dlsym(lib, name));
    if (fn == nullptr)
    {
        missing += std::string(missing.empty() ? "" : ", ") + name;
    }
    return fn != nullptr;
}

struct Loaded
{
    CublasLtApi api{};
    bool ok{false};
    std::string error;
};

Loaded load()
{
    Loaded r;
    std::vector<std::string> names;
    char const* env = std::getenv("FUSION_CUBLASLT");
    if (env != nullptr && *env != '\0')
    {
        names.emplace_back(env);
    }
    else
    {
        names = {"libcublasLt.so.13", "libcublasLt.so"};
    }
    void* lib = nullptr;
    std::string tried;
    for (auto const& n : names)
    {
        lib = dlopen(n.c_str(), RTLD_NOW | RTLD_LOCAL);
        if (lib != nullptr)
        {
            break;
        }
        char const* why = dlerror();
        tried += (tried.empty() ? "" : "; ") + n + ": " + (why != nullptr ? why : "not found");
    }
    if (lib == nullptr)
    {
        r.error = "FusedFC needs cuBLASLt but could not load it (" + tried
            + "). Install CUDA's cuBLAS (e.g. pip install nvidia-cublas) and put its lib folder on "
              "LD_LIBRARY_PATH, or set FUSION_CUBLASLT to the library's path.";
        return r;
    }
    std::string missing;
    CublasLtApi& a = r.api;
    bind(lib, "cublasLtCreate", a.create, missing);
    bind(lib, "cublasLtDestroy", a.destroy, missing);
    bind(lib, "cublasLtGetVersion", a.getVersion, missing);
    bind(lib, "cublasLtMatmulDescCreate", a.matmulDescCreate, missing);
    bind(lib, "cublasLtMatmulDescDestroy", a.matmulDescDestroy, missing);
    bind(lib, "cublasLtMatmulDescSetAttribute", a.matmulDescSetAttribute, missing);
    bind(lib, "cublasLtMatrixLayoutCreate", a.matrixLayoutCreate, missing);
    bind(lib, "cublasLtMatrixLayoutDestroy", a.matrixLayoutDestroy, missing);
    bind(lib, "cublasLtMatmulPreferenceCreate", a.preferenceCreate, missing);
    bind(lib, "cublasLtMatmulPreferenceDestroy", a.preferenceDestroy, missing);
    bind(lib, "cublasLtMatmulPreferenceSetAttribute", a.preferenceSetAttribute, missing);
    bind(lib, "cublasLtMatmulAlgoGetHeuristic", a.algoGetHeuristic, missing);
    bind(lib, "cublasLtMatmul", a.matmul, missing);
    if (!missing.empty())
    {
        r.error = "FusedFC: the cuBLASLt library that was loaded lacks " + missing;
        return r;
    }
    // Built against CUDA 13's header: an older major has another ABI.
    size_t const version = a.getVersion();
    if (version / 10000 < CUBLAS_VER_MAJOR)
    {
        r.error = "FusedFC: cuBLASLt " + std::to_string(version) + " is older than the "
            + std::to_string(CUBLAS_VER_MAJOR) + ".x the plugin was built for";
        return r;
    }
    r.ok = true;
    return r;
}

} // namespace

CublasLtApi const* loadCublasLt(std::string& error)
{
    static Loaded const loaded = load();
    if (!loaded.ok)
    {
        error = loaded.error;
        return nullptr;
    }
    return &loaded.api;
}

} // namespace fusion
