#include "common/normCore.h"

#include <cmath>

using namespace nvinfer1;

namespace fusion
{
namespace ln = specs::fused_layer_norm;
namespace rms = specs::fused_rms_norm;

// One code path reads both specs' fields by index: the indices must agree.
static_assert(int32_t{ln::kEPSILON} == int32_t{rms::kEPSILON} && int32_t{ln::kAXIS} == int32_t{rms::kAXIS}, "norm specs disagree on field order");
static_assert(ln::kAXIS_DEFAULT == rms::kAXIS_DEFAULT, "norm specs disagree on the axis default");
static_assert(ln::kINPUT_X == 0 && ln::kINPUT_SCALE == 1 && ln::kINPUT_B == 2, "unexpected LayerNorm inputs");
static_assert(rms::kINPUT_X == 0 && rms::kINPUT_SCALE == 1, "unexpected RMSNorm inputs");

specs::PluginSpec const& normSpec(NormOp op) noexcept
{
    return op == NormOp::kLAYER_NORM ? ln::kSPEC : rms::kSPEC;
}

bool NormConfig::fromFields(NormOp op, PluginFieldCollection const* fc, NormConfig& out)
{
    FieldReader const r(normSpec(op), fc);
    if (!r.ok())
    {
        logError(r.error());
        return false;
    }
    float const eps = r.getFloat(ln::kEPSILON, 0.F);
    if (!(eps >= 0.F) || std::isinf(eps))
    {
        logError(std::string(normSpec(op).name) + ": epsilon must be finite and >= 0");
        return false;
    }
    out.op = op;
    out.epsilon = eps;
    out.axis = r.getInt(ln::kAXIS, ln::kAXIS_DEFAULT);
    return true;
}

int32_t NormConfig::firstNormDim(int32_t rank) const noexcept
{
    int32_t const first = axis < 0 ? axis + rank : axis;
    return (rank > 0 && first >= 0 && first < rank) ? first : -1;
}

bool NormConfig::checkShapes(Dims const* dims, int32_t nbInputs) const noexcept
{
    specs::PluginSpec const& s = spec();
    if (nbInputs < s.minInputs || nbInputs > s.maxInputs)
    {
        logError(std::string(s.name) + ": takes " + std::to_string(s.minInputs) + ".." + std::to_string(s.maxInputs)
            + " inputs, got " + std::to_string(nbInputs));
        return false;
    }
    int32_t const rank = dims[0].nbDims;
    int32_t const first = firstNormDim(rank);
    if (first < 0)
    {
        logError(std::string(s.name) + ": axis " + std::to_string(axis) + " does not fit rank " + std::to_string(rank));
        return false;
    }
    int64_t const cols = volume(dims[0], first, rank);
    for (int32_t i = 1; i < nbInputs; ++i)
    {
        int64_t const v = volume(dims[i], 0, dims[i].nbDims);
        if (cols >= 0 && v >= 0 && v != cols)
        {
            logError(std::string(s.name) + ": input " + std::to_string(i) + " has " + std::to_string(v)
                + " elements, the normalized dims have " + std::to_string(cols));
            return false;
        }
    }
    return true;
}

int32_t NormConfig::enqueue(PluginTensorDesc const& descX, int32_t nbInputs, void const* const* inputs,
    void* const* outputs, cudaStream_t stream) const noexcept
{
    ElemType type;
    Dims const& dims = descX.dims;
    int32_t const first = firstNormDim(dims.nbDims);
    if (nbInputs < 1 || first < 0 || !toElemType(descX.type, type))
    {
        logError(std::string(spec().name) + ": enqueue before configure, or bad input");
        return -1;
    }
    int64_t const rows = volume(dims, 0, first);
    int64_t const cols = volume(dims, first, dims.nbDims);
    void const* g = nbInputs > 1 ? inputs[1] : nullptr;
    void const* b = nbInputs > 2 ? inputs[2] : nullptr;
    cudaError_t const err = launchNorm(op, type, inputs[0], g, b, outputs[0], rows, cols, epsilon, stream);
    if (err != cudaSuccess)
    {
        logError(std::string(spec().name) + ": kernel launch failed: " + cudaGetErrorString(err));
        return -1;
    }
    return 0;
}

void NormConfig::writeFields(FieldWriter& w)
{
    w.clear();
    w.add(ln::kEPSILON, &epsilon, 1);
    w.add(ln::kAXIS, &axis, 1);
}

} // namespace fusion
