// BERT on the CPU backend: its ops against plain loops and by finite differences one by one, its
// synthetic batch, the whole model's gradient by finite differences, AdamW against
// torch.optim.AdamW's formula, LAMB against apex's, and training.
#include <algorithm>
#include <cmath>
#include <functional>
#include <string>
#include <random>
#include <set>
#include <vector>

#include <gtest/gtest.h>

#include "cpu/cpu_backend.hpp"
#include "dlbench/core/api_rules.hpp"
#include "models/bert.hpp"
#include "models/model.hpp"
#include "trainer.hpp"

namespace dlbench::worker {
namespace {

Tensor host_tensor(std::vector<float>& values, const Shape& shape) {
  Tensor t;
  t.data = values.data();
  t.shape = shape;
  return t;
}

std::vector<float> random_values(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

TEST(TransformerOps, BatchedMatmulWithEveryTransposeAndScale) {
  CpuBackend backend(1);
  const std::size_t batch = 3, m = 4, n = 5, k = 6;
  const auto dim = [](std::size_t d) { return static_cast<std::int64_t>(d); };
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      std::vector<float> a = random_values(batch * m * k, 1), b = random_values(batch * k * n, 2), c(batch * m * n);
      const float alpha = 0.25f;
      Tensor out = host_tensor(c, Shape(dim(c.size())));
      backend.make_batched_matmul({dim(batch), dim(m), dim(n), dim(k), ta, tb, alpha, DType::fp32})
          ->run(host_tensor(a, Shape(dim(a.size()))), host_tensor(b, Shape(dim(b.size()))), out);
      for (std::size_t s = 0; s < batch; ++s) {
        for (std::size_t i = 0; i < m; ++i) {
          for (std::size_t j = 0; j < n; ++j) {
            double expected = 0.0;
            for (std::size_t p = 0; p < k; ++p) {
              const float av = ta ? a[(s * k + p) * m + i] : a[(s * m + i) * k + p];
              const float bv = tb ? b[(s * n + j) * k + p] : b[(s * k + p) * n + j];
              expected += static_cast<double>(av) * static_cast<double>(bv);
            }
            EXPECT_NEAR(c[(s * m + i) * n + j], static_cast<double>(alpha) * expected, 1e-5)
                << "transpose_a " << ta << " transpose_b " << tb << " at " << s << "," << i << "," << j;
          }
        }
      }
    }
  }
}

TEST(TransformerOps, SwapAxesExchangesTheMiddleTwo) {
  CpuBackend backend(1);
  const Shape x_shape(2, 3, 4, 5);
  std::vector<float> x = random_values(120, 3), y(120);
  Tensor out = host_tensor(y, Shape(2, 4, 3, 5));
  backend.make_swap_axes(x_shape, DType::fp32)->run(host_tensor(x, x_shape), out);
  for (std::size_t a = 0; a < 2; ++a)
    for (std::size_t b = 0; b < 3; ++b)
      for (std::size_t c = 0; c < 4; ++c)
        for (std::size_t d = 0; d < 5; ++d) EXPECT_EQ(y[((a * 4 + c) * 3 + b) * 5 + d], x[((a * 3 + b) * 4 + c) * 5 + d]);
}

TEST(TransformerOps, GatherAccumulatesAndScatterAddSumsRepeatedRows) {
  CpuBackend backend(2);
  std::vector<float> table = random_values(6 * 4, 4), rows_out(3 * 4, 1.0f);
  const std::vector<std::int32_t> rows{5, 0, 5};
  Tensor table_t = host_tensor(table, Shape(6, 4)), out = host_tensor(rows_out, Shape(3, 4));
  backend.gather_rows(table_t, rows.data(), 3, out, true);
  for (std::size_t i = 0; i < 3; ++i)
    for (std::size_t f = 0; f < 4; ++f) {
      EXPECT_FLOAT_EQ(rows_out[i * 4 + f], 1.0f + table[static_cast<std::size_t>(rows[i]) * 4 + f]);
    }

  std::vector<float> grad(6 * 4, 0.0f), dy = random_values(3 * 4, 5);
  Tensor grad_t = host_tensor(grad, Shape(6, 4));
  backend.scatter_add_rows(host_tensor(dy, Shape(3, 4)), rows.data(), 3, grad_t);
  for (std::size_t f = 0; f < 4; ++f) {
    EXPECT_FLOAT_EQ(grad[5 * 4 + f], dy[f] + dy[8 + f]);  // row 5 twice
    EXPECT_FLOAT_EQ(grad[0 * 4 + f], dy[4 + f]);
    EXPECT_EQ(grad[1 * 4 + f], 0.0f);
  }
  const std::vector<std::int32_t> outside{6};
  EXPECT_THROW(backend.gather_rows(table_t, outside.data(), 1, out, false), std::out_of_range);
  EXPECT_THROW(backend.scatter_add_rows(host_tensor(dy, Shape(1, 4)), outside.data(), 1, grad_t), std::out_of_range);
}

// Gradient checks per op: for a random direction d and output gradient dy, the backward's
// ⟨dx, d⟩ against the central difference (⟨dy, f(x + εd)⟩ − ⟨dy, f(x − εd)⟩) / 2ε of the forward.
// fp32 ops, ε = 1e-2 (the functions are smooth on that scale), sums in double.
double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double sum = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) sum += static_cast<double>(a[i]) * static_cast<double>(b[i]);
  return sum;
}

void expect_directional_derivative(const std::string& what, std::vector<float>& x,
                                   const std::function<std::vector<float>()>& forward, const std::vector<float>& dy,
                                   const std::vector<float>& analytic_dx, std::uint64_t seed) {
  const std::vector<float> direction = random_values(x.size(), seed);
  const std::vector<float> saved = x;
  constexpr float kEpsilon = 1e-2f;
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = saved[i] + kEpsilon * direction[i];
  const double plus = dot(dy, forward());
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = saved[i] - kEpsilon * direction[i];
  const double minus = dot(dy, forward());
  x = saved;
  const double numeric = (plus - minus) / (2.0 * static_cast<double>(kEpsilon));
  const double analytic = dot(analytic_dx, direction);
  EXPECT_NEAR(analytic, numeric, 2e-3 * std::max(1.0, std::fabs(numeric))) << what;
}

TEST(GradientCheck, LayerNormInputScaleAndShift) {
  CpuBackend backend(2);
  const std::int64_t rows = 6, features = 20;
  const auto n = static_cast<std::size_t>(rows * features);
  std::vector<float> x = random_values(n, 31), gamma = random_values(features, 32), beta = random_values(features, 33);
  const std::vector<float> dy = random_values(n, 34);
  std::vector<float> y(n), mean(rows), variance(rows), dx(n), dgamma(features), dbeta(features);
  auto op = backend.make_layer_norm({rows, features, 1e-5f});
  const Shape matrix(rows, features), vector(features), per_row(rows);
  const auto forward = [&] {
    Tensor y_t = host_tensor(y, matrix), mean_t = host_tensor(mean, per_row), variance_t = host_tensor(variance, per_row);
    op->forward(host_tensor(x, matrix), host_tensor(gamma, vector), host_tensor(beta, vector), y_t, mean_t, variance_t);
    return y;
  };
  forward();
  std::vector<float> dy_copy = dy;
  Tensor dx_t = host_tensor(dx, matrix), dgamma_t = host_tensor(dgamma, vector), dbeta_t = host_tensor(dbeta, vector);
  op->backward(host_tensor(x, matrix), host_tensor(dy_copy, matrix), host_tensor(gamma, vector), host_tensor(beta, vector),
               host_tensor(mean, per_row), host_tensor(variance, per_row), dx_t, dgamma_t, dbeta_t);
  expect_directional_derivative("layer norm dx", x, forward, dy, dx, 35);
  expect_directional_derivative("layer norm dgamma", gamma, forward, dy, dgamma, 36);
  expect_directional_derivative("layer norm dbeta", beta, forward, dy, dbeta, 37);
}

TEST(GradientCheck, SoftmaxGeluAndTanh) {
  CpuBackend backend(2);
  const std::int64_t rows = 5, columns = 12;
  const auto n = static_cast<std::size_t>(rows * columns);
  const Shape shape(rows, columns);
  std::vector<float> x = random_values(n, 41), y(n), dx(n);
  for (float& v : x) v *= 3.0f;  // GELU's and tanh's curved parts, softmax away from uniform
  std::vector<float> dy = random_values(n, 42);
  auto softmax = backend.make_softmax(rows, columns, DType::fp32);
  const auto softmax_forward = [&] {
    Tensor y_t = host_tensor(y, shape);
    softmax->forward(host_tensor(x, shape), y_t);
    return y;
  };
  softmax_forward();
  Tensor dx_t = host_tensor(dx, shape);
  softmax->backward(host_tensor(y, shape), host_tensor(dy, shape), dx_t);
  expect_directional_derivative("softmax", x, softmax_forward, dy, dx, 43);
  for (const ActivationKind kind : {ActivationKind::gelu, ActivationKind::tanh}) {
    auto op = backend.make_activation(kind, static_cast<std::int64_t>(n), DType::fp32);
    const auto forward = [&] {
      Tensor y_t = host_tensor(y, shape);
      op->forward(host_tensor(x, shape), y_t);
      return y;
    };
    Tensor grad = host_tensor(dx, shape);
    op->backward(host_tensor(x, shape), host_tensor(dy, shape), grad);
    expect_directional_derivative(kind == ActivationKind::gelu ? "gelu" : "tanh", x, forward, dy, dx, 44);
  }
}

// Scatter-add is gather's adjoint: ⟨gather(T), dy⟩ = ⟨T, scatter_add(dy)⟩, rows repeating or not.
TEST(GradientCheck, ScatterAddIsTheAdjointOfGather) {
  CpuBackend backend(2);
  const std::int64_t table_rows = 9, features = 7;
  std::vector<float> table = random_values(static_cast<std::size_t>(table_rows * features), 51);
  const std::vector<std::int32_t> rows{3, 0, 8, 3, 3, 5, 0};
  const auto count = static_cast<std::int64_t>(rows.size());
  std::vector<float> gathered(static_cast<std::size_t>(count * features));
  std::vector<float> dy = random_values(gathered.size(), 52), table_grad(table.size(), 0.0f);
  Tensor gathered_t = host_tensor(gathered, Shape(count, features)), grad_t = host_tensor(table_grad, Shape(table_rows, features));
  backend.gather_rows(host_tensor(table, Shape(table_rows, features)), rows.data(), count, gathered_t, false);
  backend.scatter_add_rows(host_tensor(dy, Shape(count, features)), rows.data(), count, grad_t);
  EXPECT_NEAR(dot(gathered, dy), dot(table, table_grad), 1e-5);
}

// Gradients for one optimizer step (drawn from `seed`, doubled so that their norm is above the
// tests' max_grad_norm of 0.5) and clip_grad_norm_'s factor for them, in double.
struct ClippedGradients {
  std::vector<float> g;
  double clip;
};
ClippedGradients gradients_above_the_clip(std::size_t count, std::uint64_t seed) {
  ClippedGradients out{random_values(count, seed), 0.0};
  for (float& x : out.g) x *= 2.0f;
  double norm = 0.0;
  for (const float x : out.g) norm += static_cast<double>(x) * static_cast<double>(x);
  out.clip = std::min(1.0, 0.5 / (std::sqrt(norm) + 1e-6));
  return out;
}

// torch.optim.AdamW's update (torch/optim/adamw.py, single-tensor path) after
// clip_grad_norm_, written out in double for three steps over two ranges, one without decay.
TEST(TransformerOps, AdamWFollowsTorchsUpdateAfterClipping) {
  CpuBackend backend(2);
  const std::size_t count = 10;
  std::vector<float> w = random_values(count, 6), m(count, 0.0f), v(count, 0.0f);
  std::vector<double> ew(w.begin(), w.end()), em(count, 0.0), ev(count, 0.0);
  const std::vector<ParameterRange> ranges{{0, 6, true}, {6, 4, false}};
  const AdamWConfig c{0.01f, 0.9f, 0.999f, 1e-6f, 0.1f, 0.5f};
  for (std::uint64_t t = 1; t <= 3; ++t) {
    auto [g, clip] = gradients_above_the_clip(count, 10 + t);
    const std::vector<float> unclipped = g;  // the update clips g in place
    backend.adamw_update(w.data(), g.data(), m.data(), v.data(), static_cast<std::int64_t>(count), ranges, c, t, nullptr);
    const double step_size = 0.01 / (1.0 - std::pow(0.9, static_cast<double>(t)));
    const double root_correction = std::sqrt(1.0 - std::pow(0.999, static_cast<double>(t)));
    for (std::size_t i = 0; i < count; ++i) {
      const double gi = static_cast<double>(unclipped[i]) * clip;
      EXPECT_NEAR(g[i], gi, 1e-6 * std::abs(gi)) << "the gradient is left clipped, as clip_grad_norm_ leaves it";
      if (i < 6) ew[i] *= 1.0 - 0.01 * 0.1;
      em[i] = 0.9 * em[i] + 0.1 * gi;
      ev[i] = 0.999 * ev[i] + 0.001 * gi * gi;
      ew[i] -= step_size * em[i] / (std::sqrt(ev[i]) / root_correction + 1e-6);
      EXPECT_NEAR(w[i], ew[i], 1e-5) << "step " << t << " element " << i;
    }
  }
}

// LAMB as apex's FusedLAMB computes it in AdamW mode (NVIDIA's BERT pretraining), written out in
// double: after the global-norm clip, per tensor u = m̂ / (√v̂ + ε) + λw and w -= lr · r · u with
// r = ‖w‖ / ‖u‖ for tensors with decay, 1 without. Three tensors: one with decay, one without, one
// of zeros with decay (‖w‖ = 0: r = 1); three steps.
TEST(TransformerOps, LambFollowsApexFusedLambAfterClipping) {
  CpuBackend backend(2);
  const std::size_t count = 14;
  std::vector<float> w = random_values(count, 7), m(count, 0.0f), v(count, 0.0f);
  for (std::size_t i = 10; i < count; ++i) w[i] = 0.0f;
  std::vector<double> ew(w.begin(), w.end()), em(count, 0.0), ev(count, 0.0);
  const std::vector<ParameterRange> tensors{{0, 6, true}, {6, 4, false}, {10, 4, true}};
  const AdamWConfig c{0.01f, 0.9f, 0.999f, 1e-6f, 0.1f, 0.5f};
  for (std::uint64_t t = 1; t <= 3; ++t) {
    auto [g, clip] = gradients_above_the_clip(count, 20 + t);
    const std::vector<float> unclipped = g;  // the update clips g in place
    backend.lamb_update(w.data(), g.data(), m.data(), v.data(), static_cast<std::int64_t>(count), tensors, c, t, nullptr);
    const double correction1 = 1.0 - std::pow(0.9, static_cast<double>(t));
    const double correction2 = 1.0 - std::pow(0.999, static_cast<double>(t));
    for (const ParameterRange& tensor : tensors) {
      const auto first = static_cast<std::size_t>(tensor.offset), end = first + static_cast<std::size_t>(tensor.count);
      const double decay = tensor.decays ? 0.1 : 0.0;
      std::vector<double> u(count, 0.0);
      double weight_norm = 0.0, update_norm = 0.0;
      for (std::size_t i = first; i < end; ++i) {
        const double gi = static_cast<double>(unclipped[i]) * clip;
        em[i] = 0.9 * em[i] + 0.1 * gi;
        ev[i] = 0.999 * ev[i] + 0.001 * gi * gi;
        u[i] = (em[i] / correction1) / (std::sqrt(ev[i] / correction2) + 1e-6) + decay * ew[i];
        weight_norm += ew[i] * ew[i];
        update_norm += u[i] * u[i];
      }
      const double ratio = tensor.decays && weight_norm > 0 && update_norm > 0 ? std::sqrt(weight_norm / update_norm) : 1.0;
      for (std::size_t i = first; i < end; ++i) {
        ew[i] -= 0.01 * ratio * u[i];
        EXPECT_NEAR(w[i], ew[i], 1e-5) << "step " << t << " element " << i;
      }
    }
  }
  // The zero tensor moved by plain Adam steps (r = 1) and then by its trust ratio.
  EXPECT_NE(w[12], 0.0f);
}

// Small enough for finite-difference gradient checks.
constexpr BertConfig kTinyBert{.vocabulary = 40, .hidden = 16, .layers = 2, .heads = 2, .intermediate = 24, .max_positions = 16};

// The warm-up's rates are torch.optim.lr_scheduler.LambdaLR's with lambda t: min(1, t / N), as
// base_lr * factor in Python floats: a quarter, a half, three quarters, then the rate itself.
TEST(LearningRateWarmup, TheRateRisesLinearlyOverTheFirstUpdatesAsLambdaLR) {
  const float rate = 0.1f;
  for (std::uint64_t t = 1; t <= 3; ++t) {
    EXPECT_EQ(warmed_up_rate(rate, t, 4), static_cast<float>(static_cast<double>(rate) * (static_cast<double>(t) / 4.0)));
  }
  EXPECT_EQ(warmed_up_rate(rate, 1, 4), 0.025f);
  EXPECT_EQ(warmed_up_rate(rate, 4, 4), rate) << "reached at the N-th update";
  EXPECT_EQ(warmed_up_rate(rate, 9, 4), rate);
  EXPECT_EQ(warmed_up_rate(rate, 1, 0), rate) << "0: no warm-up";
  EXPECT_EQ(warmed_up_rate(rate, 1, 1), rate);
}

// Every optimizer warms up the same way: each update with a warm-up is, bit for bit, the update
// without one at the warmed-up rate (the decoupled decay included), counted by applied updates:
// a step loss scaling skipped does not advance the warm-up.
TEST(LearningRateWarmup, EveryOptimizerTrainsEachUpdateAtItsWarmedUpRate) {
  CpuBackend backend(2);
  const std::size_t count = 14;
  const auto n = static_cast<std::int64_t>(count);
  const std::vector<ParameterRange> tensors{{0, 6, true}, {6, 4, false}, {10, 4, true}};
  constexpr std::uint64_t kWarmup = 4;
  // One skipped step before update call 3: calls 3 to 6 are applied updates 2 to 5.
  LossScaleState one_skipped;
  one_skipped.skipped = 1;
  enum class Kind { sgd, adamw, lamb };
  for (const Kind kind : {Kind::sgd, Kind::adamw, Kind::lamb}) {
    struct State {
      std::vector<float> w, m, v;
    };
    State warmed{random_values(count, 3), std::vector<float>(count, 0.0f), std::vector<float>(count, 0.0f)};
    State by_hand = warmed;
    const auto update = [&](State& s, float rate, std::uint64_t warmup, std::uint64_t call, const LossScaleState* scale) {
      std::vector<float> g = random_values(count, 100 + call);
      if (kind == Kind::sgd) {
        backend.sgd_update(s.w.data(), g.data(), s.m.data(), n, SgdConfig{rate, 0.9f, 0.01f, warmup}, call, scale);
        return;
      }
      const AdamWConfig c{rate, 0.9f, 0.999f, 1e-6f, 0.1f, 0.5f, warmup};
      if (kind == Kind::adamw) {
        backend.adamw_update(s.w.data(), g.data(), s.m.data(), s.v.data(), n, tensors, c, call, scale);
      } else {
        backend.lamb_update(s.w.data(), g.data(), s.m.data(), s.v.data(), n, tensors, c, call, scale);
      }
    };
    const char* name = kind == Kind::sgd ? "sgd" : kind == Kind::adamw ? "adamw" : "lamb";
    for (std::uint64_t call = 1; call <= 6; ++call) {
      const LossScaleState* scale = call >= 3 ? &one_skipped : nullptr;
      const std::uint64_t applied = call >= 3 ? call - 1 : call;
      update(warmed, 0.01f, kWarmup, call, scale);
      update(by_hand, static_cast<float>(0.01 * std::min(1.0, static_cast<double>(applied) / kWarmup)), 0, call, scale);
      for (std::size_t i = 0; i < count; ++i) {
        ASSERT_EQ(warmed.w[i], by_hand.w[i]) << name << ", update call " << call << ", element " << i;
        ASSERT_EQ(warmed.m[i], by_hand.m[i]) << name << ", update call " << call << ", element " << i;
      }
    }
    // And the warm-up changed the trajectory: at the full rate from the first update it differs.
    State full{random_values(count, 3), std::vector<float>(count, 0.0f), std::vector<float>(count, 0.0f)};
    update(full, 0.01f, 0, 1, nullptr);
    State first{random_values(count, 3), std::vector<float>(count, 0.0f), std::vector<float>(count, 0.0f)};
    update(first, 0.01f, kWarmup, 1, nullptr);
    EXPECT_NE(full.w, first.w) << name;
  }
}

TEST(Bert, SyntheticBatchIsShapedAsBertsPretrainingData) {
  const PretrainingBatchLayout layout{3, 12};
  ASSERT_EQ(layout.predictions(), 2);  // 15% of 12, rounded up
  EXPECT_EQ(masked_positions_per_sequence(128), 20);
  std::vector<std::int32_t> tokens, labels;
  synthesize_pretraining_batch(layout, 40, 9, tokens, labels);
  ASSERT_EQ(tokens.size(), 36u);
  ASSERT_EQ(labels.size(), static_cast<std::size_t>(layout.total()));
  for (std::int64_t s = 0; s < 3; ++s) {
    const std::int32_t* ids = &tokens[static_cast<std::size_t>(s * 12)];
    const std::int32_t* types = &labels[static_cast<std::size_t>(layout.token_types() + s * 12)];
    EXPECT_EQ(ids[0], 1);   // [CLS]
    EXPECT_EQ(ids[11], 2);  // the closing [SEP]
    EXPECT_EQ(types[0], 0);
    EXPECT_EQ(types[11], 1);
    EXPECT_TRUE(std::is_sorted(types, types + 12));
    const std::int32_t nsp = labels[static_cast<std::size_t>(s)];
    EXPECT_TRUE(nsp == 0 || nsp == 1);
    std::set<std::int32_t> rows;
    for (std::int64_t k = 0; k < 2; ++k) {
      const std::int32_t row = labels[static_cast<std::size_t>(layout.masked_rows() + s * 2 + k)];
      const std::int32_t original = labels[static_cast<std::size_t>(layout.masked_tokens() + s * 2 + k)];
      EXPECT_GE(row, s * 12 + 1);
      EXPECT_LE(row, s * 12 + 10);
      EXPECT_GE(original, 4) << "a special token was masked";
      rows.insert(row);
    }
    EXPECT_EQ(rows.size(), 2u) << "masked positions repeat";
    EXPECT_EQ(labels[static_cast<std::size_t>(layout.real_tokens() + s)], 12) << "a synthetic sequence has no padding";
  }
  // Real data's max_predictions_per_seq sets the slots; past a short sequence's candidates they
  // predict nothing.
  const PretrainingBatchLayout wide{2, 8, 6};
  ASSERT_EQ(wide.predictions(), 6);
  synthesize_pretraining_batch(wide, 40, 9, tokens, labels);
  ASSERT_EQ(labels.size(), static_cast<std::size_t>(wide.total()));
  for (std::int64_t s = 0; s < 2; ++s) {
    int without = 0;
    for (std::int64_t k = 0; k < 6; ++k) {
      const std::int32_t label = labels[static_cast<std::size_t>(wide.masked_tokens() + s * 6 + k)];
      const std::int32_t row = labels[static_cast<std::size_t>(wide.masked_rows() + s * 6 + k)];
      if (label == kNoPrediction) {
        ++without;
        EXPECT_EQ(row, s * 8);
      }
    }
    EXPECT_EQ(without, 1) << "8 tokens leave 5 maskable positions for 6 slots";
  }
}

// Padding (real data) leaves the loss as it is whatever the padding's ids are: no real token
// attends to it, and no prediction reads it. Without the mask, it would not.
TEST(Bert, PaddingTokensChangeNothingTheLossReads) {
  CpuBackend backend(1);
  const BertConfig config = kTinyBert;
  // Four masked-LM slots where synthetic data has two: real data's max_predictions moves every part
  // of the labels block after the slots, and each layer must read its part where it now is.
  const PretrainingBatchLayout layout{3, 12, 4};
  Trainer trainer(backend, bert_for_pretraining(config), layout, config.vocabulary, SgdConfig{}, 5);
  const std::vector<std::int32_t> real_tokens{12, 7, 5};
  trainer.pad_sequences(layout, real_tokens, 0);
  const float with_pad_ids = trainer.loss();
  trainer.pad_sequences(layout, real_tokens, 17);
  const float with_other_ids = trainer.loss();
  EXPECT_EQ(with_pad_ids, with_other_ids);
  // The same ids past the real tokens, now attended to: the loss moves.
  std::vector<std::int32_t> tokens, labels;
  trainer.copy_sequences_to_host(tokens, labels);
  for (std::int64_t s = 0; s < 3; ++s) labels[static_cast<std::size_t>(layout.real_tokens() + s)] = 12;
  trainer.load_sequences(tokens.data(), labels.data());
  EXPECT_GT(std::fabs(trainer.loss() - with_other_ids), 1e-6f);  // small at initialisation, but not 0
}

// Central differences of the step's loss against the trainer's gradient (computed first), at
// `samples` random elements of every parameter tensor; returns how many were compared.
int expect_gradients_are_differences(Trainer& trainer, int samples, std::uint64_t seed) {
  trainer.compute_gradients();
  std::mt19937_64 rng(seed);
  int checked = 0;
  for (Parameter* p : trainer.parameters().parameters()) {
    const std::vector<float> analytic(p->grad.as<float>(), p->grad.as<float>() + p->grad.numel());
    for (int sample = 0; sample < samples; ++sample) {
      const auto i = std::uniform_int_distribution<std::int64_t>(0, p->value.numel() - 1)(rng);
      float& value = p->value.as<float>()[i];
      const float saved = value;
      const float epsilon = 1e-2f;
      value = saved + epsilon;
      const double plus = trainer.loss();
      value = saved - epsilon;
      const double minus = trainer.loss();
      value = saved;
      const double numeric = (plus - minus) / (2.0 * static_cast<double>(epsilon));
      EXPECT_NEAR(numeric, analytic[static_cast<std::size_t>(i)], 2e-3 + 2e-2 * std::fabs(numeric))
          << p->name << "[" << i << "]";
      ++checked;
    }
  }
  return checked;
}

// The whole model's gradient by central differences of the step's loss (masked-LM plus
// next-sentence cross-entropy) in fp32: a sample of every parameter tensor, the tied word
// embeddings included (their gradient has the decoder's part and the lookups').
TEST(GradientCheck, BertForPretrainingWholeModel) {
  CpuBackend backend(1);
  const BertConfig config = kTinyBert;
  Trainer trainer(backend, bert_for_pretraining(config), PretrainingBatchLayout{2, 8}, config.vocabulary,
                  SgdConfig{}, 5);
  EXPECT_EQ(expect_gradients_are_differences(trainer, 4, 11), 4 * static_cast<int>(trainer.parameters().parameters().size()));
}

// The same with padded sequences and slots without a prediction (real data): the masked softmax
// and the loss that leaves those slots out have the gradient their loss has.
TEST(GradientCheck, BertForPretrainingWithPaddedSequences) {
  CpuBackend backend(1);
  const BertConfig config = kTinyBert;
  const PretrainingBatchLayout layout{2, 10};
  Trainer trainer(backend, bert_for_pretraining(config), layout, config.vocabulary, SgdConfig{}, 6);
  trainer.pad_sequences(layout, {6, 10});
  std::vector<std::int32_t> tokens, labels;
  trainer.copy_sequences_to_host(tokens, labels);
  ASSERT_EQ(labels[static_cast<std::size_t>(layout.real_tokens())], 6);
  EXPECT_EQ(expect_gradients_are_differences(trainer, 3, 12), 3 * static_cast<int>(trainer.parameters().parameters().size()));
}

TEST(Training, BertLossFallsOnAFixedBatch) {
  CpuBackend backend(2);
  const BertConfig config = kTinyBert;
  Trainer trainer(backend, bert_for_pretraining(config), PretrainingBatchLayout{4, 12}, config.vocabulary,
                  SgdConfig{}, 3);
  trainer.use_adamw({5e-3f, 0.9f, 0.999f, 1e-6f, 0.01f, 1.0f});
  const float first = trainer.step_and_loss();
  // About chance at the start: ln(vocabulary) for the masked tokens plus ln 2 for the next sentence.
  EXPECT_NEAR(first, std::log(40.0f) + std::log(2.0f), 0.5f);
  float last = first;
  for (int i = 0; i < 60; ++i) last = trainer.step_and_loss();
  EXPECT_LT(last, 0.5f * first) << "loss " << first << " → " << last;
}

// LAMB trains a small BERT as AdamW does. Its steps are relative to each tensor's norm (lr · ‖w‖),
// so it takes a larger learning rate than AdamW's for the same progress, as LAMB's recipes do.
TEST(Training, BertLossFallsWithLamb) {
  CpuBackend backend(2);
  const BertConfig config = kTinyBert;
  Trainer trainer(backend, bert_for_pretraining(config), PretrainingBatchLayout{4, 12}, config.vocabulary,
                  SgdConfig{}, 3);
  trainer.use_lamb({5e-2f, 0.9f, 0.999f, 1e-6f, 0.01f, 1.0f});
  const float first = trainer.step_and_loss();
  float last = first;
  for (int i = 0; i < 60; ++i) last = trainer.step_and_loss();
  EXPECT_LT(last, 0.5f * first) << "loss " << first << " → " << last;
}

TEST(Bert, BaseHasBertBasesParameterCount) {
  // HuggingFace's BertForPreTraining(bert-base-uncased config), the tied decoder counted once.
  CpuBackend backend(2);
  auto net = bert_for_pretraining(BertConfig{});
  std::vector<Parameter*> params;
  net->collect_parameters(params);
  std::int64_t count = 0;
  for (const Parameter* p : params) count += p->value.numel();
  EXPECT_EQ(count, 110'106'428);
  EXPECT_EQ(count, network_parameter_count(Model::bert_base)) << "what engine: command holds a script's `parameters` to";
  name_parameters(*net);
  EXPECT_EQ(params.front()->name, "bert.embeddings.word_embeddings.weight");
  EXPECT_EQ(params[5]->name, "bert.encoder.layer.0.attention.self.query.weight");
  EXPECT_EQ(params.back()->name, "cls.seq_relationship.bias");
}

TEST(Bert, Bf16TrainsWhereTheCpuHasIt) {
  CpuBackend backend(2);
  if (const auto why = backend.cannot_compute(DType::bf16)) GTEST_SKIP() << *why;
  const BertConfig config = kTinyBert;
  Trainer fp32(backend, bert_for_pretraining(config), PretrainingBatchLayout{4, 12}, config.vocabulary, SgdConfig{}, 3);
  Trainer bf16(backend, bert_for_pretraining(config), PretrainingBatchLayout{4, 12}, config.vocabulary, SgdConfig{}, 3,
               0, MemoryReuse::lifetime, DType::bf16);
  const float reference = fp32.loss();
  EXPECT_NEAR(bf16.loss(), reference, 0.02f * reference);
  bf16.use_adamw({5e-3f, 0.9f, 0.999f, 1e-6f, 0.01f, 1.0f});
  const float first = bf16.step_and_loss();
  float last = first;
  for (int i = 0; i < 60; ++i) last = bf16.step_and_loss();
  EXPECT_LT(last, 0.5f * first);
}

}  // namespace
}  // namespace dlbench::worker
