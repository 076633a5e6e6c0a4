// spec.matrix (or spec.cases) → the ordered list of cases a run executes.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "dlbench/core/benchmark_run.hpp"

namespace dlbench {

struct PlannedCase {
  CaseSpec spec;
  std::string id;                  // case_id(spec), e.g. "2x8-bs128-amp"
  bool baseline = false;           // 1 node × 1 device: the reference for speed-up
  bool added_as_baseline = false;  // not asked for; added so that speed-up can be computed

  bool operator==(const PlannedCase&) const = default;
};

// Deterministic: the same spec gives the same list, whatever order its values are written in.
// Every (batch, precision) gets a 1×1 baseline. Order: baselines first, then by devices,
// nodes, batch size and precision (fp32, tf32, amp, bf16), all ascending.
std::vector<PlannedCase> plan_cases(const BenchmarkRunSpec& spec);

// spec.preflight.selfTest: the self-test on the largest topology the plan uses (its most nodes,
// its most GPUs per node), with the plan's smallest batch and first precision as the case's
// other fields; nothing when the run asks for no preflight.
std::optional<PlannedCase> plan_preflight(const BenchmarkRunSpec& spec);
// The distinct precisions of the plan, in the API's order (what the self-test checks).
std::vector<Precision> planned_precisions(const BenchmarkRunSpec& spec);

}  // namespace dlbench
