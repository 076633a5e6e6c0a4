// `dlbench run --resume`: an earlier status of the same run carried into a new one, so that an
// interrupted sweep, or one whose matrix grew, runs only the cases that have no result yet.
//
// A result carries over only where it would be measured the same way today: the same spec in
// everything but which cases run and how often they are tried (matrix, cases, limits, preflight),
// and the same executor (backend, devices and their models, CPU, dlbench version:
// kMeasuredByAnnotation). The status itself is the state machine's (run_state.hpp): resuming
// only reopens it.
#pragma once

#include <string>
#include <vector>

#include "dlbench/core/benchmark_run.hpp"
#include "dlbench/core/planner.hpp"

namespace dlbench {

// metadata.annotations key that `dlbench run` writes into its status file: what measures the
// run's cases ("dlbench 0.1.0: cuda backend, 8 devices (NVIDIA H200); CPU …"), which --resume
// compares. Each result's own environment (status.results[].environment) says more, per case.
inline constexpr const char* kMeasuredByAnnotation = "dlbench.io/measured-by";

struct SpecDifference {
  std::string path;        // "spec.methodology.measureSteps"
  std::string earlier, now;  // the values as compact JSON; "absent" where one has none
  bool operator==(const SpecDifference&) const = default;
};

// Where two specs differ in anything that shapes a measurement: all of the spec but matrix,
// cases, limits and preflight, field by field. Empty when results of one are results of the
// other. Defaults count as written out.
std::vector<SpecDifference> measurement_differences(const BenchmarkRunSpec& earlier, const BenchmarkRunSpec& now);

struct Resumption {
  // The status the run goes on from: every case result kept (Succeeded, Failed with its
  // attempts spent, Skipped by this executor), the phase Pending again, a Failed or Complete
  // condition turned False with reason Resumed, the start time kept and the completion time
  // cleared. Dropped, to be decided again: a preflight that failed and the cases it skipped.
  BenchmarkRunStatus status;
  int kept = 0;                        // case results carried over
  int to_run = 0;                      // planned cases without one
  int retried = 0;                     // of those, cases whose Failed result was dropped (retry_failed)
  bool preflight_to_run = false;       // the planned preflight has no outcome to keep
  std::vector<std::string> unplanned;  // ids of results for cases the plan no longer has

  // Every planned case has its result, and the preflight its outcome: the status stands as written.
  bool nothing_to_run() const { return to_run == 0 && !preflight_to_run; }
};

// `previous`: the status last written (a new run goes on from an empty one); `plan` and
// `preflight_planned`: the spec's now. When `unplanned` is not empty the run must not resume:
// going on would drop those results. `retry_failed`: every Failed case result is dropped too, so
// that its case runs again with all its attempts (an out-of-memory fixed by a smaller neighbour,
// a node back); Succeeded and Skipped ones stay.
Resumption resume_from(const BenchmarkRunStatus& previous, const std::vector<PlannedCase>& plan,
                       bool preflight_planned, std::int64_t generation, const std::string& now,
                       bool retry_failed = false);

}  // namespace dlbench
