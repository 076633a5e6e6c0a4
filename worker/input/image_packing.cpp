#include "input/image_packing.hpp"

#include <algorithm>
#include <cstring>

namespace dlbench::input {

std::uint64_t PackedSlot::take(std::size_t bytes) const {
  constexpr std::size_t a = PackedBatchLayout::kAlignment;
  return used->fetch_add((bytes + a - 1) / a * a, std::memory_order_relaxed);
}

void pack_decoded_crop(const DecodedCrop& crop, bool flip, int out_size, TransformScratch& scratch,
                       const PackedSlot& slot) {
  const DecodedPart& part = crop.part;
  BilinearResampler::Taps horizontal, vertical;
  BilinearResampler::compute_taps(part.width, crop.x0, crop.x1, out_size, horizontal);
  BilinearResampler::compute_taps(part.height, crop.y0, crop.y1, out_size, vertical);
  PackedImage& e = *slot.entry;
  e = {};
  e.flip = flip ? 1 : 0;
  e.need_horizontal = BilinearResampler::needs_pass(part.width, crop.x0, crop.x1, out_size) ? 1 : 0;
  e.need_vertical = BilinearResampler::needs_pass(part.height, crop.y0, crop.y1, out_size) ? 1 : 0;
  const std::uint8_t* rows = part.first;
  std::size_t stride = part.stride;
  int width = part.width, height = part.height;
  std::size_t taps_bytes = packed_taps_bytes(out_size, horizontal.size, vertical.size);
  const std::size_t region_bytes = static_cast<std::size_t>(width) * 3 * static_cast<std::size_t>(height);
  if (region_bytes + taps_bytes + 2 * PackedBatchLayout::kAlignment > packed_image_budget(out_size)) {
    // Too large to ship: resized here, as transform_jpeg resizes it, and shipped as the result.
    scratch.resized.resize(static_cast<std::size_t>(out_size) * static_cast<std::size_t>(out_size) * 3);
    scratch.resampler.resize(part.first, part.width, part.height, part.stride, crop.x0, crop.y0, crop.x1, crop.y1,
                             out_size, out_size, scratch.resized.data());
    rows = scratch.resized.data();
    width = height = out_size;
    stride = static_cast<std::size_t>(out_size) * 3;
    e.need_horizontal = e.need_vertical = 0;
    horizontal.size = vertical.size = 0;
    taps_bytes = packed_taps_bytes(out_size, 0, 0);
  }
  const std::size_t row_bytes = static_cast<std::size_t>(width) * 3;
  e.stride = static_cast<std::int32_t>(row_bytes);
  e.pixels = slot.take(row_bytes * static_cast<std::size_t>(height));
  for (int y = 0; y < height; ++y) {
    std::memcpy(slot.batch + e.pixels + static_cast<std::size_t>(y) * row_bytes,
                rows + static_cast<std::size_t>(y) * stride, row_bytes);
  }
  e.horizontal_size = horizontal.size;
  e.vertical_size = vertical.size;
  e.taps = slot.take(taps_bytes);
  auto* taps = reinterpret_cast<std::int32_t*>(slot.batch + e.taps);
  for (const BilinearResampler::Taps* axis : {&horizontal, &vertical}) {
    const auto out = static_cast<std::size_t>(out_size);
    const auto weights = out * static_cast<std::size_t>(axis->size);
    // Zeros where a pass is skipped: the kernel reads none of them then.
    for (std::size_t i = 0; i < out; ++i) taps[i] = axis->size > 0 ? axis->first[i] : 0;
    for (std::size_t i = 0; i < out; ++i) taps[out + i] = axis->size > 0 ? axis->count[i] : 0;
    std::copy_n(axis->weights.begin(), weights, taps + 2 * out);
    taps += 2 * out + weights;
  }
}

}  // namespace dlbench::input
