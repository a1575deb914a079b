// FusedRMSNorm: Y = X / sqrt(mean(X^2) + epsilon) * Scale over dims [axis, rank).
// The IPluginV3 implementation is shared with LayerNorm (common/NormPlugin.h); this creator
// binds it to the FusedRMSNorm spec and the rmsnorm kernels (rmsNormKernel.cu).
#pragma once

#include "common/NormPlugin.h"

namespace fusion
{

class RmsNormPluginCreator : public NormPluginCreator
{
public:
    RmsNormPluginCreator();
};

} // namespace fusion
