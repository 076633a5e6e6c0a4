// The input pipeline's pieces on their own: crop parameters, the resampler, shards, and the
// prefetching pipeline over JPEGs this test encodes itself.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>
#include <turbojpeg.h>
#include <webp/encode.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <random>
#include <set>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "input/cityscapes.hpp"
#include "input/image_folder.hpp"
#include "input/image_transform.hpp"
#include "input/batch_values.hpp"
#include "input/input_pipeline.hpp"
#include "precision.hpp"
#include "input/png_codec.hpp"
#include "input/webp_codec.hpp"
#include "write_jpeg.hpp"
#include "../worker/resident_pages.hpp"

namespace dlbench::input {
namespace {
namespace fs = std::filesystem;
using worker::DType;

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

TEST(BilinearResampler, AWindowIsWhatTheWholeResizeHoldsThere) {
  std::mt19937 rng(11);
  std::vector<std::uint8_t> image(53 * 31 * 3);
  for (auto& v : image) v = static_cast<std::uint8_t>(rng());
  BilinearResampler whole_resampler, window_resampler;
  // Down, up, one axis only, and not at all: each takes its own passes.
  for (const auto& [out_w, out_h] : std::vector<std::pair<int, int>>{{26, 15}, {120, 77}, {53, 70}, {90, 31}, {53, 31}}) {
    std::vector<std::uint8_t> whole(static_cast<std::size_t>(out_w * out_h * 3));
    whole_resampler.resize(image.data(), 53, 31, 53 * 3, 0, 0, 53, 31, out_w, out_h, whole.data());
    for (int trial = 0; trial < 20; ++trial) {
      const int w = 1 + static_cast<int>(rng() % static_cast<unsigned>(out_w));
      const int h = 1 + static_cast<int>(rng() % static_cast<unsigned>(out_h));
      const int left = static_cast<int>(rng() % static_cast<unsigned>(out_w - w + 1));
      const int top = static_cast<int>(rng() % static_cast<unsigned>(out_h - h + 1));
      std::vector<std::uint8_t> window(static_cast<std::size_t>(w * h * 3));
      window_resampler.resize_window(image.data(), 53, 31, 53 * 3, out_w, out_h, CropBox{top, left, h, w}, window.data());
      for (int y = 0; y < h; ++y) {
        for (int x = 0; x < w * 3; ++x) {
          ASSERT_EQ(window[static_cast<std::size_t>(y * w * 3 + x)],
                    whole[static_cast<std::size_t>((top + y) * out_w * 3 + left * 3 + x)])
              << out_w << "x" << out_h << " window " << left << "," << top << " " << w << "x" << h;
        }
      }
    }
  }
  std::vector<std::uint8_t> out(3);
  EXPECT_THROW(window_resampler.resize_window(image.data(), 53, 31, 53 * 3, 20, 20, CropBox{0, 20, 1, 1}, out.data()),
               std::invalid_argument);
}

TEST(Cityscapes, LabelIdsBecomeTheNineteenTrainingIds) {
  // cityscapesScripts' labels.py, class by class.
  const std::vector<std::pair<int, int>> training{{7, 0},   {8, 1},   {11, 2},  {12, 3},  {13, 4},  {17, 5},  {19, 6},
                                                  {20, 7},  {21, 8},  {22, 9},  {23, 10}, {24, 11}, {25, 12}, {26, 13},
                                                  {27, 14}, {28, 15}, {31, 16}, {32, 17}, {33, 18}};
  std::set<int> seen;
  for (int id = 0; id < 256; ++id) {
    const std::int32_t train = cityscapes_train_id(static_cast<std::uint8_t>(id));
    const auto it = std::find_if(training.begin(), training.end(), [&](const auto& p) { return p.first == id; });
    EXPECT_EQ(train, it == training.end() ? 255 : it->second) << "label id " << id;
    seen.insert(train);
  }
  EXPECT_EQ(seen.size(), 20u);  // 0 to 18, and 255
}

TEST(Cityscapes, DrawsResizeTheShorterSideAsTorchvisionAndCropInsideThePaddedImage) {
  std::mt19937_64 rng(3);
  std::set<int> sizes;
  for (int i = 0; i < 40000; ++i) {  // 1,537 sizes: each end missed with odds of e^-26
    const SegmentationDraw d = draw_segmentation(1024, 2048, 512, 1024, rng);
    ASSERT_GE(d.resized_height, 512);
    ASSERT_LE(d.resized_height, 2048);
    // torchvision: int(size * long / short), here exactly twice the shorter side.
    ASSERT_EQ(d.resized_width, 2 * d.resized_height);
    ASSERT_LE(d.top, std::max(d.resized_height, 512) - 512);
    ASSERT_LE(d.left, std::max(d.resized_width, 1024) - 1024);
    sizes.insert(d.resized_height);
  }
  EXPECT_TRUE(sizes.contains(512) && sizes.contains(2048)) << "both ends of randint are drawn";
  // A portrait image and an uneven ratio: the width is the shorter side; int() truncates.
  for (int i = 0; i < 200; ++i) {
    const SegmentationDraw d = draw_segmentation(500, 333, 64, 64, rng);
    ASSERT_GE(d.resized_width, 166);
    ASSERT_LE(d.resized_width, 666);
    ASSERT_EQ(d.resized_height, static_cast<int>(static_cast<double>(d.resized_width) * 500 / 333));
  }
}

TEST(Cityscapes, NearestPositionsArePillowsSteppedOnes) {
  // Pillow steps the position by in / out in double: at 2048 → 1027 that drifts from (x + 0.5) · step.
  const std::vector<int> p = nearest_positions(2048, 1027);
  const double step = 2048.0 / 1027;
  double position = step * 0.5;
  int drifted = 0;
  for (int x = 0; x < 1027; ++x, position += step) {
    ASSERT_EQ(p[static_cast<std::size_t>(x)], static_cast<int>(position));
    drifted += static_cast<int>((x + 0.5) * step) != static_cast<int>(position) ? 1 : 0;
  }
  EXPECT_GT(drifted, 0);
  EXPECT_EQ(nearest_positions(5, 5), (std::vector<int>{0, 1, 2, 3, 4}));
}

TEST(Png, DecodesWhatItWroteAndRefusesColourLabels) {
  const fs::path dir = fs::temp_directory_path() / ("dlbench_png_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::vector<std::uint8_t> rgb(7 * 5 * 3), grey(7 * 5);
  std::mt19937 rng(2);
  for (auto& v : rgb) v = static_cast<std::uint8_t>(rng());
  for (auto& v : grey) v = static_cast<std::uint8_t>(rng() % 34);
  write_png((dir / "rgb.png").string(), 7, 5, 3, rgb.data());
  write_png((dir / "grey.png").string(), 7, 5, 1, grey.data());
  PngDecoder decoder;
  std::vector<std::uint8_t> bytes;
  std::string why;
  int w = 0, h = 0;
  ASSERT_TRUE(read_file((dir / "rgb.png").string(), bytes, why));
  ASSERT_TRUE(decoder.decode(bytes, PngPixels::rgb8, w, h, why)) << why;
  EXPECT_EQ(std::vector<std::uint8_t>(decoder.pixels(), decoder.pixels() + rgb.size()), rgb);
  EXPECT_FALSE(decoder.decode(bytes, PngPixels::grey8, w, h, why));
  EXPECT_NE(why.find("not an 8-bit greyscale PNG"), std::string::npos) << why;
  ASSERT_TRUE(read_file((dir / "grey.png").string(), bytes, why));
  ASSERT_TRUE(decoder.decode(bytes, PngPixels::grey8, w, h, why)) << why;
  EXPECT_EQ(std::vector<std::uint8_t>(decoder.pixels(), decoder.pixels() + grey.size()), grey);
  ASSERT_TRUE(decoder.decode(bytes, PngPixels::rgb8, w, h, why)) << why;  // grey to RGB, as PIL's convert("RGB")
  EXPECT_EQ(decoder.pixels()[3 * 4 + 2], grey[4]);
  bytes.resize(bytes.size() / 2);
  EXPECT_FALSE(decoder.decode(bytes, PngPixels::grey8, w, h, why));
  EXPECT_FALSE(why.empty());
  // A header larger than the decoder takes is refused before any pixel is allocated.
  PngDecoder small(7 * 5 - 1);
  ASSERT_TRUE(read_file((dir / "rgb.png").string(), bytes, why));
  EXPECT_FALSE(small.decode(bytes, PngPixels::rgb8, w, h, why));
  EXPECT_EQ(why, "is 7 x 5 pixels, more than the 34 a sample may have");
  const std::vector<std::uint8_t> junk{'n', 'o', 't'};
  EXPECT_FALSE(decoder.decode(junk, PngPixels::rgb8, w, h, why));
  EXPECT_EQ(why, "not a PNG file");
  fs::remove_all(dir);
}

// PNG's chunk checksum (CRC-32, as zlib's crc32) over a chunk's type and data.
std::uint32_t png_crc(const std::uint8_t* bytes, std::size_t size) {
  std::uint32_t crc = 0xFFFFFFFFu;
  for (std::size_t i = 0; i < size; ++i) {
    crc ^= bytes[i];
    for (int bit = 0; bit < 8; ++bit) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
  }
  return crc ^ 0xFFFFFFFFu;
}

// A PNG is read as Pillow reads it (golden_test.py asks Pillow itself of the same damage, and of
// interlaced files): the checksums of the chunks before the image data are checked, an ancillary
// one's too, the image data's are not, and nothing libpng reads past the last row refuses the
// image: a cut or garbled end, the zlib stream's own checksum cut off. What Pillow reads after the
// rows does: the chunks up to IEND, each one's data whole.
TEST(Png, ChecksumsAndTheEndAreReadAsPillowReadsThem) {
  const fs::path dir = fs::temp_directory_path() / ("dlbench_png_damage_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const int w = 97, h = 61;  // noise: its image data is more than one IDAT chunk
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(w) * h * 3);
  std::mt19937 rng(4);
  for (auto& v : rgb) v = static_cast<std::uint8_t>(rng());
  write_png((dir / "x.png").string(), w, h, 3, rgb.data());
  std::vector<std::uint8_t> png;
  std::string why;
  ASSERT_TRUE(read_file((dir / "x.png").string(), png, why));
  fs::remove_all(dir);
  const auto length_of = [&](std::size_t chunk) {  // a chunk's data length, from where the chunk starts
    return std::size_t{png[chunk]} << 24 | std::size_t{png[chunk + 1]} << 16 | std::size_t{png[chunk + 2]} << 8 |
           png[chunk + 3];
  };
  std::vector<std::size_t> idats;  // where each IDAT chunk starts
  for (std::size_t at = 8; at + 12 <= png.size(); at += 12 + length_of(at)) {
    if (std::memcmp(png.data() + at + 4, "IDAT", 4) == 0) idats.push_back(at);
  }
  ASSERT_GE(idats.size(), 2u);
  const auto checksum_of = [&](std::size_t chunk) { return chunk + 8 + length_of(chunk); };
  const std::size_t data_end = checksum_of(idats.back());  // then the last checksum and IEND
  ASSERT_EQ(data_end + 4 + 12, png.size());
  const auto with = [&](std::size_t at, std::vector<std::uint8_t> bytes, std::size_t replacing) {
    std::vector<std::uint8_t> out = png;
    out.erase(out.begin() + static_cast<std::ptrdiff_t>(at), out.begin() + static_cast<std::ptrdiff_t>(at + replacing));
    out.insert(out.begin() + static_cast<std::ptrdiff_t>(at), bytes.begin(), bytes.end());
    return out;
  };
  const auto flipped = [&](std::size_t at) { return with(at, {static_cast<std::uint8_t>(png[at] ^ 0xFF)}, 1); };
  std::vector<std::uint8_t> text{0, 0, 0, 3, 't', 'E', 'X', 't', 'a', 0, 'b', 0, 0, 0, 0};
  const std::uint32_t crc = png_crc(text.data() + 4, 7);
  for (int i = 0; i < 4; ++i) text[11 + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(crc >> (24 - 8 * i));
  std::vector<std::uint8_t> bad_text = text;
  bad_text.back() ^= 1;
  struct Case {
    const char* name;
    std::vector<std::uint8_t> bytes;
    const char* error;  // null: decoded, the very pixels
  };
  const std::vector<Case> cases{
      {"the first IDAT's checksum wrong", flipped(checksum_of(idats[0])), nullptr},
      {"the last IDAT's checksum wrong", flipped(data_end), nullptr},
      {"no IEND", std::vector<std::uint8_t>(png.begin(), png.end() - 12), nullptr},
      {"IEND garbled", with(png.size() - 8, {'I', 1, 'N', 'D'}, 4), nullptr},
      {"IEND made a chunk longer than the file", with(png.size() - 12, {0, 0, 0, 0xFF, 's', 'E', 'N', 'D'}, 8),
       "a chunk after the image data runs past the end of the file, which Pillow reads and refuses (Truncated File Read)"},
      {"the zlib checksum cut off", std::vector<std::uint8_t>(png.begin(), png.begin() + static_cast<std::ptrdiff_t>(data_end - 4)),
       nullptr},
      {"an ancillary chunk", with(idats[0], text, 0), nullptr},
      {"an ancillary chunk's checksum wrong", with(idats[0], bad_text, 0), "tEXt: CRC error"},
      {"IHDR's checksum wrong", with(29, {static_cast<std::uint8_t>(png[29] ^ 1)}, 1), "IHDR: CRC error"},
      {"rows cut", std::vector<std::uint8_t>(png.begin(), png.begin() + static_cast<std::ptrdiff_t>(data_end - 40)),
       "truncated file"},
  };
  PngDecoder decoder;
  for (const Case& c : cases) {
    int width = 0, height = 0;
    std::string error;
    const bool decoded = decoder.decode(c.bytes, PngPixels::rgb8, width, height, error);
    if (c.error == nullptr) {
      ASSERT_TRUE(decoded) << c.name << ": " << error;
      EXPECT_TRUE(error.empty()) << c.name << ": " << error;
      EXPECT_EQ(std::vector<std::uint8_t>(decoder.pixels(), decoder.pixels() + rgb.size()), rgb) << c.name;
    } else {
      EXPECT_FALSE(decoded) << c.name;
      EXPECT_EQ(error, c.error) << c.name;
    }
  }
}

// A PNG named .jpg (Pillow opens a file by its content): its size from its IHDR chunk, as the
// decode finds it, and refused there past the decoder's limit; decode_crop then hands the crop of
// the whole PNG decode, whatever DCT scaling asked for.
TEST(Png, AnImageFolderPngGivesItsSizeFromItsHeaderAndItsCropAtFullSize) {
  const fs::path dir = fs::temp_directory_path() / ("dlbench_png_named_jpg_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const int w = 37, h = 23;
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(w) * h * 3);
  for (std::size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<std::uint8_t>(i * 7 % 251);
  write_png((dir / "x.jpg").string(), w, h, 3, rgb.data());
  std::vector<std::uint8_t> bytes;
  std::string why;
  ASSERT_TRUE(read_file((dir / "x.jpg").string(), bytes, why));
  fs::remove_all(dir);
  EXPECT_TRUE(is_png(bytes));
  TransformScratch scratch;
  int width = 0, height = 0;
  ASSERT_TRUE(image_header(bytes, scratch, width, height, why)) << why;
  EXPECT_EQ(width, w);
  EXPECT_EQ(height, h);
  EXPECT_FALSE(PngDecoder(w * h - 1).header(bytes, width, height, why));
  EXPECT_EQ(why, "is 37 x 23 pixels, more than the 850 a sample may have");
  std::vector<std::uint8_t> wide = bytes;  // 40,000 x 23: few pixels, but a side past 32,768
  wide[16] = 0, wide[17] = 0, wide[18] = 0x9C, wide[19] = 0x40;
  EXPECT_FALSE(image_header(wide, scratch, width, height, why));
  EXPECT_EQ(why, "is 40000 x 23 pixels, a side longer than the 32768 a sample may have");
  std::vector<std::uint8_t> no_header(bytes.begin(), bytes.begin() + 16);
  EXPECT_FALSE(image_header(no_header, scratch, width, height, why));
  EXPECT_EQ(why, "a PNG without its IHDR chunk");
  const CropBox crop{5, 3, 17, 30};  // top, left, height, width
  DecodedCrop decoded;
  ASSERT_TRUE(decode_crop(bytes, crop, 8, JpegDecoding{true, true}, scratch, decoded, why)) << why;
  EXPECT_EQ(decoded.part.width, crop.width);
  EXPECT_EQ(decoded.part.height, crop.height);
  EXPECT_EQ(decoded.x1 - decoded.x0, crop.width);
  EXPECT_EQ(decoded.y1 - decoded.y0, crop.height);
  for (int r = 0; r < crop.height; ++r) {
    const std::size_t at = (static_cast<std::size_t>(crop.top + r) * w + static_cast<std::size_t>(crop.left)) * 3;
    ASSERT_EQ(std::memcmp(decoded.part.first + static_cast<std::size_t>(r) * decoded.part.stride, rgb.data() + at,
                          static_cast<std::size_t>(crop.width) * 3), 0) << "row " << r;
  }
  EXPECT_FALSE(decode_crop(bytes, CropBox{10, 0, 14, 5}, 8, JpegDecoding{}, scratch, decoded, why));  // rows 10 to 24 of 23
  EXPECT_EQ(why, "crop outside the image");
}

// A sample's bytes are the same whether the JPEG was decoded whole or only where its crop lies, and
// so is where decode_crop says the crop lies.
TEST(TransformJpeg, DecodingOnlyTheCropChangesNoValue) {
  std::mt19937 rng(17);
  std::mt19937_64 draws(17);
  const std::vector<std::uint8_t> jpeg = testing::gradient_jpeg(500, 375, TJSAMP_420, false, rng);
  const Normalizer normalizer;
  TransformScratch scratch;
  std::vector<float> whole(3 * 64 * 64), part(3 * 64 * 64);
  for (int i = 0; i < 20; ++i) {
    const CropBox crop = random_resized_crop(375, 500, draws);
    for (const bool dct_scaling : {false, true}) {
      std::string error;
      ASSERT_TRUE(transform_jpeg(jpeg, crop, i % 2 == 0, 64, {dct_scaling, false}, PixelLayout::nhwc, normalizer, scratch,
                                 whole.data(), error)) << error;
      ASSERT_TRUE(transform_jpeg(jpeg, crop, i % 2 == 0, 64, {dct_scaling, true}, PixelLayout::nhwc, normalizer, scratch,
                                 part.data(), error)) << error;
      EXPECT_EQ(std::memcmp(whole.data(), part.data(), whole.size() * sizeof(float)), 0) << "draw " << i;
      // And both say the same of where the crop lies in the (scaled) decode.
      DecodedCrop from_whole, from_part;
      ASSERT_TRUE(decode_crop(jpeg, crop, 64, {dct_scaling, false}, scratch, from_whole, error)) << error;
      ASSERT_TRUE(decode_crop(jpeg, crop, 64, {dct_scaling, true}, scratch, from_part, error)) << error;
      const DecodedPart &w = from_whole.part, &p = from_part.part;
      EXPECT_EQ(std::tuple(w.left, w.top, w.width, w.height), std::tuple(p.left, p.top, p.width, p.height)) << "draw " << i;
      EXPECT_EQ(std::tuple(from_whole.x0, from_whole.y0, from_whole.x1, from_whole.y1),
                std::tuple(from_part.x0, from_part.y0, from_part.x1, from_part.y1)) << "draw " << i;
    }
  }
}

// Memory whose last usable byte is followed by a page nobody may read: a read past the end faults
// at once (a gather's reads are not instrumented by AddressSanitizer).
class GuardedBytes {
 public:
  explicit GuardedBytes(std::size_t capacity) : page_(static_cast<std::size_t>(sysconf(_SC_PAGESIZE))) {
    mapped_ = (capacity + page_ - 1) / page_ * page_ + page_;
    void* p = mmap(nullptr, mapped_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::runtime_error("mmap failed");
    base_ = static_cast<std::uint8_t*>(p);
    if (mprotect(base_ + mapped_ - page_, page_, PROT_NONE) != 0) throw std::runtime_error("mprotect failed");
  }
  ~GuardedBytes() { munmap(base_, mapped_); }
  GuardedBytes(const GuardedBytes&) = delete;
  GuardedBytes& operator=(const GuardedBytes&) = delete;
  // `size` bytes that end where the guard page begins.
  std::uint8_t* last(std::size_t size) { return base_ + mapped_ - page_ - size; }

 private:
  std::size_t page_, mapped_ = 0;
  std::uint8_t* base_ = nullptr;
};

TEST(BilinearResampler, TheAvx2HorizontalPassWritesThePortablePassesBytes) {
  if (!__builtin_cpu_supports("avx2")) GTEST_SKIP() << "the gathering pass needs AVX2; this CPU resamples portably";
  std::mt19937 rng(23);
  BilinearResampler portable(false), gathering(true);
  GuardedBytes memory(409 * 3 * 60);
  int compared = 0;
  for (int trial = 0; trial < 300; ++trial) {
    // Regions cut from a wider image (rows longer than the region) and whole images, each ending
    // where a guard page begins, so that a read past the last pixel faults.
    const int width = 1 + static_cast<int>(rng() % 400), height = 1 + static_cast<int>(rng() % 60);
    const int margin = trial % 2 == 0 ? 0 : static_cast<int>(rng() % 9);
    const std::size_t stride = static_cast<std::size_t>(width + margin) * 3;
    const std::size_t bytes = stride * static_cast<std::size_t>(height - 1) + static_cast<std::size_t>(width) * 3;
    const std::span<std::uint8_t> image(memory.last(bytes), bytes);
    for (auto& v : image) v = static_cast<std::uint8_t>(rng());
    // Down by up to 8 (taps 19 wide), up, and sizes on either side of a group of 8.
    const int out_w = 1 + static_cast<int>(rng() % static_cast<unsigned>(std::min(width * 3, 300)));
    const int out_h = 1 + static_cast<int>(rng() % 40);
    const double x0 = std::uniform_real_distribution<double>(0, width * 0.3)(rng);
    const double x1 = std::uniform_real_distribution<double>(x0 + 0.5, width)(rng);
    std::vector<std::uint8_t> a(static_cast<std::size_t>(out_w * out_h * 3)), b(a.size(), 0xAB);
    portable.resize(image.data(), width, height, stride, x0, 0, x1, height, out_w, out_h, a.data());
    gathering.resize(image.data(), width, height, stride, x0, 0, x1, height, out_w, out_h, b.data());
    ASSERT_EQ(a, b) << "trial " << trial << ": " << width << "x" << height << " box x " << x0 << ".." << x1 << " to "
                    << out_w << "x" << out_h;
    // A window of a whole resize, starting anywhere (not on a group of 8).
    const int full_w = 1 + static_cast<int>(rng() % 500), full_h = 1 + static_cast<int>(rng() % 50);
    const int w = 1 + static_cast<int>(rng() % static_cast<unsigned>(full_w));
    const int h = 1 + static_cast<int>(rng() % static_cast<unsigned>(full_h));
    const CropBox window{static_cast<int>(rng() % static_cast<unsigned>(full_h - h + 1)),
                         static_cast<int>(rng() % static_cast<unsigned>(full_w - w + 1)), h, w};
    std::vector<std::uint8_t> c(static_cast<std::size_t>(w * h * 3)), d(c.size(), 0xCD);
    portable.resize_window(image.data(), width, height, stride, full_w, full_h, window, c.data());
    gathering.resize_window(image.data(), width, height, stride, full_w, full_h, window, d.data());
    ASSERT_EQ(c, d) << "trial " << trial << ": window " << window.left << "," << window.top << " " << w << "x" << h
                    << " of " << full_w << "x" << full_h << " from " << width << "x" << height;
    compared += 2;
  }
  EXPECT_EQ(compared, 600);
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
  n.write(rgb.data(), 2, 2, false, PixelLayout::nchw, chw.data());
  n.write(rgb.data(), 2, 2, false, PixelLayout::nhwc, hwc.data());
  n.write(rgb.data(), 2, 2, true, PixelLayout::nchw, flipped.data());
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
    std::mt19937 rng(3);
    for (int c = 0; c < 3; ++c) {
      fs::create_directories(root_ / ("c" + std::to_string(c)));
      for (int i = 0; i < 10; ++i) {
        const int w = 40 + 13 * i, h = 30 + 17 * c;
        std::vector<std::uint8_t> rgb(static_cast<std::size_t>(w * h * 3));
        for (auto& v : rgb) v = static_cast<std::uint8_t>(rng() % 256);
        testing::write_jpeg(root_ / ("c" + std::to_string(c)) / ("i" + std::to_string(i) + ".JPEG"), rgb, w, h);
      }
    }
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

// The files torchvision's ImageFolder lists: a lower-cased name ending in one of its
// IMG_EXTENSIONS (a file named just ".jpg" too); the rest are counted and ignored.
TEST(ImageFolderScan, ListsTheFilesTorchvisionListsInAnyCase) {
  const fs::path root = fs::temp_directory_path() / ("dlbench_names_" + std::to_string(::getpid()));
  fs::create_directories(root / "a" / "deeper");
  const std::vector<std::string> listed{".jpg", "q.tif", "r.pgm", "s.ppm", "t.bmp", "u.TIFF", "v.webp", "w.PnG",
                                        "x.jpg", "y.JPEG", "z.png"};
  for (const auto& name : listed) std::ofstream(root / "a" / name) << "x";
  std::ofstream(root / "a" / "deeper" / "k.jpeg") << "x";
  for (const char* ignored : {"notes.txt", "anim.gif", "jpg", "x.jpg.bak"}) std::ofstream(root / "a" / ignored) << "x";
  const ImageFolder folder = scan_image_folder(root.string());
  std::vector<std::string> names;
  for (const ImageFile& f : folder.files) names.push_back(fs::path(f.path).lexically_relative(root / "a").string());
  std::vector<std::string> expected = listed;
  expected.push_back("deeper/k.jpeg");
  std::sort(expected.begin(), expected.end());
  EXPECT_EQ(names, expected);
  EXPECT_EQ(folder.ignored_files, 4);
  fs::remove_all(root);
}

// A WebP image, lossless and lossy, whatever its name: its size from its header and its crop at
// full size from the whole decode (golden_test.py holds the pixels to Pillow's); a damaged one and
// a header past Pillow's pixel limit are refused.
TEST(Webp, AnImageFolderWebpGivesItsSizeAndItsCropAtFullSize) {
  const int w = 37, h = 23;
  std::vector<std::uint8_t> rgb(static_cast<std::size_t>(w) * h * 3);
  for (std::size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<std::uint8_t>(i * 7 % 251);
  for (const bool lossless : {true, false}) {
    std::uint8_t* encoded = nullptr;
    const std::size_t size = lossless ? WebPEncodeLosslessRGB(rgb.data(), w, h, w * 3, &encoded)
                                      : WebPEncodeRGB(rgb.data(), w, h, w * 3, 90, &encoded);
    ASSERT_GT(size, 0u);
    const std::vector<std::uint8_t> webp(encoded, encoded + size);
    WebPFree(encoded);
    ASSERT_TRUE(is_webp(webp));
    TransformScratch scratch;
    int width = 0, height = 0;
    std::string why;
    ASSERT_TRUE(image_header(webp, scratch, width, height, why)) << why;
    EXPECT_EQ(std::pair(width, height), std::pair(w, h));
    const CropBox crop{5, 3, 11, 20};
    DecodedCrop decoded;
    ASSERT_TRUE(decode_crop(webp, crop, 8, JpegDecoding{}, scratch, decoded, why)) << why;
    EXPECT_EQ(std::tuple(decoded.part.left, decoded.part.top, decoded.part.width, decoded.part.height),
              std::tuple(3, 5, 20, 11));
    EXPECT_EQ(std::tuple(decoded.x0, decoded.y0, decoded.x1, decoded.y1), std::tuple(0.0, 0.0, 20.0, 11.0));
    if (lossless) {  // lossless: the very pixels, row by row
      for (int r = 0; r < crop.height; ++r) {
        const std::size_t at = (static_cast<std::size_t>(crop.top + r) * w + static_cast<std::size_t>(crop.left)) * 3;
        ASSERT_EQ(std::memcmp(decoded.part.first + static_cast<std::size_t>(r) * decoded.part.stride, rgb.data() + at,
                              static_cast<std::size_t>(crop.width) * 3), 0) << "row " << r;
      }
    }
    std::vector<std::uint8_t> cut(webp.begin(), webp.begin() + static_cast<std::ptrdiff_t>(webp.size() / 2));
    EXPECT_FALSE(decode_crop(cut, crop, 8, JpegDecoding{}, scratch, decoded, why));
    EXPECT_FALSE(why.empty());
  }
  // A lossless header claiming 16,383 x 16,383 (past 178,956,970 pixels): refused by its size.
  std::uint8_t* encoded = nullptr;
  const std::size_t size = WebPEncodeLosslessRGB(rgb.data(), w, h, w * 3, &encoded);
  std::vector<std::uint8_t> bomb(encoded, encoded + size);
  WebPFree(encoded);
  ASSERT_EQ(std::string(bomb.begin() + 12, bomb.begin() + 16), "VP8L");
  // VP8L: a signature byte 0x2f, then 14 bits of width - 1 and 14 of height - 1, little-endian.
  const std::uint32_t bits = (16383u - 1) | ((16383u - 1) << 14) | (static_cast<std::uint32_t>(bomb[24]) & 0xF0u) << 24;
  for (int i = 0; i < 4; ++i) bomb[21 + static_cast<std::size_t>(i)] = static_cast<std::uint8_t>(bits >> (8 * i));
  TransformScratch scratch;
  int width = 0, height = 0;
  std::string why;
  EXPECT_FALSE(image_header(bomb, scratch, width, height, why));
  EXPECT_EQ(why, "is 16383 x 16383 pixels, more than the 178956970 an image may have (Pillow's decompression-bomb limit)");
}

// An image of a format Pillow reads and dlbench does not decode is named, not taken for a broken
// JPEG, from its header on.
TEST(TransformJpeg, AnImageOfAnotherFormatIsNamedNotDecoded) {
  const auto bytes = [](std::string_view text) { return std::vector<std::uint8_t>(text.begin(), text.end()); };
  const std::vector<std::pair<std::vector<std::uint8_t>, std::string>> cases{
      {bytes(std::string_view("BM\x36\x00\x00\x00", 6)), "BMP"},
      {bytes(std::string_view("II*\x00\x08\x00", 6)), "TIFF"},
      {bytes(std::string_view("MM\x00*\x00\x00", 6)), "TIFF"},
      {bytes("GIF89a\x01\x00"), "GIF"},
      {bytes("P6\n7 5\n255\n"), "PPM, PGM or PBM"},
      {bytes("P5 7 5 255 "), "PPM, PGM or PBM"},
  };
  TransformScratch scratch;
  for (const auto& [file, format] : cases) {
    const std::string said =
        "a " + format + " image: dlbench decodes JPEG, PNG and WebP images only (Pillow, and so torchvision, reads it)";
    int width = 0, height = 0;
    std::string error;
    EXPECT_FALSE(image_header(file, scratch, width, height, error)) << format;
    EXPECT_EQ(error, said);
    DecodedCrop decoded;
    error.clear();
    EXPECT_FALSE(decode_crop(file, CropBox{0, 0, 1, 1}, 8, JpegDecoding{}, scratch, decoded, error)) << format;
    EXPECT_EQ(error, said);
  }
  // A "P" that starts no netpbm header is left to the JPEG decoder's answer.
  std::string error;
  EXPECT_FALSE(not_decoded_here(bytes("P7x"), error));
  EXPECT_FALSE(not_decoded_here(bytes("Pillow"), error));
}

TEST_F(JpegFolder, BatchesAreTheSameWithOneOrFourThreadsAndSkipTheBrokenFile) {
  const ImageFolder f = scan_image_folder(root_.string());
  const ImageFolderSource source(f, 32, PixelLayout::nchw);
  InputPipelineConfig config;
  config.batch_size = 5;
  config.prefetch_batches = 2;
  std::vector<std::vector<float>> runs;
  for (const int threads : {1, 4}) {
    config.threads = threads;
    InputPipeline p(source, config);
    std::vector<float> all;
    for (int b = 0; b < 14; ++b) {  // 70 images: over two epochs of 31 files
      const Batch batch = p.next();
      all.insert(all.end(), batch.floats(), batch.floats() + 5 * 3 * 32 * 32);
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

// A model that computes in fp16 or bf16 gets its batches in that type from the decoding threads,
// bit for bit what converting the float batch would give (round to nearest even), in memory the
// caller's allocator gave (page-locked, from a GPU backend), one batch of bytes per slot.
TEST_F(JpegFolder, HalfPrecisionBatchesAreTheFloatBatchesConvertedInTheCallersMemory) {
  const ImageFolder f = scan_image_folder(root_.string());
  const ImageFolderSource source(f, 32, PixelLayout::nhwc);
  constexpr std::size_t kBatchValues = 5 * 3 * 32 * 32;
  InputPipelineConfig config;
  config.batch_size = 5;
  config.threads = 3;
  std::vector<std::vector<float>> floats;
  {
    InputPipeline p(source, config);
    for (int b = 0; b < 8; ++b) {
      const Batch batch = p.next();
      EXPECT_EQ(batch.pixel_type, DType::fp32);
      floats.emplace_back(batch.floats(), batch.floats() + kBatchValues);
    }
  }
  for (const DType type : {DType::fp16, DType::bf16}) {
    std::vector<std::size_t> allocated;
    config.pixel_type = type;
    config.allocate_pixels = [&](std::size_t bytes) {
      allocated.push_back(bytes);
      return std::shared_ptr<void>(new std::uint16_t[bytes / 2], [](void* q) { delete[] static_cast<std::uint16_t*>(q); });
    };
    InputPipeline p(source, config);
    EXPECT_EQ(allocated, std::vector<std::size_t>(static_cast<std::size_t>(config.prefetch_batches) + 1, kBatchValues * 2));
    for (int b = 0; b < 8; ++b) {
      const Batch batch = p.next();
      ASSERT_EQ(batch.pixel_type, type);
      EXPECT_THROW((void)batch.floats(), std::logic_error);
      const auto* bits = static_cast<const std::uint16_t*>(batch.pixels);
      std::size_t differing = 0;
      for (std::size_t i = 0; i < kBatchValues; ++i) {
        const float v = floats[static_cast<std::size_t>(b)][i];
        const std::uint16_t expected =
            type == DType::fp16 ? dlbench::worker::fp16::from_float(v).bits : dlbench::worker::bf16::from_float(v).bits;
        differing += bits[i] != expected;
      }
      EXPECT_EQ(differing, 0u) << "batch " << b << " " << dlbench::worker::to_string(type);
    }
  }
}

TEST_F(JpegFolder, ASmallShardPerRankStillFillsBatches) {
  const ImageFolder f = scan_image_folder(root_.string());
  const ImageFolderSource source(f, 16, PixelLayout::nchw);
  InputPipelineConfig config;
  config.batch_size = 16;  // larger than the shard: the stream wraps into the next epoch
  config.world = 3;
  config.rank = 2;
  InputPipeline p(source, config);
  EXPECT_EQ(p.shard_size(), 10u);
  for (int b = 0; b < 3; ++b) p.next();
  config.world = 40;
  config.rank = 35;  // 31 files: ranks 31 to 39 get none
  EXPECT_THROW(InputPipeline(source, config), DataUnavailable);
}

// The batches' memory is faulted in as the pipeline starts, as a GPU's page-locked memory is: a
// thread's first write into a fresh batch would otherwise wait on the kernel (in a short
// `dlbench-input measure`, a quarter of the threads' rate). A pipeline without an allocator is refused.
TEST_F(JpegFolder, ThePipelinesOwnBatchMemoryIsResidentBeforeAnyBatchIsWritten) {
  InputPipelineConfig config;
  const std::size_t bytes = (std::size_t{6} << 20) + 100;
  const auto memory = config.allocate_pixels(bytes);
  const auto pages = dlbench::testing::residency_of(memory.get(), bytes);
  EXPECT_GT(pages.pages, 1000u);
  EXPECT_EQ(pages.resident, pages.pages);
  const ImageFolder f = scan_image_folder(root_.string());
  const ImageFolderSource source(f, 16, PixelLayout::nchw);
  config.allocate_pixels = nullptr;
  try {
    InputPipeline p(source, config);
    FAIL() << "a pipeline without memory for its batches was made";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("allocate_pixels"), std::string::npos) << e.what();
  }
}

// A Cityscapes tree of small pairs, one of them broken.
class CityscapesTree : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("dlbench_cityscapes_" + std::to_string(::getpid()));
    std::mt19937 rng(4);
    std::vector<std::uint8_t> rgb(40 * 24 * 3), ids(40 * 24);
    for (const char* city : {"aachen", "bonn"}) {
      fs::create_directories(root_ / "leftImg8bit" / "train" / city);
      fs::create_directories(root_ / "gtFine" / "train" / city);
      for (int i = 0; i < 5; ++i) {
        for (auto& v : rgb) v = static_cast<std::uint8_t>(rng());
        for (auto& v : ids) v = static_cast<std::uint8_t>(rng() % 40);
        const std::string stem = std::string(city) + "_00000" + std::to_string(i) + "_000019";
        write_png((root_ / "leftImg8bit" / "train" / city / (stem + "_leftImg8bit.png")).string(), 40, 24, 3, rgb.data());
        write_png((root_ / "gtFine" / "train" / city / (stem + "_gtFine_labelIds.png")).string(), 40, 24, 1, ids.data());
      }
    }
    std::ofstream(root_ / "leftImg8bit" / "train" / "bonn" / "bonn_broken_leftImg8bit.png") << "not a png";
    std::ofstream(root_ / "gtFine" / "train" / "bonn" / "bonn_broken_gtFine_labelIds.png") << "not a png";
    std::ofstream(root_ / "leftImg8bit" / "train" / "bonn" / "bonn_alone_leftImg8bit.png") << "no labels beside it";
  }
  void TearDown() override { fs::remove_all(root_); }
  fs::path root_;
};

TEST_F(CityscapesTree, PairsImagesWithTheirLabelsCityByCity) {
  const CityscapesSet set = scan_cityscapes(root_.string());
  EXPECT_EQ(set.cities, (std::vector<std::string>{"aachen", "bonn"}));
  ASSERT_EQ(set.pairs.size(), 11u);
  EXPECT_EQ(set.unpaired_images, 1);
  EXPECT_NE(set.pairs.front().image.find("aachen_000000_000019_leftImg8bit.png"), std::string::npos);
  EXPECT_NE(set.pairs.front().labels.find("gtFine/train/aachen/aachen_000000_000019_gtFine_labelIds.png"),
            std::string::npos);
  EXPECT_THROW(scan_cityscapes((root_ / "leftImg8bit").string()), DataUnavailable);
}

TEST_F(CityscapesTree, BatchesAreTheSameWithOneOrThreeThreadsAndHoldTrainingIds) {
  const CityscapesSet set = scan_cityscapes(root_.string());
  InputPipelineConfig config;
  config.batch_size = 3;
  std::vector<std::vector<float>> pixel_runs;
  std::vector<std::vector<std::int32_t>> label_runs;
  for (const auto& [threads, layout] : std::vector<std::pair<int, PixelLayout>>{{1, PixelLayout::nchw},
                                                                                 {3, PixelLayout::nchw},
                                                                                 {2, PixelLayout::nhwc}}) {
    const CityscapesSource source(set, 16, 32, layout);
    EXPECT_EQ(source.pixel_floats(), 3u * 16 * 32);
    EXPECT_EQ(source.label_count(), 16u * 32);
    config.threads = threads;
    InputPipeline p(source, config);
    std::vector<float> pixels;
    std::vector<std::int32_t> labels;
    for (int b = 0; b < 9; ++b) {  // 27 samples: over two epochs of 11 pairs
      const Batch batch = p.next();
      pixels.insert(pixels.end(), batch.floats(), batch.floats() + 3 * 3 * 16 * 32);
      labels.insert(labels.end(), batch.labels, batch.labels + 3 * 16 * 32);
    }
    EXPECT_EQ(p.skipped_count(), 1);
    for (const std::int32_t l : labels) ASSERT_TRUE((l >= 0 && l < kCityscapesClasses) || l == kIgnoredPixel) << l;
    EXPECT_GT(std::count(labels.begin(), labels.end(), kIgnoredPixel), 0);
    EXPECT_LT(std::count(labels.begin(), labels.end(), kIgnoredPixel), static_cast<long>(labels.size()));
    if (layout == PixelLayout::nhwc) {
      // The same samples, channels interleaved.
      std::vector<float> planar(pixels.size());
      for (std::size_t s = 0; s < 27; ++s) {
        for (std::size_t i = 0; i < 16 * 32; ++i) {
          for (std::size_t c = 0; c < 3; ++c) planar[s * 3 * 512 + c * 512 + i] = pixels[s * 3 * 512 + i * 3 + c];
        }
      }
      pixels = planar;
    }
    pixel_runs.push_back(std::move(pixels));
    label_runs.push_back(std::move(labels));
  }
  EXPECT_EQ(pixel_runs[0], pixel_runs[1]);
  EXPECT_EQ(pixel_runs[0], pixel_runs[2]);
  EXPECT_EQ(label_runs[0], label_runs[1]);
  EXPECT_EQ(label_runs[0], label_runs[2]);
}

}  // namespace
}  // namespace dlbench::input

// dlbench-input measure --check-values: each batch's values as the device reads them, whatever
// type the threads handed out; an inf or NaN is counted, never taken for the smallest or largest.
TEST(BatchValues, CountsWhatIsNotFiniteAndBoundsWhatIs) {
  const float inf = std::numeric_limits<float>::infinity();
  const std::vector<float> floats = {0.5f, -2.25f, inf, 1.75f, std::nanf(""), 70000.0f, -0.125f, 2.5f};
  for (const dlbench::worker::DType type :
       {dlbench::worker::DType::fp32, dlbench::worker::DType::fp16, dlbench::worker::DType::bf16}) {
    std::vector<std::uint16_t> narrow(floats.size());
    const void* pixels = floats.data();
    if (type != dlbench::worker::DType::fp32) {
      dlbench::worker::store_floats(floats.data(), floats.size(), type, narrow.data());
      pixels = narrow.data();
    }
    dlbench::input::BatchValues values;
    EXPECT_EQ(values.min(), std::nullopt);
    values.scan({pixels, type, nullptr}, 4);  // 0.5, -2.25, inf, 1.75
    values.scan({pixels, type, nullptr}, 2);  // 0.5, -2.25: nothing more to count
    values.scan({pixels, type, nullptr}, floats.size());
    const std::string what = std::string(dlbench::worker::to_string(type));
    EXPECT_EQ(values.batches(), 3) << what;
    EXPECT_EQ(values.batches_with_non_finite(), 2) << what;
    // 70,000 is past fp16's range: stored as inf there, as amp's batch would hold it.
    const long past_range = type == dlbench::worker::DType::fp16 ? 1 : 0;
    EXPECT_EQ(values.non_finite(), 1 + 2 + past_range) << what;
    EXPECT_EQ(values.min(), -2.25f) << what;
    EXPECT_EQ(values.max(), type == dlbench::worker::DType::fp32   ? 70000.0f
                            : type == dlbench::worker::DType::bf16 ? 70144.0f  // bf16's nearest
                                                                   : 2.5f)
        << what;
  }
  dlbench::input::BatchValues tokens;
  const std::int32_t ids[2] = {1, 2};
  EXPECT_THROW(tokens.scan({ids, dlbench::worker::DType::int32, nullptr}, 2), std::invalid_argument);
}
