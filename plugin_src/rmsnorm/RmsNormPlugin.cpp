#include "rmsnorm/RmsNormPlugin.h"

namespace fusion
{

RmsNormPluginCreator::RmsNormPluginCreator()
    : NormPluginCreator(NormOp::kRMS_NORM)
{
}

} // namespace fusion
