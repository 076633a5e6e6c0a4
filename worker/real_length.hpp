// How many of a row's `full` columns are real where a padded batch says so: the attention mask's
// reading, shared by the CPU's and the CUDA kernels' softmax and fused attention.
#pragma once

#include <cstdint>

#include "host_device.hpp"

namespace dlbench::worker {

// lengths[index] within 1 to `full`, or `full` where there are no lengths (every token real).
DLBENCH_HOST_DEVICE inline std::int64_t real_length(const std::int32_t* lengths, std::int64_t index, std::int64_t full) {
  if (lengths == nullptr) return full;
  const std::int64_t length = lengths[index];
  return length < 1 ? 1 : length > full ? full : length;
}

}  // namespace dlbench::worker
