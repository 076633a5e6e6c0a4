// How dlbench's kernel files launch: grid-stride loops over n elements with kThreads per block,
// and a launch macro that queues on a stream and checks the launch. Internal to worker/cuda's .cu files.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "cuda/cuda_check.hpp"

namespace dlbench::worker::kernels {

inline constexpr int kThreads = 256;

// Grid-stride launches: enough blocks to fill the GPU, never more than the work needs.
inline unsigned blocks_for(std::int64_t n) {
  const std::int64_t wanted = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::clamp<std::int64_t>(wanted, 1, 65535));
}

}  // namespace dlbench::worker::kernels

#define DLBENCH_GRID_STRIDE(i, n) \
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < (n); i += static_cast<std::int64_t>(blockDim.x) * gridDim.x)

#define DLBENCH_LAUNCH(kernel, n, stream, ...)                                  \
  do {                                                                         \
    if ((n) > 0) {                                                             \
      kernel<<<blocks_for(n), kThreads, 0, (stream)>>>(__VA_ARGS__);           \
      DLBENCH_CUDA_CHECK(cudaGetLastError());                                  \
    }                                                                          \
  } while (false)
