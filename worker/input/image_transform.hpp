// The standard ImageNet training augmentation, as torchvision defines it on PIL images:
// RandomResizedCrop(size, scale=(0.08, 1), ratio=(3/4, 4/3), bilinear) → RandomHorizontalFlip →
// ToTensor → Normalize(ImageNet mean, std). The resampling is PIL's (a separable, antialiasing
// triangle filter in 8-bit fixed point), so that a crop from dlbench equals torchvision's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "host_memory.hpp"
#include "input/image_region.hpp"
#include "input/jpeg_decoder.hpp"
#include "input/png_codec.hpp"
#include "input/webp_codec.hpp"

namespace dlbench::input {

// A whole number in [lo, hi_exclusive): the draws every augmentation makes.
int uniform_int(std::mt19937_64& rng, int lo, int hi_exclusive);

// RandomResizedCrop.get_params: ten tries at a random area (8 % to 100 %) and aspect ratio
// (3/4 to 4/3, log-uniform), else the largest centred crop within the ratio.
CropBox random_resized_crop(int image_height, int image_width, std::mt19937_64& rng);

// Where one sample's pixels go: planar (C, H, W) or interleaved (H, W, C) floats.
enum class PixelLayout { nchw, nhwc };

// Whether the resampler's horizontal pass computes 8 output pixels at a time with AVX2 gathers:
// where the CPU has AVX2, unless DLBENCH_CPU_RESAMPLER=portable (or avx2, which a CPU without it
// refuses) says otherwise. Read once; both give the same bytes.
bool resampler_gathers_on_avx2();

// PIL's Image.resize(out, BILINEAR, box) of the region [x0, x0 + w) × [y0, y0 + h) of an RGB8
// image (rows of `stride` bytes), the box given relative to that region: pixels outside the
// region are never read, as PIL never reads outside a cropped image.
class BilinearResampler {
 public:
  // Pillow's taps along one axis: for each output pixel its first input pixel, how many it reads
  // and their fixed-point weights (`size` slots a pixel, zero past its count).
  struct Taps {
    int size = 0;
    int in_size = 0;
    std::vector<int> first, count;  // per output pixel
    std::vector<std::int32_t> weights;  // per output pixel, `size` of them, fixed point
  };
  // The taps resizing [in0, in1) of in_size pixels to out_size, as Pillow's precompute_coeffs.
  static void compute_taps(int in_size, double in0, double in1, int out_size, Taps& taps);
  // Whether Pillow runs that pass at all: it skips one that would copy.
  static bool needs_pass(int in_size, double in0, double in1, int out_size) {
    return out_size != in_size || in0 != 0 || in1 != out_size;
  }

  explicit BilinearResampler(bool gather_on_avx2 = resampler_gathers_on_avx2()) : gather_on_avx2_(gather_on_avx2) {}
  void resize(const std::uint8_t* region, int region_width, int region_height, std::size_t stride, double box_x0,
              double box_y0, double box_x1, double box_y1, int out_width, int out_height, std::uint8_t* out);
  // The window of PIL's Image.resize((full_width, full_height), BILINEAR) of a whole RGB8 image
  // (`window` in the resized image's pixels): only the window is computed, bit for bit what the
  // whole resize holds there. The segmentation crop of a randomly rescaled image needs no more.
  void resize_window(const std::uint8_t* image, int width, int height, std::size_t stride, int full_width,
                     int full_height, const CropBox& window, std::uint8_t* out);

 private:
  // Both passes over the output pixels in `window`, with the taps computed for the whole output.
  void run_passes(const std::uint8_t* region, std::size_t stride, bool need_horizontal, bool need_vertical,
                  const CropBox& window, std::uint8_t* out);
  static void horizontal_pixel(const Taps& taps, const std::uint8_t* in, std::size_t tap, std::uint8_t* out);
  // The horizontal pass of `rows` rows from `region` into temp_ (out_width pixels from column x0).
  void horizontal_pass(const std::uint8_t* region, std::size_t stride, int rows, int x0, int out_width);
  void horizontal_pass_avx2(const std::uint8_t* region, std::size_t stride, int rows, int x0, int out_width);
  Taps horizontal_, vertical_;
  bool gather_on_avx2_;
  // The window's horizontal taps for groups of 8 output pixels, tap by tap: byte offsets into a
  // row and weights (0 past a pixel's own taps), so that one gather reads a tap of all 8.
  std::vector<std::int32_t> lane_offsets_, lane_weights_;
  worker::HostBytes temp_;
  std::vector<std::int32_t> sums_;  // one output row of the vertical pass
};

// (pixel / 255 - mean) / std per channel, in float32 exactly as torchvision computes it, read from a table.
class Normalizer {
 public:
  Normalizer();
  // An RGB8 height × width image into `out` (one sample), mirrored left to right when `flip`.
  void write(const std::uint8_t* rgb, int height, int width, bool flip, PixelLayout layout, float* out) const;
  // The table, channel by channel, 256 values each: what a packed batch carries to the device.
  const float* table() const { return &table_[0][0]; }

 private:
  float table_[3][256];
};

// One thread's decoders and buffers. `png` and `webp`: PNG and WebP images, whatever their names
// (Pillow opens a file by its content; ImageNet's training set has a PNG named .jpg), decoded
// whole, at full size.
struct TransformScratch {
  JpegDecoder decoder;
  PngDecoder png;
  WebpDecoder webp;
  BilinearResampler resampler;
  worker::HostBytes resized;
};

// Whether `bytes` are an image of a format Pillow reads and dlbench does not decode (BMP, TIFF,
// GIF, PPM/PGM/PBM: torchvision's ImageFolder lists most by their names); if so, `error`
// names it.
bool not_decoded_here(std::span<const std::uint8_t> bytes, std::string& error);

// The image's size from its header, a PNG's or a WebP's by their signatures, else a JPEG's; false
// and why when it is none of them.
bool image_header(std::span<const std::uint8_t> bytes, TransformScratch& scratch, int& width, int& height,
                  std::string& error);

// How a sample's JPEG is decoded. dct_scaling: at the smallest DCT scale that still covers the
// crop (off: full size, bit for bit torchvision's path). crop_only: only the rows and columns the
// crop needs (JpegDecoder::decode_part), the same bytes as the whole image holds there.
struct JpegDecoding {
  bool dct_scaling = true;
  bool crop_only = true;
};

// What transform_jpeg resizes: the crop decoded at the scale `decoding` allows (`part`, whole
// pixels), and the crop's box in the part's pixels (fractional where the DCT scaled it).
struct DecodedCrop {
  DecodedPart part;
  double x0 = 0, y0 = 0, x1 = 0, y1 = 0;
};
bool decode_crop(std::span<const std::uint8_t> jpeg, const CropBox& crop, int out_size, JpegDecoding decoding,
                 TransformScratch& scratch, DecodedCrop& out, std::string& error);

// The whole sample: decode, crop (`crop` in full-size pixels), resize to out × out, flip,
// normalise into `out`.
bool transform_jpeg(std::span<const std::uint8_t> jpeg, const CropBox& crop, bool flip, int out_size,
                    JpegDecoding decoding, PixelLayout layout, const Normalizer& normalizer, TransformScratch& scratch,
                    float* out, std::string& error);

}  // namespace dlbench::input
