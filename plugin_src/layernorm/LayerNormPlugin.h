// FusedLayerNorm: Y = (X - mean) / sqrt(var + epsilon) * Scale + B over dims [axis, rank).
// The IPluginV3 implementation is shared with RMSNorm (common/NormPlugin.h); this creator
// binds it to the FusedLayerNorm spec and the layernorm kernels (layerNormKernel.cu).
#pragma once

#include "common/NormPlugin.h"

namespace fusion
{

class LayerNormPluginCreator : public NormPluginCreator
{
public:
    LayerNormPluginCreator();
};

} // namespace fusion
