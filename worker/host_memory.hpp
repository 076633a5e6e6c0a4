// Host memory for the worker's buffers.
//
// zeroed_large_memory and LargePageAllocator: the CPU backend's tensors, a weights file's, and
// what a backend copies to the device every step where it has no memory of its own for that
// (Backend::allocate_host: the input pipeline's batches). A buffer of 2 MiB or more starts on a
// 2 MiB boundary and is advised as transparent huge pages, so that the kernel maps it 2 MiB at a
// time: where THP is "madvise" (many distributions' default), memory nobody advises stays in 4 KiB
// pages, and a VGG16 step's 4 GB of weights, gradients and activations then costs a million page
// faults (bench/worker_huge_pages.py). Zeroing it also faults it in when it is made, not at its
// first write: the decoding threads' first pass over a ring of batches in fresh memory ran at
// three quarters of their rate (bench/RESULTS.md, 2026-12-03, "Every page of a batch faulted in").
// Since it is faulted in at once, a large buffer that does not fit under the container's memory
// limit is refused before it is made (memory_headroom.hpp): HostOutOfMemory, where the OOM killer
// would have ended the worker inside the memset.
#pragma once

#include <sys/mman.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <optional>
#include <vector>

#include "memory_headroom.hpp"

namespace dlbench::worker {

inline constexpr std::size_t huge_page_bytes = std::size_t{2} << 20;

// True on a thread while host_block allocates a buffer it has checked (or a library makes buffers
// whose sizes were checked before the call: libwebp's canvases, webp_codec.cpp): what tells a
// test's allocator (tests/worker/host_allocation_test.cpp) the large allocations the check counted
// from those it never saw.
inline thread_local bool making_checked_host_block = false;

// `bytes` on `alignment` (posix_memalign: any size, where aligned_alloc wants a multiple of the
// alignment), zeroed; advised as huge pages when it is 2 MiB or more, and then first checked
// against the memory left (HostOutOfMemory) and made and faulted in under the node's
// HostMemoryLock, so that the ranks of a pod each count the others' buffers; freed with std::free.
// Only the address is rounded to 2 MiB, not the size: the kernel maps a huge page only where all
// of it lies inside the buffer, so the tail takes small pages and no memory is spent on rounding.
inline void* host_block(std::size_t bytes, std::size_t alignment) {
  const bool large = bytes >= huge_page_bytes;
  std::optional<HostMemoryLock> lock;
  if (large) {
    lock.emplace();
    ensure_host_memory(bytes);
  }
  void* p = nullptr;
  making_checked_host_block = large;
  const int failed = ::posix_memalign(&p, large ? huge_page_bytes : alignment, bytes);
  making_checked_host_block = false;
  if (failed != 0) throw std::bad_alloc();
  // Advice only: a kernel without THP (or with it off) refuses it and the pages stay small.
  if (large) (void)::madvise(p, bytes, MADV_HUGEPAGE);
  std::memset(p, 0, bytes);
  return p;
}

// At least `bytes` (rounded up to 64), zeroed.
inline std::shared_ptr<void> zeroed_large_memory(std::size_t bytes) {
  const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + 63) / 64 * 64;
  return {host_block(rounded, 64), std::free};
}

// The same rule for a std::vector's elements (a weights file's tensors): small vectors come from
// operator new, large ones on 2 MiB boundaries advised as huge pages.
template <class T>
struct LargePageAllocator {
  using value_type = T;
  LargePageAllocator() = default;
  template <class U>
  LargePageAllocator(const LargePageAllocator<U>&) noexcept {}  // NOLINT: rebinding converts implicitly

  T* allocate(std::size_t n) {
    const std::size_t bytes = n * sizeof(T);
    if (bytes < huge_page_bytes) return static_cast<T*>(::operator new(bytes));
    return static_cast<T*>(host_block(bytes, 64));
  }
  void deallocate(T* p, std::size_t n) noexcept {
    if (n * sizeof(T) < huge_page_bytes) {
      ::operator delete(p);
    } else {
      std::free(p);
    }
  }
  template <class U>
  bool operator==(const LargePageAllocator<U>&) const noexcept { return true; }
};

// A vector whose growth to 2 MiB or more is checked as a step's buffers are: the input pipeline's
// (a batch's labels, a whole BERT shard's ids, each decoding thread's file bytes and decoded
// pixels, as large as the largest file and image it has read: a Cityscapes frame's pixels are
// 6 MiB, a 24-megapixel photo's 72 MiB). A thread's buffers grow only when it meets a larger file
// than any before it, so the check is rarely read.
template <class T>
using HostVector = std::vector<T, LargePageAllocator<T>>;
using HostBytes = HostVector<std::uint8_t>;

}  // namespace dlbench::worker
