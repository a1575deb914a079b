// Library entry points TensorRT looks up after dlopen (IPluginRegistry::loadLibrary,
// trtexec --dynamicPlugins): setLoggerFinder, then getCreators.  Nothing here needs
// libnvinfer, so the library links without it.
#include "trt10/PluginV3.h"

#define FUSION_EXPORT extern "C" __attribute__((visibility("default")))

FUSION_EXPORT void setLoggerFinder(nvinfer1::ILoggerFinder* finder)
{
    fusion::setGlobalLoggerFinder(finder);
}

FUSION_EXPORT nvinfer1::IPluginCreatorInterface* const* getCreators(int32_t& nbCreators)
{
    using fusion::PluginCreatorV3;
    using Fields = nvinfer1::PluginFieldCollection;
    namespace specs = fusion::specs;
    static PluginCreatorV3 layerNorm(specs::fused_layer_norm::kSPEC,
        [](Fields const* fc) { return fusion::NormPluginV3::create(fc, fusion::NormOp::kLAYER_NORM); });
    static PluginCreatorV3 rmsNorm(specs::fused_rms_norm::kSPEC,
        [](Fields const* fc) { return fusion::NormPluginV3::create(fc, fusion::NormOp::kRMS_NORM); });
    static PluginCreatorV3 fc(specs::fused_fc::kSPEC, &fusion::FcPluginV3::create);
    static PluginCreatorV3 skipLayerNorm(specs::fused_skip_layer_norm::kSPEC,
        [](Fields const* fc) { return fusion::SkipNormPluginV3::create(fc, fusion::NormOp::kLAYER_NORM); });
    static PluginCreatorV3 skipRmsNorm(specs::fused_skip_rms_norm::kSPEC,
        [](Fields const* fc) { return fusion::SkipNormPluginV3::create(fc, fusion::NormOp::kRMS_NORM); });
    static PluginCreatorV3 groupNorm(specs::fused_group_norm::kSPEC, &fusion::GroupNormPluginV3::create<>);
    // In fusion_specs() order (tests/test_plugins.py compares the lists).
    static nvinfer1::IPluginCreatorInterface* const creators[] = {&layerNorm, &rmsNorm, &fc, &skipLayerNorm, &skipRmsNorm,
                                                                  &groupNorm};
    nbCreators = static_cast<int32_t>(sizeof(creators) / sizeof(creators[0]));
    return creators;
}
