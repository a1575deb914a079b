// What FusedFC does, independent of the TensorRT plugin interface: field parsing, shape
// checks, the cuBLASLt plan and launch, the serialized fields.  Compiled into both
// libraries against each one's TensorRT headers (see common/normCore.h).
#pragma once

#include "common/pluginUtils.h"
#include "fc/FcGemm.h"

#include <string>

namespace fusion
{

struct FcConfig
{
    // cuBLASLt may use this much scratch; TensorRT provides it per enqueue.
    static constexpr size_t kWORKSPACE_BYTES = size_t{32} << 20;

    int32_t outFeatures{0};
    int32_t transposeWeight{0};
    float alpha{1.F};
    std::string activationName;
    Activation activation{Activation::kNONE};

    // The spec's activation names, in Activation order; -1 if `name` is none of them.
    static int32_t activationIndex(std::string const& name) noexcept;
    // Validates the fields; logs and returns false.
    static bool fromFields(nvinfer1::PluginFieldCollection const* fc, FcConfig& out);
    // X[..., K], W [K, N] or [N, K], B of N elements (unknown dims pass).
    bool checkDims(nvinfer1::Dims const& x, nvinfer1::Dims const& w, nvinfer1::Dims const& b) const noexcept;
    // checkDims and, where it fails, whether cuBLASLt can be opened (build time).
    bool configure(nvinfer1::Dims const* dims, int32_t nbInputs, int32_t nbOutputs) const noexcept;
    // Plans the GEMM for these shapes (runtime shape change).
    bool plan(nvinfer1::PluginTensorDesc const* in, int32_t nbInputs, LtGemm& gemm) const noexcept;
    int32_t enqueue(nvinfer1::PluginTensorDesc const* inputDesc, void const* const* inputs, void* const* outputs,
        void* workspace, cudaStream_t stream, LtGemm& gemm) const noexcept;
    // The fields to serialize; they point at this object's members.
    void writeFields(FieldWriter& w);

private:
    bool shapeOf(nvinfer1::PluginTensorDesc const* in, GemmShape& shape) const noexcept;
};

} // namespace fusion
