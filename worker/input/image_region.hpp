// What the image decoders share with what resizes their output: a crop's box in an image, a
// decoded part of an image in memory, how a file's bytes are recognised, and the most pixels an
// image may have.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace dlbench::input {

// torchvision's (top, left, height, width) of the crop, in the decoded image's pixels.
struct CropBox {
  int top = 0;
  int left = 0;
  int height = 0;
  int width = 0;
};

// The pixels of part of a decoded image: `width` × `height` RGB8 pixels from `first`, rows
// `stride` bytes apart; `left` and `top` say where `first` lies in the (scaled) image.
struct DecodedPart {
  const std::uint8_t* first = nullptr;
  std::size_t stride = 0;
  int left = 0, top = 0, width = 0, height = 0;
};

// Whether `bytes` hold `tag` from `offset` on: how a decoder knows a signature or a segment's kind.
inline bool bytes_are(std::span<const std::uint8_t> bytes, std::size_t offset, std::string_view tag) {
  if (bytes.size() < offset || bytes.size() - offset < tag.size()) return false;
  for (std::size_t i = 0; i < tag.size(); ++i) {
    if (bytes[offset + i] != static_cast<std::uint8_t>(tag[i])) return false;
  }
  return true;
}

// The most pixels an image may have: Pillow's decompression-bomb limit (2 × Image.MAX_IMAGE_PIXELS),
// past which torchvision's ImageFolder cannot open it either. A JPEG header can claim 65,500 ×
// 65,500 in a few hundred bytes; decoding that (a progressive one buffers every coefficient) took
// more than a minute and 7 GB on one thread before this limit. At the limit a thread holds at most
// about 1.6 GB: the pixels and, for a progressive JPEG, its coefficients.
inline constexpr std::uint64_t kMaxPillowPixels = 2 * std::uint64_t{89'478'485};

// Whether a width × height image is within kMaxPillowPixels; if not, `error` says so of `what`
// ("a JPEG", "an image").
inline bool within_pillows_pixel_limit(int width, int height, const char* what, std::string& error) {
  if (static_cast<std::uint64_t>(width) * static_cast<std::uint64_t>(height) <= kMaxPillowPixels) return true;
  error = "is " + std::to_string(width) + " x " + std::to_string(height) + " pixels, more than the " +
          std::to_string(kMaxPillowPixels) + " " + what + " may have (Pillow's decompression-bomb limit)";
  return false;
}

}  // namespace dlbench::input
