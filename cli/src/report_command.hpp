#pragma once

#include <ostream>
#include <string>
#include <vector>

namespace dlbench::cli {

// junit: dlbench compare only, for CI systems that show JUnit XML (a case is a test).
enum class ReportFormat { table, markdown, csv, json, junit };

struct ReportOptions {
  std::vector<std::string> files;  // status files (a BenchmarkRun with status, or a bare status)
  ReportFormat format = ReportFormat::table;
  std::string plot;  // also write the scaling plot (SVG) here
  // Each later run's throughput as a multiple of the first run's in the same cell (batch,
  // nodes × GPUs): dlbench's engine against a framework's script, a driver before and after.
  bool relative = false;
};

int run_report(const ReportOptions& options, std::ostream& out, std::ostream& err);

}  // namespace dlbench::cli
