#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace dlbench::cli {

struct LaunchOptions {
  std::string termination_log = "/dev/termination-log";
  std::vector<std::string> command;  // mpirun … dlbench-worker … (the worker prints JSON on stdout)
};

// Kubernetes keeps at most 4096 bytes of a termination message.
inline constexpr std::size_t kTerminationMessageLimit = 4096;

// Runs the command; its stdout must be one dlbench.result/v1 document (rank 0's). Writes the
// validated document, compact and under the limit, to the termination log; without a valid
// document, writes the command's last stderr lines there instead (and exits non-zero).
int run_launch(const LaunchOptions& options, std::ostream& out, std::ostream& err);

// The document as compact JSON under `limit` bytes: drops, in order, the host list, the
// per-repeat step-time summary and the environment's optional strings; never the numbers.
std::string compact_result(const std::string& json_text, std::size_t limit);

}  // namespace dlbench::cli
