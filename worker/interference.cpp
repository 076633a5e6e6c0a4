#include "interference.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>
#include <string>

namespace dlbench::worker {

CpuCounters read_cpu_counters(const std::filesystem::path& proc) {
  CpuCounters c;
  c.at = std::chrono::steady_clock::now();
  std::ifstream pressure(proc / "pressure" / "cpu");
  for (std::string line; std::getline(pressure, line);) {
    if (!line.starts_with("some ")) continue;
    const auto total = line.find("total=");
    if (total == std::string::npos) break;
    try {
      c.pressure_some_us = std::stoull(line.substr(total + 6));
    } catch (const std::exception&) {
      c.pressure_some_us.reset();
    }
    break;
  }
  std::ifstream stat(proc / "stat");
  std::string line;
  if (std::getline(stat, line) && line.starts_with("cpu ")) {
    // user nice system idle iowait irq softirq steal guest guest_nice (guests are inside user)
    std::istringstream fields(line.substr(4));
    std::uint64_t value = 0;
    for (int column = 0; column < 8 && fields >> value; ++column) {
      c.all_ticks += value;
      if (column == 7) c.steal_ticks = value;
    }
  }
  return c;
}

InterferenceReport interference_between(const CpuCounters& before, const CpuCounters& after) {
  InterferenceReport r;
  const double wall_us = std::chrono::duration<double, std::micro>(after.at - before.at).count();
  if (before.pressure_some_us && after.pressure_some_us && wall_us > 0 && *after.pressure_some_us >= *before.pressure_some_us) {
    r.cpu_pressure = std::clamp(static_cast<double>(*after.pressure_some_us - *before.pressure_some_us) / wall_us, 0.0, 1.0);
  }
  if (after.all_ticks > before.all_ticks && after.steal_ticks >= before.steal_ticks) {
    r.cpu_steal = std::clamp(static_cast<double>(after.steal_ticks - before.steal_ticks) /
                                 static_cast<double>(after.all_ticks - before.all_ticks),
                             0.0, 1.0);
  }
  r.verdict = interference_verdict(r.cpu_pressure, r.cpu_steal);
  return r;
}

}  // namespace dlbench::worker
