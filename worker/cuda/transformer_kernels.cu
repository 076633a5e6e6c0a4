#include "cuda/transformer_kernels.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "learning_rate_warmup.hpp"
#include "cuda/column_reduction.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/kernels.hpp"
#include "cuda/kernel_launch.cuh"
#include "real_length.hpp"
#include "cuda/swap_axes_plan.hpp"
#include "cuda/warp_reduce.cuh"

namespace dlbench::worker::kernels {
namespace {

constexpr int kSquaresBlocks = kAdamSquaresPartials;  // about one resident wave on an H100 or H200
constexpr int kSkipUpdate = 5;  // the coefficients' slot that says the step overflowed (1) and updates nothing
constexpr int kWarmedUpRate = 6;  // the update's learning rate (warmed_up_rate)

// A warp a row: `row` strides over [0, rows) by the grid's warps, the same rows for every lane
// of a warp, so the warp reductions inside see all 32 lanes.
#define DLBENCH_WARP_ROWS(row, rows)                                                                     \
  for (std::int64_t row = blockIdx.x * static_cast<std::int64_t>(blockDim.x / 32) + threadIdx.x / 32; \
       row < (rows); row += static_cast<std::int64_t>(gridDim.x) * (blockDim.x / 32))

// One block per row (grid-stride over rows): two passes for the statistics, as oneDNN's
// reference does, so the variance never comes from E[x²] - mean².
template <typename T>
__global__ void layer_norm_forward_kernel(const T* x, const float* gamma, const float* beta, T* y, float* mean,
                                          float* variance, std::int64_t rows, int features, float epsilon) {
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* in = x + row * features;
    T* out = y + row * features;
    float sum = 0.0f;
    for (int j = static_cast<int>(threadIdx.x); j < features; j += static_cast<int>(blockDim.x)) sum += load(in[j]);
    const float mu = block_sum(sum) / static_cast<float>(features);
    float squares = 0.0f;
    for (int j = static_cast<int>(threadIdx.x); j < features; j += static_cast<int>(blockDim.x)) {
      const float d = load(in[j]) - mu;
      squares += d * d;
    }
    const float var = block_sum(squares) / static_cast<float>(features);
    const float inverse_std = 1.0f / sqrtf(var + epsilon);
    for (int j = static_cast<int>(threadIdx.x); j < features; j += static_cast<int>(blockDim.x)) {
      out[j] = store<T>((load(in[j]) - mu) * inverse_std * gamma[j] + beta[j]);
    }
    if (threadIdx.x == 0) {
      mean[row] = mu;
      variance[row] = var;
    }
  }
}

// The same with one warp per row, the row in registers (kPerLane values a lane, features ≤
// 32 · kPerLane: BERT-base's 768 are 24): x read once, no block barriers. The block kernels
// above take longer rows.
template <typename T, int kPerLane>
__global__ void layer_norm_forward_warp_kernel(const T* x, const float* gamma, const float* beta, T* y, float* mean,
                                               float* variance, std::int64_t rows, int features, float epsilon) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  DLBENCH_WARP_ROWS(row, rows) {
    const T* in = x + row * features;
    T* out = y + row * features;
    float v[kPerLane];
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int j = lane + 32 * k;
      v[k] = j < features ? load(in[j]) : 0.0f;
      sum += v[k];
    }
    const float mu = warp_sum(sum) / static_cast<float>(features);
    float squares = 0.0f;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const float d = lane + 32 * k < features ? v[k] - mu : 0.0f;
      squares += d * d;
    }
    const float var = warp_sum(squares) / static_cast<float>(features);
    const float inverse_std = 1.0f / sqrtf(var + epsilon);
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int j = lane + 32 * k;
      if (j < features) out[j] = store<T>((v[k] - mu) * inverse_std * gamma[j] + beta[j]);
    }
    if (lane == 0) {
      mean[row] = mu;
      variance[row] = var;
    }
  }
}

template <typename T, int kPerLane>
__global__ void layer_norm_backward_data_warp_kernel(const T* x, const T* dy, const float* gamma, const float* mean,
                                                     const float* variance, T* dx, std::int64_t rows, int features,
                                                     float epsilon) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  DLBENCH_WARP_ROWS(row, rows) {
    const T* in = x + row * features;
    const T* g_out = dy + row * features;
    T* g_in = dx + row * features;
    const float mu = mean[row];
    const float inverse_std = 1.0f / sqrtf(variance[row] + epsilon);
    float g[kPerLane], xhat[kPerLane];
    float sum_g = 0.0f, sum_g_xhat = 0.0f;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int j = lane + 32 * k;
      g[k] = j < features ? load(g_out[j]) * gamma[j] : 0.0f;
      xhat[k] = j < features ? (load(in[j]) - mu) * inverse_std : 0.0f;
      sum_g += g[k];
      sum_g_xhat += g[k] * xhat[k];
    }
    const float mean_g = warp_sum(sum_g) / static_cast<float>(features);
    const float mean_g_xhat = warp_sum(sum_g_xhat) / static_cast<float>(features);
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int j = lane + 32 * k;
      if (j < features) g_in[j] = store<T>(inverse_std * (g[k] - mean_g - xhat[k] * mean_g_xhat));
    }
  }
}

// dx = (g - mean(g) - x̂ · mean(g x̂)) / std with g = dy · gamma, one block per row.
template <typename T>
__global__ void layer_norm_backward_data_kernel(const T* x, const T* dy, const float* gamma, const float* mean,
                                                const float* variance, T* dx, std::int64_t rows, int features,
                                                float epsilon) {
  for (std::int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* in = x + row * features;
    const T* g_out = dy + row * features;
    T* g_in = dx + row * features;
    const float mu = mean[row];
    const float inverse_std = 1.0f / sqrtf(variance[row] + epsilon);
    float sum_g = 0.0f, sum_g_xhat = 0.0f;
    for (int j = static_cast<int>(threadIdx.x); j < features; j += static_cast<int>(blockDim.x)) {
      const float g = load(g_out[j]) * gamma[j];
      sum_g += g;
      sum_g_xhat += g * (load(in[j]) - mu) * inverse_std;
    }
    const float mean_g = block_sum(sum_g) / static_cast<float>(features);
    const float mean_g_xhat = block_sum(sum_g_xhat) / static_cast<float>(features);
    for (int j = static_cast<int>(threadIdx.x); j < features; j += static_cast<int>(blockDim.x)) {
      const float xhat = (load(in[j]) - mu) * inverse_std;
      g_in[j] = store<T>(inverse_std * (load(g_out[j]) * gamma[j] - mean_g - xhat * mean_g_xhat));
    }
  }
}

// dgamma = Σ_rows dy · x̂, dbeta = Σ_rows dy over one chunk of rows (column_reduction.hpp): a
// block of kColumnTile columns × kColumnRowLanes row lanes, the lanes summed in shared memory in a
// fixed order. It writes row `blockIdx.y` of gamma_out and beta_out: the sums themselves with one
// chunk, the chunk's partial sums with more.
template <typename T>
__global__ void layer_norm_backward_parameters_kernel(const T* x, const T* dy, const float* mean,
                                                      const float* variance, float* gamma_out, float* beta_out,
                                                      std::int64_t rows, int features, float epsilon,
                                                      std::int64_t chunk_rows) {
  __shared__ float gamma_part[kColumnRowLanes][kColumnTile + 1];
  __shared__ float beta_part[kColumnRowLanes][kColumnTile + 1];
  const int column = static_cast<int>(blockIdx.x) * kColumnTile + static_cast<int>(threadIdx.x);
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.y) * chunk_rows;
  const std::int64_t last = first + chunk_rows < rows ? first + chunk_rows : rows;
  float g = 0.0f, b = 0.0f;
  if (column < features) {
    for (std::int64_t row = first + threadIdx.y; row < last; row += kColumnRowLanes) {
      const std::int64_t at = row * features + column;
      const float inverse_std = 1.0f / sqrtf(variance[row] + epsilon);
      const float gradient = load(dy[at]);
      g += gradient * (load(x[at]) - mean[row]) * inverse_std;
      b += gradient;
    }
  }
  gamma_part[threadIdx.y][threadIdx.x] = g;
  beta_part[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y == 0 && column < features) {
    for (int lane = 1; lane < kColumnRowLanes; ++lane) {
      g += gamma_part[lane][threadIdx.x];
      b += beta_part[lane][threadIdx.x];
    }
    const std::int64_t out = static_cast<std::int64_t>(blockIdx.y) * features + column;
    gamma_out[out] = g;
    beta_out[out] = b;
  }
}

// The columns row `row`'s softmax covers: all, or its group's length (1 to columns).
__device__ int row_length(std::int64_t row, int columns, const std::int32_t* lengths, std::int64_t rows_per_length) {
  return static_cast<int>(real_length(lengths, lengths == nullptr ? 0 : row / rows_per_length, columns));
}

// One warp per row: attention rows are short (the sequence length), so no block-wide barriers.
// Columns past the row's length get probability 0.
template <typename T>
__global__ void softmax_forward_kernel(const T* x, T* y, std::int64_t rows, int columns, const std::int32_t* lengths,
                                       std::int64_t rows_per_length) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  DLBENCH_WARP_ROWS(row, rows) {
    const T* in = x + row * columns;
    T* out = y + row * columns;
    const int length = row_length(row, columns, lengths, rows_per_length);
    float highest = -INFINITY;
    for (int j = lane; j < length; j += 32) highest = fmaxf(highest, load(in[j]));
    highest = warp_max(highest);
    float sum = 0.0f;
    for (int j = lane; j < length; j += 32) sum += expf(load(in[j]) - highest);
    const float inverse = 1.0f / warp_sum(sum);
    for (int j = lane; j < columns; j += 32) out[j] = store<T>(j < length ? expf(load(in[j]) - highest) * inverse : 0.0f);
  }
}

template <typename T>
__global__ void softmax_backward_kernel(const T* y, const T* dy, T* dx, std::int64_t rows, int columns) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  DLBENCH_WARP_ROWS(row, rows) {
    const T* p = y + row * columns;
    const T* g = dy + row * columns;
    T* out = dx + row * columns;
    float dot = 0.0f;
    for (int j = lane; j < columns; j += 32) dot += load(g[j]) * load(p[j]);
    dot = warp_sum(dot);
    for (int j = lane; j < columns; j += 32) out[j] = store<T>(load(p[j]) * (load(g[j]) - dot));
  }
}

// The same with the row in registers, kPerLane values a lane (columns ≤ 32 · kPerLane, BERT's
// 128 tokens are 4): x is read once and each exponential computed once, in the order the loops
// above use, so the results are the same bits.
template <typename T, int kPerLane>
__global__ void softmax_forward_registers_kernel(const T* x, T* y, std::int64_t rows, int columns,
                                                 const std::int32_t* lengths, std::int64_t rows_per_length) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  DLBENCH_WARP_ROWS(row, rows) {
    const T* in = x + row * columns;
    T* out = y + row * columns;
    const int length = row_length(row, columns, lengths, rows_per_length);
    float v[kPerLane];
    float highest = -INFINITY;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int j = lane + 32 * k;
      v[k] = j < length ? load(in[j]) : -INFINITY;
      highest = fmaxf(highest, v[k]);
    }
    highest = warp_max(highest);
    float sum = 0.0f;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      v[k] = lane + 32 * k < length ? expf(v[k] - highest) : 0.0f;
      sum += v[k];
    }
    const float inverse = 1.0f / warp_sum(sum);
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int j = lane + 32 * k;
      if (j < columns) out[j] = store<T>(v[k] * inverse);
    }
  }
}

template <typename T, int kPerLane>
__global__ void softmax_backward_registers_kernel(const T* y, const T* dy, T* dx, std::int64_t rows, int columns) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  DLBENCH_WARP_ROWS(row, rows) {
    const T* p_row = y + row * columns;
    const T* g_row = dy + row * columns;
    T* out = dx + row * columns;
    float p[kPerLane], g[kPerLane];
    float dot = 0.0f;
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int j = lane + 32 * k;
      p[k] = j < columns ? load(p_row[j]) : 0.0f;
      g[k] = j < columns ? load(g_row[j]) : 0.0f;
      dot += g[k] * p[k];
    }
    dot = warp_sum(dot);
#pragma unroll
    for (int k = 0; k < kPerLane; ++k) {
      const int j = lane + 32 * k;
      if (j < columns) out[j] = store<T>(p[k] * (g[k] - dot));
    }
  }
}

constexpr float kInverseSqrt2 = 0.70710678118654752f;
constexpr float kInverseSqrt2Pi = 0.39894228040143268f;

struct Gelu {
  __device__ float operator()(float v) const { return 0.5f * v * (1.0f + erff(v * kInverseSqrt2)); }
};

// d/dx x Φ(x) = Φ(x) + x φ(x).
struct GeluBackward {
  __device__ float operator()(float v, float dy) const {
    const float cdf = 0.5f * (1.0f + erff(v * kInverseSqrt2));
    const float pdf = expf(-0.5f * v * v) * kInverseSqrt2Pi;
    return dy * (cdf + v * pdf);
  }
};

struct Tanh {
  __device__ float operator()(float v) const { return tanhf(v); }
};

struct TanhBackward {
  __device__ float operator()(float v, float dy) const {
    const float t = tanhf(v);
    return dy * (1.0f - t * t);
  }
};

// A pack of y (a, c, b, units order) a thread, copied from x (swap_axes_plan.hpp); Pack only has
// to be copyable, Index is 32 bits where the plan allows.
template <typename Pack, typename Index>
__global__ void swap_axes_kernel(const Pack* x, Pack* y, Index b, Index c, Index units, Index count) {
  const Index stride = static_cast<Index>(blockDim.x) * static_cast<Index>(gridDim.x);
  for (Index i = static_cast<Index>(blockIdx.x) * static_cast<Index>(blockDim.x) + static_cast<Index>(threadIdx.x);
       i < count; i += stride) {
    y[i] = x[swap_axes_source(i, b, c, units)];
  }
}

template <typename Pack>
void launch_swap_axes(const SwapAxesPlan& plan, const void* x, void* y, std::int64_t b, std::int64_t c,
                      cudaStream_t stream) {
  const auto* from = static_cast<const Pack*>(x);
  auto* to = static_cast<Pack*>(y);
  if (plan.narrow) {
    DLBENCH_LAUNCH_GRID((swap_axes_kernel<Pack, std::int32_t>), blocks_for(plan.count), kThreads, stream, from, to,
        static_cast<std::int32_t>(b), static_cast<std::int32_t>(c), static_cast<std::int32_t>(plan.units),
        static_cast<std::int32_t>(plan.count));
  } else {
    DLBENCH_LAUNCH_GRID((swap_axes_kernel<Pack, std::int64_t>), blocks_for(plan.count), kThreads, stream, from, to, b,
        c, plan.units, plan.count);
  }
}

template <typename TableT, typename T>
__global__ void gather_rows_kernel(const TableT* table, const std::int32_t* rows, std::int64_t count, int features,
                                   std::int64_t table_rows, T* y, bool accumulate) {
  const std::int64_t n = count * features;
  DLBENCH_GRID_STRIDE(i, n) {
    const std::int64_t row = rows[i / features];
    if (row < 0 || row >= table_rows) continue;
    const float v = load(table[row * features + i % features]);
    y[i] = store<T>(accumulate ? load(y[i]) + v : v);
  }
}

// scatter_add_rows without float atomics, so that a row's sum is the same bits every run: the
// entries are put in row order by a stable counting sort (counts, their prefix sums, each entry's
// rank among the earlier entries of its row), then summed in that order a window of
// kScatterWindow sorted entries at a time. A row inside one window is added to table_grad there;
// a row that crosses windows leaves a piece in each window's partials (slot 0: the piece that
// continues a row begun in an earlier window; slot 1: the row that begins here and goes on), and
// the window where it begins adds its pieces in window order.
__global__ void count_rows_kernel(const std::int32_t* rows, std::int64_t count, std::int64_t table_rows,
                                  std::int32_t* counts) {
  DLBENCH_GRID_STRIDE(i, count) {
    const std::int32_t row = rows[i];
    if (row >= 0 && row < table_rows) atomicAdd(counts + row, 1);  // integers: the same total in any order
  }
}

// values[i] = the sum of values[0, i), in one block of kThreads threads, each a contiguous run.
__global__ void exclusive_prefix_sums_kernel(std::int32_t* values, std::int64_t n) {
  __shared__ std::int32_t totals[kThreads];
  const int t = static_cast<int>(threadIdx.x);
  const std::int64_t per_thread = (n + kThreads - 1) / kThreads;
  const std::int64_t begin = t * per_thread < n ? t * per_thread : n;
  const std::int64_t end = begin + per_thread < n ? begin + per_thread : n;
  std::int32_t own = 0;
  for (std::int64_t i = begin; i < end; ++i) own += values[i];
  totals[t] = own;
  __syncthreads();
  for (int offset = 1; offset < kThreads; offset *= 2) {
    const std::int32_t earlier = t >= offset ? totals[t - offset] : 0;
    __syncthreads();
    totals[t] += earlier;
    __syncthreads();
  }
  std::int32_t running = totals[t] - own;
  for (std::int64_t i = begin; i < end; ++i) {
    const std::int32_t v = values[i];
    values[i] = running;
    running += v;
  }
}

// order[starts[row] + rank] = i, rank the number of entries before i naming the same row: every
// block reads the rows of the entries up to its own a tile of kThreads at a time.
__global__ void place_in_row_order_kernel(const std::int32_t* rows, std::int64_t count, std::int64_t table_rows,
                                          const std::int32_t* starts, std::int32_t* order) {
  __shared__ std::int32_t tile[kThreads];
  const int t = static_cast<int>(threadIdx.x);
  for (std::int64_t base = blockIdx.x * static_cast<std::int64_t>(kThreads); base < count;
       base += static_cast<std::int64_t>(kThreads) * gridDim.x) {
    const std::int64_t i = base + t;
    const std::int32_t row = i < count ? rows[i] : -1;
    std::int32_t rank = 0;
    for (std::int64_t tile_base = 0; tile_base <= base; tile_base += kThreads) {
      __syncthreads();  // the last tile read by everyone
      tile[t] = tile_base + t < count ? rows[tile_base + t] : -1;
      __syncthreads();
      const std::int64_t before = i - tile_base;  // entries of this tile ahead of i
      const int earlier = before < kThreads ? static_cast<int>(before) : kThreads;
      for (int k = 0; k < earlier; ++k) rank += tile[k] == row ? 1 : 0;
    }
    if (row >= 0 && row < table_rows) order[starts[row] + rank] = static_cast<std::int32_t>(i);
  }
}

template <typename T, typename TableT>
__global__ void add_window_pieces_kernel(const T* dy, const std::int32_t* rows, const std::int32_t* order,
                                         const std::int32_t* starts, std::int64_t table_rows, int features,
                                         float* partials, TableT* table_grad) {
  __shared__ std::int32_t entries[kScatterWindow];
  __shared__ std::int32_t entry_rows[kScatterWindow];
  const std::int64_t placed = starts[table_rows];
  const int t = static_cast<int>(threadIdx.x);
  for (std::int64_t w = blockIdx.x; w * kScatterWindow < placed; w += gridDim.x) {
    const std::int64_t first = w * kScatterWindow;
    const int size = placed - first < kScatterWindow ? static_cast<int>(placed - first) : kScatterWindow;
    __syncthreads();  // the last window's entries read by everyone
    if (t < size) {
      entries[t] = order[first + t];
      entry_rows[t] = rows[entries[t]];
    }
    __syncthreads();
    for (int c = t; c < features; c += static_cast<int>(blockDim.x)) {
      float sum = 0.0f;
      for (int k = 0; k < size; ++k) {
        sum += load(dy[static_cast<std::int64_t>(entries[k]) * features + c]);
        const std::int32_t row = entry_rows[k];
        if (k + 1 < size && entry_rows[k + 1] == row) continue;
        if (starts[row] < first) {
          partials[2 * w * features + c] = sum;
        } else if (starts[row + 1] > first + kScatterWindow) {
          partials[(2 * w + 1) * features + c] = sum;
        } else {
          TableT& at = table_grad[static_cast<std::int64_t>(row) * features + c];
          at = store<TableT>(load(at) + sum);
        }
        sum = 0.0f;
      }
    }
  }
}

template <typename TableT>
__global__ void add_crossing_rows_kernel(const std::int32_t* rows, const std::int32_t* order,
                                         const std::int32_t* starts, std::int64_t table_rows, int features,
                                         const float* partials, TableT* table_grad) {
  const std::int64_t placed = starts[table_rows];
  for (std::int64_t w = blockIdx.x; w * kScatterWindow < placed; w += gridDim.x) {
    const std::int64_t first = w * kScatterWindow;
    const std::int64_t last = (placed - first < kScatterWindow ? placed : first + kScatterWindow) - 1;
    const std::int32_t row = rows[order[last]];
    const std::int64_t begin = starts[row], end = starts[row + 1];
    if (begin < first || end <= first + kScatterWindow) continue;  // not a row that begins here and goes on
    const std::int64_t last_window = (end - 1) / kScatterWindow;
    for (int c = static_cast<int>(threadIdx.x); c < features; c += static_cast<int>(blockDim.x)) {
      float sum = partials[(2 * w + 1) * features + c];
      for (std::int64_t v = w + 1; v <= last_window; ++v) sum += partials[2 * v * features + c];
      TableT& at = table_grad[static_cast<std::int64_t>(row) * features + c];
      at = store<TableT>(load(at) + sum);
    }
  }
}

// Where scatter_add_rows' scratch keeps the row starts (table_rows + 1), the order (count) and the
// partials (two rows of features a window), each 16-byte aligned.
struct ScatterScratch {
  std::size_t order_offset, partials_offset, bytes;
};

std::size_t aligned16(std::size_t bytes) { return (bytes + 15) / 16 * 16; }

std::int64_t scatter_windows(std::int64_t count) { return (count + kScatterWindow - 1) / kScatterWindow; }

ScatterScratch scatter_scratch(std::int64_t count, int features, std::int64_t table_rows) {
  ScatterScratch s{};
  s.order_offset = aligned16(static_cast<std::size_t>(table_rows + 1) * sizeof(std::int32_t));
  s.partials_offset = s.order_offset + aligned16(static_cast<std::size_t>(count) * sizeof(std::int32_t));
  s.bytes = s.partials_offset +
            static_cast<std::size_t>(2 * scatter_windows(count)) * static_cast<std::size_t>(features) * sizeof(float);
  return s;
}

// Σ g², each block's fp32 partial written to partials[block] in fp64. At most kSquaresBlocks
// blocks, each striding over its share: a block per 256 of BERT-base's 110 million gradients
// would be 430,000 partials to add.
__global__ void sum_of_squares_kernel(const float* g, std::int64_t n, double* partials) {
  float local = 0.0f;
  DLBENCH_GRID_STRIDE(i, n) { local += g[i] * g[i]; }
  const float block_total = block_sum(local);
  if (threadIdx.x == 0) partials[blockIdx.x] = static_cast<double>(block_total);
}

// The sum of `count` fp64 values in one fixed order whatever the schedule (each thread its strided
// share, then block_sum's tree), returned to every thread of the block. fp64 atomics added them in
// the blocks' order, which can round differently (2^53 + 1 + 1).
__device__ double ordered_sum(const double* values, int count) {
  double own = 0.0;
  for (int i = static_cast<int>(threadIdx.x); i < count; i += static_cast<int>(blockDim.x)) own += values[i];
  return block_sum(own);
}

// torch's clip factor and AdamW's bias corrections, in fp64 as the CPU backend computes them.
// One block of kThreads: squares[0] = the sum of the `partials` after it, then the coefficients.
__global__ void adamw_coefficients_kernel(double* squares, int partials, const std::uint64_t* update_number,
                                          const LossScaleState* loss_scale, AdamWScalars s, float* coefficients) {
  const double total = ordered_sum(squares + 1, partials);
  if (threadIdx.x != 0) return;
  squares[0] = total;
  const double factor =
      s.max_grad_norm > 0.0f ? fmin(1.0, static_cast<double>(s.max_grad_norm) / (sqrt(total) + 1e-6)) : 1.0;
  const std::uint64_t applied = applied_update_number(*update_number, loss_scale);
  const auto t = static_cast<double>(applied);
  const float rate = warmed_up_rate(s.learning_rate, applied, s.warmup_updates);
  coefficients[0] = static_cast<float>(factor);
  coefficients[1] = static_cast<float>(static_cast<double>(rate) / (1.0 - pow(static_cast<double>(s.beta1), t)));
  coefficients[2] = static_cast<float>(sqrt(1.0 - pow(static_cast<double>(s.beta2), t)));
  coefficients[3] = static_cast<float>(1.0 - pow(static_cast<double>(s.beta1), t));
  coefficients[4] = static_cast<float>(1.0 - pow(static_cast<double>(s.beta2), t));
  coefficients[kSkipUpdate] = update_skipped(loss_scale) ? 1.0f : 0.0f;
  coefficients[kWarmedUpRate] = rate;
}

// Every gradient is clipped; the elements inside a range are updated (the last range starting at
// or before i, found by bisection over the sorted offsets).
__global__ void adamw_apply_kernel(float* values, float* grads, float* first_moment, float* second_moment,
                                   std::int64_t n, const std::int64_t* range_offsets, const std::int64_t* range_counts,
                                   const std::int32_t* range_decays, int ranges, AdamWScalars s,
                                   const float* coefficients) {
  if (coefficients[kSkipUpdate] != 0.0f) return;
  const float factor = coefficients[0], step_size = coefficients[1], root_correction = coefficients[2];
  const float decayed = 1.0f - coefficients[kWarmedUpRate] * s.weight_decay;
  DLBENCH_GRID_STRIDE(i, n) {
    const float g = factor < 1.0f ? grads[i] * factor : grads[i];
    grads[i] = g;
    int low = 0, high = ranges;  // the answer is low - 1 once low == high
    while (low < high) {
      const int middle = (low + high) / 2;
      if (range_offsets[middle] <= i) {
        low = middle + 1;
      } else {
        high = middle;
      }
    }
    const int range = low - 1;
    if (range < 0 || i >= range_offsets[range] + range_counts[range]) continue;
    const float m = s.beta1 * first_moment[i] + (1.0f - s.beta1) * g;
    const float v = s.beta2 * second_moment[i] + (1.0f - s.beta2) * g * g;
    first_moment[i] = m;
    second_moment[i] = v;
    const float decay = range_decays[range] != 0 ? decayed : 1.0f;
    values[i] = values[i] * decay - step_size * m / (sqrtf(v) / root_correction + s.epsilon);
  }
}

// Blocks per tensor for the LAMB kernels: enough to fill a GPU for BERT's largest tensor (the
// word embeddings) without launching many idle blocks for its 768-value vectors.
constexpr int kLambBlocksPerTensor = 64;

// LAMB's update direction for one element, as the CPU backend computes it.
__device__ inline float lamb_direction(float m, float v, float w, float decay, const float* coefficients,
                                       float epsilon) {
  return (m / coefficients[3]) / (sqrtf(v / coefficients[4]) + epsilon) + decay * w;
}

// Grid (kLambBlocksPerTensor, tensors): blockIdx.y names the tensor, the x blocks stride over its
// elements, each block's Σw² and Σu² written to `partials` (lamb_norms_doubles): a tensor's
// 2 · kLambBlocksPerTensor, its blocks' Σw² then their Σu².
__global__ void lamb_moments_kernel(const float* values, float* grads, float* first_moment, float* second_moment,
                                    const std::int64_t* offsets, const std::int64_t* counts, const std::int32_t* decays,
                                    AdamWScalars s, const float* coefficients, double* partials) {
  if (coefficients[kSkipUpdate] != 0.0f) return;
  const int tensor = static_cast<int>(blockIdx.y);
  const std::int64_t base = offsets[tensor], n = counts[tensor];
  const float factor = coefficients[0];
  const float decay = decays[tensor] != 0 ? s.weight_decay : 0.0f;
  float weight_squares = 0.0f, update_squares = 0.0f;
  DLBENCH_GRID_STRIDE(k, n) {
    const std::int64_t i = base + k;
    const float g = factor < 1.0f ? grads[i] * factor : grads[i];
    grads[i] = g;
    const float m = s.beta1 * first_moment[i] + (1.0f - s.beta1) * g;
    const float v = s.beta2 * second_moment[i] + (1.0f - s.beta2) * g * g;
    first_moment[i] = m;
    second_moment[i] = v;
    const float u = lamb_direction(m, v, values[i], decay, coefficients, s.epsilon);
    weight_squares += values[i] * values[i];
    update_squares += u * u;
  }
  const float block_weights = block_sum(weight_squares);
  const float block_updates = block_sum(update_squares);
  if (threadIdx.x == 0) {
    double* const mine = partials + 2 * static_cast<std::int64_t>(tensor) * kLambBlocksPerTensor;
    mine[blockIdx.x] = static_cast<double>(block_weights);
    mine[kLambBlocksPerTensor + blockIdx.x] = static_cast<double>(block_updates);
  }
}

// A block per tensor: norms[2 · tensor] = Σw², norms[2 · tensor + 1] = Σu², from its blocks' partials.
__global__ void lamb_norms_kernel(const double* partials, const float* coefficients, double* norms) {
  if (coefficients[kSkipUpdate] != 0.0f) return;
  const int tensor = static_cast<int>(blockIdx.x);
  const double* mine = partials + 2 * static_cast<std::int64_t>(tensor) * kLambBlocksPerTensor;
  const double weights = ordered_sum(mine, kLambBlocksPerTensor);
  const double updates = ordered_sum(mine + kLambBlocksPerTensor, kLambBlocksPerTensor);
  if (threadIdx.x == 0) {
    norms[2 * tensor] = weights;
    norms[2 * tensor + 1] = updates;
  }
}

__global__ void lamb_apply_kernel(float* values, const float* first_moment, const float* second_moment,
                                  const std::int64_t* offsets, const std::int64_t* counts, const std::int32_t* decays,
                                  AdamWScalars s, const float* coefficients, const double* norms) {
  if (coefficients[kSkipUpdate] != 0.0f) return;
  const int tensor = static_cast<int>(blockIdx.y);
  const std::int64_t base = offsets[tensor], n = counts[tensor];
  const bool decays_here = decays[tensor] != 0;
  const double weight_squares = norms[2 * tensor], update_squares = norms[2 * tensor + 1];
  const double ratio =
      decays_here && weight_squares > 0.0 && update_squares > 0.0 ? sqrt(weight_squares) / sqrt(update_squares) : 1.0;
  const auto step = static_cast<float>(static_cast<double>(coefficients[kWarmedUpRate]) * ratio);
  const float decay = decays_here ? s.weight_decay : 0.0f;
  DLBENCH_GRID_STRIDE(k, n) {
    const std::int64_t i = base + k;
    values[i] -= step * lamb_direction(first_moment[i], second_moment[i], values[i], decay, coefficients, s.epsilon);
  }
}

// Calls f(std::integral_constant<int, P>{}) with the first P of Ps for which 32 · P values (P a
// lane of a warp) hold a row of `length`; returns false, not calling f, when none does.
template <int... Ps, typename F>
bool with_values_per_lane(int length, F&& f) {
  return ((length <= 32 * Ps ? (f(std::integral_constant<int, Ps>{}), true) : false) || ...);
}

// Enough blocks of kThreads for one block (or warp) per row, within the grid's limit.
unsigned blocks_for_rows(std::int64_t rows, int rows_per_block) {
  return static_cast<unsigned>(std::clamp<std::int64_t>((rows + rows_per_block - 1) / rows_per_block, 1, 65535));
}

}  // namespace

void layer_norm_forward(DType dtype, const void* x, const float* gamma, const float* beta, void* y, float* mean,
                        float* variance, std::int64_t rows, int features, float epsilon, cudaStream_t stream) {
  if (rows <= 0) return;
  with_float_type(dtype, [&](auto t) {
    using T = typename decltype(t)::type;
    const auto* in = static_cast<const T*>(x);
    auto* out = static_cast<T*>(y);
    const bool by_warps = with_values_per_lane<8, 16, 24, 32>(features, [&](auto per_lane) {
      DLBENCH_LAUNCH_GRID((layer_norm_forward_warp_kernel<T, decltype(per_lane)::value>),
          (blocks_for_rows(rows, kThreads / 32)), kThreads, stream, in, gamma, beta, out, mean, variance, rows,
          features, epsilon);
    });
    if (!by_warps) {
      DLBENCH_LAUNCH_GRID((layer_norm_forward_kernel<T>), (blocks_for_rows(rows, 1)), kThreads, stream, in, gamma, beta,
          out, mean, variance, rows, features, epsilon);
    }
  });
}

std::size_t layer_norm_backward_scratch_bytes(std::int64_t rows, int features) {
  return column_chunks_scratch_bytes(column_chunks(rows, features), features, 2);
}

void layer_norm_backward(DType dtype, const void* x, const void* dy, const float* gamma, const float* mean,
                         const float* variance, void* dx, float* dgamma, float* dbeta, std::int64_t rows,
                         int features, float epsilon, float* scratch, cudaStream_t stream) {
  if (rows <= 0) return;
  const ColumnChunks plan = column_chunks(rows, features);
  if (plan.chunks > 1 && scratch == nullptr) throw std::invalid_argument("layer_norm_backward: many rows need the scratch");
  // With chunks, dgamma's partial sums first, then dbeta's.
  float* gamma_out = plan.chunks > 1 ? scratch : dgamma;
  float* beta_out = plan.chunks > 1 ? scratch + plan.chunks * features : dbeta;
  with_float_type(dtype, [&](auto t) {
    using T = typename decltype(t)::type;
    const auto* in = static_cast<const T*>(x);
    const auto* gradient = static_cast<const T*>(dy);
    auto* out = static_cast<T*>(dx);
    const bool by_warps = with_values_per_lane<8, 16, 24, 32>(features, [&](auto per_lane) {
      DLBENCH_LAUNCH_GRID((layer_norm_backward_data_warp_kernel<T, decltype(per_lane)::value>),
          (blocks_for_rows(rows, kThreads / 32)), kThreads, stream, in, gradient, gamma, mean, variance, out, rows,
          features, epsilon);
    });
    if (!by_warps) {
      DLBENCH_LAUNCH_GRID((layer_norm_backward_data_kernel<T>), (blocks_for_rows(rows, 1)), kThreads, stream, in,
          gradient, gamma, mean, variance, out, rows, features, epsilon);
    }
    const dim3 block(kColumnTile, kColumnRowLanes);
    const dim3 grid(static_cast<unsigned>(plan.tiles), static_cast<unsigned>(plan.chunks));
    DLBENCH_LAUNCH_GRID((layer_norm_backward_parameters_kernel<T>), grid, block, stream, in, gradient, mean, variance,
        gamma_out, beta_out, rows, features, epsilon, plan.chunk_rows);
  });
  if (plan.chunks > 1) {
    add_column_chunks(gamma_out, dgamma, features, plan.chunks, stream);
    add_column_chunks(beta_out, dbeta, features, plan.chunks, stream);
  }
}

void softmax_forward(DType dtype, const void* x, void* y, std::int64_t rows, int columns, const std::int32_t* lengths,
                     std::int64_t rows_per_length, cudaStream_t stream) {
  if (rows <= 0) return;
  with_float_type(dtype, [&](auto t) {
    using T = typename decltype(t)::type;
    const auto* in = static_cast<const T*>(x);
    auto* out = static_cast<T*>(y);
    const unsigned blocks = blocks_for_rows(rows, kThreads / 32);
    const bool in_registers = with_values_per_lane<1, 2, 4, 8, 16>(columns, [&](auto per_lane) {
      DLBENCH_LAUNCH_GRID((softmax_forward_registers_kernel<T, decltype(per_lane)::value>), blocks, kThreads, stream,
          in, out, rows, columns, lengths, rows_per_length);
    });
    if (!in_registers) {
      DLBENCH_LAUNCH_GRID((softmax_forward_kernel<T>), blocks, kThreads, stream, in, out, rows, columns, lengths,
          rows_per_length);
    }
  });
}

void softmax_backward(DType dtype, const void* y, const void* dy, void* dx, std::int64_t rows, int columns,
                      cudaStream_t stream) {
  if (rows <= 0) return;
  with_float_type(dtype, [&](auto t) {
    using T = typename decltype(t)::type;
    const auto* p = static_cast<const T*>(y);
    const auto* g = static_cast<const T*>(dy);
    auto* out = static_cast<T*>(dx);
    const unsigned blocks = blocks_for_rows(rows, kThreads / 32);
    const bool in_registers = with_values_per_lane<1, 2, 4, 8, 16>(columns, [&](auto per_lane) {
      DLBENCH_LAUNCH_GRID((softmax_backward_registers_kernel<T, decltype(per_lane)::value>), blocks, kThreads, stream,
          p, g, out, rows, columns);
    });
    if (!in_registers) DLBENCH_LAUNCH_GRID((softmax_backward_kernel<T>), blocks, kThreads, stream, p, g, out, rows,
        columns);
  });
}

void gelu_forward(DType dtype, const void* x, void* y, std::int64_t n, cudaStream_t stream) {
  launch_map(Gelu{}, dtype, x, y, n, stream);
}
void gelu_backward(DType dtype, const void* x, const void* dy, void* dx, std::int64_t n, cudaStream_t stream) {
  launch_map2(GeluBackward{}, dtype, x, dy, dx, n, stream);
}
void tanh_forward(DType dtype, const void* x, void* y, std::int64_t n, cudaStream_t stream) {
  launch_map(Tanh{}, dtype, x, y, n, stream);
}
void tanh_backward(DType dtype, const void* x, const void* dy, void* dx, std::int64_t n, cudaStream_t stream) {
  launch_map2(TanhBackward{}, dtype, x, dy, dx, n, stream);
}

void swap_axes(DType dtype, const void* x, void* y, std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d,
               cudaStream_t stream) {
  const SwapAxesPlan plan = swap_axes_plan(a, b, c, d, dtype_size(dtype), x, y);
  if (plan.count <= 0) return;
  switch (plan.pack_bytes) {
    case 16: launch_swap_axes<uint4>(plan, x, y, b, c, stream); return;
    case 8: launch_swap_axes<uint2>(plan, x, y, b, c, stream); return;
    case 4: launch_swap_axes<std::uint32_t>(plan, x, y, b, c, stream); return;
    case 2: launch_swap_axes<std::uint16_t>(plan, x, y, b, c, stream); return;
    default: break;
  }
  throw std::invalid_argument("swap_axes: no kernel moves " + std::to_string(plan.pack_bytes) + "-byte packs");
}

void gather_rows(DType table_dtype, const void* table, const std::int32_t* rows, std::int64_t count, int features,
                 std::int64_t table_rows, DType y_dtype, void* y, bool accumulate, cudaStream_t stream) {
  with_float_type(table_dtype, [&](auto table_type) {
    using TableT = typename decltype(table_type)::type;
    with_float_type(y_dtype, [&](auto t) {
      using T = typename decltype(t)::type;
      if (count * features <= 0) return;
      DLBENCH_LAUNCH_GRID((gather_rows_kernel<TableT, T>), blocks_for(count * features), kThreads, stream,
          static_cast<const TableT*>(table), rows, count, features, table_rows, static_cast<T*>(y), accumulate);
    });
  });
}

std::size_t scatter_add_rows_scratch_bytes(std::int64_t count, int features, std::int64_t table_rows) {
  return count > 0 ? scatter_scratch(count, features, table_rows).bytes : 0;
}

void scatter_add_rows(DType dy_dtype, const void* dy, const std::int32_t* rows, std::int64_t count, int features,
                      std::int64_t table_rows, DType table_dtype, void* table_grad, void* scratch,
                      cudaStream_t stream) {
  if (count <= 0 || features <= 0) return;
  if (count > std::numeric_limits<std::int32_t>::max() || table_rows >= std::numeric_limits<std::int32_t>::max()) {
    throw std::invalid_argument("scatter_add_rows: " + std::to_string(count) + " rows into a table of " +
                                std::to_string(table_rows) + "; at most 2^31 - 1 of each");
  }
  const ScatterScratch layout = scatter_scratch(count, features, table_rows);
  auto* const bytes = static_cast<unsigned char*>(scratch);
  auto* const starts = reinterpret_cast<std::int32_t*>(bytes);
  auto* const order = reinterpret_cast<std::int32_t*>(bytes + layout.order_offset);
  auto* const partials = reinterpret_cast<float*>(bytes + layout.partials_offset);
  DLBENCH_CUDA_CHECK(
      cudaMemsetAsync(starts, 0, static_cast<std::size_t>(table_rows + 1) * sizeof(std::int32_t), stream));
  DLBENCH_LAUNCH_GRID((count_rows_kernel), blocks_for(count), kThreads, stream, rows, count, table_rows, starts);
  DLBENCH_LAUNCH_GRID((exclusive_prefix_sums_kernel), 1, kThreads, stream, starts, table_rows + 1);
  DLBENCH_LAUNCH_GRID((place_in_row_order_kernel), blocks_for(count), kThreads, stream, rows, count, table_rows,
                      starts, order);
  const auto windows = static_cast<unsigned>(std::min<std::int64_t>(scatter_windows(count), 65535));
  with_float_type(dy_dtype, [&](auto t) {
    using T = typename decltype(t)::type;
    with_float_type(table_dtype, [&](auto table_type) {
      using TableT = typename decltype(table_type)::type;
      DLBENCH_LAUNCH_GRID((add_window_pieces_kernel<T, TableT>), windows, kThreads, stream, static_cast<const T*>(dy),
                          rows, order, starts, table_rows, features, partials, static_cast<TableT*>(table_grad));
      DLBENCH_LAUNCH_GRID((add_crossing_rows_kernel<TableT>), windows, kThreads, stream, rows, order, starts,
                          table_rows, features, partials, static_cast<TableT*>(table_grad));
    });
  });
}

void adam_prepare(const float* grads, std::int64_t n, double* squares, const std::uint64_t* update_number,
                  const LossScaleState* loss_scale, const AdamWScalars& s, float* coefficients, cudaStream_t stream) {
  const unsigned blocks = n > 0 ? std::min(blocks_for(n), static_cast<unsigned>(kSquaresBlocks)) : 0u;
  if (blocks > 0) DLBENCH_LAUNCH_GRID((sum_of_squares_kernel), blocks, kThreads, stream, grads, n, squares + 1);
  DLBENCH_LAUNCH_GRID((adamw_coefficients_kernel), 1, kThreads, stream, squares, static_cast<int>(blocks),
                      update_number, loss_scale, s, coefficients);
}

void adamw_apply(float* values, float* grads, float* first_moment, float* second_moment, std::int64_t n,
                 const std::int64_t* range_offsets, const std::int64_t* range_counts, const std::int32_t* range_decays,
                 int ranges, const AdamWScalars& s, const float* coefficients, cudaStream_t stream) {
  DLBENCH_LAUNCH(adamw_apply_kernel, n, stream, values, grads, first_moment, second_moment, n, range_offsets,
                 range_counts, range_decays, ranges, s, coefficients);
}

std::size_t lamb_norms_doubles(int tensors) {
  return tensors > 0 ? 2 * static_cast<std::size_t>(tensors) * (1 + kLambBlocksPerTensor) : 0;
}

void lamb_moments(const float* values, float* grads, float* first_moment, float* second_moment,
                  const std::int64_t* tensor_offsets, const std::int64_t* tensor_counts, const std::int32_t* tensor_decays,
                  int tensors, const AdamWScalars& s, const float* coefficients, double* norms, cudaStream_t stream) {
  if (tensors <= 0) return;
  double* const partials = norms + 2 * tensors;
  const dim3 grid(static_cast<unsigned>(kLambBlocksPerTensor), static_cast<unsigned>(tensors));
  DLBENCH_LAUNCH_GRID((lamb_moments_kernel), grid, kThreads, stream, values, grads, first_moment, second_moment,
      tensor_offsets, tensor_counts, tensor_decays, s, coefficients, partials);
  DLBENCH_LAUNCH_GRID((lamb_norms_kernel), static_cast<unsigned>(tensors), kThreads, stream, partials, coefficients,
                      norms);
}

void lamb_apply(float* values, const float* first_moment, const float* second_moment,
                const std::int64_t* tensor_offsets, const std::int64_t* tensor_counts, const std::int32_t* tensor_decays,
                int tensors, const AdamWScalars& s, const float* coefficients, const double* norms,
                cudaStream_t stream) {
  if (tensors <= 0) return;
  const dim3 grid(static_cast<unsigned>(kLambBlocksPerTensor), static_cast<unsigned>(tensors));
  DLBENCH_LAUNCH_GRID((lamb_apply_kernel), grid, kThreads, stream, values, first_moment, second_moment, tensor_offsets,
      tensor_counts, tensor_decays, s, coefficients, norms);
}

}  // namespace dlbench::worker::kernels
