// The memory order of an activation, apart from Tensor, so that headers the CUDA kernels include
// (C++17, without precision.hpp's C++20) can name it.
#pragma once

namespace dlbench::worker {

// Memory order of a 4-D activation. Logical dims are always (N, C, H, W).
enum class Layout {
  nchw,
  nhwc,
  plain,  // row-major in the logical order: weights (O, I, KH, KW), matrices (N, F), vectors
};

}  // namespace dlbench::worker
