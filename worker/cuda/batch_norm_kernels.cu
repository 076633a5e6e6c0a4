#include "cuda/batch_norm_kernels.hpp"

#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "cuda/cuda_check.hpp"
#include "cuda/kernel_launch.cuh"
#include "cuda/warp_reduce.cuh"

namespace dlbench::worker::kernels {
namespace {

// A unit of W values from element `at`: one value, or a 16-byte pack (W = Pack<T>::kWidth).
template <int W, typename T>
__device__ inline void load_unit(const T* p, std::int64_t at, float (&v)[W]) {
  if constexpr (W == 1) {
    v[0] = load(p[at]);
  } else {
    static_assert(W == Pack<T>::kWidth, "a unit is one value or one pack");
    const Pack<T> pack = *reinterpret_cast<const Pack<T>*>(p + at);
#pragma unroll
    for (int k = 0; k < W; ++k) v[k] = load(pack.v[k]);
  }
}

template <int W, typename T>
__device__ inline void store_unit(T* p, std::int64_t at, const float (&v)[W]) {
  if constexpr (W == 1) {
    p[at] = store<T>(v[0]);
  } else {
    Pack<T> pack;
#pragma unroll
    for (int k = 0; k < W; ++k) pack.v[k] = store<T>(v[k]);
    *reinterpret_cast<Pack<T>*>(p + at) = pack;
  }
}

// The elementwise passes' per-channel values: k[i] holds those of the unit's i-th value's channel
// (one channel for the whole unit in NCHW, each value its own in channels last). A normalising
// float4 is (scale, β, mean, -); an input-gradient one (a, b, e, mean).

// y = tail((x − mean) · scale + β [+ z]); with add_relu the unit's mask byte too.
template <typename T, int W, BatchNormTail kTail>
__device__ inline void normalize_unit(const T* x, const T* z, T* y, std::uint8_t* relu_mask, std::int64_t at,
                                      const float4 (&k)[W]) {
  static_assert(W <= kBatchNormMaskUnitMost, "a unit's mask is one byte");
  float v[W];
  load_unit<W>(x, at, v);
  if constexpr (kTail == BatchNormTail::add_relu) {
    float r[W];
    load_unit<W>(z, at, r);
    unsigned bits = 0;
#pragma unroll
    for (int i = 0; i < W; ++i) {
      v[i] = fmaxf(batch_norm_normalized(v[i], k[i].z, k[i].x, k[i].y) + r[i], 0.0f);
      bits |= (v[i] > 0.0f ? 1u : 0u) << i;
    }
    relu_mask[relu_mask_byte(at, W)] = static_cast<std::uint8_t>(bits);
  } else {
#pragma unroll
    for (int i = 0; i < W; ++i) {
      v[i] = batch_norm_normalized(v[i], k[i].z, k[i].x, k[i].y);
      if constexpr (kTail == BatchNormTail::relu) v[i] = fmaxf(v[i], 0.0f);
    }
  }
  store_unit<W>(y, at, v);
}

// g = dy and x, with a ReLU tail g masked where forward's normalised value was not positive: the
// mask found again from x and the normalising values n, so that backward reads no y.
template <typename T, int W, BatchNormTail kTail>
__device__ inline void gradient_and_input(const T* x, const T* dy, std::int64_t at, const float4 (&n)[W],
                                          float (&g)[W], float (&v)[W]) {
  load_unit<W>(dy, at, g);
  load_unit<W>(x, at, v);
  if constexpr (kTail == BatchNormTail::relu) {
#pragma unroll
    for (int i = 0; i < W; ++i) g[i] = batch_norm_normalized(v[i], n[i].z, n[i].x, n[i].y) > 0.0f ? g[i] : 0.0f;
  }
}

// The gradient sums' unit, both layouts: g and x as above, except that with add_relu g is dy where
// forward's mask byte says y > 0 (the residual's sum is not in x), written to dz for the residual
// and the input-gradient pass.
template <typename T, int W, BatchNormTail kTail>
__device__ inline void gradient_sums_unit(const T* x, const std::uint8_t* relu_mask, const T* dy, T* dz,
                                          std::int64_t at, const float4 (&n)[W], float (&g)[W], float (&v)[W]) {
  gradient_and_input<T, W, kTail>(x, dy, at, n, g, v);
  if constexpr (kTail == BatchNormTail::add_relu) {
    const unsigned bits = relu_mask[relu_mask_byte(at, W)];
#pragma unroll
    for (int i = 0; i < W; ++i) g[i] = (bits >> i) & 1u ? g[i] : 0.0f;
    store_unit<W>(dz, at, g);
  }
}

// dx = a · g + b · (x − mean) + e, g from dz (add_relu) or dy (masked again with a ReLU tail);
// k = (a, b, e, mean), n the normalising values.
template <typename T, int W, BatchNormTail kTail>
__device__ inline void input_gradient_unit(const T* x, const T* dy, const T* dz, T* dx, std::int64_t at,
                                           const float4 (&k)[W], const float4 (&n)[W]) {
  float g[W], v[W];
  gradient_and_input<T, W, kTail>(x, kTail == BatchNormTail::add_relu ? dz : dy, at, n, g, v);
#pragma unroll
  for (int i = 0; i < W; ++i) v[i] = k[i].x * g[i] + k[i].y * (v[i] - k[i].w) + k[i].z;
  store_unit<W>(dx, at, v);
}

// What backward reads of forward's: γ and β, and the batch's mean and inverse std.
struct BatchNormKept {
  const float *gamma, *beta, *mean, *inverse_std;
};

// A channel's normalising values as forward's statistics kernel made them, from what it kept.
__device__ inline float4 normalizing_of(std::int64_t channel, const BatchNormKept& kept) {
  return make_float4(batch_norm_scale(kept.gamma[channel], kept.inverse_std[channel]), kept.beta[channel],
                     kept.mean[channel], 0.0f);
}

// One channel's per-channel values for each of a unit's W values (NCHW).
template <int W>
__device__ inline void broadcast(const float4& c, float4 (&k)[W]) {
#pragma unroll
  for (int i = 0; i < W; ++i) k[i] = c;
}

// Block (channel, chunk): Σ(x − shift) and Σ(x − shift)² over its chunk, shift its first value.
template <typename T, int W>
__global__ void moments_kernel(const T* x, float* partial, BatchNormShape s, BatchNormChunks plan) {
  const std::int64_t channel = blockIdx.x, chunk = blockIdx.y;
  const float shift = load(x[chunk_first_offset(s, plan, channel, chunk)]);
  float sum = 0.0f, squares = 0.0f;
  for_chunk_units(s, plan, channel, chunk, W, threadIdx.x, blockDim.x, [&](std::int64_t at) {
    float v[W];
    load_unit<W>(x, at, v);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      const float d = v[k] - shift;
      sum += d;
      squares += d * d;
    }
  });
  sum = block_sum(sum);
  squares = block_sum(squares);
  if (threadIdx.x == 0) {
    float* out = partial + partial_offset(s, chunk, channel, 3);
    out[0] = shift;
    out[1] = sum;
    out[2] = squares;
  }
}

// Calls f(channel, lane) for each channel the running warp takes (a warp a channel, grid-strided),
// every lane of the warp together: what f does with shuffles reaches the whole warp.
template <typename F>
__device__ inline void for_warp_channels(std::int64_t channels, F&& f) {
  const std::int64_t warps = static_cast<std::int64_t>(gridDim.x) * blockDim.x / kBatchNormMergeLanes;
  const auto lane = static_cast<int>(threadIdx.x % kBatchNormMergeLanes);
  const std::int64_t first = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kBatchNormMergeLanes;
  for (std::int64_t channel = first; channel < channels; channel += warps) {
    f(channel, lane);
  }
}

// The lanes' tree (batch_norm_plan.hpp's merged_by_lanes): every lane gets the channel's moments.
__device__ inline Moments warp_merged(Moments m, int lane) {
  for (int offset = kBatchNormMergeLanes / 2; offset > 0; offset /= 2) {
    const Moments theirs{__shfl_xor_sync(kFullWarp, m.count, offset), __shfl_xor_sync(kFullWarp, m.mean, offset),
                         __shfl_xor_sync(kFullWarp, m.m2, offset)};
    m = merge_lanes(m, theirs, static_cast<unsigned>(lane), offset);
  }
  return m;
}

// A warp a channel: the chunks' moments merged (lane_moments, then the lanes' tree), and lane 0
// writes the statistics, the running ones moved, and what the normalising pass needs (scale, β,
// mean).
template <typename Plan>
__global__ void statistics_kernel(const float* partial, BatchNormShape s, Plan plan, const float* gamma,
                                  const float* beta, float epsilon, float momentum, float* mean, float* inverse_std,
                                  float* running_mean, float* running_var, float4* normalizing) {
  for_warp_channels(s.channels, [&](std::int64_t channel, int lane) {
    const Moments m = warp_merged(lane_moments(partial, s, plan, channel, lane), lane);
    if (lane != 0) return;
    const BatchNormForwardChannel f =
        batch_norm_forward_channel(m, gamma[channel], epsilon, momentum, running_mean[channel], running_var[channel]);
    mean[channel] = f.mean;
    inverse_std[channel] = f.inverse_std;
    running_mean[channel] = f.running_mean;
    running_var[channel] = f.running_var;
    normalizing[channel] = make_float4(f.scale, beta[channel], f.mean, 0.0f);
  });
}

// The block a pass that follows a reduction takes: the reduction's blocks from the last
// (Traversal::back_to_front).
__device__ inline std::int64_t last_first(unsigned index, unsigned count) {
  return static_cast<std::int64_t>(count - 1 - index);
}

// Block (channel, chunk) as the moments pass's, the last first, its units back to front:
// y = tail((x − mean) · scale + β [+ z]).
template <typename T, int W, BatchNormTail kTail>
__global__ void normalize_kernel(const T* x, const T* z, T* y, std::uint8_t* relu_mask, const float4* normalizing,
                                 BatchNormShape s, BatchNormChunks plan) {
  const std::int64_t channel = last_first(blockIdx.x, gridDim.x), chunk = last_first(blockIdx.y, gridDim.y);
  float4 k[W];
  broadcast<W>(normalizing[channel], k);  // scale, β, mean
  for_chunk_units<Traversal::back_to_front>(s, plan, channel, chunk, W, threadIdx.x, blockDim.x, [&](std::int64_t at) {
    normalize_unit<T, W, kTail>(x, z, y, relu_mask, at, k);
  });
}

// Block (channel, chunk): Σg and Σg · (x − mean) over its chunk; with add_relu it also writes
// dz = g, which the input-gradient pass then reads instead of dy and the mask.
template <typename T, int W, BatchNormTail kTail>
__global__ void gradient_sums_kernel(const T* x, const std::uint8_t* relu_mask, const T* dy, T* dz,
                                     BatchNormKept kept, float* partial, BatchNormShape s, BatchNormChunks plan) {
  const std::int64_t channel = blockIdx.x, chunk = blockIdx.y;
  float4 n[W];
  broadcast<W>(normalizing_of(channel, kept), n);  // scale, β, mean
  float sum = 0.0f, centered = 0.0f;
  for_chunk_units(s, plan, channel, chunk, W, threadIdx.x, blockDim.x, [&](std::int64_t at) {
    float g[W], v[W];
    gradient_sums_unit<T, W, kTail>(x, relu_mask, dy, dz, at, n, g, v);
#pragma unroll
    for (int k = 0; k < W; ++k) {
      sum += g[k];
      centered += g[k] * (v[k] - n[k].z);
    }
  });
  sum = block_sum(sum);
  centered = block_sum(centered);
  if (threadIdx.x == 0) {
    float* out = partial + partial_offset(s, chunk, channel, 2);
    out[0] = sum;
    out[1] = centered;
  }
}

// A warp a channel: the chunks' sums added in fp64 (lane_gradient_sums, then the lanes' tree), and
// lane 0 writes dγ, dβ, the input gradient's coefficients (a, b, e, mean) and, for a ReLU tail's
// mask, the normalising values.
template <typename Plan>
__global__ void gradient_channels_kernel(const float* partial, BatchNormShape s, Plan plan, BatchNormKept kept,
                                         float* dgamma, float* dbeta, float4* coefficients, float4* normalizing) {
  for_warp_channels(s.channels, [&](std::int64_t channel, int lane) {
    const GradientSums mine = lane_gradient_sums(partial, s, plan, channel, lane);
    const GradientSums g{warp_sum(mine.sum), warp_sum(mine.centered)};
    if (lane != 0) return;
    const BatchNormBackwardChannel b = batch_norm_backward_channel(
        static_cast<double>(s.per_channel()), g.sum, g.centered, kept.gamma[channel], kept.inverse_std[channel]);
    dgamma[channel] = b.dgamma;
    dbeta[channel] = b.dbeta;
    coefficients[channel] = make_float4(b.a, b.b, b.e, kept.mean[channel]);
    normalizing[channel] = normalizing_of(channel, kept);
  });
}

// Block (channel, chunk) as the sums pass's, the last first, its units back to front:
// dx = a · g + b · (x − mean) + e.
template <typename T, int W, BatchNormTail kTail>
__global__ void input_gradient_kernel(const T* x, const T* dy, const T* dz, T* dx, const float4* coefficients,
                                      const float4* normalizing, BatchNormShape s, BatchNormChunks plan) {
  const std::int64_t channel = last_first(blockIdx.x, gridDim.x), chunk = last_first(blockIdx.y, gridDim.y);
  float4 k[W], n[W] = {};
  broadcast<W>(coefficients[channel], k);  // a, b, e, mean
  if constexpr (kTail == BatchNormTail::relu) broadcast<W>(normalizing[channel], n);
  for_chunk_units<Traversal::back_to_front>(s, plan, channel, chunk, W, threadIdx.x, blockDim.x, [&](std::int64_t at) {
    input_gradient_unit<T, W, kTail>(x, dy, dz, dx, at, k, n);
  });
}

// Channels last (BatchNormTiles): a block (tile, chunk), each thread a unit of W channels over its
// lane's rows. kTileLanes rows at a time; a tile is at most 8 units of 8 halves wide.
constexpr int kTileLanes = kThreads / kBatchNormTileUnits;
constexpr int kTileChannelsMost = kBatchNormTileUnits * 8;
static_assert(kThreads % kBatchNormTileUnits == 0 && kTileChannelsMost <= kThreads, "a thread per tile channel");

// The block's per-channel totals of kValues sums each thread kept for its W channels, its lanes
// added in lane order. Every thread of the block calls it; the one that owns a channel of the tile
// (thread c: the tile's channel c) gets its totals and the channel, the others -1.
template <int W, int kValues>
__device__ inline std::int64_t tile_totals(const float (&sums)[kValues][W], const BatchNormShape& s,
                                           const BatchNormTiles& plan, std::int64_t tile, float (&totals)[kValues]) {
  __shared__ float lanes[kValues][kTileLanes][kTileChannelsMost];
  const unsigned unit = threadIdx.x % kBatchNormTileUnits, lane = threadIdx.x / kBatchNormTileUnits;
#pragma unroll
  for (int j = 0; j < kValues; ++j) {
#pragma unroll
    for (int k = 0; k < W; ++k) lanes[j][lane][unit * W + k] = sums[j][k];
  }
  __syncthreads();
  const std::int64_t column = threadIdx.x, channel = tile * plan.tile_channels + column;
  if (column >= plan.tile_channels || channel >= s.channels) return -1;
#pragma unroll
  for (int j = 0; j < kValues; ++j) {
    float total = 0.0f;
    for (int l = 0; l < kTileLanes; ++l) total += lanes[j][l][column];
    totals[j] = total;
  }
  return channel;
}

// Block (tile, chunk): per channel Σ(x − shift) and Σ(x − shift)² over the chunk's rows, shift the
// chunk's first value of the channel.
template <typename T, int W>
__global__ void tile_moments_kernel(const T* x, float* partial, BatchNormShape s, BatchNormTiles plan) {
  const std::int64_t tile = blockIdx.x, chunk = blockIdx.y;
  const std::int64_t channel = tile_unit_channel(s, plan, tile, W, threadIdx.x);
  float sums[2][W] = {};
  if (channel >= 0) {
    float shift[W];
    load_unit<W>(x, tile_chunk_first_offset(s, plan, channel, chunk), shift);
    for_tile_rows(s, plan, tile, chunk, W, threadIdx.x, blockDim.x, [&](std::int64_t at) {
      float v[W];
      load_unit<W>(x, at, v);
#pragma unroll
      for (int k = 0; k < W; ++k) {
        const float d = v[k] - shift[k];
        sums[0][k] += d;
        sums[1][k] += d * d;
      }
    });
  }
  float totals[2];
  const std::int64_t mine = tile_totals<W, 2>(sums, s, plan, tile, totals);
  if (mine < 0) return;
  float* out = partial + partial_offset(s, chunk, mine, 3);
  out[0] = load(x[tile_chunk_first_offset(s, plan, mine, chunk)]);
  out[1] = totals[0];
  out[2] = totals[1];
}

// Block (tile, chunk) as the moments pass's, the last first, its rows back to front:
// y = tail((x − mean) · scale + β [+ z]), each thread its channels' coefficients loaded once.
template <typename T, int W, BatchNormTail kTail>
__global__ void tile_normalize_kernel(const T* x, const T* z, T* y, std::uint8_t* relu_mask,
                                      const float4* normalizing, BatchNormShape s, BatchNormTiles plan) {
  const std::int64_t tile = last_first(blockIdx.x, gridDim.x), chunk = last_first(blockIdx.y, gridDim.y);
  const std::int64_t channel = tile_unit_channel(s, plan, tile, W, threadIdx.x);
  if (channel < 0) return;
  float4 k[W];
#pragma unroll
  for (int i = 0; i < W; ++i) k[i] = normalizing[channel + i];  // scale, β, mean
  for_tile_rows<Traversal::back_to_front>(s, plan, tile, chunk, W, threadIdx.x, blockDim.x, [&](std::int64_t at) {
    normalize_unit<T, W, kTail>(x, z, y, relu_mask, at, k);
  });
}

// Block (tile, chunk): per channel Σg and Σg · (x − mean); with add_relu it also writes dz = g.
template <typename T, int W, BatchNormTail kTail>
__global__ void tile_gradient_sums_kernel(const T* x, const std::uint8_t* relu_mask, const T* dy, T* dz,
                                          BatchNormKept kept, float* partial, BatchNormShape s, BatchNormTiles plan) {
  const std::int64_t tile = blockIdx.x, chunk = blockIdx.y;
  const std::int64_t channel = tile_unit_channel(s, plan, tile, W, threadIdx.x);
  float sums[2][W] = {};
  if (channel >= 0) {
    float4 n[W];
#pragma unroll
    for (int k = 0; k < W; ++k) n[k] = normalizing_of(channel + k, kept);  // scale, β, mean
    for_tile_rows(s, plan, tile, chunk, W, threadIdx.x, blockDim.x, [&](std::int64_t at) {
      float g[W], v[W];
      gradient_sums_unit<T, W, kTail>(x, relu_mask, dy, dz, at, n, g, v);
#pragma unroll
      for (int k = 0; k < W; ++k) {
        sums[0][k] += g[k];
        sums[1][k] += g[k] * (v[k] - n[k].z);
      }
    });
  }
  float totals[2];
  const std::int64_t mine = tile_totals<W, 2>(sums, s, plan, tile, totals);
  if (mine < 0) return;
  float* out = partial + partial_offset(s, chunk, mine, 2);
  out[0] = totals[0];
  out[1] = totals[1];
}

// Block (tile, chunk) as the sums pass's, the last first, its rows back to front:
// dx = a · g + b · (x − mean) + e, each thread its channels' coefficients loaded once.
template <typename T, int W, BatchNormTail kTail>
__global__ void tile_input_gradient_kernel(const T* x, const T* dy, const T* dz, T* dx, const float4* coefficients,
                                           const float4* normalizing, BatchNormShape s, BatchNormTiles plan) {
  const std::int64_t tile = last_first(blockIdx.x, gridDim.x), chunk = last_first(blockIdx.y, gridDim.y);
  const std::int64_t channel = tile_unit_channel(s, plan, tile, W, threadIdx.x);
  if (channel < 0) return;
  float4 k[W], n[W] = {};
#pragma unroll
  for (int i = 0; i < W; ++i) {
    k[i] = coefficients[channel + i];  // a, b, e, mean
    if constexpr (kTail == BatchNormTail::relu) n[i] = normalizing[channel + i];
  }
  for_tile_rows<Traversal::back_to_front>(s, plan, tile, chunk, W, threadIdx.x, blockDim.x, [&](std::int64_t at) {
    input_gradient_unit<T, W, kTail>(x, dy, dz, dx, at, k, n);
  });
}

// The scratch's layout: the per-channel float4s first (16-byte aligned): forward's normalising
// values, or backward's input-gradient coefficients and then its normalising values; then the
// chunks' partial sums, for the most chunks any unit width of the layout makes.
std::int64_t coefficient_floats(const BatchNormShape& s) { return 2 * 4 * s.channels; }
int pack_width(DType dtype) { return static_cast<int>(kVectorBytes / dtype_size(dtype)); }

// The unit width the passes take where every pointer is 16-byte aligned (dispatch), single values
// otherwise: the width an add-and-ReLU mask is laid out for.
// A thread a channel: the statistics from the sums the convolution before wrote (Σx, then Σx²), the
// running ones moved, and what applies them: the normalising pass's (scale, β, mean), or a deferred
// batch norm's scale and shift for the next convolution (deferred_batch_norm_channel); either null.
template <typename T>
__global__ void sums_statistics_kernel(std::int64_t channels, double count, const float* sums, const float* gamma,
                                       const float* beta, float epsilon, float momentum, float* mean,
                                       float* inverse_std, float* running_mean, float* running_var,
                                       float4* normalizing, T* scale_shift) {
  DLBENCH_GRID_STRIDE(c, channels) {
    const DeferredBatchNormChannel d = deferred_batch_norm_channel(count, sums[c], sums[channels + c], gamma[c], beta[c],
                                                                   epsilon, momentum, running_mean[c], running_var[c]);
    mean[c] = d.statistics.mean;
    inverse_std[c] = d.statistics.inverse_std;
    running_mean[c] = d.statistics.running_mean;
    running_var[c] = d.statistics.running_var;
    if (normalizing != nullptr) normalizing[c] = make_float4(d.statistics.scale, beta[c], d.statistics.mean, 0.0f);
    if (scale_shift != nullptr) {
      scale_shift[c] = store<T>(d.statistics.scale);
      scale_shift[channels + c] = store<T>(d.shift);
    }
  }
}

int aligned_unit_width(DType dtype, bool channels_last, const BatchNormShape& s) {
  return channels_last ? batch_norm_tile_width(s.channels, pack_width(dtype))
                       : batch_norm_unit_width(s.pixels, pack_width(dtype));
}

std::int64_t most_chunks(DType dtype, bool channels_last, const BatchNormShape& s) {
  if (!channels_last) return batch_norm_chunks(s).chunks;
  return std::max(batch_norm_tiles(s, 1).chunks, batch_norm_tiles(s, aligned_unit_width(dtype, true, s)).chunks);
}

// Forward and backward must take the mask's units as it was laid out: a pointer off 16 bytes would
// make single values of units of packs, whose bytes several threads would then share.
void check_mask_width(BatchNormTail tail, int width, DType dtype, bool channels_last, const BatchNormShape& s) {
  const int laid_out = aligned_unit_width(dtype, channels_last, s);
  if (tail == BatchNormTail::add_relu && width != laid_out) {
    throw std::invalid_argument("batch norm kernels: the add-and-ReLU mask is laid out for units of " +
                                std::to_string(laid_out) + " values, and a pointer not 16-byte aligned makes this "
                                "launch take units of " + std::to_string(width));
  }
}
std::int64_t partial_floats(DType dtype, bool channels_last, const BatchNormShape& s) {
  return 3 * s.channels * most_chunks(dtype, channels_last, s);
}

// Calls f(Type<T>{}, width) for the kernels' element type and their unit width (a pack where every
// plane divides into packs and every pointer is aligned). In channels last a pack lies along the
// channels, in NCHW along a plane's pixels.
template <typename F>
void dispatch(DType dtype, bool channels_last, const BatchNormShape& s, std::initializer_list<const void*> pointers,
              F&& f) {
  with_float_type(dtype, [&](auto t) {
    using T = typename decltype(t)::type;
    const VectorSplit split = vector_split(channels_last ? s.channels : s.pixels, sizeof(T), pointers);
    const int width = split.packs == 0 ? 1 : aligned_unit_width(dtype, channels_last, s);
    if (width == 1) {
      f(t, std::integral_constant<int, 1>{});
    } else {
      f(t, std::integral_constant<int, Pack<T>::kWidth>{});
    }
  });
}

template <typename F>
void with_tail(BatchNormTail tail, F&& f) {
  switch (tail) {
    case BatchNormTail::none: f(std::integral_constant<BatchNormTail, BatchNormTail::none>{}); return;
    case BatchNormTail::relu: f(std::integral_constant<BatchNormTail, BatchNormTail::relu>{}); return;
    case BatchNormTail::add_relu: f(std::integral_constant<BatchNormTail, BatchNormTail::add_relu>{}); return;
  }
  throw std::invalid_argument("batch norm: an unknown tail");
}

void check_shape(bool channels_last, const BatchNormShape& s, const void* scratch) {
  if (s.samples <= 0 || s.channels <= 0 || s.pixels <= 0) {
    throw std::invalid_argument("batch norm kernels: an empty activation");
  }
  if (scratch == nullptr) throw std::invalid_argument("batch norm kernels: no scratch");
  // A chunk's units (for_chunk_units) or rows (for_tile_rows) are numbered in 32 bits, with room
  // for the last stride.
  // (Single values make channels last's longest chunks: the most tiles, the fewest chunks.)
  const std::int64_t numbered = channels_last ? batch_norm_tiles(s, 1).items_per_chunk
                                              : batch_norm_chunks(s).items_per_chunk * s.pixels;
  if (numbered > std::numeric_limits<std::int32_t>::max()) {
    throw std::invalid_argument("batch norm kernels: a chunk of more than 2^31 values");
  }
}

// A (tile, chunk) grid, and NCHW's (channel, chunk) grid.
dim3 tile_grid(const BatchNormTiles& plan) {
  return {static_cast<unsigned>(plan.tiles), static_cast<unsigned>(plan.chunks)};
}
dim3 chunk_grid(const BatchNormShape& s, const BatchNormChunks& plan) {
  return {static_cast<unsigned>(s.channels), static_cast<unsigned>(plan.chunks)};
}

}  // namespace

std::size_t batch_norm_scratch_bytes(DType dtype, bool channels_last, const BatchNormShape& shape) {
  const std::int64_t floats = coefficient_floats(shape) + partial_floats(dtype, channels_last, shape);
  return static_cast<std::size_t>(floats) * sizeof(float);
}

std::size_t batch_norm_relu_mask_bytes(DType dtype, bool channels_last, const BatchNormShape& shape) {
  if (shape.samples <= 0 || shape.channels <= 0 || shape.pixels <= 0) return 0;
  return static_cast<std::size_t>(relu_mask_bytes(shape, aligned_unit_width(dtype, channels_last, shape)));
}

void batch_norm_forward_training(DType dtype, bool channels_last, const BatchNormShape& s, BatchNormTail tail,
                                 const void* x, const void* z, void* y, std::uint8_t* relu_mask, const float* gamma,
                                 const float* beta, float epsilon, float momentum, float* mean, float* inverse_std,
                                 float* running_mean, float* running_var, float* scratch, cudaStream_t stream,
                                 const float* sums) {
  check_shape(channels_last, s, scratch);
  const bool add_relu = tail == BatchNormTail::add_relu;
  if (add_relu != (z != nullptr) || add_relu != (relu_mask != nullptr)) {
    throw std::invalid_argument(
        "batch norm kernels: a residual z and the mask backward reads go with the add_relu tail, and only with it");
  }
  auto* const normalizing = reinterpret_cast<float4*>(scratch);
  float* const partial = scratch + coefficient_floats(s);
  dispatch(dtype, channels_last, s, {x, z == nullptr ? x : z, y}, [&](auto t, auto width) {
    using T = typename decltype(t)::type;
    constexpr int W = decltype(width)::value;
    check_mask_width(tail, W, dtype, channels_last, s);
    const auto* const in = static_cast<const T*>(x);
    const auto* const residual = static_cast<const T*>(z);
    auto* const out = static_cast<T*>(y);
    // Given the convolution's sums, the statistics take no pass over x.
    const auto statistics_from_sums = [&] {
      DLBENCH_LAUNCH(sums_statistics_kernel<T>, s.channels, stream, s.channels, static_cast<double>(s.per_channel()),
                     sums, gamma, beta, epsilon, momentum, mean, inverse_std, running_mean, running_var, normalizing,
                     static_cast<T*>(nullptr));
    };
    if (channels_last) {
      const BatchNormTiles plan = batch_norm_tiles(s, W);
      if (sums != nullptr) {
        statistics_from_sums();
      } else {
        DLBENCH_LAUNCH_GRID((tile_moments_kernel<T, W>), tile_grid(plan), kThreads, stream, in, partial, s, plan);
        DLBENCH_LAUNCH(statistics_kernel<BatchNormTiles>, s.channels * kBatchNormMergeLanes, stream, partial, s, plan,
                       gamma, beta, epsilon, momentum, mean, inverse_std, running_mean, running_var, normalizing);
      }
      with_tail(tail, [&](auto kind) {
        constexpr BatchNormTail kTail = decltype(kind)::value;
        DLBENCH_LAUNCH_GRID((tile_normalize_kernel<T, W, kTail>), tile_grid(plan), kThreads, stream, in, residual, out,
            relu_mask, normalizing, s, plan);
      });
      return;
    }
    const BatchNormChunks plan = batch_norm_chunks(s);
    if (sums != nullptr) {
      statistics_from_sums();
    } else {
      DLBENCH_LAUNCH_GRID((moments_kernel<T, W>), chunk_grid(s, plan), kThreads, stream, in, partial, s, plan);
      DLBENCH_LAUNCH(statistics_kernel<BatchNormChunks>, s.channels * kBatchNormMergeLanes, stream, partial, s, plan,
                     gamma, beta, epsilon, momentum, mean, inverse_std, running_mean, running_var, normalizing);
    }
    with_tail(tail, [&](auto kind) {
      constexpr BatchNormTail kTail = decltype(kind)::value;
      DLBENCH_LAUNCH_GRID((normalize_kernel<T, W, kTail>), chunk_grid(s, plan), kThreads, stream, in, residual, out,
          relu_mask, normalizing, s, plan);
    });
  });
}

void batch_norm_backward(DType dtype, bool channels_last, const BatchNormShape& s, BatchNormTail tail,
                         const void* x, const std::uint8_t* relu_mask, const void* dy, void* dz, void* dx,
                         const float* gamma, const float* beta, const float* mean, const float* inverse_std,
                         float* dgamma, float* dbeta, float* scratch, cudaStream_t stream) {
  check_shape(channels_last, s, scratch);
  if ((tail == BatchNormTail::add_relu) != (dz != nullptr)) {
    throw std::invalid_argument("batch norm kernels: the residual's gradient dz goes with the add_relu tail, and only with it");
  }
  if ((tail == BatchNormTail::add_relu) != (relu_mask != nullptr)) {
    throw std::invalid_argument(
        "batch norm kernels: backward reads forward's mask with the add_relu tail, and only with it (a ReLU tail's "
        "mask comes from x)");
  }
  auto* const coefficients = reinterpret_cast<float4*>(scratch);
  auto* const normalizing = coefficients + s.channels;
  float* const partial = scratch + coefficient_floats(s);
  const BatchNormKept kept{gamma, beta, mean, inverse_std};
  const std::initializer_list<const void*> pointers{x, dy, dz == nullptr ? dx : dz, dx};
  dispatch(dtype, channels_last, s, pointers, [&](auto t, auto width) {
    using T = typename decltype(t)::type;
    constexpr int W = decltype(width)::value;
    check_mask_width(tail, W, dtype, channels_last, s);
    const auto* const in = static_cast<const T*>(x);
    const auto* const grad = static_cast<const T*>(dy);
    auto* const residual_grad = static_cast<T*>(dz);
    auto* const in_grad = static_cast<T*>(dx);
    with_tail(tail, [&](auto kind) {
      constexpr BatchNormTail kTail = decltype(kind)::value;
      if (channels_last) {
        const BatchNormTiles plan = batch_norm_tiles(s, W);
        DLBENCH_LAUNCH_GRID((tile_gradient_sums_kernel<T, W, kTail>), tile_grid(plan), kThreads, stream, in, relu_mask,
            grad, residual_grad, kept, partial, s, plan);
        DLBENCH_LAUNCH(gradient_channels_kernel<BatchNormTiles>, s.channels * kBatchNormMergeLanes, stream, partial, s,
                       plan, kept, dgamma, dbeta, coefficients, normalizing);
        DLBENCH_LAUNCH_GRID((tile_input_gradient_kernel<T, W, kTail>), tile_grid(plan), kThreads, stream, in, grad,
            residual_grad, in_grad, coefficients, normalizing, s, plan);
        return;
      }
      const BatchNormChunks plan = batch_norm_chunks(s);
      DLBENCH_LAUNCH_GRID((gradient_sums_kernel<T, W, kTail>), chunk_grid(s, plan), kThreads, stream, in, relu_mask,
          grad, residual_grad, kept, partial, s, plan);
      DLBENCH_LAUNCH(gradient_channels_kernel<BatchNormChunks>, s.channels * kBatchNormMergeLanes, stream, partial, s,
                     plan, kept, dgamma, dbeta, coefficients, normalizing);
      DLBENCH_LAUNCH_GRID((input_gradient_kernel<T, W, kTail>), chunk_grid(s, plan), kThreads, stream, in, grad,
          residual_grad, in_grad, coefficients, normalizing, s, plan);
    });
  });
}

// Each thread a unit of W channels of one pixel (W divides the channels): dx = fma(a, g, fma(b, x, c)).
template <typename T, int W>
__global__ void apply_coefficients_kernel(const T* x, const T* g, const float* coefficients, T* dx,
                                          std::int64_t channels, std::int64_t units) {
  DLBENCH_GRID_STRIDE(unit, units) {
    const std::int64_t at = unit * W, channel = at % channels;
    float v[W], d[W];
    load_unit<W>(x, at, v);
    load_unit<W>(g, at, d);
#pragma unroll
    for (int i = 0; i < W; ++i) {
      const std::int64_t c = channel + i;
      v[i] = fmaf(coefficients[c], d[i], fmaf(coefficients[channels + c], v[i], coefficients[2 * channels + c]));
    }
    store_unit<W>(dx, at, v);
  }
}

void batch_norm_apply_coefficients(DType dtype, std::int64_t channels, std::int64_t count, const void* x,
                                   const void* g, const float* coefficients, void* dx, cudaStream_t stream) {
  if (channels <= 0 || count <= 0) throw std::invalid_argument("batch norm kernels: an empty activation");
  with_float_type(dtype, [&](auto t) {
    using T = typename decltype(t)::type;
    constexpr int kPack = Pack<T>::kWidth;
    const std::int64_t values = channels * count;
    const auto* const in = static_cast<const T*>(x);
    const auto* const grad = static_cast<const T*>(g);
    auto* const out = static_cast<T*>(dx);
    // Named: a template's comma would split the macro's arguments.
    auto* const packs_kernel = &apply_coefficients_kernel<T, kPack>;
    auto* const values_kernel = &apply_coefficients_kernel<T, 1>;
    if (channels % kPack == 0 && vector_split(values, sizeof(T), {x, g, dx}).packs == values / kPack) {
      DLBENCH_LAUNCH(packs_kernel, values / kPack, stream, in, grad, coefficients, out, channels, values / kPack);
      return;
    }
    DLBENCH_LAUNCH(values_kernel, values, stream, in, grad, coefficients, out, channels, values);
  });
}

void deferred_batch_norm_forward(DType dtype, std::int64_t channels, std::int64_t count, const float* sums,
                                 const float* gamma, const float* beta, float epsilon, float momentum, float* mean,
                                 float* inverse_std, float* running_mean, float* running_var, void* scale_shift,
                                 cudaStream_t stream) {
  if (channels <= 0 || count <= 0) throw std::invalid_argument("batch norm kernels: an empty activation");
  with_float_type(dtype, [&](auto t) {
    using T = typename decltype(t)::type;
    DLBENCH_LAUNCH(sums_statistics_kernel<T>, channels, stream, channels, static_cast<double>(count), sums, gamma, beta,
                   epsilon, momentum, mean, inverse_std, running_mean, running_var, nullptr, static_cast<T*>(scale_shift));
  });
}

}  // namespace dlbench::worker::kernels
