// fusion_describe_trt8 LIB [Op.field=value ...]
//
// The TensorRT 8 counterpart of describe.cpp.  A TRT8 plugin library registers its
// creators when it is loaded, through getPluginRegistry(), which normally comes from
// libnvinfer: this program defines that symbol itself (and getLogger), exported with
// -rdynamic, so the library's registration lands in a recording registry.  It then prints,
// in describe.cpp's JSON shape, what each registered creator exposes, creates each plugin
// from the given field values and reports its kind (the top byte of getTensorRTVersion),
// identity, formats, serialized fields, serialize -> deserializePlugin round trip and clone.
// CPU only; fusion/plugins/library.py:check_library compares the output with fusion/rewrite/specs.py.
#include "NvInferRuntime.h"
#include "common/pluginUtils.h"
#include "tools/describeJson.h"
#include "tools/fieldValues.h"

#include <cstring>
#include <dlfcn.h>

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
            fprintf(stderr, "[describe8] %s\n", msg);
        }
    }
    std::string last;
};

struct Registered
{
    IPluginCreator* creator;
    std::string ns;
};

class RecordingRegistry : public IPluginRegistry
{
public:
    bool registerCreator(IPluginCreator& creator, AsciiChar const* const pluginNamespace) noexcept override
    {
        std::string const ns = pluginNamespace != nullptr ? pluginNamespace : "";
        if (getPluginCreator(creator.getPluginName(), creator.getPluginVersion(), ns.c_str()) != nullptr)
        {
            return false;
        }
        creator.setPluginNamespace(ns.c_str());
        entries.push_back({&creator, ns});
        list.push_back(&creator);
        return true;
    }
    IPluginCreator* const* getPluginCreatorList(int32_t* const numCreators) const noexcept override
    {
        *numCreators = static_cast<int32_t>(list.size());
        return list.data();
    }
    IPluginCreator* getPluginCreator(
        AsciiChar const* const name, AsciiChar const* const version, AsciiChar const* const ns) noexcept override
    {
        for (Registered const& r : entries)
        {
            if (strcmp(r.creator->getPluginName(), name) == 0 && strcmp(r.creator->getPluginVersion(), version) == 0
                && r.ns == (ns != nullptr ? ns : ""))
            {
                return r.creator;
            }
        }
        return nullptr;
    }
    void setErrorRecorder(IErrorRecorder* const) noexcept override {}
    IErrorRecorder* getErrorRecorder() const noexcept override
    {
        return nullptr;
    }
    bool deregisterCreator(IPluginCreator const&) noexcept override
    {
        return false;
    }
#if NV_TENSORRT_MAJOR == 8 && NV_TENSORRT_MINOR >= 6
    bool isParentSearchEnabled() const override
    {
        return false;
    }
    void setParentSearchEnabled(bool const) override {}
    PluginLibraryHandle loadLibrary(AsciiChar const*) noexcept override
    {
        return nullptr;
    }
    void deregisterLibrary(PluginLibraryHandle) noexcept override {}
#endif

    std::vector<Registered> entries;
    std::vector<IPluginCreator*> list;
};

RecordingRegistry gRegistry;
Logger gLogger;

std::string kindName(int32_t version)
{
    switch (static_cast<uint32_t>(version) >> 24U)
    {
    case 0: return "IPluginV2";
    case 1: return "IPluginV2Ext";
    case 2: return "IPluginV2IOExt";
    case 3: return "IPluginV2DynamicExt";
    }
    return "unknown";
}

std::string versionJson(char const* kind, int32_t version)
{
    int32_t const v = version & 0xFFFFFF;
    return interfaceJson(kind, v / 1000, (v / 100) % 10);
}

std::vector<char> serialized(IPluginV2 const* p)
{
    std::vector<char> bytes(p->getSerializationSize());
    p->serialize(bytes.data());
    return bytes;
}

// supportsFormatCombination for X (pos 0) of `type`, everything else the same.
bool takesType(IPluginV2DynamicExt* p, DataType type, int32_t nbInputs)
{
    std::vector<PluginTensorDesc> io(static_cast<size_t>(nbInputs + 1));
    for (PluginTensorDesc& d : io)
    {
        d.dims.nbDims = 2;
        d.dims.d[0] = 4;
        d.dims.d[1] = 8;
        d.type = type;
        d.format = TensorFormat::kLINEAR;
        d.scale = 1.F;
    }
    bool ok = true;
    for (int32_t pos = 0; pos <= nbInputs; ++pos)
    {
        ok = ok && p->supportsFormatCombination(pos, io.data(), nbInputs, 1);
    }
    return ok;
}

std::string describePlugin(IPluginCreator* creator, PluginFieldCollection const* fc, int32_t nbInputs)
{
    std::ostringstream o;
    gLogger.last.clear();
    IPluginV2* plugin = creator->createPlugin("describe", fc);
    if (plugin == nullptr)
    {
        o << "{\"created\": false, \"error\": " << jsonString(gLogger.last) << "}";
        return o.str();
    }
    int32_t const version = plugin->getTensorRTVersion();
    bool const dynamic = (static_cast<uint32_t>(version) >> 24U) == 3U;
    o << "{\"created\": true, \"interface\": " << versionJson(kindName(version).c_str(), version)
      << ", \"name\": " << jsonString(plugin->getPluginType()) << ", \"version\": "
      << jsonString(plugin->getPluginVersion()) << ", \"namespace\": " << jsonString(plugin->getPluginNamespace())
      << ", \"nb_outputs\": " << plugin->getNbOutputs();
    if (dynamic)
    {
        auto* d = static_cast<IPluginV2DynamicExt*>(plugin);
        o << ", \"formats\": {\"float\": " << (takesType(d, DataType::kFLOAT, nbInputs) ? "true" : "false")
          << ", \"half\": " << (takesType(d, DataType::kHALF, nbInputs) ? "true" : "false")
          << ", \"int8\": " << (takesType(d, DataType::kINT8, nbInputs) ? "true" : "false") << "}";
    }
    std::vector<char> const first = serialized(plugin);
    fusion::PackedFields unpacked;
    std::string error;
    bool const parsed = unpacked.parse(first.data(), first.size(), error);
    o << ", \"serialized\": " << fieldsJson(parsed ? unpacked.collection() : nullptr);
    IPluginV2* again = creator->deserializePlugin("describe", first.data(), first.size());
    bool roundtrip = false;
    std::string why = parsed ? "deserializePlugin failed: " + gLogger.last : "unreadable: " + error;
    if (again != nullptr)
    {
        roundtrip = serialized(again) == first && strcmp(again->getPluginType(), plugin->getPluginType()) == 0
            && strcmp(again->getPluginNamespace(), plugin->getPluginNamespace()) == 0;
        why = roundtrip ? "" : "serialized bytes differ after deserializePlugin";
        again->destroy();
    }
    o << ", \"roundtrip\": " << (roundtrip ? "true" : "false") << ", \"roundtrip_error\": " << jsonString(why);
    // Bytes that are not ours must be refused, not read.
    char const foreign[] = "not a fusion plugin";
    IPluginV2* bogus = creator->deserializePlugin("describe", foreign, sizeof(foreign));
    o << ", \"rejects_foreign\": " << (bogus == nullptr ? "true" : "false");
    if (bogus != nullptr)
    {
        bogus->destroy();
    }
    IPluginV2* copy = plugin->clone();
    bool const cloneOk = copy != nullptr && strcmp(copy->getPluginType(), plugin->getPluginType()) == 0
        && strcmp(copy->getPluginVersion(), plugin->getPluginVersion()) == 0
        && strcmp(copy->getPluginNamespace(), plugin->getPluginNamespace()) == 0 && serialized(copy) == first;
    if (copy != nullptr)
    {
        copy->destroy();
    }
    o << ", \"clone\": " << (cloneOk ? "true" : "false")
      << ", \"clone_error\": " << jsonString(cloneOk ? "" : "clone differs from the original");
    plugin->destroy();
    return o.str() + "}";
}

} // namespace

// What libnvinfer would provide; the library under test finds these with dlsym.
extern "C" __attribute__((visibility("default"))) IPluginRegistry* getPluginRegistry() noexcept
{
    return &gRegistry;
}

extern "C" __attribute__((visibility("default"))) ILogger* getLogger() noexcept
{
    return &gLogger;
}

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
    void* lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL); // registers its creators with gRegistry
    if (lib == nullptr)
    {
        fprintf(stderr, "error: dlopen failed: %s\n", dlerror());
        return 1;
    }
    std::ostringstream o;
    o << "{\"library\": " << jsonString(argv[1]) << ", \"creators\": [";
    for (size_t i = 0; i < gRegistry.entries.size(); ++i)
    {
        IPluginCreator* c = gRegistry.entries[i].creator;
        PluginFieldCollection const* names = c->getFieldNames();
        o << (i ? ",\n  " : "\n  ") << "{\"interface\": " << versionJson("IPluginCreator", c->getTensorRTVersion())
          << ", \"name\": " << jsonString(c->getPluginName()) << ", \"version\": " << jsonString(c->getPluginVersion())
          << ", \"namespace\": " << jsonString(c->getPluginNamespace())
          << ", \"registered_namespace\": " << jsonString(gRegistry.entries[i].ns)
          << ", \"fields\": " << fieldsJson(names);
        FieldValues values;
        auto const it = given.find(c->getPluginName());
        for (int32_t k = 0; names != nullptr && k < names->nbFields && it != given.end(); ++k)
        {
            auto const f = it->second.find(names->fields[k].name);
            if (f != it->second.end())
            {
                values.add(names->fields[k].name, names->fields[k].type, f->second);
            }
        }
        // IPluginCreator does not say how many inputs a plugin takes: the format check
        // uses the compiled-in spec's count (only that check depends on it).
        int32_t nbInputs = 1;
        for (fusion::specs::PluginSpec const* s : {&fusion::specs::fused_layer_norm::kSPEC,
                 &fusion::specs::fused_rms_norm::kSPEC, &fusion::specs::fused_fc::kSPEC})
        {
            nbInputs = strcmp(s->name, c->getPluginName()) == 0 ? s->maxInputs : nbInputs;
        }
        o << ", \"plugin\": " << describePlugin(c, &values.fc, nbInputs) << "}";
    }
    o << "\n]}\n";
    fputs(o.str().c_str(), stdout);
    return 0;
}
