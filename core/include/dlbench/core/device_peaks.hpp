// Peak arithmetic of the GPUs dlbench is run on, for model FLOPs utilization (MFU): the
// training FLOPs a case does per second over what its devices could do at most.
#pragma once

#include <optional>
#include <string_view>

#include "dlbench/core/enums.hpp"

namespace dlbench {

// Dense (no sparsity) peak FLOP/s of one device for a precision, from NVIDIA's datasheets:
// fp32 on the FMA units, tf32 / amp (fp16) / bf16 on the tensor cores. Matched on the name the
// driver reports ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB", ...); nullopt when unknown.
std::optional<double> peak_flops_per_second(std::string_view gpu_model, Precision precision);

// MFU = training FLOPs per sample × samples/s / (peak per device × devices).
double model_flops_utilization(double training_flops_per_sample, double samples_per_second, double peak_per_device,
                               int devices);

}  // namespace dlbench
