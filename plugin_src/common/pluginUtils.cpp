#include "common/pluginUtils.h"

#include <atomic>
#include <cstdio>
#include <cstring>

namespace fusion
{
namespace
{
#if NV_TENSORRT_MAJOR >= 10
std::atomic<nvinfer1::ILoggerFinder*> gLoggerFinder{nullptr};

nvinfer1::ILogger* currentLogger() noexcept
{
    nvinfer1::ILoggerFinder* finder = gLoggerFinder.load();
    return finder != nullptr ? finder->findLogger() : nullptr;
}
#else
std::atomic<LoggerGetter> gLoggerGetter{nullptr};

nvinfer1::ILogger* currentLogger() noexcept
{
    LoggerGetter getter = gLoggerGetter.load();
    return getter != nullptr ? getter() : nullptr;
}
#endif

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
#if NV_TENSORRT_MAJOR >= 10
    if (t == T::kINT64)
    {
        return true;
    }
#endif
    return t == T::kINT32 || t == T::kINT16 || t == T::kINT8;
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
#if NV_TENSORRT_MAJOR >= 10
    case T::kINT64: return static_cast<double>(*static_cast<int64_t const*>(f.data));
#endif
    case T::kINT16: return *static_cast<int16_t const*>(f.data);
    case T::kINT8: return *static_cast<int8_t const*>(f.data);
    default: return 0.0;
    }
}
size_t elementSize(nvinfer1::PluginFieldType t)
{
    using T = nvinfer1::PluginFieldType;
    switch (t)
    {
    case T::kFLOAT64: return 8;
    case T::kFLOAT32:
    case T::kINT32: return 4;
    case T::kFLOAT16:
    case T::kINT16: return 2;
#if NV_TENSORRT_MAJOR >= 10
    case T::kINT64: return 8;
    case T::kBF16: return 2;
#endif
    default: return 1;
    }
}

constexpr char kPACK_MAGIC[4] = {'F', 'S', 'F', '1'};

template <typename T>
void put(std::vector<char>& out, T const& v)
{
    char const* p = reinterpret_cast<char const*>(&v);
    out.insert(out.end(), p, p + sizeof(T));
}
} // namespace

#if NV_TENSORRT_MAJOR >= 10
void setGlobalLoggerFinder(nvinfer1::ILoggerFinder* finder) noexcept
{
    gLoggerFinder.store(finder);
}
#else
void setGlobalLoggerGetter(LoggerGetter getter) noexcept
{
    gLoggerGetter.store(getter);
}
#endif

void logMessage(nvinfer1::ILogger::Severity severity, std::string const& msg) noexcept
{
    nvinfer1::ILogger* logger = currentLogger();
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
#if NV_TENSORRT_MAJOR >= 9 // bf16 is not in TensorRT 8's DataType
    case nvinfer1::DataType::kBF16: out = ElemType::kBF16; return true;
#endif
    default: return false;
    }
}

bool supportsLinear(int32_t pos, nvinfer1::PluginTensorDesc const& desc, nvinfer1::DataType xType) noexcept
{
    if (desc.format != nvinfer1::TensorFormat::kLINEAR)
    {
        return false;
    }
    return pos == 0 ? isSupportedType(desc.type) : desc.type == xType;
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

std::vector<char> packFields(nvinfer1::PluginFieldCollection const* fc)
{
    std::vector<char> out(kPACK_MAGIC, kPACK_MAGIC + 4);
    int32_t const n = fc != nullptr ? fc->nbFields : 0;
    put(out, n);
    for (int32_t i = 0; i < n; ++i)
    {
        nvinfer1::PluginField const& f = fc->fields[i];
        std::string const name = f.name != nullptr ? f.name : "";
        int32_t const bytes = static_cast<int32_t>(elementSize(f.type)) * (f.length > 0 ? f.length : 0);
        put(out, static_cast<int32_t>(name.size()));
        out.insert(out.end(), name.begin(), name.end());
        put(out, static_cast<int32_t>(f.type));
        put(out, f.length);
        put(out, bytes);
        if (bytes > 0 && f.data != nullptr)
        {
            char const* p = static_cast<char const*>(f.data);
            out.insert(out.end(), p, p + bytes);
        }
    }
    return out;
}

bool PackedFields::parse(void const* data, size_t size, std::string& error)
{
    char const* p = static_cast<char const*>(data);
    char const* const end = p + size;
    auto take = [&](void* dst, size_t n) {
        if (p == nullptr || static_cast<size_t>(end - p) < n)
        {
            return false;
        }
        memcpy(dst, p, n);
        p += n;
        return true;
    };
    char magic[4];
    int32_t n = 0;
    if (!take(magic, 4) || memcmp(magic, kPACK_MAGIC, 4) != 0 || !take(&n, 4) || n < 0 || n > 64)
    {
        error = "serialized plugin data is not from this library";
        return false;
    }
    mNames.assign(static_cast<size_t>(n), std::string());
    mData.assign(static_cast<size_t>(n), std::vector<char>());
    mFields.clear();
    for (int32_t i = 0; i < n; ++i)
    {
        int32_t nameLen = 0;
        int32_t type = 0;
        int32_t length = 0;
        int32_t bytes = 0;
        if (!take(&nameLen, 4) || nameLen < 0 || nameLen > end - p)
        {
            error = "serialized plugin data is truncated";
            return false;
        }
        mNames[i].assign(p, static_cast<size_t>(nameLen));
        p += nameLen;
        if (!take(&type, 4) || !take(&length, 4) || !take(&bytes, 4) || bytes < 0 || bytes > end - p)
        {
            error = "serialized plugin data is truncated";
            return false;
        }
        // One spare zero byte: strings read back with or without their terminator.
        mData[i].assign(p, p + bytes);
        mData[i].push_back('\0');
        p += bytes;
        mFields.emplace_back(mNames[i].c_str(), mData[i].data(), static_cast<nvinfer1::PluginFieldType>(type), length);
    }
    if (p != end)
    {
        error = "serialized plugin data has trailing bytes";
        return false;
    }
    mCollection.nbFields = n;
    mCollection.fields = mFields.data();
    return true;
}

} // namespace fusion
