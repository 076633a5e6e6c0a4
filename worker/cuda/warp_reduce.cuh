// Sums and maxima over a warp's 32 lanes, every lane getting the result: the row reductions of
// dlbench's transformer and attention kernels. Internal to worker/cuda's .cu files.
#pragma once

namespace dlbench::worker::kernels {

inline constexpr unsigned kFullWarp = 0xffffffffu;

__device__ inline float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullWarp, v, offset);
  return v;
}

__device__ inline float warp_max(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(kFullWarp, v, offset));
  return v;
}

}  // namespace dlbench::worker::kernels
