// Element types as data: a tensor says what it holds (DType), and code that touches elements
// names the C++ type it expects (Tensor::as<T>() checks the two agree). The 16-bit types are
// storage types: host code widens them to float to compute, as the kernels do.
#pragma once

#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string_view>
#include <type_traits>

#include "dtype.hpp"

namespace dlbench::worker {

// bfloat16: the top 16 bits of an IEEE fp32. Conversion rounds to nearest even, as oneDNN,
// cuDNN and PyTorch do; NaN stays NaN (quiet).
struct bf16 {
  std::uint16_t bits = 0;

  static bf16 from_float(float f) {
    const auto u = std::bit_cast<std::uint32_t>(f);
    if (std::isnan(f)) return {static_cast<std::uint16_t>((u >> 16) | 0x40u)};
    const std::uint32_t rounding = 0x7FFFu + ((u >> 16) & 1u);
    return {static_cast<std::uint16_t>((u + rounding) >> 16)};
  }
  float to_float() const { return std::bit_cast<float>(static_cast<std::uint32_t>(bits) << 16); }
};

// IEEE binary16, converted one value at a time in software (host-side: tests, loading data;
// store_floats converts arrays on the CPU's F16C unit where there is one, to the same bits).
struct fp16 {
  std::uint16_t bits = 0;

  static fp16 from_float(float f) {
    const auto u = std::bit_cast<std::uint32_t>(f);
    const std::uint32_t sign = (u >> 16) & 0x8000u;
    const std::uint32_t abs = u & 0x7FFFFFFFu;
    if (abs > 0x7F800000u) {  // NaN: quiet, the payload's top bits kept (as F16C's conversion does)
      return {static_cast<std::uint16_t>(sign | 0x7E00u | ((abs >> 13) & 0x3FFu))};
    }
    if (abs >= 0x477FF000u) return {static_cast<std::uint16_t>(sign | 0x7C00u)};  // rounds to inf
    if (abs < 0x38800000u) {  // a subnormal half (or zero): round |f| · 2^24 to an integer
      const float scaled = std::bit_cast<float>(abs) * 16777216.0f;
      return {static_cast<std::uint16_t>(sign | static_cast<std::uint32_t>(std::nearbyint(scaled)))};
    }
    const std::uint32_t rounding = 0xFFFu + ((abs >> 13) & 1u);
    return {static_cast<std::uint16_t>(sign | ((abs - 0x38000000u + rounding) >> 13))};
  }
  float to_float() const {
    const std::uint32_t sign = (static_cast<std::uint32_t>(bits) & 0x8000u) << 16;
    const std::uint32_t exponent = (bits >> 10) & 0x1Fu;
    const std::uint32_t mantissa = bits & 0x3FFu;
    if (exponent == 0) {
      const float magnitude = static_cast<float>(mantissa) / 16777216.0f;
      return std::bit_cast<float>(sign | std::bit_cast<std::uint32_t>(magnitude));
    }
    if (exponent == 0x1F) return std::bit_cast<float>(sign | 0x7F800000u | (mantissa << 13));
    return std::bit_cast<float>(sign | ((exponent + 112u) << 23) | (mantissa << 13));
  }
};

template <typename T>
struct dtype_of;
template <>
struct dtype_of<float> {
  static constexpr DType value = DType::fp32;
};
template <>
struct dtype_of<bf16> {
  static constexpr DType value = DType::bf16;
};
template <>
struct dtype_of<fp16> {
  static constexpr DType value = DType::fp16;
};
template <>
struct dtype_of<std::int32_t> {
  static constexpr DType value = DType::int32;
};

inline float to_float(float v) { return v; }
inline float to_float(bf16 v) { return v.to_float(); }
inline float to_float(fp16 v) { return v.to_float(); }
template <typename T>
T from_float(float v) {
  if constexpr (std::is_same_v<T, float>) {
    return v;
  } else {
    return T::from_float(v);
  }
}

// `count` floats as halves at `out`, fp16::from_float's bits: 8 at a time on the CPU's F16C unit
// (every x86-64 CPU with AVX2 has one) and one by one in software elsewhere, or where
// DLBENCH_CPU_HALVES=software says (f16c: the default where the CPU has it). The input
// pipeline's threads hand amp's batches out so: in software the conversion took a decoding
// thread 13.6% of its time (perf, AMD EPYC).
void store_halves(const float* from, std::size_t count, std::uint16_t* out);
// `count` halves at `from` as floats (exact: every fp16 value is an fp32 value), on F16C under the
// same rule as store_halves. The CPU's emulated fp16 (cpu/half_emulation.hpp) widens with it.
void load_halves(const std::uint16_t* from, std::size_t count, float* out);
// Whether store_halves runs on F16C here: DLBENCH_CPU_HALVES, read once. Throws
// std::invalid_argument for a value other than software or f16c, and for f16c on a CPU without.
bool halves_convert_on_f16c();
// Whether this CPU has F16C (and AVX), whatever DLBENCH_CPU_HALVES says.
bool cpu_has_f16c();

// `count` floats stored as `to` (fp32, bf16 or fp16: rounded to nearest even) at `out`: what a
// tensor's host data becomes (encode) and what the input pipeline's threads hand out.
inline void store_floats(const float* from, std::size_t count, DType to, void* out) {
  switch (to) {
    case DType::fp32:
      std::memcpy(out, from, count * sizeof(float));
      return;
    case DType::bf16:
      for (std::size_t i = 0; i < count; ++i) static_cast<std::uint16_t*>(out)[i] = bf16::from_float(from[i]).bits;
      return;
    case DType::fp16:
      store_halves(from, count, static_cast<std::uint16_t*>(out));
      return;
    case DType::int32:
      break;
  }
  throw std::invalid_argument("store_floats: int32 holds indices, not values");
}

// `count` values of type `from_type` (fp32, bf16 or fp16) at `from` as floats at `out`, exactly
// (every such value is an fp32 value): store_floats' inverse, as host code reads a tensor's bytes
// or a batch back.
inline void load_floats(const void* from, std::size_t count, DType from_type, float* out) {
  switch (from_type) {
    case DType::fp32:
      std::memcpy(out, from, count * sizeof(float));
      return;
    case DType::bf16:
      for (std::size_t i = 0; i < count; ++i) out[i] = bf16{static_cast<const std::uint16_t*>(from)[i]}.to_float();
      return;
    case DType::fp16:
      load_halves(static_cast<const std::uint16_t*>(from), count, out);
      return;
    case DType::int32:
      break;
  }
  throw std::invalid_argument("load_floats: int32 holds indices, not values");
}

}  // namespace dlbench::worker
