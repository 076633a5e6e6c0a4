#include "cuda/kernels.hpp"

#include <algorithm>

#include "bilinear_taps.hpp"
#include "dropout_mask.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/kernel_launch.cuh"

namespace dlbench::worker::kernels {
namespace {

__global__ void relu_forward_kernel(const float* x, float* y, std::int64_t n) {
  DLBENCH_GRID_STRIDE(i, n) { y[i] = x[i] > 0.0f ? x[i] : 0.0f; }
}

__global__ void relu_backward_kernel(const float* y, const float* dy, float* dx, std::int64_t n) {
  DLBENCH_GRID_STRIDE(i, n) { dx[i] = y[i] > 0.0f ? dy[i] : 0.0f; }
}

__global__ void add_kernel(const float* a, const float* b, float* y, std::int64_t n) {
  DLBENCH_GRID_STRIDE(i, n) { y[i] = a[i] + b[i]; }
}

__global__ void add_relu_kernel(const float* a, const float* b, float* y, std::int64_t n) {
  DLBENCH_GRID_STRIDE(i, n) { y[i] = fmaxf(a[i] + b[i], 0.0f); }
}

__global__ void multiply_kernel(const float* a, const float* b, float* y, std::int64_t n) {
  DLBENCH_GRID_STRIDE(i, n) { y[i] = a[i] * b[i]; }
}

__global__ void scale_and_flag_kernel(float* data, std::int64_t n, float factor, int* non_finite) {
  bool bad = false;
  DLBENCH_GRID_STRIDE(i, n) {
    data[i] *= factor;
    bad |= !isfinite(data[i]);
  }
  if (bad) *non_finite = 1;  // a benign race: every writer writes 1
}

__device__ inline int window_start(int i, int in, int out) { return i * in / out; }
__device__ inline int window_end(int i, int in, int out) { return ((i + 1) * in + out - 1) / out; }

// One thread per output element (n, c, oh, ow), NCHW.
__global__ void adaptive_avg_pool_forward_kernel(const float* x, float* y, int n, int c, int in_h, int in_w, int out_h,
                                                 int out_w) {
  const std::int64_t total = static_cast<std::int64_t>(n) * c * out_h * out_w;
  DLBENCH_GRID_STRIDE(index, total) {
    const int ow = static_cast<int>(index % out_w);
    const int oh = static_cast<int>((index / out_w) % out_h);
    const std::int64_t plane = index / (static_cast<std::int64_t>(out_w) * out_h);  // n * c + channel
    const int h0 = window_start(oh, in_h, out_h), h1 = window_end(oh, in_h, out_h);
    const int w0 = window_start(ow, in_w, out_w), w1 = window_end(ow, in_w, out_w);
    const float* in = x + plane * in_h * in_w;
    float sum = 0.0f;
    for (int h = h0; h < h1; ++h) {
      for (int w = w0; w < w1; ++w) sum += in[h * in_w + w];
    }
    y[index] = sum / static_cast<float>((h1 - h0) * (w1 - w0));
  }
}

// One thread per input element: the sum over the output windows that contain it.
__global__ void adaptive_avg_pool_backward_kernel(const float* dy, float* dx, int n, int c, int in_h, int in_w,
                                                  int out_h, int out_w) {
  const std::int64_t total = static_cast<std::int64_t>(n) * c * in_h * in_w;
  DLBENCH_GRID_STRIDE(index, total) {
    const int w = static_cast<int>(index % in_w);
    const int h = static_cast<int>((index / in_w) % in_h);
    const std::int64_t plane = index / (static_cast<std::int64_t>(in_w) * in_h);
    const float* g = dy + plane * out_h * out_w;
    float sum = 0.0f;
    for (int oh = 0; oh < out_h; ++oh) {
      const int h0 = window_start(oh, in_h, out_h), h1 = window_end(oh, in_h, out_h);
      if (h < h0 || h >= h1) continue;
      for (int ow = 0; ow < out_w; ++ow) {
        const int w0 = window_start(ow, in_w, out_w), w1 = window_end(ow, in_w, out_w);
        if (w < w0 || w >= w1) continue;
        sum += g[oh * out_w + ow] / static_cast<float>((h1 - h0) * (w1 - w0));
      }
    }
    dx[index] = sum;
  }
}


__global__ void set_step_kernel(std::uint64_t* counter, std::uint64_t step) { *counter = step; }
__global__ void advance_step_kernel(std::uint64_t* counter) { *counter += 1; }

__global__ void dropout_forward_kernel(const float* x, float* y, float* mask, std::int64_t n, std::uint64_t threshold,
                                       float keep_scale, std::uint64_t layer_seed, const std::uint64_t* step) {
  const std::uint64_t seed = dlbench::worker::dropout_seed(layer_seed, *step);
  DLBENCH_GRID_STRIDE(i, n) {
    const bool keep = dlbench::worker::dropout_keeps(seed, static_cast<std::uint64_t>(i), threshold);
    mask[i] = keep ? keep_scale : 0.0f;
    y[i] = x[i] * mask[i];
  }
}

// One block per row; the row's max and sum of exponentials by block reductions.
__global__ void softmax_cross_entropy_kernel(const float* logits, const std::int32_t* labels, float* dlogits,
                                             float* loss_rows, int classes, float gradient_factor, float weight) {
  __shared__ float reduce[kThreads];
  const int row = blockIdx.x;
  const float* z = logits + static_cast<std::int64_t>(row) * classes;
  float* g = dlogits + static_cast<std::int64_t>(row) * classes;

  float local_max = -INFINITY;
  for (int j = threadIdx.x; j < classes; j += blockDim.x) local_max = fmaxf(local_max, z[j]);
  reduce[threadIdx.x] = local_max;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) reduce[threadIdx.x] = fmaxf(reduce[threadIdx.x], reduce[threadIdx.x + stride]);
    __syncthreads();
  }
  const float row_max = reduce[0];
  __syncthreads();

  float local_sum = 0.0f;
  for (int j = threadIdx.x; j < classes; j += blockDim.x) local_sum += expf(z[j] - row_max);
  reduce[threadIdx.x] = local_sum;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) reduce[threadIdx.x] += reduce[threadIdx.x + stride];
    __syncthreads();
  }
  const float log_sum = logf(reduce[0]);
  const int label = labels[row];
  for (int j = threadIdx.x; j < classes; j += blockDim.x) {
    const float probability = expf(z[j] - row_max - log_sum);
    g[j] = (probability - (j == label ? 1.0f : 0.0f)) * gradient_factor;
  }
  if (threadIdx.x == 0) {
    const float loss = weight * (log_sum - (z[label] - row_max));
    loss_rows[row] = loss;
  }
}

__global__ void count_valid_labels_kernel(const std::int32_t* labels, std::int64_t n, std::int32_t ignore_label,
                                          int* valid_count) {
  int local = 0;
  DLBENCH_GRID_STRIDE(i, n) { local += labels[i] != ignore_label ? 1 : 0; }
  if (local > 0) atomicAdd(valid_count, local);
}

// One thread per pixel: consecutive threads read consecutive pixels of each class plane.
__global__ void pixel_softmax_cross_entropy_kernel(const float* logits, const std::int32_t* labels, float* dlogits,
                                                   float* loss_pixels, const int* valid_count, int classes,
                                                   std::int64_t pixels, std::int64_t total, std::int32_t ignore_label,
                                                   float gradient_scale, float weight) {
  DLBENCH_GRID_STRIDE(i, total) {
    const std::int64_t sample = i / pixels, pixel = i % pixels;
    const float* z = logits + sample * classes * pixels + pixel;
    float* g = dlogits + sample * classes * pixels + pixel;
    const std::int32_t label = labels[i];
    const float valid = static_cast<float>(valid_count[0] > 0 ? valid_count[0] : 1);
    float loss = 0.0f;
    if (label == ignore_label) {
      for (int j = 0; j < classes; ++j) g[j * pixels] = 0.0f;
    } else {
      float z_max = -INFINITY;
      for (int j = 0; j < classes; ++j) z_max = fmaxf(z_max, z[j * pixels]);
      float sum = 0.0f;
      for (int j = 0; j < classes; ++j) sum += expf(z[j * pixels] - z_max);
      const float log_sum = logf(sum);
      const float factor = weight * gradient_scale / valid;
      for (int j = 0; j < classes; ++j) {
        g[j * pixels] = (expf(z[j * pixels] - z_max - log_sum) - (j == label ? 1.0f : 0.0f)) * factor;
      }
      loss = weight * (log_sum - (z[label * pixels] - z_max)) * static_cast<float>(total) / valid;
    }
    loss_pixels[i] = loss;
  }
}

// Output element i of NCHW planes: its plane and its taps along H and W.
struct ResizeTaps {
  std::int64_t plane;
  BilinearTaps y, x;
  __device__ ResizeTaps(std::int64_t i, int in_h, int in_w, int out_h, int out_w)
      : plane(i / (static_cast<std::int64_t>(out_w) * out_h)),
        y(bilinear_taps(static_cast<int>((i / out_w) % out_h), in_h, out_h)),
        x(bilinear_taps(static_cast<int>(i % out_w), in_w, out_w)) {}
};

__global__ void bilinear_resize_forward_kernel(const float* x, float* y, std::int64_t total, int in_h, int in_w,
                                               int out_h, int out_w) {
  DLBENCH_GRID_STRIDE(i, total) {
    const ResizeTaps t(i, in_h, in_w, out_h, out_w);
    const BilinearTaps &ty = t.y, &tx = t.x;
    const float* p = x + t.plane * in_h * in_w;
    const float top = (1.0f - tx.weight) * p[ty.first * in_w + tx.first] + tx.weight * p[ty.first * in_w + tx.second];
    const float bottom =
        (1.0f - tx.weight) * p[ty.second * in_w + tx.first] + tx.weight * p[ty.second * in_w + tx.second];
    y[i] = (1.0f - ty.weight) * top + ty.weight * bottom;
  }
}

__global__ void bilinear_resize_backward_kernel(const float* dy, float* dx, std::int64_t total, int in_h, int in_w,
                                                int out_h, int out_w) {
  DLBENCH_GRID_STRIDE(i, total) {
    const ResizeTaps t(i, in_h, in_w, out_h, out_w);
    const BilinearTaps &ty = t.y, &tx = t.x;
    float* p = dx + t.plane * in_h * in_w;
    const float g = dy[i];
    atomicAdd(p + ty.first * in_w + tx.first, (1.0f - ty.weight) * (1.0f - tx.weight) * g);
    atomicAdd(p + ty.first * in_w + tx.second, (1.0f - ty.weight) * tx.weight * g);
    atomicAdd(p + ty.second * in_w + tx.first, ty.weight * (1.0f - tx.weight) * g);
    atomicAdd(p + ty.second * in_w + tx.second, ty.weight * tx.weight * g);
  }
}

__global__ void sum_kernel(const float* x, std::int64_t n, float* total) {
  __shared__ float reduce[kThreads];
  float local = 0.0f;
  DLBENCH_GRID_STRIDE(i, n) { local += x[i]; }
  reduce[threadIdx.x] = local;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) reduce[threadIdx.x] += reduce[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0) atomicAdd(total, reduce[0]);
}

__global__ void sgd_kernel(float* values, const float* grads, float* momentum_buffer, std::int64_t n, float learning_rate,
                           float momentum, float weight_decay, bool first_step) {
  DLBENCH_GRID_STRIDE(i, n) {
    const float d = grads[i] + weight_decay * values[i];
    const float buffer = first_step ? d : momentum * momentum_buffer[i] + d;
    momentum_buffer[i] = buffer;
    values[i] -= learning_rate * buffer;
  }
}

__global__ void column_sums_kernel(const float* dy, float* sums, int rows, int columns) {
  DLBENCH_GRID_STRIDE(j, columns) {
    float sum = 0.0f;
    for (int r = 0; r < rows; ++r) sum += dy[static_cast<std::int64_t>(r) * columns + j];
    sums[j] = sum;
  }
}

}  // namespace

void relu_forward(const float* x, float* y, std::int64_t n, cudaStream_t stream) {
  DLBENCH_LAUNCH(relu_forward_kernel, n, stream, x, y, n);
}
void relu_backward(const float* y, const float* dy, float* dx, std::int64_t n, cudaStream_t stream) {
  DLBENCH_LAUNCH(relu_backward_kernel, n, stream, y, dy, dx, n);
}
void add(const float* a, const float* b, float* y, std::int64_t n, cudaStream_t stream) {
  DLBENCH_LAUNCH(add_kernel, n, stream, a, b, y, n);
}
void add_relu(const float* a, const float* b, float* y, std::int64_t n, cudaStream_t stream) {
  DLBENCH_LAUNCH(add_relu_kernel, n, stream, a, b, y, n);
}
void multiply(const float* a, const float* b, float* y, std::int64_t n, cudaStream_t stream) {
  DLBENCH_LAUNCH(multiply_kernel, n, stream, a, b, y, n);
}
void scale_and_flag_non_finite(float* data, std::int64_t n, float factor, int* non_finite, cudaStream_t stream) {
  DLBENCH_LAUNCH(scale_and_flag_kernel, n, stream, data, n, factor, non_finite);
}
void adaptive_avg_pool_forward(const float* x, float* y, int n, int c, int in_h, int in_w, int out_h, int out_w,
                               cudaStream_t stream) {
  const std::int64_t total = static_cast<std::int64_t>(n) * c * out_h * out_w;
  DLBENCH_LAUNCH(adaptive_avg_pool_forward_kernel, total, stream, x, y, n, c, in_h, in_w, out_h, out_w);
}
void adaptive_avg_pool_backward(const float* dy, float* dx, int n, int c, int in_h, int in_w, int out_h, int out_w,
                                cudaStream_t stream) {
  const std::int64_t total = static_cast<std::int64_t>(n) * c * in_h * in_w;
  DLBENCH_LAUNCH(adaptive_avg_pool_backward_kernel, total, stream, dy, dx, n, c, in_h, in_w, out_h, out_w);
}
void set_step(std::uint64_t* counter, std::uint64_t step, cudaStream_t stream) {
  set_step_kernel<<<1, 1, 0, stream>>>(counter, step);
  DLBENCH_CUDA_CHECK(cudaGetLastError());
}
void advance_step(std::uint64_t* counter, cudaStream_t stream) {
  advance_step_kernel<<<1, 1, 0, stream>>>(counter);
  DLBENCH_CUDA_CHECK(cudaGetLastError());
}
void dropout_forward(const float* x, float* y, float* mask, std::int64_t n, float p, std::uint64_t layer_seed,
                     const std::uint64_t* step, cudaStream_t stream) {
  const auto threshold = static_cast<std::uint64_t>(static_cast<double>(p) * 18446744073709551616.0);
  DLBENCH_LAUNCH(dropout_forward_kernel, n, stream, x, y, mask, n, threshold, 1.0f / (1.0f - p), layer_seed, step);
}
void softmax_cross_entropy(const float* logits, const std::int32_t* labels, float* dlogits, float* loss_rows,
                           int rows, int classes, float gradient_scale, float weight, cudaStream_t stream) {
  if (rows <= 0) return;
  softmax_cross_entropy_kernel<<<rows, kThreads, 0, stream>>>(
      logits, labels, dlogits, loss_rows, classes, gradient_scale * weight / static_cast<float>(rows), weight);
  DLBENCH_CUDA_CHECK(cudaGetLastError());
}
void pixel_softmax_cross_entropy(const float* logits, const std::int32_t* labels, float* dlogits,
                                 float* loss_pixels, int* valid_count, int n, int classes, std::int64_t pixels,
                                 std::int32_t ignore_label, float gradient_scale, float weight, cudaStream_t stream) {
  const std::int64_t total = static_cast<std::int64_t>(n) * pixels;
  DLBENCH_LAUNCH(count_valid_labels_kernel, total, stream, labels, total, ignore_label, valid_count);
  DLBENCH_LAUNCH(pixel_softmax_cross_entropy_kernel, total, stream, logits, labels, dlogits, loss_pixels, valid_count,
                 classes, pixels, total, ignore_label, gradient_scale, weight);
}
void bilinear_resize_forward(const float* x, float* y, std::int64_t planes, int in_h, int in_w, int out_h, int out_w,
                             cudaStream_t stream) {
  const std::int64_t total = planes * out_h * out_w;
  DLBENCH_LAUNCH(bilinear_resize_forward_kernel, total, stream, x, y, total, in_h, in_w, out_h, out_w);
}
void bilinear_resize_backward(const float* dy, float* dx, std::int64_t planes, int in_h, int in_w, int out_h,
                              int out_w, cudaStream_t stream) {
  DLBENCH_CUDA_CHECK(cudaMemsetAsync(dx, 0, static_cast<std::size_t>(planes * in_h * in_w) * sizeof(float), stream));
  const std::int64_t total = planes * out_h * out_w;
  DLBENCH_LAUNCH(bilinear_resize_backward_kernel, total, stream, dy, dx, total, in_h, in_w, out_h, out_w);
}
void sum(const float* x, std::int64_t n, float* total, cudaStream_t stream) {
  DLBENCH_CUDA_CHECK(cudaMemsetAsync(total, 0, sizeof(float), stream));
  DLBENCH_LAUNCH(sum_kernel, n, stream, x, n, total);
}
void sgd(float* values, const float* grads, float* momentum_buffer, std::int64_t n, float learning_rate,
         float momentum, float weight_decay, bool first_step, cudaStream_t stream) {
  DLBENCH_LAUNCH(sgd_kernel, n, stream, values, grads, momentum_buffer, n, learning_rate, momentum, weight_decay,
                 first_step);
}
void column_sums(const float* dy, float* sums, int rows, int columns, cudaStream_t stream) {
  DLBENCH_LAUNCH(column_sums_kernel, columns, stream, dy, sums, rows, columns);
}

}  // namespace dlbench::worker::kernels
