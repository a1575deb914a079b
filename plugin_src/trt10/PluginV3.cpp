#include "trt10/PluginV3.h"

#include <new>
#include <type_traits>

using namespace nvinfer1;

namespace fusion
{
namespace fc = specs::fused_fc;

// ------------------------------------------------------------------ SpecPluginV3

SpecPluginV3::SpecPluginV3(specs::PluginSpec const& spec)
    : mSpec(spec)
    , mSerial(spec)
{
}

SpecPluginV3::SpecPluginV3(SpecPluginV3 const& other)
    : IPluginV3(other)
    , IPluginV3OneCore(other)
    , IPluginV3OneBuild(other)
    , IPluginV3OneRuntime(other)
    , mSpec(other.mSpec)
    , mSerial(other.mSpec)
{
}

IPluginCapability* SpecPluginV3::getCapabilityInterface(PluginCapabilityType type) noexcept
{
    switch (type)
    {
    case PluginCapabilityType::kCORE: return static_cast<IPluginV3OneCore*>(this);
    case PluginCapabilityType::kBUILD: return static_cast<IPluginV3OneBuild*>(this);
    case PluginCapabilityType::kRUNTIME: return static_cast<IPluginV3OneRuntime*>(this);
    }
    return nullptr;
}

char const* SpecPluginV3::getPluginName() const noexcept
{
    return mSpec.name;
}

char const* SpecPluginV3::getPluginVersion() const noexcept
{
    return mSpec.version;
}

char const* SpecPluginV3::getPluginNamespace() const noexcept
{
    return mSpec.pluginNamespace;
}

int32_t SpecPluginV3::configurePlugin(
    DynamicPluginTensorDesc const* in, int32_t nbInputs, DynamicPluginTensorDesc const* /*out*/, int32_t nbOutputs) noexcept
{
    Dims dims[kMAX_INPUTS];
    for (int32_t i = 0; in != nullptr && i < nbInputs && i < kMAX_INPUTS; ++i)
    {
        dims[i] = in[i].desc.dims;
    }
    return setShapes(in != nullptr ? dims : nullptr, nbInputs, nbOutputs);
}

int32_t SpecPluginV3::getOutputDataTypes(
    DataType* outputTypes, int32_t nbOutputs, DataType const* inputTypes, int32_t nbInputs) const noexcept
{
    if (nbOutputs != mSpec.nbOutputs || nbInputs < 1 || !takesType(inputTypes[0], nbInputs))
    {
        return -1;
    }
    for (int32_t i = 0; i < nbOutputs; ++i)
    {
        outputTypes[i] = inputTypes[0];
    }
    return 0;
}

int32_t SpecPluginV3::getOutputShapes(DimsExprs const* inputs, int32_t nbInputs, DimsExprs const* /*shapeInputs*/,
    int32_t /*nbShapeInputs*/, DimsExprs* outputs, int32_t nbOutputs, IExprBuilder& exprBuilder) noexcept
{
    DimsExprs shape;
    if (nbInputs < mSpec.minInputs || nbInputs > mSpec.maxInputs || nbOutputs != mSpec.nbOutputs
        || !outputShape(inputs[0], exprBuilder, shape))
    {
        return -1;
    }
    for (int32_t i = 0; i < nbOutputs; ++i)
    {
        outputs[i] = shape; // the skip norms' Sum (written only when with_sum = 1) is Y's shape
    }
    return 0;
}

bool SpecPluginV3::supportsFormatCombination(
    int32_t pos, DynamicPluginTensorDesc const* inOut, int32_t nbInputs, int32_t nbOutputs) noexcept
{
    if (inOut == nullptr || pos < 0 || pos >= nbInputs + nbOutputs)
    {
        return false;
    }
    return supportsFormat(pos, inOut[pos].desc, inOut[0].desc.type);
}

int32_t SpecPluginV3::getNbOutputs() const noexcept
{
    return mSpec.nbOutputs;
}

int32_t SpecPluginV3::onShapeChange(
    PluginTensorDesc const* in, int32_t nbInputs, PluginTensorDesc const* /*out*/, int32_t nbOutputs) noexcept
{
    Dims dims[kMAX_INPUTS];
    for (int32_t i = 0; in != nullptr && i < nbInputs && i < kMAX_INPUTS; ++i)
    {
        dims[i] = in[i].dims;
    }
    return setShapes(in != nullptr ? dims : nullptr, nbInputs, nbOutputs);
}

IPluginV3* SpecPluginV3::attachToContext(IPluginResourceContext* /*context*/) noexcept
{
    return clone();
}

PluginFieldCollection const* SpecPluginV3::getFieldsToSerialize() noexcept
{
    writeFields(mSerial);
    return mSerial.collection();
}

bool SpecPluginV3::takesType(DataType xType, int32_t /*nbInputs*/) const noexcept
{
    return isSupportedType(xType);
}

bool SpecPluginV3::supportsFormat(int32_t pos, PluginTensorDesc const& desc, DataType xType) const noexcept
{
    return supportsLinear(pos, desc, xType);
}

// ------------------------------------------------------------------ PluginV3<Config>

// Where the cores differ, PluginV3 asks which one it serves: GroupNorm takes exactly X, Scale
// and B in fp32 / fp16 (no bf16 kernels) and is told no input count; the norms and the skip
// norms differ in how many inputs they check and whether they take every input's desc.
template <class Config>
constexpr bool kGROUP_NORM = std::is_same<Config, GroupNormConfig>::value;
template <class Config>
constexpr bool kNORM = std::is_same<Config, NormConfig>::value;

template <class Config>
PluginV3<Config>::PluginV3(Config const& config)
    : SpecPluginV3(config.spec())
    , mCfg(config)
{
}

template <class Config>
IPluginV3* PluginV3<Config>::clone() noexcept
{
    return new (std::nothrow) PluginV3(*this);
}

template <class Config>
int32_t PluginV3<Config>::setShapes(Dims const* dims, int32_t nbInputs, int32_t nbOutputs) noexcept
{
    // The counts that reach the core's checkShapes (which logs those its spec does not take):
    // GroupNorm exactly its 3, the norms 1 to LayerNorm's 3, the skip norms 1 to 5.
    int32_t const most = kNORM<Config> ? specs::fused_layer_norm::kSPEC.maxInputs : kMAX_INPUTS;
    bool const counted = kGROUP_NORM<Config> ? nbInputs == mSpec.maxInputs : nbInputs >= 1 && nbInputs <= most;
    if (dims == nullptr || !counted || nbOutputs != mSpec.nbOutputs || !mCfg.checkShapes(dims, nbInputs))
    {
        return -1;
    }
    mNbInputs = nbInputs;
    return 0;
}

template <class Config>
bool PluginV3<Config>::outputShape(DimsExprs const& x, IExprBuilder& /*exprBuilder*/, DimsExprs& out) const noexcept
{
    out = x;
    if constexpr (kGROUP_NORM<Config>)
    {
        return x.nbDims >= 2;
    }
    else
    {
        return mCfg.firstNormDim(x.nbDims) >= 0;
    }
}

template <class Config>
bool PluginV3<Config>::takesType(DataType xType, int32_t nbInputs) const noexcept
{
    if constexpr (kGROUP_NORM<Config>)
    {
        return nbInputs == mSpec.maxInputs && (xType == DataType::kFLOAT || xType == DataType::kHALF);
    }
    return SpecPluginV3::takesType(xType, nbInputs);
}

template <class Config>
bool PluginV3<Config>::supportsFormat(int32_t pos, PluginTensorDesc const& desc, DataType xType) const noexcept
{
    if constexpr (kGROUP_NORM<Config>)
    {
        return GroupNormConfig::supportsFormat(pos, desc, xType);
    }
    return SpecPluginV3::supportsFormat(pos, desc, xType);
}

template <class Config>
size_t PluginV3<Config>::getWorkspaceSize(DynamicPluginTensorDesc const* inputs, int32_t nbInputs,
    DynamicPluginTensorDesc const* /*outputs*/, int32_t /*nbOutputs*/) const noexcept
{
    if constexpr (kGROUP_NORM<Config>)
    {
        return inputs == nullptr || nbInputs < 1 ? 0 : mCfg.workspaceSize(inputs[0].max, inputs[0].desc.type);
    }
    return 0;
}

template <class Config>
int32_t PluginV3<Config>::enqueue(PluginTensorDesc const* inputDesc, PluginTensorDesc const* /*outputDesc*/,
    void const* const* inputs, void* const* outputs, void* workspace, cudaStream_t stream) noexcept
{
    if constexpr (kGROUP_NORM<Config>)
    {
        return mCfg.enqueue(inputDesc[0], inputs, outputs, workspace, stream);
    }
    else if constexpr (kNORM<Config>)
    {
        return mCfg.enqueue(inputDesc[0], mNbInputs, inputs, outputs, stream);
    }
    else
    {
        return mCfg.enqueue(inputDesc, mNbInputs, inputs, outputs, stream);
    }
}

template <class Config>
void PluginV3<Config>::writeFields(FieldWriter& w)
{
    mCfg.writeFields(w);
}

template class PluginV3<NormConfig>;
template class PluginV3<SkipNormConfig>;
template class PluginV3<GroupNormConfig>;

// ------------------------------------------------------------------ FcPluginV3

FcPluginV3::FcPluginV3(FcConfig const& config)
    : SpecPluginV3(fc::kSPEC)
    , mCfg(config)
    , mGemm(new LtGemm())
{
}

FcPluginV3::FcPluginV3(FcPluginV3 const& other)
    : SpecPluginV3(other)
    , mCfg(other.mCfg)
    , mGemm(new LtGemm()) // cuBLASLt state is not shared: re-planned on the next shape
{
}

SpecPluginV3* FcPluginV3::create(PluginFieldCollection const* fields)
{
    FcConfig cfg;
    return FcConfig::fromFields(fields, cfg) ? new FcPluginV3(cfg) : nullptr;
}

IPluginV3* FcPluginV3::clone() noexcept
{
    try
    {
        return new FcPluginV3(*this);
    }
    catch (std::exception const& e)
    {
        logError(e.what());
    }
    return nullptr;
}

size_t FcPluginV3::getWorkspaceSize(DynamicPluginTensorDesc const* /*inputs*/, int32_t /*nbInputs*/,
    DynamicPluginTensorDesc const* /*outputs*/, int32_t /*nbOutputs*/) const noexcept
{
    return FcConfig::kWORKSPACE_BYTES;
}

int32_t FcPluginV3::onShapeChange(
    PluginTensorDesc const* in, int32_t nbInputs, PluginTensorDesc const* /*out*/, int32_t nbOutputs) noexcept
{
    // Concrete shapes: choose the cuBLASLt algorithm now, not in enqueue.
    return nbOutputs == 1 && mCfg.plan(in, nbInputs, *mGemm) ? 0 : -1;
}

int32_t FcPluginV3::enqueue(PluginTensorDesc const* inputDesc, PluginTensorDesc const* /*outputDesc*/,
    void const* const* inputs, void* const* outputs, void* workspace, cudaStream_t stream) noexcept
{
    return mCfg.enqueue(inputDesc, inputs, outputs, workspace, stream, *mGemm);
}

int32_t FcPluginV3::setShapes(Dims const* dims, int32_t nbInputs, int32_t nbOutputs) noexcept
{
    return mCfg.configure(dims, nbInputs, nbOutputs) ? 0 : -1;
}

bool FcPluginV3::outputShape(DimsExprs const& x, IExprBuilder& exprBuilder, DimsExprs& out) const noexcept
{
    if (x.nbDims < 1)
    {
        return false;
    }
    out = x;
    out.d[x.nbDims - 1] = exprBuilder.constant(mCfg.outFeatures);
    return true;
}

bool FcPluginV3::takesType(DataType xType, int32_t nbInputs) const noexcept
{
    return nbInputs == mSpec.maxInputs && isSupportedType(xType);
}

void FcPluginV3::writeFields(FieldWriter& w)
{
    mCfg.writeFields(w);
}

// ------------------------------------------------------------------ PluginCreatorV3

PluginCreatorV3::PluginCreatorV3(specs::PluginSpec const& spec, Make make)
    : mSpec(spec)
    , mMake(make)
    , mFieldNames(spec)
{
}

IPluginV3* PluginCreatorV3::createPlugin(
    char const* /*name*/, PluginFieldCollection const* fc, TensorRTPhase /*phase*/) noexcept
{
    try
    {
        return mMake(fc);
    }
    catch (std::exception const& e)
    {
        logError(e.what());
    }
    return nullptr;
}

PluginFieldCollection const* PluginCreatorV3::getFieldNames() noexcept
{
    return mFieldNames.collection();
}

char const* PluginCreatorV3::getPluginName() const noexcept
{
    return mSpec.name;
}

char const* PluginCreatorV3::getPluginVersion() const noexcept
{
    return mSpec.version;
}

char const* PluginCreatorV3::getPluginNamespace() const noexcept
{
    return mSpec.pluginNamespace;
}

} // namespace fusion
