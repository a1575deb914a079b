// fusion_describe LIB [Op.field=value ...]
//
// Loads a plugin library the way TensorRT's IPluginRegistry::loadLibrary does (dlopen,
// setLoggerFinder, getCreators) and prints, as JSON, what each creator exposes: interface,
// name, version, namespace and fields; then creates each plugin from the given field
// values and reports its core identity, capabilities, serialized fields, whether
// serialize -> recreate round-trips and whether clone keeps the identity.  CPU only:
// nothing here touches a GPU.  fusion/plugins/library.py:check_library compares the output
// with fusion/rewrite/specs.py.
#include "NvInferRuntime.h"
#include "tools/describeJson.h"
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
    o << "{\"created\": true, \"interface\": " << interfaceJson(plugin->getInterfaceInfo().kind, plugin->getInterfaceInfo().major, plugin->getInterfaceInfo().minor);
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
    GivenFields given;
    if (!parseGivenFields(argc, argv, 2, given))
    {
        return 2;
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
        o << (i ? ",\n  " : "\n  ") << "{\"interface\": " << interfaceJson(info.kind, info.major, info.minor);
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
