// The input pipeline's pieces on their own: crop parameters, the resampler, shards, and the
// prefetching pipeline over JPEGs this test encodes itself.
#include <gtest/gtest.h>
#include <turbojpeg.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include "input/image_folder.hpp"
#include "input/image_transform.hpp"
#include "input/input_pipeline.hpp"

namespace dlbench::input {
namespace {
namespace fs = std::filesystem;

TEST(RandomResizedCrop, StaysInsideTheImageWithinTheAreaAndRatio) {
  std::mt19937_64 rng(1);
  for (const auto& [h, w] : std::vector<std::pair<int, int>>{{375, 500}, {500, 375}, {64, 48}, {224, 224}, {33, 1000}}) {
    int fallbacks = 0;
    for (int i = 0; i < 5000; ++i) {
      const CropBox c = random_resized_crop(h, w, rng);
      ASSERT_GE(c.top, 0);
      ASSERT_GE(c.left, 0);
      ASSERT_GE(c.height, 1);
      ASSERT_GE(c.width, 1);
      ASSERT_LE(c.top + c.height, h);
      ASSERT_LE(c.left + c.width, w);
      // The drawn width and height were rounded: some unrounded pair within half a pixel of them
      // has an area of 8 % to 100 % and a ratio of 3/4 to 4/3.
      const double image_area = static_cast<double>(w) * h;
      const bool area_ok = (c.width + 0.5) * (c.height + 0.5) >= 0.08 * image_area &&
                           (c.width - 0.5) * (c.height - 0.5) <= image_area;
      const bool ratio_ok = (c.width + 0.5) / (c.height - 0.5) >= 0.75 && (c.width - 0.5) / (c.height + 0.5) <= 4.0 / 3.0;
      if (area_ok && ratio_ok) continue;
      ++fallbacks;  // the centred crop, bounded by the ratio where the image is too narrow
      ASSERT_EQ(c.top, (h - c.height) / 2);
      ASSERT_EQ(c.left, (w - c.width) / 2);
    }
    if (w == 1000) {
      EXPECT_EQ(fallbacks, 5000) << "33 × 1000 admits no crop within 3/4 to 4/3 of 8 % to 100 % of its area";
    } else {
      EXPECT_LT(fallbacks, 50);
    }
  }
}

TEST(BilinearResampler, CopiesAtTheSameSizeAndKeepsAFlatImageFlat) {
  std::vector<std::uint8_t> image(37 * 29 * 3);
  std::mt19937 rng(5);
  for (auto& v : image) v = static_cast<std::uint8_t>(rng());
  BilinearResampler r;
  std::vector<std::uint8_t> out(image.size());
  r.resize(image.data(), 37, 29, 37 * 3, 0, 0, 37, 29, 37, 29, out.data());
  EXPECT_EQ(out, image);
  std::vector<std::uint8_t> flat(300 * 200 * 3, 173), small(57 * 41 * 3);
  r.resize(flat.data(), 300, 200, 300 * 3, 13.5, 7.25, 290.0, 180.0, 57, 41, small.data());
  for (auto v : small) ASSERT_EQ(v, 173);
}

TEST(Normalizer, FlipsAndWritesBothLayouts) {
  Normalizer n;
  std::vector<std::uint8_t> rgb = {0, 0, 0, 255, 255, 255,   // row 0: black, white
                                   10, 20, 30, 40, 50, 60};  // row 1
  std::vector<float> chw(12), hwc(12), flipped(12);
  n.write(rgb.data(), 2, false, PixelLayout::nchw, chw.data());
  n.write(rgb.data(), 2, false, PixelLayout::nhwc, hwc.data());
  n.write(rgb.data(), 2, true, PixelLayout::nchw, flipped.data());
  EXPECT_FLOAT_EQ(chw[0], (0.0f - 0.485f) / 0.229f);
  EXPECT_FLOAT_EQ(chw[1], (1.0f - 0.485f) / 0.229f);
  EXPECT_FLOAT_EQ(chw[4 + 2], (20.0f / 255.0f - 0.456f) / 0.224f);  // green plane, row 1, column 0
  for (int c = 0; c < 3; ++c) {
    for (int p = 0; p < 4; ++p) EXPECT_EQ(hwc[static_cast<std::size_t>(p * 3 + c)], chw[static_cast<std::size_t>(c * 4 + p)]);
  }
  EXPECT_EQ(flipped[0], chw[1]);
  EXPECT_EQ(flipped[1], chw[0]);
}

TEST(EpochShard, EveryFileOnceAcrossRanksAndEpochsDiffer) {
  for (const std::size_t files : {1u, 7u, 100u, 1001u}) {
    for (int world = 1; world <= 5; ++world) {
      std::multiset<std::uint32_t> all;
      for (int rank = 0; rank < world; ++rank) {
        const auto shard = epoch_shard(files, 9, 3, rank, world);
        EXPECT_LE(shard.size(), files / static_cast<std::size_t>(world) + 1);
        all.insert(shard.begin(), shard.end());
      }
      ASSERT_EQ(all.size(), files);
      ASSERT_EQ(std::set<std::uint32_t>(all.begin(), all.end()).size(), files);
    }
  }
  EXPECT_NE(epoch_shard(100, 9, 0, 0, 1), epoch_shard(100, 9, 1, 0, 1));
  EXPECT_EQ(epoch_shard(100, 9, 1, 1, 2), epoch_shard(100, 9, 1, 1, 2));
  EXPECT_THROW(epoch_shard(10, 9, 0, 2, 2), std::invalid_argument);
}

// A folder of JPEGs encoded here: classes × files of a few sizes, plus one broken file.
class JpegFolder : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("dlbench-input-" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                                         "-" + std::to_string(reinterpret_cast<std::uintptr_t>(this)));
    tjhandle tj = tjInitCompress();
    std::mt19937 rng(3);
    for (int c = 0; c < 3; ++c) {
      fs::create_directories(root_ / ("c" + std::to_string(c)));
      for (int i = 0; i < 10; ++i) {
        const int w = 40 + 13 * i, h = 30 + 17 * c;
        std::vector<std::uint8_t> rgb(static_cast<std::size_t>(w * h * 3));
        for (auto& v : rgb) v = static_cast<std::uint8_t>(rng() % 256);
        unsigned char* jpeg = nullptr;
        unsigned long size = 0;
        ASSERT_EQ(tjCompress2(tj, rgb.data(), w, 0, h, TJPF_RGB, &jpeg, &size, TJSAMP_420, 90, 0), 0);
        std::ofstream(root_ / ("c" + std::to_string(c)) / ("i" + std::to_string(i) + ".JPEG"), std::ios::binary)
            .write(reinterpret_cast<const char*>(jpeg), static_cast<std::streamsize>(size));
        tjFree(jpeg);
      }
    }
    tjDestroy(tj);
    std::ofstream(root_ / "c1" / "broken.jpg") << "not a jpeg";
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

TEST_F(JpegFolder, ScansClassesInOrder) {
  const ImageFolder f = scan_image_folder(root_.string());
  EXPECT_EQ(f.classes, (std::vector<std::string>{"c0", "c1", "c2"}));
  EXPECT_EQ(f.files.size(), 31u);
  EXPECT_EQ(f.files.front().label, 0);
  EXPECT_EQ(f.files.back().label, 2);
}

TEST_F(JpegFolder, BatchesAreTheSameWithOneOrFourThreadsAndSkipTheBrokenFile) {
  const ImageFolder f = scan_image_folder(root_.string());
  InputPipelineConfig config;
  config.batch_size = 5;
  config.image_size = 32;
  config.prefetch_batches = 2;
  std::vector<std::vector<float>> runs;
  for (const int threads : {1, 4}) {
    config.threads = threads;
    InputPipeline p(f, config);
    std::vector<float> all;
    for (int b = 0; b < 14; ++b) {  // 70 images: over two epochs of 31 files
      const Batch batch = p.next();
      all.insert(all.end(), batch.pixels, batch.pixels + 5 * 3 * 32 * 32);
      for (int i = 0; i < 5; ++i) {
        ASSERT_GE(batch.labels[i], 0);
        ASSERT_LE(batch.labels[i], 2);
      }
    }
    EXPECT_EQ(p.skipped_count(), 1);
    ASSERT_EQ(p.skipped_examples().size(), 1u);
    EXPECT_NE(p.skipped_examples()[0].path.find("broken.jpg"), std::string::npos);
    for (float v : all) ASSERT_TRUE(std::isfinite(v) && v > -2.2f && v < 2.7f);
    runs.push_back(std::move(all));
  }
  EXPECT_EQ(runs[0], runs[1]);
}

TEST_F(JpegFolder, ASmallShardPerRankStillFillsBatches) {
  const ImageFolder f = scan_image_folder(root_.string());
  InputPipelineConfig config;
  config.batch_size = 16;  // larger than the shard: the stream wraps into the next epoch
  config.image_size = 16;
  config.world = 3;
  config.rank = 2;
  InputPipeline p(f, config);
  EXPECT_EQ(p.shard_size(), 10u);
  for (int b = 0; b < 3; ++b) p.next();
  config.world = 40;
  config.rank = 35;  // 31 files: ranks 31 to 39 get none
  EXPECT_THROW(InputPipeline(f, config), DataUnavailable);
}

}  // namespace
}  // namespace dlbench::input
