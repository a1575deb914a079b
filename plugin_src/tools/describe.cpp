// fusion_describe LIB [Op.field=value ...]
//
// Loads a plugin library the way TensorRT's IPluginRegistry::loadLibrary does (dlopen,
// setLoggerFinder, getCreators) and prints, as JSON, what each creator exposes: interface,
// name, version, namespace and fields; then creates each plugin from the given field
// values and reports its core identity, capabilities, serialized fields, whether
// serialize -> recreate round-trips and whether clone keeps the identity.  CPU only:
// nothing here touches a GPU.  fusion/plugin_lib.py:check_library compares the output
// with fusion/specs.py.
#include "NvInferRuntime.h"
#include "tools/fieldValues.h"

#include <cstdio>
#include <cstring>
#include <dlfcn.h>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

using namespace nvinfer1;

namespace
{

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
    case PluginFieldType::kBF16: return "kBF16";
    case PluginFieldType::kINT64: return "kINT64";
    case PluginFieldType::kFP8: return "kFP8";
    case PluginFieldType::kINT4: return "kINT4";
    case PluginFieldType::kFP4: return "kFP4";
    }
    return "?";
}

std::string interfaceJson(InterfaceInfo const& info)
{
    std::ostringstream o;
    o << "{\"kind\": " << jsonString(info.kind ? info.kind : "") << ", \"major\": " << info.major
      << ", \"minor\": " << info.minor << "}";
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
        case PluginFieldType::kFLOAT64:
        case PluginFieldType::kINT64: elem = 8; break;
        case PluginFieldType::kFLOAT16:
        case PluginFieldType::kBF16:
        case PluginFieldType::kINT16: elem = 2; break;
        default: elem = 1;
        }
        char const* p = static_cast<char const*>(f.data);
        size_t const bytes = elem * static_cast<size_t>(f.length > 0 ? f.length : 0);
        out.emplace_back(f.name ? f.name : "", std::vector<char>(p, p + (p ? bytes : 0)));
        types += std::string(f.name ? f.name : "") + ":" + typeName(f.type) + ";";
    }
    return out;
}

class Logger : public ILogger
{
public:
    void log(Severity severity, AsciiChar const* msg) noexcept override
    {
        if (severity <= Severity::kWARNING)
        {
            last = msg;
            fprintf(stderr, "[describe] %s\n", msg);
        }
    }
    std::string last;
};

class Finder : public ILoggerFinder
{
public:
    ILogger* findLogger() override
    {
        return &logger;
    }
    Logger logger;
};

std::string describePlugin(IPluginCreatorV3One* creator, PluginFieldCollection const* fc, Logger& logger)
{
    std::ostringstream o;
    logger.last.clear();
    IPluginV3* plugin = creator->createPlugin("describe", fc, TensorRTPhase::kBUILD);
    if (plugin == nullptr)
    {
        o << "{\"created\": false, \"error\": " << jsonString(logger.last) << "}";
        return o.str();
    }
    auto* core = static_cast<IPluginV3OneCore*>(plugin->getCapabilityInterface(PluginCapabilityType::kCORE));
    auto* build = static_cast<IPluginV3OneBuild*>(plugin->getCapabilityInterface(PluginCapabilityType::kBUILD));
    auto* runtime = static_cast<IPluginV3OneRuntime*>(plugin->getCapabilityInterface(PluginCapabilityType::kRUNTIME));
    o << "{\"created\": true, \"interface\": " << interfaceJson(plugin->getInterfaceInfo());
    if (core != nullptr)
    {
        o << ", \"name\": " << jsonString(core->getPluginName()) << ", \"version\": "
          << jsonString(core->getPluginVersion()) << ", \"namespace\": " << jsonString(core->getPluginNamespace());
    }
    o << ", \"capabilities\": {\"core\": " << (core ? "true" : "false") << ", \"build\": "
      << (build ? "true" : "false") << ", \"runtime\": " << (runtime ? "true" : "false") << "}";
    if (build != nullptr)
    {
        o << ", \"nb_outputs\": " << build->getNbOutputs();
    }
    if (runtime != nullptr)
    {
        PluginFieldCollection const* ser = runtime->getFieldsToSerialize();
        o << ", \"serialized\": " << fieldsJson(ser);
        std::string types1;
        auto const first = copyFields(ser, types1);
        // Recreate from the serialized fields (as engine deserialization does) and compare.
        std::vector<PluginField> again;
        for (int32_t i = 0; ser != nullptr && i < ser->nbFields; ++i)
        {
            again.push_back(ser->fields[i]);
        }
        PluginFieldCollection againFc{static_cast<int32_t>(again.size()), again.data()};
        IPluginV3* recreated = creator->createPlugin("describe", &againFc, TensorRTPhase::kRUNTIME);
        bool roundtrip = false;
        std::string why = "recreate failed: " + logger.last;
        if (recreated != nullptr)
        {
            auto* rt2 = static_cast<IPluginV3OneRuntime*>(recreated->getCapabilityInterface(PluginCapabilityType::kRUNTIME));
            std::string types2;
            auto const second = copyFields(rt2 ? rt2->getFieldsToSerialize() : nullptr, types2);
            roundtrip = first == second && types1 == types2;
            why = roundtrip ? "" : "serialized fields differ after recreate";
            delete recreated;
        }
        o << ", \"roundtrip\": " << (roundtrip ? "true" : "false") << ", \"roundtrip_error\": " << jsonString(why);
        IPluginV3* copy = plugin->clone();
        bool cloneOk = false;
        if (copy != nullptr)
        {
            auto* c2 = static_cast<IPluginV3OneCore*>(copy->getCapabilityInterface(PluginCapabilityType::kCORE));
            auto* r2 = static_cast<IPluginV3OneRuntime*>(copy->getCapabilityInterface(PluginCapabilityType::kRUNTIME));
            std::string types3;
            cloneOk = c2 != nullptr && core != nullptr && r2 != nullptr
                && std::string(c2->getPluginName()) == core->getPluginName()
                && std::string(c2->getPluginVersion()) == core->getPluginVersion()
                && copyFields(r2->getFieldsToSerialize(), types3) == first && types3 == types1;
            delete copy;
        }
        o << ", \"clone\": " << (cloneOk ? "true" : "false")
          << ", \"clone_error\": " << jsonString(cloneOk ? "" : "clone differs from the original");
    }
    delete plugin;
    return o.str() + "}";
}

} // namespace

int main(int argc, char** argv)
{
    if (argc < 2)
    {
        fprintf(stderr, "usage: %s LIB [Op.field=value ...]\n", argv[0]);
        return 2;
    }
    // op -> field -> text
    std::map<std::string, std::map<std::string, std::string>> given;
    for (int i = 2; i < argc; ++i)
    {
        std::string const a = argv[i];
        size_t const dot = a.find('.');
        size_t const eq = a.find('=');
        if (dot == std::string::npos || eq == std::string::npos || eq < dot)
        {
            fprintf(stderr, "bad field argument '%s' (want Op.field=value)\n", argv[i]);
            return 2;
        }
        given[a.substr(0, dot)][a.substr(dot + 1, eq - dot - 1)] = a.substr(eq + 1);
    }
    void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr)
    {
        fprintf(stderr, "error: dlopen failed: %s\n", dlerror());
        return 1;
    }
    using GetCreators = IPluginCreatorInterface* const* (*) (int32_t&);
    using SetLoggerFinder = void (*)(ILoggerFinder*);
    auto getCreators = reinterpret_cast<GetCreators>(dlsym(lib, "getCreators"));
    auto setLoggerFinder = reinterpret_cast<SetLoggerFinder>(dlsym(lib, "setLoggerFinder"));
    if (getCreators == nullptr)
    {
        fprintf(stderr, "error: %s does not export getCreators\n", argv[1]);
        return 1;
    }
    static Finder finder;
    if (setLoggerFinder != nullptr)
    {
        setLoggerFinder(&finder);
    }
    int32_t n = 0;
    IPluginCreatorInterface* const* creators = getCreators(n);
    std::ostringstream o;
    o << "{\"library\": " << jsonString(argv[1]) << ", \"set_logger_finder\": "
      << (setLoggerFinder ? "true" : "false") << ", \"creators\": [";
    for (int32_t i = 0; i < n; ++i)
    {
        IPluginCreatorInterface* c = creators[i];
        InterfaceInfo const info = c->getInterfaceInfo();
        o << (i ? ",\n  " : "\n  ") << "{\"interface\": " << interfaceJson(info);
        if (info.kind == nullptr || strcmp(info.kind, "PLUGIN CREATOR_V3ONE") != 0 || info.major != 1)
        {
            o << ", \"name\": \"\", \"version\": \"\", \"namespace\": \"\", \"fields\": []}";
            continue;
        }
        auto* v3 = static_cast<IPluginCreatorV3One*>(c);
        PluginFieldCollection const* names = v3->getFieldNames();
        o << ", \"name\": " << jsonString(v3->getPluginName()) << ", \"version\": "
          << jsonString(v3->getPluginVersion()) << ", \"namespace\": " << jsonString(v3->getPluginNamespace())
          << ", \"fields\": " << fieldsJson(names);
        FieldValues values;
        auto const it = given.find(v3->getPluginName());
        for (int32_t k = 0; names != nullptr && k < names->nbFields && it != given.end(); ++k)
        {
            auto const f = it->second.find(names->fields[k].name);
            if (f != it->second.end())
            {
                values.add(names->fields[k].name, names->fields[k].type, f->second);
            }
        }
        o << ", \"plugin\": " << describePlugin(v3, &values.fc, finder.logger) << "}";
    }
    o << "\n]}\n";
    fputs(o.str().c_str(), stdout);
    return 0;
}
