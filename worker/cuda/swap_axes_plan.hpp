// How the attention heads' axis swap, (a, b, c, d) -> (a, c, b, d), moves its elements, apart
// from the kernel so that the rule is tested without a GPU. Each run of d elements is contiguous
// in x and in y, so a thread moves a pack of a run (16 bytes where the run and both pointers
// allow: 8 fp16 values), and computes its source with 32-bit index arithmetic where every index
// fits. One element a thread with 64-bit divisions made each swap of BERT-base's activations an
// arithmetic-bound kernel over 6.3 million elements, nine swaps a layer.
#pragma once

#include <cstddef>
#include <cstdint>

#include "host_device.hpp"

namespace dlbench::worker {

struct SwapAxesPlan {
  int pack_bytes = 0;       // bytes a thread moves: 16, 8, 4 or 2
  std::int64_t units = 0;   // packs in a run of d elements
  std::int64_t count = 0;   // packs in all: a·b·c·units (0: nothing to move)
  bool narrow = false;      // every index, and a grid stride past the last, fits in 32 bits
};

// The widest pack that divides a run's bytes and to which both pointers are aligned; never
// narrower than one element.
inline SwapAxesPlan swap_axes_plan(std::int64_t a, std::int64_t b, std::int64_t c, std::int64_t d,
                                   std::size_t element_bytes, const void* x, const void* y) {
  SwapAxesPlan plan;
  if (a <= 0 || b <= 0 || c <= 0 || d <= 0 || element_bytes == 0) return plan;
  const auto run_bytes = static_cast<std::int64_t>(d * static_cast<std::int64_t>(element_bytes));
  const auto addresses = reinterpret_cast<std::uintptr_t>(x) | reinterpret_cast<std::uintptr_t>(y);
  plan.pack_bytes = static_cast<int>(element_bytes);
  for (const int pack : {16, 8, 4}) {
    if (pack > static_cast<int>(element_bytes) && run_bytes % pack == 0 &&
        addresses % static_cast<std::uintptr_t>(pack) == 0) {
      plan.pack_bytes = pack;
      break;
    }
  }
  plan.units = run_bytes / plan.pack_bytes;
  plan.count = a * b * c * plan.units;
  plan.narrow = plan.count < (std::int64_t{1} << 30);  // a grid's stride is under 2^24 threads
  return plan;
}

// The pack of x that pack i of y copies: y is (a, c, b, units), x is (a, b, c, units).
template <typename Index>
DLBENCH_HOST_DEVICE inline Index swap_axes_source(Index i, Index b, Index c, Index units) {
  const Index u = i % units;
  Index rest = i / units;
  const Index bi = rest % b;
  rest /= b;
  const Index ci = rest % c;
  const Index ai = rest / c;
  return ((ai * b + bi) * c + ci) * units + u;
}

}  // namespace dlbench::worker
