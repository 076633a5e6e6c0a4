// What the batches an input pipeline hands out hold, as the device reads them (dlbench-input
// measure --check-values). Values that are not finite (a float past fp16's 65,504 stored as inf, a
// NaN from a bad draw) make an amp step skip whatever its loss scale; normalised pixels lie within
// a few units of 0, so the smallest and largest finite value say whether anything else got in.
#pragma once

#include <cstddef>
#include <limits>
#include <optional>
#include <vector>

#include "input/input_pipeline.hpp"

namespace dlbench::input {

class BatchValues {
 public:
  // The first `count` values of `batch`, widened from its pixel type by load_floats (fp32, fp16 or
  // bf16; int32 throws std::invalid_argument).
  void scan(const Batch& batch, std::size_t count);

  long batches() const { return batches_; }
  long non_finite() const { return non_finite_; }
  long batches_with_non_finite() const { return batches_with_non_finite_; }
  // The smallest and largest finite value seen; none before one is.
  std::optional<float> min() const { return seen_finite() ? std::optional(min_) : std::nullopt; }
  std::optional<float> max() const { return seen_finite() ? std::optional(max_) : std::nullopt; }

 private:
  bool seen_finite() const { return min_ <= max_; }

  std::vector<float> run_;  // one run of values, widened
  long batches_ = 0, non_finite_ = 0, batches_with_non_finite_ = 0;
  float min_ = std::numeric_limits<float>::infinity(), max_ = -std::numeric_limits<float>::infinity();
};

}  // namespace dlbench::input
