#include "gpu_monitor.hpp"

#include <dlfcn.h>

#include <algorithm>

#include "dlbench/core/statistics.hpp"

namespace dlbench::worker {
namespace {

// The few NVML types this needs (nvml.h); nvmlReturn_t is an int, 0 success.
using NvmlReturn = int;
using NvmlDevice = void*;
constexpr NvmlReturn kNvmlSuccess = 0;
constexpr NvmlReturn kNvmlInsufficientSize = 7;
constexpr int kNvmlClockSm = 1;         // NVML_CLOCK_SM
constexpr int kNvmlTemperatureGpu = 0;  // NVML_TEMPERATURE_GPU
struct NvmlProcessInfo {                // nvmlProcessInfo_t (v2 and v3)
  unsigned pid;
  unsigned long long used_gpu_memory;
  unsigned gpu_instance_id;
  unsigned compute_instance_id;
};

}  // namespace

struct GpuMonitor::Api {
  void* library = nullptr;
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*shutdown)() = nullptr;
  const char* (*error_string)(NvmlReturn) = nullptr;
  NvmlReturn (*handle_by_pci_bus_id)(const char*, NvmlDevice*) = nullptr;
  NvmlReturn (*clock)(NvmlDevice, int, unsigned*) = nullptr;
  NvmlReturn (*max_clock)(NvmlDevice, int, unsigned*) = nullptr;
  NvmlReturn (*reasons)(NvmlDevice, unsigned long long*) = nullptr;
  NvmlReturn (*temperature)(NvmlDevice, int, unsigned*) = nullptr;
  NvmlReturn (*power)(NvmlDevice, unsigned*) = nullptr;
  NvmlReturn (*processes)(NvmlDevice, unsigned*, NvmlProcessInfo*) = nullptr;
  NvmlReturn (*driver_version)(char*, unsigned) = nullptr;  // optional: only the environment's driverVersion needs it
  NvmlReturn (*total_energy)(NvmlDevice, unsigned long long*) = nullptr;  // optional: only energy needs it

  std::string describe(NvmlReturn code) const {
    const char* text = error_string != nullptr ? error_string(code) : nullptr;
    return text != nullptr ? std::string(text) : "NVML error " + std::to_string(code);
  }
  ~Api() {
    if (shutdown != nullptr) shutdown();
    if (library != nullptr) dlclose(library);
  }
};

namespace {

template <typename F>
bool resolve(void* library, std::initializer_list<const char*> names, F& out) {
  for (const char* name : names) {  // the newest name first; drivers keep the older ones
    if (void* symbol = dlsym(library, name)) {
      out = reinterpret_cast<F>(symbol);
      return true;
    }
  }
  return false;
}

}  // namespace

std::unique_ptr<GpuMonitor> GpuMonitor::open(const std::string& pci_bus_id, std::string& why,
                                             const std::string& library) {
  auto api = std::make_unique<Api>();
  api->library = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (api->library == nullptr) {
    const char* error = dlerror();
    why = "NVML not loaded (" + (error != nullptr ? std::string(error) : library) + ")";
    return nullptr;
  }
  void* lib = api->library;
  resolve(lib, {"nvmlErrorString"}, api->error_string);
  const bool complete =
      resolve(lib, {"nvmlInit_v2", "nvmlInit"}, api->init) && resolve(lib, {"nvmlShutdown"}, api->shutdown) &&
      resolve(lib, {"nvmlDeviceGetHandleByPciBusId_v2", "nvmlDeviceGetHandleByPciBusId"}, api->handle_by_pci_bus_id) &&
      resolve(lib, {"nvmlDeviceGetClockInfo"}, api->clock) && resolve(lib, {"nvmlDeviceGetMaxClockInfo"}, api->max_clock) &&
      resolve(lib, {"nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksThrottleReasons"},
              api->reasons) &&
      resolve(lib, {"nvmlDeviceGetTemperature"}, api->temperature) && resolve(lib, {"nvmlDeviceGetPowerUsage"}, api->power) &&
      resolve(lib, {"nvmlDeviceGetComputeRunningProcesses_v3", "nvmlDeviceGetComputeRunningProcesses_v2"},
              api->processes);
  resolve(lib, {"nvmlSystemGetDriverVersion"}, api->driver_version);
  resolve(lib, {"nvmlDeviceGetTotalEnergyConsumption"}, api->total_energy);
  if (!complete) {
    why = library + " lacks an NVML entry point this needs";
    api->shutdown = nullptr;  // never initialised
    return nullptr;
  }
  if (const NvmlReturn r = api->init(); r != kNvmlSuccess) {
    why = "nvmlInit: " + api->describe(r);
    api->shutdown = nullptr;
    return nullptr;
  }
  NvmlDevice device = nullptr;
  if (const NvmlReturn r = api->handle_by_pci_bus_id(pci_bus_id.c_str(), &device); r != kNvmlSuccess) {
    why = "no NVML device at PCI " + pci_bus_id + ": " + api->describe(r);
    return nullptr;
  }
  unsigned max_clock = 0;
  if (const NvmlReturn r = api->max_clock(device, kNvmlClockSm, &max_clock); r != kNvmlSuccess) {
    why = "nvmlDeviceGetMaxClockInfo: " + api->describe(r);
    return nullptr;
  }
  std::string driver_version;
  if (api->driver_version != nullptr) {
    char text[96] = {};  // NVML_SYSTEM_DRIVER_VERSION_BUFFER_SIZE is 80
    if (api->driver_version(text, sizeof text - 1) == kNvmlSuccess) driver_version = text;
  }
  return std::unique_ptr<GpuMonitor>(new GpuMonitor(std::move(api), device, max_clock, std::move(driver_version)));
}

GpuMonitor::GpuMonitor(std::unique_ptr<Api> api, void* device, unsigned max_sm_clock_mhz, std::string driver_version)
    : api_(std::move(api)),
      device_(device),
      max_sm_clock_mhz_(max_sm_clock_mhz),
      driver_version_(std::move(driver_version)) {}

GpuMonitor::~GpuMonitor() {
  if (sampler_.joinable()) stop();
}

GpuSample GpuMonitor::sample() const {
  // A reading that fails stays 0 for that field: the others still tell.
  GpuSample s;
  api_->clock(device_, kNvmlClockSm, &s.sm_clock_mhz);
  unsigned long long reasons = 0;
  if (api_->reasons(device_, &reasons) == kNvmlSuccess) s.reasons = reasons;
  api_->temperature(device_, kNvmlTemperatureGpu, &s.temperature_c);
  api_->power(device_, &s.power_mw);
  // Asked with room for none first: NVML answers with the count.
  unsigned count = 0;
  NvmlReturn r = api_->processes(device_, &count, nullptr);
  if (r == kNvmlInsufficientSize) {
    std::vector<NvmlProcessInfo> infos(count + 8);
    count = static_cast<unsigned>(infos.size());
    r = api_->processes(device_, &count, infos.data());
  }
  if (r == kNvmlSuccess) s.processes = count;
  return s;
}

std::optional<double> GpuMonitor::energy_joules() const {
  unsigned long long millijoules = 0;
  if (api_->total_energy == nullptr || api_->total_energy(device_, &millijoules) != kNvmlSuccess) return std::nullopt;
  return static_cast<double>(millijoules) / 1000.0;
}

void GpuMonitor::start(std::chrono::milliseconds period) {
  if (sampler_.joinable()) stop();
  {
    const std::lock_guard lock(mutex_);
    samples_.clear();
  }
  running_ = true;
  sampler_ = std::thread([this, period] {
    constexpr std::size_t kMaxSamples = 1 << 20;  // about 29 hours at 10 per second
    while (running_) {
      const GpuSample s = sample();
      {
        const std::lock_guard lock(mutex_);
        if (samples_.size() < kMaxSamples) samples_.push_back(s);
      }
      const auto until = std::chrono::steady_clock::now() + period;
      while (running_ && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::min(period, std::chrono::milliseconds(10)));
      }
    }
  });
}

GpuReadings GpuMonitor::stop() {
  running_ = false;
  if (sampler_.joinable()) sampler_.join();
  std::vector<GpuSample> samples;
  {
    const std::lock_guard lock(mutex_);
    samples.swap(samples_);
  }
  if (samples.empty()) samples.push_back(sample());  // a repeat shorter than one period
  return summarize_gpu_samples(samples, max_sm_clock_mhz_);
}

GpuReadings summarize_gpu_samples(const std::vector<GpuSample>& samples, unsigned max_sm_clock_mhz) {
  GpuReadings r;
  r.samples = static_cast<int>(samples.size());
  r.sm_clock_max_mhz = max_sm_clock_mhz;
  if (samples.empty()) return r;
  std::vector<double> clocks, power;
  unsigned processes = 0;
  for (const GpuSample& s : samples) {
    clocks.push_back(s.sm_clock_mhz);
    power.push_back(s.power_mw / 1000.0);
    processes = std::max(processes, s.processes);
    r.temperature_max_c = std::max(r.temperature_max_c, static_cast<double>(s.temperature_c));
  }
  r.other_processes = processes > 0 ? static_cast<int>(processes) - 1 : 0;  // one is this rank
  r.sm_clock_min_mhz = *std::min_element(clocks.begin(), clocks.end());
  r.sm_clock_median_mhz = median(clocks);
  r.power_median_w = median(power);
  const auto share = [&](std::uint64_t bits) {
    const auto n = std::count_if(samples.begin(), samples.end(), [&](const GpuSample& s) { return (s.reasons & bits) != 0; });
    return static_cast<double>(n) / static_cast<double>(samples.size());
  };
  const std::pair<GpuThrottleReason, std::uint64_t> reasons[] = {
      {GpuThrottleReason::thermal, nvml_reason::kSwThermalSlowdown | nvml_reason::kHwThermalSlowdown},
      {GpuThrottleReason::hw_slowdown, nvml_reason::kHwSlowdown},
      {GpuThrottleReason::power_brake, nvml_reason::kHwPowerBrakeSlowdown},
      {GpuThrottleReason::power_cap, nvml_reason::kSwPowerCap}};
  for (const auto& [reason, bits] : reasons) {
    if (share(bits) > kThrottledShare) r.throttle_reasons.push_back(reason);
  }
  return r;
}

}  // namespace dlbench::worker
