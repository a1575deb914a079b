// Generated from fusion/rewrite/specs.py by fusion/plugins/library.py:render_spec_header. Do not edit:
// build_library writes a fresh copy into the build folder; tests/test_plugins.py checks
// that this committed copy is current (regenerate: python -m fusion.plugins.library header).
#pragma once

#include <cstdint>

#include "NvInferRuntime.h"

namespace fusion
{
namespace specs
{

struct FieldSpec
{
    char const* name;
    nvinfer1::PluginFieldType type;
    int32_t length; // 1: scalar; 0: variable length (strings, arrays)
    bool required;
};

struct PluginSpec
{
    char const* name;
    char const* version;
    char const* pluginNamespace;
    int32_t minInputs;
    int32_t maxInputs;
    int32_t nbOutputs;
    int32_t nbFields;
    FieldSpec const* fields;
};

// Y = (X - mean) / sqrt(var + epsilon) * Scale + B over dims [axis, rank), fp32 accumulation.
namespace fused_layer_norm
{
constexpr FieldSpec kFIELDS[] = {
    {"epsilon", nvinfer1::PluginFieldType::kFLOAT32, 1, true},
    {"axis", nvinfer1::PluginFieldType::kINT32, 1, false},
};
constexpr PluginSpec kSPEC{"FusedLayerNorm", "1", "fusion", 1, 3, 1, 2, kFIELDS};
enum Field : int32_t
{
    kEPSILON = 0,
    kAXIS = 1,
};
enum Input : int32_t
{
    kINPUT_X = 0,
    kINPUT_SCALE = 1,
    kINPUT_B = 2,
};
constexpr int32_t kAXIS_DEFAULT = -1;
} // namespace fused_layer_norm

// Y = X / sqrt(mean(X^2) + epsilon) * Scale over dims [axis, rank), fp32 accumulation.
namespace fused_rms_norm
{
constexpr FieldSpec kFIELDS[] = {
    {"epsilon", nvinfer1::PluginFieldType::kFLOAT32, 1, true},
    {"axis", nvinfer1::PluginFieldType::kINT32, 1, false},
};
constexpr PluginSpec kSPEC{"FusedRMSNorm", "1", "fusion", 1, 2, 1, 2, kFIELDS};
enum Field : int32_t
{
    kEPSILON = 0,
    kAXIS = 1,
};
enum Input : int32_t
{
    kINPUT_X = 0,
    kINPUT_SCALE = 1,
};
constexpr int32_t kAXIS_DEFAULT = -1;
} // namespace fused_rms_norm

// Fully connected layer: cuBLASLt GEMM with the bias and activation fused as an epilogue.
namespace fused_fc
{
constexpr FieldSpec kFIELDS[] = {
    {"out_features", nvinfer1::PluginFieldType::kINT32, 1, true},
    {"transpose_weight", nvinfer1::PluginFieldType::kINT32, 1, false},
    {"alpha", nvinfer1::PluginFieldType::kFLOAT32, 1, false},
    {"activation", nvinfer1::PluginFieldType::kCHAR, 0, false},
};
constexpr PluginSpec kSPEC{"FusedFC", "1", "fusion", 3, 3, 1, 4, kFIELDS};
enum Field : int32_t
{
    kOUT_FEATURES = 0,
    kTRANSPOSE_WEIGHT = 1,
    kALPHA = 2,
    kACTIVATION = 3,
};
enum Input : int32_t
{
    kINPUT_X = 0,
    kINPUT_W = 1,
    kINPUT_B = 2,
};
constexpr int32_t kTRANSPOSE_WEIGHT_DEFAULT = 0;
constexpr int32_t kTRANSPOSE_WEIGHT_CHOICES[] = {0, 1};
constexpr int32_t kNB_TRANSPOSE_WEIGHT_CHOICES = 2;
constexpr float kALPHA_DEFAULT = 1.0F;
constexpr char const* kACTIVATION_DEFAULT = "none";
constexpr char const* kACTIVATION_CHOICES[] = {"none", "relu", "gelu_erf", "gelu_tanh"};
constexpr int32_t kNB_ACTIVATION_CHOICES = 4;
} // namespace fused_fc

// S = X + Skip + Bias; Y = (S - mean) / sqrt(var + epsilon) * Scale + B over dims [axis, rank), fp32 accumulation; Sum = S when with_sum = 1.
namespace fused_skip_layer_norm
{
constexpr FieldSpec kFIELDS[] = {
    {"epsilon", nvinfer1::PluginFieldType::kFLOAT32, 1, true},
    {"axis", nvinfer1::PluginFieldType::kINT32, 1, false},
    {"with_sum", nvinfer1::PluginFieldType::kINT32, 1, false},
};
constexpr PluginSpec kSPEC{"FusedSkipLayerNorm", "1", "fusion", 5, 5, 2, 3, kFIELDS};
enum Field : int32_t
{
    kEPSILON = 0,
    kAXIS = 1,
    kWITH_SUM = 2,
};
enum Input : int32_t
{
    kINPUT_X = 0,
    kINPUT_SKIP = 1,
    kINPUT_BIAS = 2,
    kINPUT_SCALE = 3,
    kINPUT_B = 4,
};
constexpr int32_t kAXIS_DEFAULT = -1;
constexpr int32_t kWITH_SUM_DEFAULT = 0;
constexpr int32_t kWITH_SUM_CHOICES[] = {0, 1};
constexpr int32_t kNB_WITH_SUM_CHOICES = 2;
} // namespace fused_skip_layer_norm

// S = X + Skip + Bias; Y = S / sqrt(mean(S^2) + epsilon) * Scale over dims [axis, rank), fp32 accumulation; Sum = S when with_sum = 1.
namespace fused_skip_rms_norm
{
constexpr FieldSpec kFIELDS[] = {
    {"epsilon", nvinfer1::PluginFieldType::kFLOAT32, 1, true},
    {"axis", nvinfer1::PluginFieldType::kINT32, 1, false},
    {"with_sum", nvinfer1::PluginFieldType::kINT32, 1, false},
};
constexpr PluginSpec kSPEC{"FusedSkipRMSNorm", "1", "fusion", 4, 4, 2, 3, kFIELDS};
enum Field : int32_t
{
    kEPSILON = 0,
    kAXIS = 1,
    kWITH_SUM = 2,
};
enum Input : int32_t
{
    kINPUT_X = 0,
    kINPUT_SKIP = 1,
    kINPUT_BIAS = 2,
    kINPUT_SCALE = 3,
};
constexpr int32_t kAXIS_DEFAULT = -1;
constexpr int32_t kWITH_SUM_DEFAULT = 0;
constexpr int32_t kWITH_SUM_CHOICES[] = {0, 1};
constexpr int32_t kNB_WITH_SUM_CHOICES = 2;
} // namespace fused_skip_rms_norm

// Y = (X - mean_g) / sqrt(var_g + epsilon) * Scale[c] + B[c] per group g of C / num_groups channels, then SiLU if silu = 1; fp32 statistics.
namespace fused_group_norm
{
constexpr FieldSpec kFIELDS[] = {
    {"epsilon", nvinfer1::PluginFieldType::kFLOAT32, 1, true},
    {"num_groups", nvinfer1::PluginFieldType::kINT32, 1, true},
    {"silu", nvinfer1::PluginFieldType::kINT32, 1, false},
};
constexpr PluginSpec kSPEC{"FusedGroupNorm", "1", "fusion", 3, 3, 1, 3, kFIELDS};
enum Field : int32_t
{
    kEPSILON = 0,
    kNUM_GROUPS = 1,
    kSILU = 2,
};
enum Input : int32_t
{
    kINPUT_X = 0,
    kINPUT_SCALE = 1,
    kINPUT_B = 2,
};
constexpr int32_t kSILU_DEFAULT = 0;
constexpr int32_t kSILU_CHOICES[] = {0, 1};
constexpr int32_t kNB_SILU_CHOICES = 2;
} // namespace fused_group_norm

} // namespace specs
} // namespace fusion
