#include "common/NormPlugin.h"

#include <cmath>
#include <new>

using namespace nvinfer1;

namespace fusion
{
namespace ln = specs::fused_layer_norm;
namespace rms = specs::fused_rms_norm;

// One code path reads both specs' fields by index: the indices must agree.
static_assert(ln::kEPSILON == rms::kEPSILON && ln::kAXIS == rms::kAXIS, "norm specs disagree on field order");
static_assert(ln::kAXIS_DEFAULT == rms::kAXIS_DEFAULT, "norm specs disagree on the axis default");
static_assert(ln::kINPUT_X == 0 && ln::kINPUT_SCALE == 1 && ln::kINPUT_B == 2, "unexpected LayerNorm inputs");
static_assert(rms::kINPUT_X == 0 && rms::kINPUT_SCALE == 1, "unexpected RMSNorm inputs");

specs::PluginSpec const& normSpec(NormOp op) noexcept
{
    return op == NormOp::kLAYER_NORM ? ln::kSPEC : rms::kSPEC;
}

NormPlugin::NormPlugin(NormOp op, float epsilon, int32_t axis)
    : mOp(op)
    , mEpsilon(epsilon)
    , mAxis(axis)
    , mSerial(normSpec(op))
{
}

NormPlugin::NormPlugin(NormPlugin const& other)
    : IPluginV3(other)
    , IPluginV3OneCore(other)
    , IPluginV3OneBuild(other)
    , IPluginV3OneRuntime(other)
    , mOp(other.mOp)
    , mEpsilon(other.mEpsilon)
    , mAxis(other.mAxis)
    , mNbInputs(other.mNbInputs)
    , mSerial(normSpec(other.mOp))
{
}

IPluginCapability* NormPlugin::getCapabilityInterface(PluginCapabilityType type) noexcept
{
    switch (type)
    {
    case PluginCapabilityType::kCORE: return static_cast<IPluginV3OneCore*>(this);
    case PluginCapabilityType::kBUILD: return static_cast<IPluginV3OneBuild*>(this);
    case PluginCapabilityType::kRUNTIME: return static_cast<IPluginV3OneRuntime*>(this);
    }
    return nullptr;
}

IPluginV3* NormPlugin::clone() noexcept
{
    return new (std::nothrow) NormPlugin(*this);
}

char const* NormPlugin::getPluginName() const noexcept
{
    return normSpec(mOp).name;
}

char const* NormPlugin::getPluginVersion() const noexcept
{
    return normSpec(mOp).version;
}

char const* NormPlugin::getPluginNamespace() const noexcept
{
    return normSpec(mOp).pluginNamespace;
}

int32_t NormPlugin::firstNormDim(int32_t rank) const noexcept
{
    int32_t const first = mAxis < 0 ? mAxis + rank : mAxis;
    return (rank > 0 && first >= 0 && first < rank) ? first : -1;
}

bool NormPlugin::checkShapes(Dims const* dims, int32_t nbInputs) const noexcept
{
    specs::PluginSpec const& spec = normSpec(mOp);
    if (nbInputs < spec.minInputs || nbInputs > spec.maxInputs)
    {
        logError(std::string(spec.name) + ": takes " + std::to_string(spec.minInputs) + ".."
            + std::to_string(spec.maxInputs) + " inputs, got " + std::to_string(nbInputs));
        return false;
    }
    int32_t const rank = dims[0].nbDims;
    int32_t const first = firstNormDim(rank);
    if (first < 0)
    {
        logError(std::string(spec.name) + ": axis " + std::to_string(mAxis) + " does not fit rank "
            + std::to_string(rank));
        return false;
    }
    int64_t const cols = volume(dims[0], first, rank);
    for (int32_t i = 1; i < nbInputs; ++i)
    {
        int64_t const v = volume(dims[i], 0, dims[i].nbDims);
        if (cols >= 0 && v >= 0 && v != cols)
        {
            logError(std::string(spec.name) + ": input " + std::to_string(i) + " has " + std::to_string(v)
                + " elements, the normalized dims have " + std::to_string(cols));
            return false;
        }
    }
    return true;
}

int32_t NormPlugin::configurePlugin(
    DynamicPluginTensorDesc const* in, int32_t nbInputs, DynamicPluginTensorDesc const* /*out*/, int32_t nbOutputs) noexcept
{
    if (in == nullptr || nbInputs < 1 || nbInputs > 3 || nbOutputs != 1)
    {
        return -1;
    }
    Dims dims[3];
    for (int32_t i = 0; i < nbInputs; ++i)
    {
        dims[i] = in[i].desc.dims;
    }
    if (!checkShapes(dims, nbInputs))
    {
        return -1;
    }
    mNbInputs = nbInputs;
    return 0;
}

int32_t NormPlugin::getOutputDataTypes(
    DataType* outputTypes, int32_t nbOutputs, DataType const* inputTypes, int32_t nbInputs) const noexcept
{
    if (nbOutputs != 1 || nbInputs < 1 || !isSupportedType(inputTypes[0]))
    {
        return -1;
    }
    outputTypes[0] = inputTypes[0];
    return 0;
}

int32_t NormPlugin::getOutputShapes(DimsExprs const* inputs, int32_t nbInputs, DimsExprs const* /*shapeInputs*/,
    int32_t /*nbShapeInputs*/, DimsExprs* outputs, int32_t nbOutputs, IExprBuilder& /*exprBuilder*/) noexcept
{
    specs::PluginSpec const& spec = normSpec(mOp);
    if (nbInputs < spec.minInputs || nbInputs > spec.maxInputs || nbOutputs != 1
        || firstNormDim(inputs[0].nbDims) < 0)
    {
        return -1;
    }
    outputs[0] = inputs[0];
    return 0;
}

bool NormPlugin::supportsFormatCombination(
    int32_t pos, DynamicPluginTensorDesc const* inOut, int32_t nbInputs, int32_t nbOutputs) noexcept
{
    if (inOut == nullptr || pos < 0 || pos >= nbInputs + nbOutputs)
    {
        return false;
    }
    PluginTensorDesc const& d = inOut[pos].desc;
    if (d.format != TensorFormat::kLINEAR)
    {
        return false;
    }
    // Scale, B and Y share X's type.
    return pos == 0 ? isSupportedType(d.type) : d.type == inOut[0].desc.type;
}

int32_t NormPlugin::getNbOutputs() const noexcept
{
    return 1;
}

int32_t NormPlugin::onShapeChange(
    PluginTensorDesc const* in, int32_t nbInputs, PluginTensorDesc const* /*out*/, int32_t nbOutputs) noexcept
{
    if (in == nullptr || nbInputs < 1 || nbInputs > 3 || nbOutputs != 1)
    {
        return -1;
    }
    Dims dims[3];
    for (int32_t i = 0; i < nbInputs; ++i)
    {
        dims[i] = in[i].dims;
    }
    if (!checkShapes(dims, nbInputs))
    {
        return -1;
    }
    mNbInputs = nbInputs;
    return 0;
}

int32_t NormPlugin::enqueue(PluginTensorDesc const* inputDesc, PluginTensorDesc const* /*outputDesc*/,
    void const* const* inputs, void* const* outputs, void* /*workspace*/, cudaStream_t stream) noexcept
{
    ElemType type;
    Dims const& dims = inputDesc[0].dims;
    int32_t const first = firstNormDim(dims.nbDims);
    if (mNbInputs < 1 || first < 0 || !toElemType(inputDesc[0].type, type))
    {
        logError(std::string(getPluginName()) + ": enqueue before configure, or bad input");
        return -1;
    }
    int64_t const rows = volume(dims, 0, first);
    int64_t const cols = volume(dims, first, dims.nbDims);
    void const* g = mNbInputs > 1 ? inputs[1] : nullptr;
    void const* b = mNbInputs > 2 ? inputs[2] : nullptr;
    cudaError_t const err = launchNorm(mOp, type, inputs[0], g, b, outputs[0], rows, cols, mEpsilon, stream);
    if (err != cudaSuccess)
    {
        logError(std::string(getPluginName()) + ": kernel launch failed: " + cudaGetErrorString(err));
        return -1;
    }
    return 0;
}

IPluginV3* NormPlugin::attachToContext(IPluginResourceContext* /*context*/) noexcept
{
    return clone();
}

PluginFieldCollection const* NormPlugin::getFieldsToSerialize() noexcept
{
    mSerial.clear();
    mSerial.add(ln::kEPSILON, &mEpsilon, 1);
    mSerial.add(ln::kAXIS, &mAxis, 1);
    return mSerial.collection();
}

NormPluginCreator::NormPluginCreator(NormOp op)
    : mOp(op)
    , mFieldNames(normSpec(op))
{
}

IPluginV3* NormPluginCreator::createPlugin(
    char const* /*name*/, PluginFieldCollection const* fc, TensorRTPhase /*phase*/) noexcept
{
    try
    {
        FieldReader const r(normSpec(mOp), fc);
        if (!r.ok())
        {
            logError(r.error());
            return nullptr;
        }
        float const eps = r.getFloat(ln::kEPSILON, 0.F);
        int32_t const axis = r.getInt(ln::kAXIS, ln::kAXIS_DEFAULT);
        if (!(eps >= 0.F) || std::isinf(eps))
        {
            logError(std::string(normSpec(mOp).name) + ": epsilon must be finite and >= 0");
            return nullptr;
        }
        return new NormPlugin(mOp, eps, axis);
    }
    catch (std::exception const& e)
    {
        logError(e.what());
    }
    return nullptr;
}

PluginFieldCollection const* NormPluginCreator::getFieldNames() noexcept
{
    return mFieldNames.collection();
}

char const* NormPluginCreator::getPluginName() const noexcept
{
    return normSpec(mOp).name;
}

char const* NormPluginCreator::getPluginVersion() const noexcept
{
    return normSpec(mOp).version;
}

char const* NormPluginCreator::getPluginNamespace() const noexcept
{
    return normSpec(mOp).pluginNamespace;
}

} // namespace fusion
