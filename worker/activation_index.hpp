// Where a logical element of an activation or a filter sits in memory, for the two memory orders
// the CUDA backend keeps (NCHW for fp32, NHWC for the half types, where cuDNN's tensor-core
// kernels want channels last). Shared by the CUDA kernels and the CPU tests that check them, so
// that the index math is tested without a GPU.
#pragma once

#include <cstdint>

#include "host_device.hpp"

namespace dlbench::worker {

// The logical dimensions of a 4-D activation (N, C, H, W) and its memory order.
struct ActivationGeometry {
  std::int64_t n = 0, c = 0, h = 0, w = 0;
  bool channels_last = false;  // NHWC; otherwise NCHW

  DLBENCH_HOST_DEVICE std::int64_t pixels() const { return h * w; }
  DLBENCH_HOST_DEVICE std::int64_t numel() const { return n * c * h * w; }
  // Offset of element (sample, channel, pixel = y · w + x).
  DLBENCH_HOST_DEVICE std::int64_t offset(std::int64_t sample, std::int64_t channel, std::int64_t pixel) const {
    return channels_last ? (sample * pixels() + pixel) * c + channel : (sample * c + channel) * pixels() + pixel;
  }
  // How far apart two neighbouring channels of one pixel are.
  DLBENCH_HOST_DEVICE std::int64_t channel_stride() const { return channels_last ? 1 : pixels(); }
  // The logical (sample, channel, pixel) of the element at `offset`: the inverse of offset().
  struct Element {
    std::int64_t sample, channel, pixel;
  };
  DLBENCH_HOST_DEVICE Element element(std::int64_t at) const {
    if (channels_last) return {at / (pixels() * c), at % c, (at / c) % pixels()};
    return {at / (c * pixels()), (at / pixels()) % c, at % pixels()};
  }
  // The index of the element at `offset` in the logical (N, C, H, W) order, whatever the memory
  // order: what a per-element choice that must not depend on the layout is keyed on (dropout's
  // mask: the CPU keeps NHWC, CUDA's fp32 NCHW, and both must drop the same elements).
  DLBENCH_HOST_DEVICE std::int64_t logical_index(std::int64_t at) const {
    if (!channels_last) return at;
    const Element e = element(at);
    return (e.sample * c + e.channel) * pixels() + e.pixel;
  }
};

// A filter (O, I, KH, KW) as PyTorch keeps it (OIHW), or channels last (OHWI: cuDNN's NHWC
// filter format, which its NHWC convolutions take).
DLBENCH_HOST_DEVICE inline std::int64_t filter_offset(bool channels_last, std::int64_t in_channels, std::int64_t kh,
                                                      std::int64_t kw, std::int64_t o, std::int64_t i,
                                                      std::int64_t y, std::int64_t x) {
  return channels_last ? ((o * kh + y) * kw + x) * in_channels + i : ((o * in_channels + i) * kh + y) * kw + x;
}

// Channels [offset, offset + part_channels) of an activation with `whole_channels`, as one 2-D
// copy: `rows` runs of `row_bytes`, `whole_pitch` apart in the whole and `part_pitch` in the
// part, starting `offset_bytes` into the whole. NCHW: a sample's slice is one run (its planes
// are contiguous). NHWC: a pixel's slice is one run.
struct ChannelSliceCopy {
  std::int64_t rows = 0, row_bytes = 0, part_pitch = 0, whole_pitch = 0, offset_bytes = 0;
};
inline ChannelSliceCopy channel_slice_copy(std::int64_t n, std::int64_t part_channels, std::int64_t pixels,
                                           std::int64_t whole_channels, std::int64_t offset, std::int64_t element_bytes,
                                           bool channels_last) {
  if (channels_last) {
    return {n * pixels, part_channels * element_bytes, part_channels * element_bytes, whole_channels * element_bytes,
            offset * element_bytes};
  }
  const std::int64_t plane = pixels * element_bytes;
  return {n, part_channels * plane, part_channels * plane, whole_channels * plane, offset * plane};
}

}  // namespace dlbench::worker
