// dlbench: the command-line front end of the dlbench benchmark.
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "validate_command.hpp"

namespace {

constexpr std::string_view kUsage = R"(dlbench — deep-learning training benchmarks, the DLPerf methodology as a service

Usage:
  dlbench validate -f FILE [-f FILE ...] [-o table|json|yaml] [-q]
      Check BenchmarkRun documents (YAML or JSON, several per file, "-" for stdin).
      Prints the planned cases of each valid run, or every error with its field path.
      Exit code: 0 valid, 1 invalid, 2 unreadable input or bad usage.
  dlbench version
  dlbench help
)";

int usage_error(const std::string& message) {
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
      return usage_error("validate: unknown argument \"" + arg + "\"");
    }
  }
  if (options.files.empty()) return usage_error("validate needs -f FILE");
  return dlbench::cli::run_validate(options, std::cout, std::cerr);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty()) return usage_error("no command given");
  const std::string command = args.front();
  args.erase(args.begin());
  if (command == "validate") return validate_main(args);
  if (command == "version" || command == "--version") {
    std::cout << "dlbench " << DLBENCH_VERSION << '\n';
    return 0;
  }
  if (command == "help" || command == "-h" || command == "--help") {
    std::cout << kUsage;
    return 0;
  }
  return usage_error("unknown command \"" + command + "\"; commands: validate, version, help");
}
