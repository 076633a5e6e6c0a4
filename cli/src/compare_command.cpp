// `dlbench compare`: two runs of one model, case by case. A change counts only when it is both
// large enough to matter (the threshold) and more than the repeats' own noise (a two-sided
// Mann–Whitney U test at alpha over the two cases' repeats): repeats are few and skewed, so the
// test assumes no distribution, and where the repeats are too few for any outcome to reach alpha,
// the case is inconclusive rather than unchanged. Cases measured under other load, or whose
// repeats spread beyond their bound, are not judged. Then what differs between the two runs'
// specs and what measured them, which is where a regression's cause is usually found.
#include "compare_command.hpp"

#include <algorithm>
#include <cmath>
#include <iomanip>
#include <map>
#include <optional>
#include <sstream>
#include <tuple>
#include <utility>
#include <variant>
#include <vector>

#include "dlbench/core/codec.hpp"
#include "dlbench/core/names.hpp"
#include "dlbench/core/statistics.hpp"
#include "status_sources.hpp"

namespace dlbench::cli {
namespace {

enum class Verdict { slower, faster, no_change, within_noise, inconclusive, unstable, disturbed, failed_now, missing, added, not_measured };

struct VerdictName {
  const char* text;  // table and markdown
  const char* json;
};
VerdictName name_of(Verdict v) {
  switch (v) {
    case Verdict::slower: return {"slower", "slower"};
    case Verdict::faster: return {"faster", "faster"};
    case Verdict::no_change: return {"no change", "noChange"};
    case Verdict::within_noise: return {"within noise", "withinNoise"};
    case Verdict::inconclusive: return {"inconclusive", "inconclusive"};
    case Verdict::unstable: return {"unstable", "unstable"};
    case Verdict::disturbed: return {"disturbed", "disturbed"};
    case Verdict::failed_now: return {"failed now", "failedNow"};
    case Verdict::missing: return {"missing", "missing"};
    case Verdict::added: return {"new", "new"};
    case Verdict::not_measured: return {"not measured", "notMeasured"};
  }
  return {"?", "?"};
}

// A regression: the gate fails.
bool regressed(Verdict v) { return v == Verdict::slower || v == Verdict::failed_now; }
// A baseline measurement that could not be judged: the gate fails under --strict.
bool not_judged(Verdict v) {
  return v == Verdict::inconclusive || v == Verdict::unstable || v == Verdict::disturbed || v == Verdict::missing;
}
bool fails_gate(Verdict v, bool strict) { return regressed(v) || (strict && not_judged(v)); }

struct Row {
  std::string case_id;
  const CaseResult* before = nullptr;
  const CaseResult* after = nullptr;
  std::optional<double> before_value, after_value;
  std::optional<double> change;  // after / before - 1
  std::optional<RankTest> test;
  Verdict verdict = Verdict::not_measured;
  std::string why;
};

bool measured(const CaseResult* r) { return r != nullptr && r->state == CaseState::Succeeded && r->throughput; }

std::string percent(double share) {
  std::ostringstream s;
  s << (share >= 0 ? "+" : "") << std::fixed << std::setprecision(1) << 100 * share << "%";
  return s.str();
}

std::string p_text(double p) {
  std::ostringstream s;
  s << std::setprecision(2) << p;
  return s.str();
}

// The fewest repeats on each side for which the test can reach alpha at all.
int repeats_needed(double alpha) {
  int n = 1;
  while (n < 1000 && least_p_value(static_cast<std::size_t>(n), static_cast<std::size_t>(n)) >= alpha) ++n;
  return n;
}

// Why a side's figure is not the machine's, or empty.
std::string disturbance(const CaseResult& r, const char* side) {
  if (r.stability && r.stability->verdict == StabilityVerdict::unstable) {
    return std::string(side) + "'s repeats spread (cv " + fixed(100 * r.stability->cv, 1) + "% above its bound " +
           fixed(100 * r.stability->max_cv, 1) + "%)";
  }
  if (r.interference && r.interference->verdict != InterferenceVerdict::clean) {
    std::string why = std::string(side) + " was measured " + std::string(to_string(r.interference->verdict));
    if (r.interference->cpu_pressure) {
      why += " (tasks waited for a CPU " + fixed(100 * *r.interference->cpu_pressure, 1) + "% of the time)";
    }
    return why;
  }
  return "";
}

std::string state_text(const CaseResult& r) {
  std::string text = std::string(to_string(r.state));
  if (!r.reason.empty()) text += ", " + r.reason;
  if (!r.message.empty()) text += ": " + printable(r.message, 160);
  return text;
}

void judge(Row& row, const CompareOptions& o, const Source& baseline, const Source& candidate) {
  const CaseResult* b = row.before;
  const CaseResult* a = row.after;
  if (b == nullptr) {
    row.verdict = Verdict::added;
    row.why = "not in the baseline run";
    if (measured(a)) row.after_value = reported_value(a->throughput->summary, candidate.statistic);
    return;
  }
  if (measured(b)) row.before_value = reported_value(b->throughput->summary, baseline.statistic);
  if (a == nullptr) {
    row.verdict = measured(b) ? Verdict::missing : Verdict::not_measured;
    row.why = "not in the candidate run";
    return;
  }
  if (measured(a)) row.after_value = reported_value(a->throughput->summary, candidate.statistic);
  if (!measured(b) && !measured(a)) {
    row.verdict = Verdict::not_measured;
    row.why = "before: " + state_text(*b) + "; after: " + state_text(*a);
    return;
  }
  if (!measured(a)) {
    // Skipped (a smaller cluster, a preflight that failed) was not measured; Failed ran and failed.
    row.verdict = a->state == CaseState::Skipped ? Verdict::missing : Verdict::failed_now;
    row.why = "measured before, now " + state_text(*a);
    return;
  }
  if (!measured(b)) {
    row.verdict = Verdict::added;
    row.why = "measured now, before " + state_text(*b);
    return;
  }
  if (b->throughput->unit != a->throughput->unit) {
    row.verdict = Verdict::inconclusive;
    row.why = "before in " + b->throughput->unit + ", after in " + a->throughput->unit + ": not one measure";
    return;
  }
  row.change = *row.after_value / *row.before_value - 1.0;
  const auto& before_repeats = b->throughput->repeats;
  const auto& after_repeats = a->throughput->repeats;
  if (!before_repeats.empty() && !after_repeats.empty()) row.test = mann_whitney(after_repeats, before_repeats);
  std::string disturbed;  // both sides' reasons, where both have one
  for (const auto& [r, side] : {std::pair{b, "before"}, std::pair{a, "after"}}) {
    if (const std::string why = disturbance(*r, side); !why.empty()) {
      disturbed += (disturbed.empty() ? "" : "; ") + why;
      if (r->stability && r->stability->verdict == StabilityVerdict::unstable) row.verdict = Verdict::unstable;
      if (row.verdict != Verdict::unstable) row.verdict = Verdict::disturbed;
    }
  }
  if (!disturbed.empty()) {
    row.why = disturbed + ": measure it again";
    return;
  }
  const double least = least_p_value(after_repeats.size(), before_repeats.size());
  if (!row.test || least >= o.alpha) {
    row.verdict = Verdict::inconclusive;
    row.why = std::to_string(before_repeats.size()) + " and " + std::to_string(after_repeats.size()) +
              " repeats cannot show a difference at p < " + p_text(o.alpha) + " (the least p-value they allow is " +
              p_text(least) + "): measure " + std::to_string(repeats_needed(o.alpha)) + " or more on each side";
    return;
  }
  const double p = row.test->p_value;
  // "10% or more" counts 900 against 1000, whose ratio rounds to just under 0.1.
  if (std::abs(*row.change) < o.threshold - 1e-12) {
    row.verdict = Verdict::no_change;
    row.why = percent(*row.change) + " is under the threshold of " + fixed(100 * o.threshold, 1) + "%";
    if (p < o.alpha) row.why += ", though the repeats show it (p " + p_text(p) + ")";
    return;
  }
  if (p >= o.alpha) {
    row.verdict = Verdict::within_noise;
    row.why = percent(*row.change) + ", but the repeats overlap too much to show it (p " + p_text(p) + " >= " +
              p_text(o.alpha) + ")";
    return;
  }
  row.verdict = *row.change < 0 ? Verdict::slower : Verdict::faster;
  row.why = percent(*row.change) + " (p " + p_text(p) + ")";
}

// Where both sides trained the same steps with the same optimizer, a loss after the last repeat
// that differs by more than a factor of 2 and by more than 0.1 says the two did not train alike
// (a numerics change: a library, a kernel), whatever their speed. Losses near zero differ by
// large factors between GPU runs' non-deterministic sums; the 0.1 keeps those out.
void note_training(Row& row, const Source& baseline, const Source& candidate) {
  if (!measured(row.before) || !measured(row.after)) return;
  const auto& b = row.before->loss_after_repeats;
  const auto& a = row.after->loss_after_repeats;
  if (b.empty() || b.size() != a.size() || row.before->optimizer != row.after->optimizer) return;
  if (baseline.spec && candidate.spec &&
      (baseline.spec->methodology.warmup_steps != candidate.spec->methodology.warmup_steps ||
       baseline.spec->methodology.measure_steps != candidate.spec->methodology.measure_steps)) {
    return;
  }
  const double before = b.back(), after = a.back();
  const double larger = std::max(before, after), smaller = std::min(before, after);
  if (larger - smaller > 0.1 && (smaller <= 0 || larger / smaller > 2)) {
    row.why += "; the loss after the last repeat was " + p_text(before) + " before and " + p_text(after) +
               " after, with the same optimizer and steps: the two did not train alike";
  }
}

// Where both sides measured a GPU case's energy, its joules per sample before and after: a build
// can trade power for speed, and a throughput verdict alone does not say so. Not judged: the
// status keeps one figure a side, not each repeat's.
void note_energy(Row& row) {
  if (!measured(row.before) || !measured(row.after) || !row.before->energy || !row.after->energy) return;
  const double before = row.before->energy->joules_per_sample, after = row.after->energy->joules_per_sample;
  row.why += "; energy " + significant(before, 3) + " J a sample before and " + significant(after, 3) + " after (" +
             percent(after / before - 1) + ")";
}

// Where both sides timed a multi-rank case's gradient reduction: the share of a step it added and
// its bus bandwidth, before and after, so that a slower case whose interconnect (a driver, NCCL, a
// cluster's network) is the cause says so. Not judged: a few steps a side, not the repeats.
void note_communication(Row& row) {
  if (!measured(row.before) || !measured(row.after) || !row.before->communication || !row.after->communication) return;
  const CommunicationReport& before = *row.before->communication;
  const CommunicationReport& after = *row.after->communication;
  row.why += "; gradient reduction " + fixed(100 * before.exposed_share, 1) + "% of a step before and " +
             fixed(100 * after.exposed_share, 1) + "% after, bus bandwidth " + significant(before.bus_bandwidth / 1e9, 3) +
             " GB/s before and " + significant(after.bus_bandwidth / 1e9, 3) + " after (" +
             percent(after.bus_bandwidth / before.bus_bandwidth - 1) + ")";
}

// Leaf values of a JSON document by path ("spec.worker.image"); arrays are leaves.
void flatten(const nlohmann::json& j, const std::string& path, std::map<std::string, std::string>& leaves) {
  if (j.is_object()) {
    for (const auto& [key, value] : j.items()) flatten(value, path + "." + key, leaves);
    return;
  }
  leaves[path] = j.is_string() ? j.get<std::string>() : j.dump();
}

struct Difference {
  std::string field;
  std::string before, after;  // empty: not set, or not said
  std::vector<std::string> cases;  // for what measured the cases; empty for the spec
};

// What differs in the two specs, the matrix and explicit cases aside (the table shows which cases
// each ran), defaults applied (a default written out is no difference).
std::vector<Difference> spec_differences(const Source& baseline, const Source& candidate) {
  std::vector<Difference> out;
  if (!baseline.spec || !candidate.spec) return out;
  std::map<std::string, std::string> before, after;
  for (auto [spec, leaves] : {std::pair{&*baseline.spec, &before}, std::pair{&*candidate.spec, &after}}) {
    nlohmann::json j = to_json(*spec);
    j.erase("matrix");
    j.erase("cases");
    flatten(j, "spec", *leaves);
  }
  std::map<std::string, std::pair<std::string, std::string>> merged;
  for (const auto& [path, value] : before) merged[path].first = value;
  for (const auto& [path, value] : after) merged[path].second = value;
  for (const auto& [path, values] : merged) {
    if (values.first != values.second) out.push_back({path, values.first, values.second, {}});
  }
  return out;
}

// What measured the cases both runs measured, field by field, where it differs: the GPU, the
// driver, a library, an option. Each difference names its cases (or says every case).
std::vector<Difference> environment_differences(const std::vector<Row>& rows) {
  std::map<std::tuple<std::string, std::string, std::string>, std::vector<std::string>> grouped;
  std::vector<std::tuple<std::string, std::string, std::string>> order;
  const auto note = [&](const std::string& field, const std::string& b, const std::string& a, const std::string& id) {
    if (b == a) return;
    const auto key = std::make_tuple(field, b, a);
    if (!grouped.contains(key)) order.push_back(key);
    grouped[key].push_back(id);
  };
  for (const Row& row : rows) {
    if (row.before == nullptr || row.after == nullptr || !row.before->environment || !row.after->environment) continue;
    const CaseEnvironment& b = *row.before->environment;
    const CaseEnvironment& a = *row.after->environment;
    for (const auto& [name, member] : case_environment_fields()) note(name, b.*member, a.*member, row.case_id);
    std::map<std::string, std::pair<std::string, std::string>> options;
    for (const auto& [key, value] : b.backend_options) options[key].first = value;
    for (const auto& [key, value] : a.backend_options) options[key].second = value;
    for (const auto& [key, values] : options) note("backendOptions." + key, values.first, values.second, row.case_id);
  }
  std::vector<Difference> out;
  for (const auto& key : order) out.push_back({std::get<0>(key), std::get<1>(key), std::get<2>(key), grouped[key]});
  return out;
}

std::string shown(const std::string& value) { return value.empty() ? "(not set)" : printable(value, 120); }

// Two runs judged case by case, and what differs between them: what every format prints.
struct Comparison {
  Comparison(const CompareOptions& o, const Source& b, const Source& a) : options(o), baseline(b), candidate(a) {}
  const CompareOptions& options;
  const Source& baseline;
  const Source& candidate;
  std::vector<Row> rows;  // the baseline's cases in its order, then the candidate's new ones
  std::map<Verdict, int> counts;
  std::vector<std::string> failing;  // "CASE VERDICT" of each case the gate fails on
  int passed_unjudged = 0;           // cases not judged that the gate lets pass (none with --strict)
  int exit_code = 0;
  std::vector<Difference> differences;  // in the specs
  std::vector<Difference> measured_by;  // in the results' environments
  std::size_t compared = 0;             // cases both runs have an environment for
  std::string unit = "samples/s";
  std::string statistic;  // the baseline's
};

Comparison compare_runs(const CompareOptions& o, const Source& baseline, const Source& candidate) {
  Comparison c{o, baseline, candidate};
  std::vector<Row>& rows = c.rows;
  std::map<std::string, std::size_t> index;
  for (const auto& r : baseline.status.results) {
    const std::string id = case_id(r.case_);
    if (index.contains(id)) continue;  // a status holds a case once; the first if not
    index[id] = rows.size();
    Row row;
    row.case_id = id;
    row.before = &r;
    rows.push_back(std::move(row));
  }
  for (const auto& r : candidate.status.results) {
    const std::string id = case_id(r.case_);
    const auto it = index.find(id);
    if (it == index.end()) {
      index[id] = rows.size();
      Row row;
      row.case_id = id;
      row.after = &r;
      rows.push_back(std::move(row));
    } else if (rows[it->second].after == nullptr) {
      rows[it->second].after = &r;
    }
  }
  for (Row& row : rows) {
    judge(row, o, baseline, candidate);
    note_training(row, baseline, candidate);
    note_energy(row);
    note_communication(row);
    ++c.counts[row.verdict];
    if (fails_gate(row.verdict, o.strict)) {
      c.failing.push_back(row.case_id + " " + name_of(row.verdict).text);
    } else if (not_judged(row.verdict)) {
      ++c.passed_unjudged;
    }
    if (row.before && row.after && row.before->environment && row.after->environment) ++c.compared;
    for (const CaseResult* r : {row.before, row.after}) {
      if (measured(r)) c.unit = r->throughput->unit;
    }
  }
  c.exit_code = c.failing.empty() ? 0 : 1;
  c.differences = spec_differences(baseline, candidate);
  c.measured_by = environment_differences(rows);
  c.statistic = std::string(to_string(baseline.statistic));
  return c;
}

// Every case with both sides' states, figures and repeats, the test, the differences and the exit code.
void print_json(const Comparison& c, std::ostream& out) {
  nlohmann::json j;
  const auto side = [](const Source& s) {
    nlohmann::json run{{"run", s.label}, {"file", s.file}, {"statistic", to_string(s.statistic)}};
    if (s.model) run["model"] = to_string(*s.model);
    return run;
  };
  j["baseline"] = side(c.baseline);
  j["candidate"] = side(c.candidate);
  j["threshold"] = c.options.threshold;
  j["alpha"] = c.options.alpha;
  j["strict"] = c.options.strict;
  j["unit"] = c.unit;
  j["cases"] = nlohmann::json::array();
  for (const Row& row : c.rows) {
    nlohmann::json entry{{"case", row.case_id}, {"verdict", name_of(row.verdict).json}, {"why", row.why}};
    for (const auto& [r, value, key] : {std::tuple{row.before, row.before_value, "before"},
                                        std::tuple{row.after, row.after_value, "after"}}) {
      if (r == nullptr) continue;
      nlohmann::json s{{"state", to_string(r->state)}};
      if (!r->reason.empty()) s["reason"] = r->reason;
      if (value) s["throughput"] = *value;
      if (r->throughput) s["repeats"] = r->throughput->repeats;
      if (!r->loss_after_repeats.empty()) s["lossAfterLastRepeat"] = r->loss_after_repeats.back();
      if (r->energy) s["joulesPerSample"] = r->energy->joules_per_sample;
      entry[key] = s;
    }
    if (row.change) entry["change"] = *row.change;
    if (row.test) {
      entry["pValue"] = row.test->p_value;
      entry["u"] = row.test->u;
      entry["exactTest"] = row.test->exact;
    }
    j["cases"].push_back(entry);
  }
  j["differences"] = nlohmann::json::array();
  for (const auto& d : c.differences) j["differences"].push_back({{"field", d.field}, {"before", d.before}, {"after", d.after}});
  for (const auto& d : c.measured_by) {
    j["differences"].push_back(
        {{"field", "environment." + d.field}, {"before", d.before}, {"after", d.after}, {"cases", d.cases}});
  }
  nlohmann::json summary = nlohmann::json::object();
  for (const auto& [verdict, count] : c.counts) summary[name_of(verdict).json] = count;
  j["summary"] = summary;
  j["exitCode"] = c.exit_code;
  out << j.dump(2) << "\n";
}

// JUnit XML: one test case a case, a failure where the gate fails on it, skipped where it was not
// judged, what differs as the suite's properties.
void print_junit(const Comparison& c, std::ostream& out) {
  const CompareOptions& o = c.options;
  const Source& baseline = c.baseline;
  const std::string suite = (baseline.model ? std::string(to_string(*baseline.model)) + ": " : std::string()) +
                            baseline.label + " (" + baseline.file + ") against " + c.candidate.label + " (" +
                            c.candidate.file + ")";
  const std::string counts_attributes = " tests=\"" + std::to_string(c.rows.size()) + "\" failures=\"" +
                                        std::to_string(c.failing.size()) + "\" errors=\"0\" skipped=\"" +
                                        std::to_string(c.passed_unjudged) + "\"";
  out << "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<testsuites name=\"dlbench compare\"" << counts_attributes
      << ">\n  <testsuite name=\"" << xml_escape(suite) << "\"" << counts_attributes << ">\n";
  // What differs between the runs, as the suite's properties: where a regression's cause is.
  if (!c.differences.empty() || !c.measured_by.empty()) {
    out << "    <properties>\n";
    for (const auto& d : c.differences) {
      out << "      <property name=\"" << xml_escape(d.field) << "\" value=\""
          << xml_escape(shown(d.before) + " -> " + shown(d.after)) << "\"/>\n";
    }
    for (const auto& d : c.measured_by) {
      out << "      <property name=\"environment." << xml_escape(d.field) << "\" value=\""
          << xml_escape(shown(d.before) + " -> " + shown(d.after)) << "\"/>\n";
    }
    out << "    </properties>\n";
  }
  for (const Row& row : c.rows) {
    const std::string verdict = name_of(row.verdict).text;
    const std::string why = xml_escape(verdict + ": " + row.why);
    out << "    <testcase classname=\"dlbench.compare"
        << (baseline.model ? "." + std::string(to_string(*baseline.model)) : std::string()) << "\" name=\""
        << xml_escape(row.case_id) << "\" time=\"0\">";
    if (fails_gate(row.verdict, o.strict)) {
      out << "<failure type=\"" << xml_escape(verdict) << "\" message=\"" << why << "\"/>";
    } else if (not_judged(row.verdict)) {
      out << "<skipped message=\"" << why << "\"/>";
    } else {
      out << "<system-out>" << why << "</system-out>";
    }
    out << "</testcase>\n";
  }
  out << "  </testsuite>\n</testsuites>\n";
}

// One row a case.
void print_csv(const Comparison& c, std::ostream& out) {
  out << "case,before,after,change,pValue,verdict,why\n";
  for (const Row& row : c.rows) {
    std::string why = row.why;
    std::replace(why.begin(), why.end(), '"', '\'');
    out << row.case_id << "," << (row.before_value ? fixed(*row.before_value, 4) : "") << ","
        << (row.after_value ? fixed(*row.after_value, 4) : "") << "," << (row.change ? fixed(*row.change, 6) : "")
        << "," << (row.test ? p_text(row.test->p_value) : "") << "," << name_of(row.verdict).json << ",\"" << why
        << "\"\n";
  }
}

// The table (or markdown): the cases, each verdict's why, what differs, and the tally.
void print_table(const Comparison& c, std::ostream& out) {
  const CompareOptions& o = c.options;
  const Source& baseline = c.baseline;
  const Source& candidate = c.candidate;
  const bool markdown = o.format == ReportFormat::markdown;
  out << (markdown ? "**" : "") << "compare" << (baseline.model ? " " + std::string(to_string(*baseline.model)) : "")
      << ": " << baseline.label << " (" << baseline.file << ", the baseline) against " << candidate.label << " ("
      << candidate.file << ")" << (markdown ? "**\n" : "\n");
  out << (markdown ? "\n" : "  ") << "Slower or faster: a change of the " << c.statistic << " by " << fixed(100 * o.threshold, 1)
      << "% or more that the repeats show at p < " << p_text(o.alpha)
      << " (two-sided Mann-Whitney U test over each case's repeats).\n";
  std::vector<std::vector<std::string>> cells;
  for (const Row& row : c.rows) {
    cells.push_back({row.case_id, row.before_value ? fixed(*row.before_value, 2) : "-",
                     row.after_value ? fixed(*row.after_value, 2) : "-", row.change ? percent(*row.change) : "-",
                     (row.before && row.before->throughput ? std::to_string(row.before->throughput->repeats.size()) : "-") +
                         " / " +
                         (row.after && row.after->throughput ? std::to_string(row.after->throughput->repeats.size()) : "-"),
                     row.test ? p_text(row.test->p_value) : "-", name_of(row.verdict).text});
  }
  print_grid(out, o.format, "throughput (" + c.unit + ", " + c.statistic + ")",
             {"case", "before", "after", "change", "repeats", "p", "verdict"}, cells);
  std::vector<std::pair<std::string, std::string>> why;
  for (const Row& row : c.rows) why.emplace_back(row.case_id, std::string(name_of(row.verdict).text) + ": " + row.why);
  print_case_notes(out, o.format, "why", "verdict", why);
  std::vector<std::pair<std::string, std::string>> changed;
  for (const auto& d : c.differences) changed.emplace_back(d.field, shown(d.before) + " -> " + shown(d.after));
  for (const auto& d : c.measured_by) {
    std::string cases;
    if (d.cases.size() == c.compared) {
      cases = "every case";
    } else {
      for (std::size_t i = 0; i < d.cases.size(); ++i) cases += (i > 0 ? ", " : "") + d.cases[i];
    }
    changed.emplace_back("environment." + d.field, shown(d.before) + " -> " + shown(d.after) + " (" + cases + ")");
  }
  if (changed.empty()) {
    out << (markdown ? "\n**what differs between the runs**\n\nnothing in the spec or in what measured them\n"
                     : "\nwhat differs between the runs\n  nothing in the spec or in what measured them\n");
  } else {
    print_case_notes(out, o.format, "what differs between the runs", "before -> after", changed, "field");
  }
  std::string tally;
  for (const auto& [verdict, count] : c.counts) {
    tally += (tally.empty() ? "" : ", ") + std::to_string(count) + " " + name_of(verdict).text;
  }
  out << "\n" << (markdown ? "**" : "") << c.rows.size() << (c.rows.size() == 1 ? " case: " : " cases: ") << tally;
  if (c.exit_code == 0) {
    out << "; no case slower";
    if (c.passed_unjudged > 0) {
      out << " (some not judged: --strict fails on those)";
    }
  } else {
    out << "; failing: ";
    for (std::size_t i = 0; i < c.failing.size(); ++i) out << (i > 0 ? ", " : "") << c.failing[i];
  }
  out << (markdown ? "**" : "") << "\n";
}

int compare(const CompareOptions& o, const Source& baseline, const Source& candidate, std::ostream& out) {
  const Comparison c = compare_runs(o, baseline, candidate);
  switch (o.format) {
    case ReportFormat::json: print_json(c, out); break;
    case ReportFormat::junit: print_junit(c, out); break;
    case ReportFormat::csv: print_csv(c, out); break;
    case ReportFormat::table:
    case ReportFormat::markdown: print_table(c, out); break;
  }
  return c.exit_code;
}

// The file's runs where it holds `count` of them, or the exit code (2) having said why (`role`:
// which file it is, where compare takes one run from each).
std::variant<std::vector<Source>, int> runs_in(const std::string& file, std::size_t count, const std::string& role,
                                               std::ostream& err) {
  auto loaded = load_sources(file, err);
  if (std::get_if<int>(&loaded)) return 2;  // invalid or unreadable: said; the runs cannot be compared
  auto& sources = std::get<std::vector<Source>>(loaded);
  if (sources.size() != count) {
    err << "error: " << file << (role.empty() ? "" : " (the " + role + ")") << " holds " << sources.size()
        << (sources.size() == 1 ? " run" : " runs")
        << (count == 1 ? "; compare takes one run from each file\n"
                       : "; compare takes two: a baseline file and a candidate file, or one file of exactly two runs "
                         "(the first the baseline)\n");
    return 2;
  }
  return std::move(sources);
}

}  // namespace

int run_compare(const CompareOptions& options, std::ostream& out, std::ostream& err) {
  std::vector<Source> sources;
  const auto take = [&](const std::string& file, std::size_t count, const std::string& role) {
    auto runs = runs_in(file, count, role, err);
    if (const int* code = std::get_if<int>(&runs)) return *code;
    for (auto& s : std::get<std::vector<Source>>(runs)) sources.push_back(std::move(s));
    return 0;
  };
  if (options.candidate.empty()) {
    // One file of exactly two runs (`kubectl get br before after -o json`): the first is the baseline.
    if (const int code = take(options.baseline, 2, "")) return code;
    distinguish_labels(sources);  // two runs of one name in one file: #1 and #2
  } else {
    // One run from each file, each named with its file.
    if (const int code = take(options.baseline, 1, "baseline")) return code;
    if (const int code = take(options.candidate, 1, "candidate")) return code;
  }
  if (sources[0].model && sources[1].model && *sources[0].model != *sources[1].model) {
    err << "error: compare takes two runs of one model: " << sources[0].label << " trained "
        << to_string(*sources[0].model) << ", " << sources[1].label << " " << to_string(*sources[1].model) << "\n";
    return 2;
  }
  return compare(options, sources[0], sources[1], out);
}

}  // namespace dlbench::cli
