// dlbench's own CUDA kernels: the element-wise and small reductions that cuDNN and cuBLAS do
// not cover (or cover with a launch and descriptors costing more than the work). Each
// launcher queues its kernel on `stream` and checks the launch. Activations are `dtype`
// (fp32, fp16 or bf16: loaded as float, computed in float, rounded once on store) in the
// memory order `geometry` or `channels_last` says; parameters, their gradients, dropout masks
// and loss rows are fp32.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "activation_index.hpp"
#include "dtype.hpp"
#include "loss_scaler.hpp"

namespace dlbench::worker::kernels {

void relu_forward(DType dtype, const void* x, void* y, std::int64_t n, cudaStream_t stream);
// dx = dy where y > 0 (dx may be dy).
void relu_backward(DType dtype, const void* y, const void* dy, void* dx, std::int64_t n, cudaStream_t stream);
// y = a + b (y may be a).
void add(DType dtype, const void* a, const void* b, void* y, std::int64_t n, cudaStream_t stream);
// y = max(a + b, 0) (y may be a): a residual block's tail in one pass.
void add_relu(DType dtype, const void* a, const void* b, void* y, std::int64_t n, cudaStream_t stream);
// Dynamic loss scaling's check on the device: data *= 1 / state->scale, then `state` moves on by
// next_loss_scale (overflowed when any result is inf or NaN). Three launches, no host decision.
void unscale_and_check_finite(float* data, std::int64_t n, LossScaleState* state, const LossScalingConfig& config,
                              cudaStream_t stream);
// counts[0] += the infs among x's n values, counts[1] += the NaNs (64-bit counters on the device).
void count_non_finite(DType dtype, const void* x, std::int64_t n, unsigned long long* counts, cudaStream_t stream);
// Adaptive average pooling with PyTorch's windows [floor(i·in/out), ceil((i+1)·in/out)); x and y
// in the same memory order.
void adaptive_avg_pool_forward(DType dtype, const void* x, void* y, const ActivationGeometry& in, int out_h, int out_w,
                               cudaStream_t stream);
void adaptive_avg_pool_backward(DType dtype, const void* dy, void* dx, const ActivationGeometry& in, int out_h,
                                int out_w, cudaStream_t stream);
// Max pooling's window: kernel_h x kernel_w places, `stride` apart, over an input padded by
// `padding` on every side (the padding never wins).
struct MaxPoolWindow {
  int kernel_h = 1, kernel_w = 1, stride = 1, padding = 0;
};
// dlbench's own max pooling (DLBENCH_CUDA_POOL=own, cuda/pool_route.hpp), x and y in the same
// memory order: y the maximum of each window, the first in row-major order where values tie (a
// NaN wins, as PyTorch's does), and `argmax` that value's place in its window, one byte an output
// in y's order.
void max_pool_forward(DType dtype, const void* x, void* y, std::uint8_t* argmax, const ActivationGeometry& in,
                      const ActivationGeometry& out, const MaxPoolWindow& window, cudaStream_t stream);
// dx: each input's sum, over the windows whose arg-max it is (in row-major order of the windows),
// of their dy; reads neither x nor y.
void max_pool_backward(DType dtype, const void* dy, const std::uint8_t* argmax, void* dx, const ActivationGeometry& in,
                       const ActivationGeometry& out, const MaxPoolWindow& window, cudaStream_t stream);
// The step counter dropout reads: set to a value, or advanced by one (inside a captured step).
void set_step(std::uint64_t* counter, std::uint64_t step, cudaStream_t stream);
void advance_step(std::uint64_t* counter, cudaStream_t stream);
// y = x · mask, inverted dropout with the CPU backend's mask (dropout_mask.hpp), its key mixing
// in *step on the device; x null writes the mask itself (0 or the scale, exact) in y's dtype.
void dropout(DType dtype, const void* x, void* y, std::int64_t n, float p, std::uint64_t layer_seed,
             const std::uint64_t* step, cudaStream_t stream);
// The same over a channels-last activation, each element keyed on its logical NCHW index
// (ActivationGeometry::logical_index), so that NHWC and NCHW drop the same elements.
void dropout_channels_last(DType dtype, const void* x, void* y, const ActivationGeometry& g, float p,
                           std::uint64_t layer_seed, const std::uint64_t* step, cudaStream_t stream);
// One block per row: valid_count[0] (zeroed by the caller) becomes the number of labels not below
// 0; loss_rows[b] = weight · (logsumexp(z_b) - z_b[label_b]) · rows / valid (0 for a label below
// 0), so that their mean is the term's loss; dlogits = (softmax - onehot) · weight ·
// *gradient_scale / valid (on the device; null: 1), 0 for a label below 0. Each loss term of a step
// writes its own rows.
void softmax_cross_entropy(DType dtype, const void* logits, const std::int32_t* labels, void* dlogits,
                           float* loss_rows, int* valid_count, int rows, int classes, const float* gradient_scale,
                           float weight, cudaStream_t stream);
// Per-pixel softmax cross-entropy over (n, classes, pixels) logits (`logits` says their memory
// order): valid_count[0] (zeroed by the caller) becomes the number of labels that are neither
// `ignore_label` nor below 0; then loss_pixels[p] = weight · loss_p · n·pixels / valid (0 where ignored), so
// that their mean is the term's loss, and dlogits = (softmax - onehot) · weight · *gradient_scale
// / valid.
void pixel_softmax_cross_entropy(DType dtype, const void* logits_data, const std::int32_t* labels, void* dlogits,
                                 float* loss_pixels, int* valid_count, const ActivationGeometry& logits,
                                 std::int32_t ignore_label, const float* gradient_scale, float weight, cudaStream_t stream);
// Bilinear resize of every (sample, channel) plane of `in` to out_h x out_w, PyTorch's
// align_corners=False rule (bilinear_taps.hpp). Backward gathers, for each dx element, the output
// gradients whose taps include it (in fp32, in a fixed order: deterministic, no atomics).
void bilinear_resize_forward(DType dtype, const void* x, void* y, const ActivationGeometry& in, int out_h, int out_w,
                             cudaStream_t stream);
void bilinear_resize_backward(DType dtype, const void* dy, void* dx, const ActivationGeometry& in, int out_h, int out_w,
                              cudaStream_t stream);
// PyTorch's SGD over the flat parameter buffer (every tensor at once: one launch per step);
// nothing changes when loss_scale (null: none) says the step overflowed. With `update_number` (the
// update call's number in device memory, where a replayed step advances it) the rate is warmed up
// over `warmup_updates` (warmed_up_rate); without, it is `learning_rate` at every replay.
void sgd(float* values, const float* grads, float* momentum_buffer, std::int64_t n, float learning_rate,
         float momentum, float weight_decay, bool first_step, std::uint64_t warmup_updates,
         const std::uint64_t* update_number, const LossScaleState* loss_scale, cudaStream_t stream);
// How many floats of scratch sum() takes: one partial sum per block of its first pass.
inline constexpr int kSumPartials = 256;
// *total = sum of x[0..n) in fp32, blocks' partial sums (in `partials`, kSumPartials floats) added
// in a fixed order: the same bits however the GPU schedules the blocks.
void sum(const float* x, std::int64_t n, float* total, float* partials, cudaStream_t stream);
// sums[j] = sum over rows of dy[row][j] (row-major rows x columns), in fp32 and in a fixed order:
// a linear layer's bias gradient, and a channels-last convolution's (rows: every pixel of every
// sample, millions for VGG's first layers). Many rows are summed in chunks by separate blocks,
// whose partial sums go to `scratch` (column_sums_scratch_bytes of it; none for few rows).
std::size_t column_sums_scratch_bytes(std::int64_t rows, int columns);
void column_sums(DType dtype, const void* dy, float* sums, std::int64_t rows, int columns, float* scratch,
                 cudaStream_t stream);
// sums[j] = Σ over chunks of partial[chunk][j], in chunk order: the second pass of a chunked
// column reduction (column_reduction.hpp), for reductions of their own such as layer norm's.
void add_column_chunks(const float* partial, float* sums, int columns, std::int64_t chunks, cudaStream_t stream);
// y[sample][channel][pixel] += bias[channel]: a convolution's bias on half activations.
void add_channel_bias(DType dtype, void* y, const float* bias, const ActivationGeometry& geometry, cudaStream_t stream);
// Element type conversions: fp32 master weights to the activations' type (`to`), and gradients
// computed in it back to fp32. A filter (O, I, KH, KW) changes memory order on the way:
// PyTorch's OIHW on the fp32 side, `channels_last` (OHWI) or OIHW on the other. filter_to_fp32's
// filter side has `filter_channels` input channels: in_channels, or more where the input is read
// padded (cuda/padded_channels.hpp), the padding's taps left out.
void convert(const float* from, DType to, void* into, std::int64_t n, cudaStream_t stream);
void filter_from_fp32(const float* oihw, DType to, void* into, bool channels_last, int out_channels, int in_channels,
                      int kh, int kw, cudaStream_t stream);
void filter_to_fp32(DType from, const void* filter, bool channels_last, float* oihw, int out_channels,
                    int in_channels, int filter_channels, int kh, int kw, cudaStream_t stream);
// Channels-last activations of `pixels` pixels (every sample's), from `from_channels` a pixel to
// `into_channels`: the first min of them copied, the rest of `into` zero (padding); with
// `accumulate`, added into `into` instead (into_channels <= from_channels: a padded input's gradient).
void copy_channels(DType dtype, const void* from, int from_channels, void* into, int into_channels, std::int64_t pixels,
                   bool accumulate, cudaStream_t stream);
// filter_from_fp32 for a channels-last filter whose input channels are padded from `in_channels`
// to `padded` (cuda/padded_channels.hpp): the padding's taps are written as zero.
void padded_filter_from_fp32(const float* oihw, DType to, void* into, int out_channels, int in_channels, int padded,
                             int kh, int kw, cudaStream_t stream);

}  // namespace dlbench::worker::kernels
