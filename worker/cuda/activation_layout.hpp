// The memory order of the CUDA backend's activations, apart from the backend so that the rule is
// tested without a GPU. Whatever computes on tensor cores (fp16, bf16 and tf32) is channels-last
// (NHWC), the order cuDNN's tensor-core kernels and its semi-persistent batch norm work in; true
// fp32 stays NCHW. Measured on an H200 (bench/RESULTS.md, 2026-11-27), ResNet-50 images/s:
// tf32 3,100 NHWC against 2,138 NCHW; fp32 705 NHWC against 884 NCHW. DLBENCH_CUDA_LAYOUT=nchw|nhwc
// overrides the fp32-storage default, so that one device call can time both again.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>

#include "env_choice.hpp"
#include "dtype.hpp"
#include "tensor.hpp"

namespace dlbench::worker {

// fp32: true fp32 arithmetic (cuDNN FMA math, cuBLAS 32F compute, no TF32).
// tf32: tensor cores with TF32 inputs and fp32 accumulation, as PyTorch's allow_tf32.
enum class CudaMath { fp32, tf32 };

// `choice` is DLBENCH_CUDA_LAYOUT's value (null or empty: unset). Throws std::invalid_argument
// naming the variable and its allowed values for anything else, and for nchw with half activations.
inline constexpr Choices<Layout, 2> kCudaLayouts{{{"nchw", Layout::nchw}, {"nhwc", Layout::nhwc}}};

inline Layout cuda_activation_layout(DType activations, CudaMath math, const char* choice) {
  const std::optional<Layout> chosen = env_choice("DLBENCH_CUDA_LAYOUT", choice, kCudaLayouts);
  if (activations != DType::fp32) {
    if (chosen == Layout::nchw) {
      throw std::invalid_argument("DLBENCH_CUDA_LAYOUT: nchw is for fp32 and tf32 activations; " +
                                  std::string(to_string(activations)) + " activations are nhwc only");
    }
    return Layout::nhwc;
  }
  if (chosen) return *chosen;
  return math == CudaMath::tf32 ? Layout::nhwc : Layout::nchw;
}

}  // namespace dlbench::worker
