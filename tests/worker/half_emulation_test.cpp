// fp16 emulated on the CPU (cpu/half_emulation.hpp): each fp16 op is the backend's fp32 op between
// roundings, the parameters rounded where the CUDA backend's half kernels read them rounded, and
// values past fp16's range inf where a half kernel would store them.
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cpu/cpu_backend.hpp"
#include "cpu/half_emulation.hpp"
#include "models/small_conv_net.hpp"
#include "precision.hpp"
#include "tensor.hpp"
#include "trainer.hpp"

namespace dlbench::worker {
namespace {

using ::testing::HasSubstr;

// Host memory for a tensor (the CPU backend's memory is the host's).
struct Buffer {
  std::vector<std::byte> bytes;
  Tensor tensor;
  Buffer(const Shape& shape, DType dtype, Layout layout) {
    tensor.shape = shape;
    tensor.dtype = dtype;
    tensor.layout = layout;
    bytes.resize(tensor.bytes());
    tensor.data = bytes.data();
  }
  Buffer(const Shape& shape, DType dtype, Layout layout, const std::vector<float>& values) : Buffer(shape, dtype, layout) {
    const std::vector<std::byte> encoded = encode(values.data(), values.size(), dtype);
    bytes = encoded;
    tensor.data = bytes.data();
  }
  std::vector<float> values() const { return decode(bytes.data(), static_cast<std::size_t>(tensor.numel()), tensor.dtype); }
};

std::vector<float> draws(std::int64_t count, std::mt19937& rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(count));
  for (float& e : v) e = normal(rng);
  return v;
}

std::vector<float> through_half(std::vector<float> v) {
  round_through_half(v.data(), static_cast<std::int64_t>(v.size()), v.data());
  return v;
}

// Each value as fp16's bits, so that equal means bit for bit (infinities and signed zeros too).
std::vector<std::uint16_t> half_bits(const std::vector<float>& v) {
  std::vector<std::uint16_t> bits;
  for (const float f : v) bits.push_back(fp16::from_float(f).bits);
  return bits;
}

std::unique_ptr<CpuBackend> emulating_backend() {
  auto backend = std::make_unique<CpuBackend>(2);
  backend->set_fp16(CpuFp16::emulated);
  return backend;
}

TEST(HalfEmulation, TheBackendSaysWhetherItEmulatesFp16) {
  CpuBackend backend(2);
  backend.set_fp16(CpuFp16::refused);
  ASSERT_TRUE(backend.cannot_compute(DType::fp16));
  EXPECT_THAT(*backend.cannot_compute(DType::fp16), HasSubstr("DLBENCH_CPU_FP16=emulated"));
  EXPECT_EQ(backend.options().at("fp16"), "refused");
  backend.set_fp16(CpuFp16::emulated);
  EXPECT_FALSE(backend.cannot_compute(DType::fp16));
  EXPECT_EQ(backend.options().at("fp16"), "emulated");
  EXPECT_THROW(cpu_fp16_choice("DLBENCH_CPU_FP16", "native"), std::invalid_argument);
  EXPECT_EQ(cpu_fp16_choice("DLBENCH_CPU_FP16", nullptr), CpuFp16::refused);
}

// Every pass of an fp16 convolution is the fp32 convolution of the widened activations and the
// weights rounded through fp16, its activation outputs rounded to fp16, bit for bit; the filter
// gradient rounded through fp16 (cuDNN computes it in the half type) and the bias gradient not.
TEST(HalfEmulation, AConvolutionIsItsFp32OpOnRoundedWeights) {
  const auto emulated = emulating_backend();
  CpuBackend full(2);
  Conv2dConfig c;
  c.input = Shape(2, 5, 6, 7);
  c.out_channels = 4;
  c.kernel = 3;
  c.padding = 1;
  c.bias = true;
  c.dtype = DType::fp16;
  Conv2dConfig c32 = c;
  c32.dtype = DType::fp32;
  const Shape out = c.output();
  std::mt19937 rng(7);
  const std::vector<float> x = through_half(draws(c.input.numel(), rng));
  const std::vector<float> w = draws(c.weight().numel(), rng);
  const std::vector<float> b = draws(c.out_channels, rng);
  const std::vector<float> dy = through_half(draws(out.numel(), rng));

  auto half_op = emulated->make_conv2d(c);
  auto full_op = full.make_conv2d(c32);
  const Buffer weight(c.weight(), DType::fp32, Layout::plain, w);
  const Buffer rounded_weight(c.weight(), DType::fp32, Layout::plain, through_half(w));
  const Buffer bias(Shape(c.out_channels), DType::fp32, Layout::plain, b);

  const Buffer x16(c.input, DType::fp16, Layout::nhwc, x), x32(c.input, DType::fp32, Layout::nhwc, x);
  Buffer y16(out, DType::fp16, Layout::nhwc), y32(out, DType::fp32, Layout::nhwc);
  half_op->forward(x16.tensor, weight.tensor, &bias.tensor, y16.tensor);
  full_op->forward(x32.tensor, rounded_weight.tensor, &bias.tensor, y32.tensor);
  EXPECT_EQ(half_bits(y16.values()), half_bits(y32.values()));
  // The weights' rounding shows: the unrounded weights give another output.
  Buffer unrounded(out, DType::fp32, Layout::nhwc);
  full_op->forward(x32.tensor, weight.tensor, &bias.tensor, unrounded.tensor);
  EXPECT_NE(half_bits(y16.values()), half_bits(unrounded.values()));

  const Buffer dy16(out, DType::fp16, Layout::nhwc, dy), dy32(out, DType::fp32, Layout::nhwc, dy);
  Buffer dx16(c.input, DType::fp16, Layout::nhwc), dx32(c.input, DType::fp32, Layout::nhwc);
  half_op->backward_data(dy16.tensor, weight.tensor, dx16.tensor);
  full_op->backward_data(dy32.tensor, rounded_weight.tensor, dx32.tensor);
  EXPECT_EQ(half_bits(dx16.values()), half_bits(dx32.values()));

  Buffer dw16(c.weight(), DType::fp32, Layout::plain), dw32(c.weight(), DType::fp32, Layout::plain);
  Buffer db16(Shape(c.out_channels), DType::fp32, Layout::plain), db32(Shape(c.out_channels), DType::fp32, Layout::plain);
  half_op->backward_weights(x16.tensor, dy16.tensor, dw16.tensor, &db16.tensor);
  full_op->backward_weights(x32.tensor, dy32.tensor, dw32.tensor, &db32.tensor);
  EXPECT_EQ(dw16.values(), through_half(dw32.values()));
  EXPECT_NE(dw16.values(), dw32.values()) << "the filter gradient was not rounded";
  EXPECT_EQ(db16.values(), db32.values());
}

// Past 65,504 a half kernel stores inf. A convolution's output, and its filter gradient, which
// sums over every pixel of the batch: the first layer's, where the real-data amp runs overflowed.
// A linear layer's weight gradient leaves cuBLASLt in fp32 and stays finite at the same sum.
TEST(HalfEmulation, ValuesPastHalfsRangeAreInfinities) {
  const auto backend = emulating_backend();
  Conv2dConfig c;
  c.input = Shape(3, 1, 10, 10);  // 300 pixels
  c.out_channels = 1;
  c.dtype = DType::fp16;
  auto conv = backend->make_conv2d(c);
  const Buffer x(c.input, DType::fp16, Layout::nhwc, std::vector<float>(300, 256.0f));
  const Buffer w(c.weight(), DType::fp32, Layout::plain, {512.0f});
  Buffer y(c.output(), DType::fp16, Layout::nhwc);
  conv->forward(x.tensor, w.tensor, nullptr, y.tensor);
  for (const float v : y.values()) ASSERT_EQ(v, INFINITY);  // 131,072
  const Buffer dy(c.output(), DType::fp16, Layout::nhwc, std::vector<float>(300, 1.0f));
  Buffer dw(c.weight(), DType::fp32, Layout::plain);
  conv->backward_weights(x.tensor, dy.tensor, dw.tensor, nullptr);
  EXPECT_EQ(dw.values()[0], INFINITY);  // 300 · 256 = 76,800

  LinearConfig l;
  l.batch = 300;
  l.in_features = 1;
  l.out_features = 1;
  l.bias = false;
  l.dtype = DType::fp16;
  auto linear = backend->make_linear(l);
  const Buffer rows(Shape(300, 1), DType::fp16, Layout::plain, std::vector<float>(300, 256.0f));
  const Buffer drows(Shape(300, 1), DType::fp16, Layout::plain, std::vector<float>(300, 1.0f));
  Buffer dlw(Shape(1, 1), DType::fp32, Layout::plain);
  linear->backward_weights(rows.tensor, drows.tensor, dlw.tensor, nullptr);
  EXPECT_EQ(dlw.values()[0], 76800.0f);
}

// A linear layer reads its weights and bias rounded to fp16, as the CUDA backend's copies hold
// them: a weight of 2^-26 is 0, and a bias of 1 + 2^-12 is 1.
TEST(HalfEmulation, ALinearLayerReadsItsParametersRounded) {
  const auto backend = emulating_backend();
  LinearConfig l;
  l.batch = 1;
  l.in_features = 2;
  l.out_features = 2;
  l.dtype = DType::fp16;
  auto linear = backend->make_linear(l);
  // y0 = 32768 · 2^-26 (2^-11 if the weight were read as it is); y1 = 1 · -1 + (1 + 2^-12).
  const Buffer x(Shape(1, 2), DType::fp16, Layout::plain, {32768.0f, 1.0f});
  const Buffer w(Shape(2, 2), DType::fp32, Layout::plain, {std::ldexp(1.0f, -26), 0.0f, 0.0f, -1.0f});
  const Buffer b(Shape(2), DType::fp32, Layout::plain, {0.0f, 1.0f + std::ldexp(1.0f, -12)});
  Buffer y(Shape(1, 2), DType::fp16, Layout::plain);
  linear->forward(x.tensor, w.tensor, &b.tensor, y.tensor);
  EXPECT_EQ(y.values(), (std::vector<float>{0.0f, 0.0f}));
}

// Inserting a branch into a concatenation leaves the whole's other channels as they were.
TEST(HalfEmulation, AChannelSliceKeepsTheWholesOtherChannels) {
  const auto backend = emulating_backend();
  auto slice = backend->make_channel_slice(Shape(1, 1, 1, 2), 3, 1, DType::fp16);
  const Buffer part(Shape(1, 1, 1, 2), DType::fp16, Layout::nhwc, {7.0f, 8.0f});
  Buffer whole(Shape(1, 3, 1, 2), DType::fp16, Layout::nhwc, {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f});
  slice->insert(part.tensor, whole.tensor);
  EXPECT_EQ(whole.values(), (std::vector<float>{1.0f, 7.0f, 3.0f, 4.0f, 8.0f, 6.0f}));  // NHWC: channel 1 of each pixel
  Buffer back(Shape(1, 1, 1, 2), DType::fp16, Layout::nhwc);
  slice->extract(whole.tensor, back.tensor);
  EXPECT_EQ(back.values(), (std::vector<float>{7.0f, 8.0f}));
}

// An activation handed over in another type than fp16 is a caller's error, named.
TEST(HalfEmulation, AnActivationThatIsNotFp16IsRefused) {
  const auto backend = emulating_backend();
  auto relu = backend->make_relu(Shape(4), DType::fp16);
  const Buffer x(Shape(4), DType::fp32, Layout::plain, {1.0f, -1.0f, 2.0f, -2.0f});
  Buffer y(Shape(4), DType::fp16, Layout::plain);
  try {
    relu->forward(x.tensor, y.tensor);
    FAIL() << "an fp32 activation was taken";
  } catch (const std::logic_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("a fp32 activation [4] where fp16 was expected"));
  }
}

// fp16's range reaches the loss-scaling trace: one filter tap of 60,000 (finite in fp16) makes the
// first convolution's output inf in fp16 and the step skip, its replay naming that convolution's
// output first. The same tap in fp32 overflows nothing, and no step skips.
TEST(HalfEmulation, AnOutputPastFp16sRangeSkipsTheStepAndTheReplayNamesItsLayer) {
  const auto emulated = emulating_backend();
  for (const DType dtype : {DType::fp16, DType::fp32}) {
    SCOPED_TRACE(to_string(dtype));
    Trainer trainer(*emulated, small_conv_net(8, 8), Shape(4, 3, 8, 8), 10, SgdConfig{0.05f, 0.9f, 1e-4f}, 3, 0,
                    MemoryReuse::lifetime, dtype);
    trainer.use_loss_scaling({});
    trainer.step();
    const Parameter& filter = *trainer.parameters().parameters().front();  // the first convolution's
    trainer.parameters().values()[filter.offset + 5] = 60000.0f;
    emulated->parameters_written();
    const auto before = trainer.loss_scale();
    int steps = 0;
    const Trainer::OverflowTrace trace = trainer.trace_first_overflow([&] { trainer.step(); ++steps; }, 3);
    if (dtype == DType::fp32) {
      EXPECT_EQ(steps, 3) << trace.said;
      EXPECT_EQ(trainer.loss_scale()->skipped, before->skipped);
      continue;
    }
    EXPECT_EQ(trace.replay, Trainer::ReplayFinding::located) << trace.said;
    EXPECT_EQ(steps, 1) << trace.said;
    EXPECT_THAT(trace.said, HasSubstr("\nreplayed at loss scale " + std::to_string(static_cast<int>(before->scale)) +
                                      ": forward: first non-finite layer output: 0 (Conv2d), "));
    EXPECT_EQ(trainer.loss_scale()->skipped, before->skipped + 1);
  }
}

}  // namespace
}  // namespace dlbench::worker
