#include "methodology.hpp"

#include <stdexcept>
#include <string>

#include "dlbench/core/statistics.hpp"

namespace dlbench::worker {

std::vector<RepeatMeasurement> run_methodology(const Workload& workload, const Methodology& methodology,
                                               long global_batch_size,
                                               const std::function<void(int, const RepeatMeasurement&)>& on_repeat) {
  HostClockMarks host_clock(workload.synchronize);
  StepMarks& marks = workload.marks != nullptr ? *workload.marks : host_clock;
  const auto read = [&marks](int expected) {
    std::vector<double> seconds = marks.intervals();
    if (seconds.size() != static_cast<std::size_t>(expected)) {
      throw std::logic_error("step marks: " + std::to_string(seconds.size()) + " intervals for " +
                             std::to_string(expected) + " steps");
    }
    return seconds;
  };
  std::vector<RepeatMeasurement> repeats;
  for (int r = 0; r < methodology.repeats; ++r) {
    if (workload.on_step) marks.mark();
    for (int i = 0; i < methodology.warmup_steps; ++i) {
      workload.step();
      if (workload.on_step) marks.mark();
    }
    if (workload.on_step) {
      for (const double s : read(methodology.warmup_steps)) workload.on_step(r, false, s);
    }
    workload.synchronize();
    RepeatMeasurement m;
    marks.mark();
    for (int i = 0; i < methodology.measure_steps; ++i) {
      workload.step();
      marks.mark();
    }
    m.step_seconds = read(methodology.measure_steps);  // waits for the last step
    if (workload.on_step) {
      for (const double s : m.step_seconds) workload.on_step(r, true, s);
    }
    m.measured_seconds = 0;
    for (const double s : m.step_seconds) m.measured_seconds += s;
    if (workload.slowest_rank) {
      std::vector<double> times = m.step_seconds;
      times.push_back(m.measured_seconds);
      workload.slowest_rank(times);
      m.measured_seconds = times.back();
      times.pop_back();
      m.step_seconds = std::move(times);
    }
    m.throughput = repeat_throughput(global_batch_size, methodology.measure_steps, m.measured_seconds);
    if (on_repeat) on_repeat(r, m);
    repeats.push_back(std::move(m));
  }
  return repeats;
}

}  // namespace dlbench::worker
