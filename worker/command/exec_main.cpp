// dlbench-exec: the command engine's shim. Runs another framework's training command as one
// node of a dlbench case, times its `@dlbench step` markers and, on node 0, writes the case's
// dlbench.result/v1 document. Linked statically so that it runs in any Linux image: the operator
// copies it into the user's pods with an init container (`dlbench-exec --install DIR`).
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "command/command_runner.hpp"
#include "dlbench/core/command_line.hpp"
#include "dlbench/core/names.hpp"
#include "dlbench/core/result_document.hpp"
#include "dlbench/core/statistics.hpp"
#include "dlbench/core/status.hpp"
#include "dlbench/core/version.hpp"
#include "worker_metrics.hpp"

namespace {

using namespace dlbench;
using namespace dlbench::command;

constexpr int kExitFailed = 1;

constexpr const char* kFooter = R"(The command goes after --. The case comes from the environment dlbench sets on every node:
DLBENCH_MODEL, DLBENCH_NODES, DLBENCH_NODE_RANK, DLBENCH_GPUS_PER_NODE, DLBENCH_BATCH_SIZE,
DLBENCH_PRECISION, DLBENCH_WARMUP_STEPS, DLBENCH_MEASURE_STEPS, DLBENCH_REPEATS, DLBENCH_IMAGE_SIZE
(and DLBENCH_RUN). The command prints "@dlbench step <global samples>" after every training step
(from one process, global rank 0) and may print "@dlbench fact <key> <value>" (the facts optimizer,
learningRate, momentum and weightDecay say how it trained, learningRateWarmupSteps how it warmed
the rate up) and "@dlbench loss <value>" (the last in
each repeat is the loss after it; NaN or infinite fails the case, LossNotFinite); dlbench timestamps
the markers as they arrive.

Exit status: node 0: 0 when the case succeeded, 1 when its result says why it failed, 2 on a usage
error; other nodes: the command's own exit status.)";

struct Options {
  std::string output, termination_log, install_dir;
  long timeout_seconds = 3600;
  int metrics_port = -1;
  bool quiet = false;
  std::vector<std::string> command;
};

std::optional<Options> parse(int argc, char** argv) {
  Options o;
  std::vector<std::string> args(argv + 1, argv + argc);
  // Everything after -- is the command, whatever it looks like.
  if (const auto dashes = std::find(args.begin(), args.end(), "--"); dashes != args.end()) {
    o.command.assign(dashes + 1, args.end());
    args.erase(dashes, args.end());
  }
  CLI::App app{"dlbench-exec — run a training command as one node of a dlbench case, timed by dlbench",
               "dlbench-exec"};
  use_dlbench_help(app);
  app.set_help_flag("-h,--help", "print this and exit");
  app.footer(kFooter);
  bool version = false;
  add_text_option(app, "--output", [&o](const std::string& v) { o.output = v; },
                  "node 0: write the result document here (default: stdout)", "FILE");
  add_text_option(app, "--termination-log", [&o](const std::string& v) { o.termination_log = v; },
                  "node 0: also write it, compacted under 4096 bytes, here", "FILE");
  add_text_option(
      app, "--timeout", [&o](const std::string& v) { o.timeout_seconds = parse_bounded("--timeout", v, 1, 30L * 24 * 3600); },
      "stop the command (SIGTERM, SIGKILL 10 s later) after this long (default 3600)", "SECONDS");
  add_text_option(
      app, "--metrics-port",
      [&o](const std::string& v) { o.metrics_port = static_cast<int>(parse_bounded("--metrics-port", v, 0, 65535)); },
      "node 0: serve live dlbench_worker_* metrics on port N (0: any free port)", "N");
  app.add_flag("--quiet", o.quiet, "do not pass the command's output through to stderr");
  add_text_option(app, "--install", [&o](const std::string& v) { o.install_dir = v; },
                  "copy this self-contained program to DIR/dlbench-exec (and dlbench's examples with the Python "
                  "marker helper to DIR/examples) and exit",
                  "DIR");
  app.add_flag("--version", version, "print the version and exit");
  try {
    parse_command_line(app, args, "; the command goes after --");
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return std::nullopt;
  }
  if (version) {
    std::cout << "dlbench-exec " << dlbench::version() << "\n";
    return std::nullopt;
  }
  if (o.install_dir.empty() && o.command.empty()) throw UsageError{"no command given after --"};
  return o;
}

// Copies this executable into dir atomically, with the examples and the Python marker helper
// installed beside it (<prefix>/share/dlbench/examples): what an init container runs to deliver
// them into an image that is not dlbench's. DLBENCH_HOME points there in the pod.
int install(const std::string& dir) {
  namespace fs = std::filesystem;
  const fs::path self = fs::read_symlink("/proc/self/exe");
  const fs::path target = fs::path(dir) / "dlbench-exec";
  const fs::path staging = fs::path(dir) / ".dlbench-exec.tmp";
  fs::create_directories(dir);
  fs::copy_file(self, staging, fs::copy_options::overwrite_existing);
  fs::permissions(staging, fs::perms::owner_all | fs::perms::group_read | fs::perms::group_exec |
                               fs::perms::others_read | fs::perms::others_exec);
  fs::rename(staging, target);
  std::cout << "dlbench-exec: installed " << target.string() << "\n";
  const fs::path examples = self.parent_path().parent_path() / "share" / "dlbench" / "examples";
  if (fs::is_directory(examples)) {
    fs::copy(examples, fs::path(dir) / "examples", fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    std::cout << "dlbench-exec: installed " << (fs::path(dir) / "examples").string() << "\n";
  }
  return 0;
}

int run(const Options& o) {
  std::string error;
  const auto c = case_from_environment([](const char* name) { return std::getenv(name); }, error);
  if (!c) throw UsageError{error};
  const bool reporter = c->node_rank == 0;
  const std::string id = case_id(c->case_);

  std::unique_ptr<worker::WorkerMetrics> live;
  if (reporter && o.metrics_port >= 0) {
    try {
      live = std::make_unique<worker::WorkerMetrics>(
          worker::WorkerIdentity{c->run, id, std::string(to_string(c->model)), std::string(to_string(c->case_.precision)),
                                 "command", "command", std::string(dlbench::version()), "", 0, c->case_.global_batch_size()},
          o.metrics_port);
      std::cerr << "dlbench-exec: metrics on port " << live->port() << "\n";
    } catch (const std::exception& e) {
      std::cerr << "dlbench-exec: warning: no live metrics: " << e.what() << "\n";
    }
  }

  RunSettings settings;
  settings.argv = o.command;
  settings.timeout = std::chrono::seconds(o.timeout_seconds);
  settings.passthrough_fd = o.quiet ? -1 : STDERR_FILENO;
  const long per_repeat = static_cast<long>(c->methodology.warmup_steps) + c->methodology.measure_steps;
  double previous = 0, repeat_start = 0;
  if (reporter) {
    settings.on_step = [&](long index, double seconds) {
      if (index >= c->total_steps()) return;
      const int repeat = static_cast<int>(index / per_repeat);
      const long within = index % per_repeat;
      const bool measured = within >= c->methodology.warmup_steps;
      if (within == c->methodology.warmup_steps) repeat_start = previous;
      if (live) live->on_step(repeat, measured, seconds - previous);
      previous = seconds;
      if (within + 1 == per_repeat && seconds > repeat_start) {
        const double throughput = repeat_throughput(c->case_.global_batch_size(), c->methodology.measure_steps,
                                                    seconds - repeat_start);
        if (live) live->on_repeat(throughput);
        std::cerr << "  case " << id << " repeat " << repeat + 1 << "/" << c->methodology.repeats << ": "
                  << std::fixed << std::setprecision(2) << throughput << " samples/s\n";
      }
    };
    // The gauge holds the loss after the last finished repeat, as dlbench-worker's does: the one a
    // command reports after a repeat's last step (what becomes the result's lossAfterRepeats).
    settings.on_loss = [&](long steps_before, double loss) {
      if (live && steps_before > 0 && steps_before <= c->total_steps() && steps_before % per_repeat == 0) {
        live->set_loss(loss);
      }
    };
  }
  install_signal_forwarding();
  const std::string start_time = rfc3339_utc_now();
  const CommandOutcome outcome = run_command(settings);
  const std::string end_time = rfc3339_utc_now();
  if (!reporter) {
    if (outcome.exit_code != 0) {
      std::cerr << "dlbench-exec: node " << c->node_rank << ": the command ended with exit status "
                << outcome.exit_code << (outcome.timed_out ? " (timed out)" : "") << "\n";
    }
    return outcome.exit_code;
  }
  EnvironmentInfo environment = host_environment();
  environment.dlbench_version = dlbench::version();
  const ResultDocument doc = command_result(*c, outcome, environment, start_time, end_time);
  if (live) live->finished(doc.state == CaseState::Succeeded);
  if (outcome.cut_lines > 0) {
    std::cerr << "dlbench-exec: " << outcome.cut_lines << " output lines were longer than " << kMaxLineBytes
              << " bytes and were cut\n";
  }
  if (doc.state == CaseState::Succeeded) {
    std::cerr << "dlbench-exec: case " << id << " Succeeded: " << std::fixed << std::setprecision(2)
              << reported_value(doc.throughput->summary, doc.methodology.statistic) << " samples/s ("
              << to_string(doc.methodology.statistic) << " of " << doc.methodology.repeats << " repeats)\n";
  } else {
    std::cerr << "dlbench-exec: case " << id << " Failed: " << doc.reason << ": " << doc.message << "\n";
  }
  const std::string json = to_json(doc).dump(2) + "\n";
  int status = doc.state == CaseState::Succeeded ? 0 : kExitFailed;
  if (o.output.empty()) {
    std::cout << json << std::flush;
  } else {
    std::ofstream out(o.output);
    out << json;
    if (!out) {
      std::cerr << "dlbench-exec: cannot write " << o.output << "\n";
      status = kExitFailed;
    }
  }
  if (!o.termination_log.empty()) {
    std::ofstream log(o.termination_log);
    log << compact_result_document(json);
    if (!log) std::cerr << "dlbench-exec: cannot write " << o.termination_log << "\n";
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const auto options = parse(argc, argv);
    if (!options) return 0;
    if (!options->install_dir.empty()) return install(options->install_dir);
    return run(*options);
  } catch (const UsageError& e) {
    std::cerr << "dlbench-exec: " << e.message << "\n";
    return kExitUsageError;
  } catch (const std::exception& e) {
    std::cerr << "dlbench-exec: " << e.what() << "\n";
    return kExitFailed;
  }
}
