// `dlbench report`: DLPerf-style tables from status files. For each precision: rows are batch
// sizes, columns are nodes×GPUs (of every file given, side by side); then the same grid for
// speed-up and for scaling efficiency; where a run trained on real data (imagefolder, cityscapes, bertpretraining), one more
// for the share of time steps waited for input and the input-bound or compute-bound verdict;
// where cases reported their loss, the loss after the last repeat; where the worker counted its
// FLOPs, the training TFLOP/s per device, and its share of the device's peak where known; with
// --relative, the later runs' throughput as multiples of the first's. Then every case without a
// measurement, with its reason and message.
#include "report_command.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <functional>
#include <iterator>
#include <limits>
#include <iomanip>
#include <map>
#include <optional>
#include <set>
#include <variant>
#include <sstream>

#include "dlbench/core/api_rules.hpp"
#include "dlbench/core/codec.hpp"
#include "dlbench/core/names.hpp"
#include "dlbench/core/resume.hpp"
#include "dlbench/core/statistics.hpp"
#include "dlbench/core/yaml.hpp"
#include "scaling_plot.hpp"
#include "status_sources.hpp"

namespace dlbench::cli {
namespace {

struct Column {
  std::size_t source;
  int nodes, gpus;
  bool operator<(const Column& o) const {
    return std::tie(source, nodes, gpus) < std::tie(o.source, o.nodes, o.gpus);
  }
};

// The results' own unit for precision p (sequences/s for a sequence model). Where no case of p
// was measured (every amp case Unsupported on a CPU): another measured case's, else the model's.
std::string throughput_unit_of(const std::vector<Source>& sources, Precision p) {
  std::optional<std::string> measured, other;
  for (const auto& s : sources) {
    for (const auto& r : s.status.results) {
      if (!r.throughput) continue;
      (r.case_.precision == p ? measured : other) = r.throughput->unit;
    }
  }
  if (measured) return *measured;
  if (other) return *other;
  for (const auto& s : sources) {
    if (s.model) return std::string(throughput_unit(*s.model));
  }
  return std::string(throughput_unit(Model::resnet50));
}

// Every case that has no measurement, with its reason and message: the "failed" and "skipped"
// cells of the grids say that, this says why. Not in csv, whose rows are the grids' cells.
void print_unmeasured(std::ostream& out, ReportFormat format, const std::vector<Source>& sources) {
  std::vector<std::pair<std::string, const CaseResult*>> unmeasured;
  for (const auto& s : sources) {
    for (const auto& r : s.status.results) {
      if (r.state != CaseState::Succeeded) {
        unmeasured.emplace_back((sources.size() > 1 ? s.label + " " : "") + case_id(r.case_), &r);
      }
    }
  }
  if (unmeasured.empty()) return;
  const auto attempts = [](const CaseResult& r) {
    return r.attempts > 1 ? " after " + std::to_string(r.attempts) + " attempts" : std::string();
  };
  if (format == ReportFormat::markdown) {
    out << "\n**cases not measured**\n\n| case | state | reason | message |\n|---|---|---|---|\n";
    for (const auto& [name, r] : unmeasured) {
      out << "| " << markdown_cell(name) << " | " << to_string(r->state) << attempts(*r) << " | "
          << markdown_cell(r->reason) << " | " << markdown_cell(r->message) << " |\n";
    }
    return;
  }
  out << "\ncases not measured\n";
  for (const auto& [name, r] : unmeasured) {
    out << "  " << name << ": " << to_string(r->state) << attempts(*r);
    if (!r->reason.empty()) out << ", " << r->reason;
    if (!r->message.empty()) {
      out << ": ";
      // A command's failure quotes its last lines: indented under the case.
      for (const char c : r->message) out << (c == '\n' ? std::string("\n      ") : std::string(1, c));
    }
    out << "\n";
  }
}

bool unstable(const CaseResult& r) { return r.stability && r.stability->verdict == StabilityVerdict::unstable; }

// Whether an amp case ran with fp16 emulated on the CPU (DLBENCH_CPU_FP16=emulated, its result's
// backendOptions.fp16): amp's numerics, at the CPU's fp32 speed between conversions, not fp16's.
bool fp16_emulated(const CaseResult& r) {
  if (r.case_.precision != Precision::amp || !r.environment) return false;
  const auto fp16 = r.environment->backend_options.find("fp16");
  return fp16 != r.environment->backend_options.end() && fp16->second == "emulated";
}

// Why an amp case's loss scaling says it trained little, or nothing where it trained well enough:
// more than 5% of its steps skipped for an inf or NaN gradient (a loss scaler's first few skips
// are how it finds its scale), or its scale halved below 1, where steps overflowed even unscaled.
// Where the worker traced an overflow, it follows on a line of its own.
std::optional<std::string> loss_scaling_warning(const CaseResult& r) {
  if (!r.loss_scaling || !loss_scaling_trained_little(*r.loss_scaling)) return std::nullopt;
  const LossScalingReport& l = *r.loss_scaling;
  std::ostringstream why;
  why << l.skipped_steps << " of " << l.steps << " steps skipped for an inf or NaN gradient, the scale ended at "
      << std::setprecision(3) << l.final_scale;
  if (l.final_scale < 1.0) why << " (below 1: steps overflowed even unscaled)";
  if (!l.overflow.empty()) why << "\n" << l.overflow;
  return why.str();
}

// Every case whose repeats did not agree (the "unstable" cells, and the figures), every case whose
// speed-up was refused (the "refused" cells, and why), every amp case whose loss scaling skipped
// much of its training (loss_scaling_warning), and every case measured while other load wanted
// its CPUs (results[].interference: its numbers stand, but they are not the machine's).
void print_case_warnings(std::ostream& out, ReportFormat format, const std::vector<Source>& sources) {
  std::vector<std::pair<std::string, std::string>> unstable_cases, refused, interfered, sockets, skipped, emulated;
  for (const auto& s : sources) {
    for (const auto& r : s.status.results) {
      const std::string name = (sources.size() > 1 ? s.label + " " : "") + case_id(r.case_);
      if (unstable(r)) unstable_cases.emplace_back(name, r.message);
      // Kept with rdma.required: false (a required one is Failed, listed with the cases not measured).
      if (r.state == CaseState::Succeeded && r.reason == kReasonRdmaNotUsed) sockets.emplace_back(name, r.message);
      if (!r.scaling_refused.empty()) refused.emplace_back(name, r.scaling_refused);
      if (const auto why = loss_scaling_warning(r)) skipped.emplace_back(name, *why);
      if (fp16_emulated(r) && r.throughput) {
        emulated.emplace_back(name, "DLBENCH_CPU_FP16=emulated: each fp16 op ran as the CPU's fp32 op between "
                                    "conversions, for a diagnosis of amp's numerics; its throughput is no fp16 figure");
      }
      if (!r.interference || r.interference->verdict == InterferenceVerdict::clean) continue;
      std::string why = std::string(to_string(r.interference->verdict)) + ": ";
      if (r.interference->cpu_pressure) why += "tasks waited for a CPU " + fixed(100 * *r.interference->cpu_pressure, 1) + "% of the time, ";
      why += "steal " + fixed(100 * r.interference->cpu_steal, 1) + "%";
      if (const auto& g = r.interference->gpu) {
        why += "; GPU: " + std::to_string(g->other_processes) + " other processes, SM clock median " +
               fixed(g->sm_clock_median_mhz, 0) + " of " + fixed(g->sm_clock_max_mhz, 0) + " MHz";
        for (const GpuThrottleReason reason : g->throttle_reasons) why += ", " + std::string(to_string(reason));
      }
      interfered.emplace_back(name, why);
    }
  }
  print_case_notes(out, format, "unstable cases (left out of best and scaling)", "spread", unstable_cases);
  print_case_notes(out, format, "speed-ups refused", "why", refused);
  print_case_notes(out, format, "amp cases whose loss scaling skipped much of the training", "loss scaling", skipped);
  print_case_notes(out, format, "amp cases with fp16 emulated on the CPU (their numerics, not fp16's speed)", "fp16",
                   emulated);
  print_case_notes(out, format, "measured under other load or throttled", "load", interfered);
  print_case_notes(out, format, "measured without the RDMA network asked for", "transport", sockets);
}

// Whether two cases' environments can be one machine's: no field that both state differs. A
// 1-rank case states no MPI, and the communicator follows from the case, not the machine.
bool one_machine(const CaseEnvironment& a, const CaseEnvironment& b) {
  for (const auto& [name, member] : case_environment_fields()) {
    if (member == &CaseEnvironment::communicator) continue;
    if (!(a.*member).empty() && !(b.*member).empty() && a.*member != b.*member) return false;
  }
  for (const auto& [key, value] : a.backend_options) {
    if (const auto it = b.backend_options.find(key); it != b.backend_options.end() && it->second != value) return false;
  }
  return true;
}

// `into` with what `from` states and it does not.
void fill_in(CaseEnvironment& into, const CaseEnvironment& from) {
  for (const auto& [name, member] : case_environment_fields()) {
    if ((into.*member).empty()) into.*member = from.*member;
  }
  into.backend_options.insert(from.backend_options.begin(), from.backend_options.end());
}

// What measured each run, so that runs side by side from different machines say which is which:
// its results' environments, one line where they can be one machine's, else one per machine
// naming its cases (a cluster can hold H100 and H200 nodes); where no result says (a status from
// before results carried it), dlbench run's annotation.
std::vector<std::pair<std::string, std::string>> measured_by_notes(const std::vector<Source>& sources) {
  std::vector<std::pair<std::string, std::string>> notes;
  for (const auto& s : sources) {
    std::vector<std::pair<CaseEnvironment, std::vector<std::string>>> machines;  // and their cases
    for (const auto& r : s.status.results) {
      if (!r.environment) continue;
      auto it = std::find_if(machines.begin(), machines.end(),
                             [&](const auto& m) { return one_machine(m.first, *r.environment); });
      if (it == machines.end()) it = machines.insert(machines.end(), {CaseEnvironment{}, {}});
      fill_in(it->first, *r.environment);
      it->second.push_back(case_id(r.case_));
    }
    if (machines.empty() && !s.measured_by.empty()) notes.emplace_back(s.label, s.measured_by);
    for (const auto& [environment, cases] : machines) {
      std::string label = s.label;
      if (machines.size() > 1) {
        label += " (";
        for (std::size_t i = 0; i < cases.size(); ++i) label += (i > 0 ? ", " : "") + cases[i];
        label += ")";
      }
      notes.emplace_back(label, printable(describe(environment), 400));
    }
  }
  return notes;
}

// One line per run × precision × batch; where a device count ran with several node splits (1x8
// and 2x4), the one with the fewest nodes.
std::vector<ScalingSeries> scaling_series(const std::vector<Source>& sources) {
  std::vector<ScalingSeries> series;
  for (const auto& s : sources) {
    std::map<std::pair<int, int>, std::map<int, const CaseResult*>> grouped;  // (precision, batch) → devices
    for (const auto& r : s.status.results) {
      if (r.state != CaseState::Succeeded) continue;
      auto& slot = grouped[{static_cast<int>(r.case_.precision), r.case_.batch_size_per_device}][r.case_.devices()];
      if (slot == nullptr || r.case_.nodes < slot->case_.nodes) slot = &r;
    }
    for (const auto& [key, by_devices] : grouped) {
      ScalingSeries line;
      line.label =
          s.label + " " + std::string(to_string(static_cast<Precision>(key.first))) + " bs" + std::to_string(key.second);
      for (const auto& [devices, r] : by_devices) {
        line.unit = r->throughput->unit;
        line.devices.push_back(devices);
        line.throughput.push_back(reported_value(r->throughput->summary, s.statistic));
        line.speedup.push_back(r->speedup ? *r->speedup : std::numeric_limits<double>::quiet_NaN());
      }
      series.push_back(std::move(line));
    }
  }
  return series;
}

// The tables a report prints for each precision: throughput, speed-up, efficiency, and where
// some case has them, input wait, the loss (whether the cases compared trained alike) with the
// learning rate each case trained at (the model's default differs with the global batch), the
// training arithmetic per device and its share of the device's peak, a GPU's energy per sample,
// and a multi-rank case's gradient reduction: the share of a step it added, and its bus bandwidth.
enum class Table { throughput, speedup, efficiency, input_wait, learning_rate, loss, flops, mfu, energy, exposed, bus };

// The result of a source's case of this precision, batch and nodes × GPUs, if it ran.
const CaseResult* find_result(const Source& s, Precision p, int batch, int nodes, int gpus) {
  for (const auto& r : s.status.results) {
    if (r.case_.precision == p && r.case_.batch_size_per_device == batch && r.case_.nodes == nodes &&
        r.case_.gpus_per_node == gpus) {
      return &r;
    }
  }
  return nullptr;
}

// --relative: the first run's case in the same cell as r, if it ran.
const CaseResult* baseline_of(const std::vector<Source>& sources, const CaseResult& r) {
  return find_result(sources.front(), r.case_.precision, r.case_.batch_size_per_device, r.case_.nodes,
                     r.case_.gpus_per_node);
}

// --relative: the case's reported throughput over its baseline's (the first run's case in the
// same cell), where both were measured in one unit.
std::optional<double> relative_throughput(const std::vector<Source>& sources, const Source& s, const CaseResult& r,
                                          const CaseResult* base) {
  if (r.state != CaseState::Succeeded || !r.throughput) return std::nullopt;
  if (base == nullptr || base->state != CaseState::Succeeded || !base->throughput ||
      base->throughput->unit != r.throughput->unit) {
    return std::nullopt;
  }
  const double reference = reported_value(base->throughput->summary, sources.front().statistic);
  if (!(reference > 0)) return std::nullopt;
  return reported_value(r.throughput->summary, s.statistic) / reference;
}

// A cell of the --relative table: "1.66x" ("unstable" where either figure is), "failed" or
// "skipped" as the run's own case, "-" where the first run has no figure to compare with.
std::string relative_cell(const std::vector<Source>& sources, ReportFormat format, Precision p, int batch,
                          const Column& c) {
  const CaseResult* r = find_result(sources[c.source], p, batch, c.nodes, c.gpus);
  if (r == nullptr) return "";
  if (r->state != CaseState::Succeeded) return r->state == CaseState::Skipped ? "skipped" : "failed";
  const CaseResult* base = baseline_of(sources, *r);
  const auto ratio = relative_throughput(sources, sources[c.source], *r, base);
  if (!ratio) return "-";
  if (format == ReportFormat::csv) return fixed(*ratio, 3);
  return fixed(*ratio, 2) + "x" + (unstable(*r) || unstable(*base) ? " unstable" : "");
}

// One cell of a table: the case of this batch and column, or "" where none ran.
std::string table_cell(const std::vector<Source>& sources, ReportFormat format, Precision p, int batch, const Column& c,
                       Table table) {
  if (const CaseResult* found = find_result(sources[c.source], p, batch, c.nodes, c.gpus)) {
    const CaseResult& r = *found;
    if (r.state != CaseState::Succeeded) return r.state == CaseState::Skipped ? "skipped" : "failed";
    switch (table) {
      case Table::throughput: {
        // csv keeps its cells numbers; the json format and the notes below carry the verdict.
        const bool mark = unstable(r) && format != ReportFormat::csv;
        return fixed(reported_value(r.throughput->summary, sources[c.source].statistic), 2) + (mark ? " unstable" : "");
      }
      case Table::speedup:
        if (!r.scaling_refused.empty()) return "refused";
        return r.speedup ? fixed(*r.speedup, 2) : "-";
      case Table::efficiency:
        if (!r.scaling_refused.empty()) return "refused";
        return r.scaling_efficiency ? fixed(100 * *r.scaling_efficiency, 1) + "%" : "-";
      case Table::input_wait:
        if (!r.input) return "synthetic";
        return fixed(100 * r.input->wait_share, 1) + "% " + std::string(to_string(r.input->verdict));
      case Table::learning_rate: {
        if (!r.optimizer) return "-";
        // csv keeps its cells numbers; the json format carries the warm-up in each result.
        const std::int64_t warmup = r.optimizer->learning_rate_warmup_steps;
        return format_learning_rate(r.optimizer->learning_rate) +
               (warmup > 0 && format != ReportFormat::csv ? ", warm-up " + std::to_string(warmup) : "");
      }
      case Table::loss:
        // Four significant digits: losses span 0.001 to 10.
        return r.loss_after_repeats.empty() ? "-" : significant(r.loss_after_repeats.back(), 4);
      case Table::flops:
        return r.flops ? significant(r.flops->per_second_per_device / 1e12, 4) : "-";
      case Table::mfu:
        return r.flops && r.flops->mfu ? fixed(100 * *r.flops->mfu, 1) + "%" : "-";
      case Table::energy:
        return r.energy ? significant(r.energy->joules_per_sample, 4) : "-";
      case Table::exposed:
        return r.communication ? fixed(100 * r.communication->exposed_share, 1) + "%" : "-";
      case Table::bus:
        return r.communication ? significant(r.communication->bus_bandwidth / 1e9, 4) : "-";
    }
  }
  return "";
}

// A precision's tables: one column per run and node × GPU split, one row per batch size; with
// `relative`, after the throughput, the later runs' columns as multiples of the first run's.
void print_precision_tables(std::ostream& out, ReportFormat format, const std::vector<Source>& sources, Precision p,
                            bool relative) {
  std::set<int> batches;
  std::set<Column> columns;
  std::vector<Table> tables{Table::throughput, Table::speedup, Table::efficiency};
  bool real_data = false, losses = false, rates = false, flops = false, mfu = false, energy = false, emulated = false;
  bool reduced = false;
  for (std::size_t i = 0; i < sources.size(); ++i) {
    for (const auto& r : sources[i].status.results) {
      if (r.case_.precision != p) continue;
      batches.insert(r.case_.batch_size_per_device);
      columns.insert({i, r.case_.nodes, r.case_.gpus_per_node});
      real_data = real_data || r.input;
      losses = losses || !r.loss_after_repeats.empty();
      rates = rates || r.optimizer;
      flops = flops || r.flops;
      mfu = mfu || (r.flops && r.flops->mfu);
      energy = energy || r.energy;
      reduced = reduced || r.communication;
      emulated = emulated || fp16_emulated(r);
    }
  }
  if (real_data) tables.push_back(Table::input_wait);
  if (losses && rates) tables.push_back(Table::learning_rate);
  if (losses) tables.push_back(Table::loss);
  if (flops) tables.push_back(Table::flops);
  if (mfu) tables.push_back(Table::mfu);
  if (energy) tables.push_back(Table::energy);
  if (reduced) {
    tables.push_back(Table::exposed);
    tables.push_back(Table::bus);
  }
  std::vector<Column> ordered(columns.begin(), columns.end());
  std::stable_sort(ordered.begin(), ordered.end(), [](const Column& a, const Column& b) {
    return std::make_tuple(a.source, a.nodes * a.gpus, a.nodes) < std::make_tuple(b.source, b.nodes * b.gpus, b.nodes);
  });
  const std::string throughput_title =
      "throughput (" + throughput_unit_of(sources, p) + ")" + (emulated ? ", fp16 emulated on the CPU: not fp16's speed" : "");
  const std::string titles[] = {throughput_title, "speed-up over 1x1", "scaling efficiency",
                                "time waiting for input, and the verdict", "learning rate it trained at",
                                "loss after the last repeat",
                                "training arithmetic per device (TFLOP/s)",
                                "model FLOPs utilisation (of the device's dense peak)",
                                "energy per sample, every device's (J)",
                                "share of a step its gradient reduction added",
                                "gradient allreduce alone, bus bandwidth (GB/s)"};
  const char* csv_titles[] = {"throughput", "speedup", "efficiency", "inputwait", "learningrate", "loss", "tflops", "mfu",
                              "joulespersample", "reductionshare", "busbandwidth"};
  const auto print_table = [&](const std::string& title, const std::string& csv_title, const std::vector<Column>& shown,
                               const std::function<std::string(int, const Column&)>& cell) {
    std::vector<std::string> header{"batch"};
    for (const auto& c : shown) {
      header.push_back((sources.size() > 1 ? sources[c.source].label + " " : "") + std::to_string(c.nodes) + "x" +
                       std::to_string(c.gpus));
    }
    std::vector<std::vector<std::string>> rows;
    for (const int b : batches) {
      if (format == ReportFormat::csv) {
        for (const auto& c : shown) {
          rows.push_back({std::string(to_string(p)), std::to_string(b), sources[c.source].label, std::to_string(c.nodes),
                          std::to_string(c.gpus), cell(b, c)});
        }
        continue;
      }
      std::vector<std::string> row{std::to_string(b)};
      for (const auto& c : shown) row.push_back(cell(b, c));
      rows.push_back(row);
    }
    print_grid(out, format, format == ReportFormat::csv ? csv_title : std::string(to_string(p)) + ": " + title, header,
               rows);
  };
  for (const Table table : tables) {
    const auto which = static_cast<std::size_t>(table);
    print_table(titles[which], csv_titles[which], ordered,
                [&](int b, const Column& c) { return table_cell(sources, format, p, b, c, table); });
    if (table != Table::throughput || !relative) continue;
    std::vector<Column> later;
    std::copy_if(ordered.begin(), ordered.end(), std::back_inserter(later), [](const Column& c) { return c.source > 0; });
    print_table("throughput relative to " + sources.front().label + " (the first run)", "relative", later,
                [&](int b, const Column& c) { return relative_cell(sources, format, p, b, c); });
  }
}

}  // namespace

int run_report(const ReportOptions& options, std::ostream& out, std::ostream& err) {
  std::vector<Source> sources;
  for (const auto& file : options.files) {
    auto loaded = load_sources(file, err);
    if (const int* exit_code = std::get_if<int>(&loaded)) return *exit_code;
    for (auto& s : std::get<std::vector<Source>>(loaded)) sources.push_back(std::move(s));
  }
  distinguish_labels(sources);
  if (options.relative) {
    if (sources.size() < 2) {
      err << "error: --relative needs two or more runs: the first is the one the others are compared with\n";
      return 2;
    }
    for (const Source& s : sources) {
      if (s.model && sources.front().model && *s.model != *sources.front().model) {
        err << "error: --relative compares runs of one model: " << sources.front().label << " trained "
            << to_string(*sources.front().model) << ", " << s.label << " " << to_string(*s.model) << "\n";
        return 2;
      }
    }
  }
  if (!options.plot.empty()) {
    std::ofstream plot(options.plot);
    plot << render_scaling_svg(scaling_series(sources));
    if (!plot) {
      err << "error: cannot write " << options.plot << "\n";
      return 2;
    }
  }
  if (options.format == ReportFormat::json) {
    nlohmann::json j = nlohmann::json::array();
    for (const auto& s : sources) {
      for (const auto& r : s.status.results) {
        nlohmann::json row = to_json(r);
        row["run"] = s.label;
        if (!s.measured_by.empty()) row["measuredBy"] = s.measured_by;
        if (options.relative && &s != &sources.front()) {
          if (const auto ratio = relative_throughput(sources, s, r, baseline_of(sources, r))) {
            row["relativeThroughput"] = *ratio;
          }
        }
        j.push_back(row);
      }
    }
    out << j.dump(2) << "\n";
    return 0;
  }
  if (options.format == ReportFormat::csv) out << "table,precision,batchSizePerDevice,run,nodes,gpusPerNode,value\n";
  std::set<Precision> precisions;
  for (const auto& s : sources) {
    for (const auto& r : s.status.results) precisions.insert(r.case_.precision);
  }
  for (const Precision p : precisions) print_precision_tables(out, options.format, sources, p, options.relative);
  if (options.format != ReportFormat::csv) {
    print_unmeasured(out, options.format, sources);
    print_case_warnings(out, options.format, sources);
    print_case_notes(out, options.format, "measured by", "software and hardware", measured_by_notes(sources),
                     "run");
  }
  return 0;
}

}  // namespace dlbench::cli
