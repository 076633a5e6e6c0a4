#include "dlbench/core/statistics.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iomanip>
#include <map>
#include <sstream>
#include <numeric>
#include <stdexcept>
#include <utility>
#include <vector>

namespace dlbench {
namespace {

void require_finite(std::span<const double> samples) {
  if (samples.empty()) throw std::invalid_argument("statistics of an empty sample");
  for (const double v : samples) {
    if (!std::isfinite(v)) throw std::invalid_argument("statistics of a sample with a value that is not finite");
  }
}

}  // namespace

double median(std::span<const double> samples) {
  require_finite(samples);
  std::vector<double> sorted(samples.begin(), samples.end());
  std::sort(sorted.begin(), sorted.end());
  const std::size_t n = sorted.size();
  return n % 2 == 1 ? sorted[n / 2] : (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0;
}

SampleSummary summarize(std::span<const double> samples) {
  require_finite(samples);
  SampleSummary s;
  const auto n = static_cast<double>(samples.size());
  s.median = median(samples);
  s.mean = std::accumulate(samples.begin(), samples.end(), 0.0) / n;
  const auto [lo, hi] = std::minmax_element(samples.begin(), samples.end());
  s.min = *lo;
  s.max = *hi;
  if (samples.size() > 1) {
    double squares = 0;
    for (const double v : samples) squares += (v - s.mean) * (v - s.mean);
    s.stddev = std::sqrt(squares / (n - 1.0));
  }
  s.cv = s.mean != 0 ? s.stddev / s.mean : 0.0;
  return s;
}

double reported_value(const SampleSummary& summary, Statistic statistic) {
  return statistic == Statistic::mean ? summary.mean : summary.median;
}

double repeat_throughput(long global_batch_size, long measured_steps, double seconds) {
  if (global_batch_size <= 0 || measured_steps <= 0) {
    throw std::invalid_argument("throughput needs a positive batch size and step count");
  }
  if (!(seconds > 0) || !std::isfinite(seconds)) {
    throw std::invalid_argument("throughput needs a positive, finite measured time");
  }
  return static_cast<double>(global_batch_size) * static_cast<double>(measured_steps) / seconds;
}

double least_p_value(std::size_t n1, std::size_t n2) {
  if (n1 == 0 || n2 == 0) return 1.0;
  if (n1 + n2 <= 60) {  // C(60, 30) < 2^63: exact
    std::uint64_t arrangements = 1;
    for (std::size_t i = 1; i <= std::min(n1, n2); ++i) arrangements = arrangements * (n1 + n2 + 1 - i) / i;
    return std::min(1.0, 2.0 / static_cast<double>(arrangements));
  }
  // C(n1 + n2, n1) in logarithms: 1,000 repeats against 1,000 overflow a double (and the p-value
  // underflows to 0).
  const double log_arrangements = std::lgamma(static_cast<double>(n1 + n2) + 1) -
                                  std::lgamma(static_cast<double>(n1) + 1) - std::lgamma(static_cast<double>(n2) + 1);
  return std::min(1.0, 2.0 * std::exp(-log_arrangements));
}

RankTest mann_whitney(std::span<const double> a, std::span<const double> b) {
  require_finite(a);
  require_finite(b);
  const std::size_t n = a.size() + b.size();
  std::vector<std::pair<double, bool>> pooled;  // value, from a
  pooled.reserve(n);
  for (const double v : a) pooled.emplace_back(v, true);
  for (const double v : b) pooled.emplace_back(v, false);
  std::sort(pooled.begin(), pooled.end());
  // Twice each value's mid-rank, an integer: a tie over 1-based ranks i+1..j shares (i+1+j)/2.
  std::vector<long> doubled_rank(n);
  double tie_term = 0;  // the sum of t³ - t over the groups of t tied values
  for (std::size_t i = 0; i < n;) {
    std::size_t j = i;
    while (j < n && pooled[j].first == pooled[i].first) ++j;
    for (std::size_t k = i; k < j; ++k) doubled_rank[k] = static_cast<long>(i + 1 + j);
    const auto t = static_cast<double>(j - i);
    tie_term += t * t * t - t;
    i = j;
  }
  long doubled_rank_sum_a = 0;
  for (std::size_t i = 0; i < n; ++i) {
    if (pooled[i].second) doubled_rank_sum_a += doubled_rank[i];
  }
  const auto n1 = static_cast<double>(a.size());
  const auto n2 = static_cast<double>(b.size());
  RankTest test;
  test.u = static_cast<double>(doubled_rank_sum_a) / 2.0 - n1 * (n1 + 1) / 2.0;

  // Exact: count the subsets of the smaller sample's size by their doubled rank sum (the
  // permutation distribution given these ranks, ties included); the two tails meet at the
  // observed sum. The smaller sample's sum is the total less the other's, so the tails swap and
  // the two-sided p-value is the same.
  const bool a_smaller = a.size() <= b.size();
  const std::size_t k = std::min(a.size(), b.size());
  // The doubled ranks sum to n(n + 1) whatever the ties.
  const long observed = a_smaller ? doubled_rank_sum_a : static_cast<long>(n * (n + 1)) - doubled_rank_sum_a;
  const long most = static_cast<long>(k * (2 * n - k + 1));  // the k largest ranks, doubled
  // A million steps (20 repeats against 20) bounds a status of 1,000 such cases to about a second;
  // past it the approximation is within 0.004 of the exact p-value (21 against 21, 300 draws in SciPy).
  if (static_cast<double>(n) * static_cast<double>(k) * static_cast<double>(most) <= 1e6) {
    std::vector<std::vector<double>> subsets(k + 1, std::vector<double>(static_cast<std::size_t>(most) + 1, 0.0));
    subsets[0][0] = 1;
    for (std::size_t i = 0; i < n; ++i) {
      const long rank = doubled_rank[i];
      for (std::size_t chosen = std::min(i + 1, k); chosen >= 1; --chosen) {
        const auto& fewer = subsets[chosen - 1];
        auto& row = subsets[chosen];
        for (long sum = most - rank; sum >= 0; --sum) {
          if (fewer[static_cast<std::size_t>(sum)] != 0) row[static_cast<std::size_t>(sum + rank)] += fewer[static_cast<std::size_t>(sum)];
        }
      }
    }
    double all = 0, at_most = 0, at_least = 0;
    for (long sum = 0; sum <= most; ++sum) {
      const double count = subsets[k][static_cast<std::size_t>(sum)];
      all += count;
      if (sum <= observed) at_most += count;
      if (sum >= observed) at_least += count;
    }
    test.p_value = std::min(1.0, 2.0 * std::min(at_most, at_least) / all);
    return test;
  }
  test.exact = false;
  const double mean_u = n1 * n2 / 2.0;
  const double variance = n1 * n2 / 12.0 * ((static_cast<double>(n) + 1) - tie_term / (static_cast<double>(n) * (static_cast<double>(n) - 1)));
  if (!(variance > 0)) return test;  // every value tied: nothing tells the samples apart
  const double z = std::max(0.0, std::abs(test.u - mean_u) - 0.5) / std::sqrt(variance);
  test.p_value = std::min(1.0, std::erfc(z / std::sqrt(2.0)));
  return test;
}

Scaling scaling(double baseline_throughput, double throughput, int devices) {
  if (!(baseline_throughput > 0) || devices <= 0) {
    throw std::invalid_argument("scaling needs a positive baseline throughput and device count");
  }
  Scaling s;
  s.speedup = throughput / baseline_throughput;
  s.efficiency = s.speedup / devices;
  return s;
}

double scaling_noise(double case_cv, double baseline_cv) { return 0.05 + 2.0 * (case_cv + baseline_cv); }

bool publishable(const CaseResult& r, bool include_unstable) {
  if (r.state != CaseState::Succeeded || !r.throughput) return false;
  return include_unstable || !r.stability || r.stability->verdict == StabilityVerdict::stable;
}

double max_cv(const StabilitySpec& spec, bool gpu) {
  return spec.max_cv.value_or(gpu ? kDefaultMaxCvGpu : kDefaultMaxCvCpu);
}

bool measure_again(std::span<const double> throughputs, int repeats, const StabilitySpec& spec, double bound) {
  const auto measured = static_cast<long>(throughputs.size());
  if (repeats < 2 || measured < repeats || measured >= static_cast<long>(repeats) + spec.extra_repeats) return false;
  return summarize(throughputs.last(static_cast<std::size_t>(repeats))).cv > bound;
}

StabilityReport judge_stability(std::span<const double> throughputs, int repeats, double bound) {
  if (repeats < 1 || throughputs.size() < static_cast<std::size_t>(repeats)) {
    throw std::invalid_argument("stability of " + std::to_string(throughputs.size()) + " repeats where " +
                                std::to_string(repeats) + " are reported");
  }
  const std::size_t extra = throughputs.size() - static_cast<std::size_t>(repeats);
  StabilityReport report;
  report.max_cv = bound;
  report.cv = summarize(throughputs.last(static_cast<std::size_t>(repeats))).cv;
  report.verdict = report.cv > bound ? StabilityVerdict::unstable : StabilityVerdict::stable;
  report.extra_repeats = static_cast<int>(extra);
  report.discarded.assign(throughputs.begin(), throughputs.begin() + static_cast<std::ptrdiff_t>(extra));
  return report;
}

std::string describe_unstable(const StabilityReport& report, int repeats, const SampleSummary& reported) {
  std::ostringstream out;
  out << std::fixed << std::setprecision(1) << "cv " << 100.0 * report.cv << "% over the last " << repeats
      << " repeats is above the bound " << 100.0 * report.max_cv << "% ";
  if (report.extra_repeats > 0) {
    out << "after " << report.extra_repeats << " more repeats";
  } else {
    out << "(not measured again)";
  }
  out << std::setprecision(2) << "; they ranged from " << reported.min << " to " << reported.max
      << ": something else used the device or the node, or its clocks moved";
  return out.str();
}

void apply_scaling(std::vector<CaseResult>& results, Statistic statistic, bool include_unstable) {
  struct Baseline {
    double value = 0;
    double cv = 0;
    std::string id;
  };
  std::map<std::pair<int, Precision>, Baseline> baselines;
  std::map<std::pair<int, Precision>, std::string> unstable_baselines;  // left out: their ids
  for (const CaseResult& r : results) {
    if (r.state != CaseState::Succeeded || !r.throughput || !r.case_.is_single_device()) continue;
    const std::pair key{r.case_.batch_size_per_device, r.case_.precision};
    const double value = reported_value(r.throughput->summary, statistic);
    if (!publishable(r, include_unstable)) {
      unstable_baselines[key] = case_id(r.case_);
    } else if (value > 0) {
      baselines[key] = {value, r.throughput->summary.cv, case_id(r.case_)};
    }
  }
  for (CaseResult& r : results) {
    r.speedup.reset();
    r.scaling_efficiency.reset();
    r.scaling_refused.clear();
    if (r.state != CaseState::Succeeded || !r.throughput) continue;
    const std::string how_to_include = "measure it again, or set methodology.stability.includeUnstable";
    if (!publishable(r, include_unstable)) {
      r.scaling_refused = "this case is unstable (" + std::string(kReasonUnstable) + "): " + how_to_include;
      continue;
    }
    const std::pair key{r.case_.batch_size_per_device, r.case_.precision};
    const auto it = baselines.find(key);
    if (it == baselines.end()) {
      if (const auto u = unstable_baselines.find(key); u != unstable_baselines.end()) {
        r.scaling_refused = "its baseline " + u->second + " is unstable (" + kReasonUnstable + "): " + how_to_include;
      }
      continue;
    }
    const Baseline& base = it->second;
    const Scaling s = scaling(base.value, reported_value(r.throughput->summary, statistic), r.case_.devices());
    const double noise = scaling_noise(r.throughput->summary.cv, base.cv);
    if (s.efficiency > 1.0 + noise) {
      std::ostringstream why;
      why << std::fixed << std::setprecision(2) << "speed-up " << s.speedup << " over " << base.id << " on "
          << r.case_.devices() << " devices is above " << r.case_.devices() << " x (1 + " << noise
          << " noise): efficiency " << s.efficiency << " is impossible, so one of the two cases was disturbed "
          << "(cv " << 100.0 * r.throughput->summary.cv << "% here, " << 100.0 * base.cv << "% there); measure both again";
      r.scaling_refused = why.str();
      continue;
    }
    r.speedup = s.speedup;
    r.scaling_efficiency = s.efficiency;
  }
}

}  // namespace dlbench
