// TensorRT >= 10 glue: every fusion plugin as an IPluginV3 (OneCore/OneBuild/OneRuntime) with
// IPluginCreatorV3One creators.  As trt8/PluginV2.h for TensorRT 8, the cores (common/normCore.h,
// skipnorm/skipCore.h, groupnorm/groupNormCore.h, fc/fcCore.h) do the work; SpecPluginV3 does
// what every plugin does the same way and asks the plugin only for what differs.
#pragma once

#include "common/normCore.h"
#include "fc/fcCore.h"
#include "groupnorm/groupNormCore.h"
#include "skipnorm/skipCore.h"

#include <memory>

#if NV_TENSORRT_MAJOR < 10
#error "plugin_src/trt10 is the IPluginV3 glue: build it against TensorRT >= 10 headers"
#endif

namespace fusion
{

// Identity, outputs, input counts and the serialized fields from the spec; every output of X's
// type and of one shape; linear formats; dims gathered for configurePlugin and onShapeChange.
class SpecPluginV3 : public nvinfer1::IPluginV3,
                     public nvinfer1::IPluginV3OneCore,
                     public nvinfer1::IPluginV3OneBuild,
                     public nvinfer1::IPluginV3OneRuntime
{
public:
    explicit SpecPluginV3(specs::PluginSpec const& spec);
    SpecPluginV3(SpecPluginV3 const& other);
    SpecPluginV3& operator=(SpecPluginV3 const&) = delete;
    ~SpecPluginV3() override = default;

    // IPluginV3
    nvinfer1::IPluginCapability* getCapabilityInterface(nvinfer1::PluginCapabilityType type) noexcept override;

    // IPluginV3OneCore
    char const* getPluginName() const noexcept override;
    char const* getPluginVersion() const noexcept override;
    char const* getPluginNamespace() const noexcept override;

    // IPluginV3OneBuild
    int32_t configurePlugin(nvinfer1::DynamicPluginTensorDesc const* in, int32_t nbInputs,
        nvinfer1::DynamicPluginTensorDesc const* out, int32_t nbOutputs) noexcept override;
    int32_t getOutputDataTypes(nvinfer1::DataType* outputTypes, int32_t nbOutputs,
        nvinfer1::DataType const* inputTypes, int32_t nbInputs) const noexcept override;
    int32_t getOutputShapes(nvinfer1::DimsExprs const* inputs, int32_t nbInputs, nvinfer1::DimsExprs const* shapeInputs,
        int32_t nbShapeInputs, nvinfer1::DimsExprs* outputs, int32_t nbOutputs,
        nvinfer1::IExprBuilder& exprBuilder) noexcept override;
    bool supportsFormatCombination(int32_t pos, nvinfer1::DynamicPluginTensorDesc const* inOut, int32_t nbInputs,
        int32_t nbOutputs) noexcept override;
    int32_t getNbOutputs() const noexcept override;

    // IPluginV3OneRuntime
    int32_t onShapeChange(nvinfer1::PluginTensorDesc const* in, int32_t nbInputs, nvinfer1::PluginTensorDesc const* out,
        int32_t nbOutputs) noexcept override;
    nvinfer1::IPluginV3* attachToContext(nvinfer1::IPluginResourceContext* context) noexcept override;
    nvinfer1::PluginFieldCollection const* getFieldsToSerialize() noexcept override;

protected:
    // The most inputs any plugin takes (the skip norms' X, Skip, Bias, Scale, B).
    static constexpr int32_t kMAX_INPUTS = 5;

    // Input dims from configurePlugin (-1 where unknown yet) or onShapeChange; null when
    // TensorRT gave no descriptors.  0 if the plugin takes them, else -1.
    virtual int32_t setShapes(nvinfer1::Dims const* dims, int32_t nbInputs, int32_t nbOutputs) noexcept = 0;
    // The shape of every output for this X (the input count already fits the spec).
    virtual bool outputShape(
        nvinfer1::DimsExprs const& x, nvinfer1::IExprBuilder& exprBuilder, nvinfer1::DimsExprs& out) const noexcept
        = 0;
    // Whether the outputs can take X's type with this many inputs (nbInputs >= 1).
    virtual bool takesType(nvinfer1::DataType xType, int32_t nbInputs) const noexcept;
    virtual bool supportsFormat(
        int32_t pos, nvinfer1::PluginTensorDesc const& desc, nvinfer1::DataType xType) const noexcept;
    // Points `w` at the fields to serialize (members of the plugin).
    virtual void writeFields(FieldWriter& w) = 0;

    specs::PluginSpec const& mSpec;

private:
    FieldWriter mSerial;
};

// The plugins whose core holds all their state: FusedLayerNorm / FusedRMSNorm (NormConfig),
// FusedSkipLayerNorm / FusedSkipRMSNorm (SkipNormConfig), FusedGroupNorm (GroupNormConfig).
template <class Config>
class PluginV3 final : public SpecPluginV3
{
public:
    explicit PluginV3(Config const& config);
    // Op: the NormOp for the cores that serve two specs, nothing for GroupNorm.
    template <class... Op>
    static SpecPluginV3* create(nvinfer1::PluginFieldCollection const* fc, Op... op);

    nvinfer1::IPluginV3* clone() noexcept override;
    // FusedGroupNorm's stream kernels' partials (GroupNormConfig::workspaceSize), else 0.
    size_t getWorkspaceSize(nvinfer1::DynamicPluginTensorDesc const* inputs, int32_t nbInputs,
        nvinfer1::DynamicPluginTensorDesc const* outputs, int32_t nbOutputs) const noexcept override;
    int32_t enqueue(nvinfer1::PluginTensorDesc const* inputDesc, nvinfer1::PluginTensorDesc const* outputDesc,
        void const* const* inputs, void* const* outputs, void* workspace, cudaStream_t stream) noexcept override;

protected:
    int32_t setShapes(nvinfer1::Dims const* dims, int32_t nbInputs, int32_t nbOutputs) noexcept override;
    bool outputShape(nvinfer1::DimsExprs const& x, nvinfer1::IExprBuilder& exprBuilder,
        nvinfer1::DimsExprs& out) const noexcept override;
    bool takesType(nvinfer1::DataType xType, int32_t nbInputs) const noexcept override;
    bool supportsFormat(
        int32_t pos, nvinfer1::PluginTensorDesc const& desc, nvinfer1::DataType xType) const noexcept override;
    void writeFields(FieldWriter& w) override;

private:
    Config mCfg;
    int32_t mNbInputs{0}; // set by setShapes: enqueue is not told
};

template <class Config>
template <class... Op>
SpecPluginV3* PluginV3<Config>::create(nvinfer1::PluginFieldCollection const* fc, Op... op)
{
    Config cfg;
    return Config::fromFields(op..., fc, cfg) ? new PluginV3(cfg) : nullptr;
}

// Instantiated in PluginV3.cpp only.
extern template class PluginV3<NormConfig>;
extern template class PluginV3<SkipNormConfig>;
extern template class PluginV3<GroupNormConfig>;
using NormPluginV3 = PluginV3<NormConfig>;
using SkipNormPluginV3 = PluginV3<SkipNormConfig>;
using GroupNormPluginV3 = PluginV3<GroupNormConfig>;

// FusedFC: also owns a cuBLASLt plan, made when the shapes are known, and a workspace.
class FcPluginV3 final : public SpecPluginV3
{
public:
    explicit FcPluginV3(FcConfig const& config);
    FcPluginV3(FcPluginV3 const& other);
    static SpecPluginV3* create(nvinfer1::PluginFieldCollection const* fc);

    nvinfer1::IPluginV3* clone() noexcept override;
    size_t getWorkspaceSize(nvinfer1::DynamicPluginTensorDesc const* inputs, int32_t nbInputs,
        nvinfer1::DynamicPluginTensorDesc const* outputs, int32_t nbOutputs) const noexcept override;
    int32_t onShapeChange(nvinfer1::PluginTensorDesc const* in, int32_t nbInputs, nvinfer1::PluginTensorDesc const* out,
        int32_t nbOutputs) noexcept override;
    int32_t enqueue(nvinfer1::PluginTensorDesc const* inputDesc, nvinfer1::PluginTensorDesc const* outputDesc,
        void const* const* inputs, void* const* outputs, void* workspace, cudaStream_t stream) noexcept override;

protected:
    int32_t setShapes(nvinfer1::Dims const* dims, int32_t nbInputs, int32_t nbOutputs) noexcept override;
    bool outputShape(nvinfer1::DimsExprs const& x, nvinfer1::IExprBuilder& exprBuilder,
        nvinfer1::DimsExprs& out) const noexcept override;
    bool takesType(nvinfer1::DataType xType, int32_t nbInputs) const noexcept override;
    void writeFields(FieldWriter& w) override;

private:
    FcConfig mCfg;
    std::unique_ptr<LtGemm> mGemm; // per instance: TensorRT clones one per context
};

// One creator class for all of them: the spec says who it is, `make` builds the plugin.
class PluginCreatorV3 final : public nvinfer1::IPluginCreatorV3One
{
public:
    using Make = SpecPluginV3* (*) (nvinfer1::PluginFieldCollection const*);
    PluginCreatorV3(specs::PluginSpec const& spec, Make make);

    nvinfer1::IPluginV3* createPlugin(
        char const* name, nvinfer1::PluginFieldCollection const* fc, nvinfer1::TensorRTPhase phase) noexcept override;
    nvinfer1::PluginFieldCollection const* getFieldNames() noexcept override;
    char const* getPluginName() const noexcept override;
    char const* getPluginVersion() const noexcept override;
    char const* getPluginNamespace() const noexcept override;

private:
    specs::PluginSpec const& mSpec;
    Make mMake;
    FieldNames mFieldNames;
};

} // namespace fusion
