// JSON output shared by the describe tools (describe.cpp: TensorRT >= 10 IPluginV3,
// describe8.cpp: TensorRT 8 IPluginV2DynamicExt), compiled against either one's headers.
#pragma once

#include "NvInferRuntime.h"

#include <cstdio>
#include <map>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace
{

using namespace nvinfer1;

std::string jsonString(std::string const& s)
{
    std::string out = "\"";
    for (char c : s)
    {
        if (c == '"' || c == '\\')
        {
            out += '\\';
            out += c;
        }
        else if (static_cast<unsigned char>(c) < 0x20)
        {
            char buf[8];
            snprintf(buf, sizeof(buf), "\\u%04x", c);
            out += buf;
        }
        else
        {
            out += c;
        }
    }
    return out + "\"";
}

char const* typeName(PluginFieldType t)
{
    switch (t)
    {
    case PluginFieldType::kFLOAT16: return "kFLOAT16";
    case PluginFieldType::kFLOAT32: return "kFLOAT32";
    case PluginFieldType::kFLOAT64: return "kFLOAT64";
    case PluginFieldType::kINT8: return "kINT8";
    case PluginFieldType::kINT16: return "kINT16";
    case PluginFieldType::kINT32: return "kINT32";
    case PluginFieldType::kCHAR: return "kCHAR";
    case PluginFieldType::kDIMS: return "kDIMS";
    case PluginFieldType::kUNKNOWN: return "kUNKNOWN";
#if NV_TENSORRT_MAJOR >= 10
    case PluginFieldType::kBF16: return "kBF16";
    case PluginFieldType::kINT64: return "kINT64";
    case PluginFieldType::kFP8: return "kFP8";
    case PluginFieldType::kINT4: return "kINT4";
    case PluginFieldType::kFP4: return "kFP4";
#endif
    }
    return "?";
}

std::string interfaceJson(char const* kind, int64_t major, int64_t minor)
{
    std::ostringstream o;
    o << "{\"kind\": " << jsonString(kind ? kind : "") << ", \"major\": " << major << ", \"minor\": " << minor << "}";
    return o.str();
}

std::string fieldsJson(PluginFieldCollection const* fc)
{
    std::ostringstream o;
    o << "[";
    for (int32_t i = 0; fc != nullptr && i < fc->nbFields; ++i)
    {
        PluginField const& f = fc->fields[i];
        o << (i ? ", " : "") << "{\"name\": " << jsonString(f.name ? f.name : "") << ", \"type\": \""
          << typeName(f.type) << "\", \"length\": " << f.length << "}";
    }
    return o.str() + "]";
}

// A deep copy of serialized fields: the plugin owns the originals.
std::vector<std::pair<std::string, std::vector<char>>> copyFields(PluginFieldCollection const* fc, std::string& types)
{
    std::vector<std::pair<std::string, std::vector<char>>> out;
    for (int32_t i = 0; fc != nullptr && i < fc->nbFields; ++i)
    {
        PluginField const& f = fc->fields[i];
        size_t elem = 1;
        switch (f.type)
        {
        case PluginFieldType::kFLOAT32:
        case PluginFieldType::kINT32: elem = 4; break;
        case PluginFieldType::kFLOAT64: elem = 8; break;
        case PluginFieldType::kFLOAT16:
        case PluginFieldType::kINT16: elem = 2; break;
#if NV_TENSORRT_MAJOR >= 10
        case PluginFieldType::kINT64: elem = 8; break;
        case PluginFieldType::kBF16: elem = 2; break;
#endif
        default: elem = 1;
        }
        char const* p = static_cast<char const*>(f.data);
        size_t const bytes = elem * static_cast<size_t>(f.length > 0 ? f.length : 0);
        out.emplace_back(f.name ? f.name : "", std::vector<char>(p, p + (p ? bytes : 0)));
        types += std::string(f.name ? f.name : "") + ":" + typeName(f.type) + ";";
    }
    return out;
}

// Op -> field -> text, from "Op.field=value" arguments.
using GivenFields = std::map<std::string, std::map<std::string, std::string>>;

bool parseGivenFields(int argc, char** argv, int first, GivenFields& given)
{
    for (int i = first; i < argc; ++i)
    {
        std::string const a = argv[i];
        size_t const dot = a.find('.');
        size_t const eq = a.find('=');
        if (dot == std::string::npos || eq == std::string::npos || eq < dot)
        {
            fprintf(stderr, "bad field argument '%s' (want Op.field=value)\n", argv[i]);
            return false;
        }
        given[a.substr(0, dot)][a.substr(dot + 1, eq - dot - 1)] = a.substr(eq + 1);
    }
    return true;
}

} // namespace
