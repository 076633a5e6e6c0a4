#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace dlbench::cli {

struct LaunchOptions {
  std::string termination_log = "/dev/termination-log";
  std::vector<std::string> command;  // mpirun … dlbench-worker … (the worker prints JSON on stdout)
};

// Runs the command; its stdout must be one dlbench.result/v1 document (rank 0's). Writes the
// validated document, compact and under the limit, to the termination log; without a valid
// document, writes the command's last stderr lines there instead (and exits non-zero).
int run_launch(const LaunchOptions& options, std::ostream& out, std::ostream& err);

}  // namespace dlbench::cli
