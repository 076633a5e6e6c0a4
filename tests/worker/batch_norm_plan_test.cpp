// dlbench's batch-norm kernels (DLBENCH_CUDA_BATCH_NORM=own) without a GPU, NCHW and channels last:
// how they split a channel between blocks and threads, and their arithmetic, run here over every
// block and thread exactly as cuda/batch_norm_kernels.cu runs it (the same functions from
// batch_norm_plan.hpp; only NCHW's block sum goes in thread order here and in a tree there),
// against batch norm in fp64.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <functional>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "batch_norm_plan.hpp"
#include "batch_norm_reference.hpp"

namespace dlbench::worker {
namespace {

using reference_batch_norm::forward_statistics;
using reference_batch_norm::ForwardStatistics;
using reference_batch_norm::normal_values;
using reference_batch_norm::reference;
using reference_batch_norm::Reference;
using reference_batch_norm::relative_error;

constexpr unsigned kThreads = 256;  // the kernels' block (kernel_launch.cuh)

TEST(BatchNormPlan, ChunksSplitSmallChannelCountsAndCoverEverySample) {
  // ResNet-50 at batch 64: the stem's 64 channels of 112x112 get 16 chunks (1,024 blocks), the
  // last stage's 2,048 channels of 7x7 one each, already 2,048 blocks.
  const BatchNormChunks stem = batch_norm_chunks({64, 64, 112 * 112});
  EXPECT_EQ(stem.chunks, 16);
  EXPECT_EQ(stem.items_per_chunk, 4);
  const BatchNormChunks last = batch_norm_chunks({64, 2048, 49});
  EXPECT_EQ(last.chunks, 1);
  EXPECT_EQ(last.items_per_chunk, 64);
  // No chunk under kBatchNormMinChunkElements values unless the whole channel is: 64 channels of
  // 14x14 get 3 chunks (12,544 values each), not the 16 that would make 1,024 blocks; of 7x7, one.
  EXPECT_EQ(batch_norm_chunks({64, 64, 196}).chunks, 3);
  EXPECT_EQ(batch_norm_chunks({64, 64, 49}).chunks, 1);
  EXPECT_EQ(batch_norm_chunks({2, 3, 1}).chunks, 1);
  for (const BatchNormShape s : {BatchNormShape{1, 1, 1}, BatchNormShape{3, 16, 36}, BatchNormShape{256, 64, 3136},
                                 BatchNormShape{7, 5, 4096}, BatchNormShape{65, 8, 10000}, BatchNormShape{5000, 1, 4096}}) {
    SCOPED_TRACE(::testing::Message() << s.samples << "x" << s.channels << "x" << s.pixels);
    const BatchNormChunks plan = batch_norm_chunks(s);
    EXPECT_GE(plan.chunks, 1);
    EXPECT_LE(plan.chunks, kBatchNormMaxChunks);
    EXPECT_GE(plan.chunks * plan.items_per_chunk, s.samples) << "every sample in a chunk";
    EXPECT_GT(plan.items_in(plan.chunks - 1, s.samples), 0) << "no chunk left empty";
  }
}

// Every element is read exactly once, by a block of its own channel and of the chunk its sample
// is in.
TEST(BatchNormPlan, EveryElementIsReadOnceByABlockOfItsChannel) {
  for (const BatchNormShape s : {BatchNormShape{5, 3, 49}, BatchNormShape{64, 4, 36}, BatchNormShape{3, 2, 1},
                                 BatchNormShape{70, 2, 64}, BatchNormShape{9, 1, 8 * 8 * 3}}) {
    for (const int pack : {1, 4, 8}) {
      const int width = batch_norm_unit_width(s.pixels, pack);
      SCOPED_TRACE(::testing::Message() << s.samples << "x" << s.channels << "x" << s.pixels << " width " << width);
      const BatchNormChunks plan = batch_norm_chunks(s);
      std::vector<int> reads(static_cast<std::size_t>(s.numel()), 0);
      std::vector<int> mask_writes(static_cast<std::size_t>(relu_mask_bytes(s, width)), 0);
      for (std::int64_t channel = 0; channel < s.channels; ++channel) {
        for (std::int64_t chunk = 0; chunk < plan.chunks; ++chunk) {
          for (unsigned thread = 0; thread < kThreads; ++thread) {
            for_chunk_units(s, plan, channel, chunk, width, thread, kThreads, [&](std::int64_t at) {
              ASSERT_EQ(at % width, 0);
              const std::int64_t sample = at / (s.channels * s.pixels);
              EXPECT_GE(sample, plan.first_item(chunk));
              EXPECT_LT(sample, plan.first_item(chunk) + plan.items_in(chunk, s.samples));
              EXPECT_EQ(at / s.pixels % s.channels, channel);
              for (int k = 0; k < width; ++k) ++reads[static_cast<std::size_t>(at + k)];
              ++mask_writes.at(static_cast<std::size_t>(relu_mask_byte(at, width)));
            });
          }
        }
      }
      for (std::size_t i = 0; i < reads.size(); ++i) ASSERT_EQ(reads[i], 1) << "element " << i;
      // The add-and-ReLU mask: each byte written by one thread's one unit, none left out.
      for (std::size_t i = 0; i < mask_writes.size(); ++i) ASSERT_EQ(mask_writes[i], 1) << "mask byte " << i;
    }
  }
}

// Channels last, ResNet-50 amp at batch 256 (units of 8 halves, tiles of 64 channels): a bottleneck's
// last batch norm in layer1 (256 channels of 56x56) gets 4 tiles of 256 chunks, 1,024 blocks of
// 3,136 rows; layer4's 2,048 channels of 7x7 32 tiles of 32 chunks; the stem's 64 channels of
// 112x112 one tile of the most chunks. No chunk under kBatchNormMinChunkElements values unless the
// tile's whole column is, none left empty.
TEST(BatchNormPlan, TilesCrossTheChannelsAndChunksSplitTheRows) {
  const BatchNormTiles layer1 = batch_norm_tiles({256, 256, 3136}, 8);
  EXPECT_EQ(layer1.tile_channels, 64);
  EXPECT_EQ(layer1.tiles, 4);
  EXPECT_EQ(layer1.chunks, 256);
  EXPECT_EQ(layer1.items_per_chunk, 3136);
  const BatchNormTiles layer4 = batch_norm_tiles({256, 2048, 49}, 8);
  EXPECT_EQ(layer4.tiles, 32);
  EXPECT_EQ(layer4.chunks, 32);
  EXPECT_EQ(layer4.items_per_chunk, 392);
  const BatchNormTiles stem = batch_norm_tiles({256, 64, 12544}, 8);
  EXPECT_EQ(stem.tiles, 1);
  EXPECT_EQ(stem.chunks, kBatchNormMaxChunks);
  // fp32 units of 4 make tiles of 32 channels; 5 channels take single values, a tile of 8.
  EXPECT_EQ(batch_norm_tiles({64, 256, 3136}, 4).tiles, 8);
  EXPECT_EQ(batch_norm_tile_width(5, 4), 1);
  EXPECT_EQ(batch_norm_tiles({2, 5, 9}, 1).tiles, 1);
  EXPECT_EQ(batch_norm_tiles({2, 5, 9}, 1).chunks, 1) << "18 rows of 5 channels are one chunk's worth";
  for (const BatchNormShape s : {BatchNormShape{1, 1, 1}, BatchNormShape{3, 16, 36}, BatchNormShape{256, 64, 3136},
                                 BatchNormShape{7, 72, 4096}, BatchNormShape{65, 8, 10000},
                                 BatchNormShape{5000, 1, 4096}}) {
    for (const int width : {1, 4, 8}) {
      SCOPED_TRACE(::testing::Message() << s.samples << "x" << s.channels << "x" << s.pixels << " width " << width);
      const BatchNormTiles plan = batch_norm_tiles(s, width);
      const std::int64_t rows = s.samples * s.pixels;
      EXPECT_GE(plan.tiles * plan.tile_channels, s.channels) << "every channel in a tile";
      EXPECT_LT((plan.tiles - 1) * plan.tile_channels, s.channels) << "no tile left empty";
      EXPECT_GE(plan.chunks, 1);
      EXPECT_LE(plan.chunks, kBatchNormMaxChunks);
      EXPECT_GE(plan.chunks * plan.items_per_chunk, rows) << "every row in a chunk";
      EXPECT_GT(plan.items_in(plan.chunks - 1, rows), 0) << "no chunk left empty";
      if (plan.chunks > 1) {
        EXPECT_GE(plan.items_per_chunk * std::min(plan.tile_channels, s.channels), kBatchNormMinChunkElements);
      }
    }
  }
}

// The passes after a reduction go back to front (Traversal::back_to_front): each thread takes the
// units it takes front to back, every one once, in the reverse order, so that what the reduction's
// thread read last comes first; in both layouts, for threads with many units, one, or none.
TEST(BatchNormPlan, BackToFrontTakesEachThreadsUnitsInReverse) {
  const auto reversed = [](std::vector<std::int64_t> v) {
    std::reverse(v.begin(), v.end());
    return v;
  };
  for (const unsigned count : {0u, 1u, 5u, 256u, 257u, 1000u}) {
    for (const unsigned thread : {0u, 1u, 4u, 255u}) {
      std::vector<std::int64_t> forwards, backwards;
      for_strided<Traversal::front_to_back>(count, thread, kThreads, [&](std::uint32_t i) { forwards.push_back(i); });
      for_strided<Traversal::back_to_front>(count, thread, kThreads, [&](std::uint32_t i) { backwards.push_back(i); });
      EXPECT_EQ(backwards, reversed(forwards)) << count << " indices, thread " << thread;
      EXPECT_EQ(forwards.size(), count > thread ? (count - 1 - thread) / kThreads + 1 : 0u);
    }
  }
  for (const BatchNormShape s : {BatchNormShape{5, 3, 49}, BatchNormShape{64, 8, 36}, BatchNormShape{70, 2, 64}}) {
    SCOPED_TRACE(::testing::Message() << s.samples << "x" << s.channels << "x" << s.pixels);
    const BatchNormChunks chunks = batch_norm_chunks(s);
    const BatchNormTiles tiles = batch_norm_tiles(s, 1);
    for (const unsigned thread : {0u, 7u, 8u, 200u}) {
      std::vector<std::int64_t> forwards, backwards;
      const auto into = [](std::vector<std::int64_t>& v) { return [&v](std::int64_t at) { v.push_back(at); }; };
      for_chunk_units(s, chunks, s.channels - 1, chunks.chunks - 1, 1, thread, kThreads, into(forwards));
      for_chunk_units<Traversal::back_to_front>(s, chunks, s.channels - 1, chunks.chunks - 1, 1, thread, kThreads,
                                                into(backwards));
      EXPECT_FALSE(forwards.empty());
      EXPECT_EQ(backwards, reversed(forwards)) << "nchw, thread " << thread;
      forwards.clear();
      backwards.clear();
      for_tile_rows(s, tiles, 0, tiles.chunks - 1, 1, thread, kThreads, into(forwards));
      for_tile_rows<Traversal::back_to_front>(s, tiles, 0, tiles.chunks - 1, 1, thread, kThreads, into(backwards));
      EXPECT_EQ(backwards, reversed(forwards)) << "channels last, thread " << thread;
    }
  }
}

// Channels last: every element is read exactly once, by a block of its tile and chunk, and by a
// thread whose unit holds its channel, so that the thread's per-channel values (loaded once) are
// the element's; units start where packs would (a multiple of the width).
TEST(BatchNormPlan, EveryElementIsReadOnceByATileThreadHoldingItsChannel) {
  for (const BatchNormShape s : {BatchNormShape{5, 3, 49}, BatchNormShape{64, 8, 36}, BatchNormShape{3, 2, 1},
                                 BatchNormShape{2, 72, 25}, BatchNormShape{9, 136, 16}, BatchNormShape{40, 16, 784}}) {
    for (const int pack : {1, 4, 8}) {
      const int width = batch_norm_tile_width(s.channels, pack);
      SCOPED_TRACE(::testing::Message() << s.samples << "x" << s.channels << "x" << s.pixels << " width " << width);
      const BatchNormTiles plan = batch_norm_tiles(s, width);
      std::vector<int> reads(static_cast<std::size_t>(s.numel()), 0);
      std::vector<int> mask_writes(static_cast<std::size_t>(relu_mask_bytes(s, width)), 0);
      for (std::int64_t tile = 0; tile < plan.tiles; ++tile) {
        for (std::int64_t chunk = 0; chunk < plan.chunks; ++chunk) {
          for (unsigned thread = 0; thread < kThreads; ++thread) {
            const std::int64_t first = tile_unit_channel(s, plan, tile, width, thread);
            for_tile_rows(s, plan, tile, chunk, width, thread, kThreads, [&](std::int64_t at) {
              ASSERT_GE(first, 0) << "a thread past the channels reads nothing";
              ASSERT_EQ(at % width, 0);
              EXPECT_EQ(at % s.channels, first) << "the thread's channels";
              EXPECT_GE(first, tile * plan.tile_channels);
              EXPECT_LE(first + width, std::min(s.channels, (tile + 1) * plan.tile_channels));
              const std::int64_t row = at / s.channels;
              EXPECT_GE(row, plan.first_item(chunk));
              EXPECT_LT(row, plan.first_item(chunk) + plan.items_in(chunk, s.samples * s.pixels));
              for (int k = 0; k < width; ++k) ++reads[static_cast<std::size_t>(at + k)];
              ++mask_writes.at(static_cast<std::size_t>(relu_mask_byte(at, width)));
            });
          }
        }
      }
      for (std::size_t i = 0; i < reads.size(); ++i) ASSERT_EQ(reads[i], 1) << "element " << i;
      // The add-and-ReLU mask: each byte written by one thread's one unit, none left out.
      for (std::size_t i = 0; i < mask_writes.size(); ++i) ASSERT_EQ(mask_writes[i], 1) << "mask byte " << i;
      // A chunk's shift for a channel is that channel's value in the chunk's first row.
      EXPECT_EQ(tile_chunk_first_offset(s, plan, s.channels - 1, plan.chunks - 1),
                plan.first_item(plan.chunks - 1) * s.channels + s.channels - 1);
    }
  }
}

// The kernels' passes on the host: fp32 sums a thread, a block's threads added up, the chunks
// merged in fp64 per channel, then the elementwise passes. `tail` 0: none, 1: ReLU, 2: add and
// ReLU. NCHW: a block a (channel, chunk) (for_chunk_units); channels last: a block a (tile, chunk)
// whose threads each keep `width` channels (for_tile_rows), their sums added per channel in thread
// order, which for one channel is lane order, as the kernels' tile_totals adds them.
struct EmulatedBatchNorm {
  BatchNormShape s;
  int width = 4;
  int tail = 0;
  bool channels_last = false;
  float epsilon = 1e-5f, momentum = 0.1f;
  std::vector<float> mean, inverse_std, running_mean, running_var;
  std::vector<std::uint8_t> relu_mask;  // the add-and-ReLU tail's, forward's for backward

  std::int64_t chunks() const {
    return channels_last ? batch_norm_tiles(s, width).chunks : batch_norm_chunks(s).chunks;
  }
  std::size_t channel_at(std::int64_t at) const {
    return static_cast<std::size_t>(channels_last ? at % s.channels : at / s.pixels % s.channels);
  }

  // Each block's `values` per-channel sums into `partial` at (chunk, channel): sum(at, k, channel,
  // chunk, out) adds element at + k's terms to out[0..values), `channel` that element's (the
  // thread's k-th in channels last, the block's in NCHW). Where given, `lead` puts a first value
  // (the shift) before the sums: lead(channel, chunk).
  template <typename Sum>
  std::vector<float> block_sums(int values, Sum&& sum,
                                const std::function<float(std::int64_t, std::int64_t)>& lead = {}) const {
    const int stride = values + (lead ? 1 : 0);
    std::vector<float> partial(static_cast<std::size_t>(stride * s.channels * chunks()), 0.0f);
    const auto write = [&](std::int64_t chunk, std::int64_t channel, const std::vector<float>& totals) {
      float* out = &partial[static_cast<std::size_t>(partial_offset(s, chunk, channel, stride))];
      if (lead) *out++ = lead(channel, chunk);
      for (int j = 0; j < values; ++j) out[j] = totals[static_cast<std::size_t>(j)];
    };
    if (!channels_last) {
      const BatchNormChunks plan = batch_norm_chunks(s);
      for (std::int64_t channel = 0; channel < s.channels; ++channel) {
        for (std::int64_t chunk = 0; chunk < plan.chunks; ++chunk) {
          std::vector<float> block(static_cast<std::size_t>(values), 0.0f);
          for (unsigned thread = 0; thread < kThreads; ++thread) {
            std::vector<float> mine(block.size(), 0.0f);
            for_chunk_units(s, plan, channel, chunk, width, thread, kThreads, [&](std::int64_t at) {
              for (int k = 0; k < width; ++k) sum(at, k, channel, chunk, mine.data());
            });
            for (std::size_t j = 0; j < block.size(); ++j) block[j] += mine[j];
          }
          write(chunk, channel, block);
        }
      }
      return partial;
    }
    const BatchNormTiles plan = batch_norm_tiles(s, width);
    for (std::int64_t tile = 0; tile < plan.tiles; ++tile) {
      for (std::int64_t chunk = 0; chunk < plan.chunks; ++chunk) {
        std::vector<std::vector<float>> block(static_cast<std::size_t>(plan.tile_channels),
                                              std::vector<float>(static_cast<std::size_t>(values), 0.0f));
        for (unsigned thread = 0; thread < kThreads; ++thread) {
          const std::int64_t first = tile_unit_channel(s, plan, tile, width, thread);
          if (first < 0) continue;
          std::vector<std::vector<float>> mine(static_cast<std::size_t>(width),
                                               std::vector<float>(static_cast<std::size_t>(values), 0.0f));
          for_tile_rows(s, plan, tile, chunk, width, thread, kThreads, [&](std::int64_t at) {
            for (int k = 0; k < width; ++k) sum(at, k, first + k, chunk, mine[static_cast<std::size_t>(k)].data());
          });
          for (int k = 0; k < width; ++k) {
            auto& column = block[static_cast<std::size_t>(first - tile * plan.tile_channels + k)];
            for (std::size_t j = 0; j < column.size(); ++j) column[j] += mine[static_cast<std::size_t>(k)][j];
          }
        }
        for (std::int64_t c = 0; c < plan.tile_channels && tile * plan.tile_channels + c < s.channels; ++c) {
          write(chunk, tile * plan.tile_channels + c, block[static_cast<std::size_t>(c)]);
        }
      }
    }
    return partial;
  }

  template <typename F>
  auto with_plan(F&& f) const {
    return channels_last ? f(batch_norm_tiles(s, width)) : f(batch_norm_chunks(s));
  }

  std::vector<float> forward(const std::vector<float>& x, const std::vector<float>& z, const std::vector<float>& gamma,
                             const std::vector<float>& beta) {
    const BatchNormTiles tiles = batch_norm_tiles(s, width);
    const BatchNormChunks planes = batch_norm_chunks(s);
    const auto shift_of = [&](std::int64_t channel, std::int64_t chunk) {
      const std::int64_t at = channels_last ? tile_chunk_first_offset(s, tiles, channel, chunk)
                                            : chunk_first_offset(s, planes, channel, chunk);
      return x[static_cast<std::size_t>(at)];
    };
    const std::vector<float> partial = block_sums(
        2,
        [&](std::int64_t at, int k, std::int64_t channel, std::int64_t chunk, float* out) {
          const float d = x[static_cast<std::size_t>(at + k)] - shift_of(channel, chunk);
          out[0] += d;
          out[1] += d * d;
        },
        shift_of);
    std::vector<float> scale(static_cast<std::size_t>(s.channels));
    mean.resize(scale.size());
    inverse_std.resize(scale.size());
    for (std::int64_t c = 0; c < s.channels; ++c) {
      const Moments m = with_plan([&](const auto& plan) { return channel_moments(partial.data(), s, plan, c); });
      const auto i = static_cast<std::size_t>(c);
      const BatchNormForwardChannel f =
          batch_norm_forward_channel(m, gamma[i], epsilon, momentum, running_mean[i], running_var[i]);
      mean[i] = f.mean;
      inverse_std[i] = f.inverse_std;
      running_mean[i] = f.running_mean;
      running_var[i] = f.running_var;
      scale[i] = f.scale;
    }
    std::vector<float> y(x.size());
    relu_mask.assign(tail == 2 ? static_cast<std::size_t>(relu_mask_bytes(s, width)) : 0, 0);
    for (std::int64_t at = 0; at < s.numel(); ++at) {
      const std::size_t c = channel_at(at);
      float v = batch_norm_normalized(x[static_cast<std::size_t>(at)], mean[c], scale[c], beta[c]);
      if (tail == 2) v += z[static_cast<std::size_t>(at)];
      y[static_cast<std::size_t>(at)] = tail > 0 ? std::fmax(v, 0.0f) : v;
      // A unit starts at a multiple of its width: element at is its bit at % width.
      if (tail == 2 && v > 0.0f) {
        std::uint8_t& byte = relu_mask[static_cast<std::size_t>(relu_mask_byte(at, width))];
        byte = static_cast<std::uint8_t>(byte | 1u << (at % width));
      }
    }
    return y;
  }

  // dx, and dz (add and ReLU) and dγ, dβ through the out-parameters. The ReLU tail's mask comes
  // from x again, as the kernels find it; add and ReLU's from forward's mask bytes. No y.
  std::vector<float> backward(const std::vector<float>& x, const std::vector<float>& dy,
                              const std::vector<float>& gamma, const std::vector<float>& beta, std::vector<float>& dz,
                              std::vector<float>& dgamma, std::vector<float>& dbeta) const {
    const auto mask_bit = [&](std::int64_t at) {
      const unsigned byte = relu_mask[static_cast<std::size_t>(relu_mask_byte(at, width))];
      return (byte >> (at % width) & 1u) != 0;
    };
    const auto gradient = [&](std::int64_t at) {
      const auto i = static_cast<std::size_t>(at);
      if (tail == 0) return dy[i];  // no ReLU, and no mask bytes to read
      const std::size_t c = channel_at(at);
      const bool passed = tail == 1 ? batch_norm_normalized(x[i], mean[c], batch_norm_scale(gamma[c], inverse_std[c]),
                                                            beta[c]) > 0.0f
                                    : mask_bit(at);
      return passed ? dy[i] : 0.0f;
    };
    dz.assign(x.size(), 0.0f);
    const std::vector<float> partial = block_sums(
        2,
        [&](std::int64_t at, int k, std::int64_t channel, std::int64_t, float* out) {
          const float g = gradient(at + k);
          if (tail == 2) dz[static_cast<std::size_t>(at + k)] = g;
          out[0] += g;
          out[1] += g * (x[static_cast<std::size_t>(at + k)] - mean[static_cast<std::size_t>(channel)]);
        });
    std::vector<BatchNormBackwardChannel> coefficients;
    dgamma.resize(static_cast<std::size_t>(s.channels));
    dbeta.resize(dgamma.size());
    for (std::int64_t c = 0; c < s.channels; ++c) {
      const GradientSums g =
          with_plan([&](const auto& plan) { return channel_gradient_sums(partial.data(), s, plan, c); });
      const auto i = static_cast<std::size_t>(c);
      coefficients.push_back(
          batch_norm_backward_channel(static_cast<double>(s.per_channel()), g.sum, g.centered, gamma[i], inverse_std[i]));
      dgamma[i] = coefficients.back().dgamma;
      dbeta[i] = coefficients.back().dbeta;
    }
    std::vector<float> dx(x.size());
    for (std::int64_t at = 0; at < s.numel(); ++at) {
      const std::size_t c = channel_at(at);
      const BatchNormBackwardChannel& k = coefficients[c];
      const auto i = static_cast<std::size_t>(at);
      const float g = tail == 2 ? dz[i] : gradient(at);
      dx[i] = k.a * g + k.b * (x[i] - mean[c]) + k.e;
    }
    return dx;
  }
};

// Forward and backward with each tail, over shapes that take packs and shapes that do not, one
// with several chunks a channel: the kernels' split and formulas give batch norm to fp32's
// rounding, and the running statistics follow PyTorch's rule (unbiased variance).
TEST(BatchNormPlan, TheKernelsArithmeticIsBatchNormForEveryTail) {
  for (const BatchNormShape s : {BatchNormShape{4, 24, 36}, BatchNormShape{3, 8, 49}, BatchNormShape{32, 2, 784},
                                 BatchNormShape{3, 5, 1}, BatchNormShape{2, 72, 25}, BatchNormShape{16, 16, 784}}) {
    for (const bool channels_last : {false, true}) {
      for (const int tail : {0, 1, 2}) {
        SCOPED_TRACE(::testing::Message() << s.samples << "x" << s.channels << "x" << s.pixels << " tail " << tail
                                          << (channels_last ? " channels last" : " nchw"));
        const auto n = static_cast<std::size_t>(s.numel()), channels = static_cast<std::size_t>(s.channels);
        const std::vector<float> x = normal_values(n, 1, 0.5, 2.0), z = normal_values(n, 2, 0.0, 1.0),
                                 dy = normal_values(n, 3, 0.0, 1.0), gamma = normal_values(channels, 4, 1.0, 0.3),
                                 beta = normal_values(channels, 5, 0.0, 0.3);
        const int width = channels_last ? batch_norm_tile_width(s.channels, 4) : batch_norm_unit_width(s.pixels, 4);
        EmulatedBatchNorm bn{s, width, tail, channels_last, 1e-5f, 0.1f, {}, {}, {}, {}, {}};
        bn.running_mean.assign(channels, 0.25f);
        bn.running_var.assign(channels, 2.0f);
        const std::vector<float> y = bn.forward(x, z, gamma, beta);
        std::vector<float> dz, dgamma, dbeta;
        const std::vector<float> dx = bn.backward(x, dy, gamma, beta, dz, dgamma, dbeta);
        const Reference r = reference(s, channels_last, tail, bn.epsilon, x, z, gamma, beta, dy);
        EXPECT_LT(relative_error(y, r.y), 1e-5) << "y";
        EXPECT_LT(relative_error(bn.mean, r.mean), 1e-5) << "mean";
        const ForwardStatistics f = forward_statistics(r, s, static_cast<double>(bn.epsilon), 0.1, 0.25, 2.0);
        EXPECT_LT(relative_error(bn.inverse_std, f.inverse_std), 1e-5) << "inverse std";
        EXPECT_LT(relative_error(bn.running_mean, f.running_mean), 1e-5) << "running mean";
        EXPECT_LT(relative_error(bn.running_var, f.running_var), 1e-5) << "running variance";
        EXPECT_LT(relative_error(dx, r.dx), 1e-5) << "dx";
        EXPECT_LT(relative_error(dgamma, r.dgamma), 1e-5) << "dgamma";
        EXPECT_LT(relative_error(dbeta, r.dbeta), 1e-5) << "dbeta";
        if (tail == 2) {
          EXPECT_LT(relative_error(dz, r.dz), 1e-7) << "dz: dy where y > 0, exactly";
        }
      }
    }
  }
}

// A channel whose mean is far from zero against its spread (1000 ± 0.5 here): the sums of
// squares about each chunk's first value keep the variance, where about zero fp32 would lose it,
// and y subtracts the mean before it scales, where x · scale + (β − mean · scale) would cancel.
TEST(BatchNormPlan, AChannelFarFromZeroKeepsItsVarianceAndItsNormalisedValues) {
  const BatchNormShape s{64, 1, 3136};
  const std::vector<float> x = normal_values(static_cast<std::size_t>(s.numel()), 6, 1000.0, 0.5);
  const Reference r = reference(s, false, 0, 1e-5f, x, {}, {1.0f}, {0.0f}, std::vector<float>(x.size(), 0.0f));
  for (const bool channels_last : {false, true}) {  // one channel: the same values in either order
    SCOPED_TRACE(channels_last ? "channels last" : "nchw");
    EmulatedBatchNorm bn{s, channels_last ? 1 : 4, 0, channels_last, 1e-5f, 0.1f, {}, {}, {}, {}, {}};
    bn.running_mean.assign(1, 0.0f);
    bn.running_var.assign(1, 1.0f);
    const std::vector<float> y = bn.forward(x, {}, {1.0f}, {0.0f});
    const double inverse_std = static_cast<double>(bn.inverse_std[0]);
    const double variance = 1.0 / (inverse_std * inverse_std) - static_cast<double>(bn.epsilon);
    EXPECT_NEAR(variance / r.variance[0], 1.0, 1e-4);
    EXPECT_LT(relative_error(y, r.y), 1e-5);
    // What the test's data would catch: y as x · scale + (β − mean · scale).
    std::vector<float> folded(x.size());
    const float scale = bn.inverse_std[0], shift = -bn.mean[0] * scale;
    for (std::size_t i = 0; i < x.size(); ++i) folded[i] = x[i] * scale + shift;
    EXPECT_GT(relative_error(folded, r.y), 1e-5) << "a folded shift cancels here";
  }
  // And the variance from sums about zero, E[x²] − mean² in fp32.
  float sum = 0.0f, squares = 0.0f;
  for (const float v : x) {
    sum += v;
    squares += v * v;
  }
  const double count = static_cast<double>(x.size());
  const double naive = (static_cast<double>(squares) - static_cast<double>(sum) * static_cast<double>(sum) / count) / count;
  EXPECT_GT(std::fabs(naive / r.variance[0] - 1.0), 1e-2) << "unshifted fp32 sums lose the variance here";
}

}  // namespace
}  // namespace dlbench::worker
