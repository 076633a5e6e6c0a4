#include "cgroup.hpp"

#include <algorithm>
#include <fstream>
#include <sstream>

namespace dlbench::worker {
namespace {

// The cgroup's directory under `mount` and every one above it up to the mount. Without a cgroup
// namespace a container sees its host path in /proc/self/cgroup and its own cgroup at the
// mount's root: then the root alone.
void add_cgroup_and_ancestors(std::vector<CgroupDir>& out, const std::filesystem::path& mount, const std::string& path,
                              CgroupVersion version) {
  std::error_code ignored;
  std::filesystem::path relative = std::filesystem::path(path).relative_path();
  if (!std::filesystem::is_directory(mount / relative, ignored)) relative.clear();
  for (;;) {
    const std::filesystem::path dir = relative.empty() ? mount : mount / relative;
    // A v1 hierarchy's own name and its controller's may be one mount ("memory"): listed once.
    if (std::none_of(out.begin(), out.end(), [&](const CgroupDir& d) { return d.path == dir; })) out.push_back({dir, version});
    if (relative.empty()) break;
    relative = relative.parent_path();
  }
}

}  // namespace

std::vector<CgroupDir> cgroup_dirs(const std::string& proc_self_cgroup, const std::filesystem::path& root,
                                   const std::string& v1_controller) {
  std::vector<CgroupDir> out;
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
      for (const auto& mount : {root, root / "unified"}) add_cgroup_and_ancestors(out, mount, path, CgroupVersion::v2);
      continue;
    }
    std::vector<std::string> names;
    std::istringstream list(controllers);
    for (std::string name; std::getline(list, name, ',');) names.push_back(name);
    if (std::find(names.begin(), names.end(), v1_controller) == names.end()) continue;
    // Mounted under the hierarchy's own name ("cpu,cpuacct") or the controller's (a link to it).
    for (const auto& mount : {root / controllers, root / v1_controller}) {
      add_cgroup_and_ancestors(out, mount, path, CgroupVersion::v1);
    }
  }
  return out;
}

std::optional<std::string> cgroup_first_line(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::string line;
  if (!in || !std::getline(in, line)) return std::nullopt;
  return line;
}

std::string file_text(const std::filesystem::path& file) {
  std::ifstream in(file);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string this_process_cgroups() { return file_text("/proc/self/cgroup"); }

}  // namespace dlbench::worker
