#include "case_table.hpp"

#include <algorithm>
#include <string>
#include <vector>

#include "dlbench/core/api_rules.hpp"

namespace dlbench::cli {

void print_case_table(std::ostream& out, const BenchmarkRunSpec& spec, const std::vector<PlannedCase>& cases) {
  const std::vector<std::string> header{"#", "CASE", "NODES", "GPUS/NODE", "DEVICES", "BATCH/DEVICE", "GLOBAL BATCH",
                                        "PRECISION", "LEARNING RATE", "NOTE"};
  std::vector<std::vector<std::string>> rows;
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const PlannedCase& c = cases[i];
    const std::string note = c.added_as_baseline ? "baseline (added)" : (c.baseline ? "baseline" : "");
    rows.push_back({std::to_string(i + 1), c.id, std::to_string(c.spec.nodes), std::to_string(c.spec.gpus_per_node),
                    std::to_string(c.spec.devices()), std::to_string(c.spec.batch_size_per_device),
                    std::to_string(c.spec.global_batch_size()), std::string(to_string(c.spec.precision)),
                    format_learning_rate(optimizer_for_case(spec, c.spec).learning_rate), note});
  }
  std::vector<std::size_t> widths(header.size());
  for (std::size_t col = 0; col < header.size(); ++col) {
    widths[col] = header[col].size();
    for (const auto& row : rows) widths[col] = std::max(widths[col], row[col].size());
  }
  const auto print_row = [&](const std::vector<std::string>& row) {
    std::string line = " ";
    for (std::size_t col = 0; col < row.size(); ++col) {
      line += " " + row[col];
      if (col + 1 < row.size()) line += std::string(widths[col] - row[col].size() + 1, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out << line << '\n';
  };
  print_row(header);
  for (const auto& row : rows) print_row(row);
}

}  // namespace dlbench::cli
