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
// progress counters and summary ("5/12"). The current case is left to the caller.
void refresh_derived_status(BenchmarkRunStatus& status, const std::vector<PlannedCase>& plan, Statistic statistic);

// "2026-11-21T05:10:00Z"
std::string rfc3339_utc_now();

}  // namespace dlbench
