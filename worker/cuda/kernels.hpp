// dlbench's own CUDA kernels: the element-wise and small reductions that cuDNN and cuBLAS do
// not cover (or cover with a launch and descriptors costing more than the work). Each
// launcher queues its kernel on `stream` and checks the launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace dlbench::worker::kernels {

void relu_forward(const float* x, float* y, std::int64_t n, cudaStream_t stream);
// dx = dy where y > 0 (dx may be dy).
void relu_backward(const float* y, const float* dy, float* dx, std::int64_t n, cudaStream_t stream);
// y = a + b (y may be a).
void add(const float* a, const float* b, float* y, std::int64_t n, cudaStream_t stream);
// y = max(a + b, 0) (y may be a): a residual block's tail in one pass.
void add_relu(const float* a, const float* b, float* y, std::int64_t n, cudaStream_t stream);
// data *= factor; sets *non_finite to 1 if any result is inf or NaN (never clears it).
void scale_and_flag_non_finite(float* data, std::int64_t n, float factor, int* non_finite, cudaStream_t stream);
// NCHW adaptive average pooling with PyTorch's windows [floor(i·in/out), ceil((i+1)·in/out)).
void adaptive_avg_pool_forward(const float* x, float* y, int n, int c, int in_h, int in_w, int out_h, int out_w,
                               cudaStream_t stream);
void adaptive_avg_pool_backward(const float* dy, float* dx, int n, int c, int in_h, int in_w, int out_h, int out_w,
                                cudaStream_t stream);
// The step counter dropout reads: set to a value, or advanced by one (inside a captured step).
void set_step(std::uint64_t* counter, std::uint64_t step, cudaStream_t stream);
void advance_step(std::uint64_t* counter, cudaStream_t stream);
// Inverted dropout with the CPU backend's mask (dropout_mask.hpp), the seed mixed with *step on
// the device.
void dropout_forward(const float* x, float* y, float* mask, std::int64_t n, float p, std::uint64_t layer_seed,
                     const std::uint64_t* step, cudaStream_t stream);
void multiply(const float* a, const float* b, float* y, std::int64_t n, cudaStream_t stream);
// One block per row: loss_rows[b] = weight · (logsumexp(z_b) - z_b[label_b]); dlogits =
// (softmax - onehot) · weight · gradient_scale / rows. Each loss term of a step writes its own rows.
void softmax_cross_entropy(const float* logits, const std::int32_t* labels, float* dlogits, float* loss_rows,
                           int rows, int classes, float gradient_scale, float weight, cudaStream_t stream);
// Per-pixel softmax cross-entropy over NCHW logits (n, classes, pixels): valid_count[0] (zeroed by
// the caller) becomes the number of labels that are not `ignore_label`; then loss_pixels[p] =
// weight · loss_p · n·pixels / valid (0 where ignored), so that their mean is the term's loss,
// and dlogits = (softmax - onehot) · weight · gradient_scale / valid.
void pixel_softmax_cross_entropy(const float* logits, const std::int32_t* labels, float* dlogits,
                                 float* loss_pixels, int* valid_count, int n, int classes, std::int64_t pixels,
                                 std::int32_t ignore_label, float gradient_scale, float weight, cudaStream_t stream);
// Bilinear resize of NCHW planes (n · c of them), PyTorch's align_corners=False rule
// (bilinear_taps.hpp). Backward zeroes dx and adds each output gradient into its four taps.
void bilinear_resize_forward(const float* x, float* y, std::int64_t planes, int in_h, int in_w, int out_h, int out_w,
                             cudaStream_t stream);
void bilinear_resize_backward(const float* dy, float* dx, std::int64_t planes, int in_h, int in_w, int out_h,
                              int out_w, cudaStream_t stream);
// PyTorch's SGD over the flat parameter buffer (every tensor at once: one launch per step).
void sgd(float* values, const float* grads, float* momentum_buffer, std::int64_t n, float learning_rate,
         float momentum, float weight_decay, bool first_step, cudaStream_t stream);
// *total = sum of x[0..n) (zeroed here first; summed in fp32, in no fixed order).
void sum(const float* x, std::int64_t n, float* total, cudaStream_t stream);
// dbias[j] = sum over rows of dy[row][j] (row-major rows x columns).
void column_sums(const float* dy, float* dbias, int rows, int columns, cudaStream_t stream);

}  // namespace dlbench::worker::kernels
