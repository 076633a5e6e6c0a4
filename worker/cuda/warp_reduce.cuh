// Sums and maxima over a warp's 32 lanes, every lane getting the result, and sums over a block:
// the row reductions of dlbench's transformer, attention and batch-norm kernels. Internal to
// worker/cuda's .cu files.
#pragma once

namespace dlbench::worker::kernels {

inline constexpr unsigned kFullWarp = 0xffffffffu;

// float, or double where fp64 partials are added (the optimizers' norms).
template <typename T>
__device__ inline T warp_sum(T v) {
  for (int offset = 16; offset > 0; offset /= 2) v += __shfl_xor_sync(kFullWarp, v, offset);
  return v;
}

__device__ inline float warp_max(float v) {
  for (int offset = 16; offset > 0; offset /= 2) v = fmaxf(v, __shfl_xor_sync(kFullWarp, v, offset));
  return v;
}

// The sum over the block (a multiple of 32 threads), returned to every thread, by the same tree
// whatever the schedule. The first barrier keeps a second call from overwriting partial sums the
// first is still reading.
template <typename T>
__device__ inline T block_sum(T v) {
  __shared__ T partial[32];
  v = warp_sum(v);
  const int lane = static_cast<int>(threadIdx.x % 32), warp = static_cast<int>(threadIdx.x / 32);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  const int warps = static_cast<int>(blockDim.x / 32);
  return warp_sum(lane < warps ? partial[lane] : T(0));
}

}  // namespace dlbench::worker::kernels
