#include "precision.hpp"

#include <cstdlib>
#include <optional>
#include <stdexcept>

#include "env_choice.hpp"

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace dlbench::worker {
namespace {

void halves_in_software(const float* from, std::size_t count, std::uint16_t* out) {
  for (std::size_t i = 0; i < count; ++i) out[i] = fp16::from_float(from[i]).bits;
}

#if defined(__x86_64__)
// VCVTPS2PH rounds to nearest even as fp16::from_float does, subnormals and infinities alike, and
// quiets a NaN keeping its payload's top bits, which fp16::from_float was made to do as well.
__attribute__((target("avx,f16c"))) void halves_on_f16c(const float* from, std::size_t count, std::uint16_t* out) {
  std::size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    const __m128i halves = _mm256_cvtps_ph(_mm256_loadu_ps(from + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), halves);
  }
  halves_in_software(from + i, count - i, out + i);
}

__attribute__((target("avx,f16c"))) void floats_on_f16c(const std::uint16_t* from, std::size_t count, float* out) {
  std::size_t i = 0;
  for (; i + 8 <= count; i += 8) {
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(from + i))));
  }
  for (; i < count; ++i) out[i] = fp16{from[i]}.to_float();
}
#endif

}  // namespace

bool cpu_has_f16c() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx") && __builtin_cpu_supports("f16c");
#else
  return false;
#endif
}

bool halves_convert_on_f16c() {
  static const bool f16c = [] {
    enum class Halves { software, on_f16c };
    static constexpr Choices<Halves, 2> kHalves{{{"software", Halves::software}, {"f16c", Halves::on_f16c}}};
    const std::optional<Halves> chosen = env_choice("DLBENCH_CPU_HALVES", std::getenv("DLBENCH_CPU_HALVES"), kHalves);
    if (chosen == Halves::on_f16c && !cpu_has_f16c()) {
      throw std::invalid_argument("DLBENCH_CPU_HALVES: \"f16c\" needs a CPU with F16C and AVX; this one converts in "
                                  "software (unset it, or software)");
    }
    return chosen ? *chosen == Halves::on_f16c : cpu_has_f16c();
  }();
  return f16c;
}

void store_halves(const float* from, std::size_t count, std::uint16_t* out) {
#if defined(__x86_64__)
  if (halves_convert_on_f16c()) {
    halves_on_f16c(from, count, out);
    return;
  }
#endif
  halves_in_software(from, count, out);
}

void load_halves(const std::uint16_t* from, std::size_t count, float* out) {
#if defined(__x86_64__)
  if (halves_convert_on_f16c()) {
    floats_on_f16c(from, count, out);
    return;
  }
#endif
  for (std::size_t i = 0; i < count; ++i) out[i] = fp16{from[i]}.to_float();
}

}  // namespace dlbench::worker
