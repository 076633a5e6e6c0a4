#include "methodology.hpp"

#include <chrono>

#include "dlbench/core/statistics.hpp"

namespace dlbench::worker {

std::vector<RepeatMeasurement> run_methodology(const Workload& workload, const Methodology& methodology,
                                               long global_batch_size,
                                               const std::function<void(int, const RepeatMeasurement&)>& on_repeat) {
  using clock = std::chrono::steady_clock;
  std::vector<RepeatMeasurement> repeats;
  for (int r = 0; r < methodology.repeats; ++r) {
    for (int i = 0; i < methodology.warmup_steps; ++i) {
      const auto begin = clock::now();
      workload.step();
      if (workload.on_step) {
        workload.synchronize();
        workload.on_step(r, false, std::chrono::duration<double>(clock::now() - begin).count());
      }
    }
    workload.synchronize();
    RepeatMeasurement m;
    const auto start = clock::now();
    auto previous = start;
    for (int i = 0; i < methodology.measure_steps; ++i) {
      workload.step();
      workload.synchronize();
      const auto now = clock::now();
      m.step_seconds.push_back(std::chrono::duration<double>(now - previous).count());
      if (workload.on_step) workload.on_step(r, true, m.step_seconds.back());
      previous = clock::now();  // the callback's own time is not the step's
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
