#pragma once

#include <ostream>
#include <string>

namespace dlbench::cli {

struct RunOptions {
  std::string file;
  std::string output;             // default: <name>.status.json
  std::string worker;             // default: dlbench-worker next to this binary
  std::string exec;               // engine: command — default: dlbench-exec next to this binary
  std::string mpirun = "mpirun";
  int max_devices = 0;            // default: the GPUs (cuda) or hardware threads (cpu) of this host
  std::string backend = "auto";   // auto: cuda when dlbench-worker sees a GPU, else cpu
  bool resume = false;            // go on from the status at `output`: run only cases without a result
  bool retry_failed = false;      // with resume: and the cases whose result is Failed, again
  std::string logs;               // each attempt's output; default: beside the status (NAME.logs)
};

// Exit codes: 0 at least one case succeeded, 1 none did, the run is invalid or --resume refused
// the status, 2 unreadable input, a status file another dlbench run is writing, or a status that
// could not be written mid-run (kept in the temporary directory or on stdout, saying where), 130
// interrupted (finished results are kept in the status file).
int run_run(const RunOptions& options, std::ostream& out, std::ostream& err);

}  // namespace dlbench::cli
