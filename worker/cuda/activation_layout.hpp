// The memory order of the CUDA backend's activations, apart from the backend so that the rule is
// tested without a GPU. fp16 and bf16 are channels-last (NHWC), the order cuDNN's tensor-core
// kernels and its semi-persistent batch norm work in. fp32 and tf32 stay NCHW unless
// DLBENCH_CUDA_LAYOUT=nhwc: on an H200 PyTorch's channels_last tf32 ResNet-50 ran 1.47x dlbench's
// NCHW one (bench/RESULTS.md, 2026-11-26), and the variable lets one device call time both before
// the default moves.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include "dtype.hpp"
#include "tensor.hpp"

namespace dlbench::worker {

// `choice` is DLBENCH_CUDA_LAYOUT's value (null or empty: unset). Throws std::invalid_argument
// naming the variable and its allowed values for anything else, and for nchw with half activations.
inline Layout cuda_activation_layout(DType activations, const char* choice) {
  const std::string_view chosen = choice == nullptr ? std::string_view() : std::string_view(choice);
  if (!chosen.empty() && chosen != "nchw" && chosen != "nhwc") {
    throw std::invalid_argument("DLBENCH_CUDA_LAYOUT: \"" + std::string(chosen) + "\" is not one of nchw, nhwc");
  }
  if (activations != DType::fp32) {
    if (chosen == "nchw") {
      throw std::invalid_argument("DLBENCH_CUDA_LAYOUT: nchw is for fp32 and tf32 activations; " +
                                  std::string(to_string(activations)) + " activations are nhwc only");
    }
    return Layout::nhwc;
  }
  return chosen == "nhwc" ? Layout::nhwc : Layout::nchw;
}

}  // namespace dlbench::worker
