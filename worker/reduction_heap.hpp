// What a rank asks of glibc's malloc before its first host reduction (MpiCommunicator). Open MPI's
// nonblocking allreduce allocates a temporary buffer for each piece it reduces and frees it when
// the piece ends. By default glibc serves such a buffer from a fresh mmap (or, once its threshold
// has risen, from the heap's top, which it trims back to the kernel as soon as 2 buffers' worth lie
// free there), so the kernel faults in and zeroes every buffer again, piece after piece: two
// ranks of BERT-base measured 23,000 page faults and 0.6 GB/s a gradient reduction, against none
// and 2 to 3 GB/s with these settings (bench/RESULTS.md, 2026-12-06). So the pieces come from the
// heap (mmap only above 32 MiB) and a trim leaves 64 MiB at the heap's top for the next ones.
// A setting the user's environment gives (MALLOC_MMAP_THRESHOLD_, GLIBC_TUNABLES'
// glibc.malloc.mmap_threshold, and the same for top_pad) is theirs and stays.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace dlbench::worker {

struct HeapSetting {
  int option;            // mallopt's M_MMAP_THRESHOLD or M_TOP_PAD
  int value;             // bytes
  std::string variable;  // glibc's environment variable for it
  std::string tunable;   // and its name in GLIBC_TUNABLES
};

// The settings to apply, less those `environment` (getenv's signature) already gives.
std::vector<HeapSetting> reduction_heap_settings(const std::function<const char*(const char*)>& environment);

// Applies reduction_heap_settings(getenv) with mallopt; returns what it applied, or a text saying
// which setting the process's malloc refused (AddressSanitizer's refuses every one).
std::string apply_reduction_heap_settings();

}  // namespace dlbench::worker
