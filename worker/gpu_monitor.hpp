// What else happened to a GPU while a case was measured (issue 37): other processes on it, its SM
// clock against its maximum, the clocks-event (throttle) reasons, temperature and power, sampled
// through NVML on a thread of its own. NVML ships with the driver, not the toolkit, so it is loaded
// at run time (dlopen): a CPU build, or a machine without a driver, runs unchanged and reports no
// GPU readings, saying why.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dlbench/core/benchmark_run.hpp"

namespace dlbench::worker {

// NVML's clocks-event reason bits (nvml.h, nvmlClocksEventReason*; the same values as the older
// nvmlClocksThrottleReason*). The ABI is stable across drivers.
namespace nvml_reason {
inline constexpr std::uint64_t kSwPowerCap = 0x4;
inline constexpr std::uint64_t kHwSlowdown = 0x8;
inline constexpr std::uint64_t kSwThermalSlowdown = 0x20;
inline constexpr std::uint64_t kHwThermalSlowdown = 0x40;
inline constexpr std::uint64_t kHwPowerBrakeSlowdown = 0x80;
}  // namespace nvml_reason

// One reading of the device.
struct GpuSample {
  unsigned sm_clock_mhz = 0;
  std::uint64_t reasons = 0;  // clocks-event reason bits
  unsigned temperature_c = 0;
  unsigned power_mw = 0;
  unsigned processes = 0;  // compute processes on the GPU, this rank's own included
};

// The readings of one GPU over the measured repeats. A reason counts as seen when it was active in
// more than kThrottledShare of the samples.
GpuReadings summarize_gpu_samples(const std::vector<GpuSample>& samples, unsigned max_sm_clock_mhz);
inline constexpr double kThrottledShare = 0.10;

class GpuMonitor {
 public:
  // Opens NVML from `library` and finds the GPU at `pci_bus_id` ("00000000:3B:00.0", as CUDA's
  // pciDomainID:pciBusID:pciDeviceID give it). Returns nullptr with `why` set when NVML or the
  // device cannot be had.
  static std::unique_ptr<GpuMonitor> open(const std::string& pci_bus_id, std::string& why,
                                          const std::string& library = "libnvidia-ml.so.1");
  ~GpuMonitor();
  GpuMonitor(const GpuMonitor&) = delete;
  GpuMonitor& operator=(const GpuMonitor&) = delete;

  GpuSample sample() const;  // one reading now
  // The device's energy counter (nvmlDeviceGetTotalEnergyConsumption: millijoules since the
  // driver loaded, Volta and later) in joules; nullopt where this GPU or NVML has none.
  std::optional<double> energy_joules() const;
  // The driver's own version ("580.159.04", nvmlSystemGetDriverVersion), which CUDA's
  // cudaDriverGetVersion reduces to the CUDA version it supports ("13.0"); empty where this NVML
  // cannot say.
  const std::string& driver_version() const { return driver_version_; }
  // Samples every `period` on a thread of its own until stop(), which returns what was seen.
  void start(std::chrono::milliseconds period);
  GpuReadings stop();

  struct Api;  // NVML's entry points, resolved with dlsym

 private:
  GpuMonitor(std::unique_ptr<Api> api, void* device, unsigned max_sm_clock_mhz, std::string driver_version);
  std::unique_ptr<Api> api_;
  void* device_;
  unsigned max_sm_clock_mhz_;
  std::string driver_version_;
  std::thread sampler_;
  std::atomic<bool> running_{false};
  std::mutex mutex_;
  std::vector<GpuSample> samples_;
};

}  // namespace dlbench::worker
