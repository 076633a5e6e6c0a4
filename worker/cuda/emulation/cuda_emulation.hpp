// dlbench's CUDA kernel files run on the CPU, for tests: a host compiler builds the same .cu
// source with this header included first (worker/cuda/emulation/*.cpp), and a launch runs every
// block of the grid one after another, each block's threads as fibers of one host thread that
// switch at __syncthreads, __syncwarp and warp shuffles; tensor-core tiles (nvcuda::wmma) and
// dynamic shared memory are emulated too. So the kernels' index math, tails, barriers and
// reductions run in CI, where no GPU is: a kernel that reads or writes the wrong element, or
// waits at a barrier some of its block never reaches, fails there (the latter as an error naming
// the threads, where a GPU would hang). What it cannot show: speed, memory coalescing, and the
// device's float rounding of intrinsics and tensor cores. Races: a test can run the blocks and
// threads in reverse order (see ThreadOrder), and a build with DLBENCH_EMULATION_RACECHECK under
// ThreadSanitizer reports a race inside a block whatever the order (cuda_emulation.cpp).
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

// CUDA's built-in variables as a kernel reads them: copies, so that under the race check the
// kernel never reads the emulation's own bookkeeping.
uint3 thread_index();
uint3 block_index();
dim3 block_dim();
dim3 grid_dim();
// The running thread's lane in its warp (its linear index in the block, modulo 32).
int lane();

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

// Runs body() once for each thread of each block of the grid, with `dynamic_shared_bytes` of
// dynamic shared memory a block (filled with 0xff bytes, NaN as floats, before each block: a read
// of what no thread wrote shows); rethrows the first exception a thread threw (then the grid
// stops), and throws std::logic_error where the threads of a block wait at barriers that can never
// all be reached.
void run_grid(dim3 grid, dim3 block, std::size_t dynamic_shared_bytes, const std::function<void()>& body);

// The running block's dynamic shared memory (extern __shared__), 128-byte aligned.
unsigned char* dynamic_shared();

// How many grids have run: tests check that a launcher launched at all.
long long grids_run();

template <typename... Parameters, typename... Arguments>
void launch(void (*kernel)(Parameters...), dim3 grid, dim3 block, std::size_t dynamic_shared_bytes, cudaStream_t,
            Arguments&&... arguments) {
  // Converted to the kernel's parameter types once, as a launch does; each thread gets copies.
  const std::tuple<std::decay_t<Parameters>...> parameters(std::forward<Arguments>(arguments)...);
  run_grid(grid, block, dynamic_shared_bytes, [&] { std::apply(kernel, parameters); });
}

}  // namespace dlbench::cuda_emulation

// A block's __shared__ variables: one static object, since the blocks of a grid run one at a time.
#undef __shared__
#define __shared__ static
#undef __launch_bounds__
#define __launch_bounds__(...)

#define threadIdx (::dlbench::cuda_emulation::thread_index())
#define blockIdx (::dlbench::cuda_emulation::block_index())
#define blockDim (::dlbench::cuda_emulation::block_dim())
#define gridDim (::dlbench::cuda_emulation::grid_dim())

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
// several host threads. Relaxed, as CUDA's are: under the race check an atomic orders no other
// memory between threads.
template <typename T>
T atomicAdd(T* address, T value) {
  if constexpr (std::is_arithmetic_v<T>) {
    return std::atomic_ref<T>(*address).fetch_add(value, std::memory_order_relaxed);
  } else {  // __half and __nv_bfloat16: a compare-and-swap of their 16 bits, the sum rounded once
    static_assert(sizeof(T) == sizeof(unsigned short));
    std::atomic_ref<unsigned short> bits(*reinterpret_cast<unsigned short*>(address));
    unsigned short seen = bits.load(std::memory_order_relaxed);
    for (;;) {
      const T old = std::bit_cast<T>(seen);
      const T sum = T(static_cast<float>(old) + static_cast<float>(value));
      if (bits.compare_exchange_weak(seen, std::bit_cast<unsigned short>(sum), std::memory_order_relaxed)) return old;
    }
  }
}

// Raising a kernel's dynamic shared memory limit: the emulation has none to raise.
template <typename R, typename... P>
cudaError_t cudaFuncSetAttribute(R (*)(P...), cudaFuncAttribute, int) {
  return cudaSuccess;
}

inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
inline float __saturatef(float x) { return x < 0.0f ? 0.0f : (x > 1.0f ? 1.0f : x); }
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }

// Warp matrix tiles (mma.h's nvcuda::wmma, which a host compiler does not get): every lane holds
// the whole tile, loads all of it and multiplies it in fp32, so the lanes agree on what a warp's
// collective operation leaves; one lane stores it. Only what dlbench's kernels use: 16 × 16 × 16 tiles of
// half or bfloat16 with fp32 accumulators.
namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
struct fragment {
  static constexpr int kRows = std::is_same_v<Use, matrix_b> ? K : M;
  static constexpr int kColumns = std::is_same_v<Use, matrix_a> ? K : N;
  static constexpr int num_elements = kRows * kColumns;
  T x[static_cast<std::size_t>(num_elements)];  // row by row, logical (row, column)
};

template <typename Use, int M, int N, int K, typename T, typename Layout>
void fill_fragment(fragment<Use, M, N, K, T, Layout>& f, T value) {
  for (T& e : f.x) e = value;
}

template <typename Use, int M, int N, int K, typename T, typename Layout>
void load_matrix_sync(fragment<Use, M, N, K, T, Layout>& f, const T* p, unsigned ldm) {
  using F = fragment<Use, M, N, K, T, Layout>;
  for (int r = 0; r < F::kRows; ++r) {
    for (int c = 0; c < F::kColumns; ++c) {
      f.x[r * F::kColumns + c] = std::is_same_v<Layout, row_major> ? p[r * ldm + c] : p[c * ldm + r];
    }
  }
}

template <int M, int N, int K, typename T, typename LayoutA, typename LayoutB>
void mma_sync(fragment<accumulator, M, N, K, float>& d, const fragment<matrix_a, M, N, K, T, LayoutA>& a,
              const fragment<matrix_b, M, N, K, T, LayoutB>& b, const fragment<accumulator, M, N, K, float>& c) {
  float out[static_cast<std::size_t>(M * N)];
  for (int i = 0; i < M; ++i) {
    for (int j = 0; j < N; ++j) {
      float sum = c.x[i * N + j];
      for (int k = 0; k < K; ++k) sum += static_cast<float>(a.x[i * K + k]) * static_cast<float>(b.x[k * N + j]);
      out[i * N + j] = sum;
    }
  }
  for (int e = 0; e < M * N; ++e) d.x[e] = out[e];
}

// The warp's first lane stores the tile, every lane holding the same one: 32 lanes writing each
// element would be a race to the race check, where a GPU's lanes each store their own part.
template <int M, int N, int K>
void store_matrix_sync(float* p, const fragment<accumulator, M, N, K, float>& f, unsigned ldm, layout_t layout) {
  if (::dlbench::cuda_emulation::lane() != 0) return;
  for (int r = 0; r < M; ++r) {
    for (int c = 0; c < N; ++c) (layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) = f.x[r * N + c];
  }
}

}  // namespace nvcuda::wmma
