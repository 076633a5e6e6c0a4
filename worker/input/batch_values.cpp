#include "input/batch_values.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>

#include "precision.hpp"

namespace dlbench::input {
namespace {

constexpr std::size_t kRun = 4096;  // values widened at a time: a few pages, in cache

void widen(const Batch& batch, std::size_t at, std::size_t n, float* out) {
  switch (batch.pixel_type) {
    case worker::DType::fp32: std::copy_n(static_cast<const float*>(batch.pixels) + at, n, out); return;
    case worker::DType::fp16:
      worker::load_halves(static_cast<const std::uint16_t*>(batch.pixels) + at, n, out);
      return;
    case worker::DType::bf16: {
      const auto* from = static_cast<const worker::bf16*>(batch.pixels) + at;
      for (std::size_t i = 0; i < n; ++i) out[i] = from[i].to_float();
      return;
    }
    default: throw std::invalid_argument("BatchValues: pixels are fp32, fp16 or bf16");
  }
}

}  // namespace

void BatchValues::scan(const Batch& batch, std::size_t count) {
  run_.resize(kRun);
  long bad = 0;
  for (std::size_t at = 0; at < count; at += kRun) {
    const std::size_t n = std::min(kRun, count - at);
    widen(batch, at, n, run_.data());
    for (std::size_t i = 0; i < n; ++i) {
      const float v = run_[i];
      if (!std::isfinite(v)) {
        ++bad;
        continue;
      }
      min_ = std::min(min_, v);
      max_ = std::max(max_, v);
    }
  }
  non_finite_ += bad;
  if (bad > 0) ++batches_with_non_finite_;
  ++batches_;
}

}  // namespace dlbench::input
