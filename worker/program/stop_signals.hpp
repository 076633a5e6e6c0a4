// SIGTERM, SIGINT and SIGUSR1, taken by a thread of their own rather than a handler, so that what runs
// when one comes is ordinary code: where a case has measured repeats, rank 0 (or, where rank 0
// was ended outright, its deputy) writes them as a Failed result before the process ends. Open
// MPI stops every other rank with SIGTERM a second after one rank ends (a rank the OOM killer
// ended, a node lost), and a pod's deletion or an interrupted `dlbench run` sends the same:
// before, the repeats measured until then were lost.
// SIGUSR1 is `dlbench launch`'s stop: mpirun passes it on to every rank without tearing the job
// down itself (a SIGTERM to mpirun can drop what rank 0 then writes); a rank whose guard does not
// answer it (every rank but 0) ignores it, and rank 0's end ends the job.
#pragma once

#include <functional>
#include <optional>

namespace dlbench::worker {

// What to do when a stop signal comes: write what was measured, and the exit code; nothing
// (nullopt) leaves the signal its default action, the process ended by it.
using LastWords = std::function<std::optional<int>(int signal_number, const char* signal_name)>;

// Blocks SIGTERM and SIGINT in the calling thread, and so in every thread started after it
// (OpenMP's, MPI's, CUDA's, the input pipeline's), and starts the thread that takes them. Call
// first in main, before any other thread is started.
void take_stop_signals();

// While alive, a stop signal runs `last_words` (on the signals' thread, never at once with
// another StopGuard's); destroyed, the default action comes back. One at a time. SIGUSR1 runs
// them only where `answers_sigusr1`; elsewhere it is ignored.
class StopGuard {
 public:
  explicit StopGuard(LastWords last_words, bool answers_sigusr1 = true);
  ~StopGuard();
  StopGuard(const StopGuard&) = delete;
  StopGuard& operator=(const StopGuard&) = delete;
};

}  // namespace dlbench::worker
