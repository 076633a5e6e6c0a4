// The whole training step on the CPU backend: it learns, it is deterministic.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cpu/cpu_backend.hpp"
#include "cuda/weight_copies.hpp"
#include "delegating_backend.hpp"
#include "input/image_transform.hpp"
#include "input/image_packing.hpp"
#include "input/packed_images.hpp"
#include "layers/batch_norm2d.hpp"
#include "layers/conv2d.hpp"
#include "layers/linear.hpp"
#include "layers/pool2d.hpp"
#include "layers/relu.hpp"
#include "models/model.hpp"
#include "models/small_conv_net.hpp"
#include "precision.hpp"
#include "trainer.hpp"
#include "same_state_steps.hpp"

namespace dlbench::worker {
namespace {

TEST(Training, SmallConvNetLearnsItsBatch) {
  CpuBackend backend(2);
  Trainer trainer(backend, small_conv_net(), Shape(16, 3, 16, 16), 10, {0.05f, 0.9f, 0.0f}, 1);
  const float first = trainer.step_and_loss();
  EXPECT_NEAR(first, std::log(10.0f), 1.0f);  // about chance at the start
  float last = first;
  int steps = 1;
  for (; steps < 200 && last > 0.1f * first; ++steps) last = trainer.step_and_loss();
  EXPECT_LE(last, 0.1f * first) << "loss " << first << " → " << last << " after " << steps << " steps";
}

// Real data reaches the device in the input's own type (the pipeline's threads converted it) and
// is copied as it is; floats are still converted, to the same bits; any other pairing is a bug.
TEST(Training, ABatchLoadsInTheInputsOwnTypeOrAsFloatsConvertedToTheSameBits) {
  CpuBackend backend(2);
  const Shape shape(4, 3, 16, 16);
  std::vector<float> pixels(static_cast<std::size_t>(shape.numel()));
  for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = std::sin(0.37f * static_cast<float>(i)) * 2.1f + 1e-3f;
  const std::vector<std::int32_t> labels{3, 1, 4, 1};
  std::vector<std::uint16_t> bf16_bits(pixels.size());
  for (std::size_t i = 0; i < pixels.size(); ++i) bf16_bits[i] = bf16::from_float(pixels[i]).bits;

  Trainer fp32(backend, small_conv_net(), shape, 10, {0.05f, 0.9f, 0.0f}, 1);
  fp32.load_batch(pixels.data(), DType::fp32, labels.data());
  std::vector<float> back;
  std::vector<std::int32_t> back_labels;
  fp32.copy_batch_to_host(back, back_labels);
  EXPECT_EQ(back_labels, labels);
  std::vector<float> sorted_in = pixels, sorted_back = back;  // the same values, whatever the layout
  std::sort(sorted_in.begin(), sorted_in.end());
  std::sort(sorted_back.begin(), sorted_back.end());
  EXPECT_EQ(sorted_back, sorted_in);
  try {
    fp32.load_batch(bf16_bits.data(), DType::bf16, labels.data());
    ADD_FAILURE() << "a bf16 batch loaded into an fp32 input";
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(), "load_batch: pixels of bf16 for an input of fp32");
  }

  if (const auto why = backend.cannot_compute(DType::bf16)) GTEST_SKIP() << *why;
  Trainer half(backend, small_conv_net(), shape, 10, {0.05f, 0.9f, 0.0f}, 1, 0, MemoryReuse::lifetime, DType::bf16);
  half.load_batch(pixels.data(), DType::fp32, labels.data());
  std::vector<float> converted_here, converted_before;
  half.copy_batch_to_host(converted_here, back_labels);
  half.load_batch(bf16_bits.data(), DType::bf16, labels.data());
  half.copy_batch_to_host(converted_before, back_labels);
  EXPECT_EQ(converted_before, converted_here);
  std::size_t rounded = 0;
  for (std::size_t i = 0; i < pixels.size(); ++i) rounded += converted_here[i] != pixels[i];
  EXPECT_GT(rounded, pixels.size() / 2);  // it is bf16 on the device, not the floats
}

// The parameter store shows its backend where the flat values are, so that a backend keeping
// copies of them (the CUDA backend's kept weight copies, cuda/weight_copies.hpp) finds every
// parameter at its own offset there, and nothing else (the gradients) among them.
TEST(Training, TheParameterStoreShowsItsBackendWhereEveryParameterLies) {
  class Binding final : public DelegatingBackend {
   public:
    using DelegatingBackend::DelegatingBackend;
    void bind_parameters(const std::shared_ptr<const void>& values, std::int64_t elements) override {
      ++binds;
      copies.bind(values, elements);
      DelegatingBackend::bind_parameters(values, elements);
    }
    int binds = 0;
    KeptWeightCopies copies;
  };
  CpuBackend cpu(2);
  Binding backend(cpu);
  Trainer trainer(backend, small_conv_net(), Shape(2, 3, 16, 16), 10, {0.05f, 0.9f, 0.0f}, 1);
  EXPECT_EQ(backend.binds, 1);
  ASSERT_FALSE(trainer.parameters().parameters().empty());
  for (const Parameter* p : trainer.parameters().parameters()) {
    EXPECT_EQ(backend.copies.offset_of(p->value.data, p->value.numel()), p->offset) << p->name;
    EXPECT_EQ(backend.copies.offset_of(p->grad.data, p->grad.numel()), std::nullopt) << p->name;
  }
}

// A CPU backend that overlaps host copies as a GPU's does: a staged copy reads its host memory
// only when it "completes", at take_staged or wait_staged_reads, whichever comes first, so a
// trainer that let the host memory go before waiting would train on what was written there next.
class OverlappingCopies final : public DelegatingBackend {
 public:
  explicit OverlappingCopies(Backend& inner) : DelegatingBackend(inner) {}
  bool overlaps_host_copies() const override { return true; }
  void stage_from_host(void* staging, const void* host, std::size_t bytes) override {
    calls.push_back("stage");
    pending_.push_back([=] { std::memcpy(staging, host, bytes); });
  }
  // Only batches whose every image skips both passes (shipped at the output's size): the
  // normaliser's table and the mirror, which is all a resize does to them. After the copies before it.
  void expand_staged_images(void* staging, const void* packed, std::int64_t images, int side, DType dtype,
                            bool channels_last) override {
    calls.push_back("expand");
    pending_.push_back([=] {
      ASSERT_EQ(dtype, DType::fp32);
      const auto* bytes = static_cast<const std::byte*>(packed);
      const auto* table = reinterpret_cast<const float*>(bytes + input::PackedBatchLayout::kNormalizer);
      const auto* entries = reinterpret_cast<const input::PackedImage*>(bytes + input::PackedBatchLayout::kTable);
      auto* out = static_cast<float*>(staging);
      const std::int64_t plane = static_cast<std::int64_t>(side) * side;
      for (std::int64_t n = 0; n < images; ++n) {
        const input::PackedImage& e = entries[n];
        ASSERT_EQ(e.need_horizontal + e.need_vertical, 0);
        const auto* pixels = reinterpret_cast<const std::uint8_t*>(bytes + e.pixels);
        for (int c = 0; c < 3; ++c) {
          for (int y = 0; y < side; ++y) {
            for (int x = 0; x < side; ++x) {
              const int from = e.flip != 0 ? side - 1 - x : x;
              const std::int64_t at = y * side + x;
              out[channels_last ? (n * plane + at) * 3 + c : (n * 3 + c) * plane + at] =
                  table[c * 256 + pixels[y * e.stride + from * 3 + c]];
            }
          }
        }
      }
    });
  }
  void take_staged(void* device, const void* staging, std::size_t bytes) override {
    calls.push_back("take");
    complete();
    std::memcpy(device, staging, bytes);
  }
  void wait_staged_reads() override {
    calls.push_back("wait");
    complete();
  }
  std::vector<std::string> calls;

 private:
  void complete() {
    for (const auto& done : pending_) done();
    pending_.clear();
  }
  std::vector<std::function<void()>> pending_;  // copies and expansions, in the order queued
};

// A batch staged while the step before runs (real data on a GPU) trains the step it was staged
// for, bit for bit as a batch loaded before it, though the pipeline writes the next batch into
// the same host memory as soon as release_staged_host_memory returns; each batch is taken by its
// step before the next is staged. Where the backend does not overlap, staging loads at once.
TEST(Training, AStagedBatchTrainsTheStepItWasStagedForAsALoadedOneDoes) {
  CpuBackend cpu(2);
  const Shape shape(4, 3, 16, 16);
  const auto batch = [&](int k) {
    std::vector<float> pixels(static_cast<std::size_t>(shape.numel()));
    for (std::size_t i = 0; i < pixels.size(); ++i) pixels[i] = std::sin(0.37f * static_cast<float>(i) + static_cast<float>(k));
    return std::make_pair(pixels, std::vector<std::int32_t>{k % 10, (k + 3) % 10, (k + 5) % 10, (k + 7) % 10});
  };
  constexpr int kSteps = 4;
  std::vector<float> loaded;
  {
    Trainer trainer(cpu, small_conv_net(), shape, 10, {0.05f, 0.9f, 0.0f}, 1);
    for (int k = 0; k < kSteps; ++k) {
      const auto [pixels, labels] = batch(k);
      trainer.load_batch(pixels.data(), DType::fp32, labels.data());
      loaded.push_back(trainer.step_and_loss());
    }
  }
  for (const bool overlapping : {true, false}) {
    SCOPED_TRACE(overlapping ? "overlapping copies" : "the CPU's own");
    OverlappingCopies overlap(cpu);
    Backend& backend = overlapping ? static_cast<Backend&>(overlap) : cpu;
    // The pipeline's one slot, rewritten for every batch. Made before the trainer, as a case's
    // pipeline is: the trainer's destructor waits for the last batch staged from it.
    auto ring = batch(0);
    Trainer trainer(backend, small_conv_net(), shape, 10, {0.05f, 0.9f, 0.0f}, 1);
    trainer.stage_batch(ring.first.data(), DType::fp32, ring.second.data());
    std::vector<float> staged;
    for (int k = 0; k < kSteps; ++k) {
      staged.push_back(trainer.step_and_loss());
      trainer.release_staged_host_memory();
      ring = batch(k + 1);
      trainer.stage_batch(ring.first.data(), DType::fp32, ring.second.data());
    }
    EXPECT_EQ(staged, loaded);
    if (overlapping) {
      const std::vector<std::string> step{"take", "take", "wait", "stage", "stage"};  // pixels and labels
      std::vector<std::string> expected{"stage", "stage"};
      for (int k = 0; k < kSteps; ++k) expected.insert(expected.end(), step.begin(), step.end());
      EXPECT_EQ(overlap.calls, expected);
      try {
        trainer.stage_batch(ring.first.data(), DType::fp32, ring.second.data());
        ADD_FAILURE() << "a second batch staged before a step took the first";
      } catch (const std::logic_error& e) {
        EXPECT_STREQ(e.what(), "stage_batch: the batch staged before has not been trained on");
      }
    }
  }
}

// A batch the decoding threads packed for the device to resize (DLBENCH_INPUT_RESIZE=device) is
// copied, then resized on the device into the staged input, then its labels copied, each step
// training on the batch staged for it as a loaded batch of the same values; a backend that does not
// overlap host copies is never given one.
TEST(Training, APackedBatchIsCopiedThenResizedOnTheDeviceAndTrainsAsTheBatchItHolds) {
  CpuBackend cpu(2);
  constexpr int kSide = 16;
  const Shape shape(4, 3, kSide, kSide);
  const input::Normalizer normalizer;
  const std::size_t capacity = input::packed_batch_capacity(4, kSide);
  // The floats a loaded batch holds, in the input's own layout (channels last on the CPU).
  const input::PixelLayout layout = Trainer(cpu, small_conv_net(), shape, 10, {0.05f, 0.9f, 0.0f}, 1).input().layout ==
                                            Layout::nhwc
                                        ? input::PixelLayout::nhwc
                                        : input::PixelLayout::nchw;
  // Batch k: its images' RGB8 pixels, the floats the host pipeline makes of them, the packed batch.
  struct Made {
    std::vector<float> floats;
    std::vector<std::byte> packed;
    std::size_t bytes = 0;
    std::vector<std::int32_t> labels;
  };
  const auto batch = [&](int k) {
    Made m;
    m.packed.resize(capacity);
    std::memcpy(m.packed.data(), normalizer.table(), input::PackedBatchLayout::kTable);
    std::atomic<std::uint64_t> used{input::PackedBatchLayout::payload(4)};
    input::TransformScratch scratch;
    const std::size_t plane_values = 3 * kSide * kSide;
    m.floats.resize(4 * plane_values);
    for (int n = 0; n < 4; ++n) {
      std::vector<std::uint8_t> rgb(plane_values);
      for (std::size_t i = 0; i < rgb.size(); ++i) rgb[i] = static_cast<std::uint8_t>((i * 37 + static_cast<std::size_t>(k * 11 + n * 5)) % 256);
      const bool flip = (n + k) % 2 == 1;
      normalizer.write(rgb.data(), kSide, kSide, flip, layout, m.floats.data() + static_cast<std::size_t>(n) * plane_values);
      input::DecodedCrop crop;
      crop.part = input::DecodedPart{rgb.data(), kSide * 3, 0, 0, kSide, kSide};
      crop.x1 = crop.y1 = kSide;
      auto* entry = reinterpret_cast<input::PackedImage*>(m.packed.data() + input::PackedBatchLayout::kTable) + n;
      input::pack_decoded_crop(crop, flip, kSide, scratch, input::PackedSlot{m.packed.data(), entry, &used});
      m.labels.push_back((k + 3 * n) % 10);
    }
    m.bytes = used.load();
    return m;
  };
  constexpr int kSteps = 3;
  std::vector<float> loaded;
  {
    Trainer trainer(cpu, small_conv_net(), shape, 10, {0.05f, 0.9f, 0.0f}, 1);
    for (int k = 0; k < kSteps; ++k) {
      const Made m = batch(k);
      trainer.load_batch(m.floats.data(), DType::fp32, m.labels.data());
      loaded.push_back(trainer.step_and_loss());
    }
  }
  OverlappingCopies overlap(cpu);
  Made ring = batch(0);  // before the trainer, whose destructor waits for the last batch staged from it
  Trainer trainer(overlap, small_conv_net(), shape, 10, {0.05f, 0.9f, 0.0f}, 1);
  trainer.stage_packed_images(ring.packed.data(), ring.bytes, capacity, kSide, DType::fp32, ring.labels.data());
  std::vector<float> staged;
  for (int k = 0; k < kSteps; ++k) {
    staged.push_back(trainer.step_and_loss());
    trainer.release_staged_host_memory();
    ring = batch(k + 1);
    trainer.stage_packed_images(ring.packed.data(), ring.bytes, capacity, kSide, DType::fp32, ring.labels.data());
  }
  EXPECT_EQ(staged, loaded);
  std::vector<std::string> expected{"stage", "expand", "stage"};
  for (int k = 0; k < kSteps; ++k) {
    for (const char* call : {"take", "take", "wait", "stage", "expand", "stage"}) expected.emplace_back(call);
  }
  EXPECT_EQ(overlap.calls, expected);
  // Another side, type or a batch past its capacity is a caller's mistake, refused before anything is queued.
  Trainer other(overlap, small_conv_net(), shape, 10, {0.05f, 0.9f, 0.0f}, 1);
  EXPECT_THROW(other.stage_packed_images(ring.packed.data(), ring.bytes, capacity, kSide * 2, DType::fp32, ring.labels.data()),
               std::logic_error);
  EXPECT_THROW(other.stage_packed_images(ring.packed.data(), ring.bytes, capacity, kSide, DType::fp16, ring.labels.data()),
               std::logic_error);
  EXPECT_THROW(other.stage_packed_images(ring.packed.data(), capacity + 1, capacity, kSide, DType::fp32, ring.labels.data()),
               std::logic_error);
  Trainer on_cpu(cpu, small_conv_net(), shape, 10, {0.05f, 0.9f, 0.0f}, 1);
  try {
    on_cpu.stage_packed_images(ring.packed.data(), ring.bytes, capacity, kSide, DType::fp32, ring.labels.data());
    ADD_FAILURE() << "the cpu backend took a packed batch";
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(), "stage_packed_images: the cpu backend resizes no images");
  }
}

TEST(Training, ResNet50LossDecreasesAtSmallImages) {
  CpuBackend backend(2);
  // lr 0.1 × batch/256 (Goyal et al.) would be 0.0016 at batch 4; 0.1 makes the first steps diverge.
  Trainer trainer(backend, build_model("resnet50"), Shape(4, 3, 64, 64), 1000, {0.005f, 0.9f, 1e-4f}, 42);
  EXPECT_EQ(trainer.parameter_count(), 25'557'032);
  std::vector<float> losses;
  for (int i = 0; i < 4; ++i) losses.push_back(trainer.step_and_loss());
  for (const float l : losses) EXPECT_TRUE(std::isfinite(l));
  EXPECT_NEAR(losses.front(), std::log(1000.0f), 1.5f);
  EXPECT_LT(losses.back(), losses.front());
  EXPECT_LT(trainer.loss(), losses.front());
}

// Every parameter starts on a 256-byte boundary of the flat buffers, whatever the length of the
// one before (the conv's 216 weights, the batch norm's 8, the classifier's 10 biases), and the padding between them stays
// zero through SGD, AdamW and LAMB: no optimizer moves it, and the loss-scale check and the
// gradient norm over the whole buffer see nothing there.
TEST(Training, EveryParameterStartsOnA256ByteBoundaryAndThePaddingStaysZero) {
  for (const char* optimizer : {"sgd", "adamw", "lamb"}) {
    CpuBackend backend(2);
    Trainer trainer(backend, small_conv_net(8, 8), Shape(4, 3, 8, 8), 10, {0.05f, 0.9f, 1e-4f}, 3);
    const AdamWConfig adam{1e-3f, 0.9f, 0.999f, 1e-6f, 0.01f, 1.0f};
    if (std::string(optimizer) == "adamw") trainer.use_adamw(adam);
    if (std::string(optimizer) == "lamb") trainer.use_lamb(adam);
    ParameterStore& store = trainer.parameters();
    std::int64_t count = 0, padded = 0;
    std::vector<bool> padding(static_cast<std::size_t>(store.elements()), true);
    for (const Parameter* p : store.parameters()) {
      EXPECT_EQ(p->offset % 64, 0) << p->name;
      EXPECT_EQ(p->offset, padded) << p->name;
      EXPECT_EQ(static_cast<const float*>(p->value.data), store.values() + p->offset) << p->name;
      EXPECT_EQ(static_cast<const float*>(p->grad.data), store.grads() + p->offset) << p->name;
      for (std::int64_t i = 0; i < p->value.numel(); ++i) padding[static_cast<std::size_t>(p->offset + i)] = false;
      count += p->value.numel();
      padded = (padded + p->value.numel() + 63) / 64 * 64;
    }
    EXPECT_EQ(store.count(), count);
    EXPECT_EQ(trainer.parameter_count(), count);
    EXPECT_EQ(store.elements(), padded);
    ASSERT_GT(store.elements(), store.count()) << "the premise: some parameter is padded";
    std::vector<float> losses;
    for (int i = 0; i < 3; ++i) losses.push_back(trainer.step_and_loss());
    EXPECT_LT(losses.back(), losses.front()) << optimizer;
    std::vector<const float*> buffers{store.values(), store.grads(), store.momentum()};
    if (store.second_moment() != nullptr) buffers.push_back(store.second_moment());
    for (const float* buffer : buffers) {
      for (std::size_t i = 0; i < padding.size(); ++i) {
        if (padding[i]) {
          ASSERT_EQ(buffer[i], 0.0f) << optimizer << ": element " << i << " of the padding";
        }
      }
    }
  }
}

// Weights the caller sets (--init-from's) are not drawn first: the store starts at zero, and once
// the drawn trainer's values are copied in, both train the same batch to the same losses.
TEST(Training, WeightsSetByTheCallerAreNotDrawnAndTrainAsDrawnOnesDo) {
  CpuBackend backend(2);
  const Shape input(4, 3, 16, 16);
  Trainer drawn(backend, small_conv_net(), input, 10, {0.05f, 0.9f, 0.0f}, 5);
  Trainer loaded(backend, small_conv_net(), input, 10, {0.05f, 0.9f, 0.0f}, 5, 0, MemoryReuse::lifetime, DType::fp32,
                 InitialWeights::set_by_caller());
  const ParameterStore& from = drawn.parameters();
  const ParameterStore& to = loaded.parameters();
  ASSERT_EQ(from.elements(), to.elements());
  const auto elements = static_cast<std::size_t>(to.elements());
  ASSERT_TRUE(std::any_of(from.values(), from.values() + elements, [](float v) { return v != 0.0f; }));
  EXPECT_TRUE(std::all_of(to.values(), to.values() + elements, [](float v) { return v == 0.0f; }))
      << "weights left to the caller were drawn anyway";
  std::copy_n(from.values(), elements, to.values());
  for (int step = 0; step < 3; ++step) {
    EXPECT_EQ(drawn.step_and_loss(), loaded.step_and_loss()) << "step " << step;
  }
}

// Same seed and threads: the same bits, step after step; another seed: other weights and another
// loss trajectory. The learning rate is small enough that the model cannot memorise its batch
// in these steps: at lr 0.1 on 2 samples the loss reaches exactly 0.0 for every seed on CPUs
// where oneDNN picks AVX-512 kernels, and two runs would then agree for the wrong reason.
TEST(Training, SameSeedAndThreadsGiveBitIdenticalTrajectory) {
  struct Outcome {
    std::vector<float> losses;
    std::vector<float> weights;
  };
  const auto run = [](std::uint64_t seed) {
    CpuBackend backend(2);
    Trainer trainer(backend, build_model("resnet50"), Shape(4, 3, 32, 32), 1000, {0.001f, 0.9f, 1e-4f}, seed);
    Outcome out;
    for (int i = 0; i < 3; ++i) out.losses.push_back(trainer.step_and_loss());
    const float* values = trainer.parameters().values();
    out.weights.assign(values, values + trainer.parameters().elements());
    return out;
  };
  const Outcome a = run(7), b = run(7), c = run(8);
  for (const auto* outcome : {&a, &c}) {
    for (const float loss : outcome->losses) {
      // The premise: nothing saturated, so equality below means determinism, not a fixed point.
      ASSERT_TRUE(std::isfinite(loss));
      ASSERT_GT(loss, 1.0f) << "the model memorised its batch; the comparison would prove nothing";
    }
  }
  ASSERT_EQ(a.losses.size(), b.losses.size());
  EXPECT_EQ(std::memcmp(a.losses.data(), b.losses.data(), a.losses.size() * sizeof(float)), 0)
      << a.losses[2] << " vs " << b.losses[2];
  ASSERT_EQ(a.weights.size(), b.weights.size());
  EXPECT_EQ(std::memcmp(a.weights.data(), b.weights.data(), a.weights.size() * sizeof(float)), 0);
  EXPECT_NE(std::memcmp(a.weights.data(), c.weights.data(), a.weights.size() * sizeof(float)), 0);
  EXPECT_NE(std::memcmp(a.losses.data(), c.losses.data(), a.losses.size() * sizeof(float)), 0);
}

TEST(Training, SgdMatchesPyTorchRule) {
  CpuBackend backend(1);
  float w[] = {1.0f, -2.0f};
  const float g[] = {0.5f, 0.25f};
  float buf[] = {0.0f, 0.0f};
  backend.sgd_update(w, g, buf, 2, SgdConfig{0.1f, 0.9f, 0.01f}, 1, nullptr);
  // d = g + wd·w = {0.51, 0.23}; buf = d; w -= 0.1·buf
  EXPECT_FLOAT_EQ(buf[0], 0.51f);
  EXPECT_FLOAT_EQ(w[0], 1.0f - 0.051f);
  EXPECT_FLOAT_EQ(w[1], -2.0f - 0.023f);
  backend.sgd_update(w, g, buf, 2, SgdConfig{0.1f, 0.9f, 0.01f}, 2, nullptr);
  const float d0 = 0.5f + 0.01f * 0.949f;
  EXPECT_FLOAT_EQ(buf[0], 0.9f * 0.51f + d0);
  EXPECT_FLOAT_EQ(w[0], 0.949f - 0.1f * (0.9f * 0.51f + d0));
}

TEST(Training, BatchNormRunningStatisticsFollowPyTorch) {
  CpuBackend backend(1);
  auto net = std::make_unique<Sequential>();
  auto& bn = net->add<BatchNorm2d>(1);
  net->add<Flatten>();
  net->add<Linear>(2, 2);  // a sample is 1 x 1 x 2
  Trainer trainer(backend, std::move(net), Shape(2, 1, 1, 2), 2, {0.1f, 0.0f, 0.0f}, 3);
  const Tensor& x = trainer.input();
  double mean = 0, squares = 0;
  for (std::int64_t i = 0; i < 4; ++i) mean += static_cast<double>(x.as<float>()[i]);
  mean /= 4;
  for (std::int64_t i = 0; i < 4; ++i) {
    const double d = static_cast<double>(x.as<float>()[i]) - mean;
    squares += d * d;
  }
  trainer.loss();
  // running = 0.9 · initial + 0.1 · batch; the variance is unbiased (n - 1 = 3).
  EXPECT_NEAR(static_cast<double>(bn.running_mean().as<float>()[0]), 0.1 * mean, 1e-6);
  EXPECT_NEAR(static_cast<double>(bn.running_var().as<float>()[0]), 0.9 + 0.1 * squares / 3.0, 1e-5);
}

// A linear layer whose input has another width is refused at setup, before any kernel reads
// past the input (oneDNN would: it trusts the shapes it is given).
TEST(Training, ALinearLayerRefusesAnInputOfAnotherWidth) {
  CpuBackend backend(1);
  auto net = std::make_unique<Sequential>();
  net->add<Flatten>();
  net->add<Linear>(4, 2);
  try {
    Trainer trainer(backend, std::move(net), Shape(2, 1, 1, 2), 2, {0.1f, 0.0f, 0.0f}, 3);
    ADD_FAILURE() << "a 2-feature input was accepted by Linear(4, 2)";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("Linear(4, 2): input [2, 2] does not have 4 features"), std::string::npos)
        << e.what();
  }
}

namespace dlbench::worker {
namespace {

TEST(Training, StepGraphsNeedABackendThatCaptures) {
  CpuBackend cpu(1);
  Trainer trainer(cpu, build_model("alexnet"), Shape(2, 3, 64, 64), 1000, SgdConfig{}, 1, 0);
  EXPECT_THROW(trainer.use_step_graph(true), std::invalid_argument);
  trainer.use_step_graph(false);
  const float loss = trainer.step_and_loss();
  EXPECT_EQ(trainer.last_loss(), loss);  // eager: the step's own loss
  EXPECT_FALSE(trainer.step_graph_active());
}

// Dropout masks mix in the step the backend was last given (begin_step), not one the layer
// baked in: that is what lets a replayed CUDA graph advance them. Steps give begin_step 0, 1, 2…
TEST(Training, DropoutMasksFollowTheStepTheBackendIsGiven) {
  CpuBackend cpu(1);
  const Shape shape(4, 64);
  std::vector<float> x(static_cast<std::size_t>(shape.numel()), 1.0f), y(x.size());
  Tensor tx, ty;
  tx.shape = ty.shape = shape;
  tx.data = x.data();
  ty.data = y.data();
  const auto output_at = [&](std::uint64_t step) {
    cpu.begin_step(step);
    cpu.dropout_forward(tx, ty, 0.5f, 77);
    return y;
  };
  const std::vector<float> third = output_at(3), fourth = output_at(4);
  EXPECT_NE(third, fourth);
  EXPECT_EQ(output_at(3), third);
  const auto kept = std::count_if(third.begin(), third.end(), [](float m) { return m == 2.0f; });
  EXPECT_GT(kept, 64);  // about half of 256 survive, scaled by 2
  EXPECT_LT(kept, 192);

  class StepLog final : public DelegatingBackend {
   public:
    using DelegatingBackend::DelegatingBackend;
    void begin_step(std::uint64_t step) override {
      steps.push_back(step);
      inner_.begin_step(step);
    }
    std::vector<std::uint64_t> steps;
  } backend(cpu);
  Trainer trainer(backend, small_conv_net(8, 8, 0.5f), Shape(4, 3, 8, 8), 10, {0.05f, 0.9f, 0.0f}, 1);
  for (int i = 0; i < 3; ++i) trainer.step();
  trainer.loss();  // forward only: the step it would be
  EXPECT_EQ(backend.steps, (std::vector<std::uint64_t>{0, 1, 2, 3}));
}

}  // namespace
}  // namespace dlbench::worker

// A backend whose SGD forgets the momentum it was handed from the second step on (as a trainer
// whose momentum buffer another allocation overwrote between steps would).
class MomentumForgettingBackend final : public DelegatingBackend {
 public:
  using DelegatingBackend::DelegatingBackend;
  void sgd_update(float* v, const float* g, float* b, std::int64_t n, const SgdConfig& c, std::uint64_t t,
                  const LossScaleState* s) override {
    DelegatingBackend::sgd_update(v, g, b, n, c, 1, s);  // "update 1": the buffer restarts from g
    (void)t;
  }
};

// The GPU tests' harness (same_state_steps.hpp) on two CPU trainers: identical backends agree
// bit for bit; a backend that mishandles the state carried between steps is caught by the update
// it takes, though every single step's forward and backward are right.
TEST(Training, StepsFromTheSameStateAgreeAndCatchStateCarriedWrongly) {
  CpuBackend reference_backend(2), backend(2);
  const Shape input(8, 3, 16, 16);
  const SgdConfig sgd{0.05f, 0.9f, 1e-4f};
  {
    Trainer reference(reference_backend, small_conv_net(), input, 10, sgd, 3);
    Trainer twin(backend, small_conv_net(), input, 10, sgd, 3);
    const testing::SameStateSteps same = testing::step_from_the_same_state(reference_backend, reference, backend, twin, 4);
    EXPECT_EQ(same.worst_loss, 0.0);
    EXPECT_EQ(same.worst_update, 0.0);
  }
  MomentumForgettingBackend forgetting(backend);
  Trainer reference(reference_backend, small_conv_net(), input, 10, sgd, 3);
  Trainer faulty(forgetting, small_conv_net(), input, 10, sgd, 3);
  const testing::SameStateSteps steps = testing::step_from_the_same_state(reference_backend, reference, forgetting, faulty, 4);
  EXPECT_EQ(steps.worst_loss, 0.0);  // each step starts from the reference's weights
  EXPECT_GT(steps.worst_update, 0.5);  // the momentum it dropped is most of a later update
  EXPECT_GE(steps.worst_update_step, 1);
}

}  // namespace
}  // namespace dlbench::worker
