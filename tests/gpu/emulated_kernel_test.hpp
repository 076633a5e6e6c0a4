// Buffers and thread orders for the tests of dlbench's CUDA kernels run on the CPU
// (cuda/emulation/cuda_emulation.hpp): guarded buffers of each storage type, a launch in a
// chosen thread order, and bit-for-bit comparison.
#pragma once

#include "cuda/emulation/cuda_emulation.hpp"

#include <cstddef>
#include <cstring>
#include <vector>

#include "cuda/float_types.hpp"
#include "dtype.hpp"

namespace dlbench::worker::emulated_kernel_test {

using cuda_emulation::ThreadOrder;

// Runs `f` with the threads in the given order, and puts the order back afterwards.
template <typename F>
auto in_order(ThreadOrder order, F&& f) {
  const ThreadOrder before = cuda_emulation::thread_order();
  cuda_emulation::set_thread_order(order);
  struct Restore {
    ThreadOrder order;
    ~Restore() { cuda_emulation::set_thread_order(order); }
  } restore{before};
  return f();
}

// A buffer of T with guard values on both sides, 64 bytes each (the interior stays 16-byte
// aligned, as the kernels' packs need).
template <typename T>
class Guarded {
 public:
  explicit Guarded(std::size_t n) : storage_(n + 2 * kGuard) {
    std::memset(static_cast<void*>(storage_.data()), kPattern, storage_.size() * sizeof(T));
  }
  static Guarded of(const std::vector<float>& values) {
    Guarded g(values.size());
    for (std::size_t i = 0; i < values.size(); ++i) g.data()[i] = T(values[i]);
    return g;
  }
  T* data() { return storage_.data() + kGuard; }
  std::size_t size() const { return storage_.size() - 2 * kGuard; }
  std::vector<float> floats() const {
    std::vector<float> v(size());
    for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(storage_[kGuard + i]);
    return v;
  }
  bool guards_intact() const {
    const auto* bytes = reinterpret_cast<const unsigned char*>(storage_.data());
    const std::size_t guard_bytes = kGuard * sizeof(T), all = storage_.size() * sizeof(T);
    for (std::size_t i = 0; i < guard_bytes; ++i) {
      if (bytes[i] != kPattern || bytes[all - 1 - i] != kPattern) return false;
    }
    return true;
  }

 private:
  static constexpr std::size_t kGuard = 64 / sizeof(T);
  static constexpr unsigned char kPattern = 0x7b;
  std::vector<T> storage_;
};

// Holds `values` as `dtype` does (with_float_type picks the storage type, as the launchers do),
// runs f(pointer) and returns what f left there as floats.
template <typename F>
std::vector<float> through(DType dtype, const std::vector<float>& values, F&& f, bool* guards_intact = nullptr) {
  std::vector<float> left;
  kernels::with_float_type(dtype, [&](auto type) {
    auto guarded = Guarded<typename decltype(type)::type>::of(values);
    f(static_cast<void*>(guarded.data()));
    if (guards_intact != nullptr) *guards_intact = *guards_intact && guarded.guards_intact();
    left = guarded.floats();
  });
  return left;
}

// The values as a tensor of `dtype` holds them.
inline std::vector<float> rounded_to(DType dtype, const std::vector<float>& values) {
  return through(dtype, values, [](void*) {});
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

}  // namespace dlbench::worker::emulated_kernel_test
