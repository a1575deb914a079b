// Shared TensorRT glue: logging, field parsing against the generated specs, serialization,
// and type helpers.  Compiled into both libraries, each against its own headers: TensorRT
// >= 10 (IPluginV3) or 8.x (IPluginV2DynamicExt: NV_TENSORRT_MAJOR < 10).
#pragma once

#include "NvInferRuntime.h"
#include "common/normLaunch.h"
#include "generated/plugin_specs.h"

#include <cstdint>
#include <string>
#include <vector>

namespace fusion
{

#if NV_TENSORRT_MAJOR >= 10
void setGlobalLoggerFinder(nvinfer1::ILoggerFinder* finder) noexcept;
#else
// TensorRT 8 has no logger finder: the library asks libnvinfer's getLogger() when it logs.
using LoggerGetter = nvinfer1::ILogger* (*) ();
void setGlobalLoggerGetter(LoggerGetter getter) noexcept;
#endif
// Logs through TensorRT's logger when the library was loaded by TensorRT, else to stderr.
void logMessage(nvinfer1::ILogger::Severity severity, std::string const& msg) noexcept;
inline void logError(std::string const& msg) noexcept
{
    logMessage(nvinfer1::ILogger::Severity::kERROR, msg);
}
inline void logWarning(std::string const& msg) noexcept
{
    logMessage(nvinfer1::ILogger::Severity::kWARNING, msg);
}

// fp32 / fp16 / bf16 -> the kernels' element type; false for anything else.
bool toElemType(nvinfer1::DataType type, ElemType& out) noexcept;
inline bool isSupportedType(nvinfer1::DataType type) noexcept
{
    ElemType unused;
    return toElemType(type, unused);
}

// Linear format; X (pos 0) of a supported type, every other tensor of X's type.
bool supportsLinear(int32_t pos, nvinfer1::PluginTensorDesc const& desc, nvinfer1::DataType xType) noexcept;

// Product of dims [begin, end); -1 if any of them is unknown (-1).
int64_t volume(nvinfer1::Dims const& dims, int32_t begin, int32_t end) noexcept;

// Reads a PluginFieldCollection against a spec: unknown names, wrong types and missing
// required fields are errors.  Numeric fields also accept the wider TensorRT types.
class FieldReader
{
public:
    FieldReader(specs::PluginSpec const& spec, nvinfer1::PluginFieldCollection const* fc);

    bool ok() const noexcept
    {
        return mError.empty();
    }
    std::string const& error() const noexcept
    {
        return mError;
    }
    bool has(int32_t index) const noexcept;
    float getFloat(int32_t index, float fallback) const noexcept;
    int32_t getInt(int32_t index, int32_t fallback) const noexcept;
    std::string getString(int32_t index, std::string const& fallback) const;

private:
    specs::PluginSpec const& mSpec;
    std::vector<nvinfer1::PluginField const*> mByIndex;
    std::string mError;
};

// The advertised field list of a creator (getFieldNames), straight from the spec.
class FieldNames
{
public:
    explicit FieldNames(specs::PluginSpec const& spec);
    nvinfer1::PluginFieldCollection const* collection() const noexcept
    {
        return &mCollection;
    }

private:
    std::vector<nvinfer1::PluginField> mFields;
    nvinfer1::PluginFieldCollection mCollection{};
};

// Fields pointing at a plugin's members, for getFieldsToSerialize.
class FieldWriter
{
public:
    explicit FieldWriter(specs::PluginSpec const& spec)
        : mSpec(spec)
    {
    }
    void clear() noexcept
    {
        mFields.clear();
    }
    // data must outlive the returned collection (it points into the plugin).
    void add(int32_t index, void const* data, int32_t length);
    nvinfer1::PluginFieldCollection const* collection() noexcept;

private:
    specs::PluginSpec const& mSpec;
    std::vector<nvinfer1::PluginField> mFields;
    nvinfer1::PluginFieldCollection mCollection{};
};

// Fields as one byte string (TensorRT 8 plugins serialize themselves) and back:
// magic, count, then name, type, length and data bytes of each field.
std::vector<char> packFields(nvinfer1::PluginFieldCollection const* fc);

class PackedFields
{
public:
    // False with `error` for a truncated or foreign blob.
    bool parse(void const* data, size_t size, std::string& error);
    nvinfer1::PluginFieldCollection const* collection() const noexcept
    {
        return &mCollection;
    }

private:
    std::vector<std::string> mNames;
    std::vector<std::vector<char>> mData;
    std::vector<nvinfer1::PluginField> mFields;
    nvinfer1::PluginFieldCollection mCollection{};
};

constexpr bool sameString(char const* a, char const* b)
{
    return *a == *b && (*a == '\0' || sameString(a + 1, b + 1));
}

} // namespace fusion
