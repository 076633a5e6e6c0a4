// The ResNet bottleneck is wired right: it equals its parts (a main-branch Sequential and
// a shortcut) chained by hand, with the residual add, the final ReLU and the gradient
// routing done independently on the host. The parts' own gradients are checked by finite
// differences in gradient_check_test.cpp.
#include <cmath>
#include <cstring>
#include <memory>
#include <ostream>
#include <string>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "cpu/cpu_backend.hpp"
#include "layers/batch_norm2d.hpp"
#include "layers/bottleneck.hpp"
#include "layers/conv2d.hpp"
#include "layers/relu.hpp"

namespace dlbench::worker {
namespace {

struct Case {
  std::int64_t in_channels, width, stride;
  Shape input;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << "in " << c.in_channels << ", width " << c.width << ", stride " << c.stride << ", input " << c.input.to_string();
}

class BottleneckWiring : public ::testing::TestWithParam<Case> {};

std::vector<Parameter*> bind(Layer& layer, ParameterStore& store, Backend& backend) {
  std::vector<Parameter*> params;
  layer.collect_parameters(params);
  store.bind(params, backend);
  return params;
}

TEST_P(BottleneckWiring, EqualsItsPartsChainedByHand) {
  const Case c = GetParam();
  CpuBackend backend(1);
  const std::int64_t out_channels = c.width * Bottleneck::kExpansion;
  const bool projection = c.stride != 1 || c.in_channels != out_channels;

  Bottleneck block(c.in_channels, c.width, c.stride);
  Sequential main, shortcut;
  main.add<Conv2d>(c.in_channels, c.width, 1);
  main.add<BatchNorm2d>(c.width, Then::relu);
  main.add<Conv2d>(c.width, c.width, 3, c.stride, 1);
  main.add<BatchNorm2d>(c.width, Then::relu);
  main.add<Conv2d>(c.width, out_channels, 1);
  main.add<BatchNorm2d>(out_channels);
  if (projection) {
    shortcut.add<Conv2d>(c.in_channels, out_channels, 1, c.stride);
    shortcut.add<BatchNorm2d>(out_channels);
  }

  ParameterStore block_store, main_store, shortcut_store;
  const auto block_params = bind(block, block_store, backend);
  auto parts_params = bind(main, main_store, backend);
  if (projection) {
    const auto s = bind(shortcut, shortcut_store, backend);
    parts_params.insert(parts_params.end(), s.begin(), s.end());
  }
  ASSERT_EQ(block_params.size(), parts_params.size());
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (std::size_t k = 0; k < block_params.size(); ++k) {
    ASSERT_EQ(block_params[k]->value.shape, parts_params[k]->value.shape) << k;
    for (std::int64_t i = 0; i < block_params[k]->value.numel(); ++i) {
      block_params[k]->value.as<float>()[i] = parts_params[k]->value.as<float>()[i] = u(rng);
    }
  }

  Arena arena;
  Tensor x = activation(c.input, Layout::nhwc, DType::fp32), dy;
  arena.request(x);
  SetupContext setup{backend, arena, true};
  const Shape out = block.setup(x, setup).shape;
  EXPECT_EQ(main.setup(x, setup).shape, out);
  if (projection) {
    EXPECT_EQ(shortcut.setup(x, setup).shape, out);
  }
  dy = activation(out, Layout::nhwc, DType::fp32);
  arena.request(dy);
  arena.commit(backend);
  block.reset_state(backend);
  main.reset_state(backend);
  shortcut.reset_state(backend);
  for (std::int64_t i = 0; i < x.numel(); ++i) x.as<float>()[i] = u(rng);
  for (std::int64_t i = 0; i < dy.numel(); ++i) dy.as<float>()[i] = u(rng);

  StepContext ctx{backend, 1, 0, {}};
  const Tensor& y = block.forward(x, ctx);
  const std::vector<float> y_block(y.as<float>(), y.as<float>() + y.numel());
  const Tensor& dx = block.backward(dy, ctx);
  const std::vector<float> dx_block(dx.as<float>(), dx.as<float>() + dx.numel());

  // By hand: z = main(x) + shortcut(x); y = max(z, 0); dz = dy · [z > 0].
  const Tensor& m = main.forward(x, ctx);
  const Tensor& s = projection ? shortcut.forward(x, ctx) : x;
  const auto n = static_cast<std::size_t>(m.numel());
  std::vector<float> y_ref(n);
  Tensor dz = activation(out, Layout::nhwc, DType::fp32);
  std::vector<float> dz_host(n);
  dz.data = dz_host.data();
  for (std::size_t i = 0; i < n; ++i) {
    const float z = m.as<float>()[i] + s.as<float>()[i];
    y_ref[i] = z > 0 ? z : 0.0f;
    dz_host[i] = z > 0 ? dy.as<float>()[i] : 0.0f;
  }
  const Tensor& dx_main = main.backward(dz, ctx);
  std::vector<float> dx_ref(dx_main.as<float>(), dx_main.as<float>() + dx_main.numel());
  const Tensor& dx_short = projection ? shortcut.backward(dz, ctx) : dz;
  for (std::size_t i = 0; i < dx_ref.size(); ++i) dx_ref[i] += dx_short.as<float>()[i];

  const auto expect_same = [](const std::vector<float>& a, const float* b, const std::string& what) {
    for (std::size_t i = 0; i < a.size(); ++i) {
      ASSERT_NEAR(a[i], b[i], 1e-5f * (1.0f + std::fabs(b[i]))) << what << "[" << i << "]";
    }
  };
  expect_same(y_block, y_ref.data(), "y");
  expect_same(dx_block, dx_ref.data(), "dx");
  for (std::size_t k = 0; k < block_params.size(); ++k) {
    const Tensor& g = block_params[k]->grad;
    expect_same(std::vector<float>(g.as<float>(), g.as<float>() + g.numel()), parts_params[k]->grad.as<float>(),
                "parameter " + std::to_string(k) + " grad");
  }
}

// The block's tail in one oneDNN pass (add with a ReLU post-op) gives exactly max(a + b, 0),
// in fp32 and in bf16 where the CPU has it: the same bits as the add followed by a ReLU.
TEST(ResidualTail, FusedAddReluIsTheAddThenTheRelu) {
  CpuBackend backend(2);
  const Shape shape(2, 8, 3, 5);
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> a(static_cast<std::size_t>(shape.numel())), b(a.size());
  for (float& v : a) v = normal(rng);
  for (float& v : b) v = normal(rng);
  for (const DType dtype : {DType::fp32, DType::bf16}) {
    if (backend.cannot_compute(dtype)) continue;
    std::vector<std::shared_ptr<void>> memory;
    const auto tensor = [&](const std::vector<float>* values) {
      Tensor t = activation(shape, Layout::nhwc, dtype);
      memory.push_back(backend.allocate(t.bytes()));
      t.data = memory.back().get();
      if (values != nullptr) {
        const auto bytes = encode(values->data(), values->size(), dtype);
        backend.copy_from_host(t.data, bytes.data(), t.bytes());
      }
      return t;
    };
    Tensor ta = tensor(&a), tb = tensor(&b), fused = tensor(nullptr), composed = tensor(nullptr);
    backend.make_add_relu(shape, dtype)->forward(ta, tb, fused);
    backend.make_add(shape, dtype)->forward(ta, tb, composed);
    backend.make_relu(shape, dtype)->forward(composed, composed);
    EXPECT_EQ(std::memcmp(fused.data, composed.data, fused.bytes()), 0) << to_string(dtype);
    int zeros = 0;
    const std::vector<float> values = decode(fused.data, static_cast<std::size_t>(shape.numel()), dtype);
    for (const float v : values) {
      EXPECT_GE(v, 0.0f);
      zeros += v == 0.0f ? 1 : 0;
    }
    EXPECT_GT(zeros, 0) << "no negative sums: the ReLU was not exercised";
  }
}

INSTANTIATE_TEST_SUITE_P(Shortcuts, BottleneckWiring,
                         ::testing::Values(Case{16, 4, 1, Shape(2, 16, 4, 4)},   // identity
                                           Case{8, 4, 2, Shape(2, 8, 6, 6)},     // projection, strided
                                           Case{8, 4, 1, Shape(2, 8, 5, 5)}),  // projection, channels only
                         [](const auto& param_info) {
                           return std::string(param_info.param.stride != 1 ? "strided_projection"
                                              : param_info.param.in_channels != param_info.param.width * 4 ? "channel_projection"
                                                                                               : "identity");
                         });

}  // namespace
}  // namespace dlbench::worker
