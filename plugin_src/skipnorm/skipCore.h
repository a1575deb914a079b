// What FusedSkipLayerNorm and FusedSkipRMSNorm do, independent of the TensorRT plugin
// interface (as common/normCore.h for the plain norms): fields, shape checks, the launch.
// Inputs X, Skip, Bias, Scale (, B); outputs Y and Sum (written only when with_sum = 1).
#pragma once

#include "common/pluginUtils.h"

namespace fusion
{

specs::PluginSpec const& skipNormSpec(NormOp op) noexcept;

struct SkipNormConfig
{
    NormOp op{NormOp::kLAYER_NORM};
    float epsilon{0.F};
    int32_t axis{-1};
    int32_t withSum{0};

    specs::PluginSpec const& spec() const noexcept
    {
        return skipNormSpec(op);
    }
    static bool fromFields(NormOp op, nvinfer1::PluginFieldCollection const* fc, SkipNormConfig& out);
    int32_t firstNormDim(int32_t rank) const noexcept;
    // Skip has X's dims (unknown dims pass: enqueue checks them); Bias/Scale/B the normalized size.
    bool checkShapes(nvinfer1::Dims const* dims, int32_t nbInputs) const noexcept;
    int32_t enqueue(nvinfer1::PluginTensorDesc const* inputDesc, int32_t nbInputs, void const* const* inputs,
        void* const* outputs, cudaStream_t stream) const noexcept;
    void writeFields(FieldWriter& w);
};

} // namespace fusion
