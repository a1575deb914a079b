// The TensorRT 8 plugin ABI, declared by this project (no NVIDIA header is needed to build
// the TRT8 plugin library).  Written from the published TensorRT 8.5.3 interface
// (include/NvInferRuntimeCommon.h, NvInferRuntime.h, NvInferImpl.h); unchanged in 8.6.
// Only what the plugins implement and receive is declared, under the real names, so the
// same glue compiles against a real installation's headers (--tensorrt-include) instead.
//
// What must match the library TensorRT was built with (checked below where a compiler can):
//  - struct layouts: Dims32 (int32 extents), PluginTensorDesc, DynamicPluginTensorDesc,
//    PluginField, PluginFieldCollection;
//  - virtual method order of IPluginV2 -> IPluginV2Ext -> IPluginV2DynamicExt, IPluginCreator
//    and IPluginRegistry, destructors included where they are declared (they take two
//    vtable slots there);  the implicit-batch virtuals that IPluginV2DynamicExt hides stay
//    declared (private, final) so every later slot keeps its place;
//  - IDimensionExpr / IExprBuilder are not pure interfaces: their inline methods call a
//    virtual implementation object (mImpl) stored after the object's own vptr.
//
// fusion/plugins/library.py adds build/include/NvInferRuntime.h, a one-line forward to this
// file, when no real headers are given: the glue always includes "NvInferRuntime.h".
#pragma once

#include <cstddef>
#include <cstdint>
#include <cuda_runtime_api.h> // cudaStream_t

#define NV_TENSORRT_MAJOR 8
#define NV_TENSORRT_MINOR 5
#define NV_TENSORRT_PATCH 3
#define FUSION_TRT8_OWN_ABI 1

extern "C"
{
    struct cublasContext;
    struct cudnnContext;
}

namespace nvinfer1
{

constexpr int32_t kNV_TENSORRT_VERSION_IMPL = NV_TENSORRT_MAJOR * 1000 + NV_TENSORRT_MINOR * 100 + NV_TENSORRT_PATCH;
#define NV_TENSORRT_VERSION nvinfer1::kNV_TENSORRT_VERSION_IMPL

using AsciiChar = char;
class IGpuAllocator;
class IErrorRecorder;

enum class DataType : int32_t
{
    kFLOAT = 0,
    kHALF = 1,
    kINT8 = 2,
    kINT32 = 3,
    kBOOL = 4,
    kUINT8 = 5,
};

enum class TensorFormat : int32_t
{
    kLINEAR = 0, // the only format the fusion plugins take; others are not needed here
};
using PluginFormat = TensorFormat;

class Dims32
{
public:
    static constexpr int32_t MAX_DIMS{8};
    int32_t nbDims;
    int32_t d[MAX_DIMS];
};
using Dims = Dims32;

struct PluginTensorDesc
{
    Dims dims;
    DataType type;
    TensorFormat format;
    float scale;
};

struct DynamicPluginTensorDesc
{
    PluginTensorDesc desc;
    Dims min;
    Dims max;
};

// The top byte of IPluginV2::getTensorRTVersion(): how TensorRT tells the plugin kinds apart.
enum class PluginVersion : uint8_t
{
    kV2 = 0,
    kV2_EXT = 1,
    kV2_IOEXT = 2,
    kV2_DYNAMICEXT = 3,
};

enum class PluginFieldType : int32_t
{
    kFLOAT16 = 0,
    kFLOAT32 = 1,
    kFLOAT64 = 2,
    kINT8 = 3,
    kINT16 = 4,
    kINT32 = 5,
    kCHAR = 6,
    kDIMS = 7,
    kUNKNOWN = 8,
};

class PluginField
{
public:
    AsciiChar const* name;
    void const* data;
    PluginFieldType type;
    int32_t length;

    PluginField(AsciiChar const* name_ = nullptr, void const* data_ = nullptr,
        PluginFieldType type_ = PluginFieldType::kUNKNOWN, int32_t length_ = 0) noexcept
        : name(name_)
        , data(data_)
        , type(type_)
        , length(length_)
    {
    }
};

struct PluginFieldCollection
{
    int32_t nbFields;
    PluginField const* fields;
};

class ILogger
{
public:
    enum class Severity : int32_t
    {
        kINTERNAL_ERROR = 0,
        kERROR = 1,
        kWARNING = 2,
        kINFO = 3,
        kVERBOSE = 4,
    };
    virtual void log(Severity severity, AsciiChar const* msg) noexcept = 0;
    ILogger() = default;
    virtual ~ILogger() = default;

protected:
    ILogger(ILogger const&) = default;
    ILogger& operator=(ILogger const&) & = default;
};

class IPluginV2
{
public:
    virtual int32_t getTensorRTVersion() const noexcept
    {
        return NV_TENSORRT_VERSION;
    }
    virtual AsciiChar const* getPluginType() const noexcept = 0;
    virtual AsciiChar const* getPluginVersion() const noexcept = 0;
    virtual int32_t getNbOutputs() const noexcept = 0;
    virtual Dims getOutputDimensions(int32_t index, Dims const* inputs, int32_t nbInputDims) noexcept = 0;
    virtual bool supportsFormat(DataType type, PluginFormat format) const noexcept = 0;
    virtual void configureWithFormat(Dims const* inputDims, int32_t nbInputs, Dims const* outputDims,
        int32_t nbOutputs, DataType type, PluginFormat format, int32_t maxBatchSize) noexcept = 0;
    virtual int32_t initialize() noexcept = 0;
    virtual void terminate() noexcept = 0;
    virtual size_t getWorkspaceSize(int32_t maxBatchSize) const noexcept = 0;
    virtual int32_t enqueue(int32_t batchSize, void const* const* inputs, void* const* outputs, void* workspace,
        cudaStream_t stream) noexcept = 0;
    virtual size_t getSerializationSize() const noexcept = 0;
    virtual void serialize(void* buffer) const noexcept = 0;
    virtual void destroy() noexcept = 0;
    virtual IPluginV2* clone() const noexcept = 0;
    virtual void setPluginNamespace(AsciiChar const* pluginNamespace) noexcept = 0;
    virtual AsciiChar const* getPluginNamespace() const noexcept = 0;
    IPluginV2() = default;
    virtual ~IPluginV2() noexcept = default; // two slots, after getPluginNamespace

protected:
    IPluginV2(IPluginV2 const&) = default;
    IPluginV2& operator=(IPluginV2 const&) & = default;
};

class IPluginV2Ext : public IPluginV2
{
public:
    virtual DataType getOutputDataType(int32_t index, DataType const* inputTypes, int32_t nbInputs) const noexcept = 0;
    virtual bool isOutputBroadcastAcrossBatch(
        int32_t outputIndex, bool const* inputIsBroadcasted, int32_t nbInputs) const noexcept = 0;
    virtual bool canBroadcastInputAcrossBatch(int32_t inputIndex) const noexcept = 0;
    virtual void configurePlugin(Dims const* inputDims, int32_t nbInputs, Dims const* outputDims, int32_t nbOutputs,
        DataType const* inputTypes, DataType const* outputTypes, bool const* inputIsBroadcast,
        bool const* outputIsBroadcast, PluginFormat floatFormat, int32_t maxBatchSize) noexcept = 0;
    IPluginV2Ext() = default;
    ~IPluginV2Ext() override = default;
    virtual void attachToContext(cudnnContext* /*cudnn*/, cublasContext* /*cublas*/, IGpuAllocator* /*alloc*/) noexcept
    {
    }
    virtual void detachFromContext() noexcept {}
    IPluginV2Ext* clone() const noexcept override = 0;

protected:
    IPluginV2Ext(IPluginV2Ext const&) = default;
    IPluginV2Ext& operator=(IPluginV2Ext const&) & = default;
    int32_t getTensorRTVersion() const noexcept override
    {
        return static_cast<int32_t>((static_cast<uint32_t>(PluginVersion::kV2_EXT) << 24U)
            | (static_cast<uint32_t>(NV_TENSORRT_VERSION) & 0xFFFFFFU));
    }
    void configureWithFormat(Dims const*, int32_t, Dims const*, int32_t, DataType, PluginFormat, int32_t) noexcept override
    {
    }
};

namespace apiv
{
class VRoot
{
public:
    virtual ~VRoot() noexcept = default;
};
} // namespace apiv

class IDimensionExpr;
enum class DimensionOperation : int32_t
{
    kSUM = 0,
    kPROD = 1,
    kMAX = 2,
    kMIN = 3,
    kSUB = 4,
    kEQUAL = 5,
    kLESS = 6,
    kFLOOR_DIV = 7,
    kCEIL_DIV = 8,
};

namespace apiv
{
class VDimensionExpr : public VRoot
{
public:
    virtual bool isConstant() const = 0;
    virtual int32_t getConstantValue() const = 0;
};
class VExprBuilder : public VRoot
{
public:
    virtual IDimensionExpr const* constant(int32_t value) = 0;
    virtual IDimensionExpr const* operation(
        DimensionOperation op, IDimensionExpr const& first, IDimensionExpr const& second) = 0;
};
} // namespace apiv

class INoCopy
{
protected:
    INoCopy() = default;
    virtual ~INoCopy() = default;
    INoCopy(INoCopy const&) = delete;
    INoCopy& operator=(INoCopy const&) = delete;
};

class IDimensionExpr : public INoCopy
{
public:
    bool isConstant() const noexcept
    {
        return mImpl->isConstant();
    }
    int32_t getConstantValue() const noexcept
    {
        return mImpl->getConstantValue();
    }

protected:
    apiv::VDimensionExpr* mImpl;
    ~IDimensionExpr() noexcept override = default;
};

class IExprBuilder : public INoCopy
{
public:
    IDimensionExpr const* constant(int32_t value) noexcept
    {
        return mImpl->constant(value);
    }
    IDimensionExpr const* operation(
        DimensionOperation op, IDimensionExpr const& first, IDimensionExpr const& second) noexcept
    {
        return mImpl->operation(op, first, second);
    }

protected:
    apiv::VExprBuilder* mImpl;
    ~IExprBuilder() noexcept override = default;
};

class DimsExprs
{
public:
    int32_t nbDims;
    IDimensionExpr const* d[Dims::MAX_DIMS];
};

class IPluginV2DynamicExt : public IPluginV2Ext
{
public:
    IPluginV2DynamicExt* clone() const noexcept override = 0;
    virtual DimsExprs getOutputDimensions(
        int32_t outputIndex, DimsExprs const* inputs, int32_t nbInputs, IExprBuilder& exprBuilder) noexcept = 0;
    static constexpr int32_t kFORMAT_COMBINATION_LIMIT = 100;
    virtual bool supportsFormatCombination(
        int32_t pos, PluginTensorDesc const* inOut, int32_t nbInputs, int32_t nbOutputs) noexcept = 0;
    virtual void configurePlugin(DynamicPluginTensorDesc const* in, int32_t nbInputs,
        DynamicPluginTensorDesc const* out, int32_t nbOutputs) noexcept = 0;
    virtual size_t getWorkspaceSize(PluginTensorDesc const* inputs, int32_t nbInputs, PluginTensorDesc const* outputs,
        int32_t nbOutputs) const noexcept = 0;
    virtual int32_t enqueue(PluginTensorDesc const* inputDesc, PluginTensorDesc const* outputDesc,
        void const* const* inputs, void* const* outputs, void* workspace, cudaStream_t stream) noexcept = 0;

protected:
    int32_t getTensorRTVersion() const noexcept override
    {
        return (static_cast<int32_t>(PluginVersion::kV2_DYNAMICEXT) << 24) | (NV_TENSORRT_VERSION & 0xFFFFFF);
    }
    ~IPluginV2DynamicExt() noexcept override {}

private:
    // The implicit-batch entry points, hidden: they keep their base-class vtable slots.
    void configurePlugin(Dims const*, int32_t, Dims const*, int32_t, DataType const*, DataType const*, bool const*,
        bool const*, PluginFormat, int32_t) noexcept override final
    {
    }
    bool supportsFormat(DataType, PluginFormat) const noexcept override final
    {
        return false;
    }
    Dims getOutputDimensions(int32_t, Dims const*, int32_t) noexcept override final
    {
        return Dims{-1, {}};
    }
    bool isOutputBroadcastAcrossBatch(int32_t, bool const*, int32_t) const noexcept override final
    {
        return false;
    }
    bool canBroadcastInputAcrossBatch(int32_t) const noexcept override final
    {
        return true;
    }
    size_t getWorkspaceSize(int32_t) const noexcept override final
    {
        return 0;
    }
    int32_t enqueue(int32_t, void const* const*, void* const*, void*, cudaStream_t) noexcept override final
    {
        return 1;
    }
};

class IPluginCreator
{
public:
    virtual int32_t getTensorRTVersion() const noexcept
    {
        return NV_TENSORRT_VERSION;
    }
    virtual AsciiChar const* getPluginName() const noexcept = 0;
    virtual AsciiChar const* getPluginVersion() const noexcept = 0;
    virtual PluginFieldCollection const* getFieldNames() noexcept = 0;
    virtual IPluginV2* createPlugin(AsciiChar const* name, PluginFieldCollection const* fc) noexcept = 0;
    virtual IPluginV2* deserializePlugin(AsciiChar const* name, void const* serialData, size_t serialLength) noexcept
        = 0;
    virtual void setPluginNamespace(AsciiChar const* pluginNamespace) noexcept = 0;
    virtual AsciiChar const* getPluginNamespace() const noexcept = 0;
    IPluginCreator() = default;
    virtual ~IPluginCreator() = default;

protected:
    IPluginCreator(IPluginCreator const&) = default;
    IPluginCreator& operator=(IPluginCreator const&) & = default;
};

// Implemented by libnvinfer (and by plugin_src/tools/describe8.cpp's recording registry).
// The destructor sits between getPluginCreator and setErrorRecorder, as in 8.5.
class IPluginRegistry
{
public:
    virtual bool registerCreator(IPluginCreator& creator, AsciiChar const* pluginNamespace) noexcept = 0;
    virtual IPluginCreator* const* getPluginCreatorList(int32_t* numCreators) const noexcept = 0;
    virtual IPluginCreator* getPluginCreator(
        AsciiChar const* pluginName, AsciiChar const* pluginVersion, AsciiChar const* pluginNamespace = "") noexcept
        = 0;

protected:
    IPluginRegistry() = default;
    IPluginRegistry(IPluginRegistry const&) = default;
    IPluginRegistry& operator=(IPluginRegistry const&) & = default;
    virtual ~IPluginRegistry() noexcept = default;

public:
    virtual void setErrorRecorder(IErrorRecorder* recorder) noexcept = 0;
    virtual IErrorRecorder* getErrorRecorder() const noexcept = 0;
    virtual bool deregisterCreator(IPluginCreator const& creator) noexcept = 0;
};

// ---- layout checks (LP64): a mismatch here would corrupt every call TensorRT makes.
static_assert(sizeof(Dims32) == 36, "Dims32 is nbDims + 8 int32 extents");
static_assert(sizeof(PluginTensorDesc) == 48 && offsetof(PluginTensorDesc, type) == 36
        && offsetof(PluginTensorDesc, format) == 40 && offsetof(PluginTensorDesc, scale) == 44,
    "PluginTensorDesc layout");
static_assert(sizeof(DynamicPluginTensorDesc) == 120 && offsetof(DynamicPluginTensorDesc, min) == 48
        && offsetof(DynamicPluginTensorDesc, max) == 84,
    "DynamicPluginTensorDesc layout");
static_assert(sizeof(PluginField) == 24 && offsetof(PluginField, data) == 8 && offsetof(PluginField, type) == 16
        && offsetof(PluginField, length) == 20,
    "PluginField layout");
static_assert(sizeof(PluginFieldCollection) == 16 && offsetof(PluginFieldCollection, fields) == 8,
    "PluginFieldCollection layout");
static_assert(sizeof(DimsExprs) == 72, "DimsExprs: nbDims + 8 pointers");
static_assert(sizeof(IDimensionExpr) == 16 && sizeof(IExprBuilder) == 16, "vptr + mImpl");
static_assert(sizeof(IPluginV2DynamicExt) == sizeof(void*) && sizeof(IPluginCreator) == sizeof(void*),
    "the interfaces hold nothing but their vptr");
static_assert(sizeof(DataType) == 4 && sizeof(TensorFormat) == 4 && sizeof(PluginFieldType) == 4, "enum sizes");

} // namespace nvinfer1

extern "C" nvinfer1::IPluginRegistry* getPluginRegistry() noexcept;
extern "C" nvinfer1::ILogger* getLogger() noexcept;
