#include "common/pluginUtils.h"

#include <atomic>
#include <cstdio>
#include <cstring>

namespace fusion
{
namespace
{
std::atomic<nvinfer1::ILoggerFinder*> gLoggerFinder{nullptr};

char const* severityName(nvinfer1::ILogger::Severity s)
{
    switch (s)
    {
    case nvinfer1::ILogger::Severity::kINTERNAL_ERROR: return "INTERNAL_ERROR";
    case nvinfer1::ILogger::Severity::kERROR: return "ERROR";
    case nvinfer1::ILogger::Severity::kWARNING: return "WARNING";
    case nvinfer1::ILogger::Severity::kINFO: return "INFO";
    case nvinfer1::ILogger::Severity::kVERBOSE: return "VERBOSE";
    }
    return "?";
}

bool isFloatType(nvinfer1::PluginFieldType t)
{
    return t == nvinfer1::PluginFieldType::kFLOAT32 || t == nvinfer1::PluginFieldType::kFLOAT64;
}

bool isIntType(nvinfer1::PluginFieldType t)
{
    using T = nvinfer1::PluginFieldType;
    return t == T::kINT32 || t == T::kINT64 || t == T::kINT16 || t == T::kINT8;
}

bool compatible(nvinfer1::PluginFieldType spec, nvinfer1::PluginFieldType got)
{
    if (spec == nvinfer1::PluginFieldType::kFLOAT32)
    {
        return isFloatType(got);
    }
    if (spec == nvinfer1::PluginFieldType::kINT32)
    {
        return isIntType(got);
    }
    return spec == got;
}

double numberAt(nvinfer1::PluginField const& f)
{
    using T = nvinfer1::PluginFieldType;
    switch (f.type)
    {
    case T::kFLOAT32: return *static_cast<float const*>(f.data);
    case T::kFLOAT64: return *static_cast<double const*>(f.data);
    case T::kINT32: return *static_cast<int32_t const*>(f.data);
    case T::kINT64: return static_cast<double>(*static_cast<int64_t const*>(f.data));
    case T::kINT16: return *static_cast<int16_t const*>(f.data);
    case T::kINT8: return *static_cast<int8_t const*>(f.data);
    default: return 0.0;
    }
}
} // namespace

void setGlobalLoggerFinder(nvinfer1::ILoggerFinder* finder) noexcept
{
    gLoggerFinder.store(finder);
}

void logMessage(nvinfer1::ILogger::Severity severity, std::string const& msg) noexcept
{
    nvinfer1::ILoggerFinder* finder = gLoggerFinder.load();
    nvinfer1::ILogger* logger = finder != nullptr ? finder->findLogger() : nullptr;
    if (logger != nullptr)
    {
        logger->log(severity, msg.c_str());
    }
    else if (severity <= nvinfer1::ILogger::Severity::kWARNING)
    {
        fprintf(stderr, "[fusion_plugins %s] %s\n", severityName(severity), msg.c_str());
    }
}

bool toElemType(nvinfer1::DataType type, ElemType& out) noexcept
{
    switch (type)
    {
    case nvinfer1::DataType::kFLOAT: out = ElemType::kFLOAT; return true;
    case nvinfer1::DataType::kHALF: out = ElemType::kHALF; return true;
    case nvinfer1::DataType::kBF16: out = ElemType::kBF16; return true;
    default: return false;
    }
}

int64_t volume(nvinfer1::Dims const& dims, int32_t begin, int32_t end) noexcept
{
    int64_t v = 1;
    for (int32_t i = begin; i < end; ++i)
    {
        if (dims.d[i] < 0)
        {
            return -1;
        }
        v *= dims.d[i];
    }
    return v;
}

FieldReader::FieldReader(specs::PluginSpec const& spec, nvinfer1::PluginFieldCollection const* fc)
    : mSpec(spec)
    , mByIndex(static_cast<size_t>(spec.nbFields), nullptr)
{
    int32_t const n = fc != nullptr ? fc->nbFields : 0;
    for (int32_t i = 0; i < n && mError.empty(); ++i)
    {
        nvinfer1::PluginField const& f = fc->fields[i];
        int32_t index = -1;
        for (int32_t k = 0; k < spec.nbFields; ++k)
        {
            if (f.name != nullptr && strcmp(f.name, spec.fields[k].name) == 0)
            {
                index = k;
            }
        }
        if (index < 0)
        {
            mError = std::string(spec.name) + ": unknown field '" + (f.name ? f.name : "(null)") + "'";
        }
        else if (!compatible(spec.fields[index].type, f.type) || f.data == nullptr
            || (spec.fields[index].length == 1 && f.length < 1))
        {
            mError = std::string(spec.name) + ": field '" + f.name + "' has the wrong type or no data";
        }
        else
        {
            mByIndex[static_cast<size_t>(index)] = &f;
        }
    }
    for (int32_t k = 0; k < spec.nbFields && mError.empty(); ++k)
    {
        if (spec.fields[k].required && mByIndex[static_cast<size_t>(k)] == nullptr)
        {
            mError = std::string(spec.name) + ": required field '" + spec.fields[k].name + "' is missing";
        }
    }
}

bool FieldReader::has(int32_t index) const noexcept
{
    return index >= 0 && index < mSpec.nbFields && mByIndex[static_cast<size_t>(index)] != nullptr;
}

float FieldReader::getFloat(int32_t index, float fallback) const noexcept
{
    return has(index) ? static_cast<float>(numberAt(*mByIndex[static_cast<size_t>(index)])) : fallback;
}

int32_t FieldReader::getInt(int32_t index, int32_t fallback) const noexcept
{
    return has(index) ? static_cast<int32_t>(numberAt(*mByIndex[static_cast<size_t>(index)])) : fallback;
}

std::string FieldReader::getString(int32_t index, std::string const& fallback) const
{
    if (!has(index))
    {
        return fallback;
    }
    nvinfer1::PluginField const& f = *mByIndex[static_cast<size_t>(index)];
    // ONNX importers pass the bytes without a terminator; serialized copies may have one.
    std::string s(static_cast<char const*>(f.data), static_cast<size_t>(f.length > 0 ? f.length : 0));
    size_t const nul = s.find('\0');
    return nul == std::string::npos ? s : s.substr(0, nul);
}

FieldNames::FieldNames(specs::PluginSpec const& spec)
{
    for (int32_t k = 0; k < spec.nbFields; ++k)
    {
        mFields.emplace_back(spec.fields[k].name, nullptr, spec.fields[k].type, spec.fields[k].length);
    }
    mCollection.nbFields = static_cast<int32_t>(mFields.size());
    mCollection.fields = mFields.data();
}

void FieldWriter::add(int32_t index, void const* data, int32_t length)
{
    mFields.emplace_back(mSpec.fields[index].name, data, mSpec.fields[index].type, length);
}

nvinfer1::PluginFieldCollection const* FieldWriter::collection() noexcept
{
    mCollection.nbFields = static_cast<int32_t>(mFields.size());
    mCollection.fields = mFields.data();
    return &mCollection;
}

} // namespace fusion
