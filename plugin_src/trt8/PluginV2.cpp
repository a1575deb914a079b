#include "trt8/PluginV2.h"

#include <cstring>
#include <new>

using namespace nvinfer1;

namespace fusion
{
namespace fc = specs::fused_fc;

// ------------------------------------------------------------------ SpecPluginV2

SpecPluginV2::SpecPluginV2(specs::PluginSpec const& spec)
    : mSpec(spec)
    , mNamespace(spec.pluginNamespace)
    , mSerial(spec)
{
}

SpecPluginV2::SpecPluginV2(SpecPluginV2 const& other)
    : IPluginV2DynamicExt(other)
    , mSpec(other.mSpec)
    , mNamespace(other.mNamespace)
    , mSerial(other.mSpec)
{
}

char const* SpecPluginV2::getPluginType() const noexcept
{
    return mSpec.name;
}

char const* SpecPluginV2::getPluginVersion() const noexcept
{
    return mSpec.version;
}

int32_t SpecPluginV2::getNbOutputs() const noexcept
{
    return mSpec.nbOutputs;
}

int32_t SpecPluginV2::initialize() noexcept
{
    return 0;
}

void SpecPluginV2::terminate() noexcept {}

std::vector<char> SpecPluginV2::pack() const
{
    // writeFields only points the writer at members; the plugin itself does not change.
    const_cast<SpecPluginV2*>(this)->writeFields(mSerial);
    return packFields(mSerial.collection());
}

size_t SpecPluginV2::getSerializationSize() const noexcept
{
    try
    {
        return pack().size();
    }
    catch (std::exception const& e)
    {
        logError(e.what());
    }
    return 0;
}

void SpecPluginV2::serialize(void* buffer) const noexcept
{
    try
    {
        std::vector<char> const bytes = pack();
        memcpy(buffer, bytes.data(), bytes.size());
    }
    catch (std::exception const& e)
    {
        logError(e.what());
    }
}

void SpecPluginV2::destroy() noexcept
{
    delete this;
}

void SpecPluginV2::setPluginNamespace(char const* pluginNamespace) noexcept
{
    mNamespace = pluginNamespace != nullptr ? pluginNamespace : "";
}

char const* SpecPluginV2::getPluginNamespace() const noexcept
{
    return mNamespace.c_str();
}

DataType SpecPluginV2::getOutputDataType(int32_t /*index*/, DataType const* inputTypes, int32_t nbInputs) const noexcept
{
    return nbInputs > 0 ? inputTypes[0] : DataType::kFLOAT;
}

bool SpecPluginV2::supportsFormatCombination(
    int32_t pos, PluginTensorDesc const* inOut, int32_t nbInputs, int32_t nbOutputs) noexcept
{
    if (inOut == nullptr || pos < 0 || pos >= nbInputs + nbOutputs)
    {
        return false;
    }
    return supportsLinear(pos, inOut[pos], inOut[0].type);
}

namespace
{
// Dims of each input, resolved (execution phase) or with -1 wildcards (build phase).
bool collectDims(DynamicPluginTensorDesc const* in, int32_t nbInputs, Dims* dims, bool& known)
{
    if (in == nullptr || nbInputs < 1 || nbInputs > 3)
    {
        return false;
    }
    known = true;
    for (int32_t i = 0; i < nbInputs; ++i)
    {
        dims[i] = in[i].desc.dims;
        known = known && volume(dims[i], 0, dims[i].nbDims) >= 0;
    }
    return true;
}
} // namespace

// ------------------------------------------------------------------ NormPluginV2

NormPluginV2::NormPluginV2(NormConfig const& config)
    : SpecPluginV2(config.spec())
    , mCfg(config)
{
}

SpecPluginV2* NormPluginV2::create(NormOp op, PluginFieldCollection const* fc)
{
    NormConfig cfg;
    return NormConfig::fromFields(op, fc, cfg) ? new NormPluginV2(cfg) : nullptr;
}

IPluginV2DynamicExt* NormPluginV2::clone() const noexcept
{
    return new (std::nothrow) NormPluginV2(*this);
}

DimsExprs NormPluginV2::getOutputDimensions(
    int32_t outputIndex, DimsExprs const* inputs, int32_t nbInputs, IExprBuilder& /*exprBuilder*/) noexcept
{
    if (outputIndex != 0 || nbInputs < mSpec.minInputs || nbInputs > mSpec.maxInputs
        || mCfg.firstNormDim(inputs[0].nbDims) < 0)
    {
        logError(std::string(mSpec.name) + ": bad inputs for the output shape");
        return DimsExprs{};
    }
    return inputs[0];
}

void NormPluginV2::configurePlugin(
    DynamicPluginTensorDesc const* in, int32_t nbInputs, DynamicPluginTensorDesc const* /*out*/, int32_t nbOutputs) noexcept
{
    Dims dims[3];
    bool known = false;
    if (nbOutputs == 1 && collectDims(in, nbInputs, dims, known) && mCfg.checkShapes(dims, nbInputs))
    {
        mNbInputs = nbInputs;
    }
}

size_t NormPluginV2::getWorkspaceSize(
    PluginTensorDesc const* /*inputs*/, int32_t /*nbInputs*/, PluginTensorDesc const* /*outputs*/, int32_t /*nbOutputs*/) const noexcept
{
    return 0;
}

int32_t NormPluginV2::enqueue(PluginTensorDesc const* inputDesc, PluginTensorDesc const* /*outputDesc*/,
    void const* const* inputs, void* const* outputs, void* /*workspace*/, cudaStream_t stream) noexcept
{
    return mCfg.enqueue(inputDesc[0], mNbInputs, inputs, outputs, stream);
}

void NormPluginV2::writeFields(FieldWriter& w)
{
    mCfg.writeFields(w);
}

// ------------------------------------------------------------------ SkipNormPluginV2

SkipNormPluginV2::SkipNormPluginV2(SkipNormConfig const& config)
    : SpecPluginV2(config.spec())
    , mCfg(config)
{
}

SpecPluginV2* SkipNormPluginV2::create(NormOp op, PluginFieldCollection const* fc)
{
    SkipNormConfig cfg;
    return SkipNormConfig::fromFields(op, fc, cfg) ? new SkipNormPluginV2(cfg) : nullptr;
}

IPluginV2DynamicExt* SkipNormPluginV2::clone() const noexcept
{
    return new (std::nothrow) SkipNormPluginV2(*this);
}

DimsExprs SkipNormPluginV2::getOutputDimensions(
    int32_t outputIndex, DimsExprs const* inputs, int32_t nbInputs, IExprBuilder& /*exprBuilder*/) noexcept
{
    if (outputIndex < 0 || outputIndex > 1 || nbInputs < mSpec.minInputs || nbInputs > mSpec.maxInputs
        || mCfg.firstNormDim(inputs[0].nbDims) < 0)
    {
        logError(std::string(mSpec.name) + ": bad inputs for the output shape");
        return DimsExprs{};
    }
    return inputs[0]; // Y and Sum have X's shape
}

void SkipNormPluginV2::configurePlugin(
    DynamicPluginTensorDesc const* in, int32_t nbInputs, DynamicPluginTensorDesc const* /*out*/, int32_t nbOutputs) noexcept
{
    if (in == nullptr || nbInputs < 1 || nbInputs > 5 || nbOutputs != 2)
    {
        return;
    }
    Dims dims[5];
    for (int32_t i = 0; i < nbInputs; ++i)
    {
        dims[i] = in[i].desc.dims;
    }
    if (mCfg.checkShapes(dims, nbInputs))
    {
        mNbInputs = nbInputs;
    }
}

size_t SkipNormPluginV2::getWorkspaceSize(
    PluginTensorDesc const* /*inputs*/, int32_t /*nbInputs*/, PluginTensorDesc const* /*outputs*/, int32_t /*nbOutputs*/) const noexcept
{
    return 0;
}

int32_t SkipNormPluginV2::enqueue(PluginTensorDesc const* inputDesc, PluginTensorDesc const* /*outputDesc*/,
    void const* const* inputs, void* const* outputs, void* /*workspace*/, cudaStream_t stream) noexcept
{
    return mCfg.enqueue(inputDesc, mNbInputs, inputs, outputs, stream);
}

void SkipNormPluginV2::writeFields(FieldWriter& w)
{
    mCfg.writeFields(w);
}

// ------------------------------------------------------------------ FcPluginV2

FcPluginV2::FcPluginV2(FcConfig const& config)
    : SpecPluginV2(fc::kSPEC)
    , mCfg(config)
    , mGemm(new LtGemm())
{
}

SpecPluginV2* FcPluginV2::create(PluginFieldCollection const* fields)
{
    FcConfig cfg;
    return FcConfig::fromFields(fields, cfg) ? new FcPluginV2(cfg) : nullptr;
}

IPluginV2DynamicExt* FcPluginV2::clone() const noexcept
{
    try
    {
        return new FcPluginV2(mCfg); // cuBLASLt state is not shared: re-planned on the next shape
    }
    catch (std::exception const& e)
    {
        logError(e.what());
    }
    return nullptr;
}

DimsExprs FcPluginV2::getOutputDimensions(
    int32_t outputIndex, DimsExprs const* inputs, int32_t nbInputs, IExprBuilder& exprBuilder) noexcept
{
    if (outputIndex != 0 || nbInputs != mSpec.maxInputs || inputs[0].nbDims < 1)
    {
        logError(std::string(mSpec.name) + ": bad inputs for the output shape");
        return DimsExprs{};
    }
    DimsExprs out = inputs[0];
    out.d[out.nbDims - 1] = exprBuilder.constant(mCfg.outFeatures);
    return out;
}

void FcPluginV2::configurePlugin(
    DynamicPluginTensorDesc const* in, int32_t nbInputs, DynamicPluginTensorDesc const* /*out*/, int32_t nbOutputs) noexcept
{
    Dims dims[3];
    bool known = false;
    if (!collectDims(in, nbInputs, dims, known) || !mCfg.configure(dims, nbInputs, nbOutputs) || !known)
    {
        return;
    }
    // Execution phase (concrete shapes): choose the cuBLASLt algorithm now, not in enqueue.
    PluginTensorDesc descs[3];
    for (int32_t i = 0; i < nbInputs; ++i)
    {
        descs[i] = in[i].desc;
    }
    mCfg.plan(descs, nbInputs, *mGemm);
}

size_t FcPluginV2::getWorkspaceSize(
    PluginTensorDesc const* /*inputs*/, int32_t /*nbInputs*/, PluginTensorDesc const* /*outputs*/, int32_t /*nbOutputs*/) const noexcept
{
    return FcConfig::kWORKSPACE_BYTES;
}

int32_t FcPluginV2::enqueue(PluginTensorDesc const* inputDesc, PluginTensorDesc const* /*outputDesc*/,
    void const* const* inputs, void* const* outputs, void* workspace, cudaStream_t stream) noexcept
{
    return mCfg.enqueue(inputDesc, inputs, outputs, workspace, stream, *mGemm);
}

void FcPluginV2::writeFields(FieldWriter& w)
{
    mCfg.writeFields(w);
}

// ------------------------------------------------------------------ PluginCreatorV2

PluginCreatorV2::PluginCreatorV2(specs::PluginSpec const& spec, Make make)
    : mSpec(spec)
    , mMake(make)
    , mFieldNames(spec)
    , mNamespace(spec.pluginNamespace)
{
}

char const* PluginCreatorV2::getPluginName() const noexcept
{
    return mSpec.name;
}

char const* PluginCreatorV2::getPluginVersion() const noexcept
{
    return mSpec.version;
}

PluginFieldCollection const* PluginCreatorV2::getFieldNames() noexcept
{
    return mFieldNames.collection();
}

IPluginV2* PluginCreatorV2::createPlugin(char const* /*name*/, PluginFieldCollection const* fc) noexcept
{
    try
    {
        SpecPluginV2* plugin = mMake(fc);
        if (plugin != nullptr)
        {
            plugin->setPluginNamespace(mNamespace.c_str());
        }
        return plugin;
    }
    catch (std::exception const& e)
    {
        logError(e.what());
    }
    return nullptr;
}

IPluginV2* PluginCreatorV2::deserializePlugin(char const* name, void const* data, size_t length) noexcept
{
    try
    {
        PackedFields fields;
        std::string error;
        if (!fields.parse(data, length, error))
        {
            logError(std::string(mSpec.name) + ": " + error);
            return nullptr;
        }
        return createPlugin(name, fields.collection());
    }
    catch (std::exception const& e)
    {
        logError(e.what());
    }
    return nullptr;
}

void PluginCreatorV2::setPluginNamespace(char const* pluginNamespace) noexcept
{
    mNamespace = pluginNamespace != nullptr ? pluginNamespace : "";
}

char const* PluginCreatorV2::getPluginNamespace() const noexcept
{
    return mNamespace.c_str();
}

// ------------------------------------------------------------------ GroupNormPluginV2

GroupNormPluginV2::GroupNormPluginV2(GroupNormConfig const& config)
    : SpecPluginV2(GroupNormConfig::spec())
    , mCfg(config)
{
}

SpecPluginV2* GroupNormPluginV2::create(PluginFieldCollection const* fc)
{
    GroupNormConfig cfg;
    return GroupNormConfig::fromFields(fc, cfg) ? new GroupNormPluginV2(cfg) : nullptr;
}

IPluginV2DynamicExt* GroupNormPluginV2::clone() const noexcept
{
    return new (std::nothrow) GroupNormPluginV2(*this);
}

DimsExprs GroupNormPluginV2::getOutputDimensions(
    int32_t outputIndex, DimsExprs const* inputs, int32_t nbInputs, IExprBuilder& /*exprBuilder*/) noexcept
{
    if (outputIndex != 0 || nbInputs != 3 || inputs[0].nbDims < 2)
    {
        logError(std::string(mSpec.name) + ": bad inputs for the output shape");
        return DimsExprs{};
    }
    return inputs[0];
}

bool GroupNormPluginV2::supportsFormatCombination(
    int32_t pos, PluginTensorDesc const* inOut, int32_t nbInputs, int32_t nbOutputs) noexcept
{
    if (inOut == nullptr || pos < 0 || pos >= nbInputs + nbOutputs)
    {
        return false;
    }
    return GroupNormConfig::supportsFormat(pos, inOut[pos], inOut[0].type);
}

void GroupNormPluginV2::configurePlugin(
    DynamicPluginTensorDesc const* in, int32_t nbInputs, DynamicPluginTensorDesc const* /*out*/, int32_t nbOutputs) noexcept
{
    Dims dims[3];
    bool known = false;
    if (nbOutputs == 1 && collectDims(in, nbInputs, dims, known))
    {
        mCfg.checkShapes(dims, nbInputs); // logs what does not fit; enqueue checks again
    }
}

size_t GroupNormPluginV2::getWorkspaceSize(
    PluginTensorDesc const* inputs, int32_t nbInputs, PluginTensorDesc const* /*outputs*/, int32_t /*nbOutputs*/) const noexcept
{
    return inputs == nullptr || nbInputs < 1 ? 0 : mCfg.workspaceSize(inputs[0].dims, inputs[0].type);
}

int32_t GroupNormPluginV2::enqueue(PluginTensorDesc const* inputDesc, PluginTensorDesc const* /*outputDesc*/,
    void const* const* inputs, void* const* outputs, void* workspace, cudaStream_t stream) noexcept
{
    return mCfg.enqueue(inputDesc[0], inputs, outputs, workspace, stream);
}

void GroupNormPluginV2::writeFields(FieldWriter& w)
{
    mCfg.writeFields(w);
}

} // namespace fusion
