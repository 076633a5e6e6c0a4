#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace dlbench::cli {

enum class OutputFormat { table, json, yaml };

struct ValidateOptions {
  std::vector<std::string> files;  // "-" reads standard input
  OutputFormat format = OutputFormat::table;
  bool quiet = false;  // only errors
};

// Exit codes: 0 every document valid, 1 some document invalid, 2 input unreadable (missing
// file, YAML syntax error, no document).
inline constexpr int kExitValid = 0;
inline constexpr int kExitInvalid = 1;
inline constexpr int kExitUnreadable = 2;

int run_validate(const ValidateOptions& options, std::ostream& out, std::ostream& err);

}  // namespace dlbench::cli
