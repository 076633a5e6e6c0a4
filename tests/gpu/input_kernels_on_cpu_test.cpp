// The device's half of DLBENCH_INPUT_RESIZE=device, its kernel's own source run on the CPU
// (worker/cuda/emulation): the decoding threads pack each image's decoded crop and Pillow's taps,
// the kernel resizes, mirrors, normalises and rounds them, and the batch is the host pipeline's
// batch bit for bit, in every pixel type and layout, with DCT scaling and without (torchvision's
// path), through both ways an image is shipped (its crop, or resized on the host where the crop
// is too large to ship).
#include <gtest/gtest.h>
#include <turbojpeg.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <unistd.h>
#include <string>
#include <vector>

#include "cuda/input_kernels.hpp"
#include "dtype.hpp"
#include "input/image_folder.hpp"
#include "input/image_transform.hpp"
#include "input/input_pipeline.hpp"
#include "input/image_packing.hpp"
#include "input/packed_images.hpp"
#include "input/sample_source.hpp"
#include "../input/write_jpeg.hpp"

namespace dlbench::input {
namespace {
namespace fs = std::filesystem;
using worker::DType;

constexpr int kSide = 64;
constexpr int kBatch = 8;

// JPEGs of sizes that need each path: smaller than the output (enlarged), a little larger, large
// enough for DCT scaling, and large enough that a crop at full size is too large to ship.
class PackedJpegFolder : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("dlbench-packed-" + std::to_string(::getpid()) + "-" +
                                         std::to_string(reinterpret_cast<std::uintptr_t>(this)));
    std::mt19937 rng(5);
    const int sizes[][2] = {{40, 30}, {90, 100}, {150, 120}, {300, 260}, {700, 500}, {333, 517}};
    for (int c = 0; c < 2; ++c) {
      fs::create_directories(root_ / ("c" + std::to_string(c)));
      for (int i = 0; i < 6; ++i) {
        const int w = sizes[i][0], h = sizes[i][1];
        std::vector<std::uint8_t> rgb(static_cast<std::size_t>(w) * static_cast<std::size_t>(h) * 3);
        for (int y = 0; y < h; ++y) {
          for (int x = 0; x < w; ++x) {
            std::uint8_t* p = &rgb[(static_cast<std::size_t>(y) * static_cast<std::size_t>(w) + static_cast<std::size_t>(x)) * 3];
            p[0] = static_cast<std::uint8_t>(x * 255 / w);
            p[1] = static_cast<std::uint8_t>((y * 7 + c * 50) % 256);
            p[2] = static_cast<std::uint8_t>(rng() % 256);
          }
        }
        testing::write_jpeg(root_ / ("c" + std::to_string(c)) / ("i" + std::to_string(i) + ".jpg"), rgb, w, h,
                            i % 2 == 0 ? TJSAMP_420 : TJSAMP_444);
      }
    }
    std::ofstream(root_ / "c1" / "broken.jpg") << "not a jpeg";
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

TEST_F(PackedJpegFolder, TheKernelMakesTheHostsBatchFromThePackedOneBitForBit) {
  const ImageFolder folder = scan_image_folder(root_.string());
  long shipped_as_crops = 0, resized_on_the_host = 0, skipping_a_pass = 0, mirrored = 0;
  for (const bool dct_scaling : {true, false}) {
    for (const PixelLayout layout : {PixelLayout::nchw, PixelLayout::nhwc}) {
      const ImageFolderSource source(folder, kSide, layout, JpegDecoding{dct_scaling, true});
      for (const DType type : {DType::fp32, DType::fp16, DType::bf16}) {
        const std::string what = std::string(dct_scaling ? "DCT scaling, " : "full size, ") +
                                 (layout == PixelLayout::nchw ? "NCHW, " : "NHWC, ") + std::string(worker::to_string(type));
        InputPipelineConfig config;
        config.batch_size = kBatch;
        config.threads = 3;
        config.seed = 17;
        config.pixel_type = type;
        InputPipeline host(source, config);
        config.resize_on_device = true;
        InputPipeline packed(source, config);
        EXPECT_EQ(host.packed_capacity(), 0u);
        ASSERT_EQ(packed.packed_capacity(), packed_batch_capacity(kBatch, kSide));
        const std::size_t bytes = static_cast<std::size_t>(kBatch) * 3 * kSide * kSide * worker::dtype_size(type);
        std::vector<std::byte> expanded(bytes);
        for (int b = 0; b < 3; ++b) {
          const Batch want = host.next();
          const Batch got = packed.next();
          EXPECT_EQ(want.packed_bytes, 0u);
          ASSERT_GT(got.packed_bytes, PackedBatchLayout::payload(kBatch)) << what;
          ASSERT_LE(got.packed_bytes, packed.packed_capacity()) << what;
          EXPECT_EQ(got.packed_side, kSide);
          EXPECT_EQ(got.pixel_type, type);
          const auto* entries = reinterpret_cast<const PackedImage*>(static_cast<const std::byte*>(got.pixels) +
                                                                      PackedBatchLayout::kTable);
          for (int i = 0; i < kBatch; ++i) {
            const PackedImage& e = entries[i];
            ASSERT_LE(e.pixels + static_cast<std::uint64_t>(e.stride), got.packed_bytes);
            ASSERT_LE(e.taps, got.packed_bytes);
            const bool host_resized = e.horizontal_size == 0;
            resized_on_the_host += host_resized;
            shipped_as_crops += !host_resized;
            skipping_a_pass += !host_resized && (e.need_horizontal == 0) != (e.need_vertical == 0);
            mirrored += e.flip;
            EXPECT_EQ(want.labels[i], got.labels[i]);
          }
          std::memset(expanded.data(), 0xFF, bytes);
          worker::kernels::expand_packed_images(type, layout == PixelLayout::nhwc, got.pixels, kBatch, kSide,
                                                expanded.data(), nullptr);
          std::size_t differing = 0;
          for (std::size_t k = 0; k < bytes; ++k) differing += static_cast<const std::byte*>(want.pixels)[k] != expanded[k];
          EXPECT_EQ(differing, 0u) << what << ", batch " << b;
        }
        EXPECT_EQ(host.skipped_count(), packed.skipped_count());
      }
    }
  }
  // Every way an image travels was taken: its crop resized on the device, in both passes or one,
  // and a crop too large to ship resized on the host; mirrored and not.
  EXPECT_GT(shipped_as_crops, 0);
  EXPECT_GT(resized_on_the_host, 0);
  EXPECT_GT(mirrored, 0);
  EXPECT_LT(mirrored, shipped_as_crops + resized_on_the_host);
  RecordProperty("skipping_a_pass", std::to_string(skipping_a_pass));
}

// Each pass alone, both, neither, enlarging and shrinking, whole and fractional boxes, mirrored or
// not: one image packed by the decoding threads' own code from a region in memory, resized by the
// kernel, against the host's resampler and normaliser, rounded as the host rounds.
TEST(PackedImages, EveryCombinationOfPassesIsTheHostsResize) {
  struct Case {
    int width, height;
    double x0, y0, x1, y1;
    bool flip;
  };
  const Case cases[] = {
      {kSide, kSide, 0, 0, kSide, kSide, false},        // neither pass: a copy
      {kSide, 150, 0, 0, kSide, 150, true},             // vertical only, shrinking
      {kSide, 40, 0, 0, kSide, 40, false},              // vertical only, enlarging
      {200, kSide, 0, 0, 200, kSide, true},             // horizontal only
      {30, kSide, 0, 0, 30, kSide, false},              // horizontal only, enlarging
      {129, 97, 0.25, 0.5, 128.5, 96.75, true},         // both, a fractional box
      {kSide, kSide, 0.5, 0, kSide, kSide, false},      // a fractional box at the output's size: both passes run
      {20, 25, 0, 0, 20, 25, true},                     // enlarging both ways
  };
  Normalizer normalizer;
  TransformScratch scratch;
  std::mt19937 rng(9);
  for (const Case& c : cases) {
    const std::size_t stride = static_cast<std::size_t>(c.width) * 3 + 5;  // rows apart, as a part's are
    std::vector<std::uint8_t> region(stride * static_cast<std::size_t>(c.height));
    for (auto& v : region) v = static_cast<std::uint8_t>(rng() % 256);
    DecodedCrop crop;
    crop.part = DecodedPart{region.data(), stride, 0, 0, c.width, c.height};
    crop.x0 = c.x0;
    crop.y0 = c.y0;
    crop.x1 = c.x1;
    crop.y1 = c.y1;
    std::vector<std::byte> batch(packed_batch_capacity(1, kSide));
    std::memcpy(batch.data(), normalizer.table(), PackedBatchLayout::kTable);
    std::atomic<std::uint64_t> used{PackedBatchLayout::payload(1)};
    auto* const entry = reinterpret_cast<PackedImage*>(batch.data() + PackedBatchLayout::kTable);
    pack_decoded_crop(crop, c.flip, kSide, scratch, PackedSlot{batch.data(), entry, &used});
    ASSERT_LE(used.load(), batch.size());
    EXPECT_EQ(entry->need_horizontal != 0, BilinearResampler::needs_pass(c.width, c.x0, c.x1, kSide));
    EXPECT_EQ(entry->need_vertical != 0, BilinearResampler::needs_pass(c.height, c.y0, c.y1, kSide));
    EXPECT_GT(entry->horizontal_size, 0) << "shipped as its crop";

    std::vector<std::uint8_t> resized(static_cast<std::size_t>(kSide) * kSide * 3);
    BilinearResampler(false).resize(region.data(), c.width, c.height, stride, c.x0, c.y0, c.x1, c.y1, kSide, kSide,
                                    resized.data());
    for (const PixelLayout layout : {PixelLayout::nchw, PixelLayout::nhwc}) {
      std::vector<float> want(static_cast<std::size_t>(kSide) * kSide * 3);
      normalizer.write(resized.data(), kSide, kSide, c.flip, layout, want.data());
      std::vector<float> got(want.size(), -100.0f);
      worker::kernels::expand_packed_images(DType::fp32, layout == PixelLayout::nhwc, batch.data(), 1, kSide, got.data(),
                                            nullptr);
      EXPECT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
          << c.width << " x " << c.height << " box " << c.x0 << "," << c.y0 << " to " << c.x1 << "," << c.y1;
    }
  }
}

// A packed batch's values exist only once the device has made them.
TEST_F(PackedJpegFolder, APackedBatchHasNoFloatsOnTheHost) {
  const ImageFolder folder = scan_image_folder(root_.string());
  const ImageFolderSource source(folder, kSide, PixelLayout::nchw);
  InputPipelineConfig config;
  config.batch_size = kBatch;
  config.resize_on_device = true;
  InputPipeline packed(source, config);
  const Batch batch = packed.next();
  EXPECT_THROW((void)batch.floats(), std::logic_error);
}

}  // namespace
}  // namespace dlbench::input
