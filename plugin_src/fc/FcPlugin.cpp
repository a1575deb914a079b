#include "fc/FcPlugin.h"

#include <cmath>
#include <new>

using namespace nvinfer1;

namespace fusion
{
namespace fc = specs::fused_fc;

// The spec's choices, in the order Activation enumerates them (the build fails if the
// spec changes them: the glue must then learn the new activation).
static_assert(fc::kNB_ACTIVATION_CHOICES == 4, "FusedFC activations changed in fusion/specs.py");
static_assert(sameString(fc::kACTIVATION_CHOICES[0], "none") && sameString(fc::kACTIVATION_CHOICES[1], "relu")
        && sameString(fc::kACTIVATION_CHOICES[2], "gelu_erf") && sameString(fc::kACTIVATION_CHOICES[3], "gelu_tanh"),
    "FusedFC activations changed in fusion/specs.py");
static_assert(fc::kINPUT_X == 0 && fc::kINPUT_W == 1 && fc::kINPUT_B == 2, "unexpected FusedFC inputs");

namespace
{
std::string const kNAME = fc::kSPEC.name;
}

FcPlugin::FcPlugin(int32_t outFeatures, int32_t transposeWeight, float alpha, std::string activation)
    : mOutFeatures(outFeatures)
    , mTransposeWeight(transposeWeight)
    , mAlpha(alpha)
    , mActivationName(std::move(activation))
    , mActivation(static_cast<Activation>(activationIndex(mActivationName)))
    , mGemm(new LtGemm())
    , mSerial(fc::kSPEC)
{
}

FcPlugin::FcPlugin(FcPlugin const& other)
    : IPluginV3(other)
    , IPluginV3OneCore(other)
    , IPluginV3OneBuild(other)
    , IPluginV3OneRuntime(other)
    , mOutFeatures(other.mOutFeatures)
    , mTransposeWeight(other.mTransposeWeight)
    , mAlpha(other.mAlpha)
    , mActivationName(other.mActivationName)
    , mActivation(other.mActivation)
    , mGemm(new LtGemm()) // cuBLASLt state is not shared: re-planned on the next shape
    , mSerial(fc::kSPEC)
{
}

int32_t FcPlugin::activationIndex(std::string const& name) noexcept
{
    for (int32_t i = 0; i < fc::kNB_ACTIVATION_CHOICES; ++i)
    {
        if (name == fc::kACTIVATION_CHOICES[i])
        {
            return i;
        }
    }
    return -1;
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

bool FcPlugin::checkDims(Dims const& x, Dims const& w, Dims const& b) const noexcept
{
    if (x.nbDims < 1 || w.nbDims != 2)
    {
        logError(kNAME + ": X needs rank >= 1 and W rank 2");
        return false;
    }
    int64_t const k = x.d[x.nbDims - 1];
    int64_t const wk = w.d[mTransposeWeight != 0 ? 1 : 0];
    int64_t const wn = w.d[mTransposeWeight != 0 ? 0 : 1];
    int64_t const bn = volume(b, 0, b.nbDims);
    bool const ok = (k < 0 || wk < 0 || k == wk) && (wn < 0 || wn == mOutFeatures) && (bn < 0 || bn == mOutFeatures);
    if (!ok)
    {
        logError(kNAME + ": shapes do not fit: X[..., " + std::to_string(k) + "], W[" + std::to_string(w.d[0]) + ", "
            + std::to_string(w.d[1]) + "] (transpose_weight=" + std::to_string(mTransposeWeight) + "), B of "
            + std::to_string(bn) + ", out_features=" + std::to_string(mOutFeatures));
    }
    return ok;
}

int32_t FcPlugin::configurePlugin(
    DynamicPluginTensorDesc const* in, int32_t nbInputs, DynamicPluginTensorDesc const* /*out*/, int32_t nbOutputs) noexcept
{
    if (in == nullptr || nbInputs != fc::kSPEC.maxInputs || nbOutputs != 1)
    {
        logError(kNAME + ": takes X, W, B and gives one output");
        return -1;
    }
    if (!checkDims(in[0].desc.dims, in[1].desc.dims, in[2].desc.dims))
    {
        return -1;
    }
    // First configure: open cuBLASLt now, so a missing library fails the build, not inference.
    std::string error;
    if (!LtGemm::available(error))
    {
        logError(error);
        return -1;
    }
    return 0;
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
    outputs[0].d[inputs[0].nbDims - 1] = exprBuilder.constant(mOutFeatures);
    return 0;
}

bool FcPlugin::supportsFormatCombination(
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
    return pos == 0 ? isSupportedType(d.type) : d.type == inOut[0].desc.type;
}

int32_t FcPlugin::getNbOutputs() const noexcept
{
    return 1;
}

size_t FcPlugin::getWorkspaceSize(DynamicPluginTensorDesc const* /*inputs*/, int32_t /*nbInputs*/,
    DynamicPluginTensorDesc const* /*outputs*/, int32_t /*nbOutputs*/) const noexcept
{
    return kWORKSPACE_BYTES;
}

bool FcPlugin::shapeOf(PluginTensorDesc const* in, GemmShape& s) const noexcept
{
    Dims const& x = in[0].dims;
    ElemType type;
    if (x.nbDims < 1 || !toElemType(in[0].type, type))
    {
        return false;
    }
    s.m = volume(x, 0, x.nbDims - 1);
    s.k = x.d[x.nbDims - 1];
    s.n = mOutFeatures;
    s.type = type;
    s.transposeWeight = mTransposeWeight != 0;
    s.act = mActivation;
    s.workspace = kWORKSPACE_BYTES;
    s.alignment = 256;
    return s.m >= 0 && s.k > 0;
}

int32_t FcPlugin::onShapeChange(
    PluginTensorDesc const* in, int32_t nbInputs, PluginTensorDesc const* /*out*/, int32_t nbOutputs) noexcept
{
    if (in == nullptr || nbInputs != fc::kSPEC.maxInputs || nbOutputs != 1
        || !checkDims(in[0].dims, in[1].dims, in[2].dims))
    {
        return -1;
    }
    GemmShape s;
    std::string error;
    if (!shapeOf(in, s) || !mGemm->plan(s, error))
    {
        logError(error.empty() ? kNAME + ": bad input shape" : error);
        return -1;
    }
    return 0;
}

int32_t FcPlugin::enqueue(PluginTensorDesc const* inputDesc, PluginTensorDesc const* /*outputDesc*/,
    void const* const* inputs, void* const* outputs, void* workspace, cudaStream_t stream) noexcept
{
    GemmShape s;
    std::string error;
    if (!shapeOf(inputDesc, s))
    {
        logError(kNAME + ": bad input shape");
        return -1;
    }
    void const* ptrs[] = {inputs[0], inputs[1], inputs[2], outputs[0]};
    s.alignment = pointerAlignment(ptrs, 4);
    s.workspace = workspace != nullptr ? kWORKSPACE_BYTES : 0;
    // Normally planned by onShapeChange; re-plan only for unusual pointers or no workspace.
    if (!mGemm->plannedFor(s) && !mGemm->plan(s, error))
    {
        logError(error);
        return -1;
    }
    if (!mGemm->run(inputs[0], inputs[1], inputs[2], outputs[0], mAlpha, workspace, stream, error))
    {
        logError(error);
        return -1;
    }
    return 0;
}

IPluginV3* FcPlugin::attachToContext(IPluginResourceContext* /*context*/) noexcept
{
    return clone();
}

PluginFieldCollection const* FcPlugin::getFieldsToSerialize() noexcept
{
    mSerial.clear();
    mSerial.add(fc::kOUT_FEATURES, &mOutFeatures, 1);
    mSerial.add(fc::kTRANSPOSE_WEIGHT, &mTransposeWeight, 1);
    mSerial.add(fc::kALPHA, &mAlpha, 1);
    mSerial.add(fc::kACTIVATION, mActivationName.c_str(), static_cast<int32_t>(mActivationName.size()));
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
        FieldReader const r(fc::kSPEC, fields);
        if (!r.ok())
        {
            logError(r.error());
            return nullptr;
        }
        int32_t const n = r.getInt(fc::kOUT_FEATURES, 0);
        int32_t const t = r.getInt(fc::kTRANSPOSE_WEIGHT, fc::kTRANSPOSE_WEIGHT_DEFAULT);
        float const alpha = r.getFloat(fc::kALPHA, fc::kALPHA_DEFAULT);
        std::string const act = r.getString(fc::kACTIVATION, fc::kACTIVATION_DEFAULT);
        bool tOk = false;
        for (int32_t c : fc::kTRANSPOSE_WEIGHT_CHOICES)
        {
            tOk = tOk || c == t;
        }
        if (n <= 0 || !tOk || !std::isfinite(alpha) || FcPlugin::activationIndex(act) < 0)
        {
            logError(kNAME + ": bad fields: out_features=" + std::to_string(n) + " transpose_weight="
                + std::to_string(t) + " alpha=" + std::to_string(alpha) + " activation='" + act + "'");
            return nullptr;
        }
        return new FcPlugin(n, t, alpha, act);
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
