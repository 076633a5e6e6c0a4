#include "cpu_budget.hpp"

#include "cgroup.hpp"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <sstream>
#include <thread>
#include <vector>

namespace dlbench::worker {
namespace {

std::optional<double> positive_number(const std::string& text) {
  try {
    std::size_t used = 0;
    const double value = std::stod(text, &used);
    if (used == 0 || !std::isfinite(value) || value <= 0) return std::nullopt;
    return value;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// cgroup v2: "max 100000" (no limit) or "150000 100000".
std::optional<CpuQuota> v2_quota(const std::filesystem::path& dir) {
  const auto line = cgroup_first_line(dir / "cpu.max");
  if (!line) return std::nullopt;
  std::istringstream fields(*line);
  std::string quota, period;
  fields >> quota >> period;
  if (quota == "max") return std::nullopt;
  const auto q = positive_number(quota), p = positive_number(period);
  if (!q || !p) return std::nullopt;
  return CpuQuota{*q / *p, "cpu.max " + quota + " " + period + " in " + dir.string()};
}

// cgroup v1: cpu.cfs_quota_us (-1: no limit) over cpu.cfs_period_us.
std::optional<CpuQuota> v1_quota(const std::filesystem::path& dir) {
  const auto quota = cgroup_first_line(dir / "cpu.cfs_quota_us"), period = cgroup_first_line(dir / "cpu.cfs_period_us");
  if (!quota || !period) return std::nullopt;
  const auto q = positive_number(*quota), p = positive_number(*period);
  if (!q || !p) return std::nullopt;
  return CpuQuota{*q / *p,
                  "cpu.cfs_quota_us " + *quota + " / cpu.cfs_period_us " + *period + " in " + dir.string()};
}

void keep_tightest(std::optional<CpuQuota>& tightest, std::optional<CpuQuota> candidate) {
  if (candidate && (!tightest || candidate->cores < tightest->cores)) tightest = std::move(candidate);
}

}  // namespace

std::optional<CpuQuota> cgroup_cpu_quota(const std::string& proc_self_cgroup, const std::filesystem::path& root) {
  std::optional<CpuQuota> tightest;
  for (const CgroupDir& dir : cgroup_dirs(proc_self_cgroup, root, "cpu")) {
    keep_tightest(tightest, dir.version == CgroupVersion::v2 ? v2_quota(dir.path) : v1_quota(dir.path));
  }
  return tightest;
}

ThreadBudget thread_budget(int affinity_cores, const std::optional<CpuQuota>& quota, int ranks_here) {
  affinity_cores = std::max(1, affinity_cores);
  ranks_here = std::max(1, ranks_here);
  int cores = affinity_cores;
  std::string reason = std::to_string(affinity_cores) + " cores in the affinity mask";
  if (quota) {
    const int quota_cores = std::max(1, static_cast<int>(std::floor(quota->cores + 1e-9)));
    std::ostringstream cores_text;
    cores_text << quota->cores;
    if (quota_cores < affinity_cores) {
      cores = quota_cores;
      reason = "the CPU quota allows " + cores_text.str() + (quota->cores == 1.0 ? " core (" : " cores (") + quota->source + "), fewer than the " +
               std::to_string(affinity_cores) + " cores in the affinity mask";
    } else {
      reason += " (the CPU quota allows " + cores_text.str() + ")";
    }
  }
  if (ranks_here > 1) reason += ", shared by " + std::to_string(ranks_here) + " ranks on this node";
  return {std::max(1, cores / ranks_here), reason};
}

ThreadBudget default_thread_budget() {
  cpu_set_t allowed;
  CPU_ZERO(&allowed);
  const int affinity = sched_getaffinity(0, sizeof allowed, &allowed) == 0
                           ? CPU_COUNT(&allowed)
                           : static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  const char* local_size = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  return thread_budget(affinity, cgroup_cpu_quota(this_process_cgroups(), "/sys/fs/cgroup"),
                       local_size != nullptr ? std::max(1, std::atoi(local_size)) : 1);
}

}  // namespace dlbench::worker
