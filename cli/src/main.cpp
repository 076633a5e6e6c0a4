// dlbench: the command-line front end of the dlbench benchmark.
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "dlbench/core/names.hpp"
#include "launch_command.hpp"
#include "report_command.hpp"
#include "run_command.hpp"
#include "validate_command.hpp"

namespace {

constexpr std::string_view kUsage = R"(dlbench — deep-learning training benchmarks, the DLPerf methodology as a service

Usage:
  dlbench validate -f FILE [-f FILE ...] [-o table|json|yaml] [-q]
      Check BenchmarkRun documents (YAML or JSON, several per file, "-" for stdin).
      Prints the planned cases of each valid run, or every error with its field path.
      Exit code: 0 valid, 1 invalid, 2 unreadable input or bad usage.
  dlbench run -f run.yaml [--output STATUS.json] [--backend auto|cpu|cuda] [--max-devices N] [--worker PATH]
              [--mpirun PATH] [--exec PATH]
      Run a BenchmarkRun on this host, case by case, as mpirun -np DEVICES dlbench-worker, or
      with engine: command as dlbench-exec -- COMMAND (the command starts its own processes).
      Cases needing more nodes or devices than this host has are recorded as skipped.
      Writes the status (as the operator would) after every case; Ctrl-C keeps what finished.
      Exit code: 0 some case succeeded, 1 none did or invalid input, 2 unreadable, 130 interrupted.
  dlbench report STATUS.json [MORE.json ...] [--format table|markdown|csv|json] [--plot scaling.svg]
      DLPerf-style tables: per precision, batch sizes by nodes x GPUs, then speed-up and
      scaling efficiency; several files side by side. --plot draws throughput and speed-up
      against devices, with the ideal line.
  dlbench launch [--termination-log FILE] -- mpirun ... dlbench-worker ...
      The operator's launcher: runs the command, validates rank 0's result document and
      writes it compactly (under 4 KiB) to the termination log (default /dev/termination-log).
  dlbench version
  dlbench help
)";

int usage_error(const std::string& message) {  // callers quote user text through printable()
  std::cerr << "error: " << message << "\n\n" << kUsage;
  return dlbench::cli::kExitUnreadable;
}

int validate_main(const std::vector<std::string>& args) {
  dlbench::cli::ValidateOptions options;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    const auto value = [&](const std::string& flag) -> const std::string* {
      if (i + 1 >= args.size()) return nullptr;
      (void)flag;
      return &args[++i];
    };
    if (arg == "-f" || arg == "--filename") {
      const std::string* file = value(arg);
      if (file == nullptr) return usage_error(arg + " needs a file name");
      options.files.push_back(*file);
    } else if (arg.starts_with("--filename=")) {
      options.files.push_back(arg.substr(11));
    } else if (arg == "-o" || arg == "--output") {
      const std::string* format = value(arg);
      if (format == nullptr) return usage_error(arg + " needs one of table, json, yaml");
      if (*format == "table") {
        options.format = dlbench::cli::OutputFormat::table;
      } else if (*format == "json") {
        options.format = dlbench::cli::OutputFormat::json;
      } else if (*format == "yaml") {
        options.format = dlbench::cli::OutputFormat::yaml;
      } else {
        return usage_error("--output: \"" + *format + "\" is not one of table, json, yaml");
      }
    } else if (arg == "-q" || arg == "--quiet") {
      options.quiet = true;
    } else if (arg == "-h" || arg == "--help") {
      std::cout << kUsage;
      return 0;
    } else {
      return usage_error("validate: unknown argument \"" + dlbench::printable(arg) + "\"");
    }
  }
  if (options.files.empty()) return usage_error("validate needs -f FILE");
  return dlbench::cli::run_validate(options, std::cout, std::cerr);
}

int run_main(const std::vector<std::string>& args) {
  dlbench::cli::RunOptions options;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    const auto value = [&]() -> const std::string* { return i + 1 < args.size() ? &args[++i] : nullptr; };
    const std::string* v = nullptr;
    if (arg == "-f" || arg == "--filename" || arg == "--output" || arg == "-o" || arg == "--worker" ||
        arg == "--mpirun" || arg == "--max-devices" || arg == "--backend" || arg == "--exec") {
      v = value();
      if (v == nullptr) return usage_error(arg + " needs a value");
    }
    if (arg == "-f" || arg == "--filename") {
      options.file = *v;
    } else if (arg == "--output" || arg == "-o") {
      options.output = *v;
    } else if (arg == "--worker") {
      options.worker = *v;
    } else if (arg == "--mpirun") {
      options.mpirun = *v;
    } else if (arg == "--exec") {
      options.exec = *v;
    } else if (arg == "--backend") {
      if (*v != "auto" && *v != "cpu" && *v != "cuda") {
        return usage_error("--backend: \"" + *v + "\" is not one of auto, cpu, cuda");
      }
      options.backend = *v;
    } else if (arg == "--max-devices") {
      try {
        options.max_devices = std::stoi(*v);
      } catch (const std::exception&) {
        options.max_devices = 0;
      }
      if (options.max_devices < 1) return usage_error("--max-devices: \"" + *v + "\" is not a whole number >= 1");
    } else {
      return usage_error("run: unknown argument \"" + dlbench::printable(arg) + "\"");
    }
  }
  if (options.file.empty()) return usage_error("run needs -f FILE");
  return dlbench::cli::run_run(options, std::cout, std::cerr);
}

int report_main(const std::vector<std::string>& args) {
  dlbench::cli::ReportOptions options;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--format") {
      if (i + 1 >= args.size()) return usage_error("--format needs one of table, markdown, csv, json");
      const std::string& f = args[++i];
      if (f == "table") {
        options.format = dlbench::cli::ReportFormat::table;
      } else if (f == "markdown") {
        options.format = dlbench::cli::ReportFormat::markdown;
      } else if (f == "csv") {
        options.format = dlbench::cli::ReportFormat::csv;
      } else if (f == "json") {
        options.format = dlbench::cli::ReportFormat::json;
      } else {
        return usage_error("--format: \"" + f + "\" is not one of table, markdown, csv, json");
      }
    } else if (arg == "--plot") {
      if (i + 1 >= args.size()) return usage_error("--plot needs a file name");
      options.plot = args[++i];
    } else if (arg.starts_with("-")) {
      return usage_error("report: unknown option \"" + dlbench::printable(arg) + "\"");
    } else {
      options.files.push_back(arg);
    }
  }
  if (options.files.empty()) return usage_error("report needs at least one status file");
  return dlbench::cli::run_report(options, std::cout, std::cerr);
}

int launch_main(const std::vector<std::string>& args) {
  dlbench::cli::LaunchOptions options;
  std::size_t i = 0;
  for (; i < args.size() && args[i] != "--"; ++i) {
    if (args[i] == "--termination-log" && i + 1 < args.size()) {
      options.termination_log = args[++i];
    } else {
      return usage_error("launch: unknown argument \"" + args[i] + "\" (the command goes after --)");
    }
  }
  if (i < args.size()) options.command.assign(args.begin() + static_cast<std::ptrdiff_t>(i) + 1, args.end());
  return dlbench::cli::run_launch(options, std::cout, std::cerr);
}

int dispatch(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) return usage_error("no command given");
  const std::string command = args.front();
  args.erase(args.begin());
  if (command == "validate") return validate_main(args);
  if (command == "run") return run_main(args);
  if (command == "report") return report_main(args);
  if (command == "launch") return launch_main(args);
  if (command == "version" || command == "--version") {
    std::cout << "dlbench " << DLBENCH_VERSION << '\n';
    return 0;
  }
  if (command == "help" || command == "-h" || command == "--help") {
    std::cout << kUsage;
    return 0;
  }
  return usage_error("unknown command \"" + dlbench::printable(command) +
                     "\"; commands: validate, run, report, launch, version, help");
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return dispatch(argc, argv);
  } catch (const std::exception& e) {
    // Whatever a command did not handle itself: said, and a failure exit, never an abort.
    std::cerr << "dlbench: error: " << e.what() << "\n";
    return 1;
  }
}
