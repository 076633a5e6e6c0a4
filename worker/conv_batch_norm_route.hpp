// Whether a backend runs a residual block's convolutions and the batch norms between them apart
// or fused (FusedConv2dOp, BatchNormConfig::deferred). Read from a backend's switch
// (DLBENCH_CPU_CONV_BATCH_NORM, DLBENCH_CUDA_CONV_BATCH_NORM); apart unless it says fused, until a
// benchmark has shown the fused passes faster on that backend.
#pragma once

#include "env_choice.hpp"

namespace dlbench::worker {

enum class ConvBatchNormRoute { separate, fused };

inline constexpr Choices<ConvBatchNormRoute, 2> kConvBatchNormRoutes{
    {{"separate", ConvBatchNormRoute::separate}, {"fused", ConvBatchNormRoute::fused}}};

inline ConvBatchNormRoute conv_batch_norm_route(const char* variable, const char* value) {
  return env_choice(variable, value, kConvBatchNormRoutes).value_or(ConvBatchNormRoute::separate);
}

}  // namespace dlbench::worker
