#include "dlbench/core/statistics.hpp"

#include <algorithm>
#include <cmath>
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
