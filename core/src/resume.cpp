#include "dlbench/core/resume.hpp"

#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "dlbench/core/codec.hpp"
#include "dlbench/core/status.hpp"

namespace dlbench {

namespace {

using nlohmann::json;

// The spec's parts that choose which cases run and how often they are tried, not how one is
// measured.
constexpr const char* kCaseChoosingFields[] = {"matrix", "cases", "limits", "preflight"};

void collect_differences(const json& a, const json& b, const std::string& path, std::vector<SpecDifference>& out) {
  if (a == b) return;
  if (a.is_object() && b.is_object()) {
    std::set<std::string> keys;
    for (const auto& [key, value] : a.items()) keys.insert(key);
    for (const auto& [key, value] : b.items()) keys.insert(key);
    for (const auto& key : keys) {
      collect_differences(a.value(key, json()), b.value(key, json()), path + "." + key, out);
    }
    return;
  }
  if (a.is_array() && b.is_array() && a.size() == b.size()) {
    for (std::size_t i = 0; i < a.size(); ++i) {
      collect_differences(a[i], b[i], path + "[" + std::to_string(i) + "]", out);
    }
    return;
  }
  const auto text = [](const json& value) { return value.is_null() ? std::string("absent") : value.dump(); };
  out.push_back({path, text(a), text(b)});
}

bool skipped_by_a_failed_preflight(const CaseResult& r) {
  return r.state == CaseState::Skipped && r.reason == kReasonPreflightFailed;
}

}  // namespace

std::vector<SpecDifference> measurement_differences(const BenchmarkRunSpec& earlier, const BenchmarkRunSpec& now) {
  json a = to_json(earlier);
  json b = to_json(now);
  for (const char* field : kCaseChoosingFields) {
    a.erase(field);
    b.erase(field);
  }
  std::vector<SpecDifference> differences;
  collect_differences(a, b, "spec", differences);
  return differences;
}

Resumption resume_from(const BenchmarkRunStatus& previous, const std::vector<PlannedCase>& plan,
                       bool preflight_planned, std::int64_t generation, const std::string& now,
                       bool retry_failed) {
  Resumption r;
  r.status = previous;
  BenchmarkRunStatus& status = r.status;
  const bool preflight_failed = status.preflight && status.preflight->state == CaseState::Failed;
  if (preflight_failed) {
    // The self-test's verdict on a device that has perhaps been fixed since: it runs again, and
    // so do the cases it kept from running.
    status.preflight.reset();
    std::erase_if(status.results, skipped_by_a_failed_preflight);
  }
  r.preflight_to_run = preflight_planned && !status.preflight;
  if (retry_failed) {
    r.retried = static_cast<int>(
        std::erase_if(status.results, [](const CaseResult& result) { return result.state == CaseState::Failed; }));
  }

  std::set<std::string> planned;
  for (const PlannedCase& c : plan) planned.insert(c.id);
  std::set<std::string> with_result;
  for (const CaseResult& result : status.results) {
    const std::string id = case_id(result.case_);
    with_result.insert(id);
    if (!planned.contains(id)) r.unplanned.push_back(id);
  }
  r.kept = static_cast<int>(status.results.size());
  r.to_run = static_cast<int>(std::count_if(plan.begin(), plan.end(),
                                            [&](const PlannedCase& c) { return !with_result.contains(c.id); }));
  if (r.nothing_to_run()) return r;

  status.phase = Phase::Pending;
  status.completion_time.clear();
  status.progress.current_case.clear();
  status.progress.current_attempt = 0;
  status.progress.shared_node = false;
  const std::string message = "dlbench run --resume: " + std::to_string(r.kept) + " case results kept, " +
                              std::to_string(r.to_run) + " cases to run" +
                              (r.retried > 0 ? " (" + std::to_string(r.retried) + " that failed, again)" : "");
  for (const ConditionType type : {ConditionType::Failed, ConditionType::Complete}) {
    if (const Condition* c = find_condition(status.conditions, type); c != nullptr && c->status == ConditionStatus::True) {
      set_condition(status.conditions, {type, ConditionStatus::False, "Resumed", message, "", generation}, now);
    }
  }
  return r;
}

}  // namespace dlbench
