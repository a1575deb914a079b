#include "skipnorm/skipCore.h"
#include "skipnorm/skipLaunch.h"

#include <cmath>

using namespace nvinfer1;

namespace fusion
{
namespace sln = specs::fused_skip_layer_norm;
namespace srms = specs::fused_skip_rms_norm;

static_assert(int32_t{sln::kEPSILON} == int32_t{srms::kEPSILON} && int32_t{sln::kAXIS} == int32_t{srms::kAXIS}
        && int32_t{sln::kWITH_SUM} == int32_t{srms::kWITH_SUM},
    "skip norm specs disagree on field order");
static_assert(sln::kINPUT_X == 0 && sln::kINPUT_SKIP == 1 && sln::kINPUT_BIAS == 2 && sln::kINPUT_SCALE == 3
        && sln::kINPUT_B == 4,
    "unexpected skip LayerNorm inputs");
static_assert(srms::kINPUT_X == 0 && srms::kINPUT_SKIP == 1 && srms::kINPUT_BIAS == 2 && srms::kINPUT_SCALE == 3,
    "unexpected skip RMSNorm inputs");

specs::PluginSpec const& skipNormSpec(NormOp op) noexcept
{
    return op == NormOp::kLAYER_NORM ? sln::kSPEC : srms::kSPEC;
}

bool SkipNormConfig::fromFields(NormOp op, PluginFieldCollection const* fc, SkipNormConfig& out)
{
    FieldReader const r(skipNormSpec(op), fc);
    if (!r.ok())
    {
        logError(r.error());
        return false;
    }
    float const eps = r.getFloat(sln::kEPSILON, 0.F);
    if (!(eps >= 0.F) || std::isinf(eps))
    {
        logError(std::string(skipNormSpec(op).name) + ": epsilon must be finite and >= 0");
        return false;
    }
    int32_t const withSum = r.getInt(sln::kWITH_SUM, sln::kWITH_SUM_DEFAULT);
    if (withSum != 0 && withSum != 1)
    {
        logError(std::string(skipNormSpec(op).name) + ": with_sum must be 0 or 1");
        return false;
    }
    out.op = op;
    out.epsilon = eps;
    out.axis = r.getInt(sln::kAXIS, sln::kAXIS_DEFAULT);
    out.withSum = withSum;
    return true;
}

int32_t SkipNormConfig::firstNormDim(int32_t rank) const noexcept
{
    int32_t const first = axis < 0 ? axis + rank : axis;
    return (rank > 0 && first >= 0 && first < rank) ? first : -1;
}

bool SkipNormConfig::checkShapes(Dims const* dims, int32_t nbInputs) const noexcept
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
    // No broadcasting: Skip has X's every dim.
    bool same = dims[1].nbDims == rank;
    for (int32_t i = 0; same && i < rank; ++i)
    {
        same = dims[0].d[i] < 0 || dims[1].d[i] < 0 || dims[0].d[i] == dims[1].d[i];
    }
    if (!same)
    {
        logError(std::string(s.name) + ": Skip's shape differs from X's");
        return false;
    }
    int64_t const cols = volume(dims[0], first, rank);
    for (int32_t i = 2; i < nbInputs; ++i)
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

int32_t SkipNormConfig::enqueue(PluginTensorDesc const* inputDesc, int32_t nbInputs, void const* const* inputs,
    void* const* outputs, cudaStream_t stream) const noexcept
{
    ElemType type;
    Dims const& dims = inputDesc[0].dims;
    int32_t const first = firstNormDim(dims.nbDims);
    if (nbInputs < spec().minInputs || first < 0 || !toElemType(inputDesc[0].type, type))
    {
        logError(std::string(spec().name) + ": enqueue before configure, or bad input");
        return -1;
    }
    Dims const& skipDims = inputDesc[1].dims;
    bool same = skipDims.nbDims == dims.nbDims;
    for (int32_t i = 0; same && i < dims.nbDims; ++i)
    {
        same = skipDims.d[i] == dims.d[i];
    }
    if (!same)
    {
        logError(std::string(spec().name) + ": Skip's shape differs from X's at run time");
        return -1;
    }
    int64_t const rows = volume(dims, 0, first);
    int64_t const cols = volume(dims, first, dims.nbDims);
    void const* b = (op == NormOp::kLAYER_NORM && nbInputs > 4) ? inputs[4] : nullptr;
    void* sum = withSum != 0 ? outputs[1] : nullptr;
    cudaError_t const err
        = launchSkipNorm(op, type, inputs[0], inputs[1], inputs[2], inputs[3], b, outputs[0], sum, rows, cols, epsilon, stream);
    if (err != cudaSuccess)
    {
        logError(std::string(spec().name) + ": kernel launch failed: " + cudaGetErrorString(err));
        return -1;
    }
    return 0;
}

void SkipNormConfig::writeFields(FieldWriter& w)
{
    w.clear();
    w.add(sln::kEPSILON, &epsilon, 1);
    w.add(sln::kAXIS, &axis, 1);
    w.add(sln::kWITH_SUM, &withSum, 1);
}

} // namespace fusion
