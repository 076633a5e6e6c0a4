#include "status_sources.hpp"

#include <iomanip>
#include <map>
#include <set>
#include <sstream>

#include "dlbench/core/codec.hpp"
#include "dlbench/core/names.hpp"
#include "dlbench/core/resume.hpp"
#include "dlbench/core/statistics.hpp"
#include "dlbench/core/yaml.hpp"

namespace dlbench::cli {

namespace {

// A Kubernetes object's kind, or empty where the document has none (a bare status).
std::string kind_of(const nlohmann::json& doc) {
  if (!doc.is_object() || !doc.contains("kind") || !doc.at("kind").is_string()) return "";
  return doc.at("kind").get<std::string>();
}

}  // namespace

std::variant<std::vector<Source>, int> load_sources(const std::string& file, std::ostream& err) {
  std::vector<nlohmann::json> docs;
  try {
    docs = load_yaml_file(file);
  } catch (const std::exception& e) {
    err << "error: " << e.what() << "\n";
    return 2;
  }
  if (docs.empty()) {
    err << "error: " << file << ": holds no document (expected a BenchmarkRun or a status written by dlbench run)\n";
    return 2;
  }
  // `kubectl get benchmarkruns -o json` (or yaml) without a name prints a List: its items are the runs.
  std::vector<nlohmann::json> runs;
  for (auto& doc : docs) {
    const std::string kind = kind_of(doc);
    if (!kind.ends_with("List") || !doc.contains("items")) {
      runs.push_back(std::move(doc));
      continue;
    }
    if (!doc.at("items").is_array()) {
      err << "error: " << file << ": items of a " << printable(kind) << " is not a list\n";
      return 1;
    }
    for (auto& item : doc.at("items")) runs.push_back(std::move(item));
  }
  if (runs.empty()) {
    err << "error: " << file << ": a list without items (no BenchmarkRun matched what kubectl was asked for?)\n";
    return 2;
  }
  std::vector<Source> sources;
  for (const auto& doc : runs) {
    Source s;
    s.file = file;
    // Another kind of object (a Pod, a Job) is named as such, not read as a status with odd fields.
    if (const std::string kind = kind_of(doc); !kind.empty() && kind != "BenchmarkRun") {
      err << "error: " << file << ": a " << printable(kind) << ", not a BenchmarkRun or a status written by dlbench run\n";
      return 1;
    }
    if (doc.is_object() && doc.contains("spec")) {
      const auto run = decode_benchmark_run(doc);
      if (!run.ok() || !run.value->status) {
        err << "error: " << file << ": " << (run.ok() ? "no status" : run.errors.front().to_string()) << "\n";
        return 1;
      }
      s.label = run.value->metadata.name;
      // Real and synthetic runs side by side: the label says which data each one trained on.
      if (run.value->spec.data.source != DataSource::synthetic) {
        s.label += " (" + std::string(to_string(run.value->spec.data.source)) + ")";
      }
      s.statistic = run.value->spec.methodology.statistic;
      s.include_unstable = run.value->spec.methodology.stability.include_unstable;
      s.status = *run.value->status;
      s.model = run.value->spec.model;
      s.spec = run.value->spec;
      if (const auto it = run.value->metadata.annotations.find(kMeasuredByAnnotation);
          it != run.value->metadata.annotations.end()) {
        s.measured_by = printable(it->second, 200);
      }
    } else {
      const auto status = decode_status(doc);
      if (!status.ok()) {
        err << "error: " << file << ": " << status.errors.front().to_string() << "\n";
        return 1;
      }
      s.label = file;
      s.status = *status.value;
    }
    apply_scaling(s.status.results, s.statistic, s.include_unstable);
    sources.push_back(std::move(s));
  }
  return sources;
}

void distinguish_labels(std::vector<Source>& sources) {
  std::map<std::string, int> count;
  std::map<std::string, std::set<std::string>> files;
  for (const Source& s : sources) {
    ++count[s.label];
    files[s.label].insert(s.file);
  }
  for (Source& s : sources) {
    if (count[s.label] > 1 && files[s.label].size() > 1) s.label += " in " + s.file;
  }
  count.clear();
  for (const Source& s : sources) ++count[s.label];
  std::map<std::string, int> seen;
  for (Source& s : sources) {
    const std::string label = s.label;
    if (count[label] > 1) s.label += " #" + std::to_string(++seen[label]);
  }
}

std::string fixed(double v, int digits) {
  std::ostringstream s;
  s << std::fixed << std::setprecision(digits) << v;
  return s.str();
}

std::string significant(double v, int digits) {
  std::ostringstream s;
  s << std::setprecision(digits) << v;
  return s.str();
}

void print_grid(std::ostream& out, ReportFormat format, const std::string& title, const std::vector<std::string>& header,
                const std::vector<std::vector<std::string>>& rows) {
  if (format == ReportFormat::csv) {
    for (const auto& row : rows) {
      out << title;
      for (const auto& cell : row) out << "," << cell;
      out << "\n";
    }
    return;
  }
  if (format == ReportFormat::markdown) {
    out << "\n**" << title << "**\n\n|";
    for (const auto& h : header) out << " " << h << " |";
    out << "\n|";
    for (std::size_t i = 0; i < header.size(); ++i) out << "---|";
    out << "\n";
    for (const auto& row : rows) {
      out << "|";
      for (const auto& cell : row) out << " " << cell << " |";
      out << "\n";
    }
    return;
  }
  std::vector<std::size_t> width(header.size());
  for (std::size_t i = 0; i < header.size(); ++i) {
    width[i] = header[i].size();
    for (const auto& row : rows) width[i] = std::max(width[i], row[i].size());
  }
  out << "\n" << title << "\n";
  const auto line = [&](const std::vector<std::string>& cells) {
    for (std::size_t i = 0; i < cells.size(); ++i) out << "  " << std::setw(static_cast<int>(width[i])) << cells[i];
    out << "\n";
  };
  line(header);
  for (const auto& row : rows) line(row);
}

std::string xml_escape(const std::string& text) {
  std::string out;
  for (const char c : text) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&apos;"; break;
      default: out += (static_cast<unsigned char>(c) < 0x20 && c != '\n' && c != '\t') ? ' ' : c;
    }
  }
  return out;
}

std::string markdown_cell(const std::string& text) {
  std::string escaped;
  for (const char c : text) {
    if (c == '|') {
      escaped += "\\|";
    } else {
      escaped += (c == '\n' || c == '\r') ? ' ' : c;
    }
  }
  return escaped;
}

void print_case_notes(std::ostream& out, ReportFormat format, const std::string& title, const std::string& column,
                      const std::vector<std::pair<std::string, std::string>>& notes, const std::string& first) {
  if (notes.empty()) return;
  if (format == ReportFormat::markdown) {
    out << "\n**" << title << "**\n\n| " << first << " | " << column << " |\n|---|---|\n";
    for (const auto& [name, note] : notes) out << "| " << markdown_cell(name) << " | " << markdown_cell(note) << " |\n";
    return;
  }
  out << "\n" << title << "\n";
  for (const auto& [name, note] : notes) {
    out << "  " << name << ": ";
    for (const char c : note) out << c << (c == '\n' ? "    " : "");  // a note's further lines indented under it
    out << "\n";
  }
}

}  // namespace dlbench::cli
