// Which cuDNN calls a batch norm takes, apart from making them, so that the rule is tested
// without a GPU. Channels-last half activations reach cuDNN's NHWC semi-persistent kernels only
// through the *Ex calls, given a workspace and a reserve space that forward leaves for backward
// (what PyTorch calls); the plain calls fall back to slower kernels, the GPU issue's first suspect
// for amp's and bf16's slowness. DLBENCH_CUDA_BATCH_NORM=plain keeps the plain calls, so that one
// GPU run can time both.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include "dtype.hpp"
#include "tensor.hpp"

namespace dlbench::worker {

enum class BatchNormCalls { plain, ex };

// Channels-last half activations: cuDNN's persistent batch-norm mode, and its *Ex calls.
inline bool half_channels_last(Layout layout, DType dtype) { return layout == Layout::nhwc && dtype != DType::fp32; }

// `choice` is DLBENCH_CUDA_BATCH_NORM's value (null or empty: unset). Throws std::invalid_argument
// naming the variable and its allowed values for anything else.
inline BatchNormCalls batch_norm_calls(Layout layout, DType dtype, const char* choice) {
  const std::string_view chosen = choice == nullptr ? std::string_view() : std::string_view(choice);
  if (!chosen.empty() && chosen != "plain" && chosen != "ex") {
    throw std::invalid_argument("DLBENCH_CUDA_BATCH_NORM: \"" + std::string(chosen) + "\" is not one of plain, ex");
  }
  // The semi-persistent kernels are for channels-last half tensors; fp32 (NCHW) keeps the plain calls.
  return half_channels_last(layout, dtype) && chosen != "plain" ? BatchNormCalls::ex : BatchNormCalls::plain;
}

}  // namespace dlbench::worker
