// The CPU backend's training-step loops: loss scaling's check, adaptive average pooling, dropout,
// softmax cross-entropy and SGD, on OpenMP (oneDNN has no primitive for them).
#include "cpu/cpu_backend.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "cpu/onednn_memory.hpp"
#include "activation_index.hpp"
#include "dropout_mask.hpp"

namespace dlbench::worker {

// The CPU's memory is the host's: the state is read and moved on in place.
void CpuBackend::unscale_and_check_finite(float* grads, std::int64_t count, LossScaleState* state,
                                          const LossScalingConfig& config) {
  const float inverse_scale = 1.0f / state->scale;
  int non_finite = 0;
#pragma omp parallel for simd schedule(static) reduction(| : non_finite)
  for (std::int64_t i = 0; i < count; ++i) {
    grads[i] *= inverse_scale;
    non_finite |= !std::isfinite(grads[i]);
  }
  next_loss_scale(*state, non_finite == 0, config.growth_factor, config.backoff_factor, config.growth_interval);
}

namespace {

// PyTorch's adaptive pooling windows: [floor(i·in/out), ceil((i+1)·in/out)).
template <typename T>
void adaptive_avg_pool_forward_nhwc(const Tensor& x, Tensor& y) {
  const std::int64_t n = x.shape.n(), c = x.shape.c(), ih = x.shape.h(), iw = x.shape.w();
  const std::int64_t oh = y.shape.h(), ow = y.shape.w();
  const T* src = x.as<T>();
  T* dst = y.as<T>();
#pragma omp parallel for collapse(2) schedule(static)
  for (std::int64_t b = 0; b < n; ++b) {
    for (std::int64_t i = 0; i < oh; ++i) {
      std::vector<float> sum(static_cast<std::size_t>(c));
      const std::int64_t h0 = i * ih / oh, h1 = ((i + 1) * ih + oh - 1) / oh;
      for (std::int64_t j = 0; j < ow; ++j) {
        const std::int64_t w0 = j * iw / ow, w1 = ((j + 1) * iw + ow - 1) / ow;
        const float scale = 1.0f / static_cast<float>((h1 - h0) * (w1 - w0));
        std::fill(sum.begin(), sum.end(), 0.0f);
        for (std::int64_t h = h0; h < h1; ++h) {
          for (std::int64_t w = w0; w < w1; ++w) {
            const T* in = src + ((b * ih + h) * iw + w) * c;
            for (std::int64_t ch = 0; ch < c; ++ch) sum[static_cast<std::size_t>(ch)] += to_float(in[ch]);
          }
        }
        T* out = dst + ((b * oh + i) * ow + j) * c;
        for (std::int64_t ch = 0; ch < c; ++ch) out[ch] = from_float<T>(sum[static_cast<std::size_t>(ch)] * scale);
      }
    }
  }
}

template <typename T>
void adaptive_avg_pool_backward_nhwc(const Tensor& dy, Tensor& dx) {
  const std::int64_t n = dx.shape.n(), c = dx.shape.c(), ih = dx.shape.h(), iw = dx.shape.w();
  const std::int64_t oh = dy.shape.h(), ow = dy.shape.w();
  const T* grad = dy.as<T>();
  T* out = dx.as<T>();
#pragma omp parallel for schedule(static)
  for (std::int64_t b = 0; b < n; ++b) {
    // Windows may overlap: sum in fp32, round once.
    std::vector<float> sum(static_cast<std::size_t>(ih * iw * c), 0.0f);
    for (std::int64_t i = 0; i < oh; ++i) {
      const std::int64_t h0 = i * ih / oh, h1 = ((i + 1) * ih + oh - 1) / oh;
      for (std::int64_t j = 0; j < ow; ++j) {
        const std::int64_t w0 = j * iw / ow, w1 = ((j + 1) * iw + ow - 1) / ow;
        const float scale = 1.0f / static_cast<float>((h1 - h0) * (w1 - w0));
        const T* g = grad + ((b * oh + i) * ow + j) * c;
        for (std::int64_t h = h0; h < h1; ++h) {
          for (std::int64_t w = w0; w < w1; ++w) {
            float* acc = sum.data() + (h * iw + w) * c;
            for (std::int64_t ch = 0; ch < c; ++ch) acc[ch] += to_float(g[ch]) * scale;
          }
        }
      }
    }
    T* dst = out + b * ih * iw * c;
    for (std::size_t k = 0; k < sum.size(); ++k) dst[k] = from_float<T>(sum[k]);
  }
}

// y = x · mask for dropout's mask, hashed again for every pass (x null: y = mask), over one
// chunk of at most 2^32 elements inside one 2^32-element block, so that the loop runs over 32-bit
// indices, which the compiler vectorises. The chunk functions are cloned for AVX-512 and AVX2
// (the build targets generic x86-64); the OpenMP loop around them stays outside the clones,
// because its outlined body would not inherit their target.
template <typename T>
[[gnu::always_inline]] inline void dropout_chunk(const T* x, T* y, std::uint32_t count, DropoutKey key,
                                                 std::uint32_t block, std::uint32_t first, std::uint32_t threshold,
                                                 float keep_scale) {
  if (x == nullptr) {
#pragma omp simd
    for (std::uint32_t j = 0; j < count; ++j) {
      y[j] = from_float<T>(dropout_hash(key, block, first + j) >= threshold ? keep_scale : 0.0f);
    }
    return;
  }
#pragma omp simd
  for (std::uint32_t j = 0; j < count; ++j) {
    const float m = dropout_hash(key, block, first + j) >= threshold ? keep_scale : 0.0f;
    y[j] = from_float<T>(to_float(x[j]) * m);
  }
}

[[gnu::target_clones("avx512f", "avx2", "default")]] void dropout_chunk_fp32(const float* x, float* y,
                                                                              std::uint32_t count, DropoutKey key,
                                                                              std::uint32_t block, std::uint32_t first,
                                                                              std::uint32_t threshold, float keep_scale) {
  dropout_chunk(x, y, count, key, block, first, threshold, keep_scale);
}

[[gnu::target_clones("avx512f", "avx2", "default")]] void dropout_chunk_bf16(const bf16* x, bf16* y,
                                                                              std::uint32_t count, DropoutKey key,
                                                                              std::uint32_t block, std::uint32_t first,
                                                                              std::uint32_t threshold, float keep_scale) {
  dropout_chunk(x, y, count, key, block, first, threshold, keep_scale);
}

template <typename T>
void dropout_chunk_any(const T* x, T* y, std::uint32_t count, DropoutKey key, std::uint32_t block, std::uint32_t first,
                       std::uint32_t threshold, float keep_scale) {
  if constexpr (std::is_same_v<T, float>) {
    dropout_chunk_fp32(x, y, count, key, block, first, threshold, keep_scale);
  } else if constexpr (std::is_same_v<T, bf16>) {
    dropout_chunk_bf16(x, y, count, key, block, first, threshold, keep_scale);
  } else {
    dropout_chunk(x, y, count, key, block, first, threshold, keep_scale);
  }
}

// Chunks of 2^14 elements: a few per core per 2^20, and never across a 2^32 block.
constexpr std::int64_t kDropoutChunk = std::int64_t{1} << 14;

template <typename T>
void dropout_apply(const T* x, T* y, std::int64_t n, DropoutKey key, std::uint32_t threshold, float keep_scale) {
  const std::int64_t chunks = (n + kDropoutChunk - 1) / kDropoutChunk;
#pragma omp parallel for schedule(static)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::int64_t begin = c * kDropoutChunk;
    dropout_chunk_any(x == nullptr ? nullptr : x + begin, y + begin,
                      static_cast<std::uint32_t>(std::min(kDropoutChunk, n - begin)), key,
                      static_cast<std::uint32_t>(begin >> 32), static_cast<std::uint32_t>(begin), threshold, keep_scale);
  }
}

// Channels-last activations: each element keyed on its logical (N, C, H, W) index, so that the
// mask is the one a backend keeping NCHW applies (activation_index.hpp's logical_index).
template <typename T>
void dropout_apply_channels_last(const T* x, T* y, const ActivationGeometry& g, DropoutKey key,
                                 std::uint32_t threshold, float keep_scale) {
  const std::int64_t rows = g.n * g.pixels();  // a pixel's channels, contiguous
#pragma omp parallel for schedule(static)
  for (std::int64_t row = 0; row < rows; ++row) {
    for (std::int64_t channel = 0; channel < g.c; ++channel) {
      const std::int64_t at = row * g.c + channel;
      const float m = dropout_keeps(key, static_cast<std::uint64_t>(g.logical_index(at)), threshold) ? keep_scale : 0.0f;
      y[at] = from_float<T>(x == nullptr ? m : to_float(x[at]) * m);
    }
  }
}

void dropout_apply(const Tensor* x, Tensor& y, float p, DropoutKey key) {
  if (x != nullptr && x->numel() != y.numel()) {
    throw std::invalid_argument("dropout: input of " + std::to_string(x->numel()) + " elements, output of " +
                                std::to_string(y.numel()));
  }
  if (x != nullptr && x->dtype != y.dtype) throw std::invalid_argument("dropout: input and output dtypes differ");
  const bool channels_last = y.shape.rank == 4 && y.layout == Layout::nhwc;
  with_element_type(y.dtype, [&]<typename T>(T*) {
    const T* in = x == nullptr ? nullptr : x->as<T>();
    if (channels_last) {
      const ActivationGeometry g{y.shape.n(), y.shape.c(), y.shape.h(), y.shape.w(), true};
      dropout_apply_channels_last(in, y.as<T>(), g, key, dropout_threshold(p), 1.0f / (1.0f - p));
    } else {
      dropout_apply(in, y.as<T>(), y.numel(), key, dropout_threshold(p), 1.0f / (1.0f - p));
    }
  });
}

// Computed in fp64 from the logits as stored (as autocast does: cross-entropy runs in fp32).
// Rows are samples of (N, classes) logits or pixels of NHWC (N, classes, H, W) ones: either way
// a row's classes are contiguous, and rows are in the labels' order.
template <typename T>
float softmax_cross_entropy_typed(const Tensor& logits, const std::int32_t* labels, Tensor& dlogits,
                                  float gradient_scale) {
  const bool per_pixel = logits.shape.rank == 4;
  const std::int64_t k = logits.shape.c(), rows = logits.numel() / k;
  const T* all_z = logits.as<T>();
  T* all_g = dlogits.as<T>();
  // Left out: a pixel labelled kIgnoreLabel, and any row labelled below 0 (kNoPrediction).
  const auto ignored = [per_pixel](std::int32_t label) { return label < 0 || (per_pixel && label == kIgnoreLabel); };
  std::int64_t counted = 0;
#pragma omp parallel for reduction(+ : counted) schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) counted += ignored(labels[r]) ? 0 : 1;
  const double divisor = static_cast<double>(std::max<std::int64_t>(counted, 1));
  double loss = 0.0;
#pragma omp parallel for reduction(+ : loss) schedule(static)
  for (std::int64_t r = 0; r < rows; ++r) {
    const T* z = all_z + r * k;
    T* g = all_g + r * k;
    const std::int32_t label = labels[r];
    if (ignored(label)) {
      for (std::int64_t j = 0; j < k; ++j) g[j] = from_float<T>(0.0f);
      continue;
    }
    float zmax = -std::numeric_limits<float>::infinity();
    for (std::int64_t j = 0; j < k; ++j) zmax = std::max(zmax, to_float(z[j]));
    double sum = 0.0;
    for (std::int64_t j = 0; j < k; ++j) sum += std::exp(static_cast<double>(to_float(z[j]) - zmax));
    const double log_sum = std::log(sum);
    loss += log_sum - static_cast<double>(to_float(z[label]) - zmax);
    for (std::int64_t j = 0; j < k; ++j) {
      const double prob = std::exp(static_cast<double>(to_float(z[j]) - zmax) - log_sum);
      const double grad = (prob - (j == label ? 1.0 : 0.0)) / divisor;
      g[j] = from_float<T>(static_cast<float>(grad * static_cast<double>(gradient_scale)));
    }
  }
  return static_cast<float>(loss / divisor);
}

}  // namespace

void CpuBackend::adaptive_avg_pool_forward(const Tensor& x, Tensor& y) {
  with_element_type(x.dtype, [&]<typename T>(T*) { adaptive_avg_pool_forward_nhwc<T>(x, y); });
}

void CpuBackend::adaptive_avg_pool_backward(const Tensor& dy, Tensor& dx) {
  with_element_type(dy.dtype, [&]<typename T>(T*) { adaptive_avg_pool_backward_nhwc<T>(dy, dx); });
}

void CpuBackend::dropout_forward(const Tensor& x, Tensor& y, float p, std::uint64_t layer_seed) {
  dropout_apply(&x, y, p, dropout_key(layer_seed, step_));
}

void CpuBackend::dropout_backward(const Tensor& dy, Tensor& dx, float p, std::uint64_t layer_seed) {
  dropout_apply(&dy, dx, p, dropout_key(layer_seed, step_));
}

void CpuBackend::dropout_mask(Tensor& mask, float p, std::uint64_t layer_seed) {
  dropout_apply(nullptr, mask, p, dropout_key(layer_seed, step_));
}

void CpuBackend::softmax_cross_entropy(const Tensor& logits, const std::int32_t* labels, Tensor& dlogits,
                                        const float* gradient_scale, LossTerm term) {
  float loss = 0;
  with_element_type(logits.dtype, [&]<typename T>(T*) {
    loss = softmax_cross_entropy_typed<T>(logits, labels, dlogits, scale_or_one(gradient_scale) * term.weight);
  });
  const double weighted = static_cast<double>(term.weight) * static_cast<double>(loss);
  step_loss_ = term.adds_to_step_loss ? step_loss_ + weighted : weighted;
}

void CpuBackend::sgd_update(float* values, const float* grads, float* momentum_buffer, std::int64_t count,
                            const SgdConfig& config, std::uint64_t update_number, const LossScaleState* loss_scale) {
  if (update_skipped(loss_scale)) return;
  const bool first_step = update_number == 1;
  const float momentum = config.momentum, weight_decay = config.weight_decay;
  const float learning_rate =
      warmed_up_rate(config.learning_rate, applied_update_number(update_number, loss_scale), config.warmup_updates);
  float* __restrict w = values;
  const float* __restrict g = grads;
  float* __restrict buf = momentum_buffer;
#pragma omp parallel for simd schedule(static)
  for (std::int64_t i = 0; i < count; ++i) {
    const float d = g[i] + weight_decay * w[i];
    buf[i] = first_step ? d : momentum * buf[i] + d;
    w[i] -= learning_rate * buf[i];
  }
}

}  // namespace dlbench::worker
