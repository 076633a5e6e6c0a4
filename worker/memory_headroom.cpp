#include "memory_headroom.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "cgroup.hpp"

namespace dlbench::worker {
namespace {

std::optional<std::uint64_t> whole_number(const std::string& text) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  try {
    return std::stoull(text);
  } catch (const std::exception&) {
    return std::nullopt;  // out of range
  }
}

// `key`'s value in a "key value" per line file (memory.stat, /proc/meminfo's "Key: value kB").
std::optional<std::uint64_t> keyed_value(const std::string& text, const std::string& key) {
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    std::istringstream fields(line);
    std::string name, value;
    fields >> name >> value;
    if (name == key) return whole_number(value);
  }
  return std::nullopt;
}

// One cgroup's headroom: v2 memory.max ("max": none) less memory.current less memory.stat's
// inactive_file; v1 memory.limit_in_bytes (a page-rounded LONG_MAX: none) less
// memory.usage_in_bytes less total_inactive_file (this cgroup's and its children's).
std::optional<MemoryHeadroom> cgroup_headroom(const CgroupDir& dir) {
  const bool v2 = dir.version == CgroupVersion::v2;
  const std::string limit_file = v2 ? "memory.max" : "memory.limit_in_bytes";
  const auto limit_text = cgroup_first_line(dir.path / limit_file);
  const auto usage_text = cgroup_first_line(dir.path / (v2 ? "memory.current" : "memory.usage_in_bytes"));
  if (!limit_text || !usage_text) return std::nullopt;
  const auto limit = whole_number(*limit_text);
  const auto usage = whole_number(*usage_text);
  // v1's "no limit" is LONG_MAX rounded down to a page; nothing real is within 2^62 of it.
  if (!limit || !usage || *limit >= (std::uint64_t{1} << 62)) return std::nullopt;
  const std::uint64_t reclaimable =
      keyed_value(file_text(dir.path / "memory.stat"), v2 ? "inactive_file" : "total_inactive_file").value_or(0);
  const std::uint64_t working_set = *usage > reclaimable ? *usage - reclaimable : 0;
  return MemoryHeadroom{*limit > working_set ? *limit - working_set : std::uint64_t{0},
                        limit_file + " " + binary_size(*limit) + ", working set " + binary_size(working_set) + " in " +
                            dir.path.string()};
}

void keep_tightest(std::optional<MemoryHeadroom>& tightest, std::optional<MemoryHeadroom> candidate) {
  if (candidate && (!tightest || candidate->bytes < tightest->bytes)) tightest = std::move(candidate);
}

}  // namespace

std::string binary_size(std::uint64_t bytes) {
  char text[32];
  const double b = static_cast<double>(bytes);
  if (bytes >= (std::uint64_t{1} << 30)) {
    std::snprintf(text, sizeof text, "%.2f GiB", b / (1 << 30));
  } else if (bytes >= (std::uint64_t{1} << 20)) {
    std::snprintf(text, sizeof text, "%.1f MiB", b / (1 << 20));
  } else {
    std::snprintf(text, sizeof text, "%llu bytes", static_cast<unsigned long long>(bytes));
  }
  return text;
}

std::optional<MemoryHeadroom> memory_headroom(const std::string& proc_self_cgroup, const std::filesystem::path& root,
                                              const std::string& meminfo) {
  std::optional<MemoryHeadroom> tightest;
  for (const CgroupDir& dir : cgroup_dirs(proc_self_cgroup, root, "memory")) keep_tightest(tightest, cgroup_headroom(dir));
  if (const auto available_kib = keyed_value(meminfo, "MemAvailable:")) {
    const std::uint64_t available = *available_kib * 1024;
    keep_tightest(tightest, MemoryHeadroom{available, "MemAvailable " + binary_size(available) + " in /proc/meminfo"});
  }
  return tightest;
}

std::optional<MemoryHeadroom> this_process_memory_headroom() {
  return memory_headroom(this_process_cgroups(), "/sys/fs/cgroup", file_text("/proc/meminfo"));
}

HostOutOfMemory::HostOutOfMemory(std::size_t requested, MemoryHeadroom headroom)
    : HostOutOfMemory(requested, std::move(headroom), std::string()) {}

HostOutOfMemory::HostOutOfMemory(const HostOutOfMemory& refused, const std::string& purpose)
    : HostOutOfMemory(refused.requested_, refused.headroom_, " " + purpose) {}

HostOutOfMemory::HostOutOfMemory(std::size_t requested, MemoryHeadroom headroom, const std::string& purpose)
    : requested_(requested),
      headroom_(std::move(headroom)),
      message_("host memory: asked for " + binary_size(requested) + purpose + ", " + binary_size(headroom_.bytes) +
               " left (" + headroom_.source + ")") {}

HostMemoryLock::HostMemoryLock() {
  const char* tmp = std::getenv("TMPDIR");
  const std::string dir = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
  const std::string path = dir + "/dlbench-host-memory.lock";
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0666);
  // Made by another user and not writable here: a lock needs only a descriptor.
  if (fd_ < 0) fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd_ < 0) return;
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno != EINTR) {
      ::close(fd_);
      fd_ = -1;
      return;
    }
  }
}

HostMemoryLock::~HostMemoryLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the only descriptor releases the lock
}

void ensure_host_memory(std::size_t bytes, const std::optional<MemoryHeadroom>& headroom) {
  if (headroom && bytes > headroom->bytes) throw HostOutOfMemory(bytes, *headroom);
}

void ensure_host_memory(std::size_t bytes) { ensure_host_memory(bytes, this_process_memory_headroom()); }

}  // namespace dlbench::worker
