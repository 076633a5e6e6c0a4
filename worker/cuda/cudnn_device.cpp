// A GPU as cuDNN's heuristics see it, live or described (cuda/cudnn_device.hpp).
#include "cuda/cudnn_device.hpp"

#include <algorithm>
#include <array>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dlbench::worker::cuda_detail {

namespace {

// An H200 SXM as NVIDIA documents it and as its nvidia-smi showed it on 2026-11-29 (143,771 MiB,
// SM clock 1980 MHz, driver 580.159 with CUDA 13.0): GH100's 132 SMs, 50 MiB of L2, 227 KiB of
// shared memory a block may opt into. The device's own JSON (conv_fusion_probe
// --write-device-json, run by bench/gpu_check.sh) is the authority where the two differ.
GpuDescription h200() {
  GpuDescription gpu;
  gpu.name = "NVIDIA H200";
  gpu.compute_capability = 900;
  gpu.driver_version = 13000;
  gpu.multiprocessors = 132;
  gpu.global_memory = 143771LL * 1024 * 1024;
  gpu.l2_cache = 50LL * 1024 * 1024;
  gpu.sm_clock_khz = 1980000;
  gpu.memory_clock_khz = 3201000;
  gpu.max_shared_memory_per_block_optin = 227 * 1024;
  return gpu;
}

}  // namespace

const GpuDescription& described_gpu(std::string_view name) {
  static const GpuDescription described_h200 = h200();
  if (name == "h200") return described_h200;
  throw std::invalid_argument("--device: '" + std::string(name) + "' is not a described GPU (one of: " +
                              std::string(kDescribedGpus) + ")");
}

std::string cudnn_device_json(const GpuDescription& gpu) {
  const nlohmann::json json = {
      {"deviceName", gpu.name},
      {"deviceVer", gpu.compute_capability},
      {"driverVer", gpu.driver_version},
      {"cudaDeviceId", 0},
      {"pciDeviceId", 0},
      {"multiProcessorCount", gpu.multiprocessors},
      {"totalGlobalMem", gpu.global_memory},
      {"l2CacheSize", gpu.l2_cache},
      {"smClockRateKHz", gpu.sm_clock_khz},
      {"memClockRateKHz", gpu.memory_clock_khz},
      {"maxGridSize", {2147483647, 65535, 65535}},
      {"maxBlockSize", {1024, 1024, 64}},
      {"warpSize", 32},
      {"regsPerBlock", gpu.registers_per_block},
      {"maxRegistersPerSM", gpu.registers_per_multiprocessor},
      {"maxSharedMemoryPerBlock", gpu.max_shared_memory_per_block},
      {"maxSharedMemoryPerBlockOptin", gpu.max_shared_memory_per_block_optin},
      {"reservedSharedMemoryPerBlock", gpu.reserved_shared_memory_per_block},
      {"maxCtasPerSM", gpu.max_blocks_per_multiprocessor},
      {"maxThreadsPerBlock", gpu.max_threads_per_block},
      {"maxThreadsPerSM", gpu.max_threads_per_multiprocessor},
      // cuDNN reads these two as integers, not as JSON's booleans.
      {"isTccDriver", 0},
      {"supportCoopLaunch", 1},
  };
  return json.dump();
}

BackendDescriptor device_properties_from_json(const std::string& json) {
  // cuDNN's own refusal of a missing member does not name it (its last error string says
  // "!json_object.HasMember(key)"): the members it reads are the ones cudnn_device_json writes.
  const nlohmann::json parsed = nlohmann::json::parse(json, nullptr, false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    throw std::invalid_argument("the device description is not a JSON object");
  }
  const nlohmann::json read_by_cudnn = nlohmann::json::parse(cudnn_device_json(GpuDescription{}));
  for (const auto& [member, value] : read_by_cudnn.items()) {
    if (!parsed.contains(member)) {
      throw std::invalid_argument("the device description has no \"" + member + "\", which cuDNN reads");
    }
  }
  BackendDescriptor device(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR);
  device.set(CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR, json.data(),
             static_cast<std::int64_t>(json.size()));
  device.finalize("the device properties (from JSON)");
  return device;
}

BackendDescriptor device_properties_of(cudnnHandle_t handle) {
  BackendDescriptor device(CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR);
  device.set(CUDNN_ATTR_DEVICEPROP_HANDLE, CUDNN_TYPE_HANDLE, &handle);
  device.finalize("the device properties (from the device)");
  return device;
}

std::string device_json(const BackendDescriptor& device) {
  std::int64_t size = 0;
  check_cudnn_graph(cudnnBackendGetAttribute(device.get(), CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR,
                                             0, &size, nullptr),
                    "the size of the device properties' JSON");
  std::vector<char> text(static_cast<std::size_t>(size));
  std::int64_t returned = 0;
  check_cudnn_graph(cudnnBackendGetAttribute(device.get(), CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION, CUDNN_TYPE_CHAR,
                                             size, &returned, text.data()),
                    "the device properties' JSON");
  std::string json(text.data(), static_cast<std::size_t>(std::clamp<std::int64_t>(returned, 0, size)));
  while (!json.empty() && json.back() == '\0') json.pop_back();
  return json;
}

}  // namespace dlbench::worker::cuda_detail
