// What a convolution pass fused with batch norm (cuda/conv_fusion.hpp) must agree with, computed on
// the host around the plain pass: the input it should have read (relu(x * s + b), rounded to the
// data type as a separate kernel would store it), the ReLU's backward mask, and the per-channel
// statistics of what it wrote. Channels-last tensors of 16-bit values (fp16 or bf16 bits), as the
// fused graphs take them. Header-only and device-free, so that it is tested on any machine.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <random>
#include <stdexcept>
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

}  // namespace dlbench::worker::cuda_detail
