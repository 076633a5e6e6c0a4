// The memory a worker may still take: the tightest of each memory cgroup's limit less its working
// set (usage less the inactive file cache the kernel reclaims first) on the path up, v2 and v1
// alike, and /proc/meminfo's MemAvailable; and the check that refuses a host allocation beyond it
// with a message naming what binds. The trees are directories made for the test (cgroup_tree.hpp);
// worker.MemoryLimit runs the worker under a real cgroup's limit.
#include <atomic>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cgroup_tree.hpp"
#include "memory_headroom.hpp"

namespace dlbench::worker {
namespace {

using ::testing::HasSubstr;

constexpr std::uint64_t kMiB = std::uint64_t{1} << 20;
constexpr std::uint64_t kGiB = std::uint64_t{1} << 30;
const std::string kPlentyAvailable = "MemTotal: 268435456 kB\nMemAvailable: 201326592 kB\n";  // 192 GiB

class MemoryHeadroomTree : public CgroupTree {};

TEST_F(MemoryHeadroomTree, V2TakesTheTightestLimitLessItsWorkingSetOnThePathUp) {
  // The pod: 16 GiB, 10 GiB used of which 2 GiB is inactive file cache: 8 GiB left.
  write("kubepods/pod1/memory.max", std::to_string(16 * kGiB));
  write("kubepods/pod1/memory.current", std::to_string(10 * kGiB));
  write("kubepods/pod1/memory.stat", "anon 7516192768\nfile 3221225472\nactive_file 1073741824\ninactive_file " +
                                         std::to_string(2 * kGiB));
  write("kubepods/pod1/ctr/memory.max", "max");  // the container: no limit of its own
  write("kubepods/pod1/ctr/memory.current", std::to_string(9 * kGiB));
  const auto headroom = memory_headroom("0::/kubepods/pod1/ctr\n", root_, kPlentyAvailable);
  ASSERT_TRUE(headroom.has_value());
  EXPECT_EQ(headroom->bytes, 8 * kGiB);
  EXPECT_THAT(headroom->source, HasSubstr("memory.max 16.00 GiB, working set 8.00 GiB in "));
  EXPECT_THAT(headroom->source, HasSubstr("kubepods/pod1"));

  // A tighter limit below binds, without a memory.stat to read (nothing counted reclaimable).
  write("kubepods/pod1/ctr/memory.max", std::to_string(9 * kGiB + 512 * kMiB));
  const auto tighter = memory_headroom("0::/kubepods/pod1/ctr\n", root_, kPlentyAvailable);
  ASSERT_TRUE(tighter.has_value());
  EXPECT_EQ(tighter->bytes, 512 * kMiB);
  EXPECT_THAT(tighter->source, HasSubstr("memory.max 9.50 GiB, working set 9.00 GiB"));

  // Over its limit (usage can pass it briefly): nothing left, not a wrapped-around huge number.
  write("kubepods/pod1/ctr/memory.current", std::to_string(10 * kGiB));
  EXPECT_EQ(memory_headroom("0::/kubepods/pod1/ctr\n", root_, kPlentyAvailable)->bytes, 0u);
}

TEST_F(MemoryHeadroomTree, V1ReadsTheMemoryControllerAndItsSubtreesInactiveCache) {
  write("memory/memory.limit_in_bytes", std::to_string(4 * kGiB));
  write("memory/memory.usage_in_bytes", std::to_string(3 * kGiB));
  // total_inactive_file counts the cgroup's children too; inactive_file alone would not.
  write("memory/memory.stat", "cache 2147483648\ninactive_file 4096\ntotal_inactive_file " + std::to_string(kGiB));
  // The host's path in /proc/self/cgroup; without a cgroup namespace the container's own cgroup is the mount's root.
  const auto headroom = memory_headroom("5:memory:/kubepods/pod1/abc\n3:cpu,cpuacct:/kubepods/pod1/abc\n", root_,
                                        kPlentyAvailable);
  ASSERT_TRUE(headroom.has_value());
  EXPECT_EQ(headroom->bytes, 2 * kGiB);
  EXPECT_THAT(headroom->source, HasSubstr("memory.limit_in_bytes 4.00 GiB, working set 2.00 GiB"));
}

TEST_F(MemoryHeadroomTree, WithoutALimitTheMachinesAvailableMemoryBindsAndWithNothingNothingDoes) {
  // v1's "no limit" (LONG_MAX rounded down to a page) and v2's "max".
  write("memory/memory.limit_in_bytes", "9223372036854771712");
  write("memory/memory.usage_in_bytes", std::to_string(kGiB));
  write("memory.max", "max");
  write("memory.current", std::to_string(kGiB));
  const auto headroom = memory_headroom("4:memory:/\n0::/\n", root_, "MemTotal: 8388608 kB\nMemAvailable:    6291456 kB\n");
  ASSERT_TRUE(headroom.has_value());
  EXPECT_EQ(headroom->bytes, 6 * kGiB);
  EXPECT_EQ(headroom->source, "MemAvailable 6.00 GiB in /proc/meminfo");
  // Unreadable or absent files, and a meminfo without MemAvailable: no headroom known.
  write("memory.max", "garbage");
  write("memory/memory.limit_in_bytes", "-1");
  EXPECT_FALSE(memory_headroom("4:memory:/\n0::/\nnot a line\n::\n", root_, "MemTotal: 8388608 kB\n").has_value());
  EXPECT_FALSE(memory_headroom("", root_ / "absent", "").has_value());
}

TEST(HostOutOfMemory, AnAllocationBeyondTheHeadroomIsRefusedSayingWhatBinds) {
  const MemoryHeadroom headroom{653 * kMiB, "memory.limit_in_bytes 1.00 GiB, working set 371.0 MiB in /sys/fs/cgroup/memory/pod"};
  EXPECT_NO_THROW(ensure_host_memory(653 * kMiB, headroom));  // exactly what is left
  EXPECT_NO_THROW(ensure_host_memory(64 * kGiB, std::nullopt));  // nothing known: nothing refused
  try {
    ensure_host_memory(5 * kGiB, headroom);
    FAIL() << "5 GiB with 653 MiB left";
  } catch (const std::bad_alloc& e) {  // whoever handles running out of memory catches it
    EXPECT_STREQ(e.what(), "host memory: asked for 5.00 GiB, 653.0 MiB left (memory.limit_in_bytes 1.00 GiB, working set "
                           "371.0 MiB in /sys/fs/cgroup/memory/pod)");
    const auto* refused = dynamic_cast<const HostOutOfMemory*>(&e);
    ASSERT_NE(refused, nullptr);
    EXPECT_EQ(refused->requested(), 5 * kGiB);
    EXPECT_EQ(refused->headroom().bytes, 653 * kMiB);
    // What the input pipeline rethrows: the same refusal, naming the file it was for.
    const HostOutOfMemory reading(*refused, "to read /data/a/scan.png");
    EXPECT_STREQ(reading.what(), "host memory: asked for 5.00 GiB to read /data/a/scan.png, 653.0 MiB left "
                                 "(memory.limit_in_bytes 1.00 GiB, working set 371.0 MiB in /sys/fs/cgroup/memory/pod)");
    EXPECT_EQ(reading.requested(), 5 * kGiB);
    EXPECT_EQ(reading.headroom().bytes, 653 * kMiB);
  }
  EXPECT_EQ(binary_size(1000), "1000 bytes");
}

TEST(HostOutOfMemory, ThisProcessHasAHeadroomAndAPlainAllocationStaysWithinIt) {
  // Every Linux machine has a MemAvailable at least; a 2 MiB buffer fits in it.
  const auto headroom = this_process_memory_headroom();
  ASSERT_TRUE(headroom.has_value());
  EXPECT_GT(headroom->bytes, 2 * kMiB);
  EXPECT_NO_THROW(ensure_host_memory(2 * kMiB));
}

TEST(HostMemoryLock, OneHolderAtATimeAsBetweenTheRanksOfANode) {
  // Each lock opens the file anew, so two threads of one process exclude each other as two
  // processes do: the second takes it only once the first has let go.
  std::atomic<bool> first_holds{false};
  std::atomic<bool> first_released{false};
  std::thread first([&] {
    const HostMemoryLock lock;
    first_holds = true;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    first_released = true;
  });
  while (!first_holds) std::this_thread::yield();
  bool released_when_taken = false;
  {
    const HostMemoryLock lock;
    released_when_taken = first_released;
  }
  first.join();
  EXPECT_TRUE(released_when_taken) << "the second holder took the lock while the first held it";
}

}  // namespace
}  // namespace dlbench::worker
