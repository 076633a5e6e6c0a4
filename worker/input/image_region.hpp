// Where pixels lie: a crop's box in an image, and a decoded part of an image in memory. Shared by
// the decoders (jpeg_decoder.hpp, the PNG path in image_transform.cpp) and what resizes their output.
#pragma once

#include <cstddef>
#include <cstdint>

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

}  // namespace dlbench::input
