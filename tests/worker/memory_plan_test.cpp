// The memory plan: buffers share memory only when their lifetimes do not overlap, and a
// training step with shared memory computes exactly what it computes with none shared. A
// lifetime that ends too early lets a later buffer overwrite data still to be read, and the
// trajectories part; one that never ends wastes memory, which the size checks catch.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <vector>

#include <gtest/gtest.h>

#include "cpu/cpu_backend.hpp"
#include "activation_reading_pool.hpp"
#include "output_reading_batch_norm.hpp"
#include "residual_composing_backend.hpp"
#include "layers/auxiliary_classifier.hpp"
#include "layers/batch_norm2d.hpp"
#include "layers/bottleneck.hpp"
#include "layers/concat.hpp"
#include "layers/conv2d.hpp"
#include "layers/linear.hpp"
#include "layers/pool2d.hpp"
#include "layers/relu.hpp"
#include "models/model.hpp"
#include "tracing_backend.hpp"
#include "trainer.hpp"

namespace dlbench::worker {
namespace {

bool overlap(const Arena::Placement& a, const Arena::Placement& b) {
  const bool in_time = a.first <= b.last && b.first <= a.last;
  const bool in_memory = a.offset < b.offset + b.bytes && b.offset < a.offset + a.bytes;
  return in_time && in_memory && a.bytes > 0 && b.bytes > 0;
}

void expect_no_conflicts(const Arena& arena) {
  const auto placements = arena.placements();
  for (std::size_t i = 0; i < placements.size(); ++i) {
    for (std::size_t j = i + 1; j < placements.size(); ++j) {
      ASSERT_FALSE(overlap(placements[i], placements[j]))
          << "buffers " << i << " [" << placements[i].first << ", " << placements[i].last << "] and " << j << " ["
          << placements[j].first << ", " << placements[j].last << "] share memory while both are live";
    }
  }
}

TEST(MemoryPlan, TicksMirrorAndLifetimesDecideSharing) {
  CpuBackend backend(1);
  Arena arena;
  Tensor persistent = activation(Shape(1000), Layout::plain, DType::fp32);
  Tensor a = activation(Shape(1000), Layout::plain, DType::fp32), b = a, c = a, d = activation(Shape(2000), Layout::plain, DType::fp32);
  arena.request(persistent);
  const Tick t0 = arena.next_tick(), t1 = arena.next_tick(), t2 = arena.next_tick();
  arena.request(a, t0);
  arena.read(a, t1);  // a: forward 0..1
  arena.request(b, t2);
  arena.read(b, t0.mirrored());  // b: forward 2 .. backward 0, the last moment of the step
  arena.request(c, t2.mirrored());
  arena.read(c, t1.mirrored());  // c: backward 2..1, after a died
  arena.request(d, t1);          // d: read by nobody: one moment
  arena.commit(backend, MemoryReuse::lifetime);
  expect_no_conflicts(arena);

  const auto p = arena.placements();
  // Three ticks: forward 0, 1, 2 are moments 0, 1, 2; backward 2, 1, 0 are moments 4, 5, 6.
  EXPECT_EQ(p[1].first, 0);
  EXPECT_EQ(p[1].last, 1);
  EXPECT_EQ(p[2].first, 2);
  EXPECT_EQ(p[2].last, 6);
  EXPECT_EQ(p[3].first, 4);
  EXPECT_EQ(p[3].last, 5);
  EXPECT_EQ(p[4].first, 1);
  EXPECT_EQ(p[4].last, 1);
  EXPECT_LT(p[0].first, 0);  // the whole step
  EXPECT_GT(p[0].last, 6);
  EXPECT_EQ(c.data, a.data) << "c starts after a's last read: same memory";
  EXPECT_NE(b.data, a.data);
  EXPECT_NE(b.data, c.data);
  // Live at moment 1: persistent, a and d (4 kB + 4 kB + 8 kB).
  EXPECT_EQ(arena.peak_live_bytes(), 4032u + 4032u + 8000u);
  EXPECT_EQ(arena.planned_bytes(), arena.peak_live_bytes());
  EXPECT_LT(arena.planned_bytes(), arena.unshared_bytes());
}

TEST(MemoryPlan, WithoutReuseEveryBufferHasItsOwnMemory) {
  CpuBackend backend(1);
  Arena arena;
  Tensor a = activation(Shape(10), Layout::plain, DType::fp32), b = a;
  const Tick t0 = arena.next_tick(), t1 = arena.next_tick();
  arena.request(a, t0);
  arena.request(b, t1);
  arena.commit(backend, MemoryReuse::none);
  EXPECT_NE(a.data, b.data);
  EXPECT_EQ(arena.planned_bytes(), arena.unshared_bytes());
  EXPECT_THROW(arena.next_tick(), std::logic_error);
}

// Every layer kind in one network: batch norm alone, followed by a ReLU layer and with the
// ReLU in it, strided and identity bottlenecks, both pools, an adaptive pool that is a view
// and one that is not, flatten, dropout and linear layers.
std::unique_ptr<Sequential> every_layer_kind() {
  auto net = std::make_unique<Sequential>();
  net->add<Conv2d>(3, 16, 3, 1, 1);
  net->add<BatchNorm2d>(16);
  net->add<ReLU>();
  net->add<Conv2d>(16, 16, 3, 1, 1);
  net->add<BatchNorm2d>(16, Then::relu);
  net->add<Pool2d>(PoolKind::max, 3, 2, 1);
  net->add<Bottleneck>(16, 8, 2);
  net->add<Bottleneck>(32, 8, 1);
  net->add<AdaptiveAvgPool2d>(4, 4);
  net->add<AdaptiveAvgPool2d>(3, 3);
  net->add<Pool2d>(PoolKind::average, 2, 1);
  net->add<Flatten>();
  net->add<Dropout>(0.25f, 1);
  net->add<Linear>(32 * 2 * 2, 24);
  net->add<ReLU>();
  net->add<Linear>(24, 10);
  return net;
}

// InceptionV3's structure in small: concatenated branches (one nested, one a pool), asymmetric
// and dilated convolutions, and an auxiliary classifier whose input gradient joins the trunk's.
std::unique_ptr<Sequential> branching_layer_kinds() {
  auto net = std::make_unique<Sequential>();
  net->add<Conv2d>(3, 8, 3, 1, 1);
  net->add<BatchNorm2d>(8, Then::relu);
  auto& block = net->add<Concat>();
  block.add_branch().add<Conv2d>(8, 4, 1);
  auto& factorised = block.add_branch();
  factorised.add<Conv2d>(8, 6, ConvSpec{.kernel = {1, 3}, .padding = {0, 1}});
  factorised.add<BatchNorm2d>(6, Then::relu);
  auto& split = factorised.add<Concat>();
  split.add_branch().add<Conv2d>(6, 4, ConvSpec{.kernel = {3, 1}, .padding = {1, 0}});
  split.add_branch().add<Conv2d>(6, 4, ConvSpec{.kernel = 3, .padding = 2, .dilation = 2});
  block.add_branch().add<Pool2d>(PoolKind::max, 3, 1, 1);
  auto head = std::make_unique<Sequential>();
  head->add<Pool2d>(PoolKind::average, 5, 3);
  head->add<Conv2d>(20, 6, 1);
  head->add<BatchNorm2d>(6, Then::relu);
  head->add<Pool2d>(PoolKind::average, 0, 1, 0, true);
  head->add<Flatten>();
  head->add<Linear>(6, 10);
  net->add<AuxiliaryClassifier>(std::move(head), 0.4f);
  net->add<Conv2d>(20, 16, 3, 2, 1);
  net->add<BatchNorm2d>(16, Then::relu);
  net->add<Pool2d>(PoolKind::average, 0, 1, 0, true);
  net->add<Flatten>();
  net->add<Linear>(16, 10);
  return net;
}

struct Trajectory {
  std::vector<float> losses;
  std::vector<float> weights;
  std::size_t arena_bytes = 0;
  std::size_t poisoned = 0;  // buffers the poison mode filled with NaN over the steps
};

CpuBackend& shared_cpu() {
  static CpuBackend backend(2);
  return backend;
}

Trajectory train(std::unique_ptr<Sequential> net, const Shape& input, std::int64_t classes, MemoryReuse reuse,
                 int steps, Arena const** arena_out = nullptr, std::unique_ptr<Trainer>* keep = nullptr,
                 Backend& backend = shared_cpu()) {
  auto trainer = std::make_unique<Trainer>(backend, std::move(net), input, classes, SgdConfig{0.001f, 0.9f, 1e-4f}, 5,
                                           0, reuse);
  Trajectory out;
  for (int i = 0; i < steps; ++i) out.losses.push_back(trainer->step_and_loss());
  const float* values = trainer->parameters().values();
  out.weights.assign(values, values + trainer->parameters().elements());
  out.arena_bytes = trainer->arena_bytes();
  out.poisoned = trainer->arena().poisoned_count();
  if (arena_out != nullptr) *arena_out = &trainer->arena();
  if (keep != nullptr) *keep = std::move(trainer);
  return out;
}

void expect_same_bits(const Trajectory& shared, const Trajectory& unshared) {
  ASSERT_EQ(shared.losses.size(), unshared.losses.size());
  for (std::size_t i = 0; i < shared.losses.size(); ++i) {
    EXPECT_EQ(std::memcmp(&shared.losses[i], &unshared.losses[i], sizeof(float)), 0)
        << "step " << i << ": loss " << shared.losses[i] << " with shared memory, " << unshared.losses[i] << " without";
  }
  ASSERT_EQ(shared.weights.size(), unshared.weights.size());
  std::size_t differing = 0;
  for (std::size_t i = 0; i < shared.weights.size(); ++i) differing += shared.weights[i] != unshared.weights[i];
  EXPECT_EQ(differing, 0u) << "weights differ after " << shared.losses.size() << " steps";
}

// The plan against the truth: a traced step with every buffer in its own memory shows when
// each buffer is really first and last touched; any two buffers the plan puts in the same
// memory must never be in use at the same time. This checks every lifetime declaration,
// including those whose mistakes happen not to change the numbers.
// `residual_fused`, `accumulated`: bottlenecks as a device runs them that fuses their add and ReLU into
// the last batch norm, or adds one branch's input gradient into the other's in a convolution's backward.
// `conv_batch_norm`: bottlenecks whose convolutions run fused with the batch norms between them, as
// it says (empty: none).
void expect_plan_respects_real_use(const std::function<std::unique_ptr<Sequential>()>& build, const Shape& input,
                                   std::int64_t classes, bool fusion = true, bool residual_fused = false,
                                   bool accumulated = false,
                                   const ResidualComposingBackend::ConvolutionFusion& conv_batch_norm = {}) {
  CpuBackend cpu_backend(2);
  ResidualComposingBackend composed(cpu_backend, residual_fused, accumulated, conv_batch_norm);  // as cuDNN can
  Backend& cpu = residual_fused || accumulated || conv_batch_norm ? static_cast<Backend&>(composed) : cpu_backend;
  TracingBackend tracer(cpu);
  tracer.allow_fusion = fusion;
  Trainer traced(tracer, build(), input, classes, SgdConfig{}, 5, 0, MemoryReuse::none);
  traced.step();  // the first step differs (momentum buffers start at the gradient)
  tracer.calls.clear();
  traced.step();
  const auto unshared = traced.arena().placements();
  std::vector<std::pair<std::size_t, std::size_t>> used(unshared.size(), {SIZE_MAX, 0});  // [first, last] call
  for (std::size_t call = 0; call < tracer.calls.size(); ++call) {
    for (const void* address : tracer.calls[call]) {
      const std::int32_t id = traced.arena().buffer_at(address);
      if (id < 0) continue;  // parameters, host memory
      auto& [first, last] = used[static_cast<std::size_t>(id)];
      first = std::min(first, call);
      last = std::max(last, call);
    }
  }
  ASSERT_GT(tracer.calls.size(), 10u);

  TracingBackend planner(cpu);  // the same fusion choices, nothing traced
  planner.allow_fusion = fusion;
  Trainer planned(planner, build(), input, classes, SgdConfig{}, 5, 0, MemoryReuse::lifetime);
  const auto shared = planned.arena().placements();
  ASSERT_EQ(shared.size(), unshared.size());
  std::size_t sharing_pairs = 0;
  for (std::size_t i = 0; i < shared.size(); ++i) {
    for (std::size_t j = i + 1; j < shared.size(); ++j) {
      const bool same_memory = shared[i].offset < shared[j].offset + shared[j].bytes &&
                               shared[j].offset < shared[i].offset + shared[i].bytes && shared[i].bytes > 0 &&
                               shared[j].bytes > 0;
      if (!same_memory || used[i].first == SIZE_MAX || used[j].first == SIZE_MAX) continue;
      ++sharing_pairs;
      ASSERT_TRUE(used[i].second < used[j].first || used[j].second < used[i].first)
          << "buffers " << i << " and " << j << " share memory but are in use at calls [" << used[i].first << ", "
          << used[i].second << "] and [" << used[j].first << ", " << used[j].second << "] of " << tracer.calls.size();
    }
  }
  EXPECT_GT(sharing_pairs, 0u);
}

// The poison mode (every buffer its own memory, NaN from the moment its declared lifetime ends)
// computes exactly what no reuse computes when every op reads only what it declared.
void expect_poison_changes_nothing(const std::function<std::unique_ptr<Sequential>()>& build, const Shape& input,
                                   std::int64_t classes, int steps, const Trajectory& unshared) {
  const Trajectory poisoned = train(build(), input, classes, MemoryReuse::poison, steps);
  expect_same_bits(poisoned, unshared);
  EXPECT_GT(poisoned.poisoned, 0u) << "the poison mode filled no buffer";
  EXPECT_EQ(poisoned.arena_bytes, unshared.arena_bytes) << "poison gives every buffer its own memory";
}

TEST(MemoryPlan, PoisonFillsEachBufferWhenItsLifetimeEnds) {
  CpuBackend backend(1);
  Arena arena;
  Tensor a = activation(Shape(16), Layout::plain, DType::fp32), b = a, kept = a;
  const Tick t0 = arena.next_tick(), t1 = arena.next_tick();
  arena.request(a, t0);
  arena.read(a, t1);  // a: forward 0..1
  arena.request(b, t1);
  arena.read(b, t0.mirrored());  // b: forward 1 .. backward 0
  arena.request(kept);           // the whole step
  arena.commit(backend, MemoryReuse::poison);
  EXPECT_NE(a.data, b.data);
  const auto fill = [](Tensor& t, float v) { std::fill(t.as<float>(), t.as<float>() + t.numel(), v); };
  for (int step = 0; step < 2; ++step) {
    arena.begin_step();
    fill(a, 1.0f);
    fill(kept, 3.0f);
    arena.entering(t0, backend);
    EXPECT_EQ(a.as<float>()[15], 1.0f) << "a is live at its writing tick";
    arena.entering(t1, backend);
    fill(b, 2.0f);
    EXPECT_EQ(a.as<float>()[0], 1.0f) << "a is read at t1";
    arena.entering(t1.mirrored(), backend);
    EXPECT_TRUE(std::isnan(a.as<float>()[0]) && std::isnan(a.as<float>()[15])) << "step " << step << ": a died at t1";
    EXPECT_EQ(b.as<float>()[0], 2.0f);
    arena.entering(t0.mirrored(), backend);
    EXPECT_EQ(b.as<float>()[0], 2.0f) << "b is read at t0's mirror, the step's last moment";
    EXPECT_EQ(kept.as<float>()[0], 3.0f) << "a whole-step buffer is never poisoned";
  }
  EXPECT_EQ(arena.poisoned_count(), 2u);
}

// An op planted on the CPU that reads memory in backward which the reference op does not, in two
// backends: one whose op declares it, one whose op does not. Declared, the layer keeps that memory
// alive and every plan computes the same bits, the same training as the reference CPU ops;
// undeclared, the poison mode catches it.
void expect_declared_reads_are_kept(Backend& declared, Backend& undeclared, const char* what) {
  const Shape input(4, 3, 16, 16);
  const Trajectory unshared = train(every_layer_kind(), input, 10, MemoryReuse::none, 3, nullptr, nullptr, declared);
  const Trajectory honest = train(every_layer_kind(), input, 10, MemoryReuse::lifetime, 3, nullptr, nullptr, declared);
  const Trajectory honest_poisoned = train(every_layer_kind(), input, 10, MemoryReuse::poison, 3, nullptr, nullptr, declared);
  expect_same_bits(honest, unshared);
  expect_same_bits(honest_poisoned, unshared);

  const Trajectory caught = train(every_layer_kind(), input, 10, MemoryReuse::poison, 3, nullptr, nullptr, undeclared);
  ASSERT_EQ(caught.weights.size(), unshared.weights.size());
  std::size_t differing = 0;
  for (std::size_t i = 0; i < caught.weights.size(); ++i) differing += caught.weights[i] != unshared.weights[i];
  EXPECT_GT(differing, caught.weights.size() / 10) << "the poison mode did not catch " << what;
  const Trajectory reference = train(every_layer_kind(), input, 10, MemoryReuse::none, 3);
  for (std::size_t i = 0; i < unshared.losses.size(); ++i) {
    EXPECT_NEAR(unshared.losses[i], reference.losses[i], 1e-5f * reference.losses[i]) << "step " << i;
  }
}

// The CUDA pool's bug: its backward reads x and y, which the reference CPU pool lets die at forward.
TEST(MemoryPlan, APoolThatReadsItsActivationsInBackwardKeepsThemAlive) {
  CpuBackend cpu(2);
  ActivationReadingPoolBackend undeclared(cpu, false), declared(cpu, true);
  expect_declared_reads_are_kept(declared, undeclared, "a pool reading dead x and y");
}

// cuDNN's fused batch norm + ReLU: its backward reads forward's output.
TEST(MemoryPlan, ABatchNormThatReadsItsOutputInBackwardKeepsItAlive) {
  CpuBackend cpu(2);
  OutputReadingBatchNormBackend undeclared(cpu, false), declared(cpu, true);
  expect_declared_reads_are_kept(declared, undeclared, "a batch norm reading a dead y");
}

// cuDNN's batch norm + add + ReLU in a bottleneck's last batch norm: it reads the shortcut's
// output in forward and writes the shortcut's gradient in backward, lifetimes the block declares.
// (Without the block's declarations the poisoned run differs: checked by deleting them.)
TEST(MemoryPlan, ABottleneckThatFusesItsResidualIntoBatchNormKeepsWhatItReads) {
  CpuBackend cpu(2);
  ResidualComposingBackend fused(cpu);
  const Shape input(4, 3, 16, 16);
  const Trajectory unshared = train(every_layer_kind(), input, 10, MemoryReuse::none, 3, nullptr, nullptr, fused);
  expect_same_bits(train(every_layer_kind(), input, 10, MemoryReuse::lifetime, 3, nullptr, nullptr, fused), unshared);
  expect_same_bits(train(every_layer_kind(), input, 10, MemoryReuse::poison, 3, nullptr, nullptr, fused), unshared);
}

// A bottleneck whose last convolution in backward adds its input gradient into the other branch's
// (cuDNN's backward data with beta = 1): conv1 into the identity shortcut's gradient, the
// projection into conv1's. Those buffers live on as the block's input gradient, as it declares;
// with the residual add fused into batch norm too, as amp and bf16 would run it.
TEST(MemoryPlan, ABottleneckThatAccumulatesItsBranchGradientsKeepsWhatItReads) {
  CpuBackend cpu(2);
  const Shape input(4, 3, 16, 16);
  for (const bool residual_fused : {false, true}) {
    ResidualComposingBackend accumulating(cpu, residual_fused, true);
    const Trajectory unshared =
        train(every_layer_kind(), input, 10, MemoryReuse::none, 3, nullptr, nullptr, accumulating);
    expect_same_bits(train(every_layer_kind(), input, 10, MemoryReuse::lifetime, 3, nullptr, nullptr, accumulating),
                     unshared);
    expect_same_bits(train(every_layer_kind(), input, 10, MemoryReuse::poison, 3, nullptr, nullptr, accumulating),
                     unshared);
  }
}

// A bottleneck whose bn1 and bn2 are deferred to its convolutions (cuDNN's fusion engines): conv1
// writes bn1's sums, conv2 and conv3 read the scale and shift forward and backward, and each batch
// norm's backward reads its input x again (or, with its gradients taken by the convolution after,
// that convolution's data gradient reads x and the statistics). Alone, and as amp runs it on a GPU
// (the residual fused into bn3, the branch gradients accumulated). (Without the declarations the
// poisoned run differs: checked by deleting each of them.)
TEST(MemoryPlan, ABottleneckWithBatchNormsDeferredToItsConvolutionsKeepsWhatItReads) {
  CpuBackend cpu(2);
  const Shape input(4, 3, 16, 16);
  for (const bool as_amp_runs : {false, true}) {
   for (const bool gradients : {true, false}) {
    SCOPED_TRACE(gradients ? "the batch norms' gradients in the data gradients" : "the forward passes fused");
    ResidualComposingBackend fused(cpu, as_amp_runs, as_amp_runs,
                                   gradients ? ResidualComposingBackend::every_convolution()
                                             : ResidualComposingBackend::every_convolution_forward());
    const Trajectory unshared = train(every_layer_kind(), input, 10, MemoryReuse::none, 3, nullptr, nullptr, fused);
    expect_same_bits(train(every_layer_kind(), input, 10, MemoryReuse::lifetime, 3, nullptr, nullptr, fused), unshared);
    expect_same_bits(train(every_layer_kind(), input, 10, MemoryReuse::poison, 3, nullptr, nullptr, fused), unshared);
   }
  }
}

TEST(MemoryPlan, PlanRespectsRealUse_EveryLayerKind) {
  expect_plan_respects_real_use(every_layer_kind, Shape(4, 3, 16, 16), 10);
}
TEST(MemoryPlan, PlanRespectsRealUse_EveryLayerKindUnfused) {
  expect_plan_respects_real_use(every_layer_kind, Shape(4, 3, 16, 16), 10, false);
}
TEST(MemoryPlan, PlanRespectsRealUse_EveryLayerKindResidualFused) {
  expect_plan_respects_real_use(every_layer_kind, Shape(4, 3, 16, 16), 10, true, true);
}
TEST(MemoryPlan, PlanRespectsRealUse_EveryLayerKindGradientsAccumulated) {
  expect_plan_respects_real_use(every_layer_kind, Shape(4, 3, 16, 16), 10, true, false, true);
  expect_plan_respects_real_use(every_layer_kind, Shape(4, 3, 16, 16), 10, true, true, true);
}
TEST(MemoryPlan, PlanRespectsRealUse_EveryLayerKindConvolutionsFusedWithBatchNorms) {
  for (const auto& fusion :
       {ResidualComposingBackend::every_convolution(), ResidualComposingBackend::every_convolution_forward()}) {
    expect_plan_respects_real_use(every_layer_kind, Shape(4, 3, 16, 16), 10, true, false, false, fusion);
    expect_plan_respects_real_use(every_layer_kind, Shape(4, 3, 16, 16), 10, true, true, true, fusion);
  }
}
TEST(MemoryPlan, PlanRespectsRealUse_ResNet50ConvolutionsFusedWithBatchNorms) {
  for (const auto& fusion :
       {ResidualComposingBackend::every_convolution(), ResidualComposingBackend::every_convolution_forward()}) {
    expect_plan_respects_real_use([] { return build_model("resnet50", 10); }, Shape(2, 3, 32, 32), 10, true, true,
                                  true, fusion);
  }
}
TEST(MemoryPlan, PlanRespectsRealUse_ResNet50GradientsAccumulated) {
  expect_plan_respects_real_use([] { return build_model("resnet50", 10); }, Shape(2, 3, 32, 32), 10, true, true, true);
}

// Batch norm with its ReLU fused trains like batch norm followed by a ReLU op (the backend's
// unfused path): the same function (oneDNN 2.6 gives the same bits on AVX-512; other kernels
// may sum in another order).
TEST(Fusion, BatchNormReluFusedTrainsLikeSeparateOps) {
  CpuBackend cpu(2);
  TracingBackend fused(cpu), separate(cpu);
  separate.allow_fusion = false;
  const auto run = [](Backend& backend) {
    Trainer trainer(backend, every_layer_kind(), Shape(4, 3, 16, 16), 10, SgdConfig{0.001f, 0.9f, 1e-4f}, 5);
    Trajectory out;
    for (int i = 0; i < 3; ++i) out.losses.push_back(trainer.step_and_loss());
    out.weights.assign(trainer.parameters().values(), trainer.parameters().values() + trainer.parameters().elements());
    return out;
  };
  const Trajectory a = run(fused), b = run(separate);
  for (std::size_t i = 0; i < a.losses.size(); ++i) EXPECT_NEAR(a.losses[i], b.losses[i], 1e-5f * b.losses[i]) << i;
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < a.weights.size(); ++i) {
    diff += std::pow(static_cast<double>(a.weights[i]) - static_cast<double>(b.weights[i]), 2);
    norm += std::pow(static_cast<double>(b.weights[i]), 2);
  }
  EXPECT_LT(std::sqrt(diff / norm), 1e-6);
  // Five batch norms with a ReLU (one, and two in each bottleneck): a ReLU forward and backward
  // more for each in each of the three steps.
  EXPECT_EQ(separate.calls.size(), fused.calls.size() + 5 * 2 * 3) << "the unfused path did not run";
}
// Three steps of every layer kind, with and without memory reuse: `fused` trains bit for bit as
// `separate` does, in `fewer_calls` fewer backend calls.
void expect_same_training_in_fewer_calls(TracingBackend& fused, TracingBackend& separate, std::size_t fewer_calls,
                                         const char* what) {
  const Shape input(4, 3, 16, 16);
  for (const MemoryReuse reuse : {MemoryReuse::none, MemoryReuse::lifetime}) {
    fused.calls.clear();
    separate.calls.clear();
    const Trajectory a = train(every_layer_kind(), input, 10, reuse, 3, nullptr, nullptr, fused);
    const Trajectory b = train(every_layer_kind(), input, 10, reuse, 3, nullptr, nullptr, separate);
    expect_same_bits(a, b);
    EXPECT_EQ(separate.calls.size(), fused.calls.size() + fewer_calls) << what;
  }
}

// A bottleneck whose last batch norm adds the shortcut and applies the ReLU trains as the block's
// own add + ReLU after it: the same values in another order of calls (bit for bit on the CPU).
TEST(Fusion, BottleneckResidualFusedIntoBatchNormTrainsLikeTheBlocksOwnAdd) {
  CpuBackend cpu(2);
  ResidualComposingBackend fused_backend(cpu);
  TracingBackend fused(fused_backend), separate(cpu);
  // Two bottlenecks: each block's add and ReLU forward (two calls: the tracer composes add_relu
  // from both) and its ReLU backward are now inside the batch norm, in each of the three steps.
  expect_same_training_in_fewer_calls(fused, separate, 2 * 3 * 3, "the fused path did not run");
}

// A bottleneck whose branches' input gradients meet in a convolution's backward (beta = 1) trains as
// the block's own sum: the same additions in another order of calls (bit for bit on the CPU).
TEST(Fusion, BottleneckGradientsAccumulatedInAConvolutionTrainLikeTheBlocksOwnSum) {
  CpuBackend cpu(2);
  for (const bool residual_fused : {false, true}) {
    ResidualComposingBackend accumulating_backend(cpu, residual_fused, true), summing_backend(cpu, residual_fused, false);
    TracingBackend accumulated(accumulating_backend), summed(summing_backend);
    // Two bottlenecks: each block's sum of its branches' gradients is now inside a convolution's
    // backward, in each of the three steps.
    expect_same_training_in_fewer_calls(accumulated, summed, 2 * 3, "the accumulating path did not run");
  }
}

// The bottlenecks' convolutions fused with the batch norms between them (FusedConv2dOp, composed on
// the host as cpu/conv_batch_norm.cpp does) train as the layers apart: the same function to
// rounding (the batch norms from sums add in fp64, oneDNN's in fp32), with no normalised tensor of
// bn1 and bn2 in the plan.
TEST(Fusion, BottleneckConvolutionsFusedWithTheirBatchNormsTrainLikeTheLayersApart) {
  CpuBackend cpu(2);
  const Shape input(4, 3, 16, 16);
  // Alone, and with the residual fused into bn3 as amp runs on a GPU, where bn3 takes its
  // statistics from conv3's sums too.
  for (const bool residual_fused : {false, true}) {
    SCOPED_TRACE(residual_fused ? "residual fused" : "residual apart");
   // With the data gradients taking bn1's and bn2's gradients (cuDNN's DgradDreluBNBwdWeight), and without.
   for (const bool gradients : {true, false}) {
    SCOPED_TRACE(gradients ? "the batch norms' gradients in the data gradients" : "the forward passes fused");
    ResidualComposingBackend fused_backend(cpu, residual_fused, false,
                                           gradients ? ResidualComposingBackend::every_convolution()
                                                     : ResidualComposingBackend::every_convolution_forward());
    ResidualComposingBackend apart_backend(cpu, residual_fused, false);
    std::unique_ptr<Trainer> fused_trainer;
    const Trajectory fused =
        train(every_layer_kind(), input, 10, MemoryReuse::none, 3, nullptr, &fused_trainer, fused_backend);
    const Trajectory apart = train(every_layer_kind(), input, 10, MemoryReuse::none, 3, nullptr, nullptr, apart_backend);
    const FusedBlocks count = count_fused_blocks(fused_trainer->network());
    EXPECT_EQ(count.blocks, 2);
    EXPECT_EQ(count.fused, 2) << "both bottlenecks fuse their convolutions";
    EXPECT_EQ(count.gradients, gradients ? 2 : 0) << "and their data gradients with the batch norms' gradients, if asked";
    ASSERT_EQ(fused.losses.size(), apart.losses.size());
    for (std::size_t i = 0; i < fused.losses.size(); ++i) {
      EXPECT_NEAR(fused.losses[i], apart.losses[i], 1e-5f * apart.losses[i]) << "step " << i;
    }
    double diff = 0, norm = 0, moved = 0;
    ASSERT_EQ(fused.weights.size(), apart.weights.size());
    const Trajectory start = train(every_layer_kind(), input, 10, MemoryReuse::none, 0, nullptr, nullptr, cpu);
    for (std::size_t i = 0; i < fused.weights.size(); ++i) {
      diff += std::pow(static_cast<double>(fused.weights[i]) - static_cast<double>(apart.weights[i]), 2);
      moved += std::pow(static_cast<double>(apart.weights[i]) - static_cast<double>(start.weights[i]), 2);
      norm += std::pow(static_cast<double>(apart.weights[i]), 2);
    }
    EXPECT_GT(moved, 0.0) << "training moved no weight";
    EXPECT_LT(std::sqrt(diff / moved), 1e-3) << "of what the three steps moved";
    EXPECT_LT(std::sqrt(diff / norm), 1e-6);
    EXPECT_LT(fused.arena_bytes, apart.arena_bytes) << "bn1's and bn2's outputs are no longer in the plan";
   }
  }
}

// A block asks first for the fusion a device is likeliest to refuse, a convolution reading a
// normalised input (no engine offers it in bf16 on an H200), and where refused asks nothing more:
// conv1's statistics fusion, which there only a runtime-compiled engine offers, is never built for
// a block that cannot fuse.
TEST(Fusion, ABlockWhoseNormalisedInputCannotFuseAsksForNoOtherFusion) {
  CpuBackend cpu(1);
  for (const bool normalised_input_fuses : {false, true}) {
    SCOPED_TRACE(normalised_input_fuses ? "every fusion offered" : "no normalised input fused");
    std::vector<bool> asked;  // each ask's normalized_input, in order
    ResidualComposingBackend backend(cpu, true, false, [&](const FusedConv2dConfig& c) {
      asked.push_back(c.normalized_input);
      return c.normalized_input && !normalised_input_fuses ? std::nullopt : std::optional<FusedConv2dConfig>(c);
    });
    std::unique_ptr<Trainer> trainer;
    train(every_layer_kind(), Shape(2, 3, 16, 16), 10, MemoryReuse::none, 1, nullptr, &trainer, backend);
    const int fused_blocks = count_fused_blocks(trainer->network()).fused;
    ASSERT_FALSE(asked.empty());
    EXPECT_TRUE(asked.front()) << "the first ask reads a normalised input";
    if (normalised_input_fuses) {
      EXPECT_EQ(fused_blocks, 2);
      EXPECT_EQ(std::count(asked.begin(), asked.end(), false), 2) << "conv1 of each block, once both others fused";
    } else {
      EXPECT_EQ(fused_blocks, 0);
      EXPECT_EQ(std::count(asked.begin(), asked.end(), false), 0) << "conv1 never asked for";
    }
  }
}

// The CPU's route takes DLBENCH_CPU_CONV_BATCH_NORM's names, says which it took, and refuses others.
TEST(Fusion, TheConvolutionBatchNormRouteIsASwitchWithNames) {
  CpuBackend cpu(1);
  EXPECT_EQ(cpu.options().at("convBatchNorm"), "separate");
  const Conv2dConfig conv{Shape(2, 8, 6, 6), 8, Extent2{1}, 1, Extent2{0}, false, DType::fp32, 1};
  EXPECT_EQ(cpu.make_fused_conv2d({conv, true, true}), nullptr) << "apart unless fused is asked for";
  cpu.set_conv_batch_norm_route(ConvBatchNormRoute::fused);
  EXPECT_EQ(cpu.options().at("convBatchNorm"), "fused");
  EXPECT_NE(cpu.make_fused_conv2d({conv, true, true}), nullptr);
  // fused takes the batch norm's gradients into the data gradient where asked; fused-forward does not.
  EXPECT_TRUE(cpu.make_fused_conv2d({conv, true, true, true})->fuses_input_batch_norm_gradients());
  EXPECT_FALSE(cpu.make_fused_conv2d({conv, true, true, false})->fuses_input_batch_norm_gradients());
  cpu.set_conv_batch_norm_route(ConvBatchNormRoute::fused_forward);
  EXPECT_EQ(cpu.options().at("convBatchNorm"), "fused-forward");
  EXPECT_FALSE(cpu.make_fused_conv2d({conv, true, true, true})->fuses_input_batch_norm_gradients());
  EXPECT_EQ(conv_batch_norm_route("DLBENCH_CPU_CONV_BATCH_NORM", "fused-forward"), ConvBatchNormRoute::fused_forward);
  EXPECT_EQ(conv_batch_norm_route("DLBENCH_CPU_CONV_BATCH_NORM", "fused"), ConvBatchNormRoute::fused);
  EXPECT_EQ(conv_batch_norm_route("DLBENCH_CPU_CONV_BATCH_NORM", nullptr), ConvBatchNormRoute::separate);
  try {
    (void)conv_batch_norm_route("DLBENCH_CPU_CONV_BATCH_NORM", "yes");
    ADD_FAILURE() << "yes was taken";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "DLBENCH_CPU_CONV_BATCH_NORM: \"yes\" is not one of separate, fused, fused-forward");
  }
}

TEST(MemoryPlan, PlanRespectsRealUse_ResNet50) {
  expect_plan_respects_real_use([] { return build_model("resnet50", 10); }, Shape(2, 3, 32, 32), 10);
}
TEST(MemoryPlan, PlanRespectsRealUse_AlexNet) {
  expect_plan_respects_real_use([] { return build_model("alexnet", 10); }, Shape(2, 3, 63, 63), 10);
}

TEST(MemoryPlan, PlanRespectsRealUse_Branches) {
  expect_plan_respects_real_use(branching_layer_kinds, Shape(4, 3, 16, 16), 10);
  expect_plan_respects_real_use(branching_layer_kinds, Shape(4, 3, 16, 16), 10, false);
}
TEST(MemoryPlan, PlanRespectsRealUse_InceptionV3) {
  expect_plan_respects_real_use([] { return build_model("inception_v3", 10); }, Shape(2, 3, 299, 299), 10);
}

// DeepLabV3+ at a non-square size whose strides round (layer1 17×25, layer4 5×7): the skip from
// layer1 to the decoder, the size notes and the resizes keep their buffers alive long enough.
TEST(MemoryPlan, PlanRespectsRealUse_DeepLabV3Plus) {
  expect_plan_respects_real_use([] { return build_model("deeplabv3plus", 5); }, Shape(2, 3, 65, 97), 5);
}

TEST(MemoryPlan, SharedMemoryTrainsBitForBitLikeUnshared_DeepLabV3Plus) {
  const Shape input(2, 3, 65, 97);
  const Trajectory shared = train(build_model("deeplabv3plus", 5), input, 5, MemoryReuse::lifetime, 2);
  const Trajectory unshared = train(build_model("deeplabv3plus", 5), input, 5, MemoryReuse::none, 2);
  expect_same_bits(shared, unshared);
  expect_poison_changes_nothing([] { return build_model("deeplabv3plus", 5); }, input, 5, 2, unshared);
  EXPECT_LT(shared.arena_bytes, unshared.arena_bytes / 2);
  // Per-pixel labels over 5 classes and one ignore value: the first loss is about ln 5.
  EXPECT_NEAR(shared.losses[0], std::log(5.0f), 0.5f);
}

TEST(MemoryPlan, SharedMemoryTrainsBitForBitLikeUnshared_Branches) {
  const Shape input(4, 3, 16, 16);
  std::unique_ptr<Trainer> trainer;
  const Arena* arena = nullptr;
  const Trajectory shared = train(branching_layer_kinds(), input, 10, MemoryReuse::lifetime, 3, &arena, &trainer);
  const Trajectory unshared = train(branching_layer_kinds(), input, 10, MemoryReuse::none, 3);
  expect_same_bits(shared, unshared);
  expect_poison_changes_nothing(branching_layer_kinds, input, 10, 3, unshared);
  expect_no_conflicts(*arena);
  EXPECT_LT(shared.arena_bytes, unshared.arena_bytes);
  // The auxiliary term counts: the first loss is the sum of both heads' (about 1.4 · ln 10).
  EXPECT_GT(shared.losses[0], 1.2f * std::log(10.0f));
}

TEST(MemoryPlan, SharedMemoryTrainsBitForBitLikeUnshared_InceptionV3) {
  const Shape input(2, 3, 299, 299);
  const Trajectory shared = train(build_model("inception_v3", 10), input, 10, MemoryReuse::lifetime, 2);
  const Trajectory unshared = train(build_model("inception_v3", 10), input, 10, MemoryReuse::none, 2);
  expect_same_bits(shared, unshared);
  expect_poison_changes_nothing([] { return build_model("inception_v3", 10); }, input, 10, 2, unshared);
  EXPECT_LT(shared.arena_bytes, unshared.arena_bytes / 2);
}

TEST(MemoryPlan, SharedMemoryTrainsBitForBitLikeUnshared_EveryLayerKind) {
  const Shape input(4, 3, 16, 16);
  std::unique_ptr<Trainer> trainer;
  const Arena* arena = nullptr;
  const Trajectory shared = train(every_layer_kind(), input, 10, MemoryReuse::lifetime, 3, &arena, &trainer);
  const Trajectory unshared = train(every_layer_kind(), input, 10, MemoryReuse::none, 3);
  expect_same_bits(shared, unshared);
  expect_poison_changes_nothing(every_layer_kind, input, 10, 3, unshared);
  expect_no_conflicts(*arena);
  EXPECT_LT(shared.arena_bytes, unshared.arena_bytes);
}

TEST(MemoryPlan, SharedMemoryTrainsBitForBitLikeUnshared_ResNet50) {
  const Shape input(2, 3, 32, 32);
  std::unique_ptr<Trainer> trainer;
  const Arena* arena = nullptr;
  const Trajectory shared = train(build_model("resnet50", 10), input, 10, MemoryReuse::lifetime, 3, &arena, &trainer);
  const Trajectory unshared = train(build_model("resnet50", 10), input, 10, MemoryReuse::none, 3);
  expect_same_bits(shared, unshared);
  expect_poison_changes_nothing([] { return build_model("resnet50", 10); }, input, 10, 3, unshared);
  expect_no_conflicts(*arena);
  // The plan keeps what backward needs (about a third of all buffers) and packs it well.
  EXPECT_LT(shared.arena_bytes, unshared.arena_bytes * 4 / 10);
  EXPECT_LE(shared.arena_bytes, arena->peak_live_bytes() * 11 / 10);
}

TEST(MemoryPlan, SharedMemoryTrainsBitForBitLikeUnshared_AlexNet) {
  const Shape input(2, 3, 63, 63);  // 63 → 15 → 7 → 3 → 1: the adaptive pool is not a view
  const Trajectory shared = train(build_model("alexnet", 10), input, 10, MemoryReuse::lifetime, 2);
  const Trajectory unshared = train(build_model("alexnet", 10), input, 10, MemoryReuse::none, 2);
  expect_same_bits(shared, unshared);
  expect_poison_changes_nothing([] { return build_model("alexnet", 10); }, input, 10, 2, unshared);
  EXPECT_LT(shared.arena_bytes, unshared.arena_bytes);
}

}  // namespace
}  // namespace dlbench::worker
