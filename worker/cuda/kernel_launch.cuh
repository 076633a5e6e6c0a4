// How dlbench's kernel files launch: grid-stride loops over n elements with kThreads per block,
// a launch macro that queues on a stream and checks the launch, and elementwise maps with their
// launchers. Internal to worker/cuda's .cu files.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "cuda/cuda_check.hpp"
#include "cuda/float_types.hpp"
#include "cuda/vector_split.hpp"
#include "dtype.hpp"

namespace dlbench::worker::kernels {

inline constexpr int kThreads = 256;

// Grid-stride launches: enough blocks to fill the GPU, never more than the work needs.
inline unsigned blocks_for(std::int64_t n) {
  const std::int64_t wanted = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::clamp<std::int64_t>(wanted, 1, 65535));
}

// Element types: kernels load any of them as float, compute in float, and round once on store.
__device__ inline float load(float v) { return v; }
__device__ inline float load(__half v) { return __half2float(v); }
__device__ inline float load(__nv_bfloat16 v) { return __bfloat162float(v); }
template <typename T>
__device__ inline T store(float v);
template <>
__device__ inline float store<float>(float v) { return v; }
template <>
__device__ inline __half store<__half>(float v) { return __float2half_rn(v); }
template <>
__device__ inline __nv_bfloat16 store<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

}  // namespace dlbench::worker::kernels

#define DLBENCH_GRID_STRIDE(i, n) \
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < (n); i += static_cast<std::int64_t>(blockDim.x) * gridDim.x)

// A launch on a grid of its own: `kernel` in parentheses (a template's commas would split the
// macro's arguments), then the grid, the block, the dynamic shared memory (_SHARED), the stream
// and the arguments; the launch checked. Built for the CPU (cuda/emulation/cuda_emulation.hpp),
// the same launch runs there.
#define DLBENCH_UNPARENTHESIZED(...) __VA_ARGS__
#if defined(DLBENCH_CUDA_EMULATION)
// The emulated launch reports by exception: nothing is left for cudaGetLastError.
#define DLBENCH_LAUNCH_GRID_SHARED(kernel, grid, block, shared_bytes, stream, ...) \
  ::dlbench::cuda_emulation::launch(DLBENCH_UNPARENTHESIZED kernel, grid, block, shared_bytes, stream, __VA_ARGS__)
// A kernel's dynamic shared memory, `name` its bytes (128-byte aligned).
#define DLBENCH_DYNAMIC_SHARED(name) unsigned char* const name = ::dlbench::cuda_emulation::dynamic_shared()
#else
#define DLBENCH_LAUNCH_GRID_SHARED(kernel, grid, block, shared_bytes, stream, ...)      \
  do {                                                                                \
    DLBENCH_UNPARENTHESIZED kernel<<<grid, block, shared_bytes, (stream)>>>(__VA_ARGS__); \
    DLBENCH_CUDA_CHECK(cudaGetLastError());                                           \
  } while (false)
#define DLBENCH_DYNAMIC_SHARED(name) extern __shared__ __align__(128) unsigned char name[]
#endif
#define DLBENCH_LAUNCH_GRID(kernel, grid, block, stream, ...) \
  DLBENCH_LAUNCH_GRID_SHARED(kernel, grid, block, 0, stream, __VA_ARGS__)

// A grid-stride launch over n elements (none where n is 0).
#define DLBENCH_LAUNCH(kernel, n, stream, ...)                                           \
  do {                                                                                  \
    if ((n) > 0) DLBENCH_LAUNCH_GRID((kernel), blocks_for(n), kThreads, stream, __VA_ARGS__); \
  } while (false)

namespace dlbench::worker::kernels {

// Elementwise maps, y[i] = op(x[i]) or op(a[i], b[i]): inputs loaded as float, op computed in
// float, the result rounded once to T. `Op` is a struct with a __device__ call operator. Where
// the pointers allow (vector_split), elements go in 16-byte packs, each thread a pack, and the
// rest one by one.
template <typename T, typename Op>
__global__ void map_kernel(Op op, const T* x, T* y, std::int64_t n) {
  DLBENCH_GRID_STRIDE(i, n) { y[i] = store<T>(op(load(x[i]))); }
}

template <typename T, typename Op>
__global__ void map2_kernel(Op op, const T* a, const T* b, T* y, std::int64_t n) {
  DLBENCH_GRID_STRIDE(i, n) { y[i] = store<T>(op(load(a[i]), load(b[i]))); }
}

template <typename T>
struct alignas(kVectorBytes) Pack {
  static constexpr int kWidth = static_cast<int>(kVectorBytes / sizeof(T));
  T v[kWidth];
};

template <typename T, typename Op>
__global__ void map_packs_kernel(Op op, const Pack<T>* x, Pack<T>* y, std::int64_t packs) {
  DLBENCH_GRID_STRIDE(i, packs) {
    const Pack<T> in = x[i];
    Pack<T> out;
#pragma unroll
    for (int k = 0; k < Pack<T>::kWidth; ++k) out.v[k] = store<T>(op(load(in.v[k])));
    y[i] = out;
  }
}

template <typename T, typename Op>
__global__ void map2_packs_kernel(Op op, const Pack<T>* a, const Pack<T>* b, Pack<T>* y, std::int64_t packs) {
  DLBENCH_GRID_STRIDE(i, packs) {
    const Pack<T> in_a = a[i];
    const Pack<T> in_b = b[i];
    Pack<T> out;
#pragma unroll
    for (int k = 0; k < Pack<T>::kWidth; ++k) out.v[k] = store<T>(op(load(in_a.v[k]), load(in_b.v[k])));
    y[i] = out;
  }
}

template <typename Op>
void launch_map(Op op, DType dtype, const void* x, void* y, std::int64_t n, cudaStream_t stream) {
  with_float_type(dtype, [&](auto t) {
    using T = typename decltype(t)::type;
    const auto* const in = static_cast<const T*>(x);
    auto* const out = static_cast<T*>(y);
    const VectorSplit split = vector_split(n, sizeof(T), {x, y});
    // Named: a template's comma would split the macro's arguments.
    auto* const packs_kernel = &map_packs_kernel<T, Op>;
    DLBENCH_LAUNCH(packs_kernel, split.packs, stream, op, reinterpret_cast<const Pack<T>*>(in),
                   reinterpret_cast<Pack<T>*>(out), split.packs);
    auto* const kernel = &map_kernel<T, Op>;
    DLBENCH_LAUNCH(kernel, n - split.tail_start, stream, op, in + split.tail_start, out + split.tail_start,
                   n - split.tail_start);
  });
}

template <typename Op>
void launch_map2(Op op, DType dtype, const void* a, const void* b, void* y, std::int64_t n, cudaStream_t stream) {
  with_float_type(dtype, [&](auto t) {
    using T = typename decltype(t)::type;
    const auto* const in_a = static_cast<const T*>(a);
    const auto* const in_b = static_cast<const T*>(b);
    auto* const out = static_cast<T*>(y);
    const VectorSplit split = vector_split(n, sizeof(T), {a, b, y});
    auto* const packs_kernel = &map2_packs_kernel<T, Op>;
    DLBENCH_LAUNCH(packs_kernel, split.packs, stream, op, reinterpret_cast<const Pack<T>*>(in_a),
                   reinterpret_cast<const Pack<T>*>(in_b), reinterpret_cast<Pack<T>*>(out), split.packs);
    auto* const kernel = &map2_kernel<T, Op>;
    DLBENCH_LAUNCH(kernel, n - split.tail_start, stream, op, in_a + split.tail_start, in_b + split.tail_start,
                   out + split.tail_start, n - split.tail_start);
  });
}

}  // namespace dlbench::worker::kernels
