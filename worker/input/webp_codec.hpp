// WebP images in an ImageFolder, decoded as Pillow decodes them for torchvision's loader: through
// libwebp's animation decoder (Pillow 9.4 reads every WebP file so, a still image as one frame),
// its first frame in RGBA, whose RGB is what convert("RGB") keeps.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "host_memory.hpp"

namespace dlbench::input {

// Whether `bytes` are a WebP file as Pillow knows one: RIFF, WEBP, then a VP8, VP8L or VP8X chunk.
bool is_webp(std::span<const std::uint8_t> bytes);

// One thread's decoder; the pixels (RGB8, rows packed) stay valid until the next call.
class WebpDecoder {
 public:
  // The size from the file's header; false and why where it has none, or more pixels than
  // Pillow's decompression-bomb limit (kMaxPillowPixels, image_region.hpp).
  bool header(std::span<const std::uint8_t> webp, int& width, int& height, std::string& error) const;
  bool decode(std::span<const std::uint8_t> webp, int& width, int& height, std::string& error);
  const std::uint8_t* pixels() const { return pixels_.data(); }

 private:
  worker::HostBytes pixels_;
};

}  // namespace dlbench::input
