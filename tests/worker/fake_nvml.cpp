// A stand-in for the driver's libnvidia-ml.so, so that GpuMonitor's loading, sampling and
// summarizing run on machines without a GPU. One device, at the PCI bus id FAKE_NVML_BUS_ID
// (default 00000000:3B:00.0); each reading comes from an environment variable read at the call, so
// a test changes the device while it is sampled: FAKE_NVML_SM_CLOCK, FAKE_NVML_MAX_CLOCK,
// FAKE_NVML_REASONS, FAKE_NVML_PROCESSES, FAKE_NVML_TEMPERATURE, FAKE_NVML_POWER_MW; the driver is
// 580.159.04 unless FAKE_NVML_NO_DRIVER_VERSION is set; the energy counter reads
// FAKE_NVML_ENERGY_MJ, and says "not supported" where that is unset, as on a GPU before Volta. Only the older
// names of two entry points are exported, as an older driver has them.
#include <cstdlib>
#include <cstring>

namespace {

unsigned long long setting(const char* name, unsigned long long fallback) {
  const char* text = std::getenv(name);
  return text != nullptr ? std::strtoull(text, nullptr, 0) : fallback;
}

int device_token = 0;
constexpr int kSuccess = 0, kInvalidArgument = 2, kNotSupported = 3, kNotFound = 6, kInsufficientSize = 7;

struct ProcessInfo {
  unsigned pid;
  unsigned long long used_gpu_memory;
  unsigned gpu_instance_id;
  unsigned compute_instance_id;
};

}  // namespace

extern "C" {

int nvmlInit_v2() { return kSuccess; }
int nvmlShutdown() { return kSuccess; }

// Absent from a driver's NVML only in the test that sets FAKE_NVML_NO_DRIVER_VERSION.
int nvmlSystemGetDriverVersion(char* text, unsigned length) {
  if (std::getenv("FAKE_NVML_NO_DRIVER_VERSION") != nullptr) return kNotSupported;
  const char* version = "580.159.04";
  if (length < std::strlen(version) + 1) return kInsufficientSize;
  std::strcpy(text, version);
  return kSuccess;
}
const char* nvmlErrorString(int code) { return code == kNotFound ? "Not Found" : "Unknown Error"; }

int nvmlDeviceGetHandleByPciBusId_v2(const char* bus_id, void** device) {
  const char* expected = std::getenv("FAKE_NVML_BUS_ID");
  if (std::strcmp(bus_id, expected != nullptr ? expected : "00000000:3B:00.0") != 0) return kNotFound;
  *device = &device_token;
  return kSuccess;
}

// Index 0 is the one device (bench/nvml_energy.py finds a device by index where PyTorch cannot
// tell its PCI bus id).
int nvmlDeviceGetHandleByIndex_v2(unsigned index, void** device) {
  if (index != 0) return kInvalidArgument;
  *device = &device_token;
  return kSuccess;
}

int nvmlDeviceGetClockInfo(void* device, int type, unsigned* mhz) {
  if (device != &device_token || type != 1) return kInvalidArgument;
  *mhz = static_cast<unsigned>(setting("FAKE_NVML_SM_CLOCK", 1980));
  return kSuccess;
}

int nvmlDeviceGetMaxClockInfo(void* device, int type, unsigned* mhz) {
  if (device != &device_token || type != 1) return kInvalidArgument;
  *mhz = static_cast<unsigned>(setting("FAKE_NVML_MAX_CLOCK", 1980));
  return kSuccess;
}

int nvmlDeviceGetCurrentClocksThrottleReasons(void* device, unsigned long long* reasons) {
  if (device != &device_token) return kInvalidArgument;
  *reasons = setting("FAKE_NVML_REASONS", 0);
  return kSuccess;
}

int nvmlDeviceGetTemperature(void* device, int sensor, unsigned* celsius) {
  if (device != &device_token || sensor != 0) return kInvalidArgument;
  *celsius = static_cast<unsigned>(setting("FAKE_NVML_TEMPERATURE", 60));
  return kSuccess;
}

int nvmlDeviceGetTotalEnergyConsumption(void* device, unsigned long long* millijoules) {
  if (device != &device_token) return kInvalidArgument;
  if (std::getenv("FAKE_NVML_ENERGY_MJ") == nullptr) return kNotSupported;
  *millijoules = setting("FAKE_NVML_ENERGY_MJ", 0);
  return kSuccess;
}

int nvmlDeviceGetPowerUsage(void* device, unsigned* milliwatts) {
  if (device != &device_token) return kInvalidArgument;
  *milliwatts = static_cast<unsigned>(setting("FAKE_NVML_POWER_MW", 500000));
  return kSuccess;
}

// As NVML: with too little room, the count needed and NVML_ERROR_INSUFFICIENT_SIZE.
int nvmlDeviceGetComputeRunningProcesses_v2(void* device, unsigned* count, ProcessInfo* infos) {
  if (device != &device_token) return kInvalidArgument;
  const auto running = static_cast<unsigned>(setting("FAKE_NVML_PROCESSES", 1));
  if (*count < running) {
    *count = running;
    return kInsufficientSize;
  }
  for (unsigned i = 0; i < running; ++i) infos[i] = {1000 + i, 1ull << 30, 0, 0};
  *count = running;
  return kSuccess;
}

}  // extern "C"
