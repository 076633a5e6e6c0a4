// Where this process's cgroup limits lie: its cgroup and every cgroup above it, under cgroup v2
// (unified, or beside v1's controllers in a hybrid mount) and v1 alike. A limit anywhere on the
// path up binds: a Kubernetes pod's limit sits on the pod's cgroup, above the container's.
#pragma once

#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace dlbench::worker {

enum class CgroupVersion { v1, v2 };

struct CgroupDir {
  std::filesystem::path path;
  CgroupVersion version = CgroupVersion::v2;
};

// `proc_self_cgroup` is /proc/self/cgroup's text, `root` where cgroups are mounted (/sys/fs/cgroup),
// `v1_controller` the v1 hierarchy to look in ("cpu", "memory"). Directories that do not exist
// are listed too: reading their files simply finds nothing.
std::vector<CgroupDir> cgroup_dirs(const std::string& proc_self_cgroup, const std::filesystem::path& root,
                                   const std::string& v1_controller);

// A cgroup file's first line, or none where it cannot be read.
std::optional<std::string> cgroup_first_line(const std::filesystem::path& file);

// A file's whole text, "" where it cannot be read (cgroup files such as memory.stat, /proc's).
std::string file_text(const std::filesystem::path& file);

// /proc/self/cgroup's text ("" where it cannot be read).
std::string this_process_cgroups();

}  // namespace dlbench::worker
