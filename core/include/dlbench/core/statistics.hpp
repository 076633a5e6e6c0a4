// The numbers of the methodology: summaries over repeats, throughput, speed-up, efficiency.
#pragma once

#include <optional>
#include <span>
#include <vector>

#include "dlbench/core/benchmark_run.hpp"

namespace dlbench {

// Median (mean of the two middle values for an even count), mean, min, max, sample standard
// deviation (n - 1; 0 for one sample) and coefficient of variation. Throws
// std::invalid_argument on an empty input or a value that is not finite.
SampleSummary summarize(std::span<const double> samples);
double median(std::span<const double> samples);

// The figure a case reports under methodology.statistic.
double reported_value(const SampleSummary& summary, Statistic statistic);

// One repeat's throughput: global batch × measured steps / the time those steps took together.
// Throws std::invalid_argument when seconds is not positive or the counts are not positive.
double repeat_throughput(long global_batch_size, long measured_steps, double seconds);

// The two-sided Mann–Whitney U test of whether two samples' repeats come from one distribution,
// which assumes nothing of their shape (throughput repeats are skewed: a disturbance only slows).
// `u` is the first sample's statistic (pairs in which its value is the larger, ties counting a
// half). The p-value is exact (the permutation distribution of the pooled ranks, ties as mid-ranks)
// while that takes at most a million steps (two samples of 20 repeats), else the normal
// approximation with the tie and continuity corrections. Throws std::invalid_argument as
// summarize does.
struct RankTest {
  double u = 0;
  double p_value = 1;
  bool exact = true;
};
RankTest mann_whitney(std::span<const double> a, std::span<const double> b);

// The smallest two-sided p-value the test can give two samples of these sizes, whatever their
// values: 2 / C(n1 + n2, n1), at most 1. Three repeats against three can never go below 0.1.
double least_p_value(std::size_t n1, std::size_t n2);

struct Scaling {
  double speedup = 0;
  double efficiency = 0;  // speedup / devices
};
Scaling scaling(double baseline_throughput, double throughput, int devices);

// Sets speedup and scalingEfficiency on every succeeded result whose 1×1 case with the same
// batch size and precision also succeeded; clears them on the others. A scaling efficiency
// above 1 + scaling_noise(...) is physically impossible (more than linear over the devices) and
// is never published: speedup and scalingEfficiency stay unset and scalingRefused names the
// figure (one of the two cases was disturbed: another load, a throttled device).
// Unstable cases (stability.verdict unstable) are neither a baseline nor scaled, unless
// include_unstable: scalingRefused says why.
void apply_scaling(std::vector<CaseResult>& results, Statistic statistic, bool include_unstable = false);

// Whether a result may stand in best, speed-up and efficiency: succeeded with a throughput, and
// stable unless the user asked for unstable cases too.
bool publishable(const CaseResult& result, bool include_unstable);

// How far above 1 a measured efficiency may go before it is refused: 5% (caches can make a
// larger share of the model fit per device) plus twice the two cases' coefficients of variation
// (each ratio's own noise).
double scaling_noise(double case_cv, double baseline_cv);

// The spread a case's repeats may have: the spec's maxCv, or the device's default.
double max_cv(const StabilitySpec& spec, bool gpu);

// After each repeat, whether to measure one more: the last `repeats` throughputs spread by more
// than max_cv, and fewer than repeats + spec.extra_repeats have been measured. Every rank of a
// data-parallel case sees the same (slowest-rank) throughputs, so all of them agree.
bool measure_again(std::span<const double> throughputs, int repeats, const StabilitySpec& spec, double max_cv);

// The verdict once measuring stopped: the last `repeats` throughputs are reported, the earlier ones
// are discarded (kept in the report). Throws std::invalid_argument for fewer than `repeats`.
StabilityReport judge_stability(std::span<const double> throughputs, int repeats, double max_cv);
// "cv 5.3% over the last 7 repeats is above the bound 2.0% after 7 more repeats (10.1 to 14.3)".
std::string describe_unstable(const StabilityReport& report, int repeats, const SampleSummary& reported);

}  // namespace dlbench
