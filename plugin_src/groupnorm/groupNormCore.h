// What FusedGroupNorm does, independent of the TensorRT plugin interface: field parsing, shape
// checks, the launch and the serialized fields.  Compiled into both libraries (IPluginV3 glue
// in trt10/, IPluginV2DynamicExt glue in trt8/), each against its own headers.
#pragma once

#include "common/pluginUtils.h"

namespace fusion
{

struct GroupNormConfig
{
    float epsilon{0.F};
    int32_t numGroups{1};
    int32_t silu{0};

    static specs::PluginSpec const& spec() noexcept
    {
        return specs::fused_group_norm::kSPEC;
    }
    // Validates the fields (unknown, mistyped, missing, eps < 0, num_groups < 1, silu not 0/1).
    static bool fromFields(nvinfer1::PluginFieldCollection const* fc, GroupNormConfig& out);
    // fp32 / fp16, linear; Scale, B and Y of X's type.
    static bool supportsFormat(int32_t pos, nvinfer1::PluginTensorDesc const& desc, nvinfer1::DataType xType) noexcept;
    // X is [N, C, ...] (rank >= 2) with num_groups dividing C, Scale and B hold C elements
    // (dims still unknown (-1) at build time pass).
    bool checkShapes(nvinfer1::Dims const* dims, int32_t nbInputs) const noexcept;
    // The workspace for X of these dims (the profile's largest) and type: the stream kernels'
    // partials where its groups take that path, else 0.
    size_t workspaceSize(nvinfer1::Dims const& x, nvinfer1::DataType type) const noexcept;
    int32_t enqueue(nvinfer1::PluginTensorDesc const& descX, void const* const* inputs, void* const* outputs,
        void* workspace, cudaStream_t stream) const noexcept;
    void writeFields(FieldWriter& w);
};

} // namespace fusion
