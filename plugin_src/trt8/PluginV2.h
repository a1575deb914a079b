// TensorRT 8 glue: FusedLayerNorm, FusedRMSNorm and FusedFC as IPluginV2DynamicExt plugins
// with IPluginCreator creators.  The work is done by the same cores as the IPluginV3 glue
// (common/normCore.h, fc/fcCore.h); this file only adapts the 8.x interface: plugins
// serialize their spec fields themselves (packFields) and creators rebuild them from those
// bytes through the same field checks as createPlugin.
#pragma once

#include "common/normCore.h"
#include "fc/fcCore.h"
#include "groupnorm/groupNormCore.h"
#include "skipnorm/skipCore.h"

#include <memory>
#include <string>

#if NV_TENSORRT_MAJOR >= 10
#error "plugin_src/trt8 is the TensorRT 8 glue: build it against 8.x headers"
#endif

namespace fusion
{

// What every fusion plugin does the same way under IPluginV2DynamicExt: identity from the
// spec, one output of X's type, serialization of the spec fields.
class SpecPluginV2 : public nvinfer1::IPluginV2DynamicExt
{
public:
    explicit SpecPluginV2(specs::PluginSpec const& spec);
    SpecPluginV2(SpecPluginV2 const& other);
    SpecPluginV2& operator=(SpecPluginV2 const&) = delete;

    char const* getPluginType() const noexcept override;
    char const* getPluginVersion() const noexcept override;
    int32_t getNbOutputs() const noexcept override;
    int32_t initialize() noexcept override;
    void terminate() noexcept override;
    size_t getSerializationSize() const noexcept override;
    void serialize(void* buffer) const noexcept override;
    void destroy() noexcept override;
    void setPluginNamespace(char const* pluginNamespace) noexcept override;
    char const* getPluginNamespace() const noexcept override;
    nvinfer1::DataType getOutputDataType(
        int32_t index, nvinfer1::DataType const* inputTypes, int32_t nbInputs) const noexcept override;
    bool supportsFormatCombination(
        int32_t pos, nvinfer1::PluginTensorDesc const* inOut, int32_t nbInputs, int32_t nbOutputs) noexcept override;

protected:
    // Points `w` at the fields to serialize (members of the plugin).
    virtual void writeFields(FieldWriter& w) = 0;

    specs::PluginSpec const& mSpec;
    std::string mNamespace;

private:
    std::vector<char> pack() const;
    mutable FieldWriter mSerial;
};

class NormPluginV2 final : public SpecPluginV2
{
public:
    explicit NormPluginV2(NormConfig const& config);
    static SpecPluginV2* create(NormOp op, nvinfer1::PluginFieldCollection const* fc);

    nvinfer1::IPluginV2DynamicExt* clone() const noexcept override;
    nvinfer1::DimsExprs getOutputDimensions(int32_t outputIndex, nvinfer1::DimsExprs const* inputs, int32_t nbInputs,
        nvinfer1::IExprBuilder& exprBuilder) noexcept override;
    void configurePlugin(nvinfer1::DynamicPluginTensorDesc const* in, int32_t nbInputs,
        nvinfer1::DynamicPluginTensorDesc const* out, int32_t nbOutputs) noexcept override;
    size_t getWorkspaceSize(nvinfer1::PluginTensorDesc const* inputs, int32_t nbInputs,
        nvinfer1::PluginTensorDesc const* outputs, int32_t nbOutputs) const noexcept override;
    int32_t enqueue(nvinfer1::PluginTensorDesc const* inputDesc, nvinfer1::PluginTensorDesc const* outputDesc,
        void const* const* inputs, void* const* outputs, void* workspace, cudaStream_t stream) noexcept override;

protected:
    void writeFields(FieldWriter& w) override;

private:
    NormConfig mCfg;
    int32_t mNbInputs{0}; // set by configurePlugin: enqueue is not told
};

// FusedSkipLayerNorm / FusedSkipRMSNorm: outputs Y and Sum (written only when with_sum = 1).
class SkipNormPluginV2 final : public SpecPluginV2
{
public:
    explicit SkipNormPluginV2(SkipNormConfig const& config);
    static SpecPluginV2* create(NormOp op, nvinfer1::PluginFieldCollection const* fc);

    nvinfer1::IPluginV2DynamicExt* clone() const noexcept override;
    nvinfer1::DimsExprs getOutputDimensions(int32_t outputIndex, nvinfer1::DimsExprs const* inputs, int32_t nbInputs,
        nvinfer1::IExprBuilder& exprBuilder) noexcept override;
    void configurePlugin(nvinfer1::DynamicPluginTensorDesc const* in, int32_t nbInputs,
        nvinfer1::DynamicPluginTensorDesc const* out, int32_t nbOutputs) noexcept override;
    size_t getWorkspaceSize(nvinfer1::PluginTensorDesc const* inputs, int32_t nbInputs,
        nvinfer1::PluginTensorDesc const* outputs, int32_t nbOutputs) const noexcept override;
    int32_t enqueue(nvinfer1::PluginTensorDesc const* inputDesc, nvinfer1::PluginTensorDesc const* outputDesc,
        void const* const* inputs, void* const* outputs, void* workspace, cudaStream_t stream) noexcept override;

protected:
    void writeFields(FieldWriter& w) override;

private:
    SkipNormConfig mCfg;
    int32_t mNbInputs{0}; // set by configurePlugin: enqueue is not told
};

class FcPluginV2 final : public SpecPluginV2
{
public:
    explicit FcPluginV2(FcConfig const& config);
    static SpecPluginV2* create(nvinfer1::PluginFieldCollection const* fc);

    nvinfer1::IPluginV2DynamicExt* clone() const noexcept override;
    nvinfer1::DimsExprs getOutputDimensions(int32_t outputIndex, nvinfer1::DimsExprs const* inputs, int32_t nbInputs,
        nvinfer1::IExprBuilder& exprBuilder) noexcept override;
    void configurePlugin(nvinfer1::DynamicPluginTensorDesc const* in, int32_t nbInputs,
        nvinfer1::DynamicPluginTensorDesc const* out, int32_t nbOutputs) noexcept override;
    size_t getWorkspaceSize(nvinfer1::PluginTensorDesc const* inputs, int32_t nbInputs,
        nvinfer1::PluginTensorDesc const* outputs, int32_t nbOutputs) const noexcept override;
    int32_t enqueue(nvinfer1::PluginTensorDesc const* inputDesc, nvinfer1::PluginTensorDesc const* outputDesc,
        void const* const* inputs, void* const* outputs, void* workspace, cudaStream_t stream) noexcept override;

protected:
    void writeFields(FieldWriter& w) override;

private:
    FcConfig mCfg;
    std::unique_ptr<LtGemm> mGemm; // per instance: TensorRT clones one per context
};

class GroupNormPluginV2 final : public SpecPluginV2
{
public:
    explicit GroupNormPluginV2(GroupNormConfig const& config);
    static SpecPluginV2* create(nvinfer1::PluginFieldCollection const* fc);

    nvinfer1::IPluginV2DynamicExt* clone() const noexcept override;
    nvinfer1::DimsExprs getOutputDimensions(int32_t outputIndex, nvinfer1::DimsExprs const* inputs, int32_t nbInputs,
        nvinfer1::IExprBuilder& exprBuilder) noexcept override;
    bool supportsFormatCombination(
        int32_t pos, nvinfer1::PluginTensorDesc const* inOut, int32_t nbInputs, int32_t nbOutputs) noexcept override;
    void configurePlugin(nvinfer1::DynamicPluginTensorDesc const* in, int32_t nbInputs,
        nvinfer1::DynamicPluginTensorDesc const* out, int32_t nbOutputs) noexcept override;
    size_t getWorkspaceSize(nvinfer1::PluginTensorDesc const* inputs, int32_t nbInputs,
        nvinfer1::PluginTensorDesc const* outputs, int32_t nbOutputs) const noexcept override;
    int32_t enqueue(nvinfer1::PluginTensorDesc const* inputDesc, nvinfer1::PluginTensorDesc const* outputDesc,
        void const* const* inputs, void* const* outputs, void* workspace, cudaStream_t stream) noexcept override;

protected:
    void writeFields(FieldWriter& w) override;

private:
    GroupNormConfig mCfg;
};

// One creator class for all of them: the spec says who it is, `make` builds the plugin.
class PluginCreatorV2 final : public nvinfer1::IPluginCreator
{
public:
    using Make = SpecPluginV2* (*) (nvinfer1::PluginFieldCollection const*);
    PluginCreatorV2(specs::PluginSpec const& spec, Make make);

    char const* getPluginName() const noexcept override;
    char const* getPluginVersion() const noexcept override;
    nvinfer1::PluginFieldCollection const* getFieldNames() noexcept override;
    nvinfer1::IPluginV2* createPlugin(char const* name, nvinfer1::PluginFieldCollection const* fc) noexcept override;
    nvinfer1::IPluginV2* deserializePlugin(char const* name, void const* data, size_t length) noexcept override;
    void setPluginNamespace(char const* pluginNamespace) noexcept override;
    char const* getPluginNamespace() const noexcept override;

private:
    specs::PluginSpec const& mSpec;
    Make mMake;
    FieldNames mFieldNames;
    std::string mNamespace;
};

} // namespace fusion
