// DLBENCH_INJECT_FAILURE=RANK:STEP: rank RANK's STEP-th training step (counted from 1 over the
// case's warm-up and measured steps alike) throws before it starts, as a device error inside a
// step would, and no other rank learns of it. No healthy machine fails that way on demand, and it
// is the failure that decides whether a job ends or hangs: the others are left inside the step's
// collectives. Tests use it (mpi.OneRanksFailureReachesEveryRank); a user can set it in a
// BenchmarkRun's worker.env to see what their cluster makes of a rank lost mid-case.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace dlbench::worker {

inline constexpr const char* kInjectFailureVariable = "DLBENCH_INJECT_FAILURE";

struct InjectedFailure {
  int rank = 0;
  std::int64_t step = 1;  // from 1
};

// `value` (null or empty: unset) as RANK:STEP, RANK >= 0 and STEP >= 1, decimal. Throws
// std::invalid_argument naming the variable and the form for anything else.
std::optional<InjectedFailure> parse_injected_failure(const char* value);

// Counts one rank's steps and throws InjectedStepFailure at the one chosen for it, once.
class StepFailpoint {
 public:
  StepFailpoint(const std::optional<InjectedFailure>& failure, int rank)
      : step_(failure && failure->rank == rank ? failure->step : 0) {}
  void before_step();

 private:
  std::int64_t step_;  // 0: never on this rank
  std::int64_t taken_ = 0;
};

}  // namespace dlbench::worker
