#include "cpu/conv_batch_norm.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "batch_norm_plan.hpp"
#include "precision.hpp"

namespace dlbench::worker {
namespace {

// f(T{}) with T the C++ type of `dtype`'s elements (fp32, bf16 or fp16 activations).
template <typename F>
void with_element_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::fp32: f(float{}); return;
    case DType::bf16: f(bf16{}); return;
    case DType::fp16: f(fp16{}); return;
    case DType::int32: break;
  }
  throw std::invalid_argument("a fused convolution or deferred batch norm takes fp32, bf16 or fp16 activations, not " +
                              std::string(to_string(dtype)));
}

// The batch norm's ReLU input as the fused convolution computes it: one fused multiply-add.
inline float normalized(float x, float scale, float shift) { return std::fma(x, scale, shift); }

template <typename T>
std::pair<std::vector<float>, std::vector<float>> scales_and_shifts(const Tensor& scale_shift, std::int64_t channels) {
  require_elements(scale_shift, 2 * channels, "deferred batch norm", "scale_shift");
  const T* ss = scale_shift.as<T>();
  std::vector<float> scale(static_cast<std::size_t>(channels)), shift(scale.size());
  for (std::int64_t c = 0; c < channels; ++c) {
    scale[static_cast<std::size_t>(c)] = to_float(ss[c]);
    shift[static_cast<std::size_t>(c)] = to_float(ss[channels + c]);
  }
  return {std::move(scale), std::move(shift)};
}

// Two sums per channel over a channels-last tensor's pixels, term(pixel, channel) giving both
// terms: fp64, in a fixed number of chunks added in order, so that the same data gives the same
// bits whatever the threads.
template <typename Term>
std::vector<double> channel_sums(std::int64_t pixels, std::int64_t channels, Term term) {
  constexpr std::int64_t kChunks = 64;
  const auto width = static_cast<std::size_t>(2 * channels);
  std::vector<double> partial(static_cast<std::size_t>(kChunks) * width, 0.0);
#pragma omp parallel for schedule(static)
  for (std::int64_t k = 0; k < kChunks; ++k) {
    double* s = partial.data() + static_cast<std::size_t>(k) * width;
    for (std::int64_t p = pixels * k / kChunks; p < pixels * (k + 1) / kChunks; ++p) {
      for (std::int64_t c = 0; c < channels; ++c) {
        const auto [a, b] = term(p, c);
        s[c] += a;
        s[channels + c] += b;
      }
    }
  }
  std::vector<double> total(width, 0.0);
  for (std::int64_t k = 0; k < kChunks; ++k) {
    for (std::size_t i = 0; i < width; ++i) total[i] += partial[static_cast<std::size_t>(k) * width + i];
  }
  return total;
}

class HostFusedConv2d final : public FusedConv2dOp {
 public:
  HostFusedConv2d(Backend& ops, const FusedConv2dConfig& c) : config_(c), conv_(ops.make_conv2d(c.conv)) {
    if (c.conv.bias) throw std::invalid_argument("a fused convolution has no bias");
    if (c.normalized_input) normalized_memory_ = ops.allocate(static_cast<std::size_t>(c.conv.input.numel()) * dtype_size(c.conv.dtype));
  }

  void forward(const Tensor& x, const Tensor* scale_shift, const Tensor& weight, Tensor& y, Tensor* sums) override {
    conv_->forward(input_of(x, scale_shift), weight, nullptr, y);
    if (!config_.output_sums) return;
    if (sums == nullptr) throw std::logic_error("a fused convolution made with output_sums needs its sums");
    require_elements(*sums, 2 * y.shape.c(), "fused convolution", "sums");
    with_element_type(y.dtype, [&]<typename T>(T) {
      const T* out = y.as<T>();
      const std::int64_t channels = y.shape.c();
      const std::vector<double> total = channel_sums(y.numel() / channels, channels, [&](std::int64_t p, std::int64_t c) {
        const double v = to_float(out[p * channels + c]);
        return std::make_pair(v, v * v);
      });
      float* s = sums->as<float>();
      for (std::size_t i = 0; i < total.size(); ++i) s[i] = static_cast<float>(total[i]);
    });
  }

  void backward_weights(const Tensor& x, const Tensor* scale_shift, const Tensor& dy, Tensor& dweight) override {
    conv_->backward_weights(input_of(x, scale_shift), dy, dweight, nullptr);
  }

 private:
  // x itself, or relu(x · scale + shift) in the op's own memory, rounded to x's dtype.
  const Tensor& input_of(const Tensor& x, const Tensor* scale_shift) {
    if (!config_.normalized_input) return x;
    if (scale_shift == nullptr) throw std::logic_error("a fused convolution made with normalized_input needs a scale and shift");
    normalized_ = Tensor{normalized_memory_.get(), x.shape, x.layout, x.dtype};
    with_element_type(x.dtype, [&]<typename T>(T) {
      const std::int64_t channels = x.shape.c();
      const auto affine = scales_and_shifts<T>(*scale_shift, channels);
      const std::vector<float>& scale = affine.first;
      const std::vector<float>& shift = affine.second;
      const T* in = x.as<T>();
      T* out = normalized_.as<T>();
      const std::int64_t pixels = x.numel() / channels;
#pragma omp parallel for schedule(static)
      for (std::int64_t p = 0; p < pixels; ++p) {
        for (std::int64_t c = 0; c < channels; ++c) {
          const std::int64_t i = p * channels + c;
          const auto k = static_cast<std::size_t>(c);
          out[i] = from_float<T>(std::max(normalized(to_float(in[i]), scale[k], shift[k]), 0.0f));
        }
      }
    });
    return normalized_;
  }

  FusedConv2dConfig config_;
  std::unique_ptr<Conv2dOp> conv_;
  std::shared_ptr<void> normalized_memory_;
  Tensor normalized_;
};

class HostDeferredBatchNorm final : public BatchNormOp {
 public:
  explicit HostDeferredBatchNorm(const BatchNormConfig& c)
      : channels_(c.input.c()), count_(c.input.n() * c.input.h() * c.input.w()), epsilon_(c.epsilon),
        momentum_(c.momentum), dtype_(c.dtype) {
    if (!c.deferred || !c.relu || c.add_relu) {
      throw std::invalid_argument("a deferred batch norm is made with deferred and relu, without add_relu");
    }
  }

  void forward_training(const Tensor&, const Tensor&, const Tensor&, Tensor&, BatchNormStatistics&, void*) override {
    throw std::logic_error("this batch norm was made deferred: forward_deferred runs it");
  }
  void backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const BatchNormStatistics&,
                Tensor&, Tensor&, Tensor&, const void*) override {
    throw std::logic_error("this batch norm was made deferred: backward_deferred runs it");
  }

  void forward_deferred(const Tensor& sums, const Tensor& gamma, const Tensor& beta, Tensor& scale_shift,
                        BatchNormStatistics& s) override {
    require_elements(sums, 2 * channels_, "deferred batch norm", "sums");
    require_elements(scale_shift, 2 * channels_, "deferred batch norm", "scale_shift");
    const float* sum = sums.as<float>();
    const float* g = gamma.as<float>();
    const float* b = beta.as<float>();
    float* running_mean = s.running_mean.as<float>();
    float* running_var = s.running_var.as<float>();
    with_element_type(dtype_, [&]<typename T>(T) {
      T* ss = scale_shift.as<T>();
      for (std::int64_t c = 0; c < channels_; ++c) {
        const DeferredBatchNormChannel d =
            deferred_batch_norm_channel(static_cast<double>(count_), sum[c], sum[channels_ + c], g[c], b[c], epsilon_,
                                        momentum_, running_mean[c], running_var[c]);
        s.mean.as<float>()[c] = d.statistics.mean;
        s.spread.as<float>()[c] = d.statistics.inverse_std;  // the own kernels' form, as on a GPU
        running_mean[c] = d.statistics.running_mean;
        running_var[c] = d.statistics.running_var;
        ss[c] = from_float<T>(d.statistics.scale);
        ss[channels_ + c] = from_float<T>(d.shift);
      }
    });
  }

  // The own kernels' ReLU-tail backward (cuda/batch_norm_kernels.cu) on the host: g = dy where
  // (x − mean) · scale + β > 0, Σg and Σg · (x − mean) in fp64, dx = a · g + b · (x − mean) + e.
  void backward_deferred(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& beta,
                         const BatchNormStatistics& s, Tensor& dx, Tensor& dgamma, Tensor& dbeta) override {
    const float* mean = s.mean.as<float>();
    const float* inverse_std = s.spread.as<float>();
    const float* g = gamma.as<float>();
    const float* b = beta.as<float>();
    std::vector<float> scale(static_cast<std::size_t>(channels_));
    for (std::int64_t c = 0; c < channels_; ++c) scale[static_cast<std::size_t>(c)] = batch_norm_scale(g[c], inverse_std[c]);
    with_element_type(dtype_, [&]<typename T>(T) {
      const T* in = x.as<T>();
      const T* grad = dy.as<T>();
      T* out = dx.as<T>();
      const std::int64_t channels = channels_;
      const auto masked = [&](std::int64_t i, std::int64_t c) {
        const float normalized = batch_norm_normalized(to_float(in[i]), mean[c], scale[static_cast<std::size_t>(c)], b[c]);
        return normalized > 0.0f ? to_float(grad[i]) : 0.0f;
      };
      const std::vector<double> total = channel_sums(count_, channels, [&](std::int64_t p, std::int64_t c) {
        const std::int64_t i = p * channels + c;
        const double d = masked(i, c);
        return std::make_pair(d, d * (static_cast<double>(to_float(in[i])) - static_cast<double>(mean[c])));
      });
      std::vector<BatchNormBackwardChannel> coefficients(static_cast<std::size_t>(channels));
      for (std::int64_t c = 0; c < channels; ++c) {
        const auto k = static_cast<std::size_t>(c);
        coefficients[k] = batch_norm_backward_channel(static_cast<double>(count_), total[k],
                                                      total[static_cast<std::size_t>(channels) + k], g[c], inverse_std[c]);
        dgamma.as<float>()[c] = coefficients[k].dgamma;
        dbeta.as<float>()[c] = coefficients[k].dbeta;
      }
#pragma omp parallel for schedule(static)
      for (std::int64_t p = 0; p < count_; ++p) {
        for (std::int64_t c = 0; c < channels; ++c) {
          const std::int64_t i = p * channels + c;
          const BatchNormBackwardChannel& k = coefficients[static_cast<std::size_t>(c)];
          out[i] = from_float<T>(k.a * masked(i, c) + k.b * (to_float(in[i]) - mean[c]) + k.e);
        }
      }
    });
  }

 private:
  std::int64_t channels_, count_;
  float epsilon_, momentum_;
  DType dtype_;
};

}  // namespace

std::unique_ptr<FusedConv2dOp> make_host_fused_conv2d(Backend& ops, const FusedConv2dConfig& config) {
  if (ops.activation_layout() != Layout::nhwc) {
    throw std::invalid_argument("the host's fused convolution reads channels-last activations, and " + ops.name() +
                                "'s are not");
  }
  return std::make_unique<HostFusedConv2d>(ops, config);
}

std::unique_ptr<BatchNormOp> make_host_deferred_batch_norm(const BatchNormConfig& config) {
  return std::make_unique<HostDeferredBatchNorm>(config);
}

}  // namespace dlbench::worker
