// More of dlbench's CUDA kernels run on the CPU (cuda/emulation/cuda_emulation.hpp; the harness
// and the first kernels are in kernels_on_cpu_test.cpp): the conversions to half types, GELU and
// tanh, the adds, the per-pixel loss and the device-side loss sum, and LAMB. Each against a
// reference written apart from the kernels, every buffer guarded, and, where blocks share a
// result, the same bits with the threads in either order.
#include "cuda/emulation/cuda_emulation.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numbers>
#include <vector>

#include <gtest/gtest.h>

#include "../worker/batch_norm_reference.hpp"
#include "activation_index.hpp"
#include "cuda/kernels.hpp"
#include "cuda/transformer_kernels.hpp"
#include "emulated_kernel_test.hpp"
#include "loss_scaler.hpp"

namespace dlbench::worker {
namespace {

using cuda_emulation::ThreadOrder;
using emulated_kernel_test::Guarded;
using emulated_kernel_test::in_order;
using emulated_kernel_test::same_bits;
using emulated_kernel_test::through;
using reference_batch_norm::normal_values;
using reference_batch_norm::relative_error;

constexpr DType kFloatTypes[] = {DType::fp32, DType::fp16, DType::bf16};

// `v` rounded once to the nearest value of `dtype`, ties to even, written apart from the
// kernels' own conversions (cuda_fp16.h, cuda_bf16.h): GCC's _Float16 for fp16, the bits for bf16.
float round_to(DType dtype, float v) {
  switch (dtype) {
    case DType::fp16: return static_cast<float>(static_cast<_Float16>(v));
    case DType::bf16: {
      if (std::isnan(v)) return v;
      const auto bits = std::bit_cast<std::uint32_t>(v);
      const std::uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) & 0xffff0000u;
      return std::bit_cast<float>(rounded);
    }
    default: return v;
  }
}

std::vector<float> rounded(DType dtype, std::vector<float> values) {
  for (float& v : values) v = round_to(dtype, v);
  return values;
}

// Half of the gap between 1 and the next value of the type: how far one rounding may move a value.
double half_ulp(DType dtype) {
  switch (dtype) {
    case DType::fp16: return 0x1p-11;
    case DType::bf16: return 0x1p-8;
    default: return 0x1p-24;
  }
}

// Half the spacing of the type's subnormals, where a value's rounding error stops shrinking with it
// (fp16's reach gradients; bf16's and fp32's are far below any value here).
double half_subnormal_spacing(DType dtype) { return dtype == DType::fp16 ? 0x1p-25 : 0.0; }

bool same_value(float got, float expected) {
  if (std::isnan(expected)) return std::isnan(got);
  return got == expected && std::signbit(got) == std::signbit(expected);
}

// fp32 → each type (the weights' copies, linear layers' half weights): every value rounded once,
// to the nearest and ties to even: halfway cases both ways, past the largest half to inf, into
// half's subnormals, signed zero, inf and NaN kept.
TEST(CudaKernelsOnCpu, ConvertRoundsEachValueToTheNearestEvenOfItsType) {
  std::vector<float> values = normal_values(1000, 81, 0.0, 3.0);
  const float specials[] = {1.0f + 0x1p-11f, 1.0f + 3 * 0x1p-11f, 1.0f + 0x1p-8f,    1.0f + 3 * 0x1p-8f,
                            65504.0f,        65519.0f,            65520.0f,          1e-7f,
                            3e-8f,           1e-40f,              -0.0f,             3.4e38f,
                            std::numeric_limits<float>::infinity(),  -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::quiet_NaN(), -2.5e-6f};
  values.insert(values.end(), std::begin(specials), std::end(specials));
  for (const DType dtype : kFloatTypes) {
    SCOPED_TRACE(to_string(dtype));
    bool guards_intact = true;
    const std::vector<float> got = through(
        dtype, std::vector<float>(values.size(), 0.0f),
        [&](void* into) { kernels::convert(values.data(), dtype, into, static_cast<std::int64_t>(values.size()), nullptr); },
        &guards_intact);
    EXPECT_TRUE(guards_intact);
    for (std::size_t i = 0; i < values.size(); ++i) {
      ASSERT_TRUE(same_value(got[i], round_to(dtype, values[i]))) << values[i] << " became " << got[i];
    }
  }
  EXPECT_EQ(round_to(DType::fp16, 65520.0f), std::numeric_limits<float>::infinity()) << "the reference itself";
  EXPECT_EQ(round_to(DType::bf16, 1.0f + 0x1p-8f), 1.0f) << "the reference itself: a tie to even";
}

// GELU (erf form, as BERT and PyTorch's default) and tanh, forward and backward, in each type, at
// an aligned start (16-byte packs) and an odd one (element by element): fp64 over the values as
// the type holds them, within one rounding to the type plus fp32's own error.
TEST(CudaKernelsOnCpu, GeluAndTanhForwardAndBackwardInEveryType) {
  constexpr std::int64_t kValues = 1003;
  const auto n = static_cast<std::size_t>(kValues);
  for (const DType dtype : kFloatTypes) {
    for (const std::size_t offset : {std::size_t{0}, std::size_t{1}}) {
      SCOPED_TRACE(::testing::Message() << to_string(dtype) << " offset " << offset);
      const std::vector<float> x = rounded(dtype, normal_values(n + 1, 91, 0.0, 2.5));
      const std::vector<float> dy = rounded(dtype, normal_values(n + 1, 92, 0.0, 1.0));
      bool guards_intact = true;
      const auto run = [&](auto&& launch) {
        std::vector<float> out;
        kernels::with_float_type(dtype, [&](auto type) {
          using T = typename decltype(type)::type;
          auto gx = Guarded<T>::of(x), gdy = Guarded<T>::of(dy);
          Guarded<T> result(n + 1);
          launch(gx.data() + offset, gdy.data() + offset, result.data() + offset);
          guards_intact = guards_intact && result.guards_intact();
          out = result.floats();
        });
        return out;
      };
      const auto y_gelu = run([&](const void* in, const void*, void* out) {
        kernels::gelu_forward(dtype, in, out, kValues, nullptr);
      });
      const auto dx_gelu = run([&](const void* in, const void* grad, void* out) {
        kernels::gelu_backward(dtype, in, grad, out, kValues, nullptr);
      });
      const auto y_tanh = run([&](const void* in, const void*, void* out) {
        kernels::tanh_forward(dtype, in, out, kValues, nullptr);
      });
      const auto dx_tanh = run([&](const void* in, const void* grad, void* out) {
        kernels::tanh_backward(dtype, in, grad, out, kValues, nullptr);
      });
      EXPECT_TRUE(guards_intact);
      const auto near = [&](float got, double expected, double input_scale) {
        return std::fabs(static_cast<double>(got) - expected) <=
               half_ulp(dtype) * 1.001 * std::fabs(expected) + half_subnormal_spacing(dtype) + 2e-6 * input_scale;
      };
      for (std::size_t i = offset; i < offset + n; ++i) {
        const auto v = static_cast<double>(x[i]), g = static_cast<double>(dy[i]);
        const double cdf = 0.5 * (1.0 + std::erf(v / std::sqrt(2.0)));
        const double pdf = std::exp(-0.5 * v * v) / std::sqrt(2.0 * std::numbers::pi);
        const double t = std::tanh(v);
        ASSERT_TRUE(near(y_gelu[i], v * cdf, 1.0 + std::fabs(v))) << "gelu(" << v << ") = " << y_gelu[i];
        ASSERT_TRUE(near(dx_gelu[i], g * (cdf + v * pdf), (1.0 + std::fabs(v)) * std::fabs(g)))
            << "gelu'(" << v << ") · " << g << " = " << dx_gelu[i];
        ASSERT_TRUE(near(y_tanh[i], t, 1.0)) << "tanh(" << v << ") = " << y_tanh[i];
        ASSERT_TRUE(near(dx_tanh[i], g * (1.0 - t * t), std::fabs(g))) << "tanh'(" << v << ") · " << g;
      }
    }
  }
}

// A residual add (a + b, rounded once) at either alignment, and a convolution's bias added per
// channel in either memory order: the sum of the stored values in fp32, rounded once.
TEST(CudaKernelsOnCpu, AddsRoundOnceAndTheBiasFollowsTheChannelInEitherLayout) {
  for (const DType dtype : kFloatTypes) {
    SCOPED_TRACE(to_string(dtype));
    constexpr std::int64_t kValues = 1003;
    const auto n = static_cast<std::size_t>(kValues);
    const std::vector<float> a = rounded(dtype, normal_values(n + 1, 101, 0.0, 1.0));
    const std::vector<float> b = rounded(dtype, normal_values(n + 1, 102, 0.0, 1.0));
    for (const std::size_t offset : {std::size_t{0}, std::size_t{1}}) {
      kernels::with_float_type(dtype, [&](auto type) {
        using T = typename decltype(type)::type;
        auto ga = Guarded<T>::of(a), gb = Guarded<T>::of(b);
        Guarded<T> sum(n + 1);
        kernels::add(dtype, ga.data() + offset, gb.data() + offset, sum.data() + offset, kValues, nullptr);
        const std::vector<float> got = sum.floats();
        for (std::size_t i = offset; i < offset + n; ++i) {
          ASSERT_EQ(got[i], round_to(dtype, a[i] + b[i])) << "offset " << offset << " element " << i;
        }
        EXPECT_TRUE(sum.guards_intact());
      });
    }
    for (const bool channels_last : {false, true}) {
      SCOPED_TRACE(channels_last ? "nhwc" : "nchw");
      const ActivationGeometry g{2, 5, 3, 7, channels_last};
      const std::vector<float> y = rounded(dtype, normal_values(static_cast<std::size_t>(g.numel()), 103, 0.0, 1.0));
      const std::vector<float> bias = normal_values(5, 104, 0.0, 1.0);
      bool guards_intact = true;
      const std::vector<float> got = through(
          dtype, y, [&](void* p) { kernels::add_channel_bias(dtype, p, bias.data(), g, nullptr); }, &guards_intact);
      EXPECT_TRUE(guards_intact);
      for (std::int64_t sample = 0; sample < 2; ++sample) {
        for (std::int64_t c = 0; c < 5; ++c) {
          for (std::int64_t pixel = 0; pixel < 21; ++pixel) {
            const auto at = static_cast<std::size_t>(channels_last ? (sample * 21 + pixel) * 5 + c
                                                                   : (sample * 5 + c) * 21 + pixel);
            ASSERT_EQ(got[at], round_to(dtype, y[at] + bias[static_cast<std::size_t>(c)]))
                << "sample " << sample << " channel " << c << " pixel " << pixel;
          }
        }
      }
    }
  }
}

// DeepLabV3+'s loss: softmax cross-entropy per pixel over the classes `channel_stride()` apart,
// in either memory order; the ignore label and labels below 0 left out of the mean, the loss of
// each pixel scaled so that their mean is the mean over the pixels counted; against fp64 over
// the logits as the type holds them; the same bits in either thread order.
TEST(CudaKernelsOnCpu, PerPixelSoftmaxCrossEntropyLeavesIgnoredPixelsOutInEitherLayout) {
  constexpr int kClasses = 5;
  const std::vector<std::int32_t> labels = {0, 4, 255, 2, 1, 3, -1, 4, 4, 0, 2, 255,
                                            1, 1, 3, 0, 255, 2, 4, 3, 0, 1, 2, 3};  // (N, H, W) order
  constexpr int kCounted = 24 - 4;
  const float weight = 0.7f, gradient_scale = 4.0f;
  for (const DType dtype : {DType::fp32, DType::bf16}) {
    for (const bool channels_last : {false, true}) {
      SCOPED_TRACE(::testing::Message() << to_string(dtype) << (channels_last ? " nhwc" : " nchw"));
      const ActivationGeometry g{2, kClasses, 3, 4, channels_last};
      const std::vector<float> logits =
          rounded(dtype, normal_values(static_cast<std::size_t>(g.numel()), 111, 0.0, 2.0));
      const auto run = [&](ThreadOrder order) {
        return in_order(order, [&] {
          std::vector<float> loss(labels.size(), -3.0f);
          int valid = 0;
          bool guards_intact = true;
          kernels::with_float_type(dtype, [&](auto type) {
            using T = typename decltype(type)::type;
            auto z = Guarded<T>::of(logits);
            Guarded<T> dz(logits.size());
            kernels::pixel_softmax_cross_entropy(dtype, z.data(), labels.data(), dz.data(), loss.data(), &valid, g,
                                                 255, &gradient_scale, weight, nullptr);
            guards_intact = z.guards_intact() && dz.guards_intact();
            const std::vector<float> gradient = dz.floats();
            loss.insert(loss.end(), gradient.begin(), gradient.end());  // the gradient after the losses
          });
          EXPECT_TRUE(guards_intact);
          EXPECT_EQ(valid, kCounted);
          return loss;
        });
      };
      const std::vector<float> both = run(ThreadOrder::ascending);
      const std::vector<float> loss(both.begin(), both.begin() + 24), dz(both.begin() + 24, both.end());
      std::vector<double> expected_loss(24, 0.0), expected_dz(logits.size(), 0.0);
      for (std::int64_t sample = 0; sample < 2; ++sample) {
        for (std::int64_t pixel = 0; pixel < 12; ++pixel) {
          const auto i = static_cast<std::size_t>(sample * 12 + pixel);
          const std::int32_t label = labels[i];
          if (label < 0 || label == 255) continue;
          const auto at = [&](int c) {
            return static_cast<std::size_t>(channels_last ? (sample * 12 + pixel) * kClasses + c
                                                          : (sample * kClasses + c) * 12 + pixel);
          };
          double top = -1e300, total = 0.0;
          for (int c = 0; c < kClasses; ++c) top = std::max(top, static_cast<double>(logits[at(c)]));
          for (int c = 0; c < kClasses; ++c) total += std::exp(static_cast<double>(logits[at(c)]) - top);
          const double lse = top + std::log(total);
          expected_loss[i] = 0.7 * (lse - static_cast<double>(logits[at(label)])) * 24.0 / kCounted;
          for (int c = 0; c < kClasses; ++c) {
            const double p = std::exp(static_cast<double>(logits[at(c)]) - lse);
            expected_dz[at(c)] = (p - (c == label ? 1.0 : 0.0)) * 0.7 * 4.0 / kCounted;
          }
        }
      }
      EXPECT_LT(relative_error(loss, expected_loss), 1e-5);
      EXPECT_LT(relative_error(dz, expected_dz), 2 * half_ulp(dtype) + 1e-6);
      for (const std::size_t ignored : {2u, 6u, 11u, 16u}) EXPECT_EQ(loss[ignored], 0.0f) << "pixel " << ignored;
      EXPECT_TRUE(same_bits(both, run(ThreadOrder::descending)));
    }
  }
}

// The step's loss (CudaBackend::last_loss): the losses of a segment's rows summed on the device,
// as fp64 sums them to fp32's accuracy, and to the same bits whatever order the blocks run in (a
// loss curve repeats from run to run); no rows give 0.
TEST(CudaKernelsOnCpu, TheLossSumIsAccurateAndTheSameInEitherBlockOrder) {
  for (const std::int64_t rows : {std::int64_t{0}, std::int64_t{1}, std::int64_t{256}, std::int64_t{300007}}) {
    SCOPED_TRACE(::testing::Message() << rows << " rows");
    const std::vector<float> losses = normal_values(static_cast<std::size_t>(rows), 121, 2.0, 1.0);
    const auto run = [&](ThreadOrder order) {
      return in_order(order, [&] {
        std::vector<float> total(1, -7.0f), partials(kernels::kSumPartials, -7.0f);
        kernels::sum(losses.data(), rows, total.data(), partials.data(), nullptr);
        return total;
      });
    };
    const std::vector<float> total = run(ThreadOrder::ascending);
    double expected = 0.0, magnitude = 0.0;
    for (const float v : losses) {
      expected += static_cast<double>(v);
      magnitude += std::fabs(static_cast<double>(v));
    }
    EXPECT_LE(std::fabs(static_cast<double>(total[0]) - expected), 1e-6 * magnitude) << total[0] << " vs " << expected;
    EXPECT_TRUE(same_bits(total, run(ThreadOrder::descending))) << "the blocks' order changed the sum";
  }
}

// The global norm (AdamW's and LAMB's clipping) and LAMB's per-tensor norms add their blocks'
// fp32 sums in fp64 in one fixed order. Three blocks summing 2^53, 1 and 1 show the order: 2^53 + 1
// rounds back to 2^53 (ties to even), so added in the blocks' order they give 2^53, and in the
// reverse order 2^53 + 2, which fp64 atomics did whenever the blocks came so.
TEST(CudaKernelsOnCpu, TheOptimizersNormsAddTheirBlocksInOneOrder) {
  constexpr std::int64_t kValues = 768;  // three blocks of 256 threads, an element a thread
  const auto n = static_cast<std::size_t>(kValues);
  std::vector<float> spread(n, 0.0f);
  spread[0] = spread[1] = 0x1p26f;  // the first block's squares: 2^52 + 2^52, exact in fp32
  spread[256] = spread[512] = 1.0f;
  const std::vector<std::int64_t> offsets = {0}, counts = {kValues};
  const std::vector<std::int32_t> decays = {1};
  const kernels::AdamWScalars s{1e-3f, 0.9f, 0.999f, 1e-6f, 0.01f, 1.0f, 0};
  const std::uint64_t update = 1;
  struct Sums {
    std::vector<double> squares, norms;
    std::vector<float> coefficients;
  };
  const auto run = [&](ThreadOrder order) {
    Sums got{std::vector<double>(1 + kernels::kAdamSquaresPartials),
             std::vector<double>(kernels::lamb_norms_doubles(1)), std::vector<float>(8)};
    std::vector<float> values = spread, grads = spread, m(n, 0.0f), v(n, 0.0f);
    in_order(order, [&] {
      kernels::adam_prepare(grads.data(), kValues, got.squares.data(), &update, nullptr, s, got.coefficients.data(),
                            nullptr);
      kernels::lamb_moments(values.data(), grads.data(), m.data(), v.data(), offsets.data(), counts.data(),
                            decays.data(), 1, s, got.coefficients.data(), got.norms.data(), nullptr);
      return 0;
    });
    return got;
  };
  const Sums ascending = run(ThreadOrder::ascending), descending = run(ThreadOrder::descending);
  const double exact = 0x1p53 + 2.0;
  EXPECT_NEAR(ascending.squares[0], exact, 2.0) << "Σg²";
  EXPECT_NEAR(ascending.norms[0], exact, 2.0) << "Σw²";
  EXPECT_EQ(std::bit_cast<std::uint64_t>(ascending.squares[0]), std::bit_cast<std::uint64_t>(descending.squares[0]))
      << "Σg²: " << ascending.squares[0] << " and " << descending.squares[0];
  EXPECT_EQ(std::bit_cast<std::uint64_t>(ascending.norms[0]), std::bit_cast<std::uint64_t>(descending.norms[0]))
      << "Σw²: " << ascending.norms[0] << " and " << descending.norms[0];
  EXPECT_EQ(std::bit_cast<std::uint64_t>(ascending.norms[1]), std::bit_cast<std::uint64_t>(descending.norms[1]))
      << "Σu²";
  EXPECT_TRUE(same_bits(ascending.coefficients, descending.coefficients)) << "the clip factor and corrections";
}

// LAMB as the CPU backend computes it (worker/cpu/transformer_ops.cpp): the gradients clipped to
// the global norm; Adam's moments with bias correction; each tensor's trust ratio ‖w‖ / ‖u‖ where
// it decays, 1 where it does not; the rate warmed up by applied updates. Three updates: a clean
// one, one after an overflow (nothing may change), and one that counts as the second applied.
// One tensor is larger than the kernels' 64 blocks of 256 threads cover in one pass.
TEST(CudaKernelsOnCpu, LambStepsEachTensorByItsTrustRatioAndSkipsAnOverflowedStep) {
  const std::vector<std::int64_t> offsets = {0, 20000, 20700}, counts = {20000, 700, 300};
  const std::vector<std::int32_t> decays = {1, 1, 0};
  constexpr std::int64_t kValues = 21000;
  const auto n = static_cast<std::size_t>(kValues);
  const kernels::AdamWScalars s{1e-3f, 0.9f, 0.999f, 1e-6f, 0.01f, 1.0f, 4};
  const double beta1 = static_cast<double>(s.beta1), beta2 = static_cast<double>(s.beta2);
  std::vector<float> w = normal_values(n, 131, 0.0, 0.05), m(n, 0.0f), v(n, 0.0f), coefficients(8);
  std::vector<double> norms(kernels::lamb_norms_doubles(3)), squares(1 + kernels::kAdamSquaresPartials);
  LossScaleState state;
  for (std::uint64_t update = 1; update <= 3; ++update) {
    SCOPED_TRACE(::testing::Message() << "update " << update);
    state.overflowed = update == 2 ? 1 : 0;
    state.skipped = update >= 2 ? 1 : 0;
    const std::uint64_t applied = update - static_cast<std::uint64_t>(state.skipped);
    std::vector<float> grads = normal_values(n, 131 + update, 0.0, 0.02);  // norm about 2.9: clipped to 1
    const std::vector<float> w0 = w, m0 = m, v0 = v, g0 = grads;
    const auto step = [&](ThreadOrder order, std::vector<float>& ws, std::vector<float>& ms, std::vector<float>& vs,
                          std::vector<float>& gs) {
      in_order(order, [&] {
        kernels::adam_prepare(gs.data(), kValues, squares.data(), &update, &state, s, coefficients.data(), nullptr);
        kernels::lamb_moments(ws.data(), gs.data(), ms.data(), vs.data(), offsets.data(), counts.data(),
                              decays.data(), 3, s, coefficients.data(), norms.data(), nullptr);
        kernels::lamb_apply(ws.data(), ms.data(), vs.data(), offsets.data(), counts.data(), decays.data(), 3, s,
                            coefficients.data(), norms.data(), nullptr);
        return 0;
      });
    };
    std::vector<float> wr = w, mr = m, vr = v, gr = grads;
    step(ThreadOrder::ascending, w, m, v, grads);
    step(ThreadOrder::descending, wr, mr, vr, gr);
    EXPECT_TRUE(same_bits(w, wr) && same_bits(m, mr) && same_bits(v, vr)) << "the blocks' order changed the step";
    if (update == 2) {
      EXPECT_TRUE(same_bits(w, w0) && same_bits(m, m0) && same_bits(v, v0)) << "an overflowed step changed state";
      continue;
    }
    // One update in fp64 from the state the kernels started from.
    double global = 0.0;
    for (const float g : g0) global += static_cast<double>(g) * static_cast<double>(g);
    const double clip = std::min(1.0, 1.0 / (std::sqrt(global) + 1e-6));
    ASSERT_LT(clip, 0.5) << "the test means to clip";
    std::vector<double> clipped(n);
    for (std::size_t i = 0; i < n; ++i) clipped[i] = static_cast<double>(g0[i]) * clip;
    const auto t = static_cast<double>(applied);
    const double rate = 1e-3 * std::min(1.0, t / 4.0);
    const double correction1 = 1.0 - std::pow(beta1, t), correction2 = 1.0 - std::pow(beta2, t);
    std::vector<double> em(n), ev(n), u(n);
    for (std::size_t k = 0; k < 3; ++k) {
      const auto first = static_cast<std::size_t>(offsets[k]), last = first + static_cast<std::size_t>(counts[k]);
      const double decay = decays[k] != 0 ? 0.01 : 0.0;
      double weight_squares = 0.0, update_squares = 0.0;
      for (std::size_t i = first; i < last; ++i) {
        const double g = clipped[i];
        em[i] = beta1 * static_cast<double>(m0[i]) + (1.0 - beta1) * g;
        ev[i] = beta2 * static_cast<double>(v0[i]) + (1.0 - beta2) * g * g;
        u[i] = (em[i] / correction1) / (std::sqrt(ev[i] / correction2) + 1e-6) + decay * static_cast<double>(w0[i]);
        weight_squares += static_cast<double>(w0[i]) * static_cast<double>(w0[i]);
        update_squares += u[i] * u[i];
      }
      EXPECT_NEAR(norms[2 * k] / weight_squares, 1.0, 1e-5) << "tensor " << k << "'s Σw²";
      EXPECT_NEAR(norms[2 * k + 1] / update_squares, 1.0, 1e-5) << "tensor " << k << "'s Σu²";
      const double ratio = decays[k] != 0 ? std::sqrt(weight_squares) / std::sqrt(update_squares) : 1.0;
      // w moves by a small part of itself: its step is compared, to fp32's rounding of w.
      std::vector<float> step_got;
      std::vector<double> step_expected;
      for (std::size_t i = first; i < last; ++i) {
        step_expected.push_back(-rate * ratio * u[i]);
        step_got.push_back(static_cast<float>(static_cast<double>(w[i]) - static_cast<double>(w0[i])));
      }
      EXPECT_LT(relative_error(step_got, step_expected), 2e-3) << "tensor " << k << "'s step";
    }
    EXPECT_LT(relative_error(m, em), 1e-5);
    EXPECT_LT(relative_error(v, ev), 1e-5);
    EXPECT_LT(relative_error(grads, clipped), 1e-6) << "the gradients are left clipped";
  }
}

}  // namespace
}  // namespace dlbench::worker
