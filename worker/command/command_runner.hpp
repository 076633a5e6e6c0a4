// Runs a wrapped training command and turns what it printed into a dlbench.result/v1 document:
// the heart of `engine: command`. The command runs in its own process group with stdout and
// stderr on one pipe; every line is passed through, `@dlbench` markers are timestamped on
// arrival with a monotonic clock, and memory stays bounded whatever the command prints.
#pragma once

#include <chrono>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "command/step_timing.hpp"
#include "dlbench/core/benchmark_run.hpp"
#include "dlbench/core/result_document.hpp"

namespace dlbench::command {

// The case the executor gave this node, read back from the DLBENCH_* variables that
// command_environment() sets (core/worker_command.hpp).
struct CommandCase {
  std::string run;
  Model model = Model::resnet50;
  int image_size = 224;
  int image_height = 0, image_width = 0;  // from DLBENCH_IMAGE_HEIGHT and _WIDTH, when set
  int sequence_length = 0;                // a sequence model's tokens per sequence (DLBENCH_SEQUENCE_LENGTH)
  CaseSpec case_;
  Methodology methodology;  // stability.maxCv from DLBENCH_MAX_CV when set
  int node_rank = 0;
  // A GPU was given to the node (NVIDIA_VISIBLE_DEVICES or CUDA_VISIBLE_DEVICES names one): the
  // default stability bound is a GPU's.
  bool gpu = false;

  long total_steps() const {
    return static_cast<long>(methodology.repeats) * (methodology.warmup_steps + methodology.measure_steps);
  }
};

// Reads the case from `lookup` (getenv in production). On a missing or bad variable returns
// nullopt and sets `error` to a message naming the variable and its allowed values.
std::optional<CommandCase> case_from_environment(const std::function<const char*(const char*)>& lookup,
                                                 std::string& error);

inline constexpr std::size_t kMaxLineBytes = 64 * 1024;  // longer lines are cut, never buffered whole
inline constexpr std::size_t kTailLines = 12;            // kept for failure messages
inline constexpr std::size_t kTailLineChars = 240;
inline constexpr std::size_t kMaxFacts = 64;

struct RunSettings {
  std::vector<std::string> argv;
  std::chrono::seconds timeout{3600};
  std::chrono::seconds kill_grace{10};  // SIGTERM, then SIGKILL this much later
  int passthrough_fd = 2;               // the command's output goes on here; -1: dropped
  // Called for every step marker as it arrives (index from 0, its arrival time): live metrics.
  std::function<void(long index, double seconds)> on_step;
  // Called for every `@dlbench loss` marker as it arrives, with the step markers seen before it.
  std::function<void(long steps_before, double loss)> on_loss;
};

struct CommandOutcome {
  int exit_code = -1;   // the command's, or 128 + signal
  int signal = 0;       // the signal that ended it, if any
  bool started = false; // false: exec failed (exit_code 127, why in tail)
  bool timed_out = false;
  bool interrupted = false;  // this process was told to stop
  bool out_of_memory = false;  // the kernel's OOM killer killed something in our cgroup meanwhile
  std::vector<StepArrival> steps;
  std::map<std::string, std::string> facts;
  // `@dlbench loss` values with the number of step markers seen before each (the last one per
  // step kept: a script may print a loss every step).
  std::vector<std::pair<long, double>> losses;
  std::string invalid_marker;  // the first malformed marker's error and line
  std::string unsupported;     // the first `@dlbench unsupported` reason
  std::optional<NcclTransport> nccl_transport;  // from NCCL's INFO lines in the output
  std::deque<std::string> tail;  // last output lines, each cut to kTailLineChars
  long output_lines = 0;
  long cut_lines = 0;  // lines longer than kMaxLineBytes
  double seconds = 0;  // from start to exit
};

// Starts argv (with this process's environment) and waits for it, within
// settings.timeout. SIGINT/SIGTERM to this process are passed to the command's process group.
CommandOutcome run_command(const RunSettings& settings);

// The result document for node 0: Succeeded with the methodology's numbers, or Failed with one of
// Unsupported, CommandFailed, NoMeasurements, IncompleteMeasurement, SampleCountMismatch, InvalidMarker,
// CaseMismatch (the command says it trained another model), LossNotFinite, Timeout, OutOfMemory,
// Interrupted, and a message that ends with the command's last lines.
ResultDocument command_result(const CommandCase& c, const CommandOutcome& outcome, EnvironmentInfo environment,
                              const std::string& start_time, const std::string& end_time);

// Installs the handlers that pass SIGINT/SIGTERM on to the running command.
void install_signal_forwarding();

}  // namespace dlbench::command
