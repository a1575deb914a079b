// Shared TensorRT glue: logging through the loader's ILoggerFinder, field parsing against
// the generated specs, serialization buffers, and type helpers.
#pragma once

#include "NvInferRuntime.h"
#include "common/normLaunch.h"
#include "generated/plugin_specs.h"

#include <cstdint>
#include <string>
#include <vector>

namespace fusion
{

void setGlobalLoggerFinder(nvinfer1::ILoggerFinder* finder) noexcept;
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

constexpr bool sameString(char const* a, char const* b)
{
    return *a == *b && (*a == '\0' || sameString(a + 1, b + 1));
}

} // namespace fusion
