// Helpers that every status writer (the operator, `dlbench run`) shares, so that the same
// world gives the same status.
#pragma once

#include <string>
#include <vector>

#include "dlbench/core/benchmark_run.hpp"
#include "dlbench/core/planner.hpp"

namespace dlbench {

// Kubernetes condition semantics: lastTransitionTime changes only when status changes.
// Returns true when anything changed.
bool set_condition(std::vector<Condition>& conditions, Condition condition, const std::string& now);
const Condition* find_condition(const std::vector<Condition>& conditions, ConditionType type);

// Recomputes what is derived from results: speed-up and efficiency, best throughput, and the
// progress counters and summary ("5/12"). The current case is left to the caller. `statistic` and
// `include_unstable` are the run's methodology: no default, so that no caller judges a run by
// other rules than its spec's.
void refresh_derived_status(BenchmarkRunStatus& status, const std::vector<PlannedCase>& plan, Statistic statistic,
                            bool include_unstable);

// Failure reasons that another attempt cannot change (the worker cannot run this case where it
// landed: a precision its backend or this CPU lacks). Both executors record such a result at
// once instead of spending limits.backoffLimit on it.
inline constexpr const char* kReasonUnsupported = "Unsupported";
// The run's gang scheduler needs a PodGroup resource that the cluster does not serve (its CRD
// is not installed): no attempt can be admitted until someone installs it.
inline constexpr const char* kReasonGangSchedulerUnavailable = "GangSchedulerUnavailable";
// The self-test found a check that failed: a verdict on this hardware and software, which
// another attempt does not change. Cases after a failed preflight are Skipped with
// kReasonPreflightFailed.
inline constexpr const char* kReasonSelfTestFailed = "SelfTestFailed";
inline constexpr const char* kReasonPreflightFailed = "PreflightFailed";
// RdmaNotUsed (nccl_log.hpp) is permanent too: the next attempt meets the same fabric; and so
// is LossNotFinite (benchmark_run.hpp): the next attempt diverges the same way.
bool failure_is_permanent(const std::string& reason);

// "2026-11-21T05:10:00Z"
std::string rfc3339_utc_now();

}  // namespace dlbench
