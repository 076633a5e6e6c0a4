// How much more host memory this process can take before something ends it, and the check that
// refuses a large host allocation beyond that: the case then fails as OutOfMemory naming the
// limit, where the kernel's OOM killer would have ended the worker (and, in a pod, every rank's
// measurements with it) as the allocation was first written.
//
// The tightest of: each memory cgroup on the path up (a pod's limit, a container's), its limit
// less its working set (usage less the inactive file cache, which the kernel reclaims before it
// kills: the working set Kubernetes evicts by), and the machine's MemAvailable (a benchmark that
// swaps measures the disk). Only the bytes asked for are compared: an allocation that fits can
// still leave too little for what comes after it.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <new>
#include <optional>
#include <string>

namespace dlbench::worker {

struct MemoryHeadroom {
  std::uint64_t bytes = 0;
  // "memory.max 16.00 GiB, working set 15.10 GiB in /sys/fs/cgroup/kubepods/pod1"
  std::string source;
};

// The tightest headroom under the cgroups of `proc_self_cgroup` (/proc/self/cgroup's text)
// mounted at `root`, v2 and v1 alike, and `meminfo` (/proc/meminfo's text). None where nothing
// limits or nothing can be read.
std::optional<MemoryHeadroom> memory_headroom(const std::string& proc_self_cgroup, const std::filesystem::path& root,
                                              const std::string& meminfo);
// This process's, read now.
std::optional<MemoryHeadroom> this_process_memory_headroom();

// A host allocation refused because it does not fit in the headroom. A std::bad_alloc, so that
// whoever handles running out of memory handles it; what() says how much was asked and what binds.
class HostOutOfMemory : public std::bad_alloc {
 public:
  HostOutOfMemory(std::size_t requested, MemoryHeadroom headroom);
  // The same refusal, saying what the memory was for ("to read /data/a/x.png"): the input
  // pipeline's threads name the file whose buffers did not fit.
  HostOutOfMemory(const HostOutOfMemory& refused, const std::string& purpose);
  const char* what() const noexcept override { return message_.c_str(); }
  std::size_t requested() const { return requested_; }
  const MemoryHeadroom& headroom() const { return headroom_; }

 private:
  HostOutOfMemory(std::size_t requested, MemoryHeadroom headroom, const std::string& purpose);  // " to read …" or ""
  std::size_t requested_;
  MemoryHeadroom headroom_;
  std::string message_;
};

// Held while a large host buffer is checked, made and faulted in. The ranks of one node share one
// pod's memory cgroup: two checking at once would each count the same headroom as theirs (two
// ranks of ResNet-50 at batch 64 under a 6 GiB limit each passed the check, and the OOM killer
// ended one). Under the lock each sees the buffers made before it in the working set it reads.
// An advisory lock (flock) on a file in $TMPDIR or /tmp, which the ranks of a pod share; where it
// cannot be opened, nothing is serialised. The kernel drops it with a process that dies.
class HostMemoryLock {
 public:
  HostMemoryLock();
  ~HostMemoryLock();
  HostMemoryLock(const HostMemoryLock&) = delete;
  HostMemoryLock& operator=(const HostMemoryLock&) = delete;

 private:
  int fd_ = -1;
};

// Throws HostOutOfMemory where `bytes` exceed `headroom`.
void ensure_host_memory(std::size_t bytes, const std::optional<MemoryHeadroom>& headroom);
// The same against this process's headroom, read now: only for allocations made while a case is
// set up (each reading costs a few small files).
void ensure_host_memory(std::size_t bytes);

// "1.50 GiB", "477.0 MiB": sizes in a message.
std::string binary_size(std::uint64_t bytes);

}  // namespace dlbench::worker
