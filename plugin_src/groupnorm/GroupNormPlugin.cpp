#include "groupnorm/GroupNormPlugin.h"

#include <new>

using namespace nvinfer1;

namespace fusion
{

GroupNormPlugin::GroupNormPlugin(GroupNormConfig const& config)
    : mCfg(config)
    , mSerial(GroupNormConfig::spec())
{
}

GroupNormPlugin::GroupNormPlugin(GroupNormPlugin const& other)
    : IPluginV3(other)
    , IPluginV3OneCore(other)
    , IPluginV3OneBuild(other)
    , IPluginV3OneRuntime(other)
    , mCfg(other.mCfg)
    , mSerial(GroupNormConfig::spec())
{
}

IPluginCapability* GroupNormPlugin::getCapabilityInterface(PluginCapabilityType type) noexcept
{
    switch (type)
    {
    case PluginCapabilityType::kCORE: return static_cast<IPluginV3OneCore*>(this);
    case PluginCapabilityType::kBUILD: return static_cast<IPluginV3OneBuild*>(this);
    case PluginCapabilityType::kRUNTIME: return static_cast<IPluginV3OneRuntime*>(this);
    }
    return nullptr;
}

IPluginV3* GroupNormPlugin::clone() noexcept
{
    return new (std::nothrow) GroupNormPlugin(*this);
}

char const* GroupNormPlugin::getPluginName() const noexcept
{
    return GroupNormConfig::spec().name;
}

char const* GroupNormPlugin::getPluginVersion() const noexcept
{
    return GroupNormConfig::spec().version;
}

char const* GroupNormPlugin::getPluginNamespace() const noexcept
{
    return GroupNormConfig::spec().pluginNamespace;
}

int32_t GroupNormPlugin::configurePlugin(
    DynamicPluginTensorDesc const* in, int32_t nbInputs, DynamicPluginTensorDesc const* /*out*/, int32_t nbOutputs) noexcept
{
    if (in == nullptr || nbInputs != 3 || nbOutputs != 1)
    {
        return -1;
    }
    Dims const dims[3] = {in[0].desc.dims, in[1].desc.dims, in[2].desc.dims};
    return mCfg.checkShapes(dims, nbInputs) ? 0 : -1;
}

int32_t GroupNormPlugin::getOutputDataTypes(
    DataType* outputTypes, int32_t nbOutputs, DataType const* inputTypes, int32_t nbInputs) const noexcept
{
    if (nbOutputs != 1 || nbInputs != 3 || (inputTypes[0] != DataType::kFLOAT && inputTypes[0] != DataType::kHALF))
    {
        return -1;
    }
    outputTypes[0] = inputTypes[0];
    return 0;
}

int32_t GroupNormPlugin::getOutputShapes(DimsExprs const* inputs, int32_t nbInputs, DimsExprs const* /*shapeInputs*/,
    int32_t /*nbShapeInputs*/, DimsExprs* outputs, int32_t nbOutputs, IExprBuilder& /*exprBuilder*/) noexcept
{
    if (nbInputs != 3 || nbOutputs != 1 || inputs[0].nbDims < 2)
    {
        return -1;
    }
    outputs[0] = inputs[0];
    return 0;
}

bool GroupNormPlugin::supportsFormatCombination(
    int32_t pos, DynamicPluginTensorDesc const* inOut, int32_t nbInputs, int32_t nbOutputs) noexcept
{
    if (inOut == nullptr || pos < 0 || pos >= nbInputs + nbOutputs)
    {
        return false;
    }
    return GroupNormConfig::supportsFormat(pos, inOut[pos].desc, inOut[0].desc.type);
}

int32_t GroupNormPlugin::getNbOutputs() const noexcept
{
    return 1;
}

int32_t GroupNormPlugin::onShapeChange(
    PluginTensorDesc const* in, int32_t nbInputs, PluginTensorDesc const* /*out*/, int32_t nbOutputs) noexcept
{
    if (in == nullptr || nbInputs != 3 || nbOutputs != 1)
    {
        return -1;
    }
    Dims const dims[3] = {in[0].dims, in[1].dims, in[2].dims};
    return mCfg.checkShapes(dims, nbInputs) ? 0 : -1;
}

int32_t GroupNormPlugin::enqueue(PluginTensorDesc const* inputDesc, PluginTensorDesc const* /*outputDesc*/,
    void const* const* inputs, void* const* outputs, void* /*workspace*/, cudaStream_t stream) noexcept
{
    return mCfg.enqueue(inputDesc[0], inputs, outputs, stream);
}

IPluginV3* GroupNormPlugin::attachToContext(IPluginResourceContext* /*context*/) noexcept
{
    return clone();
}

PluginFieldCollection const* GroupNormPlugin::getFieldsToSerialize() noexcept
{
    mCfg.writeFields(mSerial);
    return mSerial.collection();
}

GroupNormPluginCreator::GroupNormPluginCreator()
    : mFieldNames(GroupNormConfig::spec())
{
}

IPluginV3* GroupNormPluginCreator::createPlugin(
    char const* /*name*/, PluginFieldCollection const* fc, TensorRTPhase /*phase*/) noexcept
{
    try
    {
        GroupNormConfig cfg;
        return GroupNormConfig::fromFields(fc, cfg) ? new GroupNormPlugin(cfg) : nullptr;
    }
    catch (std::exception const& e)
    {
        logError(e.what());
    }
    return nullptr;
}

PluginFieldCollection const* GroupNormPluginCreator::getFieldNames() noexcept
{
    return mFieldNames.collection();
}

char const* GroupNormPluginCreator::getPluginName() const noexcept
{
    return GroupNormConfig::spec().name;
}

char const* GroupNormPluginCreator::getPluginVersion() const noexcept
{
    return GroupNormConfig::spec().version;
}

char const* GroupNormPluginCreator::getPluginNamespace() const noexcept
{
    return GroupNormConfig::spec().pluginNamespace;
}

} // namespace fusion
