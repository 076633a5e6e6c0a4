#include "cpu_budget.hpp"

#include <sched.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

namespace dlbench::worker {
namespace {

std::optional<std::string> first_line(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  return line;
}

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
  const auto line = first_line(dir / "cpu.max");
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
  const auto quota = first_line(dir / "cpu.cfs_quota_us"), period = first_line(dir / "cpu.cfs_period_us");
  if (!quota || !period) return std::nullopt;
  const auto q = positive_number(*quota), p = positive_number(*period);
  if (!q || !p) return std::nullopt;
  return CpuQuota{*q / *p,
                  "cpu.cfs_quota_us " + *quota + " / cpu.cfs_period_us " + *period + " in " + dir.string()};
}

// The cgroup's directory under `mount` and every one above it up to the mount. Without a cgroup
// namespace a container sees its host path in /proc/self/cgroup and its own cgroup at the
// mount's root: then the root alone.
std::vector<std::filesystem::path> cgroup_and_ancestors(const std::filesystem::path& mount, const std::string& path) {
  std::vector<std::filesystem::path> out;
  std::error_code ignored;
  std::filesystem::path relative = std::filesystem::path(path).relative_path();
  if (!std::filesystem::is_directory(mount / relative, ignored)) relative.clear();
  for (;;) {
    out.push_back(relative.empty() ? mount : mount / relative);
    if (relative.empty()) break;
    relative = relative.parent_path();
  }
  return out;
}

void keep_tightest(std::optional<CpuQuota>& tightest, std::optional<CpuQuota> candidate) {
  if (candidate && (!tightest || candidate->cores < tightest->cores)) tightest = std::move(candidate);
}

}  // namespace

std::optional<CpuQuota> cgroup_cpu_quota(const std::string& proc_self_cgroup, const std::filesystem::path& root) {
  std::optional<CpuQuota> tightest;
  std::istringstream lines(proc_self_cgroup);
  for (std::string line; std::getline(lines, line);) {
    // hierarchy-ID:controller-list:cgroup-path
    const auto first = line.find(':');
    const auto second = first == std::string::npos ? std::string::npos : line.find(':', first + 1);
    if (second == std::string::npos) continue;
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const std::string path = line.substr(second + 1);
    if (line.substr(0, first) == "0" && controllers.empty()) {
      // v2: mounted at the root (unified) or beside the v1 controllers (hybrid).
      for (const auto& mount : {root, root / "unified"}) {
        for (const auto& dir : cgroup_and_ancestors(mount, path)) keep_tightest(tightest, v2_quota(dir));
      }
      continue;
    }
    std::vector<std::string> names;
    std::istringstream list(controllers);
    for (std::string name; std::getline(list, name, ',');) names.push_back(name);
    if (std::find(names.begin(), names.end(), "cpu") == names.end()) continue;
    for (const auto& mount : {root / controllers, root / "cpu"}) {
      for (const auto& dir : cgroup_and_ancestors(mount, path)) keep_tightest(tightest, v1_quota(dir));
    }
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
  std::ifstream cgroup_file("/proc/self/cgroup");
  std::stringstream text;
  text << cgroup_file.rdbuf();
  const char* local_size = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  return thread_budget(affinity, cgroup_cpu_quota(text.str(), "/sys/fs/cgroup"),
                       local_size != nullptr ? std::max(1, std::atoi(local_size)) : 1);
}

}  // namespace dlbench::worker
