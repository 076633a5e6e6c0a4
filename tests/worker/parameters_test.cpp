// ParameterStore::initialize draws every parameter on all OpenMP threads, a large one split into
// ranges whose generators skip ahead. The weights must be the ones a single pass drew before
// (seeded runs, recorded steps and resumed runs depend on them): here they are compared bit for
// bit with that pass, kept below as it was, with std::uniform_real_distribution.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <numbers>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/cpu_backend.hpp"
#include "parameters.hpp"

namespace dlbench::worker {
namespace {

// The single pass of every rule, as ParameterStore::initialize drew until 2026-11-30.
std::vector<float> sequential_draw(const Parameter& p, std::size_t index, std::uint64_t seed) {
  std::vector<float> host(static_cast<std::size_t>(p.value.numel()), 0.0f);
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + index);
  std::uniform_real_distribution<double> uniform(0.0, 1.0);
  const auto normal = [&](double stddev) {
    const double u1 = 1.0 - uniform(rng), u2 = uniform(rng);
    return stddev * std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
  };
  switch (p.init) {
    case ParameterInit::kaiming_normal_fan_out: {
      const double stddev = std::sqrt(2.0 / static_cast<double>(p.fan_out));
      for (float& v : host) v = static_cast<float>(normal(stddev));
      break;
    }
    case ParameterInit::linear_default: {
      const double bound = 1.0 / std::sqrt(static_cast<double>(p.fan_in));
      for (float& v : host) v = static_cast<float>((2.0 * uniform(rng) - 1.0) * bound);
      break;
    }
    case ParameterInit::normal_0_01:
      for (float& v : host) v = static_cast<float>(normal(0.01));
      break;
    case ParameterInit::truncated_normal:
      for (float& v : host) {
        double draw = normal(p.init_std);
        while (std::fabs(draw) > 2.0) draw = normal(p.init_std);
        v = static_cast<float>(draw);
      }
      break;
    case ParameterInit::normal:
      for (float& v : host) v = static_cast<float>(normal(p.init_std));
      break;
    case ParameterInit::zeros: break;
    case ParameterInit::ones:
      for (float& v : host) v = 1.0f;
      break;
  }
  return host;
}

Parameter parameter(std::string name, std::int64_t values, ParameterInit init, float init_std = 0.0f) {
  Parameter p;
  p.name = std::move(name);
  p.value.shape = Shape(values);
  p.init = init;
  p.fan_in = 300;
  p.fan_out = 1200;
  p.init_std = init_std;
  return p;
}

// Every rule, small parameters beside large ones (split over the threads from 64K values each),
// sizes that no thread count divides, and a truncated normal whose std makes a third of its
// draws fall outside [-2, 2]: more values than one group of the host buffer (16M) holds.
std::vector<Parameter> every_rule() {
  std::vector<Parameter> ps;
  ps.push_back(parameter("conv.weight", 1'000'003, ParameterInit::kaiming_normal_fan_out));
  ps.push_back(parameter("bn.weight", 77, ParameterInit::ones));
  ps.push_back(parameter("bn.bias", 77, ParameterInit::zeros));
  ps.push_back(parameter("fc.weight", 9'000'001, ParameterInit::linear_default));
  ps.push_back(parameter("fc.bias", 131'071, ParameterInit::linear_default));
  ps.push_back(parameter("inception.weight", 400'009, ParameterInit::truncated_normal, 2.0f));
  ps.push_back(parameter("classifier.weight", 8'400'017, ParameterInit::normal_0_01));
  ps.push_back(parameter("embeddings.weight", 262'147, ParameterInit::normal, 0.02f));
  ps.push_back(parameter("empty", 0, ParameterInit::normal, 0.02f));
  ps.push_back(parameter("tiny", 3, ParameterInit::kaiming_normal_fan_out));
  return ps;
}

// every_rule()'s parameters bound to a store on `backend` (which must outlive it).
struct BoundRules {
  explicit BoundRules(Backend& backend) : ps(every_rule()) {
    std::vector<Parameter*> pointers;
    for (Parameter& p : ps) pointers.push_back(&p);
    store.bind(pointers, backend);
  }
  BoundRules(const BoundRules&) = delete;  // the store points into ps
  BoundRules& operator=(const BoundRules&) = delete;
  std::vector<Parameter> ps;
  ParameterStore store;
};

// The first value whose bits differ from `expected`'s, or expected.size().
std::size_t first_difference(const float* got, const std::vector<float>& expected) {
  for (std::size_t k = 0; k < expected.size(); ++k) {
    if (std::memcmp(&got[k], &expected[k], sizeof(float)) != 0) return k;
  }
  return expected.size();
}

class ParameterDraw : public ::testing::TestWithParam<int> {};

TEST_P(ParameterDraw, EveryRuleDrawsBitForBitWhatASinglePassDrew) {
  const int threads = GetParam();
  const int before = omp_get_max_threads();
  omp_set_num_threads(threads);
  CpuBackend backend(threads);
  BoundRules rules(backend);
  const std::vector<Parameter>& ps = rules.ps;
  ParameterStore& store = rules.store;
  constexpr std::uint64_t seed = 20261130;
  store.initialize(seed, backend);
  omp_set_num_threads(before);
  for (std::size_t i = 0; i < ps.size(); ++i) {
    const std::vector<float> expected = sequential_draw(ps[i], i, seed);
    const auto* got = static_cast<const float*>(ps[i].value.data);
    const std::size_t k = first_difference(got, expected);
    EXPECT_EQ(k, expected.size()) << ps[i].name << " on " << threads << " threads: value " << k << " is "
                                  << (k < expected.size() ? got[k] : 0.0f) << ", the single pass drew "
                                  << (k < expected.size() ? expected[k] : 0.0f);
  }
  // The padding after each parameter stays zero.
  const float* values = store.values();
  for (const Parameter& p : ps) {
    const std::int64_t end = p.offset + p.value.numel();
    for (std::int64_t k = end; k < p.offset + padded_parameter_elements(p.value.numel()); ++k) {
      ASSERT_EQ(values[k], 0.0f) << "padding after " << p.name;
    }
  }
}

// One thread (no split), CI's two, counts that divide nothing here, and more threads than a
// parameter is split into (16).
INSTANTIATE_TEST_SUITE_P(Threads, ParameterDraw, ::testing::Values(1, 2, 3, 7, 20));

// The ranks of a job each draw a share and sum them: every value is owned by exactly one share,
// whatever each rank's threads, so the sum is the single pass bit for bit (a constant rule owned
// twice would sum to 2, a value owned by none stay 0). Shares cut parameters of every rule, the
// truncated normal goes whole to one, and more shares than some parameters have values.
class ParameterShares : public ::testing::TestWithParam<int> {};

TEST_P(ParameterShares, TheSharesSumToWhatASinglePassDrew) {
  const int shares = GetParam();
  const int before = omp_get_max_threads();
  constexpr std::uint64_t seed = 20261201;
  std::vector<Parameter> reference = every_rule();
  std::vector<std::vector<float>> sum;
  for (std::size_t i = 0; i < reference.size(); ++i) {
    sum.emplace_back(static_cast<std::size_t>(reference[i].value.numel()), 0.0f);
  }
  std::int64_t drawn_by_more_than_one_thread_count = 0;
  for (int share = 0; share < shares; ++share) {
    const int threads = 1 + share % 3;  // ranks of one job need not have the same threads
    omp_set_num_threads(threads);
    CpuBackend backend(threads);
    BoundRules rules(backend);
    rules.store.initialize(seed, backend, {share, shares});
    drawn_by_more_than_one_thread_count += threads > 1;
    for (std::size_t i = 0; i < rules.ps.size(); ++i) {
      const auto* got = static_cast<const float*>(rules.ps[i].value.data);
      for (std::size_t k = 0; k < sum[i].size(); ++k) sum[i][k] += got[k];
    }
  }
  omp_set_num_threads(before);
  for (std::size_t i = 0; i < reference.size(); ++i) {
    const std::vector<float> expected = sequential_draw(reference[i], i, seed);
    const std::size_t k = first_difference(sum[i].data(), expected);
    EXPECT_EQ(k, expected.size()) << reference[i].name << " in " << shares << " shares: value " << k << " sums to "
                                  << (k < expected.size() ? sum[i][k] : 0.0f) << ", the single pass drew "
                                  << (k < expected.size() ? expected[k] : 0.0f);
  }
  if (shares > 1) {
    EXPECT_GT(drawn_by_more_than_one_thread_count, 0) << "the premise: some share drawn on threads";
  }
}

INSTANTIATE_TEST_SUITE_P(Shares, ParameterShares, ::testing::Values(1, 2, 3, 8));

TEST(ParameterDraw, AShareOutsideItsCountIsRefusedSayingSo) {
  CpuBackend backend(1);
  std::vector<Parameter> ps{parameter("a", 10, ParameterInit::normal, 0.02f)};
  std::vector<Parameter*> pointers{&ps[0]};
  ParameterStore store;
  store.bind(pointers, backend);
  for (const ParameterStore::Share bad : {ParameterStore::Share{2, 2}, ParameterStore::Share{-1, 2},
                                          ParameterStore::Share{0, 0}}) {
    try {
      store.initialize(1, backend, bad);
      ADD_FAILURE() << "share " << bad.share << " of " << bad.shares << " was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("the share must be 0 to shares - 1"), std::string::npos) << e.what();
    }
  }
}

TEST(ParameterDraw, AnotherSeedOrIndexDrawsOtherValues) {
  CpuBackend backend(1);
  std::vector<Parameter> ps{parameter("a", 1000, ParameterInit::normal, 0.02f),
                            parameter("b", 1000, ParameterInit::normal, 0.02f)};
  std::vector<Parameter*> pointers{&ps[0], &ps[1]};
  ParameterStore store;
  store.bind(pointers, backend);
  store.initialize(1, backend);
  const std::vector<float> a(store.values(), store.values() + 1000);
  const std::vector<float> b(store.values() + ps[1].offset, store.values() + ps[1].offset + 1000);
  EXPECT_NE(a, b) << "two parameters drew the same values";
  store.initialize(2, backend);
  EXPECT_NE(std::vector<float>(store.values(), store.values() + 1000), a) << "another seed drew the same values";
}

}  // namespace
}  // namespace dlbench::worker
