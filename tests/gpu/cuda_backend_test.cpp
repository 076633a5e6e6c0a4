// The CUDA backend against the CPU backend (oneDNN), op by op on random inputs, a whole
// ResNet-50 over ten training steps, and a small BERT over ten AdamW steps. Skips, saying why, where there is no GPU.
//
// Error measure: max |gpu - cpu| / max |cpu| over the output (norm-wise relative error).
// Bounds: fp32 1e-5 for single ops (both sides round each product once; the sums differ in
// order only); tf32 1e-3 (10-bit mantissa inputs, fp32 accumulation); the whole model 2e-3
// on the loss after ten SGD steps in fp32 (ten steps of differently ordered fp32 sums through
// 53 batch norms, each step amplified by the learning rate).
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cpu/cpu_backend.hpp"
#include "cuda/column_reduction.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/kernels.hpp"
#include "cuda/swap_axes_plan.hpp"
#include "parameters.hpp"
#include "precision.hpp"
#include "layers/bottleneck.hpp"
#include "models/bert.hpp"
#include "models/model.hpp"
#include "models/small_conv_net.hpp"
#include "self_test.hpp"
#include "swapped_axes.hpp"
#include "trainer.hpp"
#include "../worker/same_state_steps.hpp"
#include "../worker/scoped_env.hpp"

namespace dlbench::worker {
namespace {

std::vector<float> random_values(std::int64_t n, std::uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = normal(rng);
  return v;
}

// Infinite where either side holds a NaN or an infinity (std::max would pass a NaN by).
double relative_error(const std::vector<float>& actual, const std::vector<float>& expected) {
  double diff = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    if (!std::isfinite(actual[i]) || !std::isfinite(expected[i])) return std::numeric_limits<double>::infinity();
    diff = std::max(diff, std::fabs(static_cast<double>(actual[i]) - static_cast<double>(expected[i])));
    scale = std::max(scale, std::fabs(static_cast<double>(expected[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

// One logical tensor on both backends: 4-D activations NHWC on the CPU and in the GPU backend's own
// order on the GPU (NCHW in fp32, NHWC otherwise).
class Pair {
 public:
  Pair(CpuBackend& cpu, CudaBackend& gpu, const Shape& shape, bool activation, const std::vector<float>& nchw = {})
      : shape_(shape), activation_(activation && shape.rank == 4), gpu_backend_(gpu), cpu_backend_(cpu) {
    const auto bytes = static_cast<std::size_t>(shape.numel()) * sizeof(float);
    cpu_memory_ = cpu.allocate(bytes);
    gpu_memory_ = gpu.allocate(bytes);
    cpu_ = {static_cast<float*>(cpu_memory_.get()), shape, activation_ ? Layout::nhwc : Layout::plain};
    // Activations in the GPU backend's own order (tf32 is channels-last, fp32 NCHW).
    gpu_ = {static_cast<float*>(gpu_memory_.get()), shape, activation_ ? gpu.activation_layout() : Layout::plain};
    if (!nchw.empty()) set(nchw);
  }
  void set(const std::vector<float>& nchw) {
    const std::vector<float> host = activation_ ? nchw_to_nhwc(nchw, shape_) : nchw;
    cpu_backend_.copy_from_host(cpu_.as<float>(), host.data(), cpu_.bytes());
    set_gpu(nchw);
  }
  void set_gpu(const std::vector<float>& nchw) {
    const std::vector<float> device = gpu_.layout == Layout::nhwc ? nchw_to_nhwc(nchw, shape_) : nchw;
    gpu_backend_.copy_from_host(gpu_.as<float>(), device.data(), gpu_.bytes());
  }
  std::vector<float> cpu_values() {
    std::vector<float> v(static_cast<std::size_t>(shape_.numel()));
    cpu_backend_.copy_to_host(v.data(), cpu_.as<float>(), cpu_.bytes());
    return activation_ ? nhwc_to_nchw(v, shape_) : v;
  }
  std::vector<float> gpu_values() {
    std::vector<float> v(static_cast<std::size_t>(shape_.numel()));
    gpu_backend_.copy_to_host(v.data(), gpu_.as<float>(), gpu_.bytes());
    return gpu_.layout == Layout::nhwc ? nhwc_to_nchw(v, shape_) : v;
  }
  double error() { return relative_error(gpu_values(), cpu_values()); }
  Tensor& cpu() { return cpu_; }
  Tensor& gpu() { return gpu_; }

 private:
  Shape shape_;
  bool activation_;
  CudaBackend& gpu_backend_;
  CpuBackend& cpu_backend_;
  std::shared_ptr<void> cpu_memory_, gpu_memory_;
  Tensor cpu_, gpu_;
};

class CudaBackendTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    if (!cuda_device_usable(&why)) GTEST_SKIP() << why << ": the CUDA backend tests need a GPU";
    gpu_ = std::make_unique<CudaBackend>(0, CudaMath::fp32);
    cpu_ = std::make_unique<CpuBackend>(0);
  }
  Pair pair(const Shape& shape, bool activation, std::uint64_t seed) {
    return Pair(*cpu_, *gpu_, shape, activation, random_values(shape.numel(), seed));
  }
  Pair zeros(const Shape& shape, bool activation) { return Pair(*cpu_, *gpu_, shape, activation); }
  // Layer norm forward and backward (dx, dgamma, dbeta) against the CPU's, in fp32.
  void expect_layer_norm_matches_the_cpu(std::int64_t rows, std::int64_t features, std::uint64_t seed) {
    SCOPED_TRACE(::testing::Message() << "layer norm of " << rows << " rows, " << features << " features");
    const Shape matrix(rows, features);
    auto x = pair(matrix, false, seed), dy = pair(matrix, false, seed + 1);
    auto y = zeros(matrix, false), dx = zeros(matrix, false);
    auto gamma = pair(Shape(features), false, seed + 2), beta = pair(Shape(features), false, seed + 3);
    auto mean = zeros(Shape(rows), false), variance = zeros(Shape(rows), false);
    auto dgamma = zeros(Shape(features), false), dbeta = zeros(Shape(features), false);
    const LayerNormConfig norm{rows, features, 1e-12f};
    auto cpu_norm = cpu_->make_layer_norm(norm);
    auto gpu_norm = gpu_->make_layer_norm(norm);
    cpu_norm->forward(x.cpu(), gamma.cpu(), beta.cpu(), y.cpu(), mean.cpu(), variance.cpu());
    gpu_norm->forward(x.gpu(), gamma.gpu(), beta.gpu(), y.gpu(), mean.gpu(), variance.gpu());
    cpu_norm->backward(x.cpu(), dy.cpu(), gamma.cpu(), beta.cpu(), mean.cpu(), variance.cpu(), dx.cpu(), dgamma.cpu(),
                       dbeta.cpu());
    gpu_norm->backward(x.gpu(), dy.gpu(), gamma.gpu(), beta.gpu(), mean.gpu(), variance.gpu(), dx.gpu(), dgamma.gpu(),
                       dbeta.gpu());
    gpu_->synchronize();
    EXPECT_LT(y.error(), 1e-5) << "y";
    EXPECT_LT(variance.error(), 1e-5) << "variance";
    EXPECT_LT(dx.error(), 1e-5) << "dx";
    EXPECT_LT(dgamma.error(), 1e-5) << "dgamma";
    EXPECT_LT(dbeta.error(), 1e-5) << "dbeta";
  }
  std::unique_ptr<CudaBackend> gpu_;
  std::unique_ptr<CpuBackend> cpu_;
};

TEST_F(CudaBackendTest, ConvolutionMatchesTheCpuInFp32) {
  for (const Conv2dConfig& c : {Conv2dConfig{Shape(2, 16, 14, 14), 32, 3, 1, 1, false},
                                Conv2dConfig{Shape(2, 64, 14, 14), 128, 1, 2, 0, false},
                                Conv2dConfig{Shape(2, 3, 32, 32), 16, 7, 2, 3, true},
                                // InceptionV3's asymmetric kernels, DeepLab's atrous convolution
                                Conv2dConfig{Shape(2, 16, 17, 17), 24, {1, 7}, 1, {0, 3}, false},
                                Conv2dConfig{Shape(2, 16, 17, 17), 24, {7, 1}, 1, {3, 0}, false},
                                Conv2dConfig{Shape(2, 16, 15, 15), 16, 3, 1, 2, false, DType::fp32, 2}}) {
    auto x = pair(c.input, true, 1), w = pair(c.weight(), false, 2), b = pair(Shape(c.out_channels), false, 3);
    auto y = zeros(c.output(), true), dy = pair(c.output(), true, 4), dx = zeros(c.input, true);
    auto dw = zeros(c.weight(), false), db = zeros(Shape(c.out_channels), false);
    auto cpu_op = cpu_->make_conv2d(c);
    auto gpu_op = gpu_->make_conv2d(c);
    cpu_op->forward(x.cpu(), w.cpu(), c.bias ? &b.cpu() : nullptr, y.cpu());
    gpu_op->forward(x.gpu(), w.gpu(), c.bias ? &b.gpu() : nullptr, y.gpu());
    cpu_op->backward_data(dy.cpu(), w.cpu(), dx.cpu());
    gpu_op->backward_data(dy.gpu(), w.gpu(), dx.gpu());
    cpu_op->backward_weights(x.cpu(), dy.cpu(), dw.cpu(), c.bias ? &db.cpu() : nullptr);
    gpu_op->backward_weights(x.gpu(), dy.gpu(), dw.gpu(), c.bias ? &db.gpu() : nullptr);
    gpu_->synchronize();
    cpu_->synchronize();
    const std::string what = "kernel " + std::to_string(c.kernel.h) + "x" + std::to_string(c.kernel.w) + " stride " +
                             std::to_string(c.stride) + " dilation " + std::to_string(c.dilation);
    EXPECT_LT(y.error(), 1e-5) << what;
    EXPECT_LT(dx.error(), 1e-5) << what;
    EXPECT_LT(dw.error(), 1e-5) << what;
    if (c.bias) {
      EXPECT_LT(db.error(), 1e-5) << what;
    }
  }
}

// A residual block's branch gradients meeting in a convolution (beta = 1): dx holds the other
// branch's gradient before the call and the sum after it (fp32; with DLBENCH_CUDA_CONV=graph,
// through the graph API).
TEST_F(CudaBackendTest, ConvolutionAccumulatesItsInputGradientIntoDx) {
  const Conv2dConfig c{Shape(2, 32, 14, 14), 64, 1, 2, 0, false};
  const std::vector<float> other = random_values(c.input.numel(), 24);  // the other branch's gradient
  auto w = pair(c.weight(), false, 22), dy = pair(c.output(), true, 23), dx = zeros(c.input, true);
  auto on_cpu = Pair(*cpu_, *gpu_, c.input, true, other);
  auto cpu_op = cpu_->make_conv2d(c);
  auto gpu_op = gpu_->make_conv2d(c);
  cpu_op->backward_data(dy.cpu(), w.cpu(), dx.cpu());
  cpu_->make_add(c.input, DType::fp32)->forward(dx.cpu(), on_cpu.cpu(), dx.cpu());
  for (int call = 0; call < 2; ++call) {  // the first call chooses the algorithm: it must not touch dx
    dx.set_gpu(other);
    gpu_op->backward_data_accumulate(dy.gpu(), w.gpu(), dx.gpu());
    gpu_->synchronize();
    EXPECT_LT(dx.error(), 1e-5) << "call " << call;
  }
}

TEST_F(CudaBackendTest, Tf32ConvolutionStaysWithinItsBound) {
  const Conv2dConfig c{Shape(4, 64, 28, 28), 64, 3, 1, 1, false};
  CudaBackend tf32(0, CudaMath::tf32);
  Pair x(*cpu_, tf32, c.input, true, random_values(c.input.numel(), 5));
  Pair w(*cpu_, tf32, c.weight(), false, random_values(c.weight().numel(), 6));
  Pair y(*cpu_, tf32, c.output(), true);
  cpu_->make_conv2d(c)->forward(x.cpu(), w.cpu(), nullptr, y.cpu());
  tf32.make_conv2d(c)->forward(x.gpu(), w.gpu(), nullptr, y.gpu());
  tf32.synchronize();
  const std::vector<float> got = y.gpu_values(), want = y.cpu_values();
  const auto finite = std::count_if(got.begin(), got.end(), [](float v) { return std::isfinite(v); });
  const auto zero = std::count(got.begin(), got.end(), 0.0f);
  const std::string seen = "tf32 (" + std::string(tf32.activation_layout() == Layout::nhwc ? "NHWC" : "NCHW") + "): " +
                           std::to_string(finite) + " of " + std::to_string(got.size()) + " outputs finite, " +
                           std::to_string(zero) + " zero";
  EXPECT_LT(relative_error(got, want), 1e-3) << seen;
  // Allowing TF32 is not using it: on an H200, cuDNN's search chose IMPLICIT_GEMM with FMA for this
  // shape in NHWC, and its result was the CPU's to the bit (the same order of fused multiply-adds).
  // That tf32 reaches the tensor cores at all is shown where the choice is cuBLAS's: a product of
  // 1024-wide rows, which cuBLAS runs in TF32 once the math mode allows it (the self-test's linear
  // is off by 3e-4 in tf32, 1.6e-7 in fp32).
  const LinearConfig lc{256, 1024, 1024, false};
  Pair lx(*cpu_, tf32, Shape(lc.batch, lc.in_features), false, random_values(lc.batch * lc.in_features, 7));
  Pair lw(*cpu_, tf32, Shape(lc.out_features, lc.in_features), false, random_values(lc.out_features * lc.in_features, 8));
  Pair ly(*cpu_, tf32, Shape(lc.batch, lc.out_features), false);
  cpu_->make_linear(lc)->forward(lx.cpu(), lw.cpu(), nullptr, ly.cpu());
  tf32.make_linear(lc)->forward(lx.gpu(), lw.gpu(), nullptr, ly.gpu());
  tf32.synchronize();
  const double product_error = ly.error();
  EXPECT_GT(product_error, 1e-6) << "a tf32 product as exact as fp32's: is TF32 really on?";
  EXPECT_LT(product_error, 5e-3);
}

TEST_F(CudaBackendTest, BatchNormMatchesTheCpu) {
  const Shape s(4, 32, 8, 8);
  auto x = pair(s, true, 7), y = zeros(s, true), dy = pair(s, true, 8), dx = zeros(s, true);
  auto gamma = pair(Shape(32), false, 9), beta = pair(Shape(32), false, 10);
  auto mean = zeros(Shape(32), false), cpu_spread = zeros(Shape(32), false), gpu_spread = zeros(Shape(32), false);
  auto running_mean = pair(Shape(32), false, 13), running_var = pair(Shape(32), false, 14);
  auto dgamma = zeros(Shape(32), false), dbeta = zeros(Shape(32), false);
  // Each backend keeps its own form of the spread (the variance, or cuDNN's inverse std).
  BatchNormStatistics on_cpu{mean.cpu(), cpu_spread.cpu(), running_mean.cpu(), running_var.cpu(), {}};
  BatchNormStatistics on_gpu{mean.gpu(), gpu_spread.gpu(), running_mean.gpu(), running_var.gpu(), {}};
  auto cpu_op = cpu_->make_batch_norm({s, 1e-5f});
  auto gpu_op = gpu_->make_batch_norm({s, 1e-5f});
  for (int step = 0; step < 2; ++step) {  // the running statistics follow over steps
    cpu_op->forward_training(x.cpu(), gamma.cpu(), beta.cpu(), y.cpu(), on_cpu, nullptr);
    gpu_op->forward_training(x.gpu(), gamma.gpu(), beta.gpu(), y.gpu(), on_gpu, nullptr);
  }
  cpu_op->backward(x.cpu(), y.cpu(), dy.cpu(), gamma.cpu(), beta.cpu(), on_cpu, dx.cpu(), dgamma.cpu(), dbeta.cpu(),
                   nullptr);
  gpu_op->backward(x.gpu(), y.gpu(), dy.gpu(), gamma.gpu(), beta.gpu(), on_gpu, dx.gpu(), dgamma.gpu(), dbeta.gpu(),
                   nullptr);
  gpu_->synchronize();
  EXPECT_LT(y.error(), 1e-5);
  EXPECT_LT(mean.error(), 1e-5);
  EXPECT_LT(running_mean.error(), 1e-5);
  EXPECT_LT(running_var.error(), 1e-5) << "cuDNN's running variance must be the unbiased one, as PyTorch's";
  EXPECT_LT(dx.error(), 1e-5);
  EXPECT_LT(dgamma.error(), 1e-5);
  EXPECT_LT(dbeta.error(), 1e-5);
}

// dlbench's own kernels (DLBENCH_CUDA_BATCH_NORM=own) with each tail against the CPU's batch norm,
// ReLU and add composed, over NCHW (fp32) and channels last (tf32's fp32 storage): packed planes
// or rows (8x8 planes, 32 channels), unpacked ones (7x7; 5 channels), many chunks a channel (64
// samples of 28x28), one pixel a channel, and channels over three tiles, the last part-filled (72);
// two forward steps for the running statistics.
TEST_F(CudaBackendTest, OwnBatchNormKernelsMatchTheCpuWithEachTail) {
  const ScopedEnv own_kernels("DLBENCH_CUDA_BATCH_NORM", "own");
  for (const CudaMath math : {CudaMath::fp32, CudaMath::tf32}) {
    CudaBackend own(0, math);
    ASSERT_TRUE(own.fuses_batch_norm_add_relu());
    enum class Tail { none, relu, add_relu };
    for (const Shape& s : {Shape(4, 32, 8, 8), Shape(3, 8, 7, 7), Shape(64, 16, 28, 28), Shape(3, 5, 1, 1),
                           Shape(2, 72, 5, 5)}) {
      for (const Tail tail : {Tail::none, Tail::relu, Tail::add_relu}) {
        SCOPED_TRACE(::testing::Message() << (own.activation_layout() == Layout::nhwc ? "nhwc " : "nchw ")
                                          << s.to_string() << " tail " << static_cast<int>(tail));
        const auto values = [&](const Shape& shape, std::uint64_t seed) {
          return Pair(*cpu_, own, shape, true, random_values(shape.numel(), seed));
        };
        const auto nothing = [&](const Shape& shape) { return Pair(*cpu_, own, shape, true); };
        const std::int64_t c = s.c();
        auto x = values(s, 21), z = values(s, 22), dy = values(s, 23), y = nothing(s), normalized = nothing(s);
        auto g = nothing(s), dx = nothing(s), dz = nothing(s);
        auto gamma = values(Shape(c), 24), beta = values(Shape(c), 25), mean = nothing(Shape(c));
        auto cpu_spread = nothing(Shape(c)), gpu_spread = nothing(Shape(c));
        auto running_mean = values(Shape(c), 26), running_var = values(Shape(c), 27);
        auto dgamma = nothing(Shape(c)), dbeta = nothing(Shape(c));
        BatchNormStatistics on_cpu{mean.cpu(), cpu_spread.cpu(), running_mean.cpu(), running_var.cpu(), {}};
        BatchNormStatistics on_gpu{mean.gpu(), gpu_spread.gpu(), running_mean.gpu(), running_var.gpu(), {}};
        auto cpu_op = cpu_->make_batch_norm({s, 1e-5f});
        auto gpu_op = own.make_batch_norm({s, 1e-5f, DType::fp32, tail == Tail::relu, 0.1f, tail == Tail::add_relu});
        // No tail reads y: a ReLU tail finds its mask again from x, the residual's add and ReLU
        // keep theirs in the workspace, a byte a unit (1/16 of y's bytes with packs of 4 floats).
        EXPECT_FALSE(gpu_op->backward_reads_output());
        const bool packed = (own.activation_layout() == Layout::nhwc ? s.c() : s.h() * s.w()) % 4 == 0;
        EXPECT_EQ(gpu_op->workspace_bytes(),
                  tail == Tail::add_relu ? static_cast<std::size_t>(s.numel() / (packed ? 4 : 1)) : 0u);
        const std::shared_ptr<void> workspace = own.allocate(gpu_op->workspace_bytes() + 1);
        for (int step = 0; step < 2; ++step) {
          cpu_op->forward_training(x.cpu(), gamma.cpu(), beta.cpu(), normalized.cpu(), on_cpu, nullptr);
          if (tail == Tail::add_relu) {
            gpu_op->forward_training_add_relu(x.gpu(), z.gpu(), gamma.gpu(), beta.gpu(), y.gpu(), on_gpu,
                                              workspace.get());
          } else {
            gpu_op->forward_training(x.gpu(), gamma.gpu(), beta.gpu(), y.gpu(), on_gpu, workspace.get());
          }
        }
        // The CPU's y: the normalisation, then the tail's ReLU (of the sum with z).
        if (tail == Tail::relu) cpu_->make_relu(s, DType::fp32)->forward(normalized.cpu(), y.cpu());
        if (tail == Tail::add_relu) cpu_->make_add_relu(s, DType::fp32)->forward(normalized.cpu(), z.cpu(), y.cpu());
        const Tensor& cpu_y = tail == Tail::none ? normalized.cpu() : y.cpu();
        const Tensor* cpu_grad = &dy.cpu();
        if (tail != Tail::none) {
          cpu_->make_relu(s, DType::fp32)->backward(cpu_y, dy.cpu(), g.cpu());
          cpu_grad = &g.cpu();
        }
        cpu_op->backward(x.cpu(), cpu_y, *cpu_grad, gamma.cpu(), beta.cpu(), on_cpu, dx.cpu(), dgamma.cpu(),
                         dbeta.cpu(), nullptr);
        own.synchronize();
        const std::vector<float> gpu_y = y.gpu_values();
        // What backward does not declare it reads may be given away by the memory plan: NaN here.
        y.set_gpu(std::vector<float>(static_cast<std::size_t>(s.numel()), std::numeric_limits<float>::quiet_NaN()));
        if (tail == Tail::add_relu) {
          gpu_op->backward_add_relu(x.gpu(), y.gpu(), dy.gpu(), gamma.gpu(), beta.gpu(), on_gpu, dx.gpu(), dz.gpu(),
                                    dgamma.gpu(), dbeta.gpu(), workspace.get());
        } else {
          gpu_op->backward(x.gpu(), y.gpu(), dy.gpu(), gamma.gpu(), beta.gpu(), on_gpu, dx.gpu(), dgamma.gpu(),
                           dbeta.gpu(), workspace.get());
        }
        own.synchronize();
        const std::vector<float> expected_y = tail == Tail::none ? normalized.cpu_values() : y.cpu_values();
        EXPECT_LT(relative_error(gpu_y, expected_y), 1e-5) << "y";
        EXPECT_LT(mean.error(), 1e-5) << "mean";
        EXPECT_LT(running_mean.error(), 1e-5) << "running mean";
        EXPECT_LT(running_var.error(), 1e-5) << "running variance (unbiased)";
        EXPECT_LT(dx.error(), 1e-5) << "dx";
        EXPECT_LT(dgamma.error(), 1e-5) << "dgamma";
        EXPECT_LT(dbeta.error(), 1e-5) << "dbeta";
        if (tail == Tail::add_relu) {
          EXPECT_LT(relative_error(dz.gpu_values(), g.cpu_values()), 1e-6) << "dz: dy where y > 0";
        }
      }
    }
  }
}

TEST_F(CudaBackendTest, PoolingReluAndAddMatchTheCpu) {
  const Shape s(2, 8, 16, 16);
  for (const PoolKind kind : {PoolKind::max, PoolKind::average}) {
    const PoolConfig c{s, kind, 3, 2, 1};
    auto x = pair(s, true, 11), y = zeros(c.output(), true), dy = pair(c.output(), true, 12), dx = zeros(s, true);
    auto cpu_op = cpu_->make_pool(c);
    auto gpu_op = gpu_->make_pool(c);
    std::vector<std::byte> cpu_workspace(cpu_op->workspace_bytes() + 1);
    // cuDNN's pooling keeps nothing; the own max pool (DLBENCH_CUDA_POOL=own, NCHW's default) its arg-max.
    const std::shared_ptr<void> gpu_workspace = gpu_->allocate(gpu_op->workspace_bytes() + 1);
    cpu_op->forward(x.cpu(), y.cpu(), cpu_workspace.data());
    gpu_op->forward(x.gpu(), y.gpu(), gpu_workspace.get());
    cpu_op->backward(x.cpu(), y.cpu(), dy.cpu(), cpu_workspace.data(), dx.cpu());
    gpu_op->backward(x.gpu(), y.gpu(), dy.gpu(), gpu_workspace.get(), dx.gpu());
    gpu_->synchronize();
    EXPECT_LT(y.error(), 1e-6) << (kind == PoolKind::max ? "max" : "average");
    EXPECT_LT(dx.error(), 1e-6) << (kind == PoolKind::max ? "max" : "average");
  }
  auto a = pair(s, true, 13), b = pair(s, true, 14), sum = zeros(s, true), relu = zeros(s, true), drelu = zeros(s, true);
  cpu_->make_add(s, DType::fp32)->forward(a.cpu(), b.cpu(), sum.cpu());
  gpu_->make_add(s, DType::fp32)->forward(a.gpu(), b.gpu(), sum.gpu());
  cpu_->make_relu(s, DType::fp32)->forward(sum.cpu(), relu.cpu());
  gpu_->make_relu(s, DType::fp32)->forward(sum.gpu(), relu.gpu());
  cpu_->make_relu(s, DType::fp32)->backward(relu.cpu(), a.cpu(), drelu.cpu());
  gpu_->make_relu(s, DType::fp32)->backward(relu.gpu(), a.gpu(), drelu.gpu());
  gpu_->synchronize();
  EXPECT_EQ(sum.error(), 0.0);
  EXPECT_EQ(relu.error(), 0.0);
  EXPECT_EQ(drelu.error(), 0.0);
}

// DLBENCH_INPUT_RESIZE=device on a GPU: the self-test's own check (device_resize_differs), crops
// packed by the decoding threads' code, staged and resized on the copies' stream, against the host
// pipeline's values bit for bit in fp32, fp16 and bf16, planar and channels last.
TEST_F(CudaBackendTest, APackedBatchResizedOnTheGpuIsTheHostsBatchBitForBit) {
  const std::optional<std::string> differs = device_resize_differs(*gpu_);
  EXPECT_FALSE(differs) << *differs;
}

// dlbench's own max pooling (DLBENCH_CUDA_POOL=own) against the CPU's, in NCHW (fp32) and channels
// last (tf32's fp32 storage): ResNet's 3x3 windows 2 apart over a padded input, and 2x2 windows side
// by side over an odd size. Its arg-max lives in the workspace, one byte an output, and backward
// reads neither x nor y: both are NaN by then.
TEST_F(CudaBackendTest, OwnMaxPoolingMatchesTheCpuFromItsWorkspaceAlone) {
  const ScopedEnv own_pool("DLBENCH_CUDA_POOL", "own");
  for (const CudaMath math : {CudaMath::fp32, CudaMath::tf32}) {
    CudaBackend own(0, math);
    ASSERT_EQ(own.options().at("pool"), "own");
    for (const PoolConfig& c : {PoolConfig{Shape(2, 8, 16, 16), PoolKind::max, 3, 2, 1},
                                PoolConfig{Shape(2, 5, 7, 7), PoolKind::max, 2, 2, 0}}) {
      SCOPED_TRACE(::testing::Message() << (own.activation_layout() == Layout::nhwc ? "nhwc " : "nchw ")
                                        << c.input.to_string() << " window " << c.kernel.h);
      const Shape out = c.output();
      auto x = Pair(*cpu_, own, c.input, true, random_values(c.input.numel(), 31)), y = Pair(*cpu_, own, out, true);
      auto dy = Pair(*cpu_, own, out, true, random_values(out.numel(), 32)), dx = Pair(*cpu_, own, c.input, true);
      auto cpu_op = cpu_->make_pool(c);
      auto gpu_op = own.make_pool(c);
      EXPECT_EQ(gpu_op->workspace_bytes(), static_cast<std::size_t>(out.numel()));
      EXPECT_FALSE(gpu_op->backward_reads_activations());
      std::vector<std::byte> cpu_workspace(cpu_op->workspace_bytes() + 1);
      const std::shared_ptr<void> gpu_workspace = own.allocate(gpu_op->workspace_bytes());
      cpu_op->forward(x.cpu(), y.cpu(), cpu_workspace.data());
      gpu_op->forward(x.gpu(), y.gpu(), gpu_workspace.get());
      cpu_op->backward(x.cpu(), y.cpu(), dy.cpu(), cpu_workspace.data(), dx.cpu());
      own.synchronize();
      EXPECT_EQ(y.error(), 0.0) << "the maximum is a value of x";
      const float nan = std::numeric_limits<float>::quiet_NaN();
      x.set_gpu(std::vector<float>(static_cast<std::size_t>(c.input.numel()), nan));
      y.set_gpu(std::vector<float>(static_cast<std::size_t>(out.numel()), nan));
      gpu_op->backward(x.gpu(), y.gpu(), dy.gpu(), gpu_workspace.get(), dx.gpu());
      own.synchronize();
      EXPECT_LT(dx.error(), 1e-6);
    }
  }
}

TEST_F(CudaBackendTest, ChannelSlicesMatchTheCpu) {
  const Shape part_shape(2, 4, 5, 5), whole_shape(2, 12, 5, 5);
  auto part = pair(part_shape, true, 15), whole = zeros(whole_shape, true), back = zeros(part_shape, true);
  auto cpu_op = cpu_->make_channel_slice(part_shape, 12, 6, DType::fp32);
  auto gpu_op = gpu_->make_channel_slice(part_shape, 12, 6, DType::fp32);
  cpu_op->insert(part.cpu(), whole.cpu());
  gpu_op->insert(part.gpu(), whole.gpu());
  cpu_op->extract(whole.cpu(), back.cpu());
  gpu_op->extract(whole.gpu(), back.gpu());
  gpu_->synchronize();
  EXPECT_EQ(whole.error(), 0.0);
  EXPECT_EQ(back.error(), 0.0);
}

TEST_F(CudaBackendTest, LinearMatchesTheCpu) {
  const LinearConfig c{8, 300, 70, true};
  auto x = pair(Shape(c.batch, c.in_features), false, 15), w = pair(Shape(c.out_features, c.in_features), false, 16);
  auto b = pair(Shape(c.out_features), false, 17), y = zeros(Shape(c.batch, c.out_features), false);
  auto dy = pair(Shape(c.batch, c.out_features), false, 18), dx = zeros(Shape(c.batch, c.in_features), false);
  auto dw = zeros(Shape(c.out_features, c.in_features), false), db = zeros(Shape(c.out_features), false);
  auto cpu_op = cpu_->make_linear(c);
  auto gpu_op = gpu_->make_linear(c);
  cpu_op->forward(x.cpu(), w.cpu(), &b.cpu(), y.cpu());
  gpu_op->forward(x.gpu(), w.gpu(), &b.gpu(), y.gpu());
  cpu_op->backward_data(dy.cpu(), w.cpu(), dx.cpu());
  gpu_op->backward_data(dy.gpu(), w.gpu(), dx.gpu());
  cpu_op->backward_weights(x.cpu(), dy.cpu(), dw.cpu(), &db.cpu());
  gpu_op->backward_weights(x.gpu(), dy.gpu(), dw.gpu(), &db.gpu());
  gpu_->synchronize();
  EXPECT_LT(y.error(), 1e-5);
  EXPECT_LT(dx.error(), 1e-5);
  EXPECT_LT(dw.error(), 1e-5);
  EXPECT_LT(db.error(), 1e-5);
}

// The device's count of infs and NaNs (what a skipped step's replay calls at every layer) against
// the host's count of the same bytes, in each float type: a tail past the 16-byte packs, more
// elements than one grid covers (65,535 blocks of 256), values that only fp16 rounds to inf.
TEST_F(CudaBackendTest, CountsInfsAndNansWhereTheValuesAre) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  for (const std::int64_t n : {std::int64_t{7}, std::int64_t{4097 * 7}, std::int64_t{65535} * 256 * 2 + 5}) {
    std::vector<float> values = random_values(n, 31);
    for (std::int64_t i = 3; i < n; i += n / 5 + 1) values[static_cast<std::size_t>(i)] = inf;
    for (std::int64_t i = 1; i < n; i += n / 3 + 1) values[static_cast<std::size_t>(i)] = -nan;
    values[static_cast<std::size_t>(n - 1)] = 70000.0f;  // past fp16's 65504
    for (const DType dtype : {DType::fp32, DType::fp16, DType::bf16}) {
      SCOPED_TRACE(::testing::Message() << n << " values of " << to_string(dtype));
      const std::vector<std::byte> bytes = encode(values.data(), values.size(), dtype);
      auto memory = gpu_->allocate(bytes.size());
      gpu_->copy_from_host(memory.get(), bytes.data(), bytes.size());
      const Tensor t{memory.get(), Shape(n), Layout::plain, dtype};
      const NonFiniteCount device = gpu_->count_non_finite(t), host = gpu_->Backend::count_non_finite(t);
      EXPECT_EQ(device.inf, host.inf);
      EXPECT_EQ(device.nan, host.nan);
      EXPECT_GT(host.inf, 0);
      EXPECT_GT(host.nan, 0);
      EXPECT_EQ(gpu_->count_non_finite(t).total(), host.total()) << "counted again: the counters start at zero";
    }
  }
}

TEST_F(CudaBackendTest, LossDropoutPoolingAndSgdMatchTheCpu) {
  const Shape logits_shape(16, 1000);
  auto logits = pair(logits_shape, false, 19), dlogits = zeros(logits_shape, false);
  std::vector<std::int32_t> labels(16);
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int32_t>(i * 61 % 1000);
  auto gpu_labels = gpu_->allocate(labels.size() * sizeof(std::int32_t));
  gpu_->copy_from_host(gpu_labels.get(), labels.data(), labels.size() * sizeof(std::int32_t));
  cpu_->softmax_cross_entropy(logits.cpu(), labels.data(), dlogits.cpu(), nullptr, LossTerm{});
  const float cpu_loss = cpu_->last_loss();
  const auto* device_labels = static_cast<const std::int32_t*>(gpu_labels.get());
  gpu_->softmax_cross_entropy(logits.gpu(), device_labels, dlogits.gpu(), nullptr, LossTerm{});
  const float gpu_loss = gpu_->last_loss();
  EXPECT_NEAR(gpu_loss, cpu_loss, 1e-5 * std::fabs(static_cast<double>(cpu_loss)));
  EXPECT_LT(dlogits.error(), 1e-5);
  // A second, weighted term adds to the step's loss on the device (InceptionV3's main head after its auxiliary one).
  const LossTerm main_term{0.5f, true};
  cpu_->softmax_cross_entropy(logits.cpu(), labels.data(), dlogits.cpu(), nullptr, main_term);
  const float cpu_total = cpu_->last_loss();
  gpu_->softmax_cross_entropy(logits.gpu(), device_labels, dlogits.gpu(), nullptr, main_term);
  const float gpu_total = gpu_->last_loss();
  EXPECT_NEAR(cpu_total, 1.5f * cpu_loss, 1e-5 * std::fabs(static_cast<double>(cpu_loss)));
  EXPECT_NEAR(gpu_total, cpu_total, 1e-5 * std::fabs(static_cast<double>(cpu_total)));
  EXPECT_NEAR(gpu_->last_loss(), cpu_total, 1e-5 * std::fabs(static_cast<double>(cpu_total)));
  EXPECT_LT(dlogits.error(), 1e-5);

  const Shape flat(7, 4097);  // 16-byte packs of 4 and a tail of 3, hashed by their index in the whole
  auto x = pair(flat, false, 20), y = zeros(flat, false), mask = zeros(flat, false);
  auto dy = pair(flat, false, 25), dx = zeros(flat, false);
  cpu_->dropout_forward(x.cpu(), y.cpu(), 0.5f, 1234);
  gpu_->dropout_forward(x.gpu(), y.gpu(), 0.5f, 1234);
  cpu_->dropout_mask(mask.cpu(), 0.5f, 1234);
  gpu_->dropout_mask(mask.gpu(), 0.5f, 1234);
  cpu_->dropout_backward(dy.cpu(), dx.cpu(), 0.5f, 1234);
  gpu_->dropout_backward(dy.gpu(), dx.gpu(), 0.5f, 1234);
  gpu_->synchronize();
  EXPECT_EQ(mask.error(), 0.0) << "the same (seed, index) must keep the same elements";
  EXPECT_EQ(y.error(), 0.0);
  EXPECT_EQ(dx.error(), 0.0) << "backward hashes the indices forward kept";

  const Shape in(2, 64, 7, 7), out(2, 64, 3, 3);
  auto px = pair(in, true, 21), py = zeros(out, true), pdy = pair(out, true, 22), pdx = zeros(in, true);
  cpu_->adaptive_avg_pool_forward(px.cpu(), py.cpu());
  gpu_->adaptive_avg_pool_forward(px.gpu(), py.gpu());
  cpu_->adaptive_avg_pool_backward(pdy.cpu(), pdx.cpu());
  gpu_->adaptive_avg_pool_backward(pdy.gpu(), pdx.gpu());
  gpu_->synchronize();
  EXPECT_LT(py.error(), 1e-6);
  EXPECT_LT(pdx.error(), 1e-6);

  const std::int64_t n = 100003;
  auto w = pair(Shape(n), false, 23), g = pair(Shape(n), false, 24), buffer = zeros(Shape(n), false);
  for (std::uint64_t update = 1; update <= 3; ++update) {  // the rate warmed up over 4: a quarter, a half, three quarters
    const SgdConfig sgd{0.1f, 0.9f, 1e-4f, 4};
    cpu_->sgd_update(w.cpu().as<float>(), g.cpu().as<float>(), buffer.cpu().as<float>(), n, sgd, update, nullptr);
    gpu_->sgd_update(w.gpu().as<float>(), g.gpu().as<float>(), buffer.gpu().as<float>(), n, sgd, update, nullptr);
  }
  gpu_->synchronize();
  EXPECT_LT(w.error(), 1e-6);
  EXPECT_LT(buffer.error(), 1e-6);
}

// DeepLabV3+'s ops: bilinear resizes (up by a non-integral factor, down, and a 1×1 broadcast) and
// the per-pixel loss with ignored pixels, NCHW on the GPU against NHWC on the CPU.
TEST_F(CudaBackendTest, BilinearResizeAndPerPixelLossMatchTheCpu) {
  for (const auto& [in, size] : {std::pair{Shape(2, 16, 9, 13), Extent2{33, 50}}, std::pair{Shape(2, 8, 40, 30), Extent2{17, 11}},
                                 std::pair{Shape(2, 32, 1, 1), Extent2{9, 14}}}) {
    const ResizeConfig config{in, size, DType::fp32};
    const Shape out = config.output_shape();
    auto x = pair(in, true, 30), y = zeros(out, true), dy = pair(out, true, 31), dx = zeros(in, true);
    auto cpu_op = cpu_->make_bilinear_resize(config);
    auto gpu_op = gpu_->make_bilinear_resize(config);
    cpu_op->forward(x.cpu(), y.cpu());
    gpu_op->forward(x.gpu(), y.gpu());
    cpu_op->backward(dy.cpu(), dx.cpu());
    gpu_op->backward(dy.gpu(), dx.gpu());
    gpu_->synchronize();
    // Each side computes the source coordinate (i + 0.5) · in/out - 0.5 in fp32 its own way
    // (nvcc contracts it into an FMA; oneDNN rounds each step): up to an ulp of a coordinate
    // below 40, 2.4e-6, moves a tap's weight by that much. Measured on an H200: 1.5e-6 and 5.7e-6.
    EXPECT_LT(y.error(), 1e-5) << in.to_string();
    EXPECT_LT(dx.error(), 1e-5) << in.to_string();  // sums in another order
    // The backward gathers each input's gradient in a fixed order: the same bits a second time,
    // however the GPU schedules the blocks (it scattered with atomics before 2026-12-02).
    const std::vector<float> first = dx.gpu_values();
    gpu_op->backward(dy.gpu(), dx.gpu());
    EXPECT_TRUE(first == dx.gpu_values()) << in.to_string() << ": the resize's backward is not deterministic";
  }

  const Shape shape(2, 19, 24, 40);
  auto logits = pair(shape, true, 32), dlogits = zeros(shape, true);
  std::vector<std::int32_t> labels(static_cast<std::size_t>(shape.n() * shape.h() * shape.w()));
  for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = i % 7 == 3 ? kIgnoreLabel : static_cast<std::int32_t>(i * 13 % 19);
  auto gpu_labels = gpu_->allocate(labels.size() * sizeof(std::int32_t));
  gpu_->copy_from_host(gpu_labels.get(), labels.data(), labels.size() * sizeof(std::int32_t));
  cpu_->softmax_cross_entropy(logits.cpu(), labels.data(), dlogits.cpu(), nullptr, LossTerm{});
  const float cpu_loss = cpu_->last_loss();
  gpu_->softmax_cross_entropy(logits.gpu(), static_cast<const std::int32_t*>(gpu_labels.get()),
                                                     dlogits.gpu(), nullptr, LossTerm{});
  const float gpu_loss = gpu_->last_loss();
  EXPECT_NEAR(gpu_loss, cpu_loss, 1e-5 * std::fabs(static_cast<double>(cpu_loss)));
  // Read again: the per-pixel losses are summed in a fixed order, to the same bits.
  EXPECT_EQ(gpu_->last_loss(), gpu_loss);
  EXPECT_LT(dlogits.error(), 1e-5);
}

// (N, K) logits with masked-LM slots that predict nothing (kNoPrediction): both backends leave
// those rows out of the mean and give them a zero gradient.
TEST_F(CudaBackendTest, CrossEntropyLeavesOutRowsWithoutAPredictionAsTheCpuDoes) {
  const Shape shape(6, 300);
  auto logits = pair(shape, false, 33), dlogits = zeros(shape, false);
  const std::vector<std::int32_t> labels{7, kNoPrediction, 255, kNoPrediction, 0, 299};
  auto gpu_labels = gpu_->allocate(labels.size() * sizeof(std::int32_t));
  gpu_->copy_from_host(gpu_labels.get(), labels.data(), labels.size() * sizeof(std::int32_t));
  cpu_->softmax_cross_entropy(logits.cpu(), labels.data(), dlogits.cpu(), nullptr, LossTerm{});
  const float cpu_loss = cpu_->last_loss();
  gpu_->softmax_cross_entropy(logits.gpu(), static_cast<const std::int32_t*>(gpu_labels.get()), dlogits.gpu(), nullptr,
                              LossTerm{});
  EXPECT_NEAR(gpu_->last_loss(), cpu_loss, 1e-5 * std::fabs(static_cast<double>(cpu_loss)));
  EXPECT_LT(dlogits.error(), 1e-5);
}

// Ten ResNet-50 steps, each started from the CPU's weights and momentum (same_state_steps.hpp
// says why not a free-running trajectory): what the GPU trainer carries from step to step still
// acts. The loss is a forward from the same weights; the update is the gradient through SGD, and
// a whole untrained step's fp32 gradient is only good to about 1% (PyTorch's fp32 against fp64
// here: 0.8 to 1.4% over all weights, 1.3 to 1.6% in the worst tensor), so a stale buffer or a
// wrong carried state, off by its whole size, stands well clear of the 10% bound.
TEST_F(CudaBackendTest, ResNet50StepsFollowTheCpuFromTheSameState) {
  const Shape input(4, 3, 64, 64);
  const SgdConfig sgd{0.01f, 0.9f, 1e-4f};
  Trainer on_cpu(*cpu_, build_model("resnet50"), input, 1000, sgd, 42, 0);
  Trainer on_gpu(*gpu_, build_model("resnet50"), input, 1000, sgd, 42, 0);
  const testing::SameStateSteps steps = testing::step_from_the_same_state(*cpu_, on_cpu, *gpu_, on_gpu, 10);
  RecordProperty("worst_loss_error", std::to_string(steps.worst_loss));
  RecordProperty("worst_update_error", std::to_string(steps.worst_update));
  EXPECT_LT(steps.worst_loss, 1e-4) << "step " << steps.worst_loss_step;
  EXPECT_LT(steps.worst_update, 0.1) << "step " << steps.worst_update_step;
}

// The same steps eager and replayed from a captured graph, each from the eager trainer's state:
// the same kernels in the same order, so the same loss; only algorithms with atomics reorder
// sums, and the step's conditioning makes that as large as fp32 against fp64 in the gradient.
TEST_F(CudaBackendTest, AStepReplayedAsAGraphTrainsLikeTheEagerStep) {
  const Shape input(8, 3, 64, 64);
  CudaBackend graph_backend(0, CudaMath::fp32);
  // The rate warms up over 5 of the 6 steps: a replay must read its update's number on the device.
  const SgdConfig sgd{0.01f, 0.9f, 1e-4f, 5};
  Trainer eager(*gpu_, build_model("resnet50"), input, 1000, sgd, 7, 0);
  Trainer graphed(graph_backend, build_model("resnet50"), input, 1000, sgd, 7, 0);
  graphed.use_step_graph(true);
  const testing::SameStateSteps steps = testing::step_from_the_same_state(*gpu_, eager, graph_backend, graphed, 6);
  RecordProperty("worst_loss_error", std::to_string(steps.worst_loss));
  RecordProperty("worst_update_error", std::to_string(steps.worst_update));
  EXPECT_LT(steps.worst_loss, 1e-5) << "step " << steps.worst_loss_step;
  EXPECT_LT(steps.worst_update, 0.1) << "step " << steps.worst_update_step;
  EXPECT_TRUE(graphed.step_graph_active());
}

// Real data's batches copied on their own stream while the step before runs (Trainer::stage_batch)
// train each its own step, as batches loaded before them do, eager and replayed as a step graph
// (the batch is moved into place outside the graph), from page-locked memory the next batch is
// written into as soon as the copy has read it.
TEST_F(CudaBackendTest, BatchesStagedBesideTheStepBeforeTrainLikeLoadedOnes) {
  ASSERT_TRUE(gpu_->overlaps_host_copies());
  const Shape shape(8, 3, 16, 16);
  const auto batch = [&](int k, float* pixels, std::int32_t* labels) {
    for (std::int64_t i = 0; i < shape.numel(); ++i) pixels[i] = std::sin(0.37f * static_cast<float>(i) + static_cast<float>(k));
    for (int b = 0; b < 8; ++b) labels[b] = (k + 3 * b) % 10;
  };
  constexpr int kSteps = 5;
  const SgdConfig sgd{0.05f, 0.9f, 0.0f};
  std::vector<float> pixels(static_cast<std::size_t>(shape.numel()));
  std::vector<std::int32_t> labels(8);
  std::vector<float> loaded;
  Trainer reference(*gpu_, small_conv_net(), shape, 10, sgd, 1);
  for (int k = 0; k < kSteps; ++k) {
    batch(k, pixels.data(), labels.data());
    reference.load_batch(pixels.data(), DType::fp32, labels.data());
    loaded.push_back(reference.step_and_loss());
  }
  for (const bool graph : {false, true}) {
    SCOPED_TRACE(graph ? "step graph" : "eager");
    CudaBackend backend(0, CudaMath::fp32);
    // The pipeline's slot, made before the trainer as a case's pipeline is: the trainer's destructor
    // waits for the last batch staged from it.
    const std::shared_ptr<void> ring = backend.allocate_host(static_cast<std::size_t>(shape.numel()) * sizeof(float) + 64);
    Trainer staged(backend, small_conv_net(), shape, 10, sgd, 1);
    staged.use_step_graph(graph);
    auto* const ring_pixels = static_cast<float*>(ring.get());
    auto* const ring_labels = reinterpret_cast<std::int32_t*>(ring_pixels + shape.numel());
    batch(0, ring_pixels, ring_labels);
    staged.stage_batch(ring_pixels, DType::fp32, ring_labels);
    for (int k = 0; k < kSteps; ++k) {
      staged.step();
      staged.release_staged_host_memory();
      batch(k + 1, ring_pixels, ring_labels);
      staged.stage_batch(ring_pixels, DType::fp32, ring_labels);
      const float loss = staged.last_loss();
      EXPECT_NEAR(loss, loaded[static_cast<std::size_t>(k)], 1e-5f * std::fabs(loaded[static_cast<std::size_t>(k)]))
          << "step " << k;
    }
    EXPECT_EQ(staged.step_graph_active(), graph);
  }
}

// Attention's batched matmuls in every transpose combination, with alpha, against oneDNN.
TEST_F(CudaBackendTest, BatchedMatmulsMatchTheCpu) {
  for (const bool ta : {false, true}) {
    for (const bool tb : {false, true}) {
      const BatchedMatmulConfig c{6, 12, 16, 8, ta, tb, 0.35f};
      auto a = pair(Shape(c.batch * c.m * c.k), false, 41), b = pair(Shape(c.batch * c.k * c.n), false, 42);
      auto out = zeros(Shape(c.batch * c.m * c.n), false);
      cpu_->make_batched_matmul(c)->run(a.cpu(), b.cpu(), out.cpu());
      gpu_->make_batched_matmul(c)->run(a.gpu(), b.gpu(), out.gpu());
      gpu_->synchronize();
      EXPECT_LT(out.error(), 1e-5) << "transpose A " << ta << ", B " << tb;
    }
  }
}

// Layer norm, softmax, GELU, tanh, the axis swap and embedding rows (repeated rows included),
// forward and backward, against the CPU backend.
TEST_F(CudaBackendTest, TransformerOpsMatchTheCpu) {
  const std::int64_t rows = 24, features = 96;
  expect_layer_norm_matches_the_cpu(rows, features, 51);
  const Shape matrix(rows, features);
  auto x = pair(matrix, false, 51), dy = pair(matrix, false, 52), y = zeros(matrix, false), dx = zeros(matrix, false);

  auto cpu_softmax = cpu_->make_softmax(rows, features, DType::fp32);
  auto gpu_softmax = gpu_->make_softmax(rows, features, DType::fp32);
  cpu_softmax->forward(x.cpu(), y.cpu());
  gpu_softmax->forward(x.gpu(), y.gpu());
  cpu_softmax->backward(y.cpu(), dy.cpu(), dx.cpu());
  gpu_softmax->backward(y.gpu(), dy.gpu(), dx.gpu());
  gpu_->synchronize();
  EXPECT_LT(y.error(), 1e-5) << "softmax";
  EXPECT_LT(dx.error(), 1e-5) << "softmax dx";

  for (const ActivationKind kind : {ActivationKind::gelu, ActivationKind::tanh}) {
    auto cpu_op = cpu_->make_activation(kind, rows * features, DType::fp32);
    auto gpu_op = gpu_->make_activation(kind, rows * features, DType::fp32);
    cpu_op->forward(x.cpu(), y.cpu());
    gpu_op->forward(x.gpu(), y.gpu());
    cpu_op->backward(x.cpu(), dy.cpu(), dx.cpu());
    gpu_op->backward(x.gpu(), dy.gpu(), dx.gpu());
    gpu_->synchronize();
    EXPECT_LT(y.error(), 1e-5) << (kind == ActivationKind::gelu ? "gelu" : "tanh");
    EXPECT_LT(dx.error(), 1e-5) << (kind == ActivationKind::gelu ? "gelu dx" : "tanh dx");
  }

  // (sequences, tokens, heads, head size): 192 values of their own (x has rows × features).
  const Shape by_token(2, 3, 4, 8);
  auto heads = pair(Shape(by_token.numel()), false, 57), swapped = zeros(Shape(by_token.numel()), false);
  cpu_->make_swap_axes(by_token, DType::fp32)->run(heads.cpu(), swapped.cpu());
  gpu_->make_swap_axes(by_token, DType::fp32)->run(heads.gpu(), swapped.gpu());
  gpu_->synchronize();
  EXPECT_EQ(swapped.error(), 0.0) << "swap axes";

  // Rows 0..23 of x's table gathered in a repeating order, then added back.
  std::vector<std::int32_t> ids{5, 0, 23, 5, 7, 7, 7, 1, 12, 5};
  const auto count = static_cast<std::int64_t>(ids.size());
  auto cpu_ids = cpu_->allocate(ids.size() * sizeof(std::int32_t)), gpu_ids = gpu_->allocate(ids.size() * sizeof(std::int32_t));
  cpu_->copy_from_host(cpu_ids.get(), ids.data(), ids.size() * sizeof(std::int32_t));
  gpu_->copy_from_host(gpu_ids.get(), ids.data(), ids.size() * sizeof(std::int32_t));
  auto gathered = pair(Shape(count, features), false, 55), table_grad = pair(matrix, false, 56);
  cpu_->gather_rows(x.cpu(), static_cast<const std::int32_t*>(cpu_ids.get()), count, gathered.cpu(), true);
  gpu_->gather_rows(x.gpu(), static_cast<const std::int32_t*>(gpu_ids.get()), count, gathered.gpu(), true);
  cpu_->scatter_add_rows(gathered.cpu(), static_cast<const std::int32_t*>(cpu_ids.get()), count, table_grad.cpu());
  gpu_->scatter_add_rows(gathered.gpu(), static_cast<const std::int32_t*>(gpu_ids.get()), count, table_grad.gpu());
  gpu_->synchronize();
  EXPECT_EQ(gathered.error(), 0.0) << "gather rows";
  EXPECT_LT(table_grad.error(), 1e-6) << "scatter-add rows";

  // Row 7 named by 400 of 1,000 entries, across windows of kScatterWindow: the CPU's sum to
  // fp32's error, and the same bits a second time (fp32 atomics summed in the blocks' order
  // before 2026-12-02).
  std::vector<std::int32_t> many(1000);
  for (std::size_t i = 0; i < many.size(); ++i) many[i] = i % 5 < 2 ? 7 : static_cast<std::int32_t>(i % 24);
  const auto many_count = static_cast<std::int64_t>(many.size());
  const std::size_t many_bytes = many.size() * sizeof(std::int32_t);
  auto cpu_many = cpu_->allocate(many_bytes), gpu_many = gpu_->allocate(many_bytes);
  cpu_->copy_from_host(cpu_many.get(), many.data(), many_bytes);
  gpu_->copy_from_host(gpu_many.get(), many.data(), many_bytes);
  auto entries = pair(Shape(many_count, features), false, 58), sums = zeros(matrix, false);
  cpu_->scatter_add_rows(entries.cpu(), static_cast<const std::int32_t*>(cpu_many.get()), many_count, sums.cpu());
  gpu_->scatter_add_rows(entries.gpu(), static_cast<const std::int32_t*>(gpu_many.get()), many_count, sums.gpu());
  gpu_->synchronize();
  EXPECT_LT(sums.error(), 1e-5) << "scatter-add rows, a row named 400 times";
  const std::vector<float> first = sums.gpu_values();
  gpu_->fill_zero(sums.gpu());
  gpu_->scatter_add_rows(entries.gpu(), static_cast<const std::int32_t*>(gpu_many.get()), many_count, sums.gpu());
  gpu_->synchronize();
  EXPECT_TRUE(first == sums.gpu_values()) << "scatter-add rows is not deterministic";
}

// At BERT's widths: layer norm (a row in a warp's registers, and longer rows a block each) with
// its dγ and dβ, and a bias gradient, over more rows than one chunk of blocks sums
// (column_reduction.hpp: 1,000 rows of 768 features are 15 chunks; the 24 rows above are one),
// and softmax over attention's 128 tokens (a row in registers) and over 768 (too long for them).
TEST_F(CudaBackendTest, TransformerKernelsAtBertsWidthsMatchTheCpu) {
  const std::int64_t rows = 1000, features = 768;
  ASSERT_GT(column_chunks(rows, features).chunks, 1) << "the shape must take the chunked path";
  expect_layer_norm_matches_the_cpu(rows, features, 61);  // a warp a row, 24 values a lane
  expect_layer_norm_matches_the_cpu(200, 1100, 71);        // too long for a warp's registers: a block a row

  // A gradient's column sums against the host's, in fp64.
  auto dy = pair(Shape(rows, features), false, 62);
  const std::vector<float> gradient = dy.gpu_values();
  std::vector<float> expected(static_cast<std::size_t>(features), 0.0f);
  for (std::int64_t j = 0; j < features; ++j) {
    double sum = 0.0;
    for (std::int64_t r = 0; r < rows; ++r) sum += static_cast<double>(gradient[static_cast<std::size_t>(r * features + j)]);
    expected[static_cast<std::size_t>(j)] = static_cast<float>(sum);
  }
  auto sums = zeros(Shape(features), false);
  auto scratch = gpu_->allocate(kernels::column_sums_scratch_bytes(rows, static_cast<int>(features)));
  kernels::column_sums(DType::fp32, dy.gpu().data, sums.gpu().as<float>(), rows, static_cast<int>(features),
                       static_cast<float*>(scratch.get()), gpu_->stream());
  gpu_->synchronize();
  EXPECT_LT(relative_error(sums.gpu_values(), expected), 1e-5) << "column sums";

  for (const std::int64_t columns : {128, 768}) {
    const Shape scores(rows, columns);
    auto in = pair(scores, false, 65), dprobabilities = pair(scores, false, 66);
    auto probabilities = zeros(scores, false), dscores = zeros(scores, false);
    auto cpu_softmax = cpu_->make_softmax(rows, columns, DType::fp32);
    auto gpu_softmax = gpu_->make_softmax(rows, columns, DType::fp32);
    cpu_softmax->forward(in.cpu(), probabilities.cpu());
    gpu_softmax->forward(in.gpu(), probabilities.gpu());
    cpu_softmax->backward(probabilities.cpu(), dprobabilities.cpu(), dscores.cpu());
    gpu_softmax->backward(probabilities.gpu(), dprobabilities.gpu(), dscores.gpu());
    gpu_->synchronize();
    EXPECT_LT(probabilities.error(), 1e-5) << "softmax over " << columns;
    EXPECT_LT(dscores.error(), 1e-5) << "softmax dx over " << columns;
  }
}

// The heads' axis swap moves 2-byte values in 16-, 8-, 4- and 2-byte packs (swap_axes_plan.hpp):
// the same bits as the definition y[a][c][b][d] = x[a][b][c][d], at BERT's head size and at an
// odd one, with y offset from 16-byte alignment.
TEST_F(CudaBackendTest, HalfHeadsSwapBitForBitWhateverThePackWidth) {
  CudaBackend half(0, CudaMath::fp32, DType::fp16);
  for (const std::int64_t d : {64, 3}) {
    const std::int64_t a = 3, b = 128, c = 12, n = a * b * c * d;
    std::vector<std::uint16_t> x(static_cast<std::size_t>(n)), actual(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<std::uint16_t>(i * 2654435761u >> 7);
    const std::vector<std::uint16_t> expected = swapped_axes(x, a, b, c, d);
    const std::size_t bytes = x.size() * sizeof(std::uint16_t);
    auto from = half.allocate(bytes), to = half.allocate(bytes + 16);
    half.copy_from_host(from.get(), x.data(), bytes);
    for (const std::size_t offset : {0u, 8u, 4u, 2u}) {
      void* y = static_cast<std::byte*>(to.get()) + offset;
      const SwapAxesPlan plan = swap_axes_plan(a, b, c, d, 2, from.get(), y);
      const Tensor in{from.get(), Shape(a, b, c, d), Layout::plain, DType::fp16};
      Tensor out{y, Shape(a, c, b, d), Layout::plain, DType::fp16};
      half.make_swap_axes(in.shape, DType::fp16)->run(in, out);
      half.copy_to_host(actual.data(), y, bytes);
      EXPECT_EQ(actual, expected) << "head size " << d << ", y " << offset << " bytes past 16-byte alignment, "
                                  << plan.pack_bytes << "-byte packs";
    }
  }
}

// `values` rounded to T's precision, as the host sees them, and T's bits for the device.
template <typename T>
std::vector<float> rounded(const std::vector<float>& values, std::vector<std::uint16_t>& bits) {
  std::vector<float> out(values.size());
  bits.resize(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    const T h = T::from_float(values[i]);
    bits[i] = h.bits;
    out[i] = h.to_float();
  }
  return out;
}

// The CUDA fused attention kernels (DLBENCH_CUDA_ATTENTION=fused) against the CPU's fused op
// (which CI holds to the composed ops) in fp32 on the same rounded inputs, dropout on: context,
// the row statistics and dQ, dK, dV. 40 tokens pad to 48 (a partial tile of keys and queries);
// 128 tokens of 64 are BERT-base's heads. Bounds: fp16 keeps 11 bits of the probabilities and dS,
// bf16 8 (the self-test's bounds for half attention). bench/attention_half_numerics.py emulates the
// kernels' roundings at these shapes: at worst 6.7e-4 in fp16 and 5.0e-3 in bf16 over five draws, so
// a kernel past a fifth of its bound has an error of its own, not rounding.
template <typename T>
void expect_fused_attention_matches_the_cpu(DType dtype, double bound) {
  const ScopedEnv gpu_switch("DLBENCH_CUDA_ATTENTION", "fused");
  const ScopedEnv cpu_switch("DLBENCH_CPU_ATTENTION", "fused");
  CudaBackend gpu(0, CudaMath::fp32, dtype);
  CpuBackend cpu(0);
  for (const AttentionConfig shape : {AttentionConfig{2, 40, 3, 32}, AttentionConfig{3, 128, 4, 64}}) {
    SCOPED_TRACE(::testing::Message() << to_string(dtype) << ", " << shape.sequences << " sequences of " << shape.tokens
                                      << " tokens, " << shape.heads << " heads of " << shape.head_size);
    AttentionConfig gpu_shape = shape, cpu_shape = shape;
    gpu_shape.dtype = dtype;
    cpu_shape.dtype = DType::fp32;
    auto gpu_op = gpu.make_fused_attention(gpu_shape);
    if (!gpu_op) {
      // Refused (stderr says why): only where this GPU's blocks are too small for the shape.
      EXPECT_LT(gpu.properties().sharedMemPerBlockOptin, std::size_t{217088}) << "the fused op was refused";
      continue;
    }
    auto cpu_op = cpu.make_fused_attention(cpu_shape);
    ASSERT_NE(cpu_op, nullptr);
    const std::int64_t n = shape.sequences * shape.tokens * shape.heads * shape.head_size;
    const std::int64_t rows = shape.sequences * shape.heads * shape.tokens;
    struct Both {
      std::vector<float> host;
      std::shared_ptr<void> gpu_memory;
      Tensor cpu, gpu;
    };
    std::vector<Both> all;
    all.reserve(9);
    const auto both = [&](std::int64_t count, std::uint64_t seed, DType gpu_dtype) -> Both& {
      Both& b = all.emplace_back();
      std::vector<std::uint16_t> bits;
      const std::vector<float> drawn = seed == 0 ? std::vector<float>(static_cast<std::size_t>(count), 0.0f)
                                                 : random_values(count, seed, 1.5f);
      b.host = gpu_dtype == DType::fp32 ? drawn : rounded<T>(drawn, bits);
      const std::size_t gpu_bytes = static_cast<std::size_t>(count) * dtype_size(gpu_dtype);
      b.gpu_memory = gpu.allocate(gpu_bytes);
      if (gpu_dtype == DType::fp32) {
        gpu.copy_from_host(b.gpu_memory.get(), b.host.data(), gpu_bytes);
      } else {
        gpu.copy_from_host(b.gpu_memory.get(), bits.data(), gpu_bytes);
      }
      b.cpu = Tensor{b.host.data(), Shape(count), Layout::plain, DType::fp32};
      b.gpu = Tensor{b.gpu_memory.get(), Shape(count), Layout::plain, gpu_dtype};
      return b;
    };
    Both &q = both(n, 81, dtype), &k = both(n, 82, dtype), &v = both(n, 83, dtype), &dcontext = both(n, 84, dtype);
    Both &context = both(n, 0, dtype), &statistics = both(rows, 0, DType::fp32), &dq = both(n, 0, dtype),
         &dk = both(n, 0, dtype), &dv = both(n, 0, dtype);
    const float p = 0.1f;
    const std::uint64_t seed = 1234;
    // Without padding, then with the sequences' real tokens (real data's attention mask).
    std::vector<std::int32_t> real_tokens(static_cast<std::size_t>(shape.sequences));
    for (std::size_t s = 0; s < real_tokens.size(); ++s) {
      real_tokens[s] = static_cast<std::int32_t>(std::max<std::int64_t>(1, shape.tokens - static_cast<std::int64_t>(s) * 17));
    }
    const auto gpu_real_tokens = gpu.allocate(real_tokens.size() * sizeof(std::int32_t));
    gpu.copy_from_host(gpu_real_tokens.get(), real_tokens.data(), real_tokens.size() * sizeof(std::int32_t));
    for (const bool padded : {false, true}) {
    SCOPED_TRACE(padded ? "padded" : "no padding");
    const std::int32_t* cpu_tokens = padded ? real_tokens.data() : nullptr;
    const auto* gpu_tokens = padded ? static_cast<const std::int32_t*>(gpu_real_tokens.get()) : nullptr;
    cpu.begin_step(3);
    gpu.begin_step(3);
    cpu_op->forward(q.cpu, k.cpu, v.cpu, context.cpu, statistics.cpu, p, seed, cpu_tokens);
    gpu_op->forward(q.gpu, k.gpu, v.gpu, context.gpu, statistics.gpu, p, seed, gpu_tokens);
    cpu_op->backward(q.cpu, k.cpu, v.cpu, dcontext.cpu, statistics.cpu, p, seed, cpu_tokens, dq.cpu, dk.cpu, dv.cpu);
    gpu_op->backward(q.gpu, k.gpu, v.gpu, dcontext.gpu, statistics.gpu, p, seed, gpu_tokens, dq.gpu, dk.gpu, dv.gpu);
    gpu.synchronize();
    const auto device_values = [&](Both& b) {
      std::vector<float> out(b.host.size());
      if (b.gpu.dtype == DType::fp32) {
        gpu.copy_to_host(out.data(), b.gpu.data, out.size() * sizeof(float));
        return out;
      }
      std::vector<T> halves(b.host.size());
      gpu.copy_to_host(halves.data(), b.gpu.data, halves.size() * sizeof(T));
      for (std::size_t i = 0; i < out.size(); ++i) out[i] = halves[i].to_float();
      return out;
    };
    EXPECT_LT(relative_error(device_values(statistics), statistics.host), 1e-4) << "log-sum-exp";
    EXPECT_LT(relative_error(device_values(context), context.host), bound) << "context";
    EXPECT_LT(relative_error(device_values(dq), dq.host), bound) << "dQ";
    EXPECT_LT(relative_error(device_values(dk), dk.host), bound) << "dK";
    EXPECT_LT(relative_error(device_values(dv), dv.host), bound) << "dV";
    }
  }
}

TEST_F(CudaBackendTest, FusedAttentionMatchesTheCpuInFp16) { expect_fused_attention_matches_the_cpu<fp16>(DType::fp16, 1e-2); }

TEST_F(CudaBackendTest, FusedAttentionMatchesTheCpuInBf16) {
  if (const auto why = gpu_->cannot_compute(DType::bf16)) GTEST_SKIP() << *why;
  expect_fused_attention_matches_the_cpu<bf16>(DType::bf16, 5e-2);
}

// Wide enough for the tensor cores to matter, small enough for ten steps against the CPU.
constexpr BertConfig kTinyBert{.vocabulary = 128, .hidden = 64, .layers = 2, .heads = 4, .intermediate = 128, .max_positions = 32};

// A small BERT with AdamW, clipping included, follows the CPU for ten steps.
TEST_F(CudaBackendTest, BertLossFollowsTheCpuWithAdamW) {
  const BertConfig config = kTinyBert;
  const AdamWConfig adamw{1e-3f, 0.9f, 0.999f, 1e-6f, 0.01f, 1.0f};
  Trainer on_cpu(*cpu_, bert_for_pretraining(config), PretrainingBatchLayout{8, 32}, config.vocabulary, SgdConfig{}, 5);
  Trainer on_gpu(*gpu_, bert_for_pretraining(config), PretrainingBatchLayout{8, 32}, config.vocabulary, SgdConfig{}, 5);
  on_cpu.use_adamw(adamw);
  on_gpu.use_adamw(adamw);
  for (int step = 0; step < 10; ++step) {
    const float expected = on_cpu.step_and_loss();
    const float actual = on_gpu.step_and_loss();
    EXPECT_NEAR(actual, expected, 1e-4 * std::fabs(static_cast<double>(expected))) << "step " << step;
  }
}

// Real data's batches: padded sequences (attention's softmax over each sequence's real tokens, on
// the composed route and the fused one) and masked-LM slots without a prediction (left out of the
// loss). The GPU follows the CPU on the same padded batch for ten steps.
TEST_F(CudaBackendTest, BertOnPaddedSequencesFollowsTheCpu) {
  const BertConfig config = kTinyBert;
  const AdamWConfig adamw{1e-3f, 0.9f, 0.999f, 1e-6f, 0.01f, 1.0f};
  const PretrainingBatchLayout layout{8, 32};
  const std::vector<std::int32_t> real_tokens{32, 5, 17, 31, 9, 32, 24, 12};
  // The fused kernels run fp16 and bf16 only: that route trains in fp16 against the CPU's fp32.
  for (const char* route : {"composed", "fused"}) {
    SCOPED_TRACE(route);
    const bool fused = std::string(route) == "fused";
    const ScopedEnv attention("DLBENCH_CUDA_ATTENTION", route);
    CudaBackend gpu(0, CudaMath::fp32, fused ? DType::fp16 : DType::fp32);
    Trainer on_cpu(*cpu_, bert_for_pretraining(config), layout, config.vocabulary, SgdConfig{}, 5);
    Trainer on_gpu(gpu, bert_for_pretraining(config), layout, config.vocabulary, SgdConfig{}, 5, 0,
                   MemoryReuse::lifetime, fused ? DType::fp16 : DType::fp32);
    on_cpu.pad_sequences(layout, real_tokens);
    on_gpu.pad_sequences(layout, real_tokens);
    on_cpu.use_adamw(adamw);
    on_gpu.use_adamw(adamw);
    for (int step = 0; step < 10; ++step) {
      const float expected = on_cpu.step_and_loss();
      const float actual = on_gpu.step_and_loss();
      EXPECT_NEAR(actual, expected, (fused ? 1e-2 : 1e-4) * std::fabs(static_cast<double>(expected))) << "step " << step;
    }
  }
}

// A replayed BERT step keeps counting AdamW's updates on the device (the bias corrections and the
// warmed-up rate of a frozen update number would leave the eager trajectory) and keeps changing
// dropout masks.
TEST_F(CudaBackendTest, ABertStepReplayedAsAGraphTrainsLikeTheEagerStep) {
  const BertConfig config = kTinyBert;
  const AdamWConfig adamw{1e-3f, 0.9f, 0.999f, 1e-6f, 0.01f, 1.0f, 6};
  CudaBackend graph_backend(0, CudaMath::fp32);
  Trainer eager(*gpu_, bert_for_pretraining(config), PretrainingBatchLayout{8, 32}, config.vocabulary, SgdConfig{}, 5);
  Trainer graphed(graph_backend, bert_for_pretraining(config), PretrainingBatchLayout{8, 32}, config.vocabulary,
                  SgdConfig{}, 5);
  eager.use_adamw(adamw);
  graphed.use_adamw(adamw);
  graphed.use_step_graph(true);
  for (int step = 0; step < 8; ++step) {
    eager.step();
    graphed.step();
    // Atomic adds in the embedding gradients may sum in another order.
    EXPECT_NEAR(graphed.last_loss(), eager.last_loss(), 1e-4 * std::fabs(static_cast<double>(eager.last_loss())))
        << "step " << step;
  }
  EXPECT_TRUE(graphed.step_graph_active());
}

// A half BERT trains the same with the fused attention kernels as with the composed ops on the
// same GPU: the same masks, the probabilities recomputed instead of kept.
TEST_F(CudaBackendTest, AHalfBertFollowsTheComposedOneWithFusedAttention) {
  const BertConfig config = kTinyBert;
  const AdamWConfig adamw{1e-3f, 0.9f, 0.999f, 1e-6f, 0.01f, 1.0f};
  for (const DType dtype : {DType::fp16, DType::bf16}) {
    if (gpu_->cannot_compute(dtype)) continue;
    SCOPED_TRACE(to_string(dtype));
    CudaBackend composed_backend(0, CudaMath::fp32, dtype);
    std::unique_ptr<CudaBackend> fused_backend;
    {
      const ScopedEnv fused("DLBENCH_CUDA_ATTENTION", "fused");
      fused_backend = std::make_unique<CudaBackend>(0, CudaMath::fp32, dtype);
    }
    Trainer composed(composed_backend, bert_for_pretraining(config), PretrainingBatchLayout{8, 32}, config.vocabulary,
                     SgdConfig{}, 5, 0, MemoryReuse::lifetime, dtype);
    Trainer fused(*fused_backend, bert_for_pretraining(config), PretrainingBatchLayout{8, 32}, config.vocabulary,
                  SgdConfig{}, 5, 0, MemoryReuse::poison, dtype);
    composed.use_adamw(adamw);
    fused.use_adamw(adamw);
    for (int step = 0; step < 6; ++step) {
      const float expected = composed.step_and_loss();
      const float actual = fused.step_and_loss();
      EXPECT_NEAR(actual, expected, 2e-2 * std::fabs(static_cast<double>(expected))) << "step " << step;
    }
  }
}

// A half ResNet-50 trains the same with its bottlenecks' convolutions fused with the batch norms
// between them (DLBENCH_CUDA_CONV_BATCH_NORM=fused: cuDNN's runtime-fusion engines and the deferred
// batch norm's own kernels) as with them apart on the same GPU, the fused one in the poison mode
// (every buffer NaN after its declared lifetime). fp16 must fuse every bottleneck (a described
// H200 builds all three graphs for each of ResNet-50's, cuda/conv_fusion.hpp); bf16 fuses where
// this device's engines offer it.
TEST_F(CudaBackendTest, AHalfResNetFollowsTheSeparateOneWithConvolutionsFusedWithBatchNorms) {
  const Shape input(8, 3, 64, 64);
  for (const DType dtype : {DType::fp16, DType::bf16}) {
    if (gpu_->cannot_compute(dtype)) continue;
    // Every fusion (the data gradients taking bn1's and bn2's gradients, cuDNN's
    // DgradDreluBNBwdWeight), and the forward and filter-gradient ones alone.
    for (const char* route : {"fused", "fused-forward"}) {
      SCOPED_TRACE(std::string(to_string(dtype)) + " " + route);
      std::unique_ptr<CudaBackend> separate_backend, fused_backend;
      {
        const ScopedEnv apart("DLBENCH_CUDA_CONV_BATCH_NORM", "separate");  // fp16's default fuses
        separate_backend = std::make_unique<CudaBackend>(0, CudaMath::fp32, dtype);
      }
      {
        const ScopedEnv fused("DLBENCH_CUDA_CONV_BATCH_NORM", route);
        fused_backend = std::make_unique<CudaBackend>(0, CudaMath::fp32, dtype);
      }
      EXPECT_EQ(fused_backend->options().at("convBatchNorm"), route);
      const SgdConfig sgd{0.01f, 0.9f, 1e-4f};
      Trainer separate(*separate_backend, build_model("resnet50"), input, 1000, sgd, 5, 0, MemoryReuse::lifetime, dtype);
      Trainer fused(*fused_backend, build_model("resnet50"), input, 1000, sgd, 5, 0, MemoryReuse::poison, dtype);
      const FusedBlocks counted = count_fused_blocks(fused.network());
      const int blocks = counted.blocks, fused_blocks = counted.fused, gradient_blocks = counted.gradients;
      EXPECT_EQ(blocks, 16);
      if (dtype == DType::fp16) {
        EXPECT_EQ(fused_blocks, blocks) << "every bottleneck fuses in fp16";
        EXPECT_EQ(gradient_blocks, std::string(route) == "fused" ? blocks : 0)
            << "the data gradients take the batch norms' gradients under fused only";
      }
      RecordProperty(std::string(to_string(dtype)) + "_" + route + "_fused_blocks", std::to_string(fused_blocks));
      RecordProperty(std::string(to_string(dtype)) + "_" + route + "_gradient_blocks", std::to_string(gradient_blocks));
      for (int step = 0; step < 6; ++step) {
        const float expected = separate.step_and_loss();
        const float actual = fused.step_and_loss();
        EXPECT_NEAR(actual, expected, 2e-2 * std::fabs(static_cast<double>(expected))) << "step " << step;
      }
    }
  }
}

// What `dlbench-worker --self-test` runs on the user's GPUs: every check passes here too.
TEST_F(CudaBackendTest, TheSelfTestPassesOnThisGpu) {
  NoCommunicator one;
  SelfTestSubject subject{*gpu_,
                          [](Precision precision) {
                            return std::make_unique<CudaBackend>(0, cuda_math(precision), activation_dtype(precision));
                          },
                          {Precision::fp32, Precision::tf32, Precision::amp, Precision::bf16}};
  int passed = 0;
  for (const auto& c : run_self_test(subject, *cpu_, one)) {
    EXPECT_NE(c.outcome, CheckOutcome::failed) << c.precision << " " << c.name << ": " << c.detail;
    passed += c.outcome == CheckOutcome::passed ? 1 : 0;
  }
  // Each precision this GPU runs: 12 layers, the loss, the encoder layer at two shapes, BERT, training, graph replay.
  const int precisions = gpu_->cannot_compute(DType::bf16) ? 3 : 4;
  EXPECT_GE(passed, 18 * precisions);
}

// Half activations are channels last, and a backend computes in the dtype it was made for only.
TEST_F(CudaBackendTest, AHalfBackendIsChannelsLastAndRefusesOpsInAnotherDtype) {
  CudaBackend half(0, CudaMath::fp32, DType::fp16);
  EXPECT_EQ(half.activation_layout(), Layout::nhwc);
  EXPECT_EQ(gpu_->activation_layout(), Layout::nchw);
  EXPECT_NO_THROW(half.make_relu(Shape(2, 3, 4, 4), DType::fp16));
  try {
    half.make_relu(Shape(2, 3, 4, 4), DType::fp32);
    FAIL() << "an fp32 op on a backend made for fp16";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("made for fp16"), std::string::npos) << e.what();
  }
}

TEST_F(CudaBackendTest, OutOfMemoryIsReportedWithTheBytesAskedAndFree) {
  std::size_t free = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free, &total), cudaSuccess);
  try {
    gpu_->allocate(total * 2);
    FAIL() << "twice the device's memory cannot be allocated";
  } catch (const CudaOutOfMemory& e) {
    EXPECT_GE(e.requested, total * 2);
    EXPECT_EQ(e.total, total);
    EXPECT_NE(std::string(e.what()).find("device memory exhausted"), std::string::npos);
  }
  gpu_->allocate(1 << 20);  // the backend is still usable afterwards
}

// Tensors on one CUDA backend drawn from seeds (random_values), fp16 as its rounded bits: the same
// bits on every backend; and read back as floats.
class DeviceTensors {
 public:
  explicit DeviceTensors(CudaBackend& backend) : backend_(backend) {}
  Tensor draw(const Shape& shape, Layout layout, DType type, std::uint64_t seed) {
    const std::vector<float> drawn = random_values(shape.numel(), seed);
    const auto bytes = static_cast<std::size_t>(shape.numel()) * dtype_size(type);
    memory_.push_back(backend_.allocate(bytes));
    std::vector<std::uint16_t> bits;
    if (type == DType::fp16) rounded<fp16>(drawn, bits);
    backend_.copy_from_host(memory_.back().get(),
                            type == DType::fp16 ? static_cast<const void*>(bits.data()) : drawn.data(), bytes);
    return Tensor{memory_.back().get(), shape, layout, type};
  }
  std::vector<float> read(const Tensor& t) {
    std::vector<float> out(static_cast<std::size_t>(t.numel()));
    if (t.dtype == DType::fp32) {
      backend_.copy_to_host(out.data(), t.data, t.bytes());
      return out;
    }
    std::vector<std::uint16_t> bits(out.size());
    backend_.copy_to_host(bits.data(), t.data, t.bytes());
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = fp16{bits[i]}.to_float();
    return out;
  }

 private:
  CudaBackend& backend_;
  std::vector<std::shared_ptr<void>> memory_;
};

// What weight_copy_phases gives back: each phase's pass outputs, in the same order.
using PhaseOutputs = std::vector<std::vector<std::vector<float>>>;

// A 3x3 convolution, a 1x1 convolution and a linear layer with a bias, their parameters bound in one
// store on `backend`, run forward, backward-data and backward-weights in five phases: after values
// copied from the host; again with nothing written; after new values from the host; after an SGD
// update; after values written behind the backend's back and announced (parameters_written, as
// after a broadcast). The inputs are the same bits on every backend.
PhaseOutputs weight_copy_phases(CudaBackend& backend, DType dtype) {
  const Conv2dConfig three{Shape(2, 16, 8, 8), 32, 3, 1, 1, false, dtype};
  const Conv2dConfig one{Shape(2, 32, 8, 8), 16, 1, 1, 0, false, dtype};
  const LinearConfig linear{4, 48, 24, true, dtype};
  DeviceTensors device(backend);
  Parameter w3, w1, wl, bl;
  w3.value = Tensor{nullptr, three.weight()};
  w1.value = Tensor{nullptr, one.weight()};
  wl.value = Tensor{nullptr, Shape(linear.out_features, linear.in_features)};
  bl.value = Tensor{nullptr, Shape(linear.out_features)};
  ParameterStore store;
  store.bind({&w3, &w1, &wl, &bl}, backend);
  const auto bytes = static_cast<std::size_t>(store.elements()) * sizeof(float);
  const auto host_values = [&](std::uint64_t seed) { return random_values(store.elements(), seed); };

  const Tensor x3 = device.draw(three.input, Layout::nhwc, dtype, 31), dy3 = device.draw(three.output(), Layout::nhwc, dtype, 32);
  const Tensor x1 = device.draw(one.input, Layout::nhwc, dtype, 33), dy1 = device.draw(one.output(), Layout::nhwc, dtype, 34);
  const Tensor xl = device.draw(Shape(linear.batch, linear.in_features), Layout::plain, dtype, 35);
  const Tensor dyl = device.draw(Shape(linear.batch, linear.out_features), Layout::plain, dtype, 36);
  Tensor y3 = device.draw(three.output(), Layout::nhwc, dtype, 37), dx3 = device.draw(three.input, Layout::nhwc, dtype, 38);
  Tensor y1 = device.draw(one.output(), Layout::nhwc, dtype, 39), dx1 = device.draw(one.input, Layout::nhwc, dtype, 40);
  Tensor yl = device.draw(Shape(linear.batch, linear.out_features), Layout::plain, dtype, 41);
  Tensor dxl = device.draw(Shape(linear.batch, linear.in_features), Layout::plain, dtype, 42);
  auto conv3 = backend.make_conv2d(three);
  auto conv1 = backend.make_conv2d(one);
  auto dense = backend.make_linear(linear);

  PhaseOutputs phases;
  const auto passes = [&] {
    std::vector<std::vector<float>>& out = phases.emplace_back();
    conv3->forward(x3, w3.value, nullptr, y3);
    conv3->backward_data(dy3, w3.value, dx3);
    conv3->backward_weights(x3, dy3, w3.grad, nullptr);
    conv1->forward(x1, w1.value, nullptr, y1);
    conv1->backward_data(dy1, w1.value, dx1);
    conv1->backward_weights(x1, dy1, w1.grad, nullptr);
    dense->forward(xl, wl.value, &bl.value, yl);
    dense->backward_data(dyl, wl.value, dxl);
    for (const Tensor* t : {&y3, &dx3, &w3.grad, &y1, &dx1, &w1.grad, &yl, &dxl}) out.push_back(device.read(*t));
  };
  backend.copy_from_host(store.values(), host_values(100).data(), bytes);
  passes();
  passes();
  backend.copy_from_host(store.values(), host_values(101).data(), bytes);
  passes();
  backend.copy_from_host(store.grads(), host_values(102).data(), bytes);
  backend.sgd_update(store.values(), store.grads(), store.momentum(), store.elements(), SgdConfig{1.0f, 0.0f, 0.0f}, 1,
                     nullptr);
  passes();
  const std::shared_ptr<void> behind = backend.allocate(bytes);
  backend.copy_from_host(behind.get(), host_values(103).data(), bytes);
  DLBENCH_CUDA_CHECK(cudaMemcpyAsync(store.values(), behind.get(), bytes, cudaMemcpyDeviceToDevice, backend.stream()));
  backend.parameters_written();
  passes();
  backend.synchronize();
  return phases;
}

// DLBENCH_CUDA_WEIGHT_COPIES=kept follows every write to the parameters' values: its passes give
// what the per-pass copies give, phase by phase, within rounding and each backend's own algorithm
// choices (1e-2), while every write changes the forward outputs by far more (checked), so a pass
// that read a stale copy could not pass. Half: the 3x3 filter kept transposed, the 1x1 filter and
// the linear weight and bias kept flat. tf32 (fp32 channels last): the 3x3 filter kept transposed,
// the 1x1 filter read, and its gradient written, in place.
TEST_F(CudaBackendTest, KeptWeightCopiesFollowEveryWriteToTheValues) {
  for (const auto& [math, dtype] : {std::pair{CudaMath::fp32, DType::fp16}, std::pair{CudaMath::tf32, DType::fp32}}) {
    SCOPED_TRACE(math == CudaMath::tf32 ? "tf32" : "fp16");
    std::unique_ptr<CudaBackend> kept;
    {
      const ScopedEnv copies("DLBENCH_CUDA_WEIGHT_COPIES", "kept");
      kept = std::make_unique<CudaBackend>(0, math, dtype);
    }
    CudaBackend per_pass(0, math, dtype);
    ASSERT_EQ(kept->options().at("weightCopies"), "kept");
    ASSERT_EQ(per_pass.options().at("weightCopies"), "per-pass");
    const PhaseOutputs expected = weight_copy_phases(per_pass, dtype);
    const PhaseOutputs actual = weight_copy_phases(*kept, dtype);
    ASSERT_EQ(actual.size(), expected.size());
    for (std::size_t phase = 0; phase < expected.size(); ++phase) {
      for (std::size_t output = 0; output < expected[phase].size(); ++output) {
        EXPECT_LT(relative_error(actual[phase][output], expected[phase][output]), 1e-2)
            << "phase " << phase << ", output " << output;
      }
      if (phase >= 2) {
        for (const std::size_t forward_output : {std::size_t{0}, std::size_t{3}, std::size_t{6}}) {
          EXPECT_GT(relative_error(expected[phase][forward_output], expected[phase - 1][forward_output]), 0.3)
              << "phase " << phase << " wrote new weights, output " << forward_output;
        }
      }
    }
  }
}

// A stem's passes on `backend`: 3 input channels, a 7x7 filter, stride 2, a bias; y, dx written,
// dx added onto drawn values, dw and the bias gradient, in that order.
std::vector<std::vector<float>> stem_passes(CudaBackend& backend, DType dtype) {
  const Conv2dConfig stem{Shape(2, 3, 32, 32), 16, 7, 2, 3, true, dtype};
  DeviceTensors device(backend);
  const Tensor x = device.draw(stem.input, Layout::nhwc, dtype, 51), dy = device.draw(stem.output(), Layout::nhwc, dtype, 52);
  const Tensor w = device.draw(stem.weight(), Layout::plain, DType::fp32, 53);
  const Tensor b = device.draw(Shape(stem.out_channels), Layout::plain, DType::fp32, 54);
  Tensor y = device.draw(stem.output(), Layout::nhwc, dtype, 55), dx = device.draw(stem.input, Layout::nhwc, dtype, 56);
  Tensor dx_sum = device.draw(stem.input, Layout::nhwc, dtype, 57);
  Tensor dw = device.draw(stem.weight(), Layout::plain, DType::fp32, 58);
  Tensor db = device.draw(Shape(stem.out_channels), Layout::plain, DType::fp32, 59);
  auto conv = backend.make_conv2d(stem);
  conv->forward(x, w, &b, y);
  conv->backward_data(dy, w, dx);
  conv->backward_data_accumulate(dy, w, dx_sum);
  conv->backward_weights(x, dy, dw, &db);
  backend.synchronize();
  std::vector<std::vector<float>> out;
  for (const Tensor* t : {&y, &dx, &dx_sum, &dw, &db}) out.push_back(device.read(*t));
  return out;
}

// An amp result whose loss scaling trained little carries its first overflow after the repeats
// (lossScaling.overflow), traced on the device: an inf filter tap in the first convolution skips
// the next step, whose replay in fp16 names that convolution's output first, and leaves the
// weights, the state and the step count as the skip left them.
TEST_F(CudaBackendTest, TheFirstOverflowIsTracedOnTheDeviceInAmp) {
  CudaBackend gpu(0, CudaMath::fp32, DType::fp16);
  Trainer trainer(gpu, small_conv_net(8, 8), Shape(4, 3, 8, 8), 10, SgdConfig{0.05f, 0.9f, 1e-4f}, 3, 0,
                  MemoryReuse::lifetime, DType::fp16);
  trainer.use_loss_scaling({});
  trainer.step();
  const auto& parameters = trainer.parameters().parameters();
  const Parameter& filter = *parameters.front();  // the first convolution's
  const float inf = std::numeric_limits<float>::infinity();
  gpu.copy_from_host(trainer.parameters().values() + filter.offset + 5, &inf, sizeof inf);
  gpu.parameters_written();
  const auto before = trainer.loss_scale();
  int steps = 0;
  const Trainer::OverflowTrace trace = trainer.trace_first_overflow([&] { trainer.step(); ++steps; }, 10);
  const std::string& traced = trace.said;
  EXPECT_EQ(trace.replay, Trainer::ReplayFinding::located) << traced;
  EXPECT_EQ(steps, 1) << traced;
  EXPECT_TRUE(traced.starts_with("untimed step 2 skipped, loss scale now ")) << traced;
  EXPECT_NE(traced.find("\nreplayed at loss scale " + std::to_string(static_cast<int>(before->scale)) +
                        ": forward: first non-finite layer output: 0 (Conv2d), "),
            std::string::npos)
      << traced;
  const auto after = trainer.loss_scale();
  EXPECT_EQ(after->skipped, before->skipped + 1);
  EXPECT_EQ(after->scale, before->scale / 2);
  EXPECT_EQ(trainer.steps_done(), 2u);
}

// A stem read with its 3 channels padded to 4 or 8 (DLBENCH_CUDA_PAD_INPUT_CHANNELS) computes what
// the unpadded one computes on the same GPU, within rounding and each side's own algorithm choice
// (1e-2): a padding channel or tap that was not zero, a filter copied in the wrong order, or a
// gradient read from the padding, would be off by the values' whole size.
TEST_F(CudaBackendTest, AStemReadPaddedToMoreChannelsComputesWhatTheUnpaddedOneDoes) {
  for (const auto& [math, dtype] : {std::pair{CudaMath::fp32, DType::fp16}, std::pair{CudaMath::tf32, DType::fp32}}) {
    for (const char* pad : {"4", "8"}) {
      SCOPED_TRACE(::testing::Message() << (math == CudaMath::tf32 ? "tf32" : "fp16") << ", padded to " << pad);
      std::unique_ptr<CudaBackend> padded;
      {
        const ScopedEnv padding("DLBENCH_CUDA_PAD_INPUT_CHANNELS", pad);
        padded = std::make_unique<CudaBackend>(0, math, dtype);
      }
      CudaBackend unpadded(0, math, dtype);
      ASSERT_EQ(padded->options().at("padInputChannels"), pad);
      ASSERT_EQ(unpadded.options().at("padInputChannels"), "off");
      const std::vector<std::vector<float>> expected = stem_passes(unpadded, dtype);
      const std::vector<std::vector<float>> actual = stem_passes(*padded, dtype);
      const char* names[] = {"y", "dx", "dx added", "dw", "db"};
      for (std::size_t i = 0; i < expected.size(); ++i) {
        EXPECT_LT(relative_error(actual[i], expected[i]), 1e-2) << names[i];
      }
    }
  }
}

}  // namespace
}  // namespace dlbench::worker
