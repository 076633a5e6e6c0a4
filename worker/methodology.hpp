// The measurement methodology, separate from any workload: for each repeat, run the
// warm-up steps untimed, synchronise, time the measured steps, synchronise; the repeat's
// throughput is global batch × measured steps / their total time.
#pragma once

#include <functional>
#include <vector>

#include "dlbench/core/benchmark_run.hpp"

namespace dlbench::worker {

struct RepeatMeasurement {
  std::vector<double> step_seconds;  // each measured step, wall clock after synchronisation
  double measured_seconds = 0;       // all measured steps together
  double throughput = 0;             // samples per second
};

struct Workload {
  std::function<void()> step;         // one training step (may queue work asynchronously)
  std::function<void()> synchronize;  // waits for all queued work
  // Data parallel: replaces each time with the slowest rank's, element by element, so that
  // throughput is what the job as a whole achieved. Called outside the timed region.
  std::function<void(std::vector<double>& seconds)> slowest_rank;
  // Live observation of every step (warm-up ones too): for metrics, never for the result.
  std::function<void(int repeat, bool measured, double seconds)> on_step;
};

// Calls on_repeat after each repeat (for progress and live metrics).
std::vector<RepeatMeasurement> run_methodology(
    const Workload& workload, const Methodology& methodology, long global_batch_size,
    const std::function<void(int repeat, const RepeatMeasurement&)>& on_repeat = {});

}  // namespace dlbench::worker
