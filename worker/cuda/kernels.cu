#include "cuda/kernels.hpp"

#include <algorithm>
#include <limits>
#include <stdexcept>

#include "bilinear_taps.hpp"
#include "dropout_mask.hpp"
#include "learning_rate_warmup.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/column_reduction.hpp"
#include "cuda/kernel_launch.cuh"
#include "cuda/padded_channels.hpp"
#include "cuda/pool_route.hpp"
#include "cuda/warp_reduce.cuh"

namespace dlbench::worker::kernels {
namespace {

struct Relu {
  __device__ float operator()(float x) const { return fmaxf(x, 0.0f); }
};
// dy passes where the output is positive; a T loaded as float and stored back is the same T.
struct ReluBackward {
  __device__ float operator()(float y, float dy) const { return y > 0.0f ? dy : 0.0f; }
};
struct Add {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct AddRelu {
  __device__ float operator()(float a, float b) const { return fmaxf(a + b, 0.0f); }
};

// The same division the host reference does (1.0f / scale, IEEE-rounded), once per thread.
__global__ void unscale_and_flag_kernel(float* data, std::int64_t n, LossScaleState* state) {
  const float factor = 1.0f / state->scale;
  bool bad = false;
  DLBENCH_GRID_STRIDE(i, n) {
    data[i] *= factor;
    bad |= !isfinite(data[i]);
  }
  if (bad) state->overflowed = 1;  // a benign race: every writer writes 1
}

// Each thread counts its share and adds it once, only when it found any: a tensor that is all
// finite costs no atomic.
template <typename T>
__global__ void count_non_finite_kernel(const T* x, std::int64_t n, unsigned long long* counts) {
  unsigned long long inf = 0, nan = 0;
  DLBENCH_GRID_STRIDE(i, n) {
    const float v = load(x[i]);  // a half or bfloat16 inf or NaN loads as the float one
    inf += isinf(v) ? 1 : 0;
    nan += isnan(v) ? 1 : 0;
  }
  if (inf != 0) atomicAdd(&counts[0], inf);
  if (nan != 0) atomicAdd(&counts[1], nan);
}

__global__ void next_loss_scale_kernel(LossScaleState* state, float growth_factor, float backoff_factor,
                                       std::int64_t growth_interval) {
  next_loss_scale(*state, state->overflowed == 0, growth_factor, backoff_factor, growth_interval);
}

__device__ inline int window_start(int i, int in, int out) { return i * in / out; }
__device__ inline int window_end(int i, int in, int out) { return ((i + 1) * in + out - 1) / out; }

// One thread per output element, in y's memory order.
template <typename T>
__global__ void adaptive_avg_pool_forward_kernel(const T* x, T* y, ActivationGeometry in, ActivationGeometry out) {
  DLBENCH_GRID_STRIDE(index, out.numel()) {
    const auto e = out.element(index);
    const int oh = static_cast<int>(e.pixel / out.w), ow = static_cast<int>(e.pixel % out.w);
    const int in_h = static_cast<int>(in.h), in_w = static_cast<int>(in.w);
    const int out_h = static_cast<int>(out.h), out_w = static_cast<int>(out.w);
    const int h0 = window_start(oh, in_h, out_h), h1 = window_end(oh, in_h, out_h);
    const int w0 = window_start(ow, in_w, out_w), w1 = window_end(ow, in_w, out_w);
    float sum = 0.0f;
    for (int h = h0; h < h1; ++h) {
      for (int w = w0; w < w1; ++w) sum += load(x[in.offset(e.sample, e.channel, h * in.w + w)]);
    }
    y[index] = store<T>(sum / static_cast<float>((h1 - h0) * (w1 - w0)));
  }
}

// One thread per input element: the sum over the output windows that contain it.
template <typename T>
__global__ void adaptive_avg_pool_backward_kernel(const T* dy, T* dx, ActivationGeometry in, ActivationGeometry out) {
  DLBENCH_GRID_STRIDE(index, in.numel()) {
    const auto e = in.element(index);
    const int h = static_cast<int>(e.pixel / in.w), w = static_cast<int>(e.pixel % in.w);
    const int in_h = static_cast<int>(in.h), in_w = static_cast<int>(in.w);
    const int out_h = static_cast<int>(out.h), out_w = static_cast<int>(out.w);
    float sum = 0.0f;
    for (int oh = 0; oh < out_h; ++oh) {
      const int h0 = window_start(oh, in_h, out_h), h1 = window_end(oh, in_h, out_h);
      if (h < h0 || h >= h1) continue;
      for (int ow = 0; ow < out_w; ++ow) {
        const int w0 = window_start(ow, in_w, out_w), w1 = window_end(ow, in_w, out_w);
        if (w < w0 || w >= w1) continue;
        sum += load(dy[out.offset(e.sample, e.channel, oh * out.w + ow)]) / static_cast<float>((h1 - h0) * (w1 - w0));
      }
    }
    dx[index] = store<T>(sum);
  }
}

// (sample, channel, row, column) of the element at `at` in g's memory order, divided in Index's
// width (32 bits where every offset fits: a 64-bit division is a long subroutine on a GPU).
struct PoolPosition {
  std::int64_t sample, channel;
  int row, column;
};
template <typename Index>
__device__ inline PoolPosition pool_position(std::int64_t at, const ActivationGeometry& g) {
  const auto c = static_cast<Index>(g.c), h = static_cast<Index>(g.h), w = static_cast<Index>(g.w);
  auto rest = static_cast<Index>(at);
  PoolPosition p{};
  if (g.channels_last) {
    p.channel = static_cast<std::int64_t>(rest % c);
    rest /= c;
  }
  p.column = static_cast<int>(rest % w);
  rest /= w;
  p.row = static_cast<int>(rest % h);
  rest /= h;
  if (!g.channels_last) {
    p.channel = static_cast<std::int64_t>(rest % c);
    rest /= c;
  }
  p.sample = static_cast<std::int64_t>(rest);
  return p;
}

// One thread an output, in y's memory order.
template <typename T, typename Index>
__global__ void max_pool_forward_kernel(const T* x, T* y, std::uint8_t* argmax, ActivationGeometry in,
                                        ActivationGeometry out, MaxPoolWindow window) {
  DLBENCH_GRID_STRIDE(index, out.numel()) {
    const PoolPosition o = pool_position<Index>(index, out);
    const int top = o.row * window.stride - window.padding, left = o.column * window.stride - window.padding;
    const int in_h = static_cast<int>(in.h), in_w = static_cast<int>(in.w);
    float best = 0.0f;
    int place = -1;
    for (int i = 0; i < window.kernel_h; ++i) {
      const int h = top + i;
      if (h < 0 || h >= in_h) continue;
      for (int j = 0; j < window.kernel_w; ++j) {
        const int w = left + j;
        if (w < 0 || w >= in_w) continue;
        const float v = load(x[in.offset(o.sample, o.channel, static_cast<std::int64_t>(h) * in_w + w)]);
        if (place < 0 || v > best || (v != v && best == best)) {  // the first maximum; a NaN wins
          best = v;
          place = i * window.kernel_w + j;
        }
      }
    }
    y[index] = store<T>(best);
    argmax[index] = static_cast<std::uint8_t>(place);
  }
}

// One thread an input, in x's memory order: the sum of dy over the windows that hold it and whose
// arg-max it is, windows in row-major order.
template <typename T, typename Index>
__global__ void max_pool_backward_kernel(const T* dy, const std::uint8_t* argmax, T* dx, ActivationGeometry in,
                                         ActivationGeometry out, MaxPoolWindow window) {
  DLBENCH_GRID_STRIDE(index, in.numel()) {
    const PoolPosition p = pool_position<Index>(index, in);
    // Window r holds row h where r · stride − padding <= h < r · stride − padding + kernel_h.
    const auto first = [&](int at, int kernel) {
      const int reach = at + window.padding - kernel + 1;
      return reach <= 0 ? 0 : (reach + window.stride - 1) / window.stride;
    };
    const auto last = [&](int at, int outputs) {
      const int reach = (at + window.padding) / window.stride;
      return reach < outputs ? reach : outputs - 1;
    };
    const int out_w = static_cast<int>(out.w);
    float sum = 0.0f;
    for (int r = first(p.row, window.kernel_h); r <= last(p.row, static_cast<int>(out.h)); ++r) {
      for (int c = first(p.column, window.kernel_w); c <= last(p.column, out_w); ++c) {
        const std::int64_t o = out.offset(p.sample, p.channel, static_cast<std::int64_t>(r) * out_w + c);
        const int place = (p.row - (r * window.stride - window.padding)) * window.kernel_w +
                          (p.column - (c * window.stride - window.padding));
        if (argmax[o] == place) sum += load(dy[o]);
      }
    }
    dx[index] = store<T>(sum);
  }
}

__global__ void set_step_kernel(std::uint64_t* counter, std::uint64_t step) { *counter = step; }
__global__ void advance_step_kernel(std::uint64_t* counter) { *counter += 1; }

// y = x · mask, the mask hashed from the step on the device (x null: y = mask). Forward and
// backward both run it: nothing stores the mask. Elements from `first` on (a tail after packs):
// an element's mask depends on its index in the whole tensor only.
template <typename T>
__global__ void dropout_kernel(const T* x, T* y, std::int64_t n, std::int64_t first, std::uint32_t threshold,
                               float keep_scale, std::uint64_t layer_seed, const std::uint64_t* step) {
  const dlbench::worker::DropoutKey key = dlbench::worker::dropout_key(layer_seed, *step);
  DLBENCH_GRID_STRIDE(i, n) {
    const auto element = static_cast<std::uint64_t>(first + i);
    const float m = dlbench::worker::dropout_keeps(key, element, threshold) ? keep_scale : 0.0f;
    y[i] = store<T>(x == nullptr ? m : load(x[i]) * m);
  }
}

// The same for a channels-last activation: each element keyed on its logical NCHW index.
template <typename T>
__global__ void dropout_channels_last_kernel(const T* x, T* y, ActivationGeometry g, std::uint32_t threshold,
                                             float keep_scale, std::uint64_t layer_seed, const std::uint64_t* step) {
  const dlbench::worker::DropoutKey key = dlbench::worker::dropout_key(layer_seed, *step);
  DLBENCH_GRID_STRIDE(i, g.numel()) {
    const auto logical = static_cast<std::uint64_t>(g.logical_index(i));
    const float m = dlbench::worker::dropout_keeps(key, logical, threshold) ? keep_scale : 0.0f;
    y[i] = store<T>(x == nullptr ? m : load(x[i]) * m);
  }
}

// The same in 16-byte packs (vector_split.hpp): attention's dropout runs over BERT's
// (sequences, heads, tokens, tokens) probabilities twice a step, 2-byte elements in fp16.
template <typename T>
__global__ void dropout_packs_kernel(const Pack<T>* x, Pack<T>* y, std::int64_t packs, std::uint32_t threshold,
                                     float keep_scale, std::uint64_t layer_seed, const std::uint64_t* step) {
  const dlbench::worker::DropoutKey key = dlbench::worker::dropout_key(layer_seed, *step);
  DLBENCH_GRID_STRIDE(i, packs) {
    Pack<T> in{};
    if (x != nullptr) in = x[i];
    Pack<T> out;
#pragma unroll
    for (int k = 0; k < Pack<T>::kWidth; ++k) {
      const auto element = static_cast<std::uint64_t>(i * Pack<T>::kWidth + k);
      const float m = dlbench::worker::dropout_keeps(key, element, threshold) ? keep_scale : 0.0f;
      out.v[k] = store<T>(x == nullptr ? m : load(in.v[k]) * m);
    }
    y[i] = out;
  }
}

// One block per row; the row's max and sum of exponentials by block reductions, in fp32.
template <typename T>
__global__ void softmax_cross_entropy_kernel(const T* logits, const std::int32_t* labels, T* dlogits,
                                             float* loss_rows, const int* valid_count, int classes, int rows,
                                             const float* gradient_scale, float weight) {
  // The loss scale is read here, not when the step was queued: a replayed graph uses the current one.
  const float valid = static_cast<float>(valid_count[0] > 0 ? valid_count[0] : 1);
  const float gradient_factor = scale_or_one(gradient_scale) * weight / valid;
  __shared__ float reduce[kThreads];
  const int row = blockIdx.x;
  const T* z = logits + static_cast<std::int64_t>(row) * classes;
  T* g = dlogits + static_cast<std::int64_t>(row) * classes;
  const int label = labels[row];
  if (label < 0) {  // left out (kNoPrediction): no loss, no gradient
    for (int j = threadIdx.x; j < classes; j += blockDim.x) g[j] = store<T>(0.0f);
    if (threadIdx.x == 0) loss_rows[row] = 0.0f;
    return;
  }

  float local_max = -INFINITY;
  for (int j = threadIdx.x; j < classes; j += blockDim.x) local_max = fmaxf(local_max, load(z[j]));
  reduce[threadIdx.x] = local_max;
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) reduce[threadIdx.x] = fmaxf(reduce[threadIdx.x], reduce[threadIdx.x + stride]);
    __syncthreads();
  }
  const float row_max = reduce[0];
  __syncthreads();

  float local_sum = 0.0f;
  for (int j = threadIdx.x; j < classes; j += blockDim.x) local_sum += expf(load(z[j]) - row_max);
  reduce[threadIdx.x] = local_sum;
  __syncthreads();
  for (unsigned stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride) reduce[threadIdx.x] += reduce[threadIdx.x + stride];
    __syncthreads();
  }
  const float log_sum = logf(reduce[0]);
  for (int j = threadIdx.x; j < classes; j += blockDim.x) {
    const float probability = expf(load(z[j]) - row_max - log_sum);
    g[j] = store<T>((probability - (j == label ? 1.0f : 0.0f)) * gradient_factor);
  }
  // Scaled so that the mean over all rows is the mean over the rows not left out.
  if (threadIdx.x == 0) loss_rows[row] = weight * (log_sum - (load(z[label]) - row_max)) * static_cast<float>(rows) / valid;
}

__global__ void count_valid_labels_kernel(const std::int32_t* labels, std::int64_t n, std::int32_t ignore_label,
                                          int* valid_count) {
  int local = 0;
  DLBENCH_GRID_STRIDE(i, n) { local += labels[i] >= 0 && labels[i] != ignore_label ? 1 : 0; }
  if (local > 0) atomicAdd(valid_count, local);
}

// One thread per pixel (labels in (sample, pixel) order); its classes `channel_stride()` apart.
template <typename T>
__global__ void pixel_softmax_cross_entropy_kernel(const T* logits, const std::int32_t* labels, T* dlogits,
                                                   float* loss_pixels, const int* valid_count, ActivationGeometry l,
                                                   std::int32_t ignore_label, const float* gradient_scale, float weight) {
  const std::int64_t total = l.n * l.pixels();
  const float scale = scale_or_one(gradient_scale);
  const std::int64_t step = l.channel_stride();
  const int classes = static_cast<int>(l.c);
  DLBENCH_GRID_STRIDE(i, total) {
    const std::int64_t base = l.offset(i / l.pixels(), 0, i % l.pixels());
    const T* z = logits + base;
    T* g = dlogits + base;
    const std::int32_t label = labels[i];
    const float valid = static_cast<float>(valid_count[0] > 0 ? valid_count[0] : 1);
    float loss = 0.0f;
    if (label < 0 || label == ignore_label) {
      for (int j = 0; j < classes; ++j) g[j * step] = store<T>(0.0f);
    } else {
      float z_max = -INFINITY;
      for (int j = 0; j < classes; ++j) z_max = fmaxf(z_max, load(z[j * step]));
      float sum = 0.0f;
      for (int j = 0; j < classes; ++j) sum += expf(load(z[j * step]) - z_max);
      const float log_sum = logf(sum);
      const float factor = weight * scale / valid;
      for (int j = 0; j < classes; ++j) {
        g[j * step] = store<T>((expf(load(z[j * step]) - z_max - log_sum) - (j == label ? 1.0f : 0.0f)) * factor);
      }
      loss = weight * (log_sum - (load(z[label * step]) - z_max)) * static_cast<float>(total) / valid;
    }
    loss_pixels[i] = loss;
  }
}

// Output element i (in the output's memory order): its sample, channel and taps along H and W.
struct ResizeTaps {
  ActivationGeometry::Element e;
  BilinearTaps y, x;
  __device__ ResizeTaps(std::int64_t i, const ActivationGeometry& in, const ActivationGeometry& out)
      : e(out.element(i)), y(bilinear_taps(static_cast<int>(e.pixel / out.w), static_cast<int>(in.h), static_cast<int>(out.h))),
        x(bilinear_taps(static_cast<int>(e.pixel % out.w), static_cast<int>(in.w), static_cast<int>(out.w))) {}
};

template <typename T>
__global__ void bilinear_resize_forward_kernel(const T* x, T* y, ActivationGeometry in, ActivationGeometry out) {
  DLBENCH_GRID_STRIDE(i, out.numel()) {
    const ResizeTaps t(i, in, out);
    const auto at = [&](int row, int column) { return load(x[in.offset(t.e.sample, t.e.channel, row * in.w + column)]); };
    const float top = (1.0f - t.x.weight) * at(t.y.first, t.x.first) + t.x.weight * at(t.y.first, t.x.second);
    const float bottom = (1.0f - t.x.weight) * at(t.y.second, t.x.first) + t.x.weight * at(t.y.second, t.x.second);
    y[i] = store<T>((1.0f - t.y.weight) * top + t.y.weight * bottom);
  }
}

// The output indices along one axis whose taps may include input index i: source(o) = (o + 0.5) ·
// in/out − 0.5 lies in [i − 1, i + 1) for those that read i, widened by one each side against
// float rounding (each candidate is then tested with the forward's own taps).
struct OutputRun {
  int first, last;  // inclusive
};
__device__ inline OutputRun outputs_reading(int i, int in_size, int out_size) {
  const float outputs_per_input = static_cast<float>(out_size) / static_cast<float>(in_size);
  const int first = static_cast<int>(floorf((static_cast<float>(i) - 0.5f) * outputs_per_input - 0.5f)) - 1;
  const int last = static_cast<int>(ceilf((static_cast<float>(i) + 1.5f) * outputs_per_input - 0.5f)) + 1;
  return {first < 0 ? 0 : first, last > out_size - 1 ? out_size - 1 : last};
}

// What input index i receives of one output's gradient along an axis (both taps may be i at the edge).
__device__ inline float share_of(const BilinearTaps& t, int i) {
  return (t.first == i ? 1.0f - t.weight : 0.0f) + (t.second == i ? t.weight : 0.0f);
}

// A thread per dx element gathers the output gradients whose taps include it, in a fixed order, in
// fp32: no atomics, so dx has the same bits however the blocks are scheduled, and no fp32 copy of dx.
template <typename T>
__global__ void bilinear_resize_backward_kernel(const T* dy, T* dx, ActivationGeometry in, ActivationGeometry out) {
  const int in_h = static_cast<int>(in.h), in_w = static_cast<int>(in.w);
  const int out_h = static_cast<int>(out.h), out_w = static_cast<int>(out.w);
  DLBENCH_GRID_STRIDE(i, in.numel()) {
    const ActivationGeometry::Element e = in.element(i);
    const int row = static_cast<int>(e.pixel / in.w), column = static_cast<int>(e.pixel % in.w);
    const OutputRun rows = outputs_reading(row, in_h, out_h), columns = outputs_reading(column, in_w, out_w);
    float sum = 0.0f;
    for (int oy = rows.first; oy <= rows.last; ++oy) {
      const BilinearTaps ty = bilinear_taps(oy, in_h, out_h);
      if (ty.first != row && ty.second != row) continue;
      const float share_y = share_of(ty, row);
      for (int ox = columns.first; ox <= columns.last; ++ox) {
        const BilinearTaps tx = bilinear_taps(ox, in_w, out_w);
        if (tx.first != column && tx.second != column) continue;
        sum += share_y * share_of(tx, column) * load(dy[out.offset(e.sample, e.channel, oy * out_w + ox)]);
      }
    }
    dx[i] = store<T>(sum);
  }
}

template <typename T>
__global__ void from_fp32_kernel(const float* from, T* into, std::int64_t n) {
  DLBENCH_GRID_STRIDE(i, n) { into[i] = store<T>(from[i]); }
}

template <typename T>
__global__ void to_fp32_kernel(const T* from, float* into, std::int64_t n) {
  DLBENCH_GRID_STRIDE(i, n) { into[i] = load(from[i]); }
}

// One thread per element of the OIHW side.
template <typename T>
__global__ void filter_from_fp32_kernel(const float* oihw, T* into, bool channels_last, int out_channels,
                                        int in_channels, int kh, int kw) {
  const std::int64_t n = static_cast<std::int64_t>(out_channels) * in_channels * kh * kw;
  DLBENCH_GRID_STRIDE(i, n) {
    const std::int64_t x = i % kw, y = (i / kw) % kh, c = (i / (kw * kh)) % in_channels, o = i / (kw * kh * in_channels);
    into[filter_offset(channels_last, in_channels, kh, kw, o, c, y, x)] = store<T>(oihw[i]);
  }
}

// One thread per element of the OIHW side; the filter side's input channels are `filter_channels`
// (more than in_channels where the input is read padded, the padding's taps left out).
template <typename T>
__global__ void filter_to_fp32_kernel(const T* filter, bool channels_last, float* oihw, int out_channels,
                                      int in_channels, int filter_channels, int kh, int kw) {
  const std::int64_t n = static_cast<std::int64_t>(out_channels) * in_channels * kh * kw;
  DLBENCH_GRID_STRIDE(i, n) {
    const std::int64_t x = i % kw, y = (i / kw) % kh, c = (i / (kw * kh)) % in_channels, o = i / (kw * kh * in_channels);
    oihw[i] = load(filter[filter_offset(channels_last, filter_channels, kh, kw, o, c, y, x)]);
  }
}

// One thread per element of `into`; Index 32 bits where every offset fits (a 64-bit division is a
// long subroutine on a GPU, and a stem's input at batch 256 has 51 million).
template <typename T, bool kAccumulate, typename Index>
__global__ void copy_channels_kernel(const T* from, int from_channels, T* into, int into_channels, std::int64_t n) {
  DLBENCH_GRID_STRIDE(i, n) {
    const Index pixel = static_cast<Index>(i) / static_cast<Index>(into_channels);
    const auto channel = static_cast<int>(static_cast<Index>(i) - pixel * static_cast<Index>(into_channels));
    const float v =
        channel < from_channels ? load(from[static_cast<std::int64_t>(pixel) * from_channels + channel]) : 0.0f;
    if constexpr (kAccumulate) {
      into[i] = store<T>(load(into[i]) + v);
    } else {
      into[i] = store<T>(v);
    }
  }
}

// One thread per element of the padded OHWI side, so that the padding's taps are written too.
template <typename T>
__global__ void padded_filter_from_fp32_kernel(const float* oihw, T* into, int in_channels, int padded, int kh, int kw,
                                               std::int64_t n) {
  DLBENCH_GRID_STRIDE(j, n) {
    const std::int64_t i = oihw_of_padded_ohwi(j, in_channels, padded, kh, kw);
    into[j] = store<T>(i < 0 ? 0.0f : oihw[i]);
  }
}

// A block's share of x summed (the grid strides over all of it) into partials[block]; no atomics,
// so the result does not depend on which block finishes first.
__global__ void partial_sums_kernel(const float* x, std::int64_t n, float* partials) {
  float local = 0.0f;
  DLBENCH_GRID_STRIDE(i, n) { local += x[i]; }
  const float block_total = block_sum(local);
  if (threadIdx.x == 0) partials[blockIdx.x] = block_total;
}

// One block, a thread a partial, added by the same tree every time.
__global__ void add_partials_kernel(const float* partials, int count, float* total) {
  const float v = static_cast<int>(threadIdx.x) < count ? partials[threadIdx.x] : 0.0f;
  const float block_total = block_sum(v);
  if (threadIdx.x == 0) *total = block_total;
}

__global__ void sgd_kernel(float* values, const float* grads, float* momentum_buffer, std::int64_t n, float learning_rate,
                           float momentum, float weight_decay, bool first_step, std::uint64_t warmup_updates,
                           const std::uint64_t* update_number, const LossScaleState* loss_scale) {
  if (update_skipped(loss_scale)) return;
  if (update_number != nullptr) {
    learning_rate =
        warmed_up_rate(learning_rate, applied_update_number(*update_number, loss_scale), warmup_updates);
  }
  DLBENCH_GRID_STRIDE(i, n) {
    const float d = grads[i] + weight_decay * values[i];
    const float buffer = first_step ? d : momentum * momentum_buffer[i] + d;
    momentum_buffer[i] = buffer;
    values[i] -= learning_rate * buffer;
  }
}

// A block of kColumnTile columns × kColumnRowLanes row lanes sums one chunk of rows
// (column_reduction.hpp); the lanes' partial sums are added in shared memory in a fixed order.
// With one chunk the block writes the column's sum; with more, its chunk's partial sum, added up
// by column_sums_of_chunks_kernel in chunk order (so the result does not depend on scheduling).
template <typename T>
__global__ void column_sums_kernel(const T* dy, float* out, std::int64_t rows, int columns, std::int64_t chunk_rows) {
  __shared__ float part[kColumnRowLanes][kColumnTile + 1];
  const int column = static_cast<int>(blockIdx.x) * kColumnTile + static_cast<int>(threadIdx.x);
  const std::int64_t first = static_cast<std::int64_t>(blockIdx.y) * chunk_rows;
  const std::int64_t last = first + chunk_rows < rows ? first + chunk_rows : rows;
  float sum = 0.0f;
  if (column < columns) {
    for (std::int64_t row = first + threadIdx.y; row < last; row += kColumnRowLanes) {
      sum += load(dy[row * columns + column]);
    }
  }
  part[threadIdx.y][threadIdx.x] = sum;
  __syncthreads();
  if (threadIdx.y == 0 && column < columns) {
    for (int lane = 1; lane < kColumnRowLanes; ++lane) sum += part[lane][threadIdx.x];
    out[static_cast<std::int64_t>(blockIdx.y) * columns + column] = sum;
  }
}

__global__ void column_sums_of_chunks_kernel(const float* partial, float* sums, int columns, int chunks) {
  DLBENCH_GRID_STRIDE(column, columns) {
    float sum = 0.0f;
    for (int chunk = 0; chunk < chunks; ++chunk) sum += partial[static_cast<std::int64_t>(chunk) * columns + column];
    sums[column] = sum;
  }
}

template <typename T>
__global__ void add_channel_bias_kernel(T* y, const float* bias, ActivationGeometry g) {
  DLBENCH_GRID_STRIDE(i, g.numel()) { y[i] = store<T>(load(y[i]) + bias[g.element(i).channel]); }
}

ActivationGeometry resized(const ActivationGeometry& in, int out_h, int out_w) {
  ActivationGeometry out = in;
  out.h = out_h;
  out.w = out_w;
  return out;
}

}  // namespace

void relu_forward(DType dtype, const void* x, void* y, std::int64_t n, cudaStream_t stream) {
  launch_map(Relu{}, dtype, x, y, n, stream);
}
void relu_backward(DType dtype, const void* y, const void* dy, void* dx, std::int64_t n, cudaStream_t stream) {
  launch_map2(ReluBackward{}, dtype, y, dy, dx, n, stream);
}
void add(DType dtype, const void* a, const void* b, void* y, std::int64_t n, cudaStream_t stream) {
  launch_map2(Add{}, dtype, a, b, y, n, stream);
}
void add_relu(DType dtype, const void* a, const void* b, void* y, std::int64_t n, cudaStream_t stream) {
  launch_map2(AddRelu{}, dtype, a, b, y, n, stream);
}
void unscale_and_check_finite(float* data, std::int64_t n, LossScaleState* state, const LossScalingConfig& config,
                              cudaStream_t stream) {
  DLBENCH_CUDA_CHECK(cudaMemsetAsync(&state->overflowed, 0, sizeof state->overflowed, stream));
  DLBENCH_LAUNCH(unscale_and_flag_kernel, n, stream, data, n, state);
  DLBENCH_LAUNCH_GRID((next_loss_scale_kernel), 1, 1, stream, state, config.growth_factor, config.backoff_factor,
      config.growth_interval);
}
void count_non_finite(DType dtype, const void* x, std::int64_t n, unsigned long long* counts, cudaStream_t stream) {
  with_float_type(dtype, [&](auto type) {
    using T = typename decltype(type)::type;
    DLBENCH_LAUNCH(count_non_finite_kernel<T>, n, stream, static_cast<const T*>(x), n, counts);
  });
}
void adaptive_avg_pool_forward(DType dtype, const void* x, void* y, const ActivationGeometry& in, int out_h, int out_w,
                               cudaStream_t stream) {
  const ActivationGeometry out = resized(in, out_h, out_w);
  with_float_type(dtype, [&](auto t) {
    using T = typename decltype(t)::type;
    DLBENCH_LAUNCH(adaptive_avg_pool_forward_kernel<T>, out.numel(), stream, static_cast<const T*>(x),
                   static_cast<T*>(y), in, out);
  });
}
void adaptive_avg_pool_backward(DType dtype, const void* dy, void* dx, const ActivationGeometry& in, int out_h,
                                int out_w, cudaStream_t stream) {
  const ActivationGeometry out = resized(in, out_h, out_w);
  with_float_type(dtype, [&](auto t) {
    using T = typename decltype(t)::type;
    DLBENCH_LAUNCH(adaptive_avg_pool_backward_kernel<T>, in.numel(), stream, static_cast<const T*>(dy),
                   static_cast<T*>(dx), in, out);
  });
}
// Checks the window, then calls f(Type<T>{}, Index{}) for the activations' element type and the
// index width their offsets need (32 bits where every offset of both fits).
template <typename F>
void dispatch_max_pool(DType dtype, const ActivationGeometry& in, const ActivationGeometry& out,
                       const MaxPoolWindow& window, F&& f) {
  if (!own_max_pool_takes(window.kernel_h, window.kernel_w) || window.stride <= 0 || window.padding < 0) {
    throw std::invalid_argument("max pool kernels: a window of 1 to 255 places, a positive stride, no negative padding");
  }
  const auto most = static_cast<std::int64_t>(std::numeric_limits<std::uint32_t>::max());
  const bool index32 = in.numel() <= most && out.numel() <= most;
  with_float_type(dtype, [&](auto t) {
    if (index32) {
      f(t, std::uint32_t{});
    } else {
      f(t, std::int64_t{});
    }
  });
}
void max_pool_forward(DType dtype, const void* x, void* y, std::uint8_t* argmax, const ActivationGeometry& in,
                      const ActivationGeometry& out, const MaxPoolWindow& window, cudaStream_t stream) {
  dispatch_max_pool(dtype, in, out, window, [&](auto t, auto index) {
    using T = typename decltype(t)::type;
    auto* const kernel = &max_pool_forward_kernel<T, decltype(index)>;
    DLBENCH_LAUNCH(kernel, out.numel(), stream, static_cast<const T*>(x), static_cast<T*>(y), argmax, in, out, window);
  });
}
void max_pool_backward(DType dtype, const void* dy, const std::uint8_t* argmax, void* dx, const ActivationGeometry& in,
                       const ActivationGeometry& out, const MaxPoolWindow& window, cudaStream_t stream) {
  dispatch_max_pool(dtype, in, out, window, [&](auto t, auto index) {
    using T = typename decltype(t)::type;
    auto* const kernel = &max_pool_backward_kernel<T, decltype(index)>;
    DLBENCH_LAUNCH(kernel, in.numel(), stream, static_cast<const T*>(dy), argmax, static_cast<T*>(dx), in, out, window);
  });
}
void set_step(std::uint64_t* counter, std::uint64_t step, cudaStream_t stream) {
  DLBENCH_LAUNCH_GRID((set_step_kernel), 1, 1, stream, counter, step);
}
void advance_step(std::uint64_t* counter, cudaStream_t stream) {
  DLBENCH_LAUNCH_GRID((advance_step_kernel), 1, 1, stream, counter);
}
void dropout(DType dtype, const void* x, void* y, std::int64_t n, float p, std::uint64_t layer_seed,
             const std::uint64_t* step, cudaStream_t stream) {
  const std::uint32_t threshold = dlbench::worker::dropout_threshold(p);
  const float keep_scale = 1.0f / (1.0f - p);
  with_float_type(dtype, [&](auto t) {
    using T = typename decltype(t)::type;
    const auto* const in = static_cast<const T*>(x);
    auto* const out = static_cast<T*>(y);
    const VectorSplit split = x != nullptr ? vector_split(n, sizeof(T), {x, y}) : vector_split(n, sizeof(T), {y});
    DLBENCH_LAUNCH(dropout_packs_kernel<T>, split.packs, stream, reinterpret_cast<const Pack<T>*>(in),
                   reinterpret_cast<Pack<T>*>(out), split.packs, threshold, keep_scale, layer_seed, step);
    const std::int64_t tail = n - split.tail_start;
    DLBENCH_LAUNCH(dropout_kernel<T>, tail, stream, in != nullptr ? in + split.tail_start : nullptr,
                   out + split.tail_start, tail, split.tail_start, threshold, keep_scale, layer_seed, step);
  });
}
void dropout_channels_last(DType dtype, const void* x, void* y, const ActivationGeometry& g, float p,
                           std::uint64_t layer_seed, const std::uint64_t* step, cudaStream_t stream) {
  const std::uint32_t threshold = dlbench::worker::dropout_threshold(p);
  const float keep_scale = 1.0f / (1.0f - p);
  with_float_type(dtype, [&](auto t) {
    using T = typename decltype(t)::type;
    DLBENCH_LAUNCH(dropout_channels_last_kernel<T>, g.numel(), stream, static_cast<const T*>(x), static_cast<T*>(y),
                   g, threshold, keep_scale, layer_seed, step);
  });
}
void softmax_cross_entropy(DType dtype, const void* logits, const std::int32_t* labels, void* dlogits,
                           float* loss_rows, int* valid_count, int rows, int classes, const float* gradient_scale,
                           float weight, cudaStream_t stream) {
  if (rows <= 0) return;
  DLBENCH_LAUNCH(count_valid_labels_kernel, rows, stream, labels, static_cast<std::int64_t>(rows), std::int32_t{-1},
                 valid_count);
  with_float_type(dtype, [&](auto t) {
    using T = typename decltype(t)::type;
    DLBENCH_LAUNCH_GRID((softmax_cross_entropy_kernel<T>), rows, kThreads, stream, static_cast<const T*>(logits),
        labels, static_cast<T*>(dlogits), loss_rows, valid_count, classes, rows, gradient_scale, weight);
  });
}
void pixel_softmax_cross_entropy(DType dtype, const void* logits_data, const std::int32_t* labels, void* dlogits,
                                 float* loss_pixels, int* valid_count, const ActivationGeometry& logits,
                                 std::int32_t ignore_label, const float* gradient_scale, float weight,
                                 cudaStream_t stream) {
  const std::int64_t total = logits.n * logits.pixels();
  DLBENCH_LAUNCH(count_valid_labels_kernel, total, stream, labels, total, ignore_label, valid_count);
  with_float_type(dtype, [&](auto t) {
    using T = typename decltype(t)::type;
    DLBENCH_LAUNCH(pixel_softmax_cross_entropy_kernel<T>, total, stream, static_cast<const T*>(logits_data), labels,
                   static_cast<T*>(dlogits), loss_pixels, valid_count, logits, ignore_label, gradient_scale, weight);
  });
}
void bilinear_resize_forward(DType dtype, const void* x, void* y, const ActivationGeometry& in, int out_h, int out_w,
                             cudaStream_t stream) {
  const ActivationGeometry out = resized(in, out_h, out_w);
  with_float_type(dtype, [&](auto t) {
    using T = typename decltype(t)::type;
    DLBENCH_LAUNCH(bilinear_resize_forward_kernel<T>, out.numel(), stream, static_cast<const T*>(x),
                   static_cast<T*>(y), in, out);
  });
}
void bilinear_resize_backward(DType dtype, const void* dy, void* dx, const ActivationGeometry& in, int out_h, int out_w,
                              cudaStream_t stream) {
  const ActivationGeometry out = resized(in, out_h, out_w);
  with_float_type(dtype, [&](auto t) {
    using T = typename decltype(t)::type;
    DLBENCH_LAUNCH(bilinear_resize_backward_kernel<T>, in.numel(), stream, static_cast<const T*>(dy),
                   static_cast<T*>(dx), in, out);
  });
}
void sum(const float* x, std::int64_t n, float* total, float* partials, cudaStream_t stream) {
  static_assert(kSumPartials <= kThreads, "the partials are added by one block, a thread each");
  const unsigned blocks = n > 0 ? std::min(blocks_for(n), static_cast<unsigned>(kSumPartials)) : 0u;
  if (blocks > 0) DLBENCH_LAUNCH_GRID((partial_sums_kernel), blocks, kThreads, stream, x, n, partials);
  DLBENCH_LAUNCH_GRID((add_partials_kernel), 1, kThreads, stream, partials, static_cast<int>(blocks), total);
}
void sgd(float* values, const float* grads, float* momentum_buffer, std::int64_t n, float learning_rate,
         float momentum, float weight_decay, bool first_step, std::uint64_t warmup_updates,
         const std::uint64_t* update_number, const LossScaleState* loss_scale, cudaStream_t stream) {
  DLBENCH_LAUNCH(sgd_kernel, n, stream, values, grads, momentum_buffer, n, learning_rate, momentum, weight_decay,
                 first_step, warmup_updates, update_number, loss_scale);
}
std::size_t column_sums_scratch_bytes(std::int64_t rows, int columns) {
  return column_chunks_scratch_bytes(column_chunks(rows, columns), columns, 1);
}
void column_sums(DType dtype, const void* dy, float* sums, std::int64_t rows, int columns, float* scratch,
                 cudaStream_t stream) {
  if (columns <= 0) return;
  const ColumnChunks plan = column_chunks(rows, columns);
  if (plan.chunks > 1 && scratch == nullptr) throw std::invalid_argument("column_sums: many rows need the scratch");
  const dim3 block(kColumnTile, kColumnRowLanes);
  const dim3 grid(static_cast<unsigned>(plan.tiles), static_cast<unsigned>(plan.chunks));
  float* out = plan.chunks > 1 ? scratch : sums;
  with_float_type(dtype, [&](auto t) {
    using T = typename decltype(t)::type;
    DLBENCH_LAUNCH_GRID((column_sums_kernel<T>), grid, block, stream, static_cast<const T*>(dy), out, rows, columns,
        plan.chunk_rows);
  });
  if (plan.chunks > 1) add_column_chunks(scratch, sums, columns, plan.chunks, stream);
}
void add_column_chunks(const float* partial, float* sums, int columns, std::int64_t chunks, cudaStream_t stream) {
  DLBENCH_LAUNCH(column_sums_of_chunks_kernel, columns, stream, partial, sums, columns, static_cast<int>(chunks));
}
void add_channel_bias(DType dtype, void* y, const float* bias, const ActivationGeometry& geometry, cudaStream_t stream) {
  with_float_type(dtype, [&](auto t) {
    using T = typename decltype(t)::type;
    DLBENCH_LAUNCH(add_channel_bias_kernel<T>, geometry.numel(), stream, static_cast<T*>(y), bias, geometry);
  });
}
void convert(const float* from, DType to, void* into, std::int64_t n, cudaStream_t stream) {
  with_float_type(to, [&](auto t) {
    using T = typename decltype(t)::type;
    DLBENCH_LAUNCH(from_fp32_kernel<T>, n, stream, from, static_cast<T*>(into), n);
  });
}
void filter_from_fp32(const float* oihw, DType to, void* into, bool channels_last, int out_channels, int in_channels,
                      int kh, int kw, cudaStream_t stream) {
  const std::int64_t n = static_cast<std::int64_t>(out_channels) * in_channels * kh * kw;
  with_float_type(to, [&](auto t) {
    using T = typename decltype(t)::type;
    DLBENCH_LAUNCH(filter_from_fp32_kernel<T>, n, stream, oihw, static_cast<T*>(into), channels_last, out_channels,
                   in_channels, kh, kw);
  });
}
void filter_to_fp32(DType from, const void* filter, bool channels_last, float* oihw, int out_channels,
                    int in_channels, int filter_channels, int kh, int kw, cudaStream_t stream) {
  const std::int64_t n = static_cast<std::int64_t>(out_channels) * in_channels * kh * kw;
  with_float_type(from, [&](auto t) {
    using T = typename decltype(t)::type;
    DLBENCH_LAUNCH(filter_to_fp32_kernel<T>, n, stream, static_cast<const T*>(filter), channels_last, oihw,
                   out_channels, in_channels, filter_channels, kh, kw);
  });
}

void copy_channels(DType dtype, const void* from, int from_channels, void* into, int into_channels, std::int64_t pixels,
                   bool accumulate, cudaStream_t stream) {
  if (accumulate && into_channels > from_channels) {
    throw std::invalid_argument("copy_channels: accumulating into more channels than come from");
  }
  const std::int64_t n = pixels * into_channels;
  with_float_type(dtype, [&](auto t) {
    using T = typename decltype(t)::type;
    const std::int64_t largest = std::max<std::int64_t>(n, pixels * from_channels);
    const bool index32 = largest <= static_cast<std::int64_t>(std::numeric_limits<std::uint32_t>::max());
    auto* const kernel = index32 ? (accumulate ? &copy_channels_kernel<T, true, std::uint32_t>
                                               : &copy_channels_kernel<T, false, std::uint32_t>)
                                 : (accumulate ? &copy_channels_kernel<T, true, std::int64_t>
                                               : &copy_channels_kernel<T, false, std::int64_t>);
    DLBENCH_LAUNCH(kernel, n, stream, static_cast<const T*>(from), from_channels, static_cast<T*>(into), into_channels,
                   n);
  });
}
void padded_filter_from_fp32(const float* oihw, DType to, void* into, int out_channels, int in_channels, int padded,
                             int kh, int kw, cudaStream_t stream) {
  const std::int64_t n = static_cast<std::int64_t>(out_channels) * padded * kh * kw;
  with_float_type(to, [&](auto t) {
    using T = typename decltype(t)::type;
    DLBENCH_LAUNCH(padded_filter_from_fp32_kernel<T>, n, stream, oihw, static_cast<T*>(into), in_channels, padded, kh,
                   kw, n);
  });
}

}  // namespace dlbench::worker::kernels
