// GpuMonitor against a stand-in NVML (tests/worker/fake_nvml.cpp): loading by name, the fallback to
// older entry points, sampling on its own thread, and the summary and verdict the result carries.
// On a lent GPU, bench/gpu_check.sh checks that the real driver's readings reach the result.
#include <cstdlib>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "gpu_monitor.hpp"

namespace dlbench::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

class GpuMonitorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : {"FAKE_NVML_SM_CLOCK", "FAKE_NVML_MAX_CLOCK", "FAKE_NVML_REASONS", "FAKE_NVML_PROCESSES",
                             "FAKE_NVML_TEMPERATURE", "FAKE_NVML_POWER_MW", "FAKE_NVML_BUS_ID",
                             "FAKE_NVML_NO_DRIVER_VERSION", "FAKE_NVML_ENERGY_MJ"}) {
      unsetenv(name);
    }
  }
  std::unique_ptr<GpuMonitor> open() {
    std::string why;
    auto monitor = GpuMonitor::open("00000000:3B:00.0", why, DLBENCH_FAKE_NVML);
    EXPECT_NE(monitor, nullptr) << why;
    return monitor;
  }
};

TEST_F(GpuMonitorTest, ReadsTheDeviceThroughOlderEntryPointsToo) {
  setenv("FAKE_NVML_SM_CLOCK", "1755", 1);
  setenv("FAKE_NVML_PROCESSES", "3", 1);
  setenv("FAKE_NVML_REASONS", "0x24", 1);  // power cap and software thermal slowdown
  const auto monitor = open();
  ASSERT_NE(monitor, nullptr);
  const GpuSample s = monitor->sample();
  EXPECT_EQ(s.sm_clock_mhz, 1755u);
  EXPECT_EQ(s.processes, 3u);  // asked with no room first, then with enough
  EXPECT_EQ(s.reasons, 0x24u);
  EXPECT_EQ(s.temperature_c, 60u);
  EXPECT_EQ(s.power_mw, 500000u);
}

// The environment's driverVersion: the driver's own version from NVML (an H200's status said
// "13.0", the CUDA version its driver supports); empty where NVML cannot say, and the monitor works.
TEST_F(GpuMonitorTest, TellsTheDriversOwnVersionWhereNvmlCan) {
  EXPECT_EQ(open()->driver_version(), "580.159.04");
  setenv("FAKE_NVML_NO_DRIVER_VERSION", "1", 1);
  const auto monitor = open();
  ASSERT_NE(monitor, nullptr);
  EXPECT_EQ(monitor->driver_version(), "");
  EXPECT_EQ(monitor->sample().sm_clock_mhz, 1980u);
}

// The energy counter in joules, read at each call (a case reads it around each repeat's measured
// steps); none where the GPU has no counter, and the other readings go on.
TEST_F(GpuMonitorTest, ReadsTheEnergyCounterWhereTheGpuHasOne) {
  const auto monitor = open();
  ASSERT_NE(monitor, nullptr);
  EXPECT_EQ(monitor->energy_joules(), std::nullopt);
  setenv("FAKE_NVML_ENERGY_MJ", "123456789", 1);
  EXPECT_EQ(monitor->energy_joules(), std::optional<double>(123456.789));
  setenv("FAKE_NVML_ENERGY_MJ", "123457789", 1);
  EXPECT_EQ(monitor->energy_joules(), std::optional<double>(123457.789));
  EXPECT_EQ(monitor->sample().power_mw, 500000u);
}

TEST_F(GpuMonitorTest, NoLibraryOrNoDeviceSaysWhy) {
  std::string why;
  EXPECT_EQ(GpuMonitor::open("00000000:3B:00.0", why, "libdlbench-no-such-nvml.so"), nullptr);
  EXPECT_THAT(why, HasSubstr("NVML not loaded (libdlbench-no-such-nvml.so"));
  EXPECT_EQ(GpuMonitor::open("00000000:AF:00.0", why, DLBENCH_FAKE_NVML), nullptr);
  EXPECT_EQ(why, "no NVML device at PCI 00000000:AF:00.0: Not Found");
}

// A clean GPU alone, then one throttled for heat and shared with another process while sampled.
TEST_F(GpuMonitorTest, SamplesWhileTheCaseRunsAndJudgesWhatItSaw) {
  const auto monitor = open();
  ASSERT_NE(monitor, nullptr);
  monitor->start(std::chrono::milliseconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const GpuReadings calm = monitor->stop();
  EXPECT_GT(calm.samples, 5);
  EXPECT_EQ(calm.other_processes, 0);
  EXPECT_EQ(calm.sm_clock_median_mhz, 1980);
  EXPECT_EQ(calm.sm_clock_max_mhz, 1980);
  EXPECT_TRUE(calm.throttle_reasons.empty());
  EXPECT_EQ(interference_verdict(0.0, 0.0, &calm), InterferenceVerdict::clean);

  setenv("FAKE_NVML_SM_CLOCK", "1410", 1);
  setenv("FAKE_NVML_REASONS", "0x44", 1);  // hardware thermal slowdown under the power cap
  setenv("FAKE_NVML_TEMPERATURE", "91", 1);
  monitor->start(std::chrono::milliseconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const GpuReadings hot = monitor->stop();
  EXPECT_EQ(hot.sm_clock_median_mhz, 1410);
  EXPECT_EQ(hot.temperature_max_c, 91);
  EXPECT_THAT(hot.throttle_reasons, ElementsAre(GpuThrottleReason::thermal, GpuThrottleReason::power_cap));
  EXPECT_EQ(interference_verdict(0.0, 0.0, &hot), InterferenceVerdict::throttled);
  GpuReadings shared = hot;
  shared.other_processes = 1;  // another process outranks throttling: the numbers are not this job's
  EXPECT_EQ(interference_verdict(0.0, 0.0, &shared), InterferenceVerdict::interfered);
}

// The summary, by hand: min and median clock, a reason counts above 10% of the samples, the power
// cap alone (a GPU at full load) is recorded but not judged.
TEST(GpuReadingsSummary, CountsReasonsSeenOftenEnough) {
  std::vector<GpuSample> samples(20, GpuSample{1980, nvml_reason::kSwPowerCap, 70, 690000, 1});
  samples[0] = {1500, nvml_reason::kHwSlowdown, 75, 700000, 2};  // one sample in 20: 5%, not counted
  samples[1].sm_clock_mhz = 1700;
  const GpuReadings r = summarize_gpu_samples(samples, 1980);
  EXPECT_EQ(r.samples, 20);
  EXPECT_EQ(r.sm_clock_min_mhz, 1500);
  EXPECT_EQ(r.sm_clock_median_mhz, 1980);
  EXPECT_EQ(r.other_processes, 1);  // the most seen at once, less this rank
  EXPECT_EQ(r.temperature_max_c, 75);
  EXPECT_DOUBLE_EQ(r.power_median_w, 690);
  EXPECT_THAT(r.throttle_reasons, ElementsAre(GpuThrottleReason::power_cap));
  GpuReadings alone = r;
  alone.other_processes = 0;
  EXPECT_EQ(interference_verdict(std::nullopt, 0.0, &alone), InterferenceVerdict::clean);
  samples[2].reasons = samples[3].reasons = samples[4].reasons = nvml_reason::kHwPowerBrakeSlowdown;  // 15%
  EXPECT_THAT(summarize_gpu_samples(samples, 1980).throttle_reasons,
              ElementsAre(GpuThrottleReason::power_brake, GpuThrottleReason::power_cap));
}

}  // namespace
}  // namespace dlbench::worker
