// Linear learning-rate warm-up (Goyal et al., 2017, "Accurate, Large Minibatch SGD"): the rate
// climbs from rate / N at the first update to the rate at the N-th, so that a rate scaled up with
// a large global batch does not blow the first steps' weights apart. Written once for the CPU and
// the CUDA kernels, which read the update's number from the device where a step graph replays it.
#pragma once

#include <cstdint>

#include "host_device.hpp"

namespace dlbench::worker {

// The rate the `applied_update`-th applied update (from 1; steps loss scaling skipped do not
// count, as applied_update_number says) trains at: rate · min(1, applied_update / warmup_updates),
// in fp64 and in that order, as torch.optim.lr_scheduler.LambdaLR multiplies its Python floats
// (base_lr · factor); warmup_updates 0: rate.
DLBENCH_HOST_DEVICE inline float warmed_up_rate(float rate, std::uint64_t applied_update, std::uint64_t warmup_updates) {
  if (warmup_updates == 0 || applied_update >= warmup_updates) return rate;
  return static_cast<float>(static_cast<double>(rate) *
                            (static_cast<double>(applied_update) / static_cast<double>(warmup_updates)));
}

}  // namespace dlbench::worker
