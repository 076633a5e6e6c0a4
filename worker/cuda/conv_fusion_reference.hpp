// What a convolution pass fused with batch norm (cuda/conv_fusion.hpp) must agree with, computed on
// the host around the plain pass: the input it should have read (relu(x * s + b), rounded to the
// data type as a separate kernel would store it), the ReLU's backward mask, the per-channel
// statistics of what it wrote, and the batch norm's weight gradients and input-gradient
// coefficients reduced from what it wrote. Channels-last tensors of 16-bit values (fp16 or bf16 bits), as the
// fused graphs take them. Header-only and device-free, so that it is tested on any machine.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "precision.hpp"
#include "tensor.hpp"

namespace dlbench::worker::cuda_detail {

inline float half_value(DType dtype, std::uint16_t bits) {
  return dtype == DType::bf16 ? bf16{bits}.to_float() : fp16{bits}.to_float();
}
inline std::uint16_t half_bits(DType dtype, float value) {
  return dtype == DType::bf16 ? bf16::from_float(value).bits : fp16::from_float(value).bits;
}

// `count` values of magnitude 0.5 to 1 with either sign, as `dtype`'s bits: what a check or a
// timed pass reads (zeros would draw less power, and could hide a wrong index).
inline std::vector<std::uint16_t> random_half_values(DType dtype, std::size_t count, std::uint32_t seed) {
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> magnitude(0.5f, 1.0f);
  std::bernoulli_distribution negative(0.5);
  std::vector<std::uint16_t> values(count);
  for (auto& value : values) value = half_bits(dtype, negative(generator) ? -magnitude(generator) : magnitude(generator));
  return values;
}

// relu(x * s[c] + b[c]) in fp32, each rounded to `dtype`, c the channel of a channels-last tensor.
inline std::vector<std::uint16_t> scale_bias_relu(DType dtype, const std::vector<std::uint16_t>& x,
                                                  const std::vector<std::uint16_t>& scale,
                                                  const std::vector<std::uint16_t>& bias) {
  const std::size_t channels = scale.size();
  if (channels == 0 || bias.size() != channels || x.size() % channels != 0) {
    throw std::invalid_argument("scale_bias_relu: x must hold whole pixels of the scale's channels");
  }
  std::vector<std::uint16_t> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::size_t c = i % channels;
    const float shifted = std::fma(half_value(dtype, x[i]), half_value(dtype, scale[c]), half_value(dtype, bias[c]));
    out[i] = half_bits(dtype, std::max(shifted, 0.0f));
  }
  return out;
}

// The ReLU's backward on dx: each value kept where its ReLU input was positive, else zero. The
// input is `relu_input`, or, given a scale and a shift, relu_input * s[c] + b[c] in fp32.
inline void relu_backward(DType dtype, std::vector<std::uint16_t>& dx, const std::vector<std::uint16_t>& relu_input,
                          const std::vector<std::uint16_t>* scale = nullptr,
                          const std::vector<std::uint16_t>* bias = nullptr) {
  if (relu_input.size() != dx.size()) throw std::invalid_argument("relu_backward: dx and its ReLU's input differ in size");
  const std::size_t channels = scale != nullptr ? scale->size() : 1;
  for (std::size_t i = 0; i < dx.size(); ++i) {
    float input = half_value(dtype, relu_input[i]);
    if (scale != nullptr) {
      const std::size_t c = i % channels;
      input = std::fma(input, half_value(dtype, (*scale)[c]), half_value(dtype, (*bias)[c]));
    }
    if (!(input > 0.0f)) dx[i] = half_bits(dtype, 0.0f);
  }
}

// dx + g, each sum in fp32 rounded to `dtype`: the gradient a shortcut carries back, added to a
// data gradient.
inline void add_into(DType dtype, std::vector<std::uint16_t>& dx, const std::vector<std::uint16_t>& g) {
  if (g.size() != dx.size()) throw std::invalid_argument("add_into: dx and g differ in size");
  for (std::size_t i = 0; i < dx.size(); ++i) dx[i] = half_bits(dtype, half_value(dtype, dx[i]) + half_value(dtype, g[i]));
}

// Σy, Σy² and Σ|y| per channel of a channels-last tensor, in double.
struct ChannelSums {
  std::vector<double> sum, square_sum, absolute_sum;
};
inline ChannelSums channel_sums(DType dtype, const std::vector<std::uint16_t>& y, std::size_t channels) {
  if (channels == 0 || y.size() % channels != 0) {
    throw std::invalid_argument("channel_sums: y must hold whole pixels of its channels");
  }
  ChannelSums sums{std::vector<double>(channels), std::vector<double>(channels), std::vector<double>(channels)};
  for (std::size_t i = 0; i < y.size(); ++i) {
    const double value = half_value(dtype, y[i]);
    sums.sum[i % channels] += value;
    sums.square_sum[i % channels] += value * value;
    sums.absolute_sum[i % channels] += std::abs(value);
  }
  return sums;
}

// The largest difference between `got` and `want`, as a share of want's largest magnitude (NaN or
// an infinity anywhere in `got` gives infinity).
inline double relative_max_error(DType dtype, const std::vector<std::uint16_t>& got,
                                 const std::vector<std::uint16_t>& want) {
  if (got.size() != want.size()) throw std::invalid_argument("relative_max_error: the tensors differ in size");
  double largest = 0, difference = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    const double g = half_value(dtype, got[i]), w = half_value(dtype, want[i]);  // exact: 16-bit values
    if (!std::isfinite(g)) return INFINITY;
    largest = std::max(largest, std::abs(w));
    difference = std::max(difference, std::abs(g - w));
  }
  return largest > 0 ? difference / largest : difference;
}

// A fused pass's statistics against the host's sums of the y it wrote: the largest difference of
// a channel's Σy as a share of its Σ|y|, and of its Σy² as a share of itself.
inline double statistics_error(const std::vector<float>& sum, const std::vector<float>& square_sum,
                               const ChannelSums& want) {
  if (sum.size() != want.sum.size() || square_sum.size() != want.sum.size()) {
    throw std::invalid_argument("statistics_error: the channel counts differ");
  }
  double error = 0;
  for (std::size_t c = 0; c < sum.size(); ++c) {
    if (!std::isfinite(sum[c]) || !std::isfinite(square_sum[c])) return INFINITY;
    const double got_sum = sum[c], got_square_sum = square_sum[c];
    error = std::max(error, std::abs(got_sum - want.sum[c]) / std::max(want.absolute_sum[c], 1e-30));
    error = std::max(error, std::abs(got_square_sum - want.square_sum[c]) / std::max(want.square_sum[c], 1e-30));
  }
  return error;
}

// A batch norm's saved statistics and parameters, fp32 a channel, as dgrad_drelu_dbn_weight reads them.
struct BatchNormParameters {
  std::vector<float> mean, inv_std, gamma, beta;
};

// The statistics a batch norm's forward saves for x (channels-last; inv_std = 1 / sqrt(var + 1e-5)),
// and gamma from 0.5 to 1.5 and beta from -0.5 to 0.5 drawn from `seed`: a ReLU mask that keeps
// about half of each channel, as training has it.
inline BatchNormParameters batch_norm_parameters(DType dtype, const std::vector<std::uint16_t>& x,
                                                 std::size_t channels, std::uint32_t seed) {
  const ChannelSums sums = channel_sums(dtype, x, channels);
  const double count = static_cast<double>(x.size() / channels);
  BatchNormParameters p;
  std::mt19937 generator(seed);
  std::uniform_real_distribution<float> gamma(0.5f, 1.5f), beta(-0.5f, 0.5f);
  for (std::size_t c = 0; c < channels; ++c) {
    const double mean = sums.sum[c] / count;
    const double variance = std::max(sums.square_sum[c] / count - mean * mean, 0.0);
    p.mean.push_back(static_cast<float>(mean));
    p.inv_std.push_back(static_cast<float>(1 / std::sqrt(variance + 1e-5)));
    p.gamma.push_back(gamma(generator));
    p.beta.push_back(beta(generator));
  }
  return p;
}

// The ReLU's backward on dx where the ReLU's input is the batch norm's output,
// ((x - mean) * inv_std) * gamma + beta in fp32.
inline void relu_backward(DType dtype, std::vector<std::uint16_t>& dx, const std::vector<std::uint16_t>& x,
                          const BatchNormParameters& p) {
  const std::size_t channels = p.mean.size();
  if (x.size() != dx.size() || channels == 0 || x.size() % channels != 0) {
    throw std::invalid_argument("relu_backward: dx and the batch norm's x must hold the same whole pixels");
  }
  for (std::size_t i = 0; i < dx.size(); ++i) {
    const std::size_t c = i % channels;
    const float input = std::fma((half_value(dtype, x[i]) - p.mean[c]) * p.inv_std[c], p.gamma[c], p.beta[c]);
    if (!(input > 0.0f)) dx[i] = half_bits(dtype, 0.0f);
  }
}

// A batch norm's backward from its input x and its output's gradient dy, in double: dgamma = Σ dy x̂,
// dbeta = Σ dy (x̂ = (x - mean) * inv_std), and dx = a * dy + b * x + c a channel, where
// a = gamma inv_std, b = -gamma inv_std² dgamma / m and c = -b mean - gamma inv_std dbeta / m
// over the m values of a channel.
struct BatchNormGradients {
  std::vector<double> dgamma, dbeta, a, b, c;
};
// x̂ = (x - mean) * inv_std of channel c, in double.
inline double normalised(DType dtype, std::uint16_t x, const BatchNormParameters& p, std::size_t c) {
  return (double{half_value(dtype, x)} - double{p.mean[c]}) * double{p.inv_std[c]};
}
inline BatchNormGradients batch_norm_gradients(DType dtype, const std::vector<std::uint16_t>& x,
                                               const std::vector<std::uint16_t>& dy, const BatchNormParameters& p) {
  const std::size_t channels = p.mean.size();
  if (x.size() != dy.size() || channels == 0 || x.size() % channels != 0) {
    throw std::invalid_argument("batch_norm_gradients: x and dy must hold the same whole pixels");
  }
  BatchNormGradients g{std::vector<double>(channels), std::vector<double>(channels), {}, {}, {}};
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::size_t c = i % channels;
    const double gradient = half_value(dtype, dy[i]);
    g.dbeta[c] += gradient;
    g.dgamma[c] += gradient * normalised(dtype, x[i], p, c);
  }
  const double m = static_cast<double>(x.size() / channels);
  for (std::size_t c = 0; c < channels; ++c) {
    const double inv_std = p.inv_std[c], scale = double{p.gamma[c]} * inv_std;
    g.a.push_back(scale);
    g.b.push_back(-scale * inv_std * g.dgamma[c] / m);
    g.c.push_back(-g.b.back() * double{p.mean[c]} - scale * g.dbeta[c] / m);
  }
  return g;
}

// A fused pass's batch-norm gradients against the host's from the dy it wrote: dgamma and dbeta a
// channel as a share of Σ|dy x̂| and Σ|dy|, and the input gradient its coefficients give,
// a * dy + b * x + c, as a share of the largest the host's give.
inline double batch_norm_gradients_error(DType dtype, const std::vector<float>& dgamma, const std::vector<float>& dbeta,
                                         const std::vector<float>& a, const std::vector<float>& b,
                                         const std::vector<float>& c, const std::vector<std::uint16_t>& x,
                                         const std::vector<std::uint16_t>& dy, const BatchNormParameters& p) {
  const std::size_t channels = p.mean.size();
  for (const std::vector<float>* v : {&dgamma, &dbeta, &a, &b, &c}) {
    if (v->size() != channels) throw std::invalid_argument("batch_norm_gradients_error: the channel counts differ");
  }
  const BatchNormGradients want = batch_norm_gradients(dtype, x, dy, p);
  std::vector<double> dgamma_scale(channels), dbeta_scale(channels);
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::size_t k = i % channels;
    const double gradient = std::abs(half_value(dtype, dy[i]));
    dbeta_scale[k] += gradient;
    dgamma_scale[k] += gradient * std::abs(normalised(dtype, x[i], p, k));
  }
  double error = 0;
  for (std::size_t k = 0; k < channels; ++k) {
    for (const float v : {dgamma[k], dbeta[k], a[k], b[k], c[k]}) {
      if (!std::isfinite(v)) return INFINITY;
    }
    error = std::max(error, std::abs(double{dgamma[k]} - want.dgamma[k]) / std::max(dgamma_scale[k], 1e-30));
    error = std::max(error, std::abs(double{dbeta[k]} - want.dbeta[k]) / std::max(dbeta_scale[k], 1e-30));
  }
  double largest = 0, difference = 0;
  for (std::size_t i = 0; i < x.size(); ++i) {
    const std::size_t k = i % channels;
    const double gradient = half_value(dtype, dy[i]), value = half_value(dtype, x[i]);
    const double wanted = want.a[k] * gradient + want.b[k] * value + want.c[k];
    const double got = double{a[k]} * gradient + double{b[k]} * value + double{c[k]};
    largest = std::max(largest, std::abs(wanted));
    difference = std::max(difference, std::abs(got - wanted));
  }
  return std::max(error, largest > 0 ? difference / largest : difference);
}

// What a second run of a pass does to the per-channel values it writes (statistics, weight
// gradients, coefficients), from their values after one run on zeros (`once`) and after another
// run on the same inputs without zeroing them first (`twice`): "overwritten" where the second left
// the first's values, "added" where it doubled them, "other" for anything else (a pass whose
// coefficients are reduced from sums it added into changes them otherwise), each within `bound` of
// the largest value. Whether the fused engines add into their sums is not documented; a model that
// zeroes them first is right either way, one that does not is right only where they overwrite.
inline std::string repeated_run_effect(const std::vector<float>& once, const std::vector<float>& twice,
                                       double bound = 1e-3) {
  if (once.size() != twice.size()) throw std::invalid_argument("repeated_run_effect: the runs wrote different sizes");
  double largest = 0, from_once = 0, from_double = 0;
  for (std::size_t i = 0; i < once.size(); ++i) {
    if (!std::isfinite(once[i]) || !std::isfinite(twice[i])) return "other";
    largest = std::max(largest, std::abs(double{once[i]}));
    from_once = std::max(from_once, std::abs(double{twice[i]} - double{once[i]}));
    from_double = std::max(from_double, std::abs(double{twice[i]} - 2.0 * double{once[i]}));
  }
  if (largest == 0) return from_once == 0 ? "overwritten" : "other";  // all zeros: nothing tells them apart
  if (from_once <= bound * largest) return "overwritten";
  if (from_double <= 2 * bound * largest) return "added";
  return "other";
}

}  // namespace dlbench::worker::cuda_detail
