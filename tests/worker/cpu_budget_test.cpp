// Threads that fit the container: the affinity mask capped by the tightest CPU quota of the
// process's cgroup and every cgroup above it, v2 and v1 alike, split among the node's ranks.
// The cgroup trees here are directories made for the test (cgroup_tree.hpp).
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cgroup_tree.hpp"
#include "cpu_budget.hpp"

namespace dlbench::worker {
namespace {

using ::testing::HasSubstr;

TEST_F(CgroupTree, V2TakesTheTightestQuotaOnThePathUp) {
  write("kubepods/pod1/cpu.max", "250000 100000");     // the pod: 2.5 CPUs
  write("kubepods/pod1/ctr/cpu.max", "max 100000");    // the container: no limit of its own
  write("kubepods/cpu.max", "max 100000");
  const auto quota = cgroup_cpu_quota("0::/kubepods/pod1/ctr\n", root_);
  ASSERT_TRUE(quota.has_value());
  EXPECT_DOUBLE_EQ(quota->cores, 2.5);
  EXPECT_THAT(quota->source, HasSubstr("cpu.max 250000 100000 in "));
  EXPECT_THAT(quota->source, HasSubstr("kubepods/pod1"));

  write("kubepods/pod1/ctr/cpu.max", "150000 100000");  // tighter below
  EXPECT_DOUBLE_EQ(cgroup_cpu_quota("0::/kubepods/pod1/ctr\n", root_)->cores, 1.5);
}

TEST_F(CgroupTree, V1ReadsTheCpuControllerAndAContainerSeesItsOwnCgroupAtTheRoot) {
  write("cpu,cpuacct/cpu.cfs_quota_us", "300000");
  write("cpu,cpuacct/cpu.cfs_period_us", "100000");
  // /proc/self/cgroup names the host's path; without a cgroup namespace the container's own
  // cgroup is the mount's root.
  const auto quota = cgroup_cpu_quota("4:memory:/kubepods/pod1\n3:cpu,cpuacct:/kubepods/pod1/abc\n", root_);
  ASSERT_TRUE(quota.has_value());
  EXPECT_DOUBLE_EQ(quota->cores, 3.0);
  EXPECT_THAT(quota->source, HasSubstr("cpu.cfs_quota_us 300000 / cpu.cfs_period_us 100000"));
}

TEST_F(CgroupTree, NoLimitOrUnreadableFilesMeanNoQuota) {
  write("cpu/cpu.cfs_quota_us", "-1");
  write("cpu/cpu.cfs_period_us", "100000");
  write("cpu.max", "max 100000");
  EXPECT_FALSE(cgroup_cpu_quota("2:cpu:/\n0::/\n", root_).has_value());
  write("cpu.max", "garbage");
  write("cpu/cpu.cfs_quota_us", "1e999");
  EXPECT_FALSE(cgroup_cpu_quota("2:cpu:/\n0::/\nnot a line\n::\n", root_).has_value());
  EXPECT_FALSE(cgroup_cpu_quota("", root_ / "absent").has_value());
}

TEST(ThreadBudget, TheQuotaCapsTheMaskAndRanksShareIt) {
  // A 64-core node, a pod limited to 2.5 CPUs: 2 threads, not 64.
  const ThreadBudget limited = thread_budget(64, CpuQuota{2.5, "cpu.max 250000 100000 in /pod"}, 1);
  EXPECT_EQ(limited.threads, 2);
  EXPECT_THAT(limited.reason, HasSubstr("the CPU quota allows 2.5 cores (cpu.max 250000 100000 in /pod)"));
  EXPECT_THAT(limited.reason, HasSubstr("fewer than the 64 cores in the affinity mask"));
  // Pinned to 4 cores (the static CPU manager) under a quota of 4: the mask says it.
  const ThreadBudget pinned = thread_budget(4, CpuQuota{4.0, "q"}, 1);
  EXPECT_EQ(pinned.threads, 4);
  EXPECT_EQ(pinned.reason, "4 cores in the affinity mask (the CPU quota allows 4)");
  // Two ranks on the node split the budget; never below one thread.
  EXPECT_EQ(thread_budget(8, std::nullopt, 2).threads, 4);
  EXPECT_THAT(thread_budget(8, std::nullopt, 2).reason, HasSubstr("shared by 2 ranks on this node"));
  EXPECT_EQ(thread_budget(8, CpuQuota{0.5, "q"}, 3).threads, 1);
  EXPECT_EQ(thread_budget(0, std::nullopt, 0).threads, 1);
}

}  // namespace
}  // namespace dlbench::worker
