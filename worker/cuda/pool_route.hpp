// Max pooling through cuDNN or dlbench's own kernels (DLBENCH_CUDA_POOL=cudnn|own; by default own
// over NCHW and cudnn over channels last, as timed on an H200 on 2026-12-04). cuDNN's backward finds each window's arg-max by reading x and y again, so both live
// until then; the own kernels keep the arg-max as one byte an output (its place in the window) and
// read only dy and that in backward, a gather that sums each input's windows in one order. On an
// H200 (2026-11-29) fp32 ResNet-50's stem pool took 1.2 ms a step through cuDNN, PyTorch's 0.7,
// where the passes move about 0.5 GB (0.1 ms at 4.8 TB/s). On 2026-12-04 the own kernels took fp32
// ResNet-50 (NCHW, with the own batch norms) from 965.3 to 998.3 images/s, but amp's (channels
// last) from 7,211.9 down to 6,842.1: cuDNN's NHWC pooling is the faster there.
#pragma once

#include <cstdint>

#include "env_choice.hpp"
#include "layout.hpp"

namespace dlbench::worker {

enum class PoolRoute { cudnn, own };
inline constexpr Choices<PoolRoute, 2> kPoolRoutes{{{"cudnn", PoolRoute::cudnn}, {"own", PoolRoute::own}}};

// `layout` is the activations' memory order; `choice` is DLBENCH_CUDA_POOL's value (null or empty:
// unset, own over NCHW and cudnn over channels last). Throws std::invalid_argument naming the
// variable and its allowed values for anything else.
inline PoolRoute pool_route(Layout layout, const char* choice) {
  return env_choice("DLBENCH_CUDA_POOL", choice, kPoolRoutes)
      .value_or(layout == Layout::nchw ? PoolRoute::own : PoolRoute::cudnn);
}

// A window's places the own kernels' one-byte arg-max can name; a larger max pool stays with cuDNN.
inline constexpr std::int64_t kOwnMaxPoolWindowPlaces = 255;

// Whether the own kernels take a max pool of this window.
inline bool own_max_pool_takes(std::int64_t kernel_h, std::int64_t kernel_w) {
  return kernel_h > 0 && kernel_w > 0 && kernel_h * kernel_w <= kOwnMaxPoolWindowPlaces;
}

}  // namespace dlbench::worker
