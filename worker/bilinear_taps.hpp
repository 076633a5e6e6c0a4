// Where one output pixel of a bilinear resize reads its input, along one axis: PyTorch's rule
// with align_corners=False (upsample_bilinear2d). Shared by the CUDA kernels and the CPU-side
// reference that tests them, so that the index math is checked without a GPU.
#pragma once

#include "host_device.hpp"

namespace dlbench::worker {

// out = (1 - weight) · in[first] + weight · in[second]
struct BilinearTaps {
  int first = 0;
  int second = 0;
  float weight = 0.0f;
};

// The source coordinate (i + 0.5) · in/out - 0.5, clamped below at 0; past the last input pixel
// both taps are that pixel.
DLBENCH_HOST_DEVICE inline BilinearTaps bilinear_taps(int out_index, int in_size, int out_size) {
  const float scale = static_cast<float>(in_size) / static_cast<float>(out_size);
  float source = (static_cast<float>(out_index) + 0.5f) * scale - 0.5f;
  if (source < 0.0f) source = 0.0f;
  BilinearTaps taps;
  taps.first = static_cast<int>(source);
  if (taps.first > in_size - 1) taps.first = in_size - 1;
  taps.second = taps.first < in_size - 1 ? taps.first + 1 : taps.first;
  taps.weight = source - static_cast<float>(taps.first);
  if (taps.second == taps.first) taps.weight = 0.0f;
  return taps;
}

}  // namespace dlbench::worker
