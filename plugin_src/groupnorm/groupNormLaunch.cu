#include "groupnorm/groupNormLaunch.h"
#include "groupnorm/groupNormKernels.cuh"

#include <climits>

#define FUSION_GROUPNORM_DECLARE(TN, T) extern "C" __global__ void fusion_groupnorm_##TN FUSION_GROUPNORM_PARAMS(T);
FUSION_GROUPNORM_KERNELS(FUSION_GROUPNORM_DECLARE)

namespace fusion
{

int32_t groupNormThreads(int64_t cols)
{
    int64_t t = ((cols + 3) / 4 + 31) / 32 * 32;
    t = t < 32 ? 32 : t;
    return static_cast<int32_t>(t > 1024 ? 1024 : t);
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
    void const* kernel = type == ElemType::kFLOAT ? reinterpret_cast<void const*>(&fusion_groupnorm_f32)
        : type == ElemType::kHALF                 ? reinterpret_cast<void const*>(&fusion_groupnorm_f16)
                                                  : nullptr;
    if (kernel == nullptr)
    {
        return cudaErrorInvalidValue;
    }
    long long rowsArg = rows;
    int channelsArg = static_cast<int>(channels);
    int groupsArg = static_cast<int>(groups);
    long long spatialArg = spatial;
    int siluArg = silu ? 1 : 0;
    void* args[] = {&x, &gamma, &beta, &y, &rowsArg, &channelsArg, &groupsArg, &spatialArg, &eps, &siluArg};
    int64_t const grid = rows > INT_MAX ? INT_MAX : rows; // rows are grid-strided
    return cudaLaunchKernel(
        kernel, dim3(static_cast<unsigned>(grid)), dim3(groupNormThreads(cols)), args, 0, stream);
}

} // namespace fusion
