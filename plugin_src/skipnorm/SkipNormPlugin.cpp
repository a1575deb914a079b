#include "skipnorm/SkipNormPlugin.h"

#include <new>

using namespace nvinfer1;

namespace fusion
{

SkipNormPlugin::SkipNormPlugin(SkipNormConfig const& config)
    : mCfg(config)
    , mSerial(config.spec())
{
}

SkipNormPlugin::SkipNormPlugin(SkipNormPlugin const& other)
    : IPluginV3(other)
    , IPluginV3OneCore(other)
    , IPluginV3OneBuild(other)
    , IPluginV3OneRuntime(other)
    , mCfg(other.mCfg)
    , mNbInputs(other.mNbInputs)
    , mSerial(other.mCfg.spec())
{
}

IPluginCapability* SkipNormPlugin::getCapabilityInterface(PluginCapabilityType type) noexcept
{
    switch (type)
    {
    case PluginCapabilityType::kCORE: return static_cast<IPluginV3OneCore*>(this);
    case PluginCapabilityType::kBUILD: return static_cast<IPluginV3OneBuild*>(this);
    case PluginCapabilityType::kRUNTIME: return static_cast<IPluginV3OneRuntime*>(this);
    }
    return nullptr;
}

IPluginV3* SkipNormPlugin::clone() noexcept
{
    return new (std::nothrow) SkipNormPlugin(*this);
}

char const* SkipNormPlugin::getPluginName() const noexcept
{
    return mCfg.spec().name;
}

char const* SkipNormPlugin::getPluginVersion() const noexcept
{
    return mCfg.spec().version;
}

char const* SkipNormPlugin::getPluginNamespace() const noexcept
{
    return mCfg.spec().pluginNamespace;
}

int32_t SkipNormPlugin::configurePlugin(
    DynamicPluginTensorDesc const* in, int32_t nbInputs, DynamicPluginTensorDesc const* /*out*/, int32_t nbOutputs) noexcept
{
    if (in == nullptr || nbInputs < 1 || nbInputs > 5 || nbOutputs != 2)
    {
        return -1;
    }
    Dims dims[5];
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

int32_t SkipNormPlugin::getOutputDataTypes(
    DataType* outputTypes, int32_t nbOutputs, DataType const* inputTypes, int32_t nbInputs) const noexcept
{
    if (nbOutputs != 2 || nbInputs < 1 || !isSupportedType(inputTypes[0]))
    {
        return -1;
    }
    outputTypes[0] = inputTypes[0];
    outputTypes[1] = inputTypes[0];
    return 0;
}

int32_t SkipNormPlugin::getOutputShapes(DimsExprs const* inputs, int32_t nbInputs, DimsExprs const* /*shapeInputs*/,
    int32_t /*nbShapeInputs*/, DimsExprs* outputs, int32_t nbOutputs, IExprBuilder& /*exprBuilder*/) noexcept
{
    specs::PluginSpec const& spec = mCfg.spec();
    if (nbInputs < spec.minInputs || nbInputs > spec.maxInputs || nbOutputs != 2
        || mCfg.firstNormDim(inputs[0].nbDims) < 0)
    {
        return -1;
    }
    outputs[0] = inputs[0];
    outputs[1] = inputs[0]; // Sum (written only when with_sum = 1)
    return 0;
}

bool SkipNormPlugin::supportsFormatCombination(
    int32_t pos, DynamicPluginTensorDesc const* inOut, int32_t nbInputs, int32_t nbOutputs) noexcept
{
    if (inOut == nullptr || pos < 0 || pos >= nbInputs + nbOutputs)
    {
        return false;
    }
    return supportsLinear(pos, inOut[pos].desc, inOut[0].desc.type);
}

int32_t SkipNormPlugin::getNbOutputs() const noexcept
{
    return 2;
}

int32_t SkipNormPlugin::onShapeChange(
    PluginTensorDesc const* in, int32_t nbInputs, PluginTensorDesc const* /*out*/, int32_t nbOutputs) noexcept
{
    if (in == nullptr || nbInputs < 1 || nbInputs > 5 || nbOutputs != 2)
    {
        return -1;
    }
    Dims dims[5];
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

int32_t SkipNormPlugin::enqueue(PluginTensorDesc const* inputDesc, PluginTensorDesc const* /*outputDesc*/,
    void const* const* inputs, void* const* outputs, void* /*workspace*/, cudaStream_t stream) noexcept
{
    return mCfg.enqueue(inputDesc, mNbInputs, inputs, outputs, stream);
}

IPluginV3* SkipNormPlugin::attachToContext(IPluginResourceContext* /*context*/) noexcept
{
    return clone();
}

PluginFieldCollection const* SkipNormPlugin::getFieldsToSerialize() noexcept
{
    mCfg.writeFields(mSerial);
    return mSerial.collection();
}

SkipNormPluginCreator::SkipNormPluginCreator(NormOp op)
    : mOp(op)
    , mFieldNames(skipNormSpec(op))
{
}

IPluginV3* SkipNormPluginCreator::createPlugin(
    char const* /*name*/, PluginFieldCollection const* fc, TensorRTPhase /*phase*/) noexcept
{
    try
    {
        SkipNormConfig cfg;
        return SkipNormConfig::fromFields(mOp, fc, cfg) ? new SkipNormPlugin(cfg) : nullptr;
    }
    catch (std::exception const& e)
    {
        logError(e.what());
    }
    return nullptr;
}

PluginFieldCollection const* SkipNormPluginCreator::getFieldNames() noexcept
{
    return mFieldNames.collection();
}

char const* SkipNormPluginCreator::getPluginName() const noexcept
{
    return skipNormSpec(mOp).name;
}

char const* SkipNormPluginCreator::getPluginVersion() const noexcept
{
    return skipNormSpec(mOp).version;
}

char const* SkipNormPluginCreator::getPluginNamespace() const noexcept
{
    return skipNormSpec(mOp).pluginNamespace;
}

} // namespace fusion
