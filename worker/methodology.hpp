// The measurement methodology, separate from any workload: for each repeat, run the warm-up
// steps untimed, synchronise, then queue the measured steps with a mark after each and read the
// marks once at the end; the repeat's throughput is global batch × measured steps / their total
// time. Nothing waits for the device between measured steps: marks in its queue (CUDA events)
// time each step where it ran.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "backend.hpp"
#include "dlbench/core/benchmark_run.hpp"

namespace dlbench::worker {

struct RepeatMeasurement {
  std::vector<double> step_seconds;  // each measured step, between the marks around it
  double measured_seconds = 0;       // all measured steps together
  double throughput = 0;             // samples per second
  // What this rank's device drew over the measured steps (Workload::energy_joules read after the
  // warm-up's synchronisation and after the last measured step); none without a counter.
  std::optional<double> energy_joules;
};

struct Workload {
  std::function<void()> step;         // one training step (may queue work asynchronously)
  std::function<void()> synchronize;  // waits for all queued work
  // Data parallel: replaces each time with the slowest rank's, element by element, so that
  // throughput is what the job as a whole achieved. Called outside the timed region.
  std::function<void(std::vector<double>& seconds)> slowest_rank;
  // Every step's time (warm-up ones too), in order, for metrics, never for the result: after
  // the warm-up and after the measured steps of each repeat, once the marks are read.
  std::function<void(int repeat, bool measured, double seconds)> on_step;
  // Marks in the device's queue (Backend::make_step_marks); without them the host clock after
  // `synchronize`, once per step.
  StepMarks* marks = nullptr;
  // The device's energy counter in joules, where it has one (a GPU's, through NVML): read while
  // the device is idle, before the measured steps and after the last one finished.
  std::function<std::optional<double>()> energy_joules = {};
};

// What the caller of run_methodology says after a repeat: whether the repeats go on. `stop`
// ends them there (the training diverged: more repeats would time steps that train nothing).
enum class AfterRepeat { go_on, stop };

// Calls on_repeat after each repeat (for progress, live metrics and the loss). After
// methodology.repeats, another repeat runs while measure_again says so (the stability rule:
// measure_again() in core). The repeats run are returned, fewer where on_repeat said stop.
std::vector<RepeatMeasurement> run_methodology(
    const Workload& workload, const Methodology& methodology, long global_batch_size,
    const std::function<AfterRepeat(int repeat, const RepeatMeasurement&)>& on_repeat = {},
    const std::function<bool()>& measure_again = {});

}  // namespace dlbench::worker
