// Which elements a dropout mask keeps: a pure function of (seed, index), the same on every
// backend and thread count. Shared by the CPU backend and the CUDA kernels.
#pragma once

#include <cstdint>

#include "host_device.hpp"

namespace dlbench::worker {

// splitmix64's finaliser.
DLBENCH_HOST_DEVICE inline std::uint64_t mix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A mask's seed: the layer's seed mixed with the step (Backend::begin_step's).
DLBENCH_HOST_DEVICE inline std::uint64_t dropout_seed(std::uint64_t layer_seed, std::uint64_t step) {
  return layer_seed ^ (step * 0x9E3779B97F4A7C15ull);
}

// Element i survives when its hash is at least p · 2^64 (`threshold`).
DLBENCH_HOST_DEVICE inline bool dropout_keeps(std::uint64_t seed, std::uint64_t i, std::uint64_t threshold) {
  return mix64(seed ^ mix64(i)) >= threshold;
}

}  // namespace dlbench::worker
