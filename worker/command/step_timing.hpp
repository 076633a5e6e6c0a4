// The methodology applied to step markers: the same slicing the native worker's
// run_methodology does, with arrival times of `@dlbench step` lines in place of timed steps.
#pragma once

#include <span>
#include <string>
#include <vector>

#include "dlbench/core/benchmark_run.hpp"

namespace dlbench::command {

struct StepArrival {
  double seconds = 0;  // on a monotonic clock, from the moment the command was started
  long samples = 0;    // as the marker reported it
};

struct TimedRepeats {
  std::vector<double> throughput;          // per repeat: global batch × measured steps / their time
  std::vector<double> measured_seconds;    // per repeat
  std::vector<double> step_seconds;        // every measured step, in order
};

struct StepTimingResult {
  bool ok = false;
  TimedRepeats repeats;  // when ok
  std::string reason;    // otherwise: IncompleteMeasurement, SampleCountMismatch, NoMeasurements
  std::string message;
};

// The command runs methodology.repeats × (warmupSteps + measureSteps) steps in one process, as
// the native worker does. Repeat r's measured steps are its last measureSteps; they are timed
// from the arrival of the step before them (the repeat's last warm-up step, or the previous
// repeat's last step, or the command's start when there is neither) to the arrival of the
// repeat's last step. Markers past the last needed one are ignored. Every measured step must
// report the case's global batch: a script that ran another batch measured another case.
StepTimingResult time_steps(std::span<const StepArrival> steps, const Methodology& methodology, long global_batch_size);

// The repeats a command that ended early (failed, stopped, out of time) completed: those whose
// every step arrived, timed as time_steps times them. Not ok where none did, or where one of
// their markers reported another batch (another case's figures).
StepTimingResult time_complete_repeats(std::span<const StepArrival> steps, const Methodology& methodology,
                                       long global_batch_size);

}  // namespace dlbench::command
