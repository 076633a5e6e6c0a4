// The CPU backend's buffers and a weights file's tensors: zeroed, aligned, and a large one advised
// as transparent huge pages (the kernel's VmFlags "hg" on its mapping), so that the kernel can map
// it 2 MiB at a time instead of faulting it in 4 KiB at a time.
#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "backend.hpp"
#include "cpu/cpu_backend.hpp"
#include "host_memory.hpp"
#include "resident_pages.hpp"

namespace dlbench::worker {
namespace {

// The VmFlags of the mapping /proc/self/smaps lists `address` in ("" if none).
std::string vm_flags_of(const void* address) {
  const auto at = reinterpret_cast<std::uintptr_t>(address);
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    std::uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::istringstream range(line);
    if (range >> std::hex >> begin >> dash >> end && dash == '-') {
      inside = begin <= at && at < end;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line.substr(8) + " ";
    }
  }
  return "";
}

// Whether this kernel takes MADV_HUGEPAGE at all (not where THP is compiled out).
bool kernel_has_transparent_huge_pages() {
  return std::filesystem::exists("/sys/kernel/mm/transparent_hugepage/enabled");
}

TEST(HostMemory, ALargeBufferStartsOnA2MiBBoundaryZeroedAndAdvisedAsHugePages) {
  if (!kernel_has_transparent_huge_pages()) GTEST_SKIP() << "this kernel has no transparent huge pages";
  const std::size_t bytes = 3 * huge_page_bytes + 100;  // a tail that no huge page can cover
  const auto memory = zeroed_large_memory(bytes);
  const auto* p = static_cast<const unsigned char*>(memory.get());
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % huge_page_bytes, 0u);
  for (std::size_t i = 0; i < bytes; i += 4093) ASSERT_EQ(p[i], 0) << "byte " << i;
  EXPECT_EQ(p[bytes - 1], 0);
  EXPECT_NE(vm_flags_of(p).find(" hg "), std::string::npos) << "VmFlags:" << vm_flags_of(p);
  EXPECT_NE(vm_flags_of(p + bytes - 1).find(" hg "), std::string::npos) << "the last byte's mapping";
}

TEST(HostMemory, ASmallBufferIsZeroedOnA64ByteBoundary) {
  for (const std::size_t bytes : {std::size_t{0}, std::size_t{1}, std::size_t{4096}, huge_page_bytes - 1}) {
    const auto memory = zeroed_large_memory(bytes);
    const auto* p = static_cast<const unsigned char*>(memory.get());
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 64, 0u) << bytes << " bytes";
    for (std::size_t i = 0; i < bytes; ++i) ASSERT_EQ(p[i], 0) << bytes << " bytes, byte " << i;
  }
}

TEST(HostMemory, AVectorOnTheLargePageAllocatorIsAdvisedWhenLarge) {
  if (!kernel_has_transparent_huge_pages()) GTEST_SKIP() << "this kernel has no transparent huge pages";
  std::vector<float, LargePageAllocator<float>> large(huge_page_bytes / sizeof(float) + 3, 1.5f);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(large.data()) % huge_page_bytes, 0u);
  EXPECT_NE(vm_flags_of(large.data()).find(" hg "), std::string::npos) << "VmFlags:" << vm_flags_of(large.data());
  EXPECT_EQ(large.back(), 1.5f);
  // Growing moves the values into another large block, and shrinking to fit into a small one:
  // each block is freed by the rule it was allocated with (ASan checks the pairing).
  large.resize(large.size() * 2, 2.5f);
  EXPECT_EQ(large.front(), 1.5f);
  EXPECT_EQ(large.back(), 2.5f);
  large.resize(16);
  large.shrink_to_fit();
  EXPECT_EQ(large.size(), 16u);
  EXPECT_EQ(large[15], 1.5f);
  std::vector<std::byte, LargePageAllocator<std::byte>> small(100, std::byte{7});
  EXPECT_EQ(small[99], std::byte{7});
}

// Made resident when made: a decoding thread's first write into a fresh batch then costs no page
// faults (on this session's VM a 4 KiB fault cost the threads a quarter of their first pass).
TEST(HostMemory, ALargeBufferIsResidentBeforeItsFirstWrite) {
  const std::size_t bytes = 5 * huge_page_bytes + 12345;
  const auto memory = zeroed_large_memory(bytes);
  const auto pages = dlbench::testing::residency_of(memory.get(), bytes);
  EXPECT_GT(pages.pages, 5u);
  EXPECT_EQ(pages.resident, pages.pages);
}

TEST(HostMemory, TheDefaultHostMemoryABackendCopiesFromIsResidentAndZero) {
  CpuBackend cpu;  // the CPU backend keeps Backend's default
  const std::size_t bytes = 3 * huge_page_bytes;
  const auto memory = cpu.allocate_host(bytes);
  const auto pages = dlbench::testing::residency_of(memory.get(), bytes);
  EXPECT_EQ(pages.resident, pages.pages);
  const auto* p = static_cast<const unsigned char*>(memory.get());
  for (std::size_t i = 0; i < bytes; i += 4093) ASSERT_EQ(p[i], 0) << "byte " << i;
}

}  // namespace
}  // namespace dlbench::worker
