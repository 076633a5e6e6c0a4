// What `dlbench report` and `dlbench compare` share: status files read as runs, and the few ways
// they print a table, a list of notes or escaped text.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "dlbench/core/benchmark_run.hpp"
#include "report_command.hpp"

namespace dlbench::cli {

// One run read from a status file.
struct Source {
  std::string label;  // the run's name, unique among the sources (distinguish_labels)
  std::string file;   // as given on the command line
  Statistic statistic = Statistic::median;
  bool include_unstable = false;  // methodology.stability.includeUnstable of a whole run
  BenchmarkRunStatus status;
  std::optional<Model> model;             // where the file holds the whole BenchmarkRun
  std::optional<BenchmarkRunSpec> spec;   // likewise
  std::string measured_by;     // dlbench run's record of what measured it (kMeasuredByAnnotation)
};

// A file's documents as sources, scaled as the status would be; or the exit code when the file
// cannot be used (2 unreadable or empty, 1 invalid), having said why on `err`.
std::variant<std::vector<Source>, int> load_sources(const std::string& file, std::ostream& err);

// Runs of one name side by side (the same spec measured before and after a driver update, kept
// in two files) would give columns no one can tell apart: a clashing label says its file where
// the files differ ("quick in before.json"), and an index where even that repeats ("#2").
void distinguish_labels(std::vector<Source>& sources);

std::string fixed(double v, int digits);
std::string significant(double v, int digits);  // "0.0712" at 3

// A titled table: aligned columns (table), a markdown table, or one csv line per row led by the title.
void print_grid(std::ostream& out, ReportFormat format, const std::string& title, const std::vector<std::string>& header,
                const std::vector<std::vector<std::string>>& rows);

// Text for an XML attribute or element (compare's JUnit, report's SVG plot): the five markup
// characters as entities, and control characters XML 1.0 cannot hold as a space.
std::string xml_escape(const std::string& text);

// Text as one markdown table cell: pipes escaped, lines joined.
std::string markdown_cell(const std::string& text);

// A note for some cases, one per case (or runs, with `first` "run"): a markdown table (`column`:
// what the note is) or a list.
void print_case_notes(std::ostream& out, ReportFormat format, const std::string& title, const std::string& column,
                      const std::vector<std::pair<std::string, std::string>>& notes, const std::string& first = "case");

}  // namespace dlbench::cli
