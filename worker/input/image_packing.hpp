// The decoding threads' side of a batch packed for a device that resizes (packed_images.hpp,
// DLBENCH_INPUT_RESIZE=device): where an image goes in the batch, and what is written there.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "input/image_transform.hpp"
#include "input/packed_images.hpp"

namespace dlbench::input {

// Where one image of a packed batch (packed_images.hpp) goes: the batch, the image's entry in its
// table, and the payload bytes the batch's images have taken so far (from the batch's start;
// threads take theirs at once, so each image's bytes are its own).
struct PackedSlot {
  std::byte* batch = nullptr;
  PackedImage* entry = nullptr;
  std::atomic<std::uint64_t>* used = nullptr;
  // `bytes` of the payload, aligned: their offset from the batch's start.
  std::uint64_t take(std::size_t bytes) const;
};

// A decoded crop for a device that resizes: its pixels and Pillow's taps for resizing it to
// out × out, and whether it is mirrored. A region larger than packed_image_budget allows is resized
// here (the host's bytes) and packed at the output's size with both passes skipped.
void pack_decoded_crop(const DecodedCrop& crop, bool flip, int out_size, TransformScratch& scratch,
                       const PackedSlot& slot);

}  // namespace dlbench::input
