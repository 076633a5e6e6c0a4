// Other load on the node while a case is measured (issue 37: a 1-rank case measured beside a
// process using a core came out 10 times slower and was published as normal). Read twice, around
// the measured repeats: the kernel's CPU pressure stall information (the time in which some task
// waited for a CPU, cumulative microseconds) and the CPU time stolen by a hypervisor.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <optional>

#include "dlbench/core/benchmark_run.hpp"

namespace dlbench::worker {

struct CpuCounters {
  std::optional<std::uint64_t> pressure_some_us;  // /proc/pressure/cpu "some ... total="
  std::uint64_t steal_ticks = 0;                  // /proc/stat "cpu" line: steal
  std::uint64_t all_ticks = 0;                    // /proc/stat "cpu" line: every column
  std::chrono::steady_clock::time_point at;
};

// `proc` is /proc (a test points it elsewhere).
CpuCounters read_cpu_counters(const std::filesystem::path& proc = "/proc");

// What happened between two readings. Pressure is a share of the wall time (PSI counts a stall
// once, however many CPUs), steal a share of all CPU time.
InterferenceReport interference_between(const CpuCounters& before, const CpuCounters& after);

}  // namespace dlbench::worker
