// Library entry points TensorRT looks up after dlopen (IPluginRegistry::loadLibrary,
// trtexec --dynamicPlugins): setLoggerFinder, then getCreators.  Nothing here needs
// libnvinfer, so the library links without it.
#include "common/pluginUtils.h"
#include "fc/FcPlugin.h"
#include "groupnorm/GroupNormPlugin.h"
#include "layernorm/LayerNormPlugin.h"
#include "rmsnorm/RmsNormPlugin.h"
#include "skipnorm/SkipNormPlugin.h"

#define FUSION_EXPORT extern "C" __attribute__((visibility("default")))

FUSION_EXPORT void setLoggerFinder(nvinfer1::ILoggerFinder* finder)
{
    fusion::setGlobalLoggerFinder(finder);
}

FUSION_EXPORT nvinfer1::IPluginCreatorInterface* const* getCreators(int32_t& nbCreators)
{
    static fusion::LayerNormPluginCreator layerNorm;
    static fusion::RmsNormPluginCreator rmsNorm;
    static fusion::FcPluginCreator fc;
    static fusion::SkipNormPluginCreator skipLayerNorm(fusion::NormOp::kLAYER_NORM);
    static fusion::SkipNormPluginCreator skipRmsNorm(fusion::NormOp::kRMS_NORM);
    static fusion::GroupNormPluginCreator groupNorm;
    // In fusion_specs() order (tests/test_plugins.py compares the lists).
    static nvinfer1::IPluginCreatorInterface* const creators[] = {&layerNorm, &rmsNorm, &fc, &skipLayerNorm, &skipRmsNorm,
                                                                  &groupNorm};
    nbCreators = static_cast<int32_t>(sizeof(creators) / sizeof(creators[0]));
    return creators;
}
