// dlbench's CUDA kernel files run on the CPU, for tests: a host compiler builds the same .cu
// source with this header forced in first (-include), and a launch runs every block of the grid
// one after another, each block's threads as fibers of one host thread that switch at
// __syncthreads, __syncwarp and warp shuffles. So the kernels' index math, tails, barriers and
// reductions run in CI, where no GPU is: a kernel that reads or writes the wrong element, or
// waits at a barrier some of its block never reaches, fails there (the latter as an error naming
// the threads, where a GPU would hang). What it cannot show: speed, memory coalescing, the
// device's float rounding of intrinsics, and races between threads that the chosen order hides;
// a test can run the blocks and threads in reverse order to bring out the last (see ThreadOrder).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <tuple>
#include <type_traits>
#include <utility>

namespace dlbench::cuda_emulation {

// Where the running fiber stands: CUDA's built-in variables.
struct ThreadPlace {
  uint3 thread{};
  uint3 block{};
  dim3 block_dim{};
  dim3 grid_dim{};
};

const ThreadPlace& place();

// The order the blocks of a grid run in, and a block's threads take their turns between barriers.
// A kernel whose result depends on it reads shared memory another thread writes without a barrier
// between them, or has two blocks write one place.
enum class ThreadOrder { ascending, descending };
void set_thread_order(ThreadOrder order);
ThreadOrder thread_order();

void sync_block();
void sync_warp();

// A warp shuffle: every lane of the warp offers `bytes` from `value` and takes the offer of lane
// `source_lane(lane)` into `result`.
void exchange_in_warp(const void* value, void* result, std::size_t bytes, const std::function<int(int)>& source_lane);

// Runs body() once for each thread of each block of the grid; rethrows the first exception a
// thread threw (then the grid stops), and throws std::logic_error where the threads of a block
// wait at barriers that can never all be reached.
void run_grid(dim3 grid, dim3 block, const std::function<void()>& body);

// How many grids have run: tests check that a launcher launched at all.
long long grids_run();

template <typename... Parameters, typename... Arguments>
void launch(void (*kernel)(Parameters...), dim3 grid, dim3 block, std::size_t dynamic_shared_bytes, cudaStream_t,
            Arguments&&... arguments) {
  if (dynamic_shared_bytes != 0) throw std::logic_error("cuda emulation: dynamic shared memory is not emulated");
  // Converted to the kernel's parameter types once, as a launch does; each thread gets copies.
  const std::tuple<std::decay_t<Parameters>...> parameters(std::forward<Arguments>(arguments)...);
  run_grid(grid, block, [&] { std::apply(kernel, parameters); });
}

}  // namespace dlbench::cuda_emulation

// A block's __shared__ variables: one static object, since the blocks of a grid run one at a time.
#undef __shared__
#define __shared__ static
#undef __launch_bounds__
#define __launch_bounds__(...)

#define threadIdx (::dlbench::cuda_emulation::place().thread)
#define blockIdx (::dlbench::cuda_emulation::place().block)
#define blockDim (::dlbench::cuda_emulation::place().block_dim)
#define gridDim (::dlbench::cuda_emulation::place().grid_dim)

inline void __syncthreads() { ::dlbench::cuda_emulation::sync_block(); }
inline void __syncwarp(unsigned = 0xffffffffu) { ::dlbench::cuda_emulation::sync_warp(); }

template <typename T>
T __shfl_xor_sync(unsigned, T value, int lane_mask, int = 32) {
  T result;
  ::dlbench::cuda_emulation::exchange_in_warp(&value, &result, sizeof(T),
                                              [lane_mask](int lane) { return lane ^ lane_mask; });
  return result;
}

template <typename T>
T __shfl_sync(unsigned, T value, int source, int = 32) {
  T result;
  ::dlbench::cuda_emulation::exchange_in_warp(&value, &result, sizeof(T), [source](int) { return source; });
  return result;
}

template <typename T>
T __shfl_down_sync(unsigned, T value, unsigned delta, int = 32) {
  T result;
  ::dlbench::cuda_emulation::exchange_in_warp(&value, &result, sizeof(T), [delta](int lane) {
    const int from = lane + static_cast<int>(delta);
    return from < 32 ? from : lane;
  });
  return result;
}

// Atomics: the fibers of one host thread never interleave inside one, but a test may launch from
// several host threads.
template <typename T>
T atomicAdd(T* address, T value) {
  if constexpr (std::is_arithmetic_v<T>) {
    return std::atomic_ref<T>(*address).fetch_add(value);
  } else {  // __half and __nv_bfloat16: a compare-and-swap of their 16 bits, the sum rounded once
    static_assert(sizeof(T) == sizeof(unsigned short));
    std::atomic_ref<unsigned short> bits(*reinterpret_cast<unsigned short*>(address));
    unsigned short seen = bits.load();
    for (;;) {
      const T old = std::bit_cast<T>(seen);
      const T sum = T(static_cast<float>(old) + static_cast<float>(value));
      if (bits.compare_exchange_weak(seen, std::bit_cast<unsigned short>(sum))) return old;
    }
  }
}

inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }

// Launches: a kernel pointer and its grid, as kernel<<<grid, block, shared, stream>>>(args).
#define DLBENCH_EMULATED_LAUNCH(kernel, grid, block, shared_bytes, stream, ...) \
  ::dlbench::cuda_emulation::launch(kernel, grid, block, shared_bytes, stream, __VA_ARGS__)
