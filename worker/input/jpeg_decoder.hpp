// One thread's JPEG decoder: libjpeg-turbo's libjpeg API, the whole image or the part a crop needs,
// with the accurate IDCT and fancy upsampling (PIL's defaults), CMYK made RGB as Pillow makes it,
// what PIL refuses refused (broken, truncated), and hostile files (bombs, endless scans) refused
// before they cost.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "host_memory.hpp"
#include "input/image_region.hpp"

namespace dlbench::input {

// The most scans a progressive JPEG may have (TurboJPEG's TJFLAG_LIMITSCANS, checked here as libjpeg
// reads): each scan is a pass over the whole image, and a small file can repeat one thousands of times.
inline constexpr int kMaxJpegScans = 500;

// Decodes one image at a time with its buffers reused from image to image. Refuses a JPEG past
// kMaxPillowPixels (image_region.hpp) or kMaxJpegScans.
class JpegDecoder {
 public:
  JpegDecoder();
  ~JpegDecoder();
  JpegDecoder(const JpegDecoder&) = delete;
  JpegDecoder& operator=(const JpegDecoder&) = delete;

  // The image's size from its header; false (and why) when it is not a JPEG this can decode.
  bool header(std::span<const std::uint8_t> jpeg, int& width, int& height, std::string& error);
  // Decodes to RGB8 at scale_num / scale_denom of the full size (a DCT-domain scaling factor
  // libjpeg-turbo offers); the pixels stay valid until the next call.
  bool decode(std::span<const std::uint8_t> jpeg, int scale_num, int scale_denom, int& width, int& height,
              std::string& error);
  // Decodes, at that scale, only what `part` (in scaled pixels, inside the scaled image) needs:
  // its rows, and its columns widened to whole iMCUs and a margin, so that fancy upsampling sees
  // the same neighbours as in the whole image and `out` holds the whole decode's very bytes. The
  // rows below are still read (without their inverse DCT, the last iMCU row's apart), so that a
  // truncated file fails here as it does whole (PIL refuses it). The pixels stay valid until the
  // next call.
  bool decode_part(std::span<const std::uint8_t> jpeg, int scale_num, int scale_denom, const CropBox& part,
                   DecodedPart& out, std::string& error);
  const std::uint8_t* pixels() const { return pixels_.data(); }
  // The full size of the image decode() or decode_part() last read the header of.
  int full_width() const { return full_width_; }
  int full_height() const { return full_height_; }

 private:
  struct Libjpeg;  // the decompressor and its error manager
  std::unique_ptr<Libjpeg> libjpeg_;
  worker::HostBytes pixels_;
  int full_width_ = 0;
  int full_height_ = 0;
  bool cmyk_ = false;  // the last header's: CMYK or YCCK, made RGB as Pillow makes it
};

// A DCT scaling factor, num / denom of the full size.
struct ScaleFactor {
  int num = 1;
  int denom = 1;
};
// The factor ≤ 1 that makes the decode smallest while the crop still covers at least out × out
// pixels: downscaling in the IDCT is nearly free, so the resampler has less to do. {1, 1} when no
// smaller factor qualifies.
ScaleFactor dct_scale_for(const CropBox& crop, int out_size);
// A side of `size` pixels decoded at `scale` (TurboJPEG's TJSCALED: rounded up).
int scaled_size(int size, ScaleFactor scale);

}  // namespace dlbench::input
