#include "fc/fcCore.h"

#include <cmath>

using namespace nvinfer1;

namespace fusion
{
namespace fc = specs::fused_fc;

// The spec's choices, in the order Activation enumerates them (the build fails if the
// spec changes them: the glue must then learn the new activation).
static_assert(fc::kNB_ACTIVATION_CHOICES == 4, "FusedFC activations changed in fusion/rewrite/specs.py");
static_assert(sameString(fc::kACTIVATION_CHOICES[0], "none") && sameString(fc::kACTIVATION_CHOICES[1], "relu")
        && sameString(fc::kACTIVATION_CHOICES[2], "gelu_erf") && sameString(fc::kACTIVATION_CHOICES[3], "gelu_tanh"),
    "FusedFC activations changed in fusion/rewrite/specs.py");
static_assert(fc::kINPUT_X == 0 && fc::kINPUT_W == 1 && fc::kINPUT_B == 2, "unexpected FusedFC inputs");

namespace
{
std::string const kNAME = fc::kSPEC.name;
}

int32_t FcConfig::activationIndex(std::string const& name) noexcept
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

bool FcConfig::fromFields(PluginFieldCollection const* fields, FcConfig& out)
{
    FieldReader const r(fc::kSPEC, fields);
    if (!r.ok())
    {
        logError(r.error());
        return false;
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
    int32_t const actIndex = activationIndex(act);
    if (n <= 0 || !tOk || !std::isfinite(alpha) || actIndex < 0)
    {
        logError(kNAME + ": bad fields: out_features=" + std::to_string(n) + " transpose_weight=" + std::to_string(t)
            + " alpha=" + std::to_string(alpha) + " activation='" + act + "'");
        return false;
    }
    out.outFeatures = n;
    out.transposeWeight = t;
    out.alpha = alpha;
    out.activationName = act;
    out.activation = static_cast<Activation>(actIndex);
    return true;
}

bool FcConfig::checkDims(Dims const& x, Dims const& w, Dims const& b) const noexcept
{
    if (x.nbDims < 1 || w.nbDims != 2)
    {
        logError(kNAME + ": X needs rank >= 1 and W rank 2");
        return false;
    }
    int64_t const k = x.d[x.nbDims - 1];
    int64_t const wk = w.d[transposeWeight != 0 ? 1 : 0];
    int64_t const wn = w.d[transposeWeight != 0 ? 0 : 1];
    int64_t const bn = volume(b, 0, b.nbDims);
    bool const ok = (k < 0 || wk < 0 || k == wk) && (wn < 0 || wn == outFeatures) && (bn < 0 || bn == outFeatures);
    if (!ok)
    {
        logError(kNAME + ": shapes do not fit: X[..., " + std::to_string(k) + "], W[" + std::to_string(w.d[0]) + ", "
            + std::to_string(w.d[1]) + "] (transpose_weight=" + std::to_string(transposeWeight) + "), B of "
            + std::to_string(bn) + ", out_features=" + std::to_string(outFeatures));
    }
    return ok;
}

bool FcConfig::configure(Dims const* dims, int32_t nbInputs, int32_t nbOutputs) const noexcept
{
    if (dims == nullptr || nbInputs != fc::kSPEC.maxInputs || nbOutputs != 1)
    {
        logError(kNAME + ": takes X, W, B and gives one output");
        return false;
    }
    if (!checkDims(dims[0], dims[1], dims[2]))
    {
        return false;
    }
    // Open cuBLASLt now, so a missing library fails the build, not inference.
    std::string error;
    if (!LtGemm::available(error))
    {
        logError(error);
        return false;
    }
    return true;
}

bool FcConfig::shapeOf(PluginTensorDesc const* in, GemmShape& s) const noexcept
{
    Dims const& x = in[0].dims;
    ElemType type;
    if (x.nbDims < 1 || !toElemType(in[0].type, type))
    {
        return false;
    }
    s.m = volume(x, 0, x.nbDims - 1);
    s.k = x.d[x.nbDims - 1];
    s.n = outFeatures;
    s.type = type;
    s.transposeWeight = transposeWeight != 0;
    s.act = activation;
    s.workspace = kWORKSPACE_BYTES;
    s.alignment = 256;
    return s.m >= 0 && s.k > 0;
}

bool FcConfig::plan(PluginTensorDesc const* in, int32_t nbInputs, LtGemm& gemm) const noexcept
{
    if (in == nullptr || nbInputs != fc::kSPEC.maxInputs || !checkDims(in[0].dims, in[1].dims, in[2].dims))
    {
        return false;
    }
    GemmShape s;
    std::string error;
    if (!shapeOf(in, s) || !gemm.plan(s, error))
    {
        logError(error.empty() ? kNAME + ": bad input shape" : error);
        return false;
    }
    return true;
}

int32_t FcConfig::enqueue(PluginTensorDesc const* inputDesc, void const* const* inputs, void* const* outputs,
    void* workspace, cudaStream_t stream, LtGemm& gemm) const noexcept
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
    // Normally planned at the shape change; re-plan only for unusual pointers or no workspace.
    if (!gemm.plannedFor(s) && !gemm.plan(s, error))
    {
        logError(error);
        return -1;
    }
    if (!gemm.run(inputs[0], inputs[1], inputs[2], outputs[0], alpha, workspace, stream, error))
    {
        logError(error);
        return -1;
    }
    return 0;
}

void FcConfig::writeFields(FieldWriter& w)
{
    w.clear();
    w.add(fc::kOUT_FEATURES, &outFeatures, 1);
    w.add(fc::kTRANSPOSE_WEIGHT, &transposeWeight, 1);
    w.add(fc::kALPHA, &alpha, 1);
    w.add(fc::kACTIVATION, activationName.c_str(), static_cast<int32_t>(activationName.size()));
}

} // namespace fusion
