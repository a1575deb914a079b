// What FusedLayerNorm and FusedRMSNorm do, independent of the TensorRT plugin interface:
// field parsing, shape checks, the launch and the serialized fields.  Compiled into both
// libraries, each against its own TensorRT headers (Dims are int64 in 10.x, int32 in 8.x),
// so the IPluginV3 glue (trt10/) and the IPluginV2DynamicExt glue (trt8/) stay thin.
#pragma once

#include "common/pluginUtils.h"

namespace fusion
{

specs::PluginSpec const& normSpec(NormOp op) noexcept;

struct NormConfig
{
    NormOp op{NormOp::kLAYER_NORM};
    float epsilon{0.F};
    int32_t axis{-1};

    specs::PluginSpec const& spec() const noexcept
    {
        return normSpec(op);
    }
    // Validates the fields (unknown, mistyped, missing, eps < 0 ...); logs and returns false.
    static bool fromFields(NormOp op, nvinfer1::PluginFieldCollection const* fc, NormConfig& out);
    // First normalized dim for a tensor of this rank, or -1 if axis does not fit.
    int32_t firstNormDim(int32_t rank) const noexcept;
    // X's rank fits the axis and Scale/B hold as many elements as the normalized dims.
    bool checkShapes(nvinfer1::Dims const* dims, int32_t nbInputs) const noexcept;
    // Launches the kernel for X = inputs[0] (descX), Scale/B when nbInputs says so.
    int32_t enqueue(nvinfer1::PluginTensorDesc const& descX, int32_t nbInputs, void const* const* inputs,
        void* const* outputs, cudaStream_t stream) const noexcept;
    // The fields to serialize; they point at this object's members.
    void writeFields(FieldWriter& w);
};

} // namespace fusion
