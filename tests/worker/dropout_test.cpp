// Dropout on the CPU backend: no mask is stored, so backward hashes the indices again and must
// land on exactly the elements forward kept; the vectorised loops must agree with the scalar
// function the CUDA kernels use (dropout_mask.hpp); masks must look independent.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "cpu/cpu_backend.hpp"
#include "dropout_mask.hpp"
#include "trainer.hpp"
#include "activation_index.hpp"
#include "precision.hpp"
#include "tensor.hpp"

namespace dlbench::worker {
namespace {

template <typename T>
Tensor view(std::vector<T>& values, const Shape& shape) {
  Tensor t;
  t.shape = shape;
  t.dtype = dtype_of<T>::value;
  t.data = values.data();
  return t;
}

std::vector<float> mask_of(CpuBackend& cpu, std::int64_t n, float p, std::uint64_t seed) {
  std::vector<float> mask(static_cast<std::size_t>(n), std::nanf(""));
  Tensor t = view(mask, Shape(n));
  cpu.dropout_mask(t, p, seed);
  return mask;
}

double fraction_kept(const std::vector<float>& mask) {
  std::int64_t kept = 0;
  for (float m : mask) kept += m != 0.0f ? 1 : 0;
  return static_cast<double>(kept) / static_cast<double>(mask.size());
}

// Not a whole number of the loops' 2^14-element chunks, so the last chunk is partial.
constexpr std::int64_t kElements = 3 * 16384 + 7;

TEST(Dropout, TheLoopsKeepWhatTheSharedFunctionKeeps) {
  for (const int threads : {1, 2}) {
    CpuBackend cpu(threads);
    cpu.begin_step(5);
    for (const float p : {0.0f, 0.1f, 0.5f, 0.9f}) {
      const std::vector<float> mask = mask_of(cpu, kElements, p, 1234);
      const DropoutKey key = dropout_key(1234, 5);
      const std::uint32_t threshold = dropout_threshold(p);
      const float scale = 1.0f / (1.0f - p);
      for (std::int64_t i = 0; i < kElements; ++i) {
        const float expected = dropout_keeps(key, static_cast<std::uint64_t>(i), threshold) ? scale : 0.0f;
        ASSERT_EQ(mask[static_cast<std::size_t>(i)], expected) << "element " << i << ", p " << p << ", " << threads << " threads";
      }
    }
  }
}

// An activation kept channels last (the CPU's layout, and CUDA's in tf32 and the half types) drops
// the same logical elements as one kept NCHW (CUDA's fp32): on an H200, DeepLabV3+'s ASPP
// dropout in fp32 was off by 1.03 against the CPU, as independent masks are, before the mask was
// keyed on the logical index rather than the memory offset. Forward, backward and the mask.
TEST(Dropout, ChannelsLastDropsTheSameElementsAsNchw) {
  CpuBackend cpu(2);
  cpu.begin_step(3);
  const Shape shape(2, 6, 5, 7);
  std::vector<float> logical(static_cast<std::size_t>(shape.numel()));
  for (std::size_t i = 0; i < logical.size(); ++i) logical[i] = 1.0f + static_cast<float>(i % 97);
  const auto run = [&](Layout layout, int pass) {
    std::vector<float> in = to_layout(logical, shape, layout), out(in.size(), std::nanf(""));
    Tensor x = view(in, shape), y = view(out, shape);
    x.layout = y.layout = layout;
    if (pass == 0) cpu.dropout_forward(x, y, 0.5f, 11);
    if (pass == 1) cpu.dropout_backward(x, y, 0.5f, 11);
    if (pass == 2) cpu.dropout_mask(y, 0.5f, 11);
    return out;
  };
  const ActivationGeometry g{2, 6, 5, 7, true};
  for (int pass = 0; pass < 3; ++pass) {
    const std::vector<float> nchw = run(Layout::nchw, pass), nhwc = run(Layout::nhwc, pass);
    std::int64_t dropped = 0;
    for (std::int64_t at = 0; at < shape.numel(); ++at) {
      const auto logical_at = static_cast<std::size_t>(g.logical_index(at));
      ASSERT_EQ(nhwc[static_cast<std::size_t>(at)], nchw[logical_at]) << "pass " << pass << ", NHWC offset " << at;
      dropped += nchw[logical_at] == 0.0f ? 1 : 0;
    }
    EXPECT_GT(dropped, shape.numel() / 4) << "the premise: the mask drops elements";
  }
}

TEST(Dropout, BackwardMasksTheElementsForwardKept) {
  CpuBackend cpu(2);
  cpu.begin_step(9);
  const float p = 0.3f;
  std::vector<float> x(kElements), y(kElements, std::nanf("")), dy(kElements), dx(kElements, std::nanf(""));
  for (std::size_t i = 0; i < x.size(); ++i) {
    x[i] = 1.0f + static_cast<float>(i % 97);
    dy[i] = -2.0f - static_cast<float>(i % 89);
  }
  Tensor tx = view(x, Shape(kElements)), ty = view(y, Shape(kElements));
  Tensor tdy = view(dy, Shape(kElements)), tdx = view(dx, Shape(kElements));
  cpu.dropout_forward(tx, ty, p, 42);
  cpu.dropout_backward(tdy, tdx, p, 42);
  const std::vector<float> mask = mask_of(cpu, kElements, p, 42);
  for (std::size_t i = 0; i < x.size(); ++i) {
    ASSERT_EQ(y[i], x[i] * mask[i]) << "forward, element " << i;
    ASSERT_EQ(dx[i], dy[i] * mask[i]) << "backward, element " << i;
    ASSERT_EQ(y[i] != 0.0f, dx[i] != 0.0f) << "element " << i;
  }
  // In place, as the attention probabilities' gradient runs.
  std::vector<float> in_place = dy;
  Tensor t = view(in_place, Shape(kElements));
  cpu.dropout_backward(t, t, p, 42);
  EXPECT_EQ(in_place, dx);
}

TEST(Dropout, Bf16KeepsTheSameElementsAsFp32) {
  CpuBackend cpu(2);
  cpu.begin_step(2);
  std::vector<bf16> x(kElements, bf16::from_float(1.5f)), y(kElements);
  Tensor tx = view(x, Shape(kElements)), ty = view(y, Shape(kElements));
  cpu.dropout_forward(tx, ty, 0.5f, 8);
  const std::vector<float> mask = mask_of(cpu, kElements, 0.5f, 8);
  for (std::size_t i = 0; i < y.size(); ++i) ASSERT_EQ(y[i].to_float(), 1.5f * mask[i]) << "element " << i;
}

// The share kept is 1 - p within 5 standard deviations, whatever the step and seed.
TEST(Dropout, KeepsOneMinusPOfTheElements) {
  CpuBackend cpu(2);
  const std::int64_t n = 1 << 20;
  for (const float p : {0.1f, 0.5f, 0.9f}) {
    for (const std::uint64_t step : {0u, 1u, 1000u}) {
      cpu.begin_step(step);
      const double kept = fraction_kept(mask_of(cpu, n, p, 7));
      const double q = static_cast<double>(p);
      const double sigma = std::sqrt(q * (1.0 - q) / static_cast<double>(n));
      EXPECT_NEAR(kept, 1.0 - q, 5 * sigma) << "p " << p << ", step " << step;
    }
  }
  EXPECT_EQ(fraction_kept(mask_of(cpu, n, 0.0f, 7)), 1.0);
}

// Two masks at p = 0.5 agree on half their elements if independent: across steps, across
// layers' seeds (the layers' seeds differ in a few bits), and between neighbours in one mask.
TEST(Dropout, MasksLookIndependent) {
  CpuBackend cpu(2);
  const std::int64_t n = 1 << 18;
  const double bound = 5 * 0.5 / std::sqrt(static_cast<double>(n));
  // Agreement of a[i] and b[i ^ flip] (n is a power of 2, so i ^ flip stays inside).
  const auto agreement = [](const std::vector<float>& a, const std::vector<float>& b, std::size_t flip) {
    std::int64_t same = 0;
    for (std::size_t i = 0; i < a.size(); ++i) same += (a[i] != 0.0f) == (b[i ^ flip] != 0.0f) ? 1 : 0;
    return static_cast<double>(same) / static_cast<double>(a.size());
  };
  cpu.begin_step(3);
  const std::vector<float> base = mask_of(cpu, n, 0.5f, 100);
  EXPECT_NEAR(agreement(base, base, 1), 0.5, bound) << "neighbours";
  EXPECT_NEAR(agreement(base, base, 128), 0.5, bound) << "128 apart";
  for (const std::uint64_t other_seed : {101u, 102u, 100u ^ (1u << 20)}) {
    EXPECT_NEAR(agreement(base, mask_of(cpu, n, 0.5f, other_seed), 0), 0.5, bound) << "seed " << other_seed;
  }
  cpu.begin_step(4);
  const std::vector<float> next_step = mask_of(cpu, n, 0.5f, 100);
  EXPECT_NEAR(agreement(base, next_step, 0), 0.5, bound) << "the next step";
  // Were the next step's mask this one's elements xor-permuted (which one round of hashing after
  // an xor with the key would make it), the two would agree fully at that permutation.
  for (const std::size_t flip : {1u, 2u, 64u, 4096u}) {
    EXPECT_NEAR(agreement(base, next_step, flip), 0.5, bound) << "indices xor " << flip;
  }
  cpu.begin_step(3);
  EXPECT_EQ(mask_of(cpu, n, 0.5f, 100), base) << "the same step and seed give the same mask";
}

// Indices past 2^32 hash in their own block rather than wrapping onto the first 2^32.
TEST(Dropout, IndicesPastFourGiDoNotRepeatTheFirstOnes) {
  const DropoutKey key = dropout_key(5, 6);
  const std::uint32_t half = dropout_threshold(0.5f);
  std::int64_t same = 0;
  const std::int64_t n = 1 << 16;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto low = static_cast<std::uint64_t>(i);
    same += dropout_keeps(key, low, half) == dropout_keeps(key, low + (std::uint64_t{1} << 32), half) ? 1 : 0;
  }
  EXPECT_NEAR(static_cast<double>(same) / static_cast<double>(n), 0.5, 5 * 0.5 / std::sqrt(static_cast<double>(n)));
}

}  // namespace
}  // namespace dlbench::worker
