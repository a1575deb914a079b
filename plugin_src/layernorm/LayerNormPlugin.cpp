#include "layernorm/LayerNormPlugin.h"

namespace fusion
{

LayerNormPluginCreator::LayerNormPluginCreator()
    : NormPluginCreator(NormOp::kLAYER_NORM)
{
}

} // namespace fusion
