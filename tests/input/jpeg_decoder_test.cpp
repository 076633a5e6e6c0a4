// The JPEG decoder on its own: a part's bytes against the whole decode's, CMYK made RGB as Pillow
// makes it, and the files it refuses (truncated, bombs, endless scans), whole or in part.
#include <gtest/gtest.h>
#include <turbojpeg.h>

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "input/jpeg_decoder.hpp"
#include "write_jpeg.hpp"

namespace dlbench::input {
namespace {

using testing::gradient_jpeg;

// Decoding only a crop's rows and columns gives the bytes the whole decode holds there, in every
// subsampling, baseline and progressive, at every DCT scale, parts at the image's edges included
// (fancy upsampling reads neighbours the part's window must hold too).
TEST(JpegDecoder, APartHoldsTheBytesTheWholeImageHoldsThere) {
  std::mt19937 rng(11);
  JpegDecoder whole, part;
  int parts = 0;
  for (const int subsampling : {TJSAMP_444, TJSAMP_422, TJSAMP_420, TJSAMP_440, TJSAMP_GRAY}) {
    for (const bool progressive : {false, true}) {
      const std::vector<std::uint8_t> jpeg = gradient_jpeg(203 + subsampling * 17, 157 + subsampling * 11, subsampling,
                                                       progressive, rng);
      for (const int denom : {1, 2, 4, 8}) {
        int width = 0, height = 0;
        std::string error;
        ASSERT_TRUE(whole.decode(jpeg, 1, denom, width, height, error)) << error;
        for (int k = 0; k < 12; ++k) {
          CropBox box;
          box.width = 1 + static_cast<int>(rng() % static_cast<unsigned>(width));
          box.height = 1 + static_cast<int>(rng() % static_cast<unsigned>(height));
          // Every fourth part at an edge: left, top, right, bottom in turn.
          box.left = k % 4 == 0 ? 0 : (k % 4 == 2 ? width - box.width : static_cast<int>(rng() % static_cast<unsigned>(width - box.width + 1)));
          box.top = k % 4 == 1 ? 0 : (k % 4 == 3 ? height - box.height : static_cast<int>(rng() % static_cast<unsigned>(height - box.height + 1)));
          DecodedPart got;
          ASSERT_TRUE(part.decode_part(jpeg, 1, denom, box, got, error)) << error;
          ASSERT_EQ(got.width, box.width);
          ASSERT_EQ(got.height, box.height);
          for (int r = 0; r < box.height; ++r) {
            const std::uint8_t* expected = whole.pixels() + (static_cast<std::size_t>(box.top + r) * static_cast<std::size_t>(width) +
                                                             static_cast<std::size_t>(box.left)) * 3;
            ASSERT_EQ(std::memcmp(got.first + static_cast<std::size_t>(r) * got.stride, expected,
                                  static_cast<std::size_t>(box.width) * 3),
                      0)
                << "subsampling " << subsampling << (progressive ? " progressive" : "") << ", scale 1/" << denom
                << ", part " << box.left << "," << box.top << " " << box.width << "x" << box.height << ", row " << r;
          }
          ++parts;
        }
      }
    }
  }
  EXPECT_EQ(parts, 5 * 2 * 4 * 12);
}

// A CMYK JPEG (TurboJPEG writes one as YCCK) is made RGB as Pillow makes it, from libjpeg's CMYK
// values: whole, the conversion of TurboJPEG's own CMYK decode, pixel by pixel (the in-place
// conversion overlaps its input); in part, the whole decode's bytes, at every DCT scale.
TEST(JpegDecoder, ACmykJpegIsMadeRgbAsPillowMakesItWholeOrInPart) {
  std::mt19937 rng(21);
  const int w = 181, h = 139;
  std::vector<std::uint8_t> cmyk(static_cast<std::size_t>(w) * h * 4);
  for (std::size_t i = 0; i < cmyk.size(); ++i) cmyk[i] = static_cast<std::uint8_t>((i * 37 + rng() % 16) % 256);
  for (const int subsampling : {TJSAMP_444, TJSAMP_420}) {
    for (const int flags : {0, TJFLAG_PROGRESSIVE}) {
      tjhandle tj = tjInitCompress();
      unsigned char* encoded = nullptr;
      unsigned long size = 0;
      ASSERT_EQ(tjCompress2(tj, cmyk.data(), w, 0, h, TJPF_CMYK, &encoded, &size, subsampling, 90, flags), 0)
          << tjGetErrorStr2(tj);
      const std::vector<std::uint8_t> jpeg(encoded, encoded + size);
      tjFree(encoded);
      tjDestroy(tj);
      tjhandle plain = tjInitDecompress();
      std::vector<std::uint8_t> raw(cmyk.size());
      ASSERT_EQ(tjDecompress2(plain, jpeg.data(), size, raw.data(), w, 0, h, TJPF_CMYK, TJFLAG_ACCURATEDCT), 0);
      tjDestroy(plain);
      JpegDecoder whole, part;
      int width = 0, height = 0;
      std::string error;
      ASSERT_TRUE(whole.decode(jpeg, 1, 1, width, height, error)) << error;
      for (std::size_t i = 0; i < static_cast<std::size_t>(w) * h; ++i) {
        const int k = raw[4 * i + 3];
        for (int c = 0; c < 3; ++c) {
          const int product = (255 - raw[4 * i + static_cast<std::size_t>(c)]) * k + 128;  // Pillow's MULDIV255
          ASSERT_EQ(whole.pixels()[3 * i + static_cast<std::size_t>(c)], k - (((product >> 8) + product) >> 8))
              << "pixel " << i << ", channel " << c << ", subsampling " << subsampling << ", flags " << flags;
        }
      }
      for (const int denom : {1, 2, 4}) {
        ASSERT_TRUE(whole.decode(jpeg, 1, denom, width, height, error)) << error;
        const CropBox box{height / 3, width / 4, height / 2, width / 2};
        DecodedPart got;
        ASSERT_TRUE(part.decode_part(jpeg, 1, denom, box, got, error)) << error;
        for (int r = 0; r < box.height; ++r) {
          const std::uint8_t* expected =
              whole.pixels() + (static_cast<std::size_t>(box.top + r) * static_cast<std::size_t>(width) +
                                static_cast<std::size_t>(box.left)) * 3;
          ASSERT_EQ(std::memcmp(got.first + static_cast<std::size_t>(r) * got.stride, expected,
                                static_cast<std::size_t>(box.width) * 3), 0)
              << "scale 1/" << denom << ", row " << r << ", subsampling " << subsampling << ", flags " << flags;
        }
      }
    }
  }
}

// What the whole decode refuses, a part refuses too: a truncated file (PIL: "image file is
// truncated"), however little of it the part needs, and what is not a JPEG; a part outside the
// image is refused before decoding. The decoder decodes on after each.
TEST(JpegDecoder, APartRefusesWhatTheWholeDecodeRefuses) {
  std::mt19937 rng(5);
  const std::vector<std::uint8_t> jpeg = gradient_jpeg(160, 120, TJSAMP_420, false, rng);
  const std::vector<std::uint8_t> truncated(jpeg.begin(), jpeg.begin() + static_cast<std::ptrdiff_t>(jpeg.size() * 2 / 3));
  JpegDecoder decoder;
  DecodedPart got;
  std::string error;
  int width = 0, height = 0;
  EXPECT_FALSE(decoder.decode(truncated, 1, 1, width, height, error));
  const std::string whole_error = error;
  error.clear();
  EXPECT_FALSE(decoder.decode_part(truncated, 1, 1, CropBox{0, 0, 8, 8}, got, error));  // the top rows alone are whole
  EXPECT_EQ(error, whole_error);
  EXPECT_NE(error.find("Premature end"), std::string::npos) << error;
  const std::vector<std::uint8_t> garbage{'n', 'o', 't', ' ', 'a', ' ', 'j', 'p', 'e', 'g'};
  EXPECT_FALSE(decoder.decode_part(garbage, 1, 1, CropBox{0, 0, 1, 1}, got, error));
  EXPECT_FALSE(error.empty());
  EXPECT_FALSE(decoder.decode_part(jpeg, 1, 1, CropBox{100, 0, 21, 10}, got, error));  // rows 100 to 120 of 120
  EXPECT_EQ(error, "a part outside the image");
  ASSERT_TRUE(decoder.decode_part(jpeg, 1, 2, CropBox{10, 20, 30, 40}, got, error)) << error;
  EXPECT_EQ(got.left, 20);
  EXPECT_EQ(got.top, 10);
}

// `jpeg` with its frame header (SOF0 or SOF2) claiming width × height: a few hundred bytes that
// say a bomb's size.
std::vector<std::uint8_t> claiming_size(std::vector<std::uint8_t> jpeg, int width, int height) {
  for (std::size_t i = 2; i + 9 < jpeg.size();) {
    const std::uint8_t marker = jpeg[i + 1];
    const std::size_t length = static_cast<std::size_t>(jpeg[i + 2]) << 8 | jpeg[i + 3];
    if (marker == 0xC0 || marker == 0xC2) {
      jpeg[i + 5] = static_cast<std::uint8_t>(height >> 8);
      jpeg[i + 6] = static_cast<std::uint8_t>(height);
      jpeg[i + 7] = static_cast<std::uint8_t>(width >> 8);
      jpeg[i + 8] = static_cast<std::uint8_t>(width);
      return jpeg;
    }
    i += 2 + length;
  }
  ADD_FAILURE() << "no frame header";
  return jpeg;
}

// `jpeg` (progressive) with its last scan repeated until it has `scans` scans: libjpeg decodes on
// through a repeated scan with a warning, and each one is a pass over the whole image.
std::vector<std::uint8_t> with_scans(const std::vector<std::uint8_t>& jpeg, int scans) {
  std::vector<std::size_t> starts;
  for (std::size_t i = 0; i + 1 < jpeg.size(); ++i) {
    if (jpeg[i] == 0xFF && jpeg[i + 1] == 0xDA) starts.push_back(i);
  }
  const std::size_t end = jpeg.size() - 2;  // the EOI marker
  EXPECT_TRUE(jpeg[end] == 0xFF && jpeg[end + 1] == 0xD9);
  std::vector<std::uint8_t> out(jpeg.begin(), jpeg.begin() + static_cast<std::ptrdiff_t>(end));
  for (int extra = scans - static_cast<int>(starts.size()); extra > 0; --extra) {
    out.insert(out.end(), jpeg.begin() + static_cast<std::ptrdiff_t>(starts.back()),
               jpeg.begin() + static_cast<std::ptrdiff_t>(end));
  }
  out.insert(out.end(), {0xFF, 0xD9});
  return out;
}

// A header past Pillow's decompression-bomb limit (2 × 89,478,485 pixels, where torchvision's
// ImageFolder fails too) is refused by its size, before any decoding: a progressive 65,500 × 65,500
// header took a thread more than a minute and 7 GB before. At the limit it is a JPEG like any other.
TEST(JpegDecoder, AHeaderPastPillowsPixelLimitIsRefusedBeforeAnyDecoding) {
  std::mt19937 rng(3);
  for (const bool progressive : {false, true}) {
    const std::vector<std::uint8_t> small = gradient_jpeg(64, 48, TJSAMP_420, progressive, rng);
    JpegDecoder decoder;
    int width = 0, height = 0;
    std::string error;
    for (const auto& [w, h] : {std::pair{65500, 65500}, std::pair{13378, 13377}}) {
      const std::vector<std::uint8_t> bomb = claiming_size(small, w, h);
      EXPECT_FALSE(decoder.header(bomb, width, height, error));
      EXPECT_EQ(error, "is " + std::to_string(w) + " x " + std::to_string(h) +
                           " pixels, more than the 178956970 a JPEG may have (Pillow's decompression-bomb limit)");
      const std::string header_error = error;
      EXPECT_FALSE(decoder.decode(bomb, 1, 8, width, height, error));
      EXPECT_EQ(error, header_error);
      DecodedPart part;
      EXPECT_FALSE(decoder.decode_part(bomb, 1, 8, CropBox{0, 0, 8, 8}, part, error));
      EXPECT_EQ(error, header_error);
    }
    ASSERT_TRUE(decoder.header(claiming_size(small, 13000, 13765), width, height, error)) << error;  // 178,945,000
    EXPECT_EQ(width, 13000);
    EXPECT_EQ(height, 13765);
    ASSERT_TRUE(decoder.decode(small, 1, 1, width, height, error)) << error;  // and it decodes on
  }
}

// A progressive JPEG of more than 500 scans is refused, whole (TurboJPEG's TJFLAG_LIMITSCANS) or in
// part (the same check in libjpeg's progress monitor), with the same words; 500 scans decode.
TEST(JpegDecoder, AProgressiveJpegOfMoreThan500ScansIsRefusedWholeOrInPart) {
  std::mt19937 rng(9);
  const std::vector<std::uint8_t> jpeg = gradient_jpeg(64, 48, TJSAMP_420, true, rng);
  JpegDecoder decoder;
  int width = 0, height = 0;
  std::string error;
  DecodedPart part;
  const std::vector<std::uint8_t> at_limit = with_scans(jpeg, 500), past = with_scans(jpeg, 501);
  EXPECT_TRUE(decoder.decode(at_limit, 1, 1, width, height, error)) << error;
  EXPECT_TRUE(decoder.decode_part(at_limit, 1, 2, CropBox{4, 4, 8, 8}, part, error)) << error;
  EXPECT_FALSE(decoder.decode(past, 1, 1, width, height, error));
  EXPECT_EQ(error, "Progressive JPEG image has more than 500 scans");
  error.clear();
  EXPECT_FALSE(decoder.decode_part(past, 1, 2, CropBox{4, 4, 8, 8}, part, error));
  EXPECT_EQ(error, "Progressive JPEG image has more than 500 scans");
  ASSERT_TRUE(decoder.decode_part(jpeg, 1, 2, CropBox{4, 4, 8, 8}, part, error)) << error;  // and decodes on
}

// `jpeg` with `bytes` inserted halfway through its first scan's entropy-coded data.
std::vector<std::uint8_t> inserted_in_scan(std::vector<std::uint8_t> jpeg, std::vector<std::uint8_t> bytes) {
  std::size_t scan = 0;
  for (std::size_t i = 2; i + 3 < jpeg.size() && scan == 0;) {
    const std::size_t length = static_cast<std::size_t>(jpeg[i + 2]) << 8 | jpeg[i + 3];
    if (jpeg[i + 1] == 0xDA) scan = i + 2 + length;
    i += 2 + length;
  }
  EXPECT_NE(scan, 0u) << "no scan";
  std::size_t at = scan + (jpeg.size() - 2 - scan) / 2;
  while (jpeg[at - 1] == 0xFF) ++at;  // not between a 0xFF and its stuffed 0x00
  jpeg.insert(jpeg.begin() + static_cast<std::ptrdiff_t>(at), bytes.begin(), bytes.end());
  return jpeg;
}

// Damaged files are refused or decoded as PIL refuses or decodes them (tests/input/golden_test.py
// asks Pillow itself), whole and in part alike:
// - a libjpeg error after a warning is an error: a marker libjpeg cannot read, met inside a scan
//   (the warning: the scan's data ends early). TurboJPEG 2.1, which decoded whole images until
//   2026-12-03, called that a warning, and the image was decoded with its rows from there left as
//   they were;
// - a file that ends before its last row is truncated; one that ends after it, inside a marker
//   that follows the rows (an APP2 claiming more bytes than are left), is decoded, as PIL decodes
//   it (the crop's path refused a baseline one until 2026-12-03);
// - a file that does not start with 0xFF 0xD8 0xFF, which libjpeg would decode after a warning, is
//   not a JPEG to Pillow, nor one whose JFIF segment is too short for Pillow's own reader.
TEST(JpegDecoder, RefusesWhatPillowRefusesAndDecodesWhatItDecodesWholeOrInPart) {
  std::mt19937 rng(13);
  const std::vector<std::uint8_t> baseline = gradient_jpeg(96, 64, TJSAMP_420, false, rng);
  const std::vector<std::uint8_t> progressive = gradient_jpeg(96, 64, TJSAMP_420, true, rng);
  std::vector<std::uint8_t> junk_after_soi = baseline;
  junk_after_soi[2] = 0x0B;
  // TurboJPEG writes a JFIF APP0 segment of 16 bytes first: cut to "JFIF" alone, the rest junk.
  std::vector<std::uint8_t> short_jfif = baseline;
  ASSERT_EQ(std::vector<std::uint8_t>(short_jfif.begin() + 2, short_jfif.begin() + 10),
            (std::vector<std::uint8_t>{0xFF, 0xE0, 0, 16, 'J', 'F', 'I', 'F'}));
  short_jfif[5] = 6;
  struct Case {
    const char* name;
    std::vector<std::uint8_t> bytes;
    const char* error;  // null: decoded
  };
  const std::vector<Case> cases{
      {"unknown marker in the scan", inserted_in_scan(baseline, {0xFF, 0x6E}), "Unsupported marker type 0x6e"},
      {"APP2 past the end, baseline", inserted_in_scan(baseline, {0xFF, 0xE2, 0x7F, 0xFF}), nullptr},
      {"APP2 past the end, progressive", inserted_in_scan(progressive, {0xFF, 0xE2, 0x7F, 0xFF}), nullptr},
      {"no EOI", std::vector<std::uint8_t>(baseline.begin(), baseline.end() - 2), "Premature end of JPEG file"},
      {"junk after SOI", junk_after_soi, "Not a JPEG file: it does not start with 0xff 0xd8 0xff, as Pillow requires"},
      {"JFIF segment too short", short_jfif,
       "its JFIF (APP0) segment holds 4 bytes, too few for Pillow to read its version: Pillow cannot identify the file"},
  };
  JpegDecoder decoder;
  for (const Case& c : cases) {
    for (const int denom : {1, 4}) {
      int width = 0, height = 0;
      std::string whole_error, part_error;
      const bool whole = decoder.decode(c.bytes, 1, denom, width, height, whole_error);
      DecodedPart part;
      const bool in_part = decoder.decode_part(c.bytes, 1, denom, CropBox{2, 3, 5, 7}, part, part_error);
      if (c.error == nullptr) {
        EXPECT_TRUE(whole) << c.name << ", 1/" << denom << ": " << whole_error;
        EXPECT_TRUE(in_part) << c.name << ", 1/" << denom << ": " << part_error;
      } else {
        EXPECT_FALSE(whole) << c.name << ", 1/" << denom;
        EXPECT_EQ(whole_error, c.error) << c.name << ", 1/" << denom;
        EXPECT_FALSE(in_part) << c.name << ", 1/" << denom;
        EXPECT_EQ(part_error, c.error) << c.name << ", 1/" << denom;
      }
    }
  }
}

// `jpeg` without its segments of `marker` (0xDB: its quantisation tables), up to its first scan.
std::vector<std::uint8_t> without_segments(const std::vector<std::uint8_t>& jpeg, std::uint8_t marker) {
  std::vector<std::uint8_t> out(jpeg.begin(), jpeg.begin() + 2);
  std::size_t i = 2;
  for (; i + 3 < jpeg.size() && jpeg[i + 1] != 0xDA;) {
    const std::size_t length = static_cast<std::size_t>(jpeg[i + 2]) << 8 | jpeg[i + 3];
    if (jpeg[i + 1] != marker) {
      out.insert(out.end(), jpeg.begin() + static_cast<std::ptrdiff_t>(i), jpeg.begin() + static_cast<std::ptrdiff_t>(i + 2 + length));
    }
    i += 2 + length;
  }
  out.insert(out.end(), jpeg.begin() + static_cast<std::ptrdiff_t>(i), jpeg.end());
  return out;
}

// A decoder knows nothing of the image before: libjpeg keeps a stream's tables from image to
// image, so a file without its own quantisation tables was decoded with the last file's (whether
// it decoded hung on which file its thread had read before), where Pillow, with a decompressor
// per image, refuses it.
TEST(JpegDecoder, ForgetsTheLastImagesTables) {
  std::mt19937 rng(17);
  const std::vector<std::uint8_t> whole = gradient_jpeg(64, 48, TJSAMP_420, false, rng);
  const std::vector<std::uint8_t> tableless = without_segments(gradient_jpeg(64, 48, TJSAMP_420, false, rng), 0xDB);
  ASSERT_LT(tableless.size(), whole.size());
  const std::string refused = "Quantization table 0x00 was not defined";
  JpegDecoder decoder;
  int width = 0, height = 0;
  std::string error;
  DecodedPart part;
  for (int round = 0; round < 2; ++round) {  // a fresh decoder, then one that has just decoded a whole file
    EXPECT_FALSE(decoder.decode(tableless, 1, 1, width, height, error)) << "round " << round;
    EXPECT_EQ(error, refused) << "round " << round;
    ASSERT_TRUE(decoder.decode(whole, 1, 1, width, height, error)) << error;
    EXPECT_FALSE(decoder.decode_part(tableless, 1, 2, CropBox{4, 4, 8, 8}, part, error)) << "round " << round;
    EXPECT_EQ(error, refused) << "round " << round;
    ASSERT_TRUE(decoder.decode_part(whole, 1, 2, CropBox{4, 4, 8, 8}, part, error)) << error;
  }
}

}  // namespace
}  // namespace dlbench::input
