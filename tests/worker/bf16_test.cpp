// bf16 on the CPU backend against its own fp32: every layer kind computes the same function
// within bf16's rounding, and visibly in bf16 (not fp32 in disguise); parameters, their
// gradients and the optimizer stay fp32; whole models train like fp32.
//
// Tolerances: bf16 keeps 8 significant bits (unit roundoff u = 2^-9 ≈ 2e-3). Rounding the
// inputs and outputs of one layer gives a normwise relative error of about u (~2e-3); sums
// are accumulated in fp32, so their length adds little. A layer passes when its error is
// below 1.5e-2 and above 2e-4: the upper bound catches wrong arithmetic, the lower one an op
// that silently ran in fp32. Layers that only select or scale by powers of two (ReLU, max
// pooling, dropout at p = 0.5) get inputs exact in bf16 and must agree exactly. A composite
// block amplifies rounding through its batch norms' backward (a difference of nearly equal
// terms): PyTorch 1.13's bf16 autocast, on torchvision's Bottleneck with the same kind of
// draws, is 4.8% off its fp32 in dx and up to 5.6% in parameter gradients; the block here is
// held to 20%. Skips, naming the ISA, where oneDNN finds no AVX512_BF16.
#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "cpu/cpu_backend.hpp"
#include "layers/batch_norm2d.hpp"
#include "layers/bottleneck.hpp"
#include "layers/conv2d.hpp"
#include "layers/linear.hpp"
#include "layers/pool2d.hpp"
#include "layers/relu.hpp"
#include "models/model.hpp"
#include "models/small_conv_net.hpp"
#include "self_test.hpp"
#include "trainer.hpp"

namespace dlbench::worker {
namespace {

constexpr double kLayerTolerance = 1.5e-2;
constexpr double kBlockTolerance = 0.2;
constexpr double kVisiblyBf16 = 2e-4;

enum class Kind {
  rounding,  // computes: within kLayerTolerance, above kVisiblyBf16
  exact,     // selects or scales by 2^k: exact on inputs that bf16 holds exactly
  block,     // several layers: within kBlockTolerance
};

#define SKIP_WITHOUT_BF16(backend)                                       \
  do {                                                                   \
    if (const auto why = (backend).cannot_compute(DType::bf16)) {        \
      GTEST_SKIP() << *why;                                              \
    }                                                                    \
  } while (false)

double relative_error(const std::vector<float>& a, const std::vector<float>& b) { return normwise_relative_error(a, b); }

void expect_bf16_close_to_fp32(const std::function<std::unique_ptr<Layer>()>& make, const Shape& input,
                               const std::string& what, Kind kind = Kind::rounding,
                               LinearWeights linear_weights = LinearWeights::automatic) {
  CpuBackend backend(2);
  SKIP_WITHOUT_BF16(backend);
  backend.set_linear_weights(linear_weights);
  auto full_layer = make();
  auto half_layer = make();
  const bool exact = kind == Kind::exact;
  const LayerOutcome full = run_layer_once(backend, *full_layer, input, DType::fp32, 11, exact);
  const LayerOutcome half = run_layer_once(backend, *half_layer, input, DType::bf16, 11, exact);
  EXPECT_EQ(half.y_dtype, DType::bf16) << what;
  EXPECT_EQ(half.dx_dtype, DType::bf16) << what;
  const auto check = [&](const std::vector<float>& h, const std::vector<float>& f, const std::string& name) {
    const double error = relative_error(h, f);
    if (kind == Kind::exact) {
      EXPECT_EQ(error, 0.0) << what << " " << name;
      return;
    }
    EXPECT_LT(error, kind == Kind::block ? kBlockTolerance : kLayerTolerance) << what << " " << name;
    EXPECT_GT(error, kVisiblyBf16) << what << " " << name << ": computed in fp32?";
  };
  check(half.y, full.y, "y");
  check(half.dx, full.dx, "dx");
  ASSERT_EQ(half.grads.size(), full.grads.size());
  for (std::size_t k = 0; k < half.grads.size(); ++k) {
    EXPECT_EQ(half.grad_dtypes[k], DType::fp32) << what << ": parameter gradients stay fp32";
    check(half.grads[k], full.grads[k], "parameter gradient " + std::to_string(k));
  }
}

TEST(Bf16, Conv2dWithAndWithoutBias) {
  expect_bf16_close_to_fp32([] { return std::make_unique<Conv2d>(16, 32, 3, 1, 1, true); }, Shape(2, 16, 9, 9),
                            "conv 3x3 with bias");
  expect_bf16_close_to_fp32([] { return std::make_unique<Conv2d>(32, 16, 1, 2, 0); }, Shape(2, 32, 8, 8),
                            "conv 1x1 stride 2");
}

TEST(Bf16, BatchNormKeepsFp32Statistics) {
  expect_bf16_close_to_fp32([] { return std::make_unique<BatchNorm2d>(24); }, Shape(4, 24, 6, 6), "batch norm");
}

TEST(Bf16, ReluPoolingAndAdaptivePooling) {
  expect_bf16_close_to_fp32([] { return std::make_unique<ReLU>(); }, Shape(2, 8, 4, 4), "relu", Kind::exact);
  expect_bf16_close_to_fp32([] { return std::make_unique<Pool2d>(PoolKind::max, 3, 2, 1); }, Shape(1, 8, 5, 5),
                            "max pool", Kind::exact);
  expect_bf16_close_to_fp32([] { return std::make_unique<Pool2d>(PoolKind::average, 2, 2); }, Shape(2, 16, 8, 8),
                            "average pool");
  expect_bf16_close_to_fp32([] { return std::make_unique<AdaptiveAvgPool2d>(3, 3); }, Shape(2, 16, 7, 7),
                            "adaptive average pool");
}

TEST(Bf16, LinearAndDropout) {
  // Both ways of handing bf16 weights to the products (linear_weights.hpp), each against fp32 on
  // the same route; and the automatic choice at a few rows (8 x 3 <= 64: plain) and at many.
  for (const auto route : {LinearWeights::blocked, LinearWeights::plain}) {
    const std::string name(choice_name(kLinearWeights, route));
    expect_bf16_close_to_fp32([] { return std::make_unique<Linear>(64, 10); }, Shape(8, 64), "linear " + name,
                              Kind::rounding, route);
    expect_bf16_close_to_fp32([] { return std::make_unique<Linear>(16, 40); }, Shape(64, 16), "wide linear " + name,
                              Kind::rounding, route);
  }
  expect_bf16_close_to_fp32([] { return std::make_unique<Linear>(64, 10); }, Shape(8, 64), "linear");
  expect_bf16_close_to_fp32([] { return std::make_unique<Linear>(16, 40); }, Shape(64, 16), "wide linear");
  expect_bf16_close_to_fp32([] { return std::make_unique<Dropout>(0.5f, 3); }, Shape(4, 64), "dropout", Kind::exact);
}

// The two routes compute the same products from the same weights: in fp32 the plain weights as
// they are against their blocked copies (only the sums' order may differ), in bf16 the same
// rounded weights (the outputs' rounding may fall either side). Each parameter gradient too.
void expect_routes_agree(DType dtype, double bound) {
  CpuBackend blocked(2), plain(2);
  blocked.set_linear_weights(LinearWeights::blocked);
  plain.set_linear_weights(LinearWeights::plain);
  Linear a(96, 24), b(96, 24);
  const LayerOutcome x = run_layer_once(blocked, a, Shape(4, 96), dtype, 5, false);
  const LayerOutcome y = run_layer_once(plain, b, Shape(4, 96), dtype, 5, false);
  const std::string what(to_string(dtype));
  EXPECT_LT(relative_error(y.y, x.y), bound) << what << " y";
  EXPECT_LT(relative_error(y.dx, x.dx), bound) << what << " dx";
  ASSERT_EQ(y.grads.size(), x.grads.size());
  for (std::size_t k = 0; k < x.grads.size(); ++k) {
    EXPECT_LT(relative_error(y.grads[k], x.grads[k]), bound) << what << " parameter gradient " << k;
  }
}

TEST(LinearWeights, PlainAndBlockedWeightsGiveTheSameProductsInFp32) { expect_routes_agree(DType::fp32, 1e-6); }

TEST(LinearWeights, PlainAndBlockedWeightsGiveTheSameProductsInBf16) {
  CpuBackend backend(2);
  SKIP_WITHOUT_BF16(backend);
  expect_routes_agree(DType::bf16, 4e-3);
}

// The automatic choice with AVX-512 kernels, at the shapes it was timed on: few rows for the
// input features take the plain weights (bf16: rows x 3 <= features; fp32: rows x 16 <= features,
// up to 256 rows).
TEST(LinearWeights, FewRowsForTheirFeaturesTakeThePlainWeights) {
  const auto automatic = [](std::int64_t rows, std::int64_t in, DType dtype) {
    return plain_weights(rows, in, dtype, LinearWeights::automatic, true);
  };
  EXPECT_TRUE(automatic(8, 9216, DType::bf16));     // AlexNet's classifier at batch 8
  EXPECT_TRUE(automatic(1024, 4096, DType::bf16));
  EXPECT_TRUE(automatic(160, 768, DType::bf16));    // BERT's decoder on 8 x 20 masked tokens
  EXPECT_FALSE(automatic(1024, 768, DType::bf16));  // BERT's encoder, 8 x 128 tokens
  EXPECT_FALSE(automatic(512, 768, DType::bf16));
  EXPECT_TRUE(automatic(8, 9216, DType::fp32));
  EXPECT_TRUE(automatic(256, 4096, DType::fp32));
  EXPECT_FALSE(automatic(512, 9216, DType::fp32));
  EXPECT_FALSE(automatic(160, 768, DType::fp32));
  EXPECT_FALSE(automatic(1024, 768, DType::fp32));
  for (const DType dtype : {DType::fp32, DType::bf16}) {
    for (const bool avx512 : {true, false}) {
      EXPECT_TRUE(plain_weights(4096, 768, dtype, LinearWeights::plain, avx512));
      EXPECT_FALSE(plain_weights(8, 9216, dtype, LinearWeights::blocked, avx512));
    }
  }
  EXPECT_EQ(linear_weights_choice("V", nullptr), LinearWeights::automatic);
  EXPECT_EQ(linear_weights_choice("V", "auto"), LinearWeights::automatic);
  EXPECT_EQ(linear_weights_choice("V", "plain"), LinearWeights::plain);
  try {
    (void)linear_weights_choice("DLBENCH_CPU_LINEAR_WEIGHTS", "fast");
    ADD_FAILURE() << "\"fast\" was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "DLBENCH_CPU_LINEAR_WEIGHTS: \"fast\" is not one of auto, blocked, plain");
  }
}

// With AVX2 kernels (an AVX2-only CPU, or DNNL_MAX_CPU_ISA=AVX2) fp32's plain weights won or
// tied at every shape timed, so fp32 takes them at every shape, BERT's encoder included; bf16
// (which needs AVX-512) keeps its rule.
TEST(LinearWeights, Avx2KernelsTakeThePlainWeightsInFp32AtEveryShape) {
  for (const auto& [rows, in] : {std::pair<std::int64_t, std::int64_t>{8, 9216}, {512, 9216}, {1024, 4096},
                                 {160, 768}, {1024, 768}, {1024, 3072}}) {
    EXPECT_TRUE(plain_weights(rows, in, DType::fp32, LinearWeights::automatic, false)) << rows << " x " << in;
  }
  EXPECT_FALSE(plain_weights(1024, 768, DType::fp32, LinearWeights::automatic, true));
  EXPECT_FALSE(plain_weights(1024, 768, DType::bf16, LinearWeights::automatic, false));
  EXPECT_TRUE(plain_weights(8, 9216, DType::bf16, LinearWeights::automatic, false));
}

// The backend's kernel width is oneDNN's effective ISA, the one the result's backendOptions.isa names.
TEST(LinearWeights, TheBackendsKernelWidthIsTheIsaItReports) {
  CpuBackend backend(1);
  const std::string isa = backend.options().at("isa");
  EXPECT_EQ(backend.avx512_kernels(), isa.rfind("avx512_core", 0) == 0) << isa;
}

TEST(Bf16, BottleneckWithProjection) {
  expect_bf16_close_to_fp32([] { return std::make_unique<Bottleneck>(32, 16, 2); }, Shape(8, 32, 16, 16),
                            "bottleneck", Kind::block);
}

// The loss is computed from bf16 logits in wide arithmetic; its gradient is rounded to bf16
// after the loss scale is applied (so a scale of 2^k changes nothing but the exponent).
TEST(Bf16, CrossEntropyFromBf16Logits) {
  CpuBackend backend(1);
  const std::int64_t n = 4, k = 10;
  std::vector<float> z(static_cast<std::size_t>(n * k));
  std::mt19937_64 rng(5);
  std::uniform_real_distribution<float> u(-3.0f, 3.0f);
  for (float& v : z) v = bf16::from_float(u(rng)).to_float();  // exactly representable in both
  const std::vector<std::int32_t> labels{1, 4, 9, 0};
  auto run = [&](DType dtype, float scale) {
    auto logits_bytes = encode(z.data(), z.size(), dtype);
    std::vector<std::byte> grad_bytes(z.size() * dtype_size(dtype));
    Tensor logits, dlogits;
    logits.shape = dlogits.shape = Shape(n, k);
    logits.dtype = dlogits.dtype = dtype;
    logits.data = logits_bytes.data();
    dlogits.data = grad_bytes.data();
    backend.softmax_cross_entropy(logits, labels.data(), dlogits, &scale, LossTerm{});
    const float loss = backend.last_loss();
    return std::make_pair(loss, decode(grad_bytes.data(), z.size(), dtype));
  };
  const auto [full_loss, full_grad] = run(DType::fp32, 1.0f);
  const auto [half_loss, half_grad] = run(DType::bf16, 1.0f);
  EXPECT_EQ(half_loss, full_loss) << "same logits, same wide arithmetic";
  for (std::size_t i = 0; i < z.size(); ++i) EXPECT_EQ(half_grad[i], bf16::from_float(full_grad[i]).to_float()) << i;
  const auto [scaled_loss, scaled_grad] = run(DType::bf16, 1024.0f);
  EXPECT_EQ(scaled_loss, half_loss);
  for (std::size_t i = 0; i < z.size(); ++i) EXPECT_EQ(scaled_grad[i], 1024.0f * half_grad[i]) << i;
}

struct Trajectory {
  std::vector<float> losses;
  std::vector<float> weights;
  std::size_t activation_bytes = 0;
};

Trajectory train(std::unique_ptr<Sequential> net, const Shape& input, std::int64_t classes, float learning_rate,
                 DType dtype, int steps) {
  CpuBackend backend(2);
  Trainer trainer(backend, std::move(net), input, classes, {learning_rate, 0.9f, 1e-4f}, 3, 0, MemoryReuse::lifetime,
                  dtype);
  Trajectory t;
  for (int i = 0; i < steps; ++i) t.losses.push_back(trainer.step_and_loss());
  const ParameterStore& store = trainer.parameters();
  t.weights.assign(store.values(), store.values() + store.elements());
  t.activation_bytes = trainer.arena().unshared_bytes();
  return t;
}

// A well-conditioned network trains in bf16 like in fp32: the loss trajectory within 2%, and
// the fp32 master weights move the same way within 5%.
TEST(Bf16, SmallConvNetTrainsLikeFp32) {
  CpuBackend probe(1);
  SKIP_WITHOUT_BF16(probe);
  const Shape input(16, 3, 16, 16);
  const Trajectory start = train(small_conv_net(), input, 10, 0.01f, DType::fp32, 0);
  const Trajectory full = train(small_conv_net(), input, 10, 0.01f, DType::fp32, 8);
  const Trajectory half = train(small_conv_net(), input, 10, 0.01f, DType::bf16, 8);
  for (std::size_t i = 0; i < full.losses.size(); ++i) {
    EXPECT_NEAR(half.losses[i], full.losses[i], 0.02 * std::fabs(static_cast<double>(full.losses[i]))) << "step " << i;
  }
  EXPECT_NE(half.losses, full.losses) << "nothing computed in bf16";
  EXPECT_LT(half.losses.back(), 0.8f * half.losses.front()) << "it learns";
  std::vector<float> moved_full(full.weights.size()), moved_half(half.weights.size());
  for (std::size_t i = 0; i < full.weights.size(); ++i) {
    moved_full[i] = full.weights[i] - start.weights[i];
    moved_half[i] = half.weights[i] - start.weights[i];
  }
  EXPECT_LT(relative_error(moved_half, moved_full), 0.05);
}

// The deep models learn in bf16 (finite, falling loss, as the fp32 training tests ask) with
// activations in half the memory. Their bf16 losses are not compared with fp32's step by step:
// randomly initialised deep networks at tiny images and batches are chaotic under any rounding
// (PyTorch 1.13's bf16 autocast is 12% off its fp32 loss for ResNet-50 at 32×32, batch 4).
void expect_learns_in_bf16(const std::string& model, const Shape& input) {
  CpuBackend probe(1);
  SKIP_WITHOUT_BF16(probe);
  const Trajectory half = train(build_model(model, 10), input, 10, 0.005f, DType::bf16, 4);
  for (const float l : half.losses) EXPECT_TRUE(std::isfinite(l)) << model;
  EXPECT_NEAR(half.losses.front(), std::log(10.0f), 1.5f) << model;
  EXPECT_LT(half.losses.back(), half.losses.front()) << model;
  const Trajectory full = train(build_model(model, 10), input, 10, 0.005f, DType::fp32, 0);
  // Half, but for what stays fp32 (labels, batch-norm statistics, dropout masks).
  EXPECT_LT(static_cast<double>(half.activation_bytes), 0.55 * static_cast<double>(full.activation_bytes)) << model;
  EXPECT_GT(static_cast<double>(half.activation_bytes), 0.5 * static_cast<double>(full.activation_bytes)) << model;
}

TEST(Bf16, ResNet50LearnsInBf16) { expect_learns_in_bf16("resnet50", Shape(4, 3, 64, 64)); }

TEST(Bf16, AlexNetLearnsInBf16) { expect_learns_in_bf16("alexnet", Shape(4, 3, 63, 63)); }

// The trainer refuses a dtype the backend cannot compute, saying why.
TEST(Bf16, Fp16IsRefusedOnTheCpu) {
  CpuBackend backend(1);
  ASSERT_TRUE(backend.cannot_compute(DType::fp16).has_value());
  EXPECT_THROW(Trainer(backend, build_model("alexnet", 10), Shape(1, 3, 63, 63), 10, {}, 1, 0, MemoryReuse::lifetime,
                       DType::fp16),
               std::invalid_argument);
}

}  // namespace
}  // namespace dlbench::worker
