#pragma once

#include <chrono>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

namespace dlbench::cli {

struct LaunchOptions {
  std::string termination_log = "/dev/termination-log";
  std::vector<std::string> command;  // mpirun … dlbench-worker … (the worker prints JSON on stdout)
  // The case's deadline, as the operator left it to this launcher: after `stop_after_seconds`
  // (0: never) from this launcher's start, or at `stop_at` by this node's clock, whichever comes
  // first, the command is stopped with SIGUSR1 (mpirun passes it on to every rank), and the
  // repeats rank 0 then writes (Stopped) become a Timeout result naming
  // limits.caseTimeoutSeconds, `case_timeout_seconds`. `stop_at` is the attempt's own deadline,
  // whenever this launcher started (its image pulled late, say); `stop_after_seconds` the bound
  // for a node whose clock lags the operator's.
  long stop_after_seconds = 0;
  std::optional<std::chrono::system_clock::time_point> stop_at;
  long case_timeout_seconds = 0;
};

// Runs the command; its stdout must be one dlbench.result/v1 document (rank 0's). Writes the
// validated document, compact and under the limit, to the termination log; without a valid
// document, writes the command's last stderr lines there instead (and exits non-zero). SIGTERM
// and SIGINT (a pod's deletion, the Job's activeDeadlineSeconds) stop the command the same way,
// once, so that rank 0 writes its repeats rather than all of it dying unheard: as PID 1 in its
// container, this process would otherwise ignore them.
int run_launch(const LaunchOptions& options, std::ostream& out, std::ostream& err);

}  // namespace dlbench::cli
