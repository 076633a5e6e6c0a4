// Element types as data: conversions round as the libraries do, and a tensor refuses to be
// read as a type it does not hold.
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <gtest/gtest.h>

#include "precision.hpp"
#include "tensor.hpp"

namespace dlbench::worker {
namespace {

float from_bits(std::uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, 4);
  return f;
}

TEST(Precision, Bf16RoundsToNearestEven) {
  EXPECT_EQ(bf16::from_float(1.0f).bits, 0x3F80);
  EXPECT_EQ(bf16::from_float(-2.0f).bits, 0xC000);
  // 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties go to the even mantissa (1).
  EXPECT_EQ(bf16::from_float(from_bits(0x3F808000)).bits, 0x3F80);
  // 1 + 3·2^-8 is halfway between 1 + 2^-7 (odd) and 1 + 2^-6: up to the even one.
  EXPECT_EQ(bf16::from_float(from_bits(0x3F818000)).bits, 0x3F82);
  // Just above halfway rounds up.
  EXPECT_EQ(bf16::from_float(from_bits(0x3F808001)).bits, 0x3F81);
  EXPECT_EQ(bf16::from_float(std::numeric_limits<float>::infinity()).bits, 0x7F80);
  // The largest float rounds to infinity, as in oneDNN and PyTorch.
  EXPECT_EQ(bf16::from_float(std::numeric_limits<float>::max()).bits, 0x7F80);
  EXPECT_TRUE(std::isnan(bf16::from_float(std::numeric_limits<float>::quiet_NaN()).to_float()));
  // A signalling NaN whose payload sits in the low bits stays a NaN (not infinity).
  EXPECT_TRUE(std::isnan(bf16::from_float(from_bits(0x7F800001)).to_float()));
  for (const float v : {0.0f, 1.5f, -3.25f, 65504.0f, 1e-30f}) {
    EXPECT_EQ(bf16::from_float(bf16::from_float(v).to_float()).bits, bf16::from_float(v).bits) << v;
  }
  EXPECT_EQ(bf16{0x3FC0}.to_float(), 1.5f);
}

TEST(Precision, Fp16RoundsToNearestEvenWithSubnormalsAndOverflow) {
  EXPECT_EQ(fp16::from_float(1.0f).bits, 0x3C00);
  EXPECT_EQ(fp16::from_float(-2.0f).bits, 0xC000);
  EXPECT_EQ(fp16::from_float(65504.0f).bits, 0x7BFF);  // the largest half
  EXPECT_EQ(fp16::from_float(65519.0f).bits, 0x7BFF);  // below the halfway point to 2^16
  EXPECT_EQ(fp16::from_float(65520.0f).bits, 0x7C00);  // halfway: rounds to infinity
  EXPECT_EQ(fp16::from_float(std::ldexp(1.0f, -14)).bits, 0x0400);  // the smallest normal
  EXPECT_EQ(fp16::from_float(std::ldexp(1.0f, -24)).bits, 0x0001);  // the smallest subnormal
  EXPECT_EQ(fp16::from_float(std::ldexp(1.0f, -25)).bits, 0x0000);  // halfway to it: even (zero)
  EXPECT_EQ(fp16::from_float(std::ldexp(3.0f, -25)).bits, 0x0002);  // 1.5 ulp: to even (2)
  // 1 + 2^-11 is halfway between 1 and the next half: even (1).
  EXPECT_EQ(fp16::from_float(1.0f + std::ldexp(1.0f, -11)).bits, 0x3C00);
  EXPECT_EQ(fp16::from_float(1.0f + 3 * std::ldexp(1.0f, -11)).bits, 0x3C02);
  EXPECT_TRUE(std::isnan(fp16::from_float(std::numeric_limits<float>::quiet_NaN()).to_float()));
  EXPECT_EQ(fp16{0x7C00}.to_float(), std::numeric_limits<float>::infinity());
  EXPECT_EQ(fp16{0x0001}.to_float(), std::ldexp(1.0f, -24));
  EXPECT_EQ(fp16{0x8400}.to_float(), -std::ldexp(1.0f, -14));
  // Every half converts to float and back unchanged (NaNs stay NaNs).
  for (std::uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const fp16 h{static_cast<std::uint16_t>(bits)};
    const float f = h.to_float();
    if (std::isnan(f)) continue;
    ASSERT_EQ(fp16::from_float(f).bits, h.bits) << std::hex << bits;
  }
}

// store_halves on the CPU's F16C unit gives fp16::from_float's bits: every half, the float
// halfway to its neighbour and one float either side of that (ties to even, in the subnormals,
// at the overflow to infinity), infinities, NaNs with payloads, and counts that leave a tail.
TEST(Precision, HalvesOnF16cAreTheSoftwareConversionsBits) {
  if (!halves_convert_on_f16c()) GTEST_SKIP() << "needs F16C (and AVX); this CPU converts halves in software";
  std::vector<float> values;
  for (std::uint32_t bits = 0; bits <= 0xFFFF; ++bits) {
    const float h = fp16{static_cast<std::uint16_t>(bits)}.to_float();
    values.push_back(h);
    if (!std::isfinite(h)) continue;
    // Halfway to the next half up in magnitude: the float whose bits sit between the two.
    const auto u = std::bit_cast<std::uint32_t>(h);
    const std::uint32_t up = std::bit_cast<std::uint32_t>(fp16{static_cast<std::uint16_t>(bits + 1)}.to_float());
    if ((bits & 0x7FFFu) == 0x7BFFu) {  // the largest finite half: halfway to 2^16
      values.push_back(std::copysign(65520.0f, h));
    } else if ((bits & 0x7FFFu) < 0x7C00u) {
      const float mid = (h + std::bit_cast<float>(up)) / 2.0f;  // exact: both are halves
      values.push_back(mid);
      values.push_back(std::nextafter(mid, 0.0f));
      values.push_back(std::nextafter(mid, std::copysign(INFINITY, mid)));
    }
    values.push_back(std::bit_cast<float>(u + 1));
  }
  for (const std::uint32_t nan : {0x7FC00000u, 0x7FC12345u, 0xFFFFFFFFu, 0x7F800001u, 0xFFA00000u}) {
    values.push_back(std::bit_cast<float>(nan));
  }
  values.push_back(1e30f);
  values.push_back(-1e-30f);
  values.push_back(65536.0f);
  for (const std::size_t count : {values.size(), values.size() - 3, std::size_t{5}}) {
    std::vector<std::uint16_t> out(count);
    store_halves(values.data(), count, out.data());
    for (std::size_t i = 0; i < count; ++i) {
      ASSERT_EQ(out[i], fp16::from_float(values[i]).bits)
          << std::hex << std::bit_cast<std::uint32_t>(values[i]) << " (" << values[i] << "), of " << std::dec << count;
    }
  }
}

// load_halves widens every half to fp16::to_float's value, on F16C or in software (NaNs stay NaN
// with the sign kept; F16C quiets a signalling one), and counts that leave a tail.
TEST(Precision, HalvesLoadAsTheSoftwareConversionsValues) {
  std::vector<std::uint16_t> halves;
  for (std::uint32_t bits = 0; bits <= 0xFFFF; ++bits) halves.push_back(static_cast<std::uint16_t>(bits));
  for (const std::size_t count : {halves.size(), halves.size() - 3, std::size_t{5}}) {
    std::vector<float> out(count, 7.0f);
    load_halves(halves.data(), count, out.data());
    for (std::size_t i = 0; i < count; ++i) {
      const float want = fp16{halves[i]}.to_float();
      if (std::isnan(want)) {
        ASSERT_TRUE(std::isnan(out[i])) << std::hex << halves[i];
        ASSERT_EQ(std::signbit(out[i]), std::signbit(want)) << std::hex << halves[i];
      } else {
        ASSERT_EQ(std::bit_cast<std::uint32_t>(out[i]), std::bit_cast<std::uint32_t>(want)) << std::hex << halves[i];
      }
    }
  }
}

TEST(Precision, EncodeAndDecodeRoundTrip) {
  const std::vector<float> values{0.0f, 1.0f, -1.5f, 3.140625f, 1024.0f};
  for (const DType t : {DType::fp32, DType::bf16, DType::fp16}) {
    const std::vector<std::byte> bytes = encode(values.data(), values.size(), t);
    EXPECT_EQ(bytes.size(), values.size() * dtype_size(t));
    EXPECT_EQ(decode(bytes.data(), values.size(), t), values) << to_string(t);  // all exact in every type
  }
  const float third = 1.0f / 3.0f;
  EXPECT_NE(decode(encode(&third, 1, DType::bf16).data(), 1, DType::bf16)[0], third);
}

TEST(Precision, TensorsSayWhatTheyHold) {
  std::vector<std::uint16_t> storage(24);
  Tensor t;
  t.data = storage.data();
  t.shape = Shape(2, 3, 2, 2);
  t.dtype = DType::bf16;
  EXPECT_EQ(t.bytes(), 48u);
  EXPECT_EQ(t.as<bf16>(), reinterpret_cast<bf16*>(storage.data()));
  EXPECT_THROW(t.as<float>(), std::logic_error);
  try {
    t.as<float>();
  } catch (const std::logic_error& e) {
    EXPECT_STREQ(e.what(), "a bf16 tensor [2, 3, 2, 2] read as fp32");
  }
  t.dtype = DType::fp32;
  EXPECT_EQ(t.bytes(), 96u);
  EXPECT_THROW(t.as<fp16>(), std::logic_error);
}

}  // namespace
}  // namespace dlbench::worker
