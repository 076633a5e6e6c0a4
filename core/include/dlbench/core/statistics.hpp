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
void apply_scaling(std::vector<CaseResult>& results, Statistic statistic);

// How far above 1 a measured efficiency may go before it is refused: 5% (caches can make a
// larger share of the model fit per device) plus twice the two cases' coefficients of variation
// (each ratio's own noise).
double scaling_noise(double case_cv, double baseline_cv);

}  // namespace dlbench
