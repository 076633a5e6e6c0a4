// The input pipeline's kernels: a packed batch of decoded crops (input/packed_images.hpp) resized,
// mirrored, normalised and rounded into the model's input on the GPU, the host pipeline's values bit
// for bit (DLBENCH_INPUT_RESIZE=device).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "dtype.hpp"

namespace dlbench::worker::kernels {

// `batch` (device memory, a packed batch of `images` images at out × out) into y: images × 3 × out
// × out values of `dtype` (fp32, fp16 or bf16), planar (NCHW) or interleaved (channels_last).
void expand_packed_images(DType dtype, bool channels_last, const void* batch, std::int64_t images, int out, void* y,
                          cudaStream_t stream);

}  // namespace dlbench::worker::kernels
