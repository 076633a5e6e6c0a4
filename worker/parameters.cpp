#include "parameters.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <numbers>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "backend.hpp"
#include "host_memory.hpp"

namespace dlbench::worker {

void ParameterStore::bind(std::vector<Parameter*> parameters, Backend& backend) {
  parameters_ = std::move(parameters);
  count_ = 0;
  elements_ = 0;
  for (Parameter* p : parameters_) {
    p->offset = elements_;
    count_ += p->value.numel();
    elements_ += padded_parameter_elements(p->value.numel());
  }
  // Backend::allocate zero-fills: the padding starts, and stays, zero.
  const auto bytes = static_cast<std::size_t>(elements_) * sizeof(float);
  values_ = std::static_pointer_cast<float>(backend.allocate(bytes));
  grads_ = std::static_pointer_cast<float>(backend.allocate(bytes));
  momentum_ = std::static_pointer_cast<float>(backend.allocate(bytes));
  for (Parameter* p : parameters_) {
    p->value.data = values_.get() + p->offset;
    p->grad = p->value;
    p->grad.data = grads_.get() + p->offset;
  }
  backend.bind_parameters(values_, elements_);
}

void ParameterStore::allocate_second_moment(Backend& backend) {
  if (!second_moment_) {
    second_moment_ = std::static_pointer_cast<float>(backend.allocate(static_cast<std::size_t>(elements_) * sizeof(float)));
  }
}

namespace {

// What std::uniform_real_distribution<double>(0, 1) draws from std::mt19937_64 in libstdc++ (its
// generate_canonical<double, 53>: one 64-bit draw scaled by 2^-64, kept below 1), written out: the
// same values (a unit test holds them to the library's) without the two long-double logarithms
// that libstdc++ takes on every draw, and the same on any library.
double canonical(std::mt19937_64& rng) {
  const double u = static_cast<double>(rng()) * 0x1p-64;
  return u < 1.0 ? u : std::nextafter(1.0, 0.0);
}

// Box–Muller, identical on every platform: N(0, stddev²) from two draws.
double normal(std::mt19937_64& rng, double stddev) {
  const double u1 = 1.0 - canonical(rng), u2 = canonical(rng);
  return stddev * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

// How many draws each value takes: fixed for every rule but the truncated normal, which redraws
// what falls outside its bounds (0 there: a parameter it fills is not split).
int draws_per_value(ParameterInit init) {
  switch (init) {
    case ParameterInit::kaiming_normal_fan_out:
    case ParameterInit::normal_0_01:
    case ParameterInit::normal: return 2;
    case ParameterInit::linear_default: return 1;
    case ParameterInit::truncated_normal:
    case ParameterInit::zeros:
    case ParameterInit::ones: return 0;
  }
  return 0;
}

std::mt19937_64 parameter_generator(std::uint64_t seed, std::size_t index) {
  // One generator per parameter: adding a layer does not change the others' weights.
  return std::mt19937_64(seed * 0x9E3779B97F4A7C15ull + index);
}

// Values [begin, end) of parameter `index` into out[0, end - begin): the values a single pass over
// the whole parameter gives there, since its generator skips the draws of the values before begin.
void fill_values(const Parameter& p, std::size_t index, std::uint64_t seed, std::int64_t begin, std::int64_t end,
                 float* out) {
  std::mt19937_64 rng = parameter_generator(seed, index);
  rng.discard(static_cast<unsigned long long>(begin) * static_cast<unsigned long long>(draws_per_value(p.init)));
  const auto count = static_cast<std::size_t>(end - begin);
  switch (p.init) {
    case ParameterInit::kaiming_normal_fan_out: {
      const double stddev = std::sqrt(2.0 / static_cast<double>(p.fan_out));
      for (std::size_t i = 0; i < count; ++i) out[i] = static_cast<float>(normal(rng, stddev));
      break;
    }
    case ParameterInit::linear_default: {
      const double bound = 1.0 / std::sqrt(static_cast<double>(p.fan_in));
      for (std::size_t i = 0; i < count; ++i) out[i] = static_cast<float>((2.0 * canonical(rng) - 1.0) * bound);
      break;
    }
    case ParameterInit::normal_0_01:
      for (std::size_t i = 0; i < count; ++i) out[i] = static_cast<float>(normal(rng, 0.01));
      break;
    case ParameterInit::truncated_normal:
      for (std::size_t i = 0; i < count; ++i) {
        double draw = normal(rng, p.init_std);
        while (std::fabs(draw) > 2.0) draw = normal(rng, p.init_std);
        out[i] = static_cast<float>(draw);
      }
      break;
    case ParameterInit::normal:
      for (std::size_t i = 0; i < count; ++i) out[i] = static_cast<float>(normal(rng, p.init_std));
      break;
    case ParameterInit::zeros: std::fill_n(out, count, 0.0f); break;
    case ParameterInit::ones: std::fill_n(out, count, 1.0f); break;
  }
}

// A slice of one parameter's values that one thread fills.
struct FillRange {
  std::size_t parameter;
  std::int64_t begin, end;
  std::int64_t host_offset;  // where the slice goes in the host buffer
};

// The values [begin, end) of a parameter that a share draws.
struct OwnedValues {
  std::int64_t begin = 0, end = 0;
  std::int64_t count() const { return end - begin; }
};

// Each parameter's values that `share` owns: the intersection with the share's run of the
// parameters' values laid end to end, or all or none of a parameter that is not split.
std::vector<OwnedValues> owned_values(const std::vector<Parameter*>& parameters, std::int64_t total,
                                      ParameterStore::Share share) {
  const std::int64_t run_begin = total * share.share / share.shares;
  const std::int64_t run_end = total * (share.share + 1) / share.shares;
  std::vector<OwnedValues> owned;
  owned.reserve(parameters.size());
  std::int64_t start = 0;
  for (const Parameter* p : parameters) {
    const std::int64_t n = p->value.numel();
    OwnedValues mine;
    if (draws_per_value(p->init) > 0) {
      mine.begin = std::clamp(run_begin - start, std::int64_t{0}, n);
      mine.end = std::clamp(run_end - start, mine.begin, n);
    } else if (start >= run_begin && start < run_end) {
      mine.end = n;
    }
    owned.push_back(mine);
    start += n;
  }
  return owned;
}

}  // namespace

void ParameterStore::initialize(std::uint64_t seed, Backend& backend, Share share) {
  if (share.shares < 1 || share.share < 0 || share.share >= share.shares) {
    throw std::invalid_argument("parameter share " + std::to_string(share.share) + " of " +
                                std::to_string(share.shares) + ": the share must be 0 to shares - 1");
  }
  // The values are drawn on the host by every OpenMP thread: parameters side by side, and a large
  // one split into one range per thread, 16 at most (a range's generator skips what the ranges
  // before it draw: one pass of the generator, none of the logarithms and cosines). One thread
  // drew VGG16's classifier.0.weight, 102 million values, in 10 s.
  // The host buffer holds a group of consecutive parameters, as many values as the largest one
  // (16M at least); the backend's copies run on this thread, one parameter at a time, in order.
  const int threads = std::max(1, omp_get_max_threads());
  constexpr std::int64_t kMinimumGroupValues = std::int64_t{1} << 24;
  constexpr std::int64_t kMinimumRangeValues = std::int64_t{1} << 16;
  // Range k skips k ranges' draws, so P ranges cost P/2 extra passes of the generator (each a small
  // part of what drawing the values costs): at most 16, where a GPU node's ranks each see every core.
  constexpr std::int64_t kMaximumRanges = 16;
  const std::int64_t split_into = std::min<std::int64_t>(threads, kMaximumRanges);
  const std::vector<OwnedValues> owned = owned_values(parameters_, count_, share);
  std::int64_t capacity = kMinimumGroupValues;
  for (const OwnedValues& mine : owned) capacity = std::max(capacity, mine.count());
  // Not zeroed: every value is written before it is copied, and the page faults of the first
  // writes are taken by the drawing threads.
  const std::unique_ptr<float, decltype(&std::free)> host(
      static_cast<float*>(host_block(static_cast<std::size_t>(capacity) * sizeof(float), 64)), &std::free);
  std::vector<FillRange> ranges;
  for (std::size_t first = 0; first < parameters_.size();) {
    std::size_t last = first;
    std::int64_t used = 0;
    ranges.clear();
    for (; last < parameters_.size() && used + owned[last].count() <= capacity; ++last) {
      const OwnedValues mine = owned[last];
      const std::int64_t n = mine.count();
      if (n == 0) continue;
      const bool split = draws_per_value(parameters_[last]->init) > 0 && n >= split_into * kMinimumRangeValues;
      const std::int64_t pieces = split ? split_into : 1;
      for (std::int64_t piece = 0; piece < pieces; ++piece) {
        const std::int64_t begin = n * piece / pieces, end = n * (piece + 1) / pieces;
        ranges.push_back({last, mine.begin + begin, mine.begin + end, used + begin});
      }
      used += n;
    }
    const auto count = static_cast<std::int64_t>(ranges.size());
#pragma omp parallel for schedule(dynamic, 1)
    for (std::int64_t r = 0; r < count; ++r) {
      const FillRange& range = ranges[static_cast<std::size_t>(r)];
      fill_values(*parameters_[range.parameter], range.parameter, seed, range.begin, range.end,
                  host.get() + range.host_offset);
    }
    for (std::int64_t offset = 0; first < last; ++first) {
      const OwnedValues mine = owned[first];
      if (mine.count() == 0) continue;
      backend.copy_from_host(static_cast<float*>(parameters_[first]->value.data) + mine.begin, host.get() + offset,
                             static_cast<std::size_t>(mine.count()) * sizeof(float));
      offset += mine.count();
    }
  }
}

}  // namespace dlbench::worker
