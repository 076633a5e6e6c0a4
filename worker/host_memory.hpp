// Ordinary host memory on a 64-byte boundary, freed with its last owner: a backend's default for
// what it copies to the device every step (Backend::allocate_host), and the input pipeline's
// batches where no backend gives memory.
#pragma once

#include <cstddef>
#include <memory>
#include <new>

namespace dlbench::worker {

inline std::shared_ptr<void> aligned_host_memory(std::size_t bytes) {
  return {::operator new(bytes, std::align_val_t{64}), [](void* p) { ::operator delete(p, std::align_val_t{64}); }};
}

}  // namespace dlbench::worker
