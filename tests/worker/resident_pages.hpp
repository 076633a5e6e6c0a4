// How many of a buffer's pages the kernel has mapped (mincore): memory that is not resident faults
// at its first touch, on whichever thread touches it.
#pragma once

#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <vector>

namespace dlbench::testing {

struct Residency {
  std::size_t pages = 0;
  std::size_t resident = 0;
};

inline Residency residency_of(const void* buffer, std::size_t bytes) {
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const auto begin = reinterpret_cast<std::uintptr_t>(buffer) / page * page;
  const auto end = (reinterpret_cast<std::uintptr_t>(buffer) + bytes + page - 1) / page * page;
  std::vector<unsigned char> flags((end - begin) / page);
  if (::mincore(reinterpret_cast<void*>(begin), end - begin, flags.data()) != 0) {
    throw std::runtime_error("mincore failed");
  }
  Residency r{flags.size(), 0};
  for (const unsigned char f : flags) r.resident += (f & 1u);
  return r;
}

}  // namespace dlbench::testing
