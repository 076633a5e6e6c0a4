#include "input/batch_values.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <stdexcept>

#include "precision.hpp"

namespace dlbench::input {
namespace {

constexpr std::size_t kRun = 4096;  // values widened at a time: a few pages, in cache

}  // namespace

void BatchValues::scan(const Batch& batch, std::size_t count) {
  if (batch.packed_bytes != 0) throw std::invalid_argument("BatchValues: a packed batch's values are made on the device");
  run_.resize(kRun);
  long bad = 0;
  for (std::size_t at = 0; at < count; at += kRun) {
    const std::size_t n = std::min(kRun, count - at);
    worker::load_floats(static_cast<const std::byte*>(batch.pixels) + at * worker::dtype_size(batch.pixel_type), n,
                        batch.pixel_type, run_.data());
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
