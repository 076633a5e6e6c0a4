#include "command/step_timing.hpp"

#include <algorithm>

#include "dlbench/core/statistics.hpp"

namespace dlbench::command {

StepTimingResult time_steps(std::span<const StepArrival> steps, const Methodology& m, long global_batch_size) {
  StepTimingResult result;
  const long per_repeat = static_cast<long>(m.warmup_steps) + m.measure_steps;
  const long needed = per_repeat * m.repeats;
  if (steps.empty()) {
    result.reason = "NoMeasurements";
    result.message = "the command printed no \"@dlbench step <samples>\" marker; " + std::to_string(needed) +
                     " were needed (" + std::to_string(m.repeats) + " repeats x (" + std::to_string(m.warmup_steps) +
                     " warm-up + " + std::to_string(m.measure_steps) + " measured steps))";
    return result;
  }
  if (static_cast<long>(steps.size()) < needed) {
    result.reason = "IncompleteMeasurement";
    result.message = "the command printed " + std::to_string(steps.size()) + " step markers; " +
                     std::to_string(needed) + " were needed (" + std::to_string(m.repeats) + " repeats x (" +
                     std::to_string(m.warmup_steps) + " warm-up + " + std::to_string(m.measure_steps) +
                     " measured steps)), so repeat " + std::to_string(static_cast<long>(steps.size()) / per_repeat + 1) +
                     " is incomplete";
    return result;
  }
  for (long i = 0; i < needed; ++i) {
    if (steps[static_cast<std::size_t>(i)].samples != global_batch_size) {
      result.reason = "SampleCountMismatch";
      result.message = "step " + std::to_string(i + 1) + " reported " +
                       std::to_string(steps[static_cast<std::size_t>(i)].samples) +
                       " samples; the case's global batch is " + std::to_string(global_batch_size) +
                       " (DLBENCH_BATCH_SIZE x DLBENCH_DEVICES): the script did not run the case it was given";
      return result;
    }
  }
  for (int r = 0; r < m.repeats; ++r) {
    const long first = r * per_repeat + m.warmup_steps;  // the repeat's first measured step
    double previous = first > 0 ? steps[static_cast<std::size_t>(first) - 1].seconds : 0.0;
    const double start = previous;
    for (long k = first; k < first + m.measure_steps; ++k) {
      const double now = steps[static_cast<std::size_t>(k)].seconds;
      result.repeats.step_seconds.push_back(now - previous);
      previous = now;
    }
    const double elapsed = previous - start;
    if (!(elapsed > 0)) {
      result.reason = "InvalidMeasurement";
      result.message = "repeat " + std::to_string(r + 1) + "'s " + std::to_string(m.measure_steps) +
                       " measured step markers arrived within one clock tick; no throughput can be computed";
      result.repeats = {};
      return result;
    }
    result.repeats.measured_seconds.push_back(elapsed);
    result.repeats.throughput.push_back(repeat_throughput(global_batch_size, m.measure_steps, elapsed));
  }
  result.ok = true;
  return result;
}

StepTimingResult time_complete_repeats(std::span<const StepArrival> steps, const Methodology& m, long global_batch_size) {
  const long per_repeat = static_cast<long>(m.warmup_steps) + m.measure_steps;
  Methodology complete = m;
  complete.repeats = static_cast<int>(std::min<long>(m.repeats, static_cast<long>(steps.size()) / per_repeat));
  if (complete.repeats == 0) {
    StepTimingResult none;
    none.reason = "NoMeasurements";
    none.message = "no repeat's " + std::to_string(per_repeat) + " steps all arrived";
    return none;
  }
  return time_steps(steps.first(static_cast<std::size_t>(complete.repeats * per_repeat)), complete, global_batch_size);
}

}  // namespace dlbench::command
