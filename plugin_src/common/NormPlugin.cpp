#include "common/NormPlugin.h"

#include <new>

using namespace nvinfer1;

namespace fusion
{

NormPlugin::NormPlugin(NormConfig const& config)
    : mCfg(config)
    , mSerial(config.spec())
{
}

NormPlugin::NormPlugin(NormPlugin const& other)
    : IPluginV3(other)
    , IPluginV3OneCore(other)
    , IPluginV3OneBuild(other)
    , IPluginV3OneRuntime(other)
    , mCfg(other.mCfg)
    , mNbInputs(other.mNbInputs)
    , mSerial(other.mCfg.spec())
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
    return mCfg.spec().name;
}

char const* NormPlugin::getPluginVersion() const noexcept
{
    return mCfg.spec().version;
}

char const* NormPlugin::getPluginNamespace() const noexcept
{
    return mCfg.spec().pluginNamespace;
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
    if (!mCfg.checkShapes(dims, nbInputs))
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
    specs::PluginSpec const& spec = mCfg.spec();
    if (nbInputs < spec.minInputs || nbInputs > spec.maxInputs || nbOutputs != 1
        || mCfg.firstNormDim(inputs[0].nbDims) < 0)
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
    return supportsLinear(pos, inOut[pos].desc, inOut[0].desc.type);
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
    if (!mCfg.checkShapes(dims, nbInputs))
    {
        return -1;
    }
    mNbInputs = nbInputs;
    return 0;
}

int32_t NormPlugin::enqueue(PluginTensorDesc const* inputDesc, PluginTensorDesc const* /*outputDesc*/,
    void const* const* inputs, void* const* outputs, void* /*workspace*/, cudaStream_t stream) noexcept
{
    return mCfg.enqueue(inputDesc[0], mNbInputs, inputs, outputs, stream);
}

IPluginV3* NormPlugin::attachToContext(IPluginResourceContext* /*context*/) noexcept
{
    return clone();
}

PluginFieldCollection const* NormPlugin::getFieldsToSerialize() noexcept
{
    mCfg.writeFields(mSerial);
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
        NormConfig cfg;
        return NormConfig::fromFields(mOp, fc, cfg) ? new NormPlugin(cfg) : nullptr;
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
