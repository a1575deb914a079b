#include "fc/FcPlugin.h"

#include <new>

using namespace nvinfer1;

namespace fusion
{
namespace fc = specs::fused_fc;

FcPlugin::FcPlugin(FcConfig const& config)
    : mCfg(config)
    , mGemm(new LtGemm())
    , mSerial(fc::kSPEC)
{
}

FcPlugin::FcPlugin(FcPlugin const& other)
    : IPluginV3(other)
    , IPluginV3OneCore(other)
    , IPluginV3OneBuild(other)
    , IPluginV3OneRuntime(other)
    , mCfg(other.mCfg)
    , mGemm(new LtGemm()) // cuBLASLt state is not shared: re-planned on the next shape
    , mSerial(fc::kSPEC)
{
}

IPluginCapability* FcPlugin::getCapabilityInterface(PluginCapabilityType type) noexcept
{
    switch (type)
    {
    case PluginCapabilityType::kCORE: return static_cast<IPluginV3OneCore*>(this);
    case PluginCapabilityType::kBUILD: return static_cast<IPluginV3OneBuild*>(this);
    case PluginCapabilityType::kRUNTIME: return static_cast<IPluginV3OneRuntime*>(this);
    }
    return nullptr;
}

IPluginV3* FcPlugin::clone() noexcept
{
    try
    {
        return new FcPlugin(*this);
    }
    catch (std::exception const& e)
    {
        logError(e.what());
    }
    return nullptr;
}

char const* FcPlugin::getPluginName() const noexcept
{
    return fc::kSPEC.name;
}

char const* FcPlugin::getPluginVersion() const noexcept
{
    return fc::kSPEC.version;
}

char const* FcPlugin::getPluginNamespace() const noexcept
{
    return fc::kSPEC.pluginNamespace;
}

int32_t FcPlugin::configurePlugin(
    DynamicPluginTensorDesc const* in, int32_t nbInputs, DynamicPluginTensorDesc const* /*out*/, int32_t nbOutputs) noexcept
{
    Dims dims[3];
    for (int32_t i = 0; in != nullptr && i < nbInputs && i < 3; ++i)
    {
        dims[i] = in[i].desc.dims;
    }
    return mCfg.configure(in != nullptr ? dims : nullptr, nbInputs, nbOutputs) ? 0 : -1;
}

int32_t FcPlugin::getOutputDataTypes(
    DataType* outputTypes, int32_t nbOutputs, DataType const* inputTypes, int32_t nbInputs) const noexcept
{
    if (nbOutputs != 1 || nbInputs != fc::kSPEC.maxInputs || !isSupportedType(inputTypes[0]))
    {
        return -1;
    }
    outputTypes[0] = inputTypes[0];
    return 0;
}

int32_t FcPlugin::getOutputShapes(DimsExprs const* inputs, int32_t nbInputs, DimsExprs const* /*shapeInputs*/,
    int32_t /*nbShapeInputs*/, DimsExprs* outputs, int32_t nbOutputs, IExprBuilder& exprBuilder) noexcept
{
    if (nbInputs != fc::kSPEC.maxInputs || nbOutputs != 1 || inputs[0].nbDims < 1)
    {
        return -1;
    }
    outputs[0] = inputs[0];
    outputs[0].d[inputs[0].nbDims - 1] = exprBuilder.constant(mCfg.outFeatures);
    return 0;
}

bool FcPlugin::supportsFormatCombination(
    int32_t pos, DynamicPluginTensorDesc const* inOut, int32_t nbInputs, int32_t nbOutputs) noexcept
{
    if (inOut == nullptr || pos < 0 || pos >= nbInputs + nbOutputs)
    {
        return false;
    }
    return supportsLinear(pos, inOut[pos].desc, inOut[0].desc.type);
}

int32_t FcPlugin::getNbOutputs() const noexcept
{
    return 1;
}

size_t FcPlugin::getWorkspaceSize(DynamicPluginTensorDesc const* /*inputs*/, int32_t /*nbInputs*/,
    DynamicPluginTensorDesc const* /*outputs*/, int32_t /*nbOutputs*/) const noexcept
{
    return FcConfig::kWORKSPACE_BYTES;
}

int32_t FcPlugin::onShapeChange(
    PluginTensorDesc const* in, int32_t nbInputs, PluginTensorDesc const* /*out*/, int32_t nbOutputs) noexcept
{
    return nbOutputs == 1 && mCfg.plan(in, nbInputs, *mGemm) ? 0 : -1;
}

int32_t FcPlugin::enqueue(PluginTensorDesc const* inputDesc, PluginTensorDesc const* /*outputDesc*/,
    void const* const* inputs, void* const* outputs, void* workspace, cudaStream_t stream) noexcept
{
    return mCfg.enqueue(inputDesc, inputs, outputs, workspace, stream, *mGemm);
}

IPluginV3* FcPlugin::attachToContext(IPluginResourceContext* /*context*/) noexcept
{
    return clone();
}

PluginFieldCollection const* FcPlugin::getFieldsToSerialize() noexcept
{
    mCfg.writeFields(mSerial);
    return mSerial.collection();
}

FcPluginCreator::FcPluginCreator()
    : mFieldNames(fc::kSPEC)
{
}

IPluginV3* FcPluginCreator::createPlugin(
    char const* /*name*/, PluginFieldCollection const* fields, TensorRTPhase /*phase*/) noexcept
{
    try
    {
        FcConfig cfg;
        return FcConfig::fromFields(fields, cfg) ? new FcPlugin(cfg) : nullptr;
    }
    catch (std::exception const& e)
    {
        logError(e.what());
    }
    return nullptr;
}

PluginFieldCollection const* FcPluginCreator::getFieldNames() noexcept
{
    return mFieldNames.collection();
}

char const* FcPluginCreator::getPluginName() const noexcept
{
    return fc::kSPEC.name;
}

char const* FcPluginCreator::getPluginVersion() const noexcept
{
    return fc::kSPEC.version;
}

char const* FcPluginCreator::getPluginNamespace() const noexcept
{
    return fc::kSPEC.pluginNamespace;
}

} // namespace fusion
