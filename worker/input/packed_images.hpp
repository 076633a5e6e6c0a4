// A batch of images as the decoding threads hand it to a GPU that resizes it (DLBENCH_INPUT_RESIZE=
// device): each image's decoded crop region (RGB8) with Pillow's taps for the resize, which a kernel
// (cuda/input_kernels.cu) turns into the very values the host would have made: the same integer
// sums, the same normaliser table, the same rounding. The host then does the decoding only; the
// resampler, the normaliser and the conversion to halves were a third of a decoding thread's time
// (bench/RESULTS.md, 2026-11-30). C++17: nvcc reads it too.
#pragma once

#include <cstddef>
#include <cstdint>

namespace dlbench::input {

// One image's entry in the batch's table. Offsets are in bytes from the batch's first byte.
struct PackedImage {
  std::uint64_t pixels = 0;  // the region's first row, `stride` bytes a row
  std::uint64_t taps = 0;    // int32: horizontal first[out], count[out], weights[out × horizontal_size], then vertical's
  std::int32_t stride = 0;
  std::int32_t horizontal_size = 0;  // weights a horizontal tap row (0 where the pass is skipped)
  std::int32_t vertical_size = 0;
  std::uint8_t need_horizontal = 0;  // Pillow skips a pass that would copy; the kernel reads the region as it is then
  std::uint8_t need_vertical = 0;
  std::uint8_t flip = 0;    // mirrored left to right after the resize
  std::uint8_t unused = 0;
};

// Where things are in a packed batch of `images` images: the normaliser's table (float[3][256],
// (v / 255 − mean) / std per channel), the table of images, then each image's pixels and taps.
struct PackedBatchLayout {
  static constexpr std::size_t kAlignment = 16;
  static constexpr std::size_t kNormalizer = 0;  // constants, not functions: a kernel reads them too
  static constexpr std::size_t kTable = 3 * 256 * sizeof(float);
  static constexpr std::size_t payload(std::size_t images) {
    const std::size_t end = kTable + images * sizeof(PackedImage);
    return (end + kAlignment - 1) / kAlignment * kAlignment;
  }
};

// An image's taps in bytes: first, count and `size` weights for each of `out` outputs, both axes.
constexpr std::size_t packed_taps_bytes(int out, int horizontal_size, int vertical_size) {
  return sizeof(std::int32_t) * static_cast<std::size_t>(out) *
         static_cast<std::size_t>(4 + horizontal_size + vertical_size);
}

// The most one image may take of a batch (pixels, taps and alignment): a crop region up to four times
// the output's pixels, with taps for shrinking it up to 4× along an axis. A larger region is resized
// on the host and shipped at the output's size, both passes skipped (pack_decoded_crop), so a batch
// never holds more than images × this.
constexpr std::size_t packed_image_budget(int out) {
  const std::size_t pixels = 4 * 3 * static_cast<std::size_t>(out) * static_cast<std::size_t>(out);
  return pixels + packed_taps_bytes(out, 9, 9) + 2 * PackedBatchLayout::kAlignment;
}

constexpr std::size_t packed_batch_capacity(std::size_t images, int out) {
  return PackedBatchLayout::payload(images) + images * packed_image_budget(out);
}

}  // namespace dlbench::input
