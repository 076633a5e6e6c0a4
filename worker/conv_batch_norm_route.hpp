// Whether a backend runs a residual block's convolutions and the batch norms between them apart
// or fused (FusedConv2dOp, BatchNormConfig::deferred): `fused`, every fusion the backend has (the
// data gradient with the batch norm's backward too, FusedConv2dConfig::input_batch_norm_gradients);
// `fused-forward`, the forward and filter-gradient fusions only, the data gradient and the batch
// norm's backward apart (the A/B of the data-gradient fusion). Read from a backend's switch
// (DLBENCH_CPU_CONV_BATCH_NORM, DLBENCH_CUDA_CONV_BATCH_NORM); unset, each backend's default: apart
// until a benchmark has shown the fused passes faster on that backend (cuda_conv_batch_norm_default).
#pragma once

#include <optional>

#include "backend.hpp"
#include "env_choice.hpp"

namespace dlbench::worker {

enum class ConvBatchNormRoute { separate, fused, fused_forward };

inline constexpr Choices<ConvBatchNormRoute, 3> kConvBatchNormRoutes{{{"separate", ConvBatchNormRoute::separate},
                                                                      {"fused", ConvBatchNormRoute::fused},
                                                                      {"fused-forward", ConvBatchNormRoute::fused_forward}}};

// `asked` as the route lets it be made: none where it runs apart, the data gradient's fusion
// dropped where it fuses the forward passes only.
inline std::optional<FusedConv2dConfig> routed(ConvBatchNormRoute route, FusedConv2dConfig asked) {
  if (route == ConvBatchNormRoute::separate) return std::nullopt;
  if (route == ConvBatchNormRoute::fused_forward) asked.input_batch_norm_gradients = false;
  return asked;
}

// `value` is the switch's (null or empty: unset, `unset`). Throws std::invalid_argument naming the
// variable and its allowed values for anything else.
inline ConvBatchNormRoute conv_batch_norm_route(const char* variable, const char* value,
                                                ConvBatchNormRoute unset = ConvBatchNormRoute::separate) {
  return env_choice(variable, value, kConvBatchNormRoutes).value_or(unset);
}

// The CUDA backend's route where DLBENCH_CUDA_CONV_BATCH_NORM is unset, by its activations: fp16
// fuses the forward and filter-gradient passes. On an H200 (2026-12-04, batch 256) amp ResNet-50
// ran 7,546.9 images/s against 7,211.9 apart (PyTorch eager 5,493.1), every bottleneck fused
// and its self-test passing. bf16 stays apart: no engine of cuDNN 9.19 fuses its normalised-input
// passes on an H200 (0 of 53 convolutions), so asking would only cost each block a refusal.
inline ConvBatchNormRoute cuda_conv_batch_norm_default(DType activations) {
  return activations == DType::fp16 ? ConvBatchNormRoute::fused_forward : ConvBatchNormRoute::separate;
}

}  // namespace dlbench::worker
