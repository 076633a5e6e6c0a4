// The index math the CUDA kernels share with the CPU (activation_index.hpp), checked here without a
// GPU: offsets against the layout conversion the trainer and the self-test upload data with,
// filters against a permutation written out, channel slices by carrying out the 2-D copy.
#include "activation_index.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <numeric>
#include <stdexcept>
#include <set>
#include <vector>

#include "cpu/cpu_backend.hpp"
#include "trainer.hpp"

namespace dlbench::worker {
namespace {

std::vector<float> iota(std::int64_t n) {
  std::vector<float> v(static_cast<std::size_t>(n));
  std::iota(v.begin(), v.end(), 0.0f);
  return v;
}

TEST(ActivationGeometry, OffsetsAgreeWithTheLayoutsDataIsUploadedIn) {
  const Shape shape(2, 3, 4, 5);
  const std::vector<float> logical = iota(shape.numel());  // NCHW: the value is the logical index
  for (const bool channels_last : {false, true}) {
    const std::vector<float> stored = to_layout(logical, shape, channels_last ? Layout::nhwc : Layout::nchw);
    const ActivationGeometry g{2, 3, 4, 5, channels_last};
    for (std::int64_t n = 0; n < 2; ++n) {
      for (std::int64_t c = 0; c < 3; ++c) {
        for (std::int64_t p = 0; p < 20; ++p) {
          const std::int64_t at = g.offset(n, c, p);
          ASSERT_EQ(stored[static_cast<std::size_t>(at)], static_cast<float>((n * 3 + c) * 20 + p))
              << (channels_last ? "NHWC" : "NCHW") << " n=" << n << " c=" << c << " p=" << p;
          const auto e = g.element(at);
          EXPECT_EQ(e.sample, n);
          EXPECT_EQ(e.channel, c);
          EXPECT_EQ(e.pixel, p);
          EXPECT_EQ(g.logical_index(at), (n * 3 + c) * 20 + p);
        }
      }
    }
    // Neighbouring channels of a pixel are channel_stride() apart.
    EXPECT_EQ(g.offset(1, 2, 7) - g.offset(1, 1, 7), g.channel_stride());
  }
}

// upload and download, which the self-test feeds and reads every layer with, in each type and
// layout: the bytes on the device are the layout's order in the tensor's type (fp32 and plain
// copied straight, without the encoding pass), and back in logical order; a host vector of another
// size is refused, where it was read past.
TEST(UploadAndDownload, RoundTripInEveryTypeAndLayoutAndRefuseAnotherSize) {
  CpuBackend cpu(1);
  const Shape shape(2, 3, 4, 5);
  const std::vector<float> logical = iota(shape.numel());  // small integers: exact in bf16 and fp16
  for (const DType dtype : {DType::fp32, DType::bf16, DType::fp16}) {
    for (const Layout layout : {Layout::plain, Layout::nchw, Layout::nhwc}) {
      Tensor t;
      t.shape = shape;
      t.dtype = dtype;
      t.layout = layout;
      const std::shared_ptr<void> memory = cpu.allocate(t.bytes());
      t.data = memory.get();
      upload(cpu, t, logical);
      const std::vector<std::byte> want = encode(to_layout(logical, shape, layout).data(), logical.size(), dtype);
      ASSERT_EQ(std::memcmp(t.data, want.data(), t.bytes()), 0) << to_string(dtype) << " layout " << static_cast<int>(layout);
      EXPECT_EQ(download(cpu, t), logical) << to_string(dtype) << " layout " << static_cast<int>(layout);
      const std::vector<float> shorter(logical.begin(), logical.end() - 1);
      try {
        upload(cpu, t, shorter);
        ADD_FAILURE() << "a host vector of " << shorter.size() << " values was uploaded into " << shape.numel();
      } catch (const std::invalid_argument& e) {
        EXPECT_STREQ(e.what(), "upload: the tensor has 120 elements, expected 119");
      }
    }
  }
}

TEST(FilterOffset, ChannelsLastIsOhwiAndEveryElementHasItsOwnPlace) {
  const std::int64_t O = 4, I = 3, KH = 2, KW = 5;
  std::set<std::int64_t> seen;
  for (std::int64_t o = 0; o < O; ++o) {
    for (std::int64_t i = 0; i < I; ++i) {
      for (std::int64_t y = 0; y < KH; ++y) {
        for (std::int64_t x = 0; x < KW; ++x) {
          EXPECT_EQ(filter_offset(false, I, KH, KW, o, i, y, x), ((o * I + i) * KH + y) * KW + x);
          const std::int64_t ohwi = filter_offset(true, I, KH, KW, o, i, y, x);
          EXPECT_EQ(ohwi, o * KH * KW * I + y * KW * I + x * I + i);
          seen.insert(ohwi);
        }
      }
    }
  }
  EXPECT_EQ(seen.size(), static_cast<std::size_t>(O * I * KH * KW));
  EXPECT_EQ(*seen.rbegin(), O * I * KH * KW - 1);
}

// What cudaMemcpy2D does with the geometry: rows of row_bytes, each pitch apart.
void copy_2d(std::byte* to, std::int64_t to_pitch, const std::byte* from, std::int64_t from_pitch,
             const ChannelSliceCopy& c) {
  for (std::int64_t r = 0; r < c.rows; ++r) {
    std::memcpy(to + r * to_pitch, from + r * from_pitch, static_cast<std::size_t>(c.row_bytes));
  }
}

TEST(ChannelSliceCopy, ExtractsAndInsertsTheChannelsInBothLayouts) {
  const std::int64_t N = 2, whole_c = 7, part_c = 3, offset = 2, H = 3, W = 2;
  const Shape whole_shape(N, whole_c, H, W), part_shape(N, part_c, H, W);
  const std::vector<float> whole_logical = iota(whole_shape.numel());
  for (const bool channels_last : {false, true}) {
    const Layout layout = channels_last ? Layout::nhwc : Layout::nchw;
    const std::vector<float> whole = to_layout(whole_logical, whole_shape, layout);
    const ChannelSliceCopy c =
        channel_slice_copy(N, part_c, H * W, whole_c, offset, static_cast<std::int64_t>(sizeof(float)), channels_last);
    std::vector<float> part(static_cast<std::size_t>(part_shape.numel()), -1.0f);
    copy_2d(reinterpret_cast<std::byte*>(part.data()), c.part_pitch,
            reinterpret_cast<const std::byte*>(whole.data()) + c.offset_bytes, c.whole_pitch, c);

    std::vector<float> expected_logical;
    for (std::int64_t n = 0; n < N; ++n) {
      for (std::int64_t ch = offset; ch < offset + part_c; ++ch) {
        for (std::int64_t p = 0; p < H * W; ++p) {
          expected_logical.push_back(whole_logical[static_cast<std::size_t>((n * whole_c + ch) * H * W + p)]);
        }
      }
    }
    EXPECT_EQ(part, to_layout(expected_logical, part_shape, layout)) << (channels_last ? "NHWC" : "NCHW");

    // Insert back into a zeroed whole: exactly the slice's elements come back.
    std::vector<float> rebuilt(whole.size(), 0.0f);
    copy_2d(reinterpret_cast<std::byte*>(rebuilt.data()) + c.offset_bytes, c.whole_pitch,
            reinterpret_cast<const std::byte*>(part.data()), c.part_pitch, c);
    std::int64_t filled = 0;
    for (std::size_t i = 0; i < whole.size(); ++i) {
      if (rebuilt[i] != 0.0f) {
        EXPECT_EQ(rebuilt[i], whole[i]);
        ++filled;
      }
    }
    EXPECT_EQ(filled, part_shape.numel());  // no slice element is 0: the only 0 is in channel 0
  }
}

}  // namespace
}  // namespace dlbench::worker
