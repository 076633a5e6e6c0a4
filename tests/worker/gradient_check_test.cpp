// Finite-difference checks of every layer's backward pass, for inputs and parameters.
//
// The CPU backend computes in fp32, so the checks are built to be meaningful there:
// the probe loss is L = Σ y·r with a fixed random r (so dL/dy = r and every output matters),
// accumulated in double; central differences with ε = 1e-2 on O(1) values have a truncation
// error O(ε²) ≈ 1e-4 and a rounding error ≈ 1e-7·√n·|L|/ε ≲ 1e-3 for the few thousand
// outputs used here. Hence |numeric − analytic| ≤ 5e-3 + 2e-2·|analytic|. Inputs of kinked
// layers (ReLU, max pooling) are kept more than ε away from their kinks. Composite layers
// (the ResNet bottleneck) have kinks inside that no input choice avoids, so they are checked
// for wiring instead, against their parts chained by hand (bottleneck_test.cpp).
#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include <gtest/gtest.h>

#include "layers/bert_config.hpp"

#include "bilinear_taps.hpp"
#include "cpu/cpu_backend.hpp"
#include "layers/auxiliary_classifier.hpp"
#include "layers/batch_norm2d.hpp"
#include "layers/concat.hpp"
#include "layers/conv2d.hpp"
#include "layers/linear.hpp"
#include "layers/pool2d.hpp"
#include "layers/relu.hpp"
#include "layers/resize.hpp"
#include "layers/transformer_encoder_layer.hpp"
#include "layers/softmax_cross_entropy.hpp"
#include "trainer.hpp"

namespace dlbench::worker {
namespace {

constexpr double kEpsilon = 1e-2;
constexpr double kAbsoluteTolerance = 5e-3;
constexpr double kRelativeTolerance = 2e-2;
constexpr int kSamplesPerTensor = 12;

// One evaluation of the loss and its value (the backend keeps the loss until last_loss reads it).
float loss_value(SoftmaxCrossEntropy& loss, const Tensor& logits, const std::int32_t* labels, Backend& backend,
                 LossTerm term) {
  loss.forward_backward(logits, labels, backend, nullptr, term);
  return backend.last_loss();
}

class LayerProbe {
 public:
  // tokens_per_sequence: for the layers of a sequence model, which take it from the setup.
  LayerProbe(std::unique_ptr<Layer> layer, const Shape& input, std::uint64_t seed = 1,
             std::int64_t tokens_per_sequence = 0)
      : backend_(1), layer_(std::move(layer)), rng_(seed) {
    std::vector<Parameter*> params;
    layer_->collect_parameters(params);
    store_.bind(params, backend_);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (Parameter* p : store_.parameters()) {
      for (std::int64_t i = 0; i < p->value.numel(); ++i) p->value.as<float>()[i] = u(rng_);
    }
    x_ = activation(input, backend_.activation_layout(), DType::fp32);
    arena_.request(x_);
    SetupContext setup{backend_, arena_, true};
    setup.tokens_per_sequence = tokens_per_sequence;
    output_ = layer_->setup(x_, setup).shape;
    r_ = activation(output_, backend_.activation_layout(), DType::fp32);
    arena_.request(r_);
    arena_.commit(backend_);
    layer_->reset_state(backend_);
    x_host_.resize(static_cast<std::size_t>(x_.numel()));
    for (float& v : x_host_) v = u(rng_);
    for (std::int64_t i = 0; i < r_.numel(); ++i) r_.as<float>()[i] = u(rng_);
  }

  // Moves every input at least `gap` away from zero (ReLU's kink).
  void keep_inputs_away_from_zero(float gap) {
    for (float& v : x_host_) v = v >= 0 ? v + gap : v - gap;
  }
  // Makes inputs distinct by at least `gap`, so that a perturbation never changes an arg-max.
  void make_inputs_distinct(float gap) {
    std::vector<std::size_t> order(x_host_.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng_);
    for (std::size_t rank = 0; rank < order.size(); ++rank) x_host_[order[rank]] = gap * static_cast<float>(rank);
  }

  // Labels for layers with a loss term of their own, whose value `own_loss` reads after forward.
  void use_labels(std::vector<std::int32_t> labels, std::function<double()> own_loss) {
    labels_ = std::move(labels);
    ctx_.labels = labels_.data();
    own_loss_ = std::move(own_loss);
  }

  double loss() {
    std::copy(x_host_.begin(), x_host_.end(), x_.as<float>());  // in-place layers overwrite x
    ctx_.loss_terms = 0;
    const Tensor& y = layer_->forward(x_, ctx_);
    double total = own_loss_ ? own_loss_() : 0.0;
    for (std::int64_t i = 0; i < y.numel(); ++i) total += static_cast<double>(y.as<float>()[i]) * static_cast<double>(r_.as<float>()[i]);
    return total;
  }

  // Runs forward and backward; returns a copy of dx.
  std::vector<float> backward() {
    loss();
    const Tensor& dx = layer_->backward(r_, ctx_);
    return std::vector<float>(dx.as<float>(), dx.as<float>() + dx.numel());
  }

  // The central difference of the loss in `value`.
  double numeric_derivative(float& value) {
    const float saved = value;
    value = saved + static_cast<float>(kEpsilon);
    const double plus = loss();
    value = saved - static_cast<float>(kEpsilon);
    const double minus = loss();
    value = saved;
    return (plus - minus) / (2 * kEpsilon);
  }

  void check_input_gradient() {
    const std::vector<float> analytic = backward();
    ASSERT_EQ(analytic.size(), x_host_.size());
    for (const std::size_t i : sample(x_host_.size())) expect_close(numeric_derivative(x_host_[i]), analytic[i], "dx", i);
  }

  void check_parameter_gradients() {
    backward();
    std::vector<std::vector<float>> analytic;
    for (Parameter* p : store_.parameters()) analytic.emplace_back(p->grad.as<float>(), p->grad.as<float>() + p->grad.numel());
    ASSERT_FALSE(store_.parameters().empty());
    for (std::size_t k = 0; k < store_.parameters().size(); ++k) {
      Parameter& p = *store_.parameters()[k];
      const std::string what = "parameter " + std::to_string(k) + " d" + p.name + p.value.shape.to_string();
      for (const std::size_t i : sample(static_cast<std::size_t>(p.value.numel()))) {
        expect_close(numeric_derivative(p.value.as<float>()[i]), analytic[k][i], what, i);
      }
    }
  }

  Backend& backend() { return backend_; }
  const Shape& output() const { return output_; }

 private:
  std::vector<std::size_t> sample(std::size_t n) {
    std::vector<std::size_t> picks;
    std::uniform_int_distribution<std::size_t> pick(0, n - 1);
    for (int i = 0; i < kSamplesPerTensor && i < static_cast<int>(n); ++i) picks.push_back(n <= kSamplesPerTensor ? static_cast<std::size_t>(i) : pick(rng_));
    return picks;
  }
  static void expect_close(double numeric, double analytic, const std::string& what, std::size_t index) {
    EXPECT_LE(std::fabs(numeric - analytic), kAbsoluteTolerance + kRelativeTolerance * std::fabs(analytic))
        << what << "[" << index << "]: numeric " << numeric << ", analytic " << analytic;
  }

  CpuBackend backend_;
  std::unique_ptr<Layer> layer_;
  std::mt19937_64 rng_;
  Arena arena_;
  ParameterStore store_;
  StepContext ctx_{backend_, 7, 0, {}};
  Tensor x_, r_;
  Shape output_;
  std::vector<float> x_host_;
  std::vector<std::int32_t> labels_;
  std::function<double()> own_loss_;
};

TEST(GradientCheck, Conv2dStridedPaddedWithBias) {
  LayerProbe probe(std::make_unique<Conv2d>(3, 4, 3, 2, 1, true), Shape(2, 3, 7, 7));
  EXPECT_EQ(probe.output(), Shape(2, 4, 4, 4));
  probe.check_input_gradient();
  probe.check_parameter_gradients();
}

TEST(GradientCheck, Conv2dPointwiseWithoutBias) {
  LayerProbe probe(std::make_unique<Conv2d>(8, 16, 1), Shape(2, 8, 5, 5));
  probe.check_input_gradient();
  probe.check_parameter_gradients();
}

TEST(GradientCheck, Conv2dAsymmetricKernelsAndPadding) {  // InceptionV3's 1×7 and 7×1
  for (const auto& [kernel, padding] : {std::pair<Extent2, Extent2>{{1, 7}, {0, 3}}, {{7, 1}, {3, 0}}, {{1, 3}, {0, 1}}}) {
    LayerProbe probe(std::make_unique<Conv2d>(3, 4, ConvSpec{.kernel = kernel, .padding = padding}), Shape(2, 3, 9, 8));
    EXPECT_EQ(probe.output(), Shape(2, 4, 9, 8));
    probe.check_input_gradient();
    probe.check_parameter_gradients();
  }
}

TEST(GradientCheck, Conv2dDilated) {  // DeepLab's atrous convolution: rate 2, padding 2 keeps the size
  LayerProbe probe(std::make_unique<Conv2d>(3, 4, ConvSpec{.kernel = 3, .padding = 2, .dilation = 2, .bias = true}),
                   Shape(2, 3, 9, 9));
  EXPECT_EQ(probe.output(), Shape(2, 4, 9, 9));
  probe.check_input_gradient();
  probe.check_parameter_gradients();
  LayerProbe strided(std::make_unique<Conv2d>(3, 4, ConvSpec{.kernel = 3, .stride = 2, .dilation = 3}),
                     Shape(2, 3, 11, 11));
  EXPECT_EQ(strided.output(), Shape(2, 4, 3, 3));  // (11 - 3·2 - 1) / 2 + 1
  strided.check_input_gradient();
}

// Branches without kinks (convolutions, an average pool, a nested concatenation), so that finite
// differences see the split of dy and the sum of the branches' input gradients.
TEST(GradientCheck, ConcatOfBranches) {
  auto block = std::make_unique<Concat>();
  block->add_branch().add<Conv2d>(3, 2, 1);
  auto& two = block->add_branch();
  two.add<Conv2d>(3, 4, ConvSpec{.kernel = {1, 3}, .padding = {0, 1}});
  auto& nested = two.add<Concat>();
  nested.add_branch().add<Conv2d>(4, 3, ConvSpec{.kernel = {3, 1}, .padding = {1, 0}});
  nested.add_branch().add<Conv2d>(4, 1, 1);
  auto& pool = block->add_branch();
  pool.add<Pool2d>(PoolKind::average, 3, 1, 1);
  pool.add<Conv2d>(3, 5, 1, 1, 0, true);
  LayerProbe probe(std::move(block), Shape(2, 3, 6, 5));
  EXPECT_EQ(probe.output(), Shape(2, 2 + 3 + 1 + 5, 6, 5));
  probe.check_input_gradient();
  probe.check_parameter_gradients();
}

// The side head's loss term (weight · cross-entropy) is part of the probed loss: dx must be dy
// plus the head's input gradient, and the head's parameters must get that term's gradient.
TEST(GradientCheck, AuxiliaryClassifierAddsItsLossTerm) {
  auto head = std::make_unique<Sequential>();
  head->add<Pool2d>(PoolKind::average, 0, 1, 0, true);
  head->add<Flatten>();
  head->add<Linear>(3, 4);
  auto layer = std::make_unique<AuxiliaryClassifier>(std::move(head), 0.4f);
  LayerProbe probe(std::move(layer), Shape(2, 3, 4, 4));
  EXPECT_EQ(probe.output(), Shape(2, 3, 4, 4));  // passed through
  probe.use_labels({3, 1}, [&probe] { return static_cast<double>(probe.backend().last_loss()); });
  probe.check_input_gradient();
  probe.check_parameter_gradients();
  EXPECT_GT(probe.backend().last_loss(), 0.0f);
}

TEST(GradientCheck, BatchNorm2dTraining) {
  LayerProbe probe(std::make_unique<BatchNorm2d>(5), Shape(4, 5, 3, 3));
  probe.check_input_gradient();
  probe.check_parameter_gradients();
}

TEST(GradientCheck, ReLU) {
  LayerProbe probe(std::make_unique<ReLU>(), Shape(2, 3, 4, 4));
  probe.keep_inputs_away_from_zero(0.05f);
  probe.check_input_gradient();
}

TEST(GradientCheck, MaxPool) {
  LayerProbe probe(std::make_unique<Pool2d>(PoolKind::max, 3, 2, 1), Shape(2, 3, 8, 8));
  EXPECT_EQ(probe.output(), Shape(2, 3, 4, 4));
  probe.make_inputs_distinct(0.05f);
  probe.check_input_gradient();
}

TEST(GradientCheck, AvgPoolAndGlobalAvgPool) {
  LayerProbe avg(std::make_unique<Pool2d>(PoolKind::average, 2, 2), Shape(2, 3, 6, 6));
  avg.check_input_gradient();
  LayerProbe global(std::make_unique<Pool2d>(PoolKind::average, 0, 1, 0, true), Shape(2, 4, 5, 5));
  EXPECT_EQ(global.output(), Shape(2, 4, 1, 1));
  global.check_input_gradient();
}

TEST(GradientCheck, AdaptiveAvgPoolOverlappingWindows) {
  LayerProbe probe(std::make_unique<AdaptiveAvgPool2d>(3, 3), Shape(2, 3, 5, 5));
  probe.check_input_gradient();
  LayerProbe upsample(std::make_unique<AdaptiveAvgPool2d>(7, 7), Shape(1, 2, 2, 2));  // VGG at small images
  upsample.check_input_gradient();
}

TEST(GradientCheck, Linear) {
  LayerProbe probe(std::make_unique<Linear>(12, 7), Shape(3, 12));
  probe.check_input_gradient();
  probe.check_parameter_gradients();
}

TEST(GradientCheck, Dropout) {
  LayerProbe probe(std::make_unique<Dropout>(0.5f, 3), Shape(4, 64));
  probe.check_input_gradient();
}

TEST(GradientCheck, SoftmaxCrossEntropy) {
  CpuBackend backend(1);
  Arena arena;
  Tensor logits = activation(Shape(3, 5), Layout::plain, DType::fp32);
  arena.request(logits);
  SetupContext setup{backend, arena, true};
  SoftmaxCrossEntropy loss;
  loss.setup(logits, setup);
  arena.commit(backend);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (std::int64_t i = 0; i < logits.numel(); ++i) logits.as<float>()[i] = u(rng);
  const std::int32_t labels[] = {4, 0, 2};
  const float value = loss_value(loss, logits, labels, backend, LossTerm{});
  std::vector<float> analytic(loss.dlogits().as<float>(), loss.dlogits().as<float>() + loss.dlogits().numel());
  for (std::int64_t i = 0; i < logits.numel(); ++i) {
    const float saved = logits.as<float>()[i];
    logits.as<float>()[i] = saved + 1e-2f;
    const double plus = loss_value(loss, logits, labels, backend, LossTerm{});
    logits.as<float>()[i] = saved - 1e-2f;
    const double minus = loss_value(loss, logits, labels, backend, LossTerm{});
    logits.as<float>()[i] = saved;
    const double numeric = (plus - minus) / 2e-2;
    EXPECT_NEAR(numeric, analytic[static_cast<std::size_t>(i)], 1e-3) << i;
  }
  EXPECT_GT(value, 0.0f);
  // Uniform logits: the loss is log(K) whatever the labels.
  for (std::int64_t i = 0; i < logits.numel(); ++i) logits.as<float>()[i] = 0.5f;
  EXPECT_NEAR(loss_value(loss, logits, labels, backend, LossTerm{}), std::log(5.0), 1e-6);
  // A weighted term scales the gradient and adds to the step's loss (InceptionV3's two heads).
  const float first = loss_value(loss, logits, labels, backend, LossTerm{0.4f, false});
  EXPECT_NEAR(first, 0.4 * std::log(5.0), 1e-6);
  EXPECT_NEAR(loss.dlogits().as<float>()[0], 0.4 * (0.2 / 3.0), 1e-7);  // (softmax − 0) / N · 0.4, label 4
  EXPECT_NEAR(loss_value(loss, logits, labels, backend, LossTerm{1.0f, true}), 1.4 * std::log(5.0), 1e-6);
}

// A resize to a noted size, behind the note's layer: upsampling by a non-integral factor, a
// downsampling, a 1×1 map broadcast (DeepLab's image pooling) and a size it already has (a view).
std::unique_ptr<Sequential> resize_to(Extent2 size) {
  auto note = std::make_shared<SizeNote>();
  note->size = size;
  auto net = std::make_unique<Sequential>();
  net->add<BilinearResize>(note);
  return net;
}

TEST(GradientCheck, BilinearResize) {
  LayerProbe up(resize_to({7, 10}), Shape(2, 3, 3, 4));
  EXPECT_EQ(up.output(), Shape(2, 3, 7, 10));
  up.check_input_gradient();
  LayerProbe down(resize_to({3, 2}), Shape(1, 2, 7, 5));
  down.check_input_gradient();
  LayerProbe broadcast(resize_to({4, 6}), Shape(3, 2, 1, 1));
  broadcast.check_input_gradient();
  LayerProbe same(resize_to({5, 6}), Shape(1, 2, 5, 6));
  EXPECT_EQ(same.output(), Shape(1, 2, 5, 6));
  same.check_input_gradient();
}

// The CPU backend (oneDNN's resampling) against a direct evaluation of bilinear_taps, the index
// math the CUDA kernels run: both must be PyTorch's align_corners=False rule. Values checked by
// hand: 2 → 4 reads the source at -0.25 (clamped to 0), 0.25, 0.75 and 1.25 (clamped to 1).
TEST(BilinearResize, CpuBackendMatchesTheSharedIndexMath) {
  const BilinearTaps t0 = bilinear_taps(0, 2, 4), t1 = bilinear_taps(1, 2, 4), t3 = bilinear_taps(3, 2, 4);
  EXPECT_EQ(t0.first, 0);
  EXPECT_FLOAT_EQ(t0.weight, 0.0f);
  EXPECT_EQ(t1.first, 0);
  EXPECT_EQ(t1.second, 1);
  EXPECT_FLOAT_EQ(t1.weight, 0.25f);
  EXPECT_EQ(t3.first, 1);
  EXPECT_EQ(t3.second, 1);

  for (const auto& [in, out] : {std::pair{Shape(2, 3, 5, 7), Extent2{12, 9}}, std::pair{Shape(1, 4, 9, 6), Extent2{4, 13}},
                                std::pair{Shape(2, 2, 1, 1), Extent2{3, 5}}}) {
    CpuBackend backend(1);
    Arena arena;
    Tensor x = activation(in, backend.activation_layout(), DType::fp32);
    const ResizeConfig config{in, out, DType::fp32};
    Tensor y = activation(config.output_shape(), backend.activation_layout(), DType::fp32);
    arena.request(x);
    arena.request(y);
    arena.commit(backend);
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    std::vector<float> nchw(static_cast<std::size_t>(x.numel()));
    for (float& v : nchw) v = u(rng);
    const std::vector<float> stored = to_layout(nchw, in, x.layout);
    std::copy(stored.begin(), stored.end(), x.as<float>());
    backend.make_bilinear_resize(config)->forward(x, y);
    const std::vector<float> got = from_layout(std::vector<float>(y.as<float>(), y.as<float>() + y.numel()),
                                               y.shape, y.layout);
    const auto ih = static_cast<int>(in.h()), iw = static_cast<int>(in.w());
    std::size_t k = 0;
    for (std::int64_t plane = 0; plane < in.n() * in.c(); ++plane) {
      const float* p = nchw.data() + plane * ih * iw;
      for (int oy = 0; oy < out.h; ++oy) {
        for (int ox = 0; ox < out.w; ++ox, ++k) {
          const BilinearTaps ty = bilinear_taps(oy, ih, static_cast<int>(out.h));
          const BilinearTaps tx = bilinear_taps(ox, iw, static_cast<int>(out.w));
          const float top = (1 - tx.weight) * p[ty.first * iw + tx.first] + tx.weight * p[ty.first * iw + tx.second];
          const float bottom = (1 - tx.weight) * p[ty.second * iw + tx.first] + tx.weight * p[ty.second * iw + tx.second];
          EXPECT_NEAR(got[k], (1 - ty.weight) * top + ty.weight * bottom, 1e-5f) << in.to_string() << " pixel " << k;
        }
      }
    }
  }
}

// Per-pixel cross-entropy over (N, K, H, W) logits: the mean over labelled pixels, zero gradient
// where the label is kIgnoreLabel, finite differences elsewhere.
TEST(GradientCheck, PerPixelSoftmaxCrossEntropyWithIgnoredPixels) {
  CpuBackend backend(1);
  Arena arena;
  const Shape shape(2, 4, 3, 2);
  Tensor logits = activation(shape, backend.activation_layout(), DType::fp32);
  arena.request(logits);
  SetupContext setup{backend, arena, true};
  SoftmaxCrossEntropy loss;
  loss.setup(logits, setup);
  arena.commit(backend);
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (std::int64_t i = 0; i < logits.numel(); ++i) logits.as<float>()[i] = u(rng);
  // (N, H, W) order; 3 of the 12 pixels are ignored.
  const std::vector<std::int32_t> labels{0, 3, kIgnoreLabel, 1, 2, 2, kIgnoreLabel, 0, 1, 3, kIgnoreLabel, 2};
  const auto run = [&] { return static_cast<double>(loss_value(loss, logits, labels.data(), backend, LossTerm{})); };
  run();
  const std::vector<float> analytic(loss.dlogits().as<float>(), loss.dlogits().as<float>() + loss.dlogits().numel());
  for (std::int64_t i = 0; i < logits.numel(); ++i) {
    float& v = logits.as<float>()[i];
    const float saved = v;
    v = saved + 1e-2f;
    const double plus = run();
    v = saved - 1e-2f;
    const double minus = run();
    v = saved;
    EXPECT_NEAR((plus - minus) / 2e-2, analytic[static_cast<std::size_t>(i)], 1e-3) << i;
  }
  // NHWC on the CPU: pixel p's classes are at [p·K, (p+1)·K); ignored pixels get exactly zero.
  for (const std::size_t pixel : {2u, 6u, 10u}) {
    for (std::size_t j = 0; j < 4; ++j) EXPECT_EQ(analytic[pixel * 4 + j], 0.0f) << pixel;
  }
  // Uniform logits: log(K), averaged over the 9 labelled pixels only (each gradient is over 9).
  for (std::int64_t i = 0; i < logits.numel(); ++i) logits.as<float>()[i] = 0.25f;
  EXPECT_NEAR(run(), std::log(4.0), 1e-6);
  EXPECT_NEAR(loss.dlogits().as<float>()[0], (0.25 - 1.0) / 9.0, 1e-7);
  // Every pixel ignored: a zero loss and gradient, not NaN.
  const std::vector<std::int32_t> none(12, kIgnoreLabel);
  EXPECT_EQ(loss_value(loss, logits, none.data(), backend, LossTerm{}), 0.0f);
  EXPECT_EQ(loss.dlogits().as<float>()[5], 0.0f);
}

}  // namespace
}  // namespace dlbench::worker

namespace dlbench::worker {
namespace {

// Every op of the encoder layer is smooth (GELU, softmax, LayerNorm; dropout's mask is fixed
// within a step), so the whole layer is checked at once: attention, both residuals, both norms.
// 2 sequences of 5 tokens, hidden 8 in 2 heads, feed-forward 12; weights U(-1, 1) as every probe's.
TEST(GradientCheck, TransformerEncoderLayer) {
  BertConfig config;
  config.hidden = 8;
  config.heads = 2;
  config.intermediate = 12;
  const auto make = [&] { return std::make_unique<TransformerEncoderLayer>(config, 1); };
  LayerProbe(make(), Shape(10, 8), 3, 5).check_input_gradient();
  LayerProbe(make(), Shape(10, 8), 4, 5).check_parameter_gradients();
}

// (N, K) logits with masked-LM slots that predict nothing (kNoPrediction, NVIDIA's padding): the
// mean over the other rows, as torch.nn.CrossEntropyLoss(ignore_index=-1); zero gradient there,
// finite differences elsewhere. 255 is a class like any other here (a vocabulary holds it).
TEST(GradientCheck, SoftmaxCrossEntropyLeavesOutRowsLabelledBelowZero) {
  CpuBackend backend(1);
  Arena arena;
  const std::int64_t classes = 300;
  Tensor logits = activation(Shape(5, classes), Layout::plain, DType::fp32);
  arena.request(logits);
  SetupContext setup{backend, arena, true};
  SoftmaxCrossEntropy loss;
  loss.setup(logits, setup);
  arena.commit(backend);
  std::mt19937 rng(12);
  std::uniform_real_distribution<float> u(-2.0f, 2.0f);
  for (std::int64_t i = 0; i < logits.numel(); ++i) logits.as<float>()[i] = u(rng);
  const std::vector<std::int32_t> labels{7, kNoPrediction, 255, kNoPrediction, 0};
  const auto run = [&] { return static_cast<double>(loss_value(loss, logits, labels.data(), backend, LossTerm{})); };
  // The loss by hand: the mean of -log softmax over rows 0, 2 and 4.
  double expected = 0.0;
  for (const std::int64_t row : {0, 2, 4}) {
    const float* z = logits.as<float>() + row * classes;
    double sum = 0.0;
    for (std::int64_t j = 0; j < classes; ++j) sum += std::exp(static_cast<double>(z[j]));
    expected += std::log(sum) - static_cast<double>(z[labels[static_cast<std::size_t>(row)]]);
  }
  EXPECT_NEAR(run(), expected / 3.0, 1e-6);
  const std::vector<float> analytic(loss.dlogits().as<float>(), loss.dlogits().as<float>() + loss.dlogits().numel());
  for (const std::int64_t row : {1, 3}) {
    for (std::int64_t j = 0; j < classes; ++j) ASSERT_EQ(analytic[static_cast<std::size_t>(row * classes + j)], 0.0f) << row;
  }
  for (const std::int64_t i : {std::int64_t{7}, 2 * classes + 255, 2 * classes + 1, 4 * classes, 4 * classes + 299}) {
    float& v = logits.as<float>()[i];
    const float saved = v;
    v = saved + 1e-2f;
    const double plus = run();
    v = saved - 1e-2f;
    const double minus = run();
    v = saved;
    EXPECT_NEAR((plus - minus) / 2e-2, analytic[static_cast<std::size_t>(i)], 1e-4) << i;
  }
  const std::vector<std::int32_t> none(5, kNoPrediction);
  EXPECT_EQ(loss_value(loss, logits, none.data(), backend, LossTerm{}), 0.0f);
}

}  // namespace
}  // namespace dlbench::worker
