// Statistics against values computed by hand.
#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "dlbench/core/statistics.hpp"
#include "dlbench/core/status.hpp"

namespace dlbench {
namespace {

TEST(Statistics, OddCount) {
  const std::vector<double> x{3.0, 1.0, 2.0};
  const SampleSummary s = summarize(x);
  EXPECT_DOUBLE_EQ(s.median, 2.0);
  EXPECT_DOUBLE_EQ(s.mean, 2.0);
  EXPECT_DOUBLE_EQ(s.min, 1.0);
  EXPECT_DOUBLE_EQ(s.max, 3.0);
  EXPECT_DOUBLE_EQ(s.stddev, 1.0);  // sqrt(((1)^2 + 0 + (1)^2) / 2)
  EXPECT_DOUBLE_EQ(s.cv, 0.5);
}

TEST(Statistics, EvenCountMedianIsMeanOfMiddlePair) {
  const std::vector<double> x{10.0, 40.0, 20.0, 30.0};
  const SampleSummary s = summarize(x);
  EXPECT_DOUBLE_EQ(s.median, 25.0);
  EXPECT_DOUBLE_EQ(s.mean, 25.0);
  // squares: 225 + 25 + 25 + 225 = 500; / 3; sqrt
  EXPECT_NEAR(s.stddev, std::sqrt(500.0 / 3.0), 1e-12);
  EXPECT_NEAR(s.cv, std::sqrt(500.0 / 3.0) / 25.0, 1e-12);
}

TEST(Statistics, SevenRepeatsLikeTheMethodology) {
  const std::vector<double> x{2480.0, 2510.0, 2490.0, 2530.0, 2470.0, 2500.0, 2520.0};
  const SampleSummary s = summarize(x);
  EXPECT_DOUBLE_EQ(s.median, 2500.0);
  EXPECT_DOUBLE_EQ(s.mean, 2500.0);
  // squares: 400 + 100 + 100 + 900 + 900 + 0 + 400 = 2800; / 6
  EXPECT_NEAR(s.stddev, std::sqrt(2800.0 / 6.0), 1e-9);
}

TEST(Statistics, SingleSample) {
  const std::vector<double> x{5.0};
  const SampleSummary s = summarize(x);
  EXPECT_DOUBLE_EQ(s.median, 5.0);
  EXPECT_DOUBLE_EQ(s.stddev, 0.0);
  EXPECT_DOUBLE_EQ(s.cv, 0.0);
}

TEST(Statistics, RejectsEmptyAndNonFinite) {
  EXPECT_THROW(summarize(std::vector<double>{}), std::invalid_argument);
  EXPECT_THROW(summarize(std::vector<double>{1.0, std::numeric_limits<double>::quiet_NaN()}), std::invalid_argument);
  EXPECT_THROW(median(std::vector<double>{std::numeric_limits<double>::infinity()}), std::invalid_argument);
}

TEST(Statistics, ReportedValueFollowsTheStatistic) {
  const SampleSummary s = summarize(std::vector<double>{1.0, 2.0, 9.0});
  EXPECT_DOUBLE_EQ(reported_value(s, Statistic::median), 2.0);
  EXPECT_DOUBLE_EQ(reported_value(s, Statistic::mean), 4.0);
}

TEST(Statistics, RepeatThroughput) {
  // 8 GPUs × 128 per GPU = 1024 samples a step, 100 steps in 40 s.
  EXPECT_DOUBLE_EQ(repeat_throughput(1024, 100, 40.0), 2560.0);
  EXPECT_THROW(repeat_throughput(1024, 100, 0.0), std::invalid_argument);
  EXPECT_THROW(repeat_throughput(0, 100, 1.0), std::invalid_argument);
}

TEST(Statistics, Scaling) {
  const Scaling s = scaling(400.0, 2800.0, 8);
  EXPECT_DOUBLE_EQ(s.speedup, 7.0);
  EXPECT_DOUBLE_EQ(s.efficiency, 0.875);
  EXPECT_THROW(scaling(0.0, 1.0, 1), std::invalid_argument);
}

CaseResult succeeded(CaseSpec c, std::vector<double> repeats) {
  CaseResult r;
  r.case_ = c;
  r.state = CaseState::Succeeded;
  r.throughput = Throughput{"samples/s", summarize(repeats), repeats};
  return r;
}

TEST(Statistics, ApplyScalingMatchesBatchAndPrecision) {
  std::vector<CaseResult> results{
      succeeded({1, 1, 128, Precision::amp}, {1000.0, 1000.0, 1000.0}),
      succeeded({1, 1, 128, Precision::fp32}, {400.0}),
      succeeded({1, 8, 128, Precision::amp}, {7600.0, 7600.0, 7700.0}),
      succeeded({2, 8, 128, Precision::fp32}, {5600.0}),
      succeeded({1, 8, 64, Precision::amp}, {7000.0}),  // no 1×1 at batch 64
  };
  apply_scaling(results, Statistic::median);
  EXPECT_DOUBLE_EQ(*results[0].speedup, 1.0);
  EXPECT_DOUBLE_EQ(*results[0].scaling_efficiency, 1.0);
  EXPECT_DOUBLE_EQ(*results[2].speedup, 7.6);
  EXPECT_DOUBLE_EQ(*results[2].scaling_efficiency, 0.95);
  EXPECT_DOUBLE_EQ(*results[3].speedup, 14.0);
  EXPECT_DOUBLE_EQ(*results[3].scaling_efficiency, 14.0 / 16.0);
  EXPECT_FALSE(results[4].speedup.has_value());

  apply_scaling(results, Statistic::mean);  // mean of 7600, 7600, 7700 = 7633.33…
  EXPECT_NEAR(*results[2].speedup, 7633.333333333333 / 1000.0, 1e-9);
}

// Issue 37's case: a 1-rank baseline measured under another process's load (0.74 samples/s, cv
// 57%) made 2 ranks on 2 cores look 7x faster. Efficiency above 1 + noise is never published.
TEST(Statistics, AnImpossibleSpeedupIsRefusedNamingTheFigure) {
  std::vector<CaseResult> results{
      succeeded({1, 1, 2, Precision::fp32}, {0.74, 0.30, 1.60}),   // disturbed: cv 0.79
      succeeded({1, 2, 2, Precision::fp32}, {5.24, 5.20, 5.30}),   // cv 0.01
      succeeded({1, 1, 4, Precision::fp32}, {10.0, 10.1, 9.9}),
      succeeded({1, 2, 4, Precision::fp32}, {20.6, 20.5, 20.7}),   // 1.03: within 1 + noise
  };
  apply_scaling(results, Statistic::median);
  EXPECT_FALSE(results[1].speedup.has_value());
  EXPECT_FALSE(results[1].scaling_efficiency.has_value());
  EXPECT_THAT(results[1].scaling_refused, ::testing::StartsWith("speed-up 7.08 over 1x1-bs2-fp32 on 2 devices is above 2 x (1 + "));
  EXPECT_THAT(results[1].scaling_refused, ::testing::HasSubstr("efficiency 3.54 is impossible"));
  EXPECT_NEAR(*results[3].scaling_efficiency, 1.03, 1e-9);
  EXPECT_TRUE(results[3].scaling_refused.empty());
  // The noise allowed grows with the two cases' spread: 5% + twice their cvs.
  EXPECT_DOUBLE_EQ(scaling_noise(0.0, 0.0), 0.05);
  EXPECT_DOUBLE_EQ(scaling_noise(0.01, 0.02), 0.11);
  // Measured again, undisturbed: published, and the refusal is gone.
  results[0] = succeeded({1, 1, 2, Precision::fp32}, {2.70, 2.72, 2.71});
  apply_scaling(results, Statistic::median);
  ASSERT_TRUE(results[1].speedup.has_value());
  EXPECT_NEAR(*results[1].speedup, 5.24 / 2.71, 1e-9);
  EXPECT_TRUE(results[1].scaling_refused.empty());
}

TEST(Statistics, FailedBaselineMeansNoSpeedup) {
  std::vector<CaseResult> results{succeeded({1, 8, 128, Precision::amp}, {7600.0})};
  CaseResult failed;
  failed.case_ = {1, 1, 128, Precision::amp};
  failed.state = CaseState::Failed;
  failed.reason = "OutOfMemory";
  results.push_back(failed);
  results[0].speedup = 99.0;  // stale values are cleared
  apply_scaling(results, Statistic::median);
  EXPECT_FALSE(results[0].speedup.has_value());
  EXPECT_FALSE(results[0].scaling_efficiency.has_value());
  EXPECT_FALSE(results[1].speedup.has_value());
}

// Issue 37: a case whose repeats spread by more than maxCv is measured again, one repeat at a time;
// the last `repeats` are reported and judged.
TEST(Stability, AnotherRepeatWhileTheLastOnesSpreadTooMuch) {
  const StabilitySpec spec{std::nullopt, 3, false};
  const double bound = max_cv(spec, false);
  EXPECT_DOUBLE_EQ(bound, kDefaultMaxCvCpu);
  EXPECT_DOUBLE_EQ(max_cv(spec, true), kDefaultMaxCvGpu);
  EXPECT_DOUBLE_EQ(max_cv(StabilitySpec{0.2, 3, false}, true), 0.2);
  std::vector<double> t{10.0, 10.1};
  EXPECT_FALSE(measure_again(t, 3, spec, bound));  // not all repeats measured yet
  t.push_back(5.0);                                 // a disturbed repeat: cv 0.35
  EXPECT_TRUE(measure_again(t, 3, spec, bound));
  t.push_back(10.0);                                // the disturbed one is still among the last 3
  EXPECT_TRUE(measure_again(t, 3, spec, bound));
  t.push_back(10.05);
  t.push_back(10.1);  // the last 3 agree: no more
  EXPECT_FALSE(measure_again(t, 3, spec, bound));
  const StabilityReport stable = judge_stability(t, 3, bound);
  EXPECT_EQ(stable.verdict, StabilityVerdict::stable);
  EXPECT_EQ(stable.extra_repeats, 3);
  EXPECT_EQ(stable.discarded, (std::vector<double>{10.0, 10.1, 5.0}));
  EXPECT_NEAR(stable.cv, summarize(std::vector<double>{10.0, 10.05, 10.1}).cv, 1e-15);

  // At the limit, it stops and stays unstable; one repeat cannot spread, so it is never judged so.
  const std::vector<double> noisy{10.0, 5.0, 10.0, 5.0, 10.0, 5.0};
  EXPECT_FALSE(measure_again(noisy, 3, spec, bound));
  const StabilityReport unstable = judge_stability(noisy, 3, bound);
  EXPECT_EQ(unstable.verdict, StabilityVerdict::unstable);
  EXPECT_EQ(unstable.extra_repeats, 3);
  EXPECT_FALSE(measure_again(std::vector<double>{1.0, 9.0}, 1, spec, bound));
  EXPECT_FALSE(measure_again(std::vector<double>{10.0, 5.0, 10.0}, 3, StabilitySpec{std::nullopt, 0, false},
                             bound));  // extraRepeats 0: judged only
  const std::string why = describe_unstable(unstable, 3, summarize(std::vector<double>{5.0, 10.0, 5.0}));
  EXPECT_THAT(why, ::testing::StartsWith("cv 43.3% over the last 3 repeats is above the bound 5.0% after 3 more repeats"));
  EXPECT_THAT(why, ::testing::HasSubstr("ranged from 5.00 to 10.00"));
  EXPECT_THROW(judge_stability(std::vector<double>{1.0}, 3, bound), std::invalid_argument);
}

// An unstable case is neither best, nor a baseline, nor scaled, unless the user includes it.
TEST(Stability, UnstableCasesAreLeftOutOfBestAndScaling) {
  const auto unstable = [](CaseResult r) {
    r.stability = StabilityReport{StabilityVerdict::unstable, 0.02, 0.3, 7, std::vector<double>(7, 1.0)};
    r.reason = kReasonUnstable;
    return r;
  };
  std::vector<CaseResult> results{
      unstable(succeeded({1, 1, 8, Precision::fp32}, {100.0, 60.0, 100.0})),
      succeeded({1, 2, 8, Precision::fp32}, {190.0, 191.0, 192.0}),
      succeeded({1, 1, 16, Precision::fp32}, {110.0, 110.0, 110.0}),
      unstable(succeeded({1, 2, 16, Precision::fp32}, {300.0, 150.0, 300.0})),
  };
  apply_scaling(results, Statistic::median);
  EXPECT_FALSE(results[1].speedup.has_value());
  EXPECT_EQ(results[1].scaling_refused,
            "its baseline 1x1-bs8-fp32 is unstable (Unstable): measure it again, or set "
            "methodology.stability.includeUnstable");
  EXPECT_FALSE(results[3].speedup.has_value());
  EXPECT_THAT(results[3].scaling_refused, ::testing::StartsWith("this case is unstable (Unstable)"));
  EXPECT_DOUBLE_EQ(*results[2].speedup, 1.0);

  BenchmarkRunStatus status;
  status.results = results;
  refresh_derived_status(status, {}, Statistic::median, false);
  ASSERT_TRUE(status.best.has_value());
  EXPECT_EQ(status.best->case_id, "1x2-bs8-fp32");  // 191; the unstable 300 is left out
  refresh_derived_status(status, {}, Statistic::median, true);
  EXPECT_EQ(status.best->case_id, "1x2-bs16-fp32");
  EXPECT_DOUBLE_EQ(*status.results[1].speedup, 1.91);
  EXPECT_TRUE(status.results[1].scaling_refused.empty());
}

// The U test against its definition: every way of splitting the pooled values into samples of
// the same sizes, each counted by comparing pairs (a tie counts a half), as no rank enters.
double enumerated_p_value(const std::vector<double>& a, const std::vector<double>& b) {
  std::vector<double> pooled(a);
  pooled.insert(pooled.end(), b.begin(), b.end());
  const auto u_of = [](const std::vector<double>& x, const std::vector<double>& y) {
    double u = 0;
    for (const double xi : x) {
      for (const double yi : y) u += xi > yi ? 1.0 : (xi == yi ? 0.5 : 0.0);
    }
    return u;
  };
  const double observed = u_of(a, b);
  double all = 0, at_most = 0, at_least = 0;
  const std::size_t n = pooled.size();
  for (unsigned mask = 0; mask < (1u << n); ++mask) {
    if (static_cast<std::size_t>(__builtin_popcount(mask)) != a.size()) continue;
    std::vector<double> x, y;
    for (std::size_t i = 0; i < n; ++i) ((mask >> i) & 1u ? x : y).push_back(pooled[i]);
    const double u = u_of(x, y);
    all += 1;
    at_most += u <= observed + 1e-9 ? 1 : 0;
    at_least += u >= observed - 1e-9 ? 1 : 0;
  }
  return std::min(1.0, 2.0 * std::min(at_most, at_least) / all);
}

TEST(RankTest, SeparatedSamplesReachTheLeastPValueTheirSizesAllow) {
  const std::vector<double> before{10.0, 10.2, 10.1}, after{9.0, 9.1, 9.2};
  const RankTest test = mann_whitney(before, after);
  EXPECT_TRUE(test.exact);
  EXPECT_DOUBLE_EQ(test.u, 9.0);  // every pair has before's value the larger
  EXPECT_DOUBLE_EQ(test.p_value, 0.1);
  EXPECT_DOUBLE_EQ(least_p_value(3, 3), 0.1);  // 2 of C(6, 3) = 20 arrangements
  EXPECT_DOUBLE_EQ(mann_whitney(after, before).u, 0.0);
  EXPECT_DOUBLE_EQ(mann_whitney(after, before).p_value, 0.1);

  const std::vector<double> four{1, 2, 3, 4}, higher{5, 6, 7, 8};
  EXPECT_NEAR(mann_whitney(four, higher).p_value, 2.0 / 70.0, 1e-15);
  EXPECT_NEAR(least_p_value(4, 4), 2.0 / 70.0, 1e-15);
  EXPECT_NEAR(least_p_value(7, 7), 2.0 / 3432.0, 1e-15);
  EXPECT_DOUBLE_EQ(least_p_value(1, 1), 1.0);
  EXPECT_DOUBLE_EQ(least_p_value(0, 5), 1.0);
  EXPECT_NEAR(least_p_value(30, 30), 2.0 / 118264581564861424.0, 1e-30);
  EXPECT_NEAR(least_p_value(40, 30), 2.0 * std::exp(std::lgamma(41.0) + std::lgamma(31.0) - std::lgamma(71.0)), 1e-30);
  EXPECT_GE(least_p_value(1000, 1000), 0.0);  // 2e-600 underflows; no overflow to infinity
  EXPECT_LT(least_p_value(1000, 1000), 1e-300);
}

TEST(RankTest, ExactPValuesMatchEveryArrangementCountedIncludingTies) {
  // Values on a coarse grid tie often; sizes up to 7 against 7 (3,432 arrangements).
  unsigned state = 12345;
  const auto next = [&] { return state = state * 1103515245u + 12345u, (state >> 16) % 6; };
  for (int trial = 0; trial < 60; ++trial) {
    const auto n1 = static_cast<std::size_t>(1 + trial % 7), n2 = static_cast<std::size_t>(1 + (trial / 7) % 7);
    std::vector<double> a, b;
    for (std::size_t i = 0; i < n1; ++i) a.push_back(100.0 + static_cast<double>(next()));
    for (std::size_t i = 0; i < n2; ++i) b.push_back(101.0 + static_cast<double>(next()));
    const RankTest test = mann_whitney(a, b);
    ASSERT_TRUE(test.exact);
    EXPECT_NEAR(test.p_value, enumerated_p_value(a, b), 1e-12) << "trial " << trial;
    EXPECT_GE(test.p_value + 1e-15, least_p_value(n1, n2)) << "trial " << trial;
  }
}

TEST(RankTest, AllTiedOrIdenticalSamplesShowNoDifference) {
  const std::vector<double> same{5.0, 5.0, 5.0, 5.0};
  EXPECT_DOUBLE_EQ(mann_whitney(same, same).p_value, 1.0);
  EXPECT_DOUBLE_EQ(mann_whitney(same, same).u, 8.0);
  std::vector<double> many(80, 5.0);  // past the exact bound: the approximation with every value tied
  const RankTest test = mann_whitney(many, many);
  EXPECT_FALSE(test.exact);
  EXPECT_DOUBLE_EQ(test.p_value, 1.0);
  EXPECT_THROW(mann_whitney(std::vector<double>{}, same), std::invalid_argument);
  EXPECT_THROW(mann_whitney(same, std::vector<double>{1.0, std::nan("")}), std::invalid_argument);
}

TEST(RankTest, LargeSamplesUseTheNormalApproximation) {
  // 80 against 80, the second shifted by a little more than the spread within: the exact count
  // would take 2e8 steps, the approximation gives a p-value below any usual level.
  std::vector<double> a, b;
  for (int i = 0; i < 80; ++i) {
    a.push_back(100.0 + (i * 37 % 80) / 10.0);
    b.push_back(103.0 + (i * 53 % 80) / 10.0);
  }
  const RankTest test = mann_whitney(a, b);
  EXPECT_FALSE(test.exact);
  EXPECT_LT(test.p_value, 1e-6);
  EXPECT_LT(test.u, 80.0 * 80.0 / 2.0);
  // Interleaved samples of one grid are the same distribution: a p-value near 1.
  std::vector<double> odd, even;
  for (int i = 0; i < 160; ++i) (i % 2 == 0 ? even : odd).push_back(i);
  EXPECT_GT(mann_whitney(odd, even).p_value, 0.8);
}

}  // namespace
}  // namespace dlbench
