// Cropping, resizing and normalising one training image as torchvision does (image_transform.hpp); the
// decoding itself is jpeg_decoder.cpp's, png_codec.cpp's and webp_codec.cpp's.
#include "input/image_transform.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <stdexcept>
#include <string_view>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "env_choice.hpp"

namespace dlbench::input {
namespace {

// Pillow's Resample.c: weights in fixed point with 22 fractional bits for 8-bit images.
constexpr int kPrecisionBits = 32 - 8 - 2;

double uniform(std::mt19937_64& rng, double lo, double hi) {
  const double unit = static_cast<double>(rng() >> 11) * 0x1.0p-53;  // [0, 1), 53 bits
  return lo + (hi - lo) * unit;
}

// Python's round(): halves to even, as torchvision's int(round(x)) rounds.
int round_half_even(double x) { return static_cast<int>(std::nearbyint(x)); }

std::uint8_t clip8(std::int32_t sum) {
  if (sum >= (1 << kPrecisionBits << 8)) return 255;
  if (sum <= 0) return 0;
  return static_cast<std::uint8_t>(sum >> kPrecisionBits);
}

#if defined(__x86_64__)
// clip8 of 8 sums.
__attribute__((target("avx2"))) inline __m256i clip8_avx2(__m256i sum) {
  return _mm256_min_epi32(_mm256_max_epi32(_mm256_srai_epi32(sum, kPrecisionBits), _mm256_setzero_si256()),
                          _mm256_set1_epi32(255));
}
#endif

}  // namespace

bool resampler_gathers_on_avx2() {
  static const bool gathers = [] {
#if defined(__x86_64__)
    const bool cpu_has_avx2 = __builtin_cpu_supports("avx2");
#else
    const bool cpu_has_avx2 = false;
#endif
    enum class Pass { portable, avx2 };
    static constexpr worker::Choices<Pass, 2> kPasses{{{"portable", Pass::portable}, {"avx2", Pass::avx2}}};
    const std::optional<Pass> chosen =
        worker::env_choice("DLBENCH_CPU_RESAMPLER", std::getenv("DLBENCH_CPU_RESAMPLER"), kPasses);
    if (chosen == Pass::avx2 && !cpu_has_avx2) {
      throw std::invalid_argument("DLBENCH_CPU_RESAMPLER: \"avx2\" needs a CPU with AVX2; this one resamples "
                                  "portably (unset it, or portable)");
    }
    return chosen ? *chosen == Pass::avx2 : cpu_has_avx2;
  }();
  return gathers;
}

int uniform_int(std::mt19937_64& rng, int lo, int hi_exclusive) {
  return lo + static_cast<int>(rng() % static_cast<std::uint64_t>(hi_exclusive - lo));
}

CropBox random_resized_crop(int image_height, int image_width, std::mt19937_64& rng) {
  constexpr double kMinScale = 0.08, kMaxScale = 1.0;
  constexpr double kMinRatio = 3.0 / 4.0, kMaxRatio = 4.0 / 3.0;
  const double area = static_cast<double>(image_height) * image_width;
  const double log_min = std::log(kMinRatio), log_max = std::log(kMaxRatio);
  for (int attempt = 0; attempt < 10; ++attempt) {
    const double target_area = area * uniform(rng, kMinScale, kMaxScale);
    const double aspect = std::exp(uniform(rng, log_min, log_max));
    const int w = round_half_even(std::sqrt(target_area * aspect));
    const int h = round_half_even(std::sqrt(target_area / aspect));
    if (w > 0 && w <= image_width && h > 0 && h <= image_height) {
      const int top = uniform_int(rng, 0, image_height - h + 1);
      const int left = uniform_int(rng, 0, image_width - w + 1);
      return {top, left, h, w};
    }
  }
  const double in_ratio = static_cast<double>(image_width) / image_height;
  int w = image_width, h = image_height;
  if (in_ratio < kMinRatio) {
    h = round_half_even(w / kMinRatio);
  } else if (in_ratio > kMaxRatio) {
    w = round_half_even(h * kMaxRatio);
  }
  return {(image_height - h) / 2, (image_width - w) / 2, h, w};
}

void BilinearResampler::compute_taps(int in_size, double in0, double in1, int out_size, Taps& taps) {
  const double scale = (in1 - in0) / out_size;
  const double filter_scale = std::max(scale, 1.0);  // wider than one pixel when shrinking: antialiasing
  const double support = 1.0 * filter_scale;         // the triangle filter's support is 1
  taps.size = static_cast<int>(std::ceil(support)) * 2 + 1;
  taps.in_size = in_size;
  taps.first.assign(static_cast<std::size_t>(out_size), 0);
  taps.count.assign(static_cast<std::size_t>(out_size), 0);
  taps.weights.assign(static_cast<std::size_t>(out_size) * static_cast<std::size_t>(taps.size), 0);
  std::vector<double> k(static_cast<std::size_t>(taps.size));
  for (int xx = 0; xx < out_size; ++xx) {
    const double center = in0 + (xx + 0.5) * scale;
    const double inverse = 1.0 / filter_scale;
    int xmin = static_cast<int>(center - support + 0.5);  // truncation, as Pillow's (int) cast
    if (xmin < 0) xmin = 0;
    int xmax = static_cast<int>(center + support + 0.5);
    if (xmax > in_size) xmax = in_size;
    xmax -= xmin;
    double total = 0;
    for (int x = 0; x < xmax; ++x) {
      const double t = std::fabs((x + xmin - center + 0.5) * inverse);
      const double w = t < 1.0 ? 1.0 - t : 0.0;
      k[static_cast<std::size_t>(x)] = w;
      total += w;
    }
    std::int32_t* fixed = &taps.weights[static_cast<std::size_t>(xx) * static_cast<std::size_t>(taps.size)];
    for (int x = 0; x < xmax; ++x) {
      double w = k[static_cast<std::size_t>(x)];
      if (total != 0.0) w /= total;
      fixed[x] = static_cast<std::int32_t>(w < 0 ? -0.5 + w * (1 << kPrecisionBits) : 0.5 + w * (1 << kPrecisionBits));
    }
    taps.first[static_cast<std::size_t>(xx)] = xmin;
    taps.count[static_cast<std::size_t>(xx)] = xmax;
  }
}

void BilinearResampler::resize(const std::uint8_t* region, int region_width, int region_height, std::size_t stride,
                               double box_x0, double box_y0, double box_x1, double box_y1, int out_width,
                               int out_height, std::uint8_t* out) {
  // Pillow's ImagingResampleInner: a pass is skipped when it would copy.
  const bool need_horizontal = needs_pass(region_width, box_x0, box_x1, out_width);
  const bool need_vertical = needs_pass(region_height, box_y0, box_y1, out_height);
  compute_taps(region_width, box_x0, box_x1, out_width, horizontal_);
  compute_taps(region_height, box_y0, box_y1, out_height, vertical_);
  run_passes(region, stride, need_horizontal, need_vertical, {0, 0, out_height, out_width}, out);
}

void BilinearResampler::resize_window(const std::uint8_t* image, int width, int height, std::size_t stride,
                                      int full_width, int full_height, const CropBox& window, std::uint8_t* out) {
  if (window.left < 0 || window.top < 0 || window.width < 1 || window.height < 1 ||
      window.left + window.width > full_width || window.top + window.height > full_height) {
    throw std::invalid_argument("resize_window: the window is outside the resized image");
  }
  compute_taps(width, 0, width, full_width, horizontal_);
  compute_taps(height, 0, height, full_height, vertical_);
  run_passes(image, stride, full_width != width, full_height != height, window, out);
}

// Built for AVX2 as well as the baseline, chosen when the program loads: the passes are a third
// of a decoding thread's time, and integer arithmetic gives the same bytes either way (2026-11-29:
// +7% images/s with two threads on an EPYC, bench/RESULTS.md).
__attribute__((target_clones("avx2", "default"))) void BilinearResampler::run_passes(const std::uint8_t* region, std::size_t stride,
                                   bool need_horizontal, bool need_vertical, const CropBox& window, std::uint8_t* out) {
  const int x0 = window.left, out_width = window.width;
  const int y0 = window.top, out_height = window.height;
  const std::uint8_t* source = region;
  std::size_t source_stride = stride;
  int row_offset = 0;  // the first source row the vertical pass reads, as stored in `source`
  if (need_horizontal) {
    // Only the rows the vertical pass will read (or, without one, the window's rows).
    const auto first_out_row = static_cast<std::size_t>(y0), last_out_row = static_cast<std::size_t>(y0 + out_height - 1);
    const int row0 = need_vertical ? vertical_.first[first_out_row] : y0;
    const int rows = need_vertical ? vertical_.first[last_out_row] + vertical_.count[last_out_row] - row0 : out_height;
    // 16 bytes to spare: the AVX2 pass stores 16 bytes where a group's last 12 go.
    temp_.resize(static_cast<std::size_t>(rows) * static_cast<std::size_t>(out_width) * 3 + 16);
    const std::uint8_t* first_row = region + static_cast<std::size_t>(row0) * stride;
#if defined(__x86_64__)
    if (gather_on_avx2_) {
      horizontal_pass_avx2(first_row, stride, rows, x0, out_width);
    } else {
      horizontal_pass(first_row, stride, rows, x0, out_width);
    }
#else
    horizontal_pass(first_row, stride, rows, x0, out_width);
#endif
    source = temp_.data();
    source_stride = static_cast<std::size_t>(out_width) * 3;
    row_offset = row0;
  } else {
    source = region + static_cast<std::size_t>(x0) * 3;  // no horizontal pass: the window's columns as they are
  }
  const std::size_t row_values = static_cast<std::size_t>(out_width) * 3;
  if (!need_vertical) {
    for (int y = 0; y < out_height; ++y) {
      const int source_row = need_horizontal ? y : y0 + y;
      std::memcpy(out + static_cast<std::size_t>(y) * row_values, source + static_cast<std::size_t>(source_row) * source_stride,
                  row_values);
    }
    return;
  }
  // Row by row, tap by tap over a whole row of sums: the same sums as Pillow's pixel-by-pixel
  // loop (integer addition in another order), in a form the compiler vectorises.
  sums_.resize(row_values);
  for (int yy = 0; yy < out_height; ++yy) {
    const auto tap = static_cast<std::size_t>(y0 + yy);
    const int ymin = vertical_.first[tap] - row_offset;
    const int n = vertical_.count[tap];
    const std::int32_t* k = &vertical_.weights[tap * static_cast<std::size_t>(vertical_.size)];
    std::int32_t* sums = sums_.data();
    std::fill(sums, sums + row_values, 1 << (kPrecisionBits - 1));
    for (int y = 0; y < n; ++y) {
      const std::uint8_t* row = source + static_cast<std::size_t>(ymin + y) * source_stride;
      const std::int32_t w = k[y];
      for (std::size_t i = 0; i < row_values; ++i) sums[i] += row[i] * w;
    }
    std::uint8_t* row_out = out + static_cast<std::size_t>(yy) * row_values;
    for (std::size_t i = 0; i < row_values; ++i) row_out[i] = clip8(sums[i]);
  }
}

// Output pixel `tap` of a row: Pillow's sums over its taps, one per channel.
[[gnu::always_inline]] inline void BilinearResampler::horizontal_pixel(const Taps& taps, const std::uint8_t* in,
                                                                       std::size_t tap, std::uint8_t* out) {
  const int n = taps.count[tap];
  const std::int32_t* k = &taps.weights[tap * static_cast<std::size_t>(taps.size)];
  std::int32_t s0 = 1 << (kPrecisionBits - 1), s1 = s0, s2 = s0;
  const std::uint8_t* p = in + static_cast<std::size_t>(taps.first[tap]) * 3;
  for (int x = 0; x < n; ++x, p += 3) {
    s0 += p[0] * k[x];
    s1 += p[1] * k[x];
    s2 += p[2] * k[x];
  }
  out[0] = clip8(s0);
  out[1] = clip8(s1);
  out[2] = clip8(s2);
}

// Pillow's horizontal pass, pixel by pixel.
__attribute__((target_clones("avx2", "default"))) void BilinearResampler::horizontal_pass(const std::uint8_t* region, std::size_t stride,
                                                                                         int rows, int x0, int out_width) {
  for (int y = 0; y < rows; ++y) {
    const std::uint8_t* in = region + static_cast<std::size_t>(y) * stride;
    std::uint8_t* row_out = temp_.data() + static_cast<std::size_t>(y) * static_cast<std::size_t>(out_width) * 3;
    for (int xx = 0; xx < out_width; ++xx) horizontal_pixel(horizontal_, in, static_cast<std::size_t>(x0 + xx), row_out + xx * 3);
  }
}

#if defined(__x86_64__)
// The same sums for 8 output pixels at once: tap t of all 8 is one gather of a 4-byte word at each
// pixel's byte offset (its R, G and B, and a byte of the next pixel that is masked off), times
// each pixel's weight. Integer sums in another order: the same bytes as the pixel-by-pixel pass.
__attribute__((target("avx2"))) void BilinearResampler::horizontal_pass_avx2(const std::uint8_t* region, std::size_t stride,
                                                                            int rows, int x0, int out_width) {
  const int size = horizontal_.size;
  const int row_bytes = horizontal_.in_size * 3;
  const auto lanes = static_cast<std::size_t>(out_width / 8) * static_cast<std::size_t>(size) * 8;
  lane_offsets_.resize(lanes);
  lane_weights_.resize(lanes);
  // Groups whose every read stays inside the row's pixels: a word read at the row's last pixel
  // would pass its end (the image's, on the last row). Taps move right with the output, so the
  // groups after the first that would are left to the pixel-by-pixel loop too.
  int groups = 0;
  for (; groups < out_width / 8; ++groups) {
    bool inside = true;
    for (int lane = 0; lane < 8; ++lane) {
      const auto tap = static_cast<std::size_t>(x0 + groups * 8 + lane);
      const int xmin = horizontal_.first[tap], n = horizontal_.count[tap];
      const std::int32_t* k = &horizontal_.weights[tap * static_cast<std::size_t>(size)];
      for (int t = 0; t < size; ++t) {
        const auto at = (static_cast<std::size_t>(groups) * static_cast<std::size_t>(size) + static_cast<std::size_t>(t)) * 8 +
                        static_cast<std::size_t>(lane);
        lane_offsets_[at] = (xmin + (t < n ? t : 0)) * 3;
        lane_weights_[at] = t < n ? k[t] : 0;
      }
      inside = inside && (xmin + std::max(n - 1, 0)) * 3 + 4 <= row_bytes;
    }
    if (!inside) break;
  }
  const __m256i half = _mm256_set1_epi32(1 << (kPrecisionBits - 1));
  const __m256i low_byte = _mm256_set1_epi32(0xFF);
  // Each 128-bit half's four words (R | G << 8 | B << 16) to 12 bytes.
  const __m256i to_rgb = _mm256_setr_epi8(0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1,  //
                                          0, 1, 2, 4, 5, 6, 8, 9, 10, 12, 13, 14, -1, -1, -1, -1);
  for (int y = 0; y < rows; ++y) {
    const std::uint8_t* in = region + static_cast<std::size_t>(y) * stride;
    const auto* words = reinterpret_cast<const int*>(in);
    std::uint8_t* row_out = temp_.data() + static_cast<std::size_t>(y) * static_cast<std::size_t>(out_width) * 3;
    for (int g = 0; g < groups; ++g) {
      const std::int32_t* offsets = &lane_offsets_[static_cast<std::size_t>(g) * static_cast<std::size_t>(size) * 8];
      const std::int32_t* weights = &lane_weights_[static_cast<std::size_t>(g) * static_cast<std::size_t>(size) * 8];
      __m256i s0 = half, s1 = half, s2 = half;
      for (int t = 0; t < size; ++t) {
        const __m256i at = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(offsets + t * 8));
        const __m256i w = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(weights + t * 8));
        const __m256i rgb = _mm256_i32gather_epi32(words, at, 1);
        s0 = _mm256_add_epi32(s0, _mm256_mullo_epi32(_mm256_and_si256(rgb, low_byte), w));
        s1 = _mm256_add_epi32(s1, _mm256_mullo_epi32(_mm256_and_si256(_mm256_srli_epi32(rgb, 8), low_byte), w));
        s2 = _mm256_add_epi32(s2, _mm256_mullo_epi32(_mm256_and_si256(_mm256_srli_epi32(rgb, 16), low_byte), w));
      }
      const __m256i pixels = _mm256_or_si256(clip8_avx2(s0), _mm256_or_si256(_mm256_slli_epi32(clip8_avx2(s1), 8),
                                                                         _mm256_slli_epi32(clip8_avx2(s2), 16)));
      const __m256i packed = _mm256_shuffle_epi8(pixels, to_rgb);
      std::uint8_t* o = row_out + static_cast<std::size_t>(g) * 24;
      // 16-byte stores of 12 bytes each, in order: the next store (or temp_'s spare 16) takes the rest.
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o), _mm256_castsi256_si128(packed));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(o + 12), _mm256_extracti128_si256(packed, 1));
    }
    for (int xx = groups * 8; xx < out_width; ++xx) {
      horizontal_pixel(horizontal_, in, static_cast<std::size_t>(x0 + xx), row_out + xx * 3);
    }
  }
}
#endif

Normalizer::Normalizer() {
  // torchvision: ToTensor divides by 255 in float32, Normalize subtracts the mean and divides by
  // the standard deviation, both float32 tensors.
  const float mean[3] = {0.485f, 0.456f, 0.406f};
  const float std_dev[3] = {0.229f, 0.224f, 0.225f};
  for (int c = 0; c < 3; ++c) {
    for (int v = 0; v < 256; ++v) {
      const volatile float unit = static_cast<float>(v) / 255.0f;  // no contraction into one FMA
      table_[c][v] = (unit - mean[c]) / std_dev[c];
    }
  }
}

void Normalizer::write(const std::uint8_t* rgb, int height, int width, bool flip, PixelLayout layout, float* out) const {
  const std::size_t plane = static_cast<std::size_t>(height) * static_cast<std::size_t>(width);
  for (int y = 0; y < height; ++y) {
    const std::uint8_t* row = rgb + static_cast<std::size_t>(y) * static_cast<std::size_t>(width) * 3;
    for (int x = 0; x < width; ++x) {
      const std::uint8_t* px = row + static_cast<std::size_t>(flip ? width - 1 - x : x) * 3;
      const std::size_t at = static_cast<std::size_t>(y) * static_cast<std::size_t>(width) + static_cast<std::size_t>(x);
      if (layout == PixelLayout::nchw) {
        out[at] = table_[0][px[0]];
        out[plane + at] = table_[1][px[1]];
        out[2 * plane + at] = table_[2][px[2]];
      } else {
        out[at * 3 + 0] = table_[0][px[0]];
        out[at * 3 + 1] = table_[1][px[1]];
        out[at * 3 + 2] = table_[2][px[2]];
      }
    }
  }
}

bool not_decoded_here(std::span<const std::uint8_t> bytes, std::string& error) {
  const auto starts = [&](std::string_view signature) { return bytes_are(bytes, 0, signature); };
  const char* format = nullptr;
  if (starts("BM")) {
    format = "BMP";
  } else if (starts(std::string_view("II*\0", 4)) || starts(std::string_view("MM\0*", 4))) {
    format = "TIFF";
  } else if (starts("GIF87a") || starts("GIF89a")) {
    format = "GIF";
  } else if (bytes.size() >= 3 && bytes[0] == 'P' && bytes[1] >= '1' && bytes[1] <= '6' && std::isspace(bytes[2]) != 0) {
    format = "PPM, PGM or PBM";
  }
  if (format == nullptr) return false;
  error = std::string("a ") + format +
          " image: dlbench decodes JPEG, PNG and WebP images only (Pillow, and so torchvision, reads it)";
  return true;
}

bool image_header(std::span<const std::uint8_t> bytes, TransformScratch& scratch, int& width, int& height,
                  std::string& error) {
  if (is_png(bytes)) return scratch.png.header(bytes, width, height, error);
  if (is_webp(bytes)) return scratch.webp.header(bytes, width, height, error);
  if (not_decoded_here(bytes, error)) return false;
  return scratch.decoder.header(bytes, width, height, error);
}

namespace {

bool crop_inside(const CropBox& crop, int width, int height, std::string& error) {
  if (crop.top < 0 || crop.left < 0 || crop.height < 1 || crop.width < 1 || crop.top + crop.height > height ||
      crop.left + crop.width > width) {
    error = "crop outside the image";
    return false;
  }
  return true;
}

// A PNG or WebP image: decoded whole (PIL's convert("RGB"): png_codec.hpp, webp_codec.hpp), the crop
// a box of whole pixels in its width × height RGB8 `pixels`.
bool whole_image_crop(const std::uint8_t* pixels, int width, int height, const CropBox& crop, DecodedCrop& out,
                      std::string& error) {
  if (!crop_inside(crop, width, height, error)) return false;
  DecodedPart& part = out.part;
  part.stride = static_cast<std::size_t>(width) * 3;
  part.first = pixels + static_cast<std::size_t>(crop.top) * part.stride + static_cast<std::size_t>(crop.left) * 3;
  part.left = crop.left;
  part.top = crop.top;
  part.width = crop.width;
  part.height = crop.height;
  out.x0 = out.y0 = 0;
  out.x1 = crop.width;
  out.y1 = crop.height;
  return true;
}

}  // namespace

bool decode_crop(std::span<const std::uint8_t> jpeg, const CropBox& crop, int out_size, JpegDecoding decoding,
                 TransformScratch& scratch, DecodedCrop& out, std::string& error) {
  int full_width = 0, full_height = 0;
  if (is_png(jpeg)) {
    return scratch.png.decode(jpeg, PngPixels::rgb8, full_width, full_height, error) &&
           whole_image_crop(scratch.png.pixels(), full_width, full_height, crop, out, error);
  }
  if (is_webp(jpeg)) {
    return scratch.webp.decode(jpeg, full_width, full_height, error) &&
           whole_image_crop(scratch.webp.pixels(), full_width, full_height, crop, out, error);
  }
  if (not_decoded_here(jpeg, error)) return false;
  JpegDecoder& decoder = scratch.decoder;
  const ScaleFactor scale = decoding.dct_scaling ? dct_scale_for(crop, out_size) : ScaleFactor{};
  if (!decoder.header(jpeg, full_width, full_height, error) || !crop_inside(crop, full_width, full_height, error)) {
    return false;
  }
  // The crop in the scaled decode: a box of whole pixels at full size, where fx and fy are exactly
  // 1 (torchvision's img.crop(box).resize(size)), or a fractional box inside the whole pixels
  // that hold it.
  const int width = scaled_size(full_width, scale), height = scaled_size(full_height, scale);
  const double fx = static_cast<double>(width) / full_width, fy = static_cast<double>(height) / full_height;
  const double x0 = crop.left * fx, x1 = (crop.left + crop.width) * fx;
  const double y0 = crop.top * fy, y1 = (crop.top + crop.height) * fy;
  const int rx0 = static_cast<int>(std::floor(x0)), ry0 = static_cast<int>(std::floor(y0));
  const int rx1 = std::min(width, static_cast<int>(std::ceil(x1))), ry1 = std::min(height, static_cast<int>(std::ceil(y1)));
  const CropBox region{ry0, rx0, ry1 - ry0, rx1 - rx0};
  DecodedPart& part = out.part;
  if (decoding.crop_only) {
    if (!decoder.decode_part(jpeg, scale.num, scale.denom, region, part, error)) return false;
  } else {
    int decoded_width = 0, decoded_height = 0;
    if (!decoder.decode(jpeg, scale.num, scale.denom, decoded_width, decoded_height, error)) return false;
    part.stride = static_cast<std::size_t>(decoded_width) * 3;
    part.first = decoder.pixels() + static_cast<std::size_t>(region.top) * part.stride +
                 static_cast<std::size_t>(region.left) * 3;
    part.left = region.left;
    part.top = region.top;
    part.width = region.width;
    part.height = region.height;
  }
  out.x0 = x0 - rx0;
  out.y0 = y0 - ry0;
  out.x1 = x1 - rx0;
  out.y1 = y1 - ry0;
  return true;
}

bool transform_jpeg(std::span<const std::uint8_t> jpeg, const CropBox& crop, bool flip, int out_size,
                    JpegDecoding decoding, PixelLayout layout, const Normalizer& normalizer, TransformScratch& scratch,
                    float* out, std::string& error) {
  DecodedCrop decoded;
  if (!decode_crop(jpeg, crop, out_size, decoding, scratch, decoded, error)) return false;
  const DecodedPart& part = decoded.part;
  scratch.resized.resize(static_cast<std::size_t>(out_size) * static_cast<std::size_t>(out_size) * 3);
  scratch.resampler.resize(part.first, part.width, part.height, part.stride, decoded.x0, decoded.y0, decoded.x1,
                           decoded.y1, out_size, out_size, scratch.resized.data());
  normalizer.write(scratch.resized.data(), out_size, out_size, flip, layout, out);
  return true;
}

}  // namespace dlbench::input
