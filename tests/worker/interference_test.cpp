// Other load over the measured repeats, from /proc files laid out as the kernel writes them.
#include <filesystem>
#include <fstream>
#include <string>

#include <gtest/gtest.h>
#include <unistd.h>

#include "interference.hpp"

namespace dlbench::worker {
namespace {

TEST(Interference, PressureIsAShareOfTheWallTimeAndStealOfTheCpuTime) {
  const auto proc = std::filesystem::temp_directory_path() / ("dlbench-proc-" + std::to_string(::getpid()));
  std::filesystem::create_directories(proc / "pressure");
  std::ofstream(proc / "pressure" / "cpu") << "some avg10=1.00 avg60=0.50 avg300=0.10 total=1000000\n"
                                              "full avg10=0.00 avg60=0.00 avg300=0.00 total=0\n";
  std::ofstream(proc / "stat") << "cpu  100 0 50 800 10 0 0 40 0 0\ncpu0 50 0 25 400 5 0 0 20 0 0\n";
  CpuCounters before = read_cpu_counters(proc);
  ASSERT_TRUE(before.pressure_some_us.has_value());
  EXPECT_EQ(*before.pressure_some_us, 1000000u);
  EXPECT_EQ(before.steal_ticks, 40u);
  EXPECT_EQ(before.all_ticks, 1000u);
  // One second later: tasks waited 0.3 s for a CPU; 100 more ticks, 5 of them stolen.
  std::ofstream(proc / "pressure" / "cpu") << "some avg10=1.00 avg60=0.50 avg300=0.10 total=1300000\n";
  std::ofstream(proc / "stat") << "cpu  180 0 60 805 10 0 0 45 0 0\n";
  CpuCounters after = read_cpu_counters(proc);
  after.at = before.at + std::chrono::seconds(1);
  const InterferenceReport loaded = interference_between(before, after);
  ASSERT_TRUE(loaded.cpu_pressure.has_value());
  EXPECT_NEAR(*loaded.cpu_pressure, 0.3, 1e-9);
  EXPECT_NEAR(loaded.cpu_steal, 0.05, 1e-9);
  EXPECT_EQ(loaded.verdict, InterferenceVerdict::interfered);
  // Quiet: 2% waiting, no steal.
  after.pressure_some_us = *before.pressure_some_us + 20000;
  after.steal_ticks = before.steal_ticks;
  EXPECT_EQ(interference_between(before, after).verdict, InterferenceVerdict::clean);
  // Steal alone above 10% is interference too (another guest on the host).
  after.steal_ticks = before.steal_ticks + 20;
  EXPECT_EQ(interference_between(before, after).verdict, InterferenceVerdict::interfered);
  // A kernel without PSI: pressure unknown, steal still counts; nothing readable: clean, no figures.
  std::filesystem::remove_all(proc / "pressure");
  const CpuCounters no_psi = read_cpu_counters(proc);
  EXPECT_FALSE(no_psi.pressure_some_us.has_value());
  EXPECT_FALSE(interference_between(no_psi, no_psi).cpu_pressure.has_value());
  std::filesystem::remove_all(proc);
  const CpuCounters nothing = read_cpu_counters(proc);
  EXPECT_EQ(interference_between(nothing, nothing).verdict, InterferenceVerdict::clean);
}

}  // namespace
}  // namespace dlbench::worker
