// dlbench's own batch-norm kernels over NCHW and channels-last activations
// (DLBENCH_CUDA_BATCH_NORM=own), apart from the kernels: how a channel's reduction is split
// between blocks, which elements each thread reads, and the per-channel arithmetic. The CPU tests
// run these same functions over every thread of every block, so the split and the sums are
// checked without a GPU.
//
// Why own kernels: on an H200 (2026-11-29) fp32 ResNet-50's batch norms and ReLUs through cuDNN's
// NCHW calls took 12.6 ms of a 73.4 ms step, against PyTorch's 9.6, and cuDNN fuses neither the
// ReLU nor the residual add over NCHW. Fused here: forward reads x twice (statistics, then the
// normalisation) and writes y once, ReLU and residual add included; backward reads x and dy to
// sum, then again to write dx (and the residual's gradient in the first pass), never y. A ReLU
// tail's mask is found again from x (batch_norm_normalized); a residual's add and ReLU keep theirs
// (relu_mask_byte). In channels last, cuDNN's *Ex calls fuse both; amp's batch norms took 16.8 ms
// of a 40.3 ms ResNet-50 step on an H200 (2026-11-27, `--profile`, its events included). These
// passes move 51.5 GB a step at batch 256 (54.0 while the add and ReLU read y), 10.7 ms at the
// H200's 4.8 TB/s: a few ms at most to gain over cuDNN, the A/B the next GPU session times.
//
// Numerics: a block sums (x - shift) and (x - shift)², with `shift` the first value of its chunk,
// so that a channel whose mean is large against its spread does not cancel its variance away in
// fp32; the chunks' moments are then merged in fp64 (Chan et al.) by a warp a channel in a fixed
// order (lane_moments), so the result does not depend on scheduling.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

#include "host_device.hpp"

namespace dlbench::worker {

inline constexpr std::int64_t kBatchNormTargetBlocks = 1024;       // several waves on a 132-SM GPU
inline constexpr std::int64_t kBatchNormMinChunkElements = 4096;   // below this a block barely starts
inline constexpr std::int64_t kBatchNormMaxChunks = 1024;          // bounds the scratch and the merge

// An activation's sizes. NCHW: element (sample, channel, pixel) at (sample · channels + channel) ·
// pixels + pixel; channels last (BatchNormTiles): at (sample · pixels + pixel) · channels + channel.
struct BatchNormShape {
  std::int64_t samples = 0, channels = 0, pixels = 0;
  DLBENCH_HOST_DEVICE std::int64_t numel() const { return samples * channels * pixels; }
  // Values a channel's statistics are over.
  DLBENCH_HOST_DEVICE std::int64_t per_channel() const { return samples * pixels; }
};

// Both layouts' rule: `items` (NCHW's samples, channels last's rows) cut into contiguous chunks of
// items_per_chunk (the last may be shorter), enough for about kBatchNormTargetBlocks blocks with
// `across` blocks side by side (a stem's 64 channels alone would leave most of a GPU idle), none
// under kBatchNormMinChunkElements values (`item_values` an item in a block) unless a block's whole
// column is, none left empty.
struct BatchNormItemChunks {
  std::int64_t items_per_chunk = 1;
  std::int64_t chunks = 1;
  DLBENCH_HOST_DEVICE std::int64_t first_item(std::int64_t chunk) const { return chunk * items_per_chunk; }
  DLBENCH_HOST_DEVICE std::int64_t items_in(std::int64_t chunk, std::int64_t items) const {
    const std::int64_t left = items - first_item(chunk);
    return left < items_per_chunk ? left : items_per_chunk;
  }
};

inline BatchNormItemChunks batch_norm_chunk_split(std::int64_t items, std::int64_t across, std::int64_t item_values) {
  const std::int64_t wanted = (kBatchNormTargetBlocks + across - 1) / across;
  const std::int64_t most = std::max<std::int64_t>(1, items * item_values / kBatchNormMinChunkElements);
  const std::int64_t chunks = std::clamp<std::int64_t>(std::min({wanted, most, items}), 1, kBatchNormMaxChunks);
  const std::int64_t per_chunk = (items + chunks - 1) / chunks;
  return {per_chunk, (items + per_chunk - 1) / per_chunk};
}

// NCHW: a channel's values are cut into chunks of whole samples (the items), one block a
// (channel, chunk).
struct BatchNormChunks : BatchNormItemChunks {
  // Values each channel has in a chunk (the merge's counts).
  DLBENCH_HOST_DEVICE std::int64_t values_in(std::int64_t chunk, const BatchNormShape& s) const {
    return items_in(chunk, s.samples) * s.pixels;
  }
};

// NCHW: a block a (channel, chunk of samples).
inline BatchNormChunks batch_norm_chunks(const BatchNormShape& s) {
  if (s.samples <= 0 || s.channels <= 0 || s.pixels <= 0) return {};
  return {batch_norm_chunk_split(s.samples, s.channels, s.pixels)};
}

// Values a pass reads at once: 16-byte packs where each plane's pixels divide into them and every
// pointer is aligned (the caller checks those), otherwise 1.
inline int batch_norm_unit_width(std::int64_t pixels, int pack_width) { return pixels % pack_width == 0 ? pack_width : 1; }

// The order in which a pass's blocks and each block's threads take their units. The elementwise
// passes that follow a reduction over the same tensor (normalise after the moments, the input
// gradient after the sums) go back to front: the last block first, and in each block the units
// the reduction's block read last, while a GPU's L2 cache (50 MB on an H100 or H200) may still
// hold them. Front to back, a tensor larger than the cache would find none of it there.
enum class Traversal { front_to_back, back_to_front };

// Calls visit(index) for `thread` of `threads` taking indices thread, thread + threads, ... below
// `count`, in that order or its reverse.
template <Traversal kOrder, typename Visit>
DLBENCH_HOST_DEVICE inline void for_strided(std::uint32_t count, unsigned thread, unsigned threads, Visit&& visit) {
  if constexpr (kOrder == Traversal::front_to_back) {
    for (std::uint32_t i = thread; i < count; i += threads) visit(i);
  } else if (thread < count) {
    for (std::uint32_t i = thread + (count - 1 - thread) / threads * threads;; i -= threads) {
      visit(i);
      if (i < threads) break;  // i was `thread`, the first
    }
  }
}

// Calls visit(offset) for the first element of each unit of `width` values that thread `thread`
// of `threads` reads in block (channel, chunk): the chunk's samples' planes of that channel, in
// units, thread t taking units t, t + threads, ... (kOrder). Unit numbers are 32-bit: a chunk is
// one channel of at most kBatchNormMaxChunks-th of a batch.
template <Traversal kOrder = Traversal::front_to_back, typename Visit>
DLBENCH_HOST_DEVICE inline void for_chunk_units(const BatchNormShape& s, const BatchNormChunks& plan, std::int64_t channel,
                                                std::int64_t chunk, int width, unsigned thread, unsigned threads,
                                                Visit&& visit) {
  const std::int64_t first = plan.first_item(chunk);
  const auto per_plane = static_cast<std::uint32_t>(s.pixels / width);
  const auto units = static_cast<std::uint32_t>(plan.items_in(chunk, s.samples)) * per_plane;
  for_strided<kOrder>(units, thread, threads, [&](std::uint32_t u) {
    const std::uint32_t sample = u / per_plane;
    const std::uint32_t unit = u - sample * per_plane;
    visit(((first + sample) * s.channels + channel) * s.pixels + static_cast<std::int64_t>(unit) * width);
  });
}

// The add-and-ReLU tail's mask, which forward keeps for backward in place of y (the residual's sum
// is not in x, so x cannot give the mask again): a byte a unit of `width` values (at most 8), bit
// k set where the unit's k-th value of y was positive. A unit's first element is a multiple of
// its width in either layout (for_chunk_units, for_tile_rows), so each byte has one writer and
// needs no atomics. Units of 16-byte packs make it 1/16 of y's bytes; single values a byte each.
inline constexpr int kBatchNormMaskUnitMost = 8;
DLBENCH_HOST_DEVICE inline std::int64_t relu_mask_byte(std::int64_t at, int width) { return at / width; }
inline std::int64_t relu_mask_bytes(const BatchNormShape& s, int width) { return s.numel() / width; }

// The offset of a chunk's first value in a channel: its shift.
DLBENCH_HOST_DEVICE inline std::int64_t chunk_first_offset(const BatchNormShape& s, const BatchNormChunks& plan,
                                                           std::int64_t channel, std::int64_t chunk) {
  return (plan.first_item(chunk) * s.channels + channel) * s.pixels;
}

// Channels last: an activation is samples · pixels rows of `channels` values, element (row,
// channel) at row · channels + channel. A block takes a tile of kBatchNormTileUnits units of
// `width` channels side by side (16-byte packs where the channels divide into them and every
// pointer is aligned, otherwise single values) over a chunk of rows. Its threads stand
// kBatchNormTileUnits to a row, thread t at unit t % kBatchNormTileUnits of rows t /
// kBatchNormTileUnits, t / kBatchNormTileUnits + lanes, ...: a warp reads whole 128-byte row
// segments of packs, and a thread keeps its channels throughout, so it loads their per-channel
// values once and sums them in registers; the block then adds its lanes up per channel.
inline constexpr int kBatchNormTileUnits = 8;

// The items are rows.
struct BatchNormTiles : BatchNormItemChunks {
  std::int64_t tile_channels = 1;  // kBatchNormTileUnits · width
  std::int64_t tiles = 1;
  // Values each of a chunk's channels has there (the merge's counts).
  DLBENCH_HOST_DEVICE std::int64_t values_in(std::int64_t chunk, const BatchNormShape& s) const {
    return items_in(chunk, s.samples * s.pixels);
  }
};

// Values a channels-last pass reads at once: packs where the channels divide into them.
inline int batch_norm_tile_width(std::int64_t channels, int pack_width) {
  return channels % pack_width == 0 ? pack_width : 1;
}

// Tiles across the channels, and the rows cut into chunks by batch_norm_chunk_split's rule.
inline BatchNormTiles batch_norm_tiles(const BatchNormShape& s, int width) {
  BatchNormTiles plan;
  plan.tile_channels = static_cast<std::int64_t>(kBatchNormTileUnits) * (width > 0 ? width : 1);
  if (s.samples <= 0 || s.channels <= 0 || s.pixels <= 0) return plan;
  plan.tiles = (s.channels + plan.tile_channels - 1) / plan.tile_channels;
  static_cast<BatchNormItemChunks&>(plan) =
      batch_norm_chunk_split(s.samples * s.pixels, plan.tiles, std::min(plan.tile_channels, s.channels));
  return plan;
}

// The first channel of thread `thread`'s unit in tile `tile` (it reads `width` channels from there),
// or -1 where the tile's last units lie past the channels.
DLBENCH_HOST_DEVICE inline std::int64_t tile_unit_channel(const BatchNormShape& s, const BatchNormTiles& plan,
                                                          std::int64_t tile, int width, unsigned thread) {
  const auto unit = static_cast<std::int64_t>(thread % static_cast<unsigned>(kBatchNormTileUnits));
  const std::int64_t channel = tile * plan.tile_channels + unit * width;
  return channel < s.channels ? channel : -1;
}

// Calls visit(offset) for the first element of each unit thread `thread` of `threads` (a multiple of
// kBatchNormTileUnits) reads in block (tile, chunk): its channels' values in the chunk's rows, row
// by row (kOrder). Row numbers within a chunk are 32-bit.
template <Traversal kOrder = Traversal::front_to_back, typename Visit>
DLBENCH_HOST_DEVICE inline void for_tile_rows(const BatchNormShape& s, const BatchNormTiles& plan, std::int64_t tile,
                                              std::int64_t chunk, int width, unsigned thread, unsigned threads,
                                              Visit&& visit) {
  const std::int64_t channel = tile_unit_channel(s, plan, tile, width, thread);
  if (channel < 0) return;
  const unsigned lanes = threads / static_cast<unsigned>(kBatchNormTileUnits);
  const unsigned lane = thread / static_cast<unsigned>(kBatchNormTileUnits);
  const std::int64_t first = plan.first_item(chunk);
  const auto rows = static_cast<std::uint32_t>(plan.items_in(chunk, s.samples * s.pixels));
  for_strided<kOrder>(rows, lane, lanes,
                      [&](std::uint32_t r) { visit((first + static_cast<std::int64_t>(r)) * s.channels + channel); });
}

// The offset of a chunk's first value of `channel`: its shift.
DLBENCH_HOST_DEVICE inline std::int64_t tile_chunk_first_offset(const BatchNormShape& s, const BatchNormTiles& plan,
                                                                std::int64_t channel, std::int64_t chunk) {
  return plan.first_item(chunk) * s.channels + channel;
}

// count values' mean and sum of squared deviations (M2).
struct Moments {
  double count = 0.0, mean = 0.0, m2 = 0.0;
};

// From sums of (x - shift) and (x - shift)² over count values.
DLBENCH_HOST_DEVICE inline Moments moments_from_shifted_sums(double count, float shift, float sum, float sum_of_squares) {
  if (count <= 0) return {};
  const double s = sum, mean_offset = s / count;
  const double m2 = static_cast<double>(sum_of_squares) - s * mean_offset;
  return {count, static_cast<double>(shift) + mean_offset, m2 > 0 ? m2 : 0.0};
}

// The moments of two sets together (Chan, Golub and LeVeque's pairwise update).
DLBENCH_HOST_DEVICE inline Moments merge(const Moments& a, const Moments& b) {
  if (a.count == 0) return b;
  if (b.count == 0) return a;
  const double count = a.count + b.count, delta = b.mean - a.mean;
  return {count, a.mean + delta * (b.count / count), a.m2 + b.m2 + delta * delta * (a.count * b.count / count)};
}

// The chunks' partial sums, `values` floats a (chunk, channel): forward's (shift, Σ(x − shift),
// Σ(x − shift)²), backward's (Σg, Σg · (x − mean)).
DLBENCH_HOST_DEVICE inline std::int64_t partial_offset(const BatchNormShape& s, std::int64_t chunk, std::int64_t channel,
                                                       int values) {
  return (chunk * s.channels + channel) * values;
}

// A channel's chunks are merged by a warp of kBatchNormMergeLanes lanes: lane l takes chunks l,
// l + 32, ... in chunk order, then the lanes meet in a fixed tree, pairs 16 lanes apart, then 8,
// ..., then 1 (the lower lane's value first, so both lanes of a pair get the same bits). The result
// does not depend on which block finished first or how the lanes are scheduled. Why a warp: with
// one thread a channel, a tile of 64 channels cut into 1,024 chunks (the stem, layer1's 3x3s in
// channels last) was 1,024 dependent fp64 merges in a row, each a division and a load, while the
// rest of the GPU waited; over ResNet-50's 53 batch norms about 17,000 in a row each pass. A warp
// makes that 32 and 5.
inline constexpr int kBatchNormMergeLanes = 32;

// Lane `lane`'s share of a channel's moments: its chunks merged in chunk order.
// Plan: BatchNormChunks (NCHW) or BatchNormTiles (channels last).
template <typename Plan>
DLBENCH_HOST_DEVICE inline Moments lane_moments(const float* partial, const BatchNormShape& s, const Plan& plan,
                                                std::int64_t channel, int lane) {
  Moments m;
  for (std::int64_t chunk = lane; chunk < plan.chunks; chunk += kBatchNormMergeLanes) {
    const float* p = partial + partial_offset(s, chunk, channel, 3);
    m = merge(m, moments_from_shifted_sums(static_cast<double>(plan.values_in(chunk, s)), p[0], p[1], p[2]));
  }
  return m;
}

// One step of the lanes' tree: `lane` holds `mine`, its partner lane ^ offset `theirs`.
DLBENCH_HOST_DEVICE inline Moments merge_lanes(const Moments& mine, const Moments& theirs, unsigned lane, int offset) {
  return (lane & static_cast<unsigned>(offset)) != 0 ? merge(theirs, mine) : merge(mine, theirs);
}

// A channel's Σg and Σg · (x − mean) in fp64.
struct GradientSums {
  double sum = 0.0, centered = 0.0;
};

// Lane `lane`'s share of a channel's gradient sums: its chunks added in chunk order.
template <typename Plan>
DLBENCH_HOST_DEVICE inline GradientSums lane_gradient_sums(const float* partial, const BatchNormShape& s,
                                                           const Plan& plan, std::int64_t channel, int lane) {
  GradientSums g;
  for (std::int64_t chunk = lane; chunk < plan.chunks; chunk += kBatchNormMergeLanes) {
    const float* p = partial + partial_offset(s, chunk, channel, 2);
    g.sum += static_cast<double>(p[0]);
    g.centered += static_cast<double>(p[1]);
  }
  return g;
}

// The warp's tree on the host, for the tests: each lane's share, then the pairs 16 lanes apart,
// ..., 1, as the kernels' shuffles take them (a sum's pair adds mine + theirs; addition commutes,
// so both lanes agree). Returns lane 0's.
template <typename Value, typename Share, typename Meet>
inline Value merged_by_lanes(Share&& share, Meet&& meet) {
  Value lanes[kBatchNormMergeLanes];
  for (int l = 0; l < kBatchNormMergeLanes; ++l) lanes[l] = share(l);
  for (int offset = kBatchNormMergeLanes / 2; offset > 0; offset /= 2) {
    Value next[kBatchNormMergeLanes];
    for (int l = 0; l < kBatchNormMergeLanes; ++l) {
      next[l] = meet(lanes[l], lanes[l ^ offset], static_cast<unsigned>(l), offset);
    }
    for (int l = 0; l < kBatchNormMergeLanes; ++l) lanes[l] = next[l];
  }
  return lanes[0];
}

template <typename Plan>
inline Moments channel_moments(const float* partial, const BatchNormShape& s, const Plan& plan, std::int64_t channel) {
  return merged_by_lanes<Moments>([&](int lane) { return lane_moments(partial, s, plan, channel, lane); },
                                  merge_lanes);
}

template <typename Plan>
inline GradientSums channel_gradient_sums(const float* partial, const BatchNormShape& s, const Plan& plan,
                                          std::int64_t channel) {
  return merged_by_lanes<GradientSums>(
      [&](int lane) { return lane_gradient_sums(partial, s, plan, channel, lane); },
      [](const GradientSums& mine, const GradientSums& theirs, unsigned, int) {
        return GradientSums{mine.sum + theirs.sum, mine.centered + theirs.centered};
      });
}

// What a batch norm hands its tail, (x − mean) · scale + β, rounded once after the subtraction (an
// explicit fma: forward, and the backward that finds a fused ReLU's mask again from x, get the
// same bits whatever the compiler would contract).
DLBENCH_HOST_DEVICE inline float batch_norm_normalized(float x, float mean, float scale, float beta) {
  return std::fma(x - mean, scale, beta);
}

// γ · inverse std from the stored fp32 inverse std, one fp32 product, so that backward makes the
// same scale again from what forward kept.
DLBENCH_HOST_DEVICE inline float batch_norm_scale(float gamma, float inverse_std) { return gamma * inverse_std; }

// A channel's batch statistics and what forward's normalising pass multiplies by: y = (x − mean) ·
// scale + β, scale = γ / sqrt(var + ε) (x − mean first: x · scale + (β − mean · scale) would lose a
// channel far from zero to cancellation). The running variance takes the unbiased variance
// (PyTorch's rule; one value a channel: the biased one, as there is no other).
struct BatchNormForwardChannel {
  float mean, inverse_std, scale, running_mean, running_var;
};

DLBENCH_HOST_DEVICE inline BatchNormForwardChannel batch_norm_forward_channel(const Moments& m, float gamma,
                                                                              float epsilon, float momentum,
                                                                              float running_mean, float running_var) {
  const double variance = m.count > 0 ? m.m2 / m.count : 0.0;
  const double unbiased = m.count > 1 ? m.m2 / (m.count - 1) : variance;
  const double inverse_std = 1.0 / std::sqrt(variance + static_cast<double>(epsilon));
  const double rate = static_cast<double>(momentum);
  return {static_cast<float>(m.mean),
          static_cast<float>(inverse_std),
          batch_norm_scale(gamma, static_cast<float>(inverse_std)),
          static_cast<float>((1.0 - rate) * static_cast<double>(running_mean) + rate * m.mean),
          static_cast<float>((1.0 - rate) * static_cast<double>(running_var) + rate * unbiased)};
}

// A deferred batch norm's channel (BatchNormConfig::deferred): the statistics from the sums Σx and
// Σx² the convolution before wrote as it wrote x (fp32), and what the convolution after applies as
// it reads x, relu(x · scale + shift) with shift = β − mean · scale. (The cancellation
// batch_norm_forward_channel avoids is the fused engines' own: they take a scale and a shift.)
struct DeferredBatchNormChannel {
  BatchNormForwardChannel statistics;
  float shift;
};

DLBENCH_HOST_DEVICE inline DeferredBatchNormChannel deferred_batch_norm_channel(double count, float sum,
                                                                                float sum_of_squares, float gamma,
                                                                                float beta, float epsilon,
                                                                                float momentum, float running_mean,
                                                                                float running_var) {
  const BatchNormForwardChannel f = batch_norm_forward_channel(moments_from_shifted_sums(count, 0.0f, sum, sum_of_squares),
                                                               gamma, epsilon, momentum, running_mean, running_var);
  return {f, static_cast<float>(static_cast<double>(beta) - static_cast<double>(f.mean) * static_cast<double>(f.scale))};
}

// Backward per channel, from Σg and Σg·(x − mean) over its count values (g: dy, masked by the
// fused ReLU): dβ = Σg, dγ = Σg·x̂ and dx = a·g + b·(x − mean) + e, where
// dx = γ/σ · (g − Σg/count − x̂ · Σg·x̂/count), x̂ = (x − mean)/σ.
struct BatchNormBackwardChannel {
  float dgamma, dbeta, a, b, e;
};

DLBENCH_HOST_DEVICE inline BatchNormBackwardChannel batch_norm_backward_channel(double count, double sum_g,
                                                                                double sum_g_centered, float gamma,
                                                                                float inverse_std) {
  const double sigma_inverse = static_cast<double>(inverse_std);
  const double dgamma = sum_g_centered * sigma_inverse;
  const double a = static_cast<double>(gamma) * sigma_inverse;
  return {static_cast<float>(dgamma), static_cast<float>(sum_g), static_cast<float>(a),
          static_cast<float>(-a * sigma_inverse * dgamma / count), static_cast<float>(-a * sum_g / count)};
}

}  // namespace dlbench::worker
