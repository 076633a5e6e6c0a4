// Whether a backend runs a residual block's convolutions and the batch norms between them apart
// or fused (FusedConv2dOp, BatchNormConfig::deferred): `fused`, every fusion the backend has (the
// data gradient with the batch norm's backward too, FusedConv2dConfig::input_batch_norm_gradients);
// `fused-forward`, the forward and filter-gradient fusions only, the data gradient and the batch
// norm's backward apart (the A/B of the data-gradient fusion). Read from a backend's switch
// (DLBENCH_CPU_CONV_BATCH_NORM, DLBENCH_CUDA_CONV_BATCH_NORM); apart unless it says otherwise,
// until a benchmark has shown the fused passes faster on that backend.
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

inline ConvBatchNormRoute conv_batch_norm_route(const char* variable, const char* value) {
  return env_choice(variable, value, kConvBatchNormRoutes).value_or(ConvBatchNormRoute::separate);
}

}  // namespace dlbench::worker
