// dlbench: the command-line front end of the dlbench benchmark.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iostream>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "dlbench/core/api_rules.hpp"
#include "dlbench/core/command_line.hpp"
#include "dlbench/core/names.hpp"
#include "dlbench/core/status.hpp"
#include "dlbench/core/version.hpp"
#include "compare_command.hpp"
#include "launch_command.hpp"
#include "report_command.hpp"
#include "run_command.hpp"
#include "validate_command.hpp"

namespace {

using dlbench::one_of;
using dlbench::printable;
using dlbench::UsageError;

// More devices than any host offers: a --max-devices beyond it is a typo.
constexpr std::int64_t kMaxDevices = 65536;

// After the commands in `dlbench help`: how each is called, at a glance.
constexpr const char* kSynopsis = R"(Usage:
  dlbench validate -f FILE [-f FILE ...] [-o table|json|yaml] [-q]
      Exit code: 0 valid, 1 invalid, 2 unreadable input or bad usage.
  dlbench run -f run.yaml [--output STATUS.json] [--resume [--retry-failed]] [--logs DIR]
              [--backend auto|cpu|cuda] [--max-devices N] [--worker PATH] [--mpirun PATH] [--exec PATH]
      Exit code: 0 some case succeeded, 1 none did or invalid input, 2 unreadable or busy, or its status
      could not be written (kept elsewhere, saying where), 130 interrupted.
  dlbench report STATUS.json [MORE.json ...] [--format table|markdown|csv|json] [--plot scaling.svg] [--relative]
  dlbench compare BASELINE.json [CANDIDATE.json] [--threshold PCT] [--alpha P] [--strict] [--format table|markdown|csv|json|junit]
      Exit code: 0 no case slower, 1 a case slower or failed now (--strict: or not judged), 2 cannot compare.
  dlbench launch [--termination-log FILE] [--stop-after S] [--stop-at TIME] [--case-timeout S] -- mpirun ... dlbench-worker ...
  dlbench version
  dlbench help
`dlbench COMMAND --help` says more about each.)";

constexpr std::string_view kCommands = "validate, run, report, compare, launch, version, help";

int usage_error(const std::string& message, const CLI::App& help) {  // callers quote user text through printable()
  std::cerr << "error: " << message << "\n\n" << help.help();
  return dlbench::kExitUsageError;
}

void add_validate(CLI::App& app, dlbench::cli::ValidateOptions& o) {
  auto* c = app.add_subcommand("validate",
                               "Check BenchmarkRun documents (YAML or JSON, several per file, \"-\" for stdin). Prints "
                               "the planned cases of each valid run, or every error with its field path.");
  dlbench::add_text_option(*c, "-f,--filename", [&o](const std::string& v) { o.files.push_back(v); },
                           "a file to check (repeat -f for more)", "FILE")
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  dlbench::add_text_option(
      *c, "-o,--output",
      [&o](const std::string& v) {
        using dlbench::cli::OutputFormat;
        o.format = one_of<OutputFormat>(
            "--output", v, {{"table", OutputFormat::table}, {"json", OutputFormat::json}, {"yaml", OutputFormat::yaml}});
      },
      "table | json | yaml (default table)", "FORMAT");
  c->add_flag("-q,--quiet", o.quiet, "print only the errors");
}

void add_run(CLI::App& app, dlbench::cli::RunOptions& o) {
  auto* c = app.add_subcommand(
      "run",
      "Run a BenchmarkRun on this host, case by case, as mpirun -np DEVICES dlbench-worker, or with engine: command "
      "as dlbench-exec -- COMMAND (the command starts its own processes). Cases needing more nodes or devices than "
      "this host has are recorded as skipped. Writes the status (as the operator would) after every case; Ctrl-C "
      "keeps what finished, and --resume goes on from it.");
  using dlbench::add_text_option;
  add_text_option(*c, "-f,--filename", [&o](const std::string& v) { o.file = v; }, "the BenchmarkRun", "FILE");
  add_text_option(*c, "-o,--output", [&o](const std::string& v) { o.output = v; },
                  "where the status goes (default NAME.status.json)", "STATUS.json");
  add_text_option(*c, "--logs", [&o](const std::string& v) { o.logs = v; },
                  "where each attempt's whole output goes, as CASE-aN.log (default: beside the status, "
                  "NAME.status.json -> NAME.logs)",
                  "DIR");
  add_text_option(
      *c, "--backend",
      [&o](const std::string& v) { o.backend = one_of("--backend", v, {"auto", "cpu", "cuda"}); },
      "auto | cpu | cuda; auto: cuda when dlbench-worker sees a GPU (default auto)", "B");
  add_text_option(
      *c, "--max-devices",
      [&o](const std::string& v) { o.max_devices = static_cast<int>(dlbench::parse_bounded("--max-devices", v, 1, kMaxDevices)); },
      "devices this host offers (default: its GPUs, or its hardware threads on the CPU)", "N");
  add_text_option(*c, "--worker", [&o](const std::string& v) { o.worker = v; },
                  "dlbench-worker to run (default: the one beside dlbench)", "PATH");
  add_text_option(*c, "--mpirun", [&o](const std::string& v) { o.mpirun = v; }, "mpirun to start ranks with", "PATH");
  add_text_option(*c, "--exec", [&o](const std::string& v) { o.exec = v; },
                  "dlbench-exec for engine: command (default: the one beside dlbench)", "PATH");
  auto* resume = c->add_flag("--resume", o.resume,
                             "go on from the status at --output: run only the cases without a result (the same spec "
                             "but for matrix, cases, limits and preflight, measured by the same dlbench, backend and "
                             "devices)");
  c->add_flag("--retry-failed", o.retry_failed,
              "with --resume: run the cases whose result is Failed again too, with all their attempts (their old "
              "results are replaced; Succeeded and Skipped ones are kept)")
      ->needs(resume);
}

// report's and compare's --format; compare's also junit.
void add_format_option(CLI::App& c, dlbench::cli::ReportFormat& format, bool junit = false) {
  using dlbench::cli::ReportFormat;
  static constexpr std::pair<const char*, ReportFormat> kFormats[] = {{"table", ReportFormat::table},
                                                                      {"markdown", ReportFormat::markdown},
                                                                      {"csv", ReportFormat::csv},
                                                                      {"json", ReportFormat::json},
                                                                      {"junit", ReportFormat::junit}};
  const std::span<const std::pair<const char*, ReportFormat>> formats(kFormats, junit ? 5 : 4);
  dlbench::add_text_option(
      c, "--format", [&format, formats](const std::string& v) { format = one_of("--format", v, formats); },
      junit ? "table | markdown | csv | json | junit (default table)" : "table | markdown | csv | json (default table)",
      "FORMAT");
}

void add_report(CLI::App& app, dlbench::cli::ReportOptions& o) {
  auto* c = app.add_subcommand("report",
                               "DLPerf-style tables: per precision, batch sizes by nodes x GPUs, then speed-up and "
                               "scaling efficiency; several files side by side.");
  c->add_option("files", o.files, "status files: a BenchmarkRun with its status, or a status written by dlbench run")
      ->type_name("STATUS.json");
  add_format_option(*c, o.format);
  dlbench::add_text_option(*c, "--plot", [&o](const std::string& v) { o.plot = v; },
                           "also draw throughput and speed-up against devices, with the ideal line", "scaling.svg");
  c->add_flag("--relative", o.relative,
              "after each throughput table, every later run's throughput as a multiple of the first run's in the same "
              "cell (batch, nodes x GPUs); json: relativeThroughput");
}

// A number within (low, high) (`low_open`: low itself excluded), as --threshold and --alpha take
// them; `percent` allows a trailing "%".
double bounded_number(const std::string& option, const std::string& text, double low, bool low_open, double high,
                      const std::string& allowed, bool percent = false) {
  std::string digits = text;
  if (percent && digits.ends_with("%")) digits.pop_back();
  double value = 0;
  std::size_t used = 0;
  try {
    value = std::stod(digits, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (digits.empty() || used != digits.size() || !std::isfinite(value) || value > high || value < low ||
      (low_open && value == low) || value == high) {
    throw UsageError{option + ": \"" + printable(text) + "\" is not " + allowed};
  }
  return value;
}

void add_compare(CLI::App& app, dlbench::cli::CompareOptions& o) {
  auto* c = app.add_subcommand(
      "compare",
      "Two runs of one model case by case (a driver, an image or a cluster before and after): each case is slower "
      "or faster only when its throughput moved by --threshold or more and its repeats show it at p < --alpha "
      "(two-sided Mann-Whitney U test); then what differs in the specs and in what measured them. Exit code: 0 no "
      "case slower, 1 a case slower or failed now (--strict: or not judged), 2 the files cannot be compared.");
  c->add_option("baseline", o.baseline, "the run measured before: a BenchmarkRun with its status, or a status")
      ->type_name("BASELINE.json");
  c->add_option("candidate", o.candidate,
                "the run measured after (left out: BASELINE.json holds both runs, the baseline first, as "
                "kubectl get br BEFORE AFTER -o json prints them)")
      ->type_name("CANDIDATE.json");
  dlbench::add_text_option(
      *c, "--threshold",
      [&o](const std::string& v) {
        o.threshold = bounded_number("--threshold", v, 0, false, 100, "a percentage from 0 to below 100", true) / 100;
      },
      "the least change of a case's throughput that counts, in percent (default 5)", "PCT");
  dlbench::add_text_option(
      *c, "--alpha",
      [&o](const std::string& v) { o.alpha = bounded_number("--alpha", v, 0, true, 1, "a number above 0 and below 1"); },
      "the significance level: a change counts where the repeats show it at p below this (default 0.05)", "P");
  c->add_flag("--strict", o.strict,
              "also fail (exit 1) where a case measured in the baseline cannot be judged: too few repeats, unstable or "
              "disturbed on either side, or missing from the candidate");
  add_format_option(*c, o.format, true);
}

void add_launch(CLI::App& app, dlbench::cli::LaunchOptions& o) {
  auto* c = app.add_subcommand("launch",
                               "The operator's launcher: runs the command after --, validates rank 0's result "
                               "document and writes it compactly (under 4 KiB) to the termination log.");
  dlbench::add_text_option(*c, "--termination-log", [&o](const std::string& v) { o.termination_log = v; },
                           "where the result goes (default /dev/termination-log)", "FILE");
  // As long as a case may run: the API's bounds of limits.caseTimeoutSeconds.
  const auto seconds = [](const std::string& flag, const std::string& v) {
    return dlbench::parse_bounded(flag, v, dlbench::bounds::kCaseTimeoutSeconds.min, dlbench::bounds::kCaseTimeoutSeconds.max);
  };
  dlbench::add_text_option(
      *c, "--stop-after", [&o, seconds](const std::string& v) { o.stop_after_seconds = seconds("--stop-after", v); },
      "stop the command (SIGUSR1, which mpirun passes on to every rank, then SIGKILL " + std::to_string(dlbench::kLaunchStopGraceSeconds) +
          " s later) this long after it starts: the repeats rank 0 measured become a Timeout result",
      "SECONDS");
  dlbench::add_text_option(
      *c, "--stop-at",
      [&o](const std::string& v) {
        o.stop_at = dlbench::parse_rfc3339(v);
        if (!o.stop_at) {
          throw dlbench::UsageError{"--stop-at: \"" + dlbench::printable(v) + "\" is not a UTC time like 2026-12-05T21:40:00Z"};
        }
      },
      "stop the command the same way at this time (UTC, RFC 3339), the case's deadline by the cluster's clock, "
      "or after --stop-after, whichever comes first",
      "TIME");
  dlbench::add_text_option(
      *c, "--case-timeout",
      [&o, seconds](const std::string& v) { o.case_timeout_seconds = seconds("--case-timeout", v); },
      "the limits.caseTimeoutSeconds a Timeout result names (default: --stop-after)", "SECONDS");
}

int dispatch(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  dlbench::cli::ValidateOptions validate;
  dlbench::cli::RunOptions run;
  dlbench::cli::ReportOptions report;
  dlbench::cli::CompareOptions compare;
  dlbench::cli::LaunchOptions launch;
  CLI::App app{"dlbench — deep-learning training benchmarks, the DLPerf methodology as a service", "dlbench"};
  dlbench::use_dlbench_help(app);
  app.set_help_flag("-h,--help", "print this and exit");
  bool version = false;
  app.add_flag("--version", version, "print dlbench's version");
  add_validate(app, validate);
  add_run(app, run);
  add_report(app, report);
  add_compare(app, compare);
  add_launch(app, launch);
  app.add_subcommand("help", "print this and exit");
  auto* version_command = app.add_subcommand("version", "print dlbench's version");
  app.footer(kSynopsis);  // after the subcommands: theirs is their own help
  if (args.empty()) return usage_error("no command given", app);
  const std::string& command = args.front();
  if (command == "help") {
    std::cout << app.help();
    return 0;
  }
  const auto subcommands = app.get_subcommands({});
  const bool known = std::any_of(subcommands.begin(), subcommands.end(), [&](const CLI::App* c) { return c->get_name() == command; });
  if (!command.starts_with("-") && !known) {
    return usage_error("unknown command \"" + printable(command) + "\"; commands: " + std::string(kCommands), app);
  }
  if (command == "launch") {  // everything after -- is the command, whatever it looks like
    const auto dashes = std::find(args.begin(), args.end(), "--");
    if (dashes != args.end()) launch.command.assign(dashes + 1, args.end());
    args.erase(dashes, args.end());
  }
  try {
    dlbench::parse_command_line(app, args);
  } catch (const CLI::CallForHelp&) {
    std::cout << (app.get_subcommands().empty() ? app.help() : app.get_subcommands().front()->help());
    return 0;
  } catch (const UsageError& e) {
    return usage_error(e.message, app.get_subcommands().empty() ? app : *app.get_subcommands().front());
  }
  if (version || version_command->parsed()) {
    std::cout << "dlbench " << dlbench::version() << '\n';
    return 0;
  }
  if (app.get_subcommands().empty()) return usage_error("no command given", app);
  const CLI::App& sub = *app.get_subcommands().front();
  if (sub.get_name() == "validate") {
    if (validate.files.empty()) return usage_error("validate needs -f FILE", sub);
    return dlbench::cli::run_validate(validate, std::cout, std::cerr);
  }
  if (sub.get_name() == "run") {
    if (run.file.empty()) return usage_error("run needs -f FILE", sub);
    return dlbench::cli::run_run(run, std::cout, std::cerr);
  }
  if (sub.get_name() == "report") {
    if (report.files.empty()) return usage_error("report needs at least one status file", sub);
    return dlbench::cli::run_report(report, std::cout, std::cerr);
  }
  if (sub.get_name() == "compare") {
    if (compare.baseline.empty()) {
      return usage_error("compare needs two status files (the baseline, then the candidate), or one of two runs", sub);
    }
    return dlbench::cli::run_compare(compare, std::cout, std::cerr);
  }
  if (launch.stop_at && launch.case_timeout_seconds == 0) {
    return usage_error("--stop-at needs --case-timeout: the limits.caseTimeoutSeconds a Timeout result names", sub);
  }
  return dlbench::cli::run_launch(launch, std::cout, std::cerr);
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
