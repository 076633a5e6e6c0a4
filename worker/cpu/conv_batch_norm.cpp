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

// f(i, c) for every value i of a channels-last tensor of `pixels` pixels of `channels`, c its
// channel; the pixels split among the threads.
template <typename F>
void for_each_value(std::int64_t pixels, std::int64_t channels, F f) {
#pragma omp parallel for schedule(static)
  for (std::int64_t p = 0; p < pixels; ++p) {
    for (std::int64_t c = 0; c < channels; ++c) f(p * channels + c, c);
  }
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

// A batch norm's backward per channel over channels-last x, as the own kernels compute it
// (cuda/batch_norm_kernels.cu): Σg and Σg · (x − mean) in fp64, g = gradient(i, c), then each
// channel's dγ and dβ (written) and its coefficients a, b, e of dx = a · g + b · (x − mean) + e.
template <typename T, typename Gradient>
std::vector<BatchNormBackwardChannel> batch_norm_backward_channels(const T* in, std::int64_t pixels,
                                                                   std::int64_t channels, const BatchNormStatistics& s,
                                                                   const Tensor& gamma, Tensor& dgamma, Tensor& dbeta,
                                                                   Gradient gradient) {
  const float* mean = s.mean.as<float>();
  const float* inverse_std = s.spread.as<float>();
  const float* g = gamma.as<float>();
  const std::vector<double> total = channel_sums(pixels, channels, [&](std::int64_t p, std::int64_t c) {
    const std::int64_t i = p * channels + c;
    const double d = gradient(i, c);
    return std::make_pair(d, d * (static_cast<double>(to_float(in[i])) - static_cast<double>(mean[c])));
  });
  std::vector<BatchNormBackwardChannel> coefficients(static_cast<std::size_t>(channels));
  for (std::int64_t c = 0; c < channels; ++c) {
    const auto k = static_cast<std::size_t>(c);
    coefficients[k] = batch_norm_backward_channel(static_cast<double>(pixels), total[k],
                                                  total[static_cast<std::size_t>(channels) + k], g[c], inverse_std[c]);
    dgamma.as<float>()[c] = coefficients[k].dgamma;
    dbeta.as<float>()[c] = coefficients[k].dbeta;
  }
  return coefficients;
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

  bool fuses_input_batch_norm_gradients() const override {
    return config_.normalized_input && config_.input_batch_norm_gradients;
  }

  // The plain data gradient, masked in place where the batch norm's output (its own kernels'
  // arithmetic, as backward_deferred finds it) was not positive; Σg and Σg · (x − mean) of the
  // masked values as stored, in fp64; then the own kernels' per-channel backward, its
  // dx = a · g + b · (x − mean) + e written as a · g + b · x + (e − b · mean).
  void backward_data_batch_norm(const Tensor& dy, const Tensor& weight, const Tensor& x, const BatchNormStatistics& s,
                                const Tensor& gamma, const Tensor& beta, Tensor& masked, Tensor& dgamma, Tensor& dbeta,
                                Tensor& coefficients) override {
    if (!fuses_input_batch_norm_gradients()) {
      FusedConv2dOp::backward_data_batch_norm(dy, weight, x, s, gamma, beta, masked, dgamma, dbeta, coefficients);
    }
    const std::int64_t channels = x.shape.c();
    require_elements(coefficients, 3 * channels, "fused convolution", "coefficients");
    conv_->backward_data(dy, weight, masked);
    const float* mean = s.mean.as<float>();
    const float* inverse_std = s.spread.as<float>();
    const float* g = gamma.as<float>();
    const float* b = beta.as<float>();
    std::vector<float> scale(static_cast<std::size_t>(channels));
    for (std::int64_t c = 0; c < channels; ++c) scale[static_cast<std::size_t>(c)] = batch_norm_scale(g[c], inverse_std[c]);
    with_element_type(x.dtype, [&]<typename T>(T) {
      const T* in = x.as<T>();
      T* grad = masked.as<T>();
      const std::int64_t pixels = x.numel() / channels;
      for_each_value(pixels, channels, [&](std::int64_t i, std::int64_t c) {
        const float normalized = batch_norm_normalized(to_float(in[i]), mean[c], scale[static_cast<std::size_t>(c)], b[c]);
        if (!(normalized > 0.0f)) grad[i] = from_float<T>(0.0f);
      });
      const std::vector<BatchNormBackwardChannel> backward = batch_norm_backward_channels(
          in, pixels, channels, s, gamma, dgamma, dbeta,
          [&](std::int64_t i, std::int64_t) { return static_cast<double>(to_float(grad[i])); });
      float* k = coefficients.as<float>();
      for (std::int64_t c = 0; c < channels; ++c) {
        const BatchNormBackwardChannel& channel = backward[static_cast<std::size_t>(c)];
        k[c] = channel.a;
        k[channels + c] = channel.b;
        k[2 * channels + c] =
            static_cast<float>(static_cast<double>(channel.e) - static_cast<double>(channel.b) * static_cast<double>(mean[c]));
      }
    });
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
      for_each_value(pixels, channels, [&](std::int64_t i, std::int64_t c) {
        const auto k = static_cast<std::size_t>(c);
        out[i] = from_float<T>(std::max(normalized(to_float(in[i]), scale[k], shift[k]), 0.0f));
      });
    });
    return normalized_;
  }

  FusedConv2dConfig config_;
  std::unique_ptr<Conv2dOp> conv_;
  std::shared_ptr<void> normalized_memory_;
  Tensor normalized_;
};

// A batch norm whose statistics come from the convolution before's sums, as dlbench's own kernels
// compute it (cuda/batch_norm_kernels.cu, batch_norm_plan.hpp's per-channel arithmetic): deferred
// (the scale and shift for the convolution after, its ReLU's mask found again from x), or with the
// residual's add and ReLU (from_sums: y = relu((x − mean) · scale + β + z), the mask from y).
class HostBatchNormFromSums final : public BatchNormOp {
 public:
  explicit HostBatchNormFromSums(const BatchNormConfig& c)
      : deferred_(c.deferred), channels_(c.input.c()), count_(c.input.n() * c.input.h() * c.input.w()),
        epsilon_(c.epsilon), momentum_(c.momentum), dtype_(c.dtype) {
    const bool deferred = c.deferred && c.relu && !c.add_relu && !c.from_sums;
    const bool from_sums = c.from_sums && c.add_relu && !c.deferred;
    if (!deferred && !from_sums) {
      throw std::invalid_argument(
          "the host's batch norm from sums is deferred (with its ReLU) or from_sums (with add_relu), not both");
    }
  }

  bool backward_reads_output() const override { return !deferred_; }  // the residual ReLU's mask

  void forward_training(const Tensor&, const Tensor&, const Tensor&, Tensor&, BatchNormStatistics&, void*) override {
    throw std::logic_error(deferred_ ? "this batch norm was made deferred: forward_deferred runs it"
                                     : "this batch norm was made with add_relu: forward_training_add_relu runs it");
  }
  void backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const BatchNormStatistics&,
                Tensor&, Tensor&, Tensor&, const void*) override {
    throw std::logic_error(deferred_ ? "this batch norm was made deferred: backward_deferred runs it"
                                     : "this batch norm was made with add_relu: backward_add_relu runs it");
  }

  void forward_deferred(const Tensor& sums, const Tensor& gamma, const Tensor& beta, Tensor& scale_shift,
                        BatchNormStatistics& s) override {
    if (!deferred_) BatchNormOp::forward_deferred(sums, gamma, beta, scale_shift, s);
    require_elements(scale_shift, 2 * channels_, "deferred batch norm", "scale_shift");
    const std::vector<DeferredBatchNormChannel> d = statistics(sums, gamma, beta, s);
    with_element_type(dtype_, [&]<typename T>(T) {
      T* ss = scale_shift.as<T>();
      for (std::int64_t c = 0; c < channels_; ++c) {
        ss[c] = from_float<T>(d[static_cast<std::size_t>(c)].statistics.scale);
        ss[channels_ + c] = from_float<T>(d[static_cast<std::size_t>(c)].shift);
      }
    });
  }

  void backward_deferred(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& beta,
                         const BatchNormStatistics& s, Tensor& dx, Tensor& dgamma, Tensor& dbeta) override {
    if (!deferred_) BatchNormOp::backward_deferred(x, dy, gamma, beta, s, dx, dgamma, dbeta);
    const float* mean = s.mean.as<float>();
    const float* inverse_std = s.spread.as<float>();
    const float* g = gamma.as<float>();
    const float* b = beta.as<float>();
    std::vector<float> scale(static_cast<std::size_t>(channels_));
    for (std::int64_t c = 0; c < channels_; ++c) scale[static_cast<std::size_t>(c)] = batch_norm_scale(g[c], inverse_std[c]);
    with_element_type(dtype_, [&]<typename T>(T) {
      const T* in = x.as<T>();
      const T* grad = dy.as<T>();
      // The ReLU's gradient where forward's normalised value, found again from x, was > 0.
      backward_through_normalisation<T>(x, s, gamma, dx, dgamma, dbeta, [&](std::int64_t i, std::int64_t c) {
        const float normalized = batch_norm_normalized(to_float(in[i]), mean[c], scale[static_cast<std::size_t>(c)], b[c]);
        return normalized > 0.0f ? to_float(grad[i]) : 0.0f;
      });
    });
  }

  void backward_deferred_apply(const Tensor& x, const Tensor& masked, const Tensor& coefficients, Tensor& dx) override {
    if (!deferred_) BatchNormOp::backward_deferred_apply(x, masked, coefficients, dx);
    require_elements(coefficients, 3 * channels_, "deferred batch norm", "coefficients");
    const float* k = coefficients.as<float>();
    with_element_type(dtype_, [&]<typename T>(T) {
      const T* in = x.as<T>();
      const T* grad = masked.as<T>();
      T* out = dx.as<T>();
      const std::int64_t channels = channels_;
      for_each_value(count_, channels, [&](std::int64_t i, std::int64_t c) {
        out[i] = from_float<T>(
            std::fma(k[c], to_float(grad[i]), std::fma(k[channels + c], to_float(in[i]), k[2 * channels + c])));
      });
    });
  }

  void forward_training_add_relu(const Tensor& x, const Tensor& z, const Tensor& gamma, const Tensor& beta, Tensor& y,
                                 BatchNormStatistics& s, void* workspace) override {
    if (deferred_) BatchNormOp::forward_training_add_relu(x, z, gamma, beta, y, s, workspace);
    const std::vector<DeferredBatchNormChannel> d = statistics(s.sums, gamma, beta, s);
    const float* b = beta.as<float>();
    with_element_type(dtype_, [&]<typename T>(T) {
      const T* in = x.as<T>();
      const T* residual = z.as<T>();
      T* out = y.as<T>();
      const std::int64_t channels = channels_;
      for_each_value(count_, channels, [&](std::int64_t i, std::int64_t c) {
        const BatchNormForwardChannel& f = d[static_cast<std::size_t>(c)].statistics;
        const float v = batch_norm_normalized(to_float(in[i]), f.mean, f.scale, b[c]) + to_float(residual[i]);
        out[i] = from_float<T>(std::max(v, 0.0f));
      });
    });
  }

  // dz = dy where y > 0 (the residual's gradient), and dx through the normalisation from it.
  void backward_add_relu(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& gamma, const Tensor& beta,
                         const BatchNormStatistics& s, Tensor& dx, Tensor& dz, Tensor& dgamma, Tensor& dbeta,
                         const void* workspace) override {
    if (deferred_) BatchNormOp::backward_add_relu(x, y, dy, gamma, beta, s, dx, dz, dgamma, dbeta, workspace);
    with_element_type(dtype_, [&]<typename T>(T) {
      const T* out = y.as<T>();
      const T* grad = dy.as<T>();
      T* residual_grad = dz.as<T>();
#pragma omp parallel for schedule(static)
      for (std::int64_t i = 0; i < count_ * channels_; ++i) {
        residual_grad[i] = to_float(out[i]) > 0.0f ? grad[i] : from_float<T>(0.0f);
      }
      backward_through_normalisation<T>(x, s, gamma, dx, dgamma, dbeta,
                                        [&](std::int64_t i, std::int64_t) { return to_float(residual_grad[i]); });
    });
  }

 private:
  // Each channel's statistics from the sums, kept (mean, and the inverse std: the own kernels'
  // spread) and the running ones moved.
  std::vector<DeferredBatchNormChannel> statistics(const Tensor& sums, const Tensor& gamma, const Tensor& beta,
                                                   BatchNormStatistics& s) const {
    require_elements(sums, 2 * channels_, "batch norm from sums", "sums");
    const float* sum = sums.as<float>();
    const float* g = gamma.as<float>();
    const float* b = beta.as<float>();
    float* running_mean = s.running_mean.as<float>();
    float* running_var = s.running_var.as<float>();
    std::vector<DeferredBatchNormChannel> out;
    for (std::int64_t c = 0; c < channels_; ++c) {
      const DeferredBatchNormChannel d =
          deferred_batch_norm_channel(static_cast<double>(count_), sum[c], sum[channels_ + c], g[c], b[c], epsilon_,
                                      momentum_, running_mean[c], running_var[c]);
      s.mean.as<float>()[c] = d.statistics.mean;
      s.spread.as<float>()[c] = d.statistics.inverse_std;
      running_mean[c] = d.statistics.running_mean;
      running_var[c] = d.statistics.running_var;
      out.push_back(d);
    }
    return out;
  }

  // The own kernels' backward (cuda/batch_norm_kernels.cu) on the host, g = gradient(i, c) (dy
  // through the ReLU): Σg and Σg · (x − mean) in fp64, then dx = a · g + b · (x − mean) + e, dγ, dβ.
  template <typename T, typename Gradient>
  void backward_through_normalisation(const Tensor& x, const BatchNormStatistics& s, const Tensor& gamma, Tensor& dx,
                                      Tensor& dgamma, Tensor& dbeta, Gradient gradient) const {
    const float* mean = s.mean.as<float>();
    const T* in = x.as<T>();
    T* out = dx.as<T>();
    const std::int64_t channels = channels_;
    const std::vector<BatchNormBackwardChannel> coefficients =
        batch_norm_backward_channels(in, count_, channels, s, gamma, dgamma, dbeta, gradient);
    for_each_value(count_, channels, [&](std::int64_t i, std::int64_t c) {
      const BatchNormBackwardChannel& k = coefficients[static_cast<std::size_t>(c)];
      out[i] = from_float<T>(k.a * gradient(i, c) + k.b * (to_float(in[i]) - mean[c]) + k.e);
    });
  }

  bool deferred_;
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

std::unique_ptr<BatchNormOp> make_host_batch_norm_from_sums(const BatchNormConfig& config) {
  return std::make_unique<HostBatchNormFromSums>(config);
}

}  // namespace dlbench::worker
