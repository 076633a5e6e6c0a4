// Which elements a dropout mask keeps: a pure function of (key, index), the same on every
// backend and thread count. Shared by the CPU backend and the CUDA kernels. Nothing stores the
// mask: the backward pass hashes the same indices again, as fused attention kernels do, which
// saves a 4-byte mask an element (more than the bf16 activation it masks) and its write and read.
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

// A 32-bit xorshift-multiply bijection (Wellons' lowbias32: bias 0.17 on his avalanche measure).
// 32-bit lanes because an element's hash is the inner loop: AVX2 and AVX-512 multiply 8 or 16
// of them at once, while a 64-bit multiply has no AVX2 instruction and stays scalar.
DLBENCH_HOST_DEVICE inline std::uint32_t mix32(std::uint32_t x) {
  x ^= x >> 16;
  x *= 0x7FEB352Du;
  x ^= x >> 15;
  x *= 0x846CA68Bu;
  x ^= x >> 16;
  return x;
}

// One mask's key: the layer's seed and the step (Backend::begin_step's), mixed once per call.
struct DropoutKey {
  std::uint32_t low = 0, high = 0;
};

DLBENCH_HOST_DEVICE inline DropoutKey dropout_key(std::uint64_t layer_seed, std::uint64_t step) {
  const std::uint64_t k = mix64(layer_seed ^ (step * 0x9E3779B97F4A7C15ull));
  return {static_cast<std::uint32_t>(k), static_cast<std::uint32_t>(k >> 32)};
}

// The hash of element `index` within its 2^32-element `block` (index >> 32: 0 below 4 Gi
// elements). Two rounds with the key's halves between them, so that two keys' masks are not
// shifted copies of each other, which one round after an xor would make them.
DLBENCH_HOST_DEVICE inline std::uint32_t dropout_hash(DropoutKey key, std::uint32_t block, std::uint32_t index) {
  return mix32(mix32(index ^ key.low) + (key.high ^ (block * 0x9E3779B9u)));
}

// Elements survive when their hash is at least p · 2^32 (p = 0 keeps every one).
DLBENCH_HOST_DEVICE inline std::uint32_t dropout_threshold(float p) {
  const double t = static_cast<double>(p) * 4294967296.0;
  return t >= 4294967295.0 ? 0xFFFFFFFFu : static_cast<std::uint32_t>(t);
}

DLBENCH_HOST_DEVICE inline bool dropout_keeps(DropoutKey key, std::uint64_t i, std::uint32_t threshold) {
  return dropout_hash(key, static_cast<std::uint32_t>(i >> 32), static_cast<std::uint32_t>(i)) >= threshold;
}

}  // namespace dlbench::worker
