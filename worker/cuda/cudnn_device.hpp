// A GPU as cuDNN's heuristics and plan builder see it (cuDNN 9.8 and later): a device-properties
// descriptor made from a live handle, or from the JSON that describes one, so that the engines
// cuDNN has for a graph on, say, an H200 can be asked on a machine without any GPU. What such a
// query cannot say is how fast an engine runs or whether it computes right: that needs the device.
// Internal to worker/cuda.
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "cuda/conv_graph.hpp"

namespace dlbench::worker::cuda_detail {

// What cuDNN reads of a device (its JSON's members, CUDNN_ATTR_DEVICEPROP_JSON_REPRESENTATION).
struct GpuDescription {
  std::string name;
  int compute_capability = 0;  // major * 100 + minor * 10, as cuDNN keeps it: 900 for sm_90
  int driver_version = 0;      // the CUDA driver API's, 13000 for CUDA 13.0
  int multiprocessors = 0;
  std::int64_t global_memory = 0;  // bytes
  std::int64_t l2_cache = 0;       // bytes
  int sm_clock_khz = 0;
  int memory_clock_khz = 0;
  int max_shared_memory_per_block = 48 * 1024;
  int max_shared_memory_per_block_optin = 0;
  int reserved_shared_memory_per_block = 1024;
  int registers_per_block = 64 * 1024;
  int registers_per_multiprocessor = 64 * 1024;
  int max_blocks_per_multiprocessor = 32;
  int max_threads_per_block = 1024;
  int max_threads_per_multiprocessor = 2048;
};

// The GPUs dlbench describes without one at hand, by the names `--device` takes: "h200". Throws
// std::invalid_argument naming the allowed names for any other.
const GpuDescription& described_gpu(std::string_view name);
inline constexpr std::string_view kDescribedGpus = "h200";

// `gpu` as the JSON cuDNN's device-properties descriptor reads.
std::string cudnn_device_json(const GpuDescription& gpu);

// A finalized device-properties descriptor: from JSON (cudnn_device_json's, or a device's own as
// device_json wrote it), or from a live handle's device. Both throw CudaError with cuDNN's reason
// (a value of the wrong type, or a cuDNN older than 9.8); the first throws std::invalid_argument
// naming a member cuDNN reads that the JSON lacks.
BackendDescriptor device_properties_from_json(const std::string& json);
BackendDescriptor device_properties_of(cudnnHandle_t handle);

// A device-properties descriptor as JSON, for a later run without the device.
std::string device_json(const BackendDescriptor& device);

}  // namespace dlbench::worker::cuda_detail
