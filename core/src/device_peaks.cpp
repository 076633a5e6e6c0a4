#include "dlbench/core/device_peaks.hpp"

#include <array>

namespace dlbench {
namespace {

struct DevicePeaks {
  std::string_view name;  // a part of the driver's device name; the first match wins
  double fp32, tf32, fp16, bf16;  // TFLOP/s, dense
};

// More specific names first: "H100 PCIe" and "H100 NVL" before the SXM "H100".
constexpr std::array<DevicePeaks, 5> kPeaks{{
    {"H100 PCIe", 51.2, 378.0, 756.0, 756.0},
    {"H100 NVL", 60.0, 417.5, 835.0, 835.0},
    {"H100", 67.0, 494.7, 989.4, 989.4},
    {"H200", 67.0, 494.7, 989.4, 989.4},
    {"A100", 19.5, 156.0, 312.0, 312.0},
}};

}  // namespace

std::optional<double> peak_flops_per_second(std::string_view gpu_model, Precision precision) {
  for (const DevicePeaks& d : kPeaks) {
    if (gpu_model.find(d.name) == std::string_view::npos) continue;
    switch (precision) {
      case Precision::fp32: return d.fp32 * 1e12;
      case Precision::tf32: return d.tf32 * 1e12;
      case Precision::amp: return d.fp16 * 1e12;
      case Precision::bf16: return d.bf16 * 1e12;
    }
  }
  return std::nullopt;
}

double model_flops_utilization(double training_flops_per_sample, double samples_per_second, double peak_per_device,
                               int devices) {
  return training_flops_per_sample * samples_per_second / (peak_per_device * static_cast<double>(devices));
}

}  // namespace dlbench
