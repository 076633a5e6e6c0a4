// Training batch norm in fp64, the textbook way, for the tests of dlbench's own batch-norm
// kernels: their arithmetic emulated step by step (batch_norm_plan_test.cpp) and the kernels'
// source run on the CPU (gpu/kernels_on_cpu_test.cpp).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "batch_norm_plan.hpp"

namespace dlbench::worker::reference_batch_norm {

inline std::vector<float> normal_values(std::size_t n, std::uint64_t seed, double mean, double spread) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> normal(mean, spread);
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(normal(rng));
  return v;
}

// max |a − b| / max |b| (norm-wise, as the GPU tests measure).
inline double relative_error(const std::vector<float>& actual, const std::vector<double>& expected) {
  double diff = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    if (!std::isfinite(actual[i])) return std::numeric_limits<double>::infinity();
    diff = std::max(diff, std::fabs(static_cast<double>(actual[i]) - expected[i]));
    scale = std::max(scale, std::fabs(expected[i]));
  }
  return scale > 0 ? diff / scale : diff;
}

// What the kernels must reproduce. tail: 0 none, 1 ReLU, 2 add z and ReLU.
struct Reference {
  std::vector<double> y, mean, variance, dx, dz, dgamma, dbeta;
};

inline Reference reference(const BatchNormShape& s, bool channels_last, int tail, float eps,
                           const std::vector<float>& x32, const std::vector<float>& z32,
                           const std::vector<float>& gamma32, const std::vector<float>& beta32,
                           const std::vector<float>& dy32) {
  const std::vector<double> x(x32.begin(), x32.end()), z(z32.begin(), z32.end()), gamma(gamma32.begin(), gamma32.end()),
      beta(beta32.begin(), beta32.end()), dy(dy32.begin(), dy32.end());
  const auto epsilon = static_cast<double>(eps);
  Reference r;
  const auto n = static_cast<std::size_t>(s.numel()), channels = static_cast<std::size_t>(s.channels);
  const double count = static_cast<double>(s.per_channel());
  r.mean.assign(channels, 0.0);
  r.variance.assign(channels, 0.0);
  const auto channel = [&](std::size_t i) {
    const auto at = static_cast<std::int64_t>(i);
    return static_cast<std::size_t>(channels_last ? at % s.channels : (at / s.pixels) % s.channels);
  };
  for (std::size_t i = 0; i < n; ++i) r.mean[channel(i)] += x[i] / count;
  for (std::size_t i = 0; i < n; ++i) r.variance[channel(i)] += std::pow(x[i] - r.mean[channel(i)], 2) / count;
  r.y.resize(n);
  std::vector<double> xhat(n), g(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t c = channel(i);
    xhat[i] = (x[i] - r.mean[c]) / std::sqrt(r.variance[c] + epsilon);
    double v = gamma[c] * xhat[i] + beta[c];
    if (tail == 2) v += z[i];
    r.y[i] = tail > 0 ? std::max(v, 0.0) : v;
    g[i] = tail > 0 && !(r.y[i] > 0.0) ? 0.0 : dy[i];
  }
  r.dgamma.assign(channels, 0.0);
  r.dbeta.assign(channels, 0.0);
  for (std::size_t i = 0; i < n; ++i) {
    r.dbeta[channel(i)] += g[i];
    r.dgamma[channel(i)] += g[i] * xhat[i];
  }
  r.dx.resize(n);
  for (std::size_t i = 0; i < n; ++i) {
    const std::size_t c = channel(i);
    r.dx[i] = gamma[c] / std::sqrt(r.variance[c] + epsilon) *
              (g[i] - r.dbeta[c] / count - xhat[i] * r.dgamma[c] / count);
  }
  r.dz = g;
  return r;
}

// The per-channel state a training forward leaves, from the reference's batch statistics: the
// inverse std, and running statistics that started at (start_mean, start_var) moved by PyTorch's
// rule (the unbiased variance).
struct ForwardStatistics {
  std::vector<double> inverse_std, running_mean, running_var;
};

inline ForwardStatistics forward_statistics(const Reference& r, const BatchNormShape& s, double epsilon,
                                            double momentum, double start_mean, double start_var) {
  ForwardStatistics f;
  const double count = static_cast<double>(s.per_channel());
  for (std::size_t c = 0; c < r.mean.size(); ++c) {
    const double unbiased = count > 1 ? r.variance[c] * count / (count - 1) : r.variance[c];
    f.inverse_std.push_back(1.0 / std::sqrt(r.variance[c] + epsilon));
    f.running_mean.push_back((1.0 - momentum) * start_mean + momentum * r.mean[c]);
    f.running_var.push_back((1.0 - momentum) * start_var + momentum * unbiased);
  }
  return f;
}

}  // namespace dlbench::worker::reference_batch_norm
