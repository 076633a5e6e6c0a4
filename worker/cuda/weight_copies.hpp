// How a convolution's and a linear layer's passes get their weights in the type (and, for a
// filter read channels last, the order) they compute in, apart from the copies themselves so
// that the rule is tested without a GPU.
//
// per_pass: each pass rounds (and transposes) its weight into shared scratch before it runs. A
// ResNet-50 amp step makes 106 such copies, a launch each, besides its 53 filter-gradient
// widenings; BERT-base's makes about 228, and on an H200 they took 5.3% of its kernel time
// (Nsight Compute, 2026-11-28): small launches, each mostly its own overhead.
//
// kept: the copies live as long as the values they came from. A half type's copy of every
// parameter is made in one pass over the flat values when the first pass after a change asks for
// one; a filter read channels last and larger than 1x1 is then transposed in place of its plain
// copy by the forward pass that asks first, and read again by its backward-data pass. fp32
// filters of 1x1 are read in place (OIHW is OHWI there), their gradients written in place too.
// Whatever writes the values makes every copy stale: an optimizer update, a copy from the host
// into them, a broadcast, a step graph's capture or replay.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "dtype.hpp"
#include "env_choice.hpp"

namespace dlbench::worker {

enum class WeightCopies { per_pass, kept };

inline constexpr Choices<WeightCopies, 2> kWeightCopies{{{"per-pass", WeightCopies::per_pass},
                                                        {"kept", WeightCopies::kept}}};

// `choice` is DLBENCH_CUDA_WEIGHT_COPIES's value (null or empty: unset, per_pass: kept ran amp
// ResNet-50 at 7,105.5 images/s on an H200 against 7,211.9, 2026-12-04). Throws
// std::invalid_argument naming the variable and its allowed values for anything else.
inline WeightCopies weight_copies(const char* choice) {
  return env_choice("DLBENCH_CUDA_WEIGHT_COPIES", choice, kWeightCopies).value_or(WeightCopies::per_pass);
}

// An OIHW filter's dimensions, as a channels-last pass reads it transposed to OHWI.
struct FilterShape {
  std::int64_t out_channels = 0, in_channels = 0, kh = 0, kw = 0;
  bool operator==(const FilterShape&) const = default;
};

// What a pass's request for a kept copy asks the backend to do before it reads the copy.
struct WeightCopyPlan {
  bool flat = false;      // round every value into the type's flat copy, first
  bool arranged = false;  // then transpose this filter into its place in that copy
  bool refused = false;   // this parameter is kept in another order: copy it for this pass alone
  bool operator==(const WeightCopyPlan&) const = default;
};

// Which kept copies are current. An epoch counts the writes to the values; a copy made in the
// current epoch is current. Host bookkeeping only: the backend makes the copies it is told to.
class KeptWeightCopies {
 public:
  // The flat fp32 values the copies come from (ParameterStore::bind): every copy stale, every
  // order forgotten. Held weakly: once the values are freed nothing lies in them, and memory
  // allocated at the same address later is not taken for a parameter.
  void bind(const std::shared_ptr<const void>& values, std::int64_t elements) {
    values_ = values;
    begin_ = values.get();
    elements_ = elements;
    kept_.clear();
    flat_made_.clear();
    values_changed();
  }

  // The bound values and their length (what a flat copy converts).
  const float* values() const { return static_cast<const float*>(begin_); }
  std::int64_t elements() const { return elements_; }

  // `weight` (`elements` fp32 values) as an element offset into the bound values, or nothing
  // where it does not lie wholly inside them (a test's own tensor, a freed store's memory).
  std::optional<std::int64_t> offset_of(const void* weight, std::int64_t elements) const {
    if (values_.expired() || weight == nullptr || elements <= 0) return std::nullopt;
    const auto at = reinterpret_cast<std::uintptr_t>(weight), begin = reinterpret_cast<std::uintptr_t>(begin_);
    if (at < begin || (at - begin) % sizeof(float) != 0) return std::nullopt;
    const auto offset = static_cast<std::int64_t>((at - begin) / sizeof(float));
    if (offset + elements > elements_) return std::nullopt;
    return offset;
  }

  // `bytes` at `device` were written: every copy is stale if they touch the bound values.
  void wrote(const void* device, std::size_t bytes) {
    if (values_.expired() || bytes == 0) return;
    const auto at = reinterpret_cast<std::uintptr_t>(device), begin = reinterpret_cast<std::uintptr_t>(begin_);
    const std::uintptr_t end = begin + static_cast<std::uintptr_t>(elements_) * sizeof(float);
    if (at < end && at + bytes > begin) values_changed();
  }

  // The values may have changed: an update, a broadcast, a capture (whose graph must make its own
  // copies) or a replay (whose graph updated them).
  void values_changed() { ++epoch_; }

  // What a pass that reads the parameter at `offset` in `dtype` must have done first, `arranged` its
  // filter's order where the pass transposes it (nullopt: the parameter's own order). Marks what it
  // asks for as made. fp32 in its own order is the values themselves and never asks.
  WeightCopyPlan plan(DType dtype, std::int64_t offset, const std::optional<FilterShape>& arranged) {
    WeightCopyPlan plan;
    const auto key = std::make_pair(dtype, offset);
    const auto found = kept_.find(key);
    if (found != kept_.end() && found->second.arranged != arranged) return {.refused = true};
    if (dtype != DType::fp32) {
      std::uint64_t& flat = flat_made_[dtype];
      if (flat != epoch_) {
        plan.flat = true;
        flat = epoch_;
      }
    }
    // One made in an earlier epoch is stale, and a flat copy made since has written over it.
    if (arranged && (found == kept_.end() || found->second.epoch != epoch_)) plan.arranged = true;
    kept_[key] = Kept{arranged, epoch_};
    return plan;
  }

 private:
  struct Kept {
    std::optional<FilterShape> arranged;
    std::uint64_t epoch = 0;
  };
  std::weak_ptr<const void> values_;
  const void* begin_ = nullptr;
  std::int64_t elements_ = 0;
  std::uint64_t epoch_ = 1;
  std::map<DType, std::uint64_t> flat_made_;
  std::map<std::pair<DType, std::int64_t>, Kept> kept_;
};

}  // namespace dlbench::worker
