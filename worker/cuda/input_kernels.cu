#include "cuda/input_kernels.hpp"

#include <cstdint>
#include <stdexcept>
#include <string>

#include "cuda/cuda_check.hpp"
#include "cuda/kernel_launch.cuh"
#include "input/packed_images.hpp"

namespace dlbench::worker::kernels {
namespace {

using input::PackedBatchLayout;
using input::PackedImage;

// Pillow's fixed point for 8-bit images (Resample.c), as the host's BilinearResampler.
constexpr int kPrecisionBits = 32 - 8 - 2;

__device__ inline int clip8(std::int32_t sum) {
  if (sum >= (1 << kPrecisionBits << 8)) return 255;
  if (sum <= 0) return 0;
  return sum >> kPrecisionBits;
}

// One thread an output pixel: for each row the vertical taps read, the horizontal pass's value
// there (its own sums, clipped, as the host's pass stores them), then the vertical sums over those
// rows, clipped; the normaliser's table value, rounded once to T. Integer sums, so the order of the
// terms does not matter: the host's bytes.
template <typename T, bool kChannelsLast>
__global__ void expand_packed_images_kernel(const unsigned char* batch, std::int64_t images, int out, T* y) {
  const auto* const table = reinterpret_cast<const float*>(batch + PackedBatchLayout::kNormalizer);
  const auto* const entries = reinterpret_cast<const PackedImage*>(batch + PackedBatchLayout::kTable);
  const std::int64_t plane = static_cast<std::int64_t>(out) * out;
  DLBENCH_GRID_STRIDE(index, images * plane) {
    const std::int64_t n = index / plane;
    const auto at = static_cast<int>(index - n * plane);
    const int row_out = at / out, column_out = at - row_out * out;
    const PackedImage e = entries[n];
    const int column = e.flip != 0 ? out - 1 - column_out : column_out;  // in the resized image
    const unsigned char* const pixels = batch + e.pixels;
    const auto* const horizontal_first = reinterpret_cast<const std::int32_t*>(batch + e.taps);
    const std::int32_t* const horizontal_count = horizontal_first + out;
    const std::int32_t* const horizontal_weights = horizontal_count + out;
    const std::int32_t* const vertical_first =
        horizontal_weights + static_cast<std::int64_t>(out) * e.horizontal_size;
    const std::int32_t* const vertical_count = vertical_first + out;
    const std::int32_t* const vertical_weights = vertical_count + out;
    int first_row = row_out, rows = 1;
    const std::int32_t* row_weights = nullptr;
    if (e.need_vertical != 0) {
      first_row = vertical_first[row_out];
      rows = vertical_count[row_out];
      row_weights = vertical_weights + static_cast<std::int64_t>(row_out) * e.vertical_size;
    }
    int first_column = column, columns = 0;
    const std::int32_t* column_weights = nullptr;
    if (e.need_horizontal != 0) {
      first_column = horizontal_first[column];
      columns = horizontal_count[column];
      column_weights = horizontal_weights + static_cast<std::int64_t>(column) * e.horizontal_size;
    }
    constexpr std::int32_t kHalf = 1 << (kPrecisionBits - 1);
    std::int32_t sums[3] = {kHalf, kHalf, kHalf};
    int value[3] = {0, 0, 0};
    for (int r = 0; r < rows; ++r) {
      const unsigned char* const row = pixels + static_cast<std::int64_t>(first_row + r) * e.stride;
      int across[3];
      if (column_weights != nullptr) {
        std::int32_t s[3] = {kHalf, kHalf, kHalf};
        for (int i = 0; i < columns; ++i) {
          const unsigned char* const p = row + static_cast<std::int64_t>(first_column + i) * 3;
          for (int c = 0; c < 3; ++c) s[c] += p[c] * column_weights[i];
        }
        for (int c = 0; c < 3; ++c) across[c] = clip8(s[c]);
      } else {
        const unsigned char* const p = row + static_cast<std::int64_t>(first_column) * 3;
        for (int c = 0; c < 3; ++c) across[c] = p[c];
      }
      if (row_weights != nullptr) {
        for (int c = 0; c < 3; ++c) sums[c] += across[c] * row_weights[r];
      } else {
        for (int c = 0; c < 3; ++c) value[c] = across[c];
      }
    }
    if (row_weights != nullptr) {
      for (int c = 0; c < 3; ++c) value[c] = clip8(sums[c]);
    }
    for (int c = 0; c < 3; ++c) {
      const std::int64_t to = kChannelsLast ? (n * plane + at) * 3 + c : (n * 3 + c) * plane + at;
      y[to] = store<T>(table[c * 256 + value[c]]);
    }
  }
}

}  // namespace

void expand_packed_images(DType dtype, bool channels_last, const void* batch, std::int64_t images, int out, void* y,
                          cudaStream_t stream) {
  if (images < 0 || out < 1) {
    throw std::invalid_argument("expand_packed_images: " + std::to_string(images) + " images at " +
                                std::to_string(out) + " pixels");
  }
  const std::int64_t n = images * out * static_cast<std::int64_t>(out);
  const auto* const bytes = static_cast<const unsigned char*>(batch);
  with_float_type(dtype, [&](auto t) {
    using T = typename decltype(t)::type;
    if (channels_last) {
      auto* const kernel = &expand_packed_images_kernel<T, true>;
      DLBENCH_LAUNCH(kernel, n, stream, bytes, images, out, static_cast<T*>(y));
    } else {
      auto* const kernel = &expand_packed_images_kernel<T, false>;
      DLBENCH_LAUNCH(kernel, n, stream, bytes, images, out, static_cast<T*>(y));
    }
  });
}

}  // namespace dlbench::worker::kernels
