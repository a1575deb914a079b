// TensorRT 8 has no IPluginRegistry::loadLibrary: a plugin library registers its creators
// itself when it is loaded.  getPluginRegistry() lives in libnvinfer, which this library
// does not link (it loads without TensorRT): it is looked up at load time, in the global
// scope first, then in an already loaded libnvinfer.so.8 (Python's tensorrt module loads it
// with RTLD_LOCAL).  Load TensorRT first, or call fusion_trt8_register() afterwards.
#include "trt8/PluginV2.h"

#include <atomic>
#include <dlfcn.h>

#define FUSION_EXPORT extern "C" __attribute__((visibility("default")))

namespace
{

void* nvinferSymbol(char const* name)
{
    if (void* sym = dlsym(RTLD_DEFAULT, name))
    {
        return sym;
    }
    for (char const* soname : {"libnvinfer.so.8", "libnvinfer.so"})
    {
        if (void* handle = dlopen(soname, RTLD_LAZY | RTLD_NOLOAD))
        {
            void* sym = dlsym(handle, name);
            dlclose(handle); // NOLOAD took a reference; TensorRT's own stays
            if (sym != nullptr)
            {
                return sym;
            }
        }
    }
    return nullptr;
}

// Built on first use, never destroyed: the registry keeps references to them (and a
// load-time constructor may run before this file's static objects are constructed).
nvinfer1::IPluginCreator* const* creators(int32_t& count)
{
    using fusion::PluginCreatorV2;
    static nvinfer1::IPluginCreator* const list[] = {
        new PluginCreatorV2(fusion::specs::fused_layer_norm::kSPEC,
            [](nvinfer1::PluginFieldCollection const* fc) { return fusion::NormPluginV2::create(fusion::NormOp::kLAYER_NORM, fc); }),
        new PluginCreatorV2(fusion::specs::fused_rms_norm::kSPEC,
            [](nvinfer1::PluginFieldCollection const* fc) { return fusion::NormPluginV2::create(fusion::NormOp::kRMS_NORM, fc); }),
        new PluginCreatorV2(fusion::specs::fused_fc::kSPEC, &fusion::FcPluginV2::create),
        new PluginCreatorV2(fusion::specs::fused_skip_layer_norm::kSPEC,
            [](nvinfer1::PluginFieldCollection const* fc) { return fusion::SkipNormPluginV2::create(fusion::NormOp::kLAYER_NORM, fc); }),
        new PluginCreatorV2(fusion::specs::fused_skip_rms_norm::kSPEC,
            [](nvinfer1::PluginFieldCollection const* fc) { return fusion::SkipNormPluginV2::create(fusion::NormOp::kRMS_NORM, fc); }),
        new PluginCreatorV2(fusion::specs::fused_group_norm::kSPEC, &fusion::GroupNormPluginV2::create),
    };
    count = static_cast<int32_t>(sizeof(list) / sizeof(list[0]));
    return list;
}

} // namespace

// Registers every creator with libnvinfer's registry (once per process); returns how many
// are registered, or -1 when no TensorRT is loaded.  Runs when the library is loaded.
FUSION_EXPORT int32_t fusion_trt8_register()
{
    static std::atomic<int32_t> registered{-1};
    if (registered.load() >= 0)
    {
        return registered.load();
    }
    using GetRegistry = nvinfer1::IPluginRegistry* (*) ();
    using GetLogger = nvinfer1::ILogger* (*) ();
    auto getRegistry = reinterpret_cast<GetRegistry>(nvinferSymbol("getPluginRegistry"));
    fusion::setGlobalLoggerGetter(reinterpret_cast<GetLogger>(nvinferSymbol("getLogger")));
    nvinfer1::IPluginRegistry* registry = getRegistry != nullptr ? getRegistry() : nullptr;
    if (registry == nullptr)
    {
        return -1;
    }
    int32_t n = 0;
    nvinfer1::IPluginCreator* const* list = creators(n);
    int32_t ok = 0;
    for (int32_t i = 0; i < n; ++i)
    {
        if (registry->registerCreator(*list[i], list[i]->getPluginNamespace()))
        {
            ++ok;
        }
        else
        {
            fusion::logWarning(std::string("registerCreator refused ") + list[i]->getPluginName() + " (already registered?)");
        }
    }
    registered.store(ok);
    return ok;
}

__attribute__((constructor)) static void fusionRegisterOnLoad()
{
    if (fusion_trt8_register() < 0)
    {
        fusion::logWarning("TensorRT (libnvinfer.so.8) is not loaded: no creators registered; load TensorRT first "
                           "or call fusion_trt8_register()");
    }
}
