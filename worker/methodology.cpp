#include "methodology.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "dlbench/core/statistics.hpp"

namespace dlbench::worker {
namespace {

// The device's energy counter in joules; NaN without one.
double read_energy(const Workload& workload) {
  if (!workload.energy_joules) return std::numeric_limits<double>::quiet_NaN();
  return workload.energy_joules().value_or(std::numeric_limits<double>::quiet_NaN());
}

}  // namespace

std::vector<RepeatMeasurement> run_methodology(const Workload& workload, const Methodology& methodology,
                                               long global_batch_size,
                                               const std::function<AfterRepeat(int, const RepeatMeasurement&)>& on_repeat,
                                               const std::function<bool()>& measure_again) {
  HostClockMarks host_clock(workload.synchronize);
  StepMarks& marks = workload.marks != nullptr ? *workload.marks : host_clock;
  // One phase (warm-up or measured steps): a mark before it and after every step; the times of
  // the steps already finished go to on_step as the phase runs, without waiting for the device.
  const auto phase = [&](int repeat, bool measured, int steps) {
    std::vector<double> seconds;
    const auto deliver = [&](const std::vector<double>& done) {
      for (const double s : done) {
        seconds.push_back(s);
        if (workload.on_step) workload.on_step(repeat, measured, s);
      }
    };
    marks.mark();
    for (int i = 0; i < steps; ++i) {
      workload.step();
      marks.mark();
      if (workload.on_step) deliver(marks.drain(false));
    }
    deliver(marks.drain(true));  // waits for the last step
    if (seconds.size() != static_cast<std::size_t>(steps)) {
      throw std::logic_error("step marks: " + std::to_string(seconds.size()) + " intervals for " +
                             std::to_string(steps) + " steps");
    }
    return seconds;
  };
  std::vector<RepeatMeasurement> repeats;
  for (int r = 0; r < methodology.repeats || (measure_again && measure_again()); ++r) {
    if (workload.on_step) {
      phase(r, false, methodology.warmup_steps);
    } else {
      for (int i = 0; i < methodology.warmup_steps; ++i) workload.step();
    }
    workload.synchronize();
    const double energy_before = read_energy(workload);
    RepeatMeasurement m;
    m.step_seconds = phase(r, true, methodology.measure_steps);
    if (!std::isnan(energy_before)) {
      // A counter that went backwards (the driver reloaded) measured nothing.
      const double energy_after = read_energy(workload);
      if (energy_after >= energy_before) m.energy_joules = energy_after - energy_before;
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
    const AfterRepeat next = on_repeat ? on_repeat(r, m) : AfterRepeat::go_on;
    repeats.push_back(std::move(m));
    if (next == AfterRepeat::stop) break;
  }
  return repeats;
}

}  // namespace dlbench::worker
