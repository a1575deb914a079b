#include "groupnorm/groupNormCore.h"
#include "groupnorm/groupNormLaunch.h"

#include <cmath>
#include <cstdint>

using namespace nvinfer1;

namespace fusion
{
namespace gn = specs::fused_group_norm;

static_assert(gn::kINPUT_X == 0 && gn::kINPUT_SCALE == 1 && gn::kINPUT_B == 2, "unexpected GroupNorm inputs");

bool GroupNormConfig::fromFields(PluginFieldCollection const* fc, GroupNormConfig& out)
{
    FieldReader const r(spec(), fc);
    if (!r.ok())
    {
        logError(r.error());
        return false;
    }
    float const eps = r.getFloat(gn::kEPSILON, 0.F);
    int32_t const groups = r.getInt(gn::kNUM_GROUPS, 0);
    int32_t const silu = r.getInt(gn::kSILU, gn::kSILU_DEFAULT);
    std::string const name = spec().name;
    if (!(eps >= 0.F) || std::isinf(eps))
    {
        logError(name + ": epsilon must be finite and >= 0");
        return false;
    }
    if (groups < 1)
    {
        logError(name + ": num_groups must be >= 1");
        return false;
    }
    if (silu != 0 && silu != 1)
    {
        logError(name + ": silu must be 0 or 1");
        return false;
    }
    out.epsilon = eps;
    out.numGroups = groups;
    out.silu = silu;
    return true;
}

bool GroupNormConfig::supportsFormat(int32_t pos, PluginTensorDesc const& desc, DataType xType) noexcept
{
    if (desc.format != TensorFormat::kLINEAR)
    {
        return false;
    }
    if (pos == 0)
    {
        return desc.type == DataType::kFLOAT || desc.type == DataType::kHALF;
    }
    return desc.type == xType;
}

bool GroupNormConfig::checkShapes(Dims const* dims, int32_t nbInputs) const noexcept
{
    std::string const name = spec().name;
    if (nbInputs != 3)
    {
        logError(name + ": takes 3 inputs (X, Scale, B), got " + std::to_string(nbInputs));
        return false;
    }
    if (dims[0].nbDims < 2)
    {
        logError(name + ": X must be [N, C, ...], got rank " + std::to_string(dims[0].nbDims));
        return false;
    }
    int64_t const channels = dims[0].d[1];
    if (channels >= 0 && channels % numGroups != 0)
    {
        logError(name + ": " + std::to_string(numGroups) + " groups do not divide " + std::to_string(channels)
            + " channels");
        return false;
    }
    for (int32_t i = 1; i < 3; ++i)
    {
        int64_t const v = volume(dims[i], 0, dims[i].nbDims);
        if (channels >= 0 && v >= 0 && v != channels)
        {
            logError(name + ": input " + std::to_string(i) + " has " + std::to_string(v) + " elements, X has "
                + std::to_string(channels) + " channels");
            return false;
        }
    }
    return true;
}

size_t GroupNormConfig::workspaceSize(Dims const& x, DataType type) const noexcept
{
    ElemType elem;
    if (x.nbDims < 2 || !toElemType(type, elem) || elem == ElemType::kBF16)
    {
        return 0;
    }
    return groupNormWorkspace(elem, x.d[0], x.d[1], numGroups, volume(x, 2, x.nbDims));
}

int32_t GroupNormConfig::enqueue(PluginTensorDesc const& descX, void const* const* inputs, void* const* outputs,
    void* workspace, cudaStream_t stream) const noexcept
{
    ElemType type;
    Dims const& dims = descX.dims;
    if (dims.nbDims < 2 || !toElemType(descX.type, type) || type == ElemType::kBF16)
    {
        logError(std::string(spec().name) + ": enqueue with a bad input");
        return -1;
    }
    int64_t const spatial = volume(dims, 2, dims.nbDims);
    // TensorRT's workspace holds what getWorkspaceSize asked for the profile's largest X, which
    // covers this one: no size to check against.
    size_t const workspaceBytes = workspace == nullptr ? 0 : SIZE_MAX;
    cudaError_t const err = launchGroupNorm(type, inputs[0], inputs[1], inputs[2], outputs[0], dims.d[0], dims.d[1],
        numGroups, spatial, epsilon, silu != 0, workspace, workspaceBytes, stream);
    if (err != cudaSuccess)
    {
        logError(std::string(spec().name) + ": kernel launch failed: " + cudaGetErrorString(err));
        return -1;
    }
    return 0;
}

void GroupNormConfig::writeFields(FieldWriter& w)
{
    w.clear();
    w.add(gn::kEPSILON, &epsilon, 1);
    w.add(gn::kNUM_GROUPS, &numGroups, 1);
    w.add(gn::kSILU, &silu, 1);
}

} // namespace fusion
