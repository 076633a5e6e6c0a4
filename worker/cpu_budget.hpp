// How many CPU threads a rank should run: what the container may really use, not what the node
// has. The affinity mask (cpuset, the static CPU manager's pinning) bounds it, and so does the
// cgroup's CPU quota (a pod's CPU limit, cgroup v2 cpu.max or v1 cpu.cfs_quota_us), which a mask
// does not show: a pod limited to 2 CPUs on a 64-core node sees 64 cores, and 64 threads that
// spin-wait for each other under a 2-core quota run slower than 2. Ranks on one node split it.
#pragma once

#include <filesystem>
#include <optional>
#include <string>

namespace dlbench::worker {

struct CpuQuota {
  double cores = 0;    // quota / period
  std::string source;  // "cpu.max 150000 100000 in /sys/fs/cgroup/kubepods/pod1"
};

// The tightest CPU quota on this process's cgroup or any cgroup above it, cgroup v2 and v1 alike:
// `proc_self_cgroup` is /proc/self/cgroup's text, `root` where cgroups are mounted (/sys/fs/cgroup).
// None when no cgroup limits the CPU (or nothing there can be read).
std::optional<CpuQuota> cgroup_cpu_quota(const std::string& proc_self_cgroup, const std::filesystem::path& root);

struct ThreadBudget {
  int threads = 1;
  std::string reason;  // why that many, for the result's environment
};

// Threads per rank: the affinity mask's cores, capped by the quota's whole cores (at least 1),
// shared evenly by `ranks_here` ranks (at least 1 each).
ThreadBudget thread_budget(int affinity_cores, const std::optional<CpuQuota>& quota, int ranks_here);

// This process's: sched_getaffinity, /proc/self/cgroup under /sys/fs/cgroup, and Open MPI's
// OMPI_COMM_WORLD_LOCAL_SIZE for the ranks on this node.
ThreadBudget default_thread_budget();

}  // namespace dlbench::worker
