#include "dlbench/core/status.hpp"

#include <chrono>
#include <cmath>
#include <ctime>
#include <regex>
#include <set>
#include <string_view>

#include "dlbench/core/statistics.hpp"

namespace dlbench {

bool set_condition(std::vector<Condition>& conditions, Condition condition, const std::string& now) {
  for (Condition& existing : conditions) {
    if (existing.type != condition.type) continue;
    condition.last_transition_time = existing.status == condition.status ? existing.last_transition_time : now;
    if (existing == condition) return false;
    existing = std::move(condition);
    return true;
  }
  condition.last_transition_time = now;
  conditions.push_back(std::move(condition));
  return true;
}

const Condition* find_condition(const std::vector<Condition>& conditions, ConditionType type) {
  for (const Condition& c : conditions) {
    if (c.type == type) return &c;
  }
  return nullptr;
}

void refresh_derived_status(BenchmarkRunStatus& status, const std::vector<PlannedCase>& plan, Statistic statistic,
                            bool include_unstable) {
  apply_scaling(status.results, statistic, include_unstable);
  status.best.reset();
  for (const CaseResult& r : status.results) {
    if (!publishable(r, include_unstable)) continue;
    const double value = reported_value(r.throughput->summary, statistic);
    if (!status.best || value > status.best->throughput) status.best = BestResult{case_id(r.case_), value, r.throughput->unit};
  }
  // A display value for the BEST printer column; results[] keep full precision.
  if (status.best) status.best->throughput = std::round(status.best->throughput * 100.0) / 100.0;
  std::set<std::string> planned_ids;
  for (const PlannedCase& c : plan) planned_ids.insert(c.id);
  std::set<std::string> finished;
  for (const CaseResult& r : status.results) {
    if (planned_ids.contains(case_id(r.case_))) finished.insert(case_id(r.case_));
  }
  status.progress.completed_cases = static_cast<int>(finished.size());
  status.progress.total_cases = static_cast<int>(plan.size());
  status.progress.summary =
      std::to_string(status.progress.completed_cases) + "/" + std::to_string(status.progress.total_cases);
}

std::string stopped_message_with_last_lines(const std::string& message, const std::deque<std::string>& last_lines,
                                            std::size_t limit) {
  std::string lines;
  for (const std::string& line : last_lines) {
    const bool rule = line.find_first_not_of("- \t\r") == std::string::npos;
    if (rule || line.find(message) != std::string::npos) continue;
    lines += (lines.empty() ? "" : "\n") + line;
  }
  if (lines.size() > limit) lines = "..." + lines.substr(lines.size() - limit);
  return lines.empty() ? message : message + "\n" + lines;
}

namespace {
constexpr std::string_view kTimeoutWords = "no result within limits.caseTimeoutSeconds (";
}  // namespace

std::string timeout_message(std::int64_t case_timeout_seconds, std::size_t kept_repeats) {
  std::string message = std::string(kTimeoutWords) + std::to_string(case_timeout_seconds) + " s)";
  if (kept_repeats > 0) {
    message += "; the " + std::to_string(kept_repeats) +
               (kept_repeats == 1 ? " repeat measured before is kept" : " repeats measured before are kept") +
               ", unjudged";
  }
  return message;
}

bool is_timeout_message(const std::string& message) { return message.starts_with(kTimeoutWords); }

std::string to_string(ResultDetail detail) {
  switch (detail) {
    case ResultDetail::full: return "full";
    case ResultDetail::trimmed: return "trimmed";
    case ResultDetail::essential: return "essential";
  }
  return "full";
}

namespace {

// A message's last non-empty line, at most 240 characters (its end: where a failure says why).
std::string last_line(const std::string& message) {
  std::string_view text = message;
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  if (const auto newline = text.rfind('\n'); newline != std::string_view::npos) text.remove_prefix(newline + 1);
  constexpr std::size_t kLimit = 240;
  if (text.size() > kLimit) text.remove_prefix(text.size() - kLimit);
  return std::string(text);
}

void keep_detail(CaseResult& result, ResultDetail detail) {
  if (detail == ResultDetail::full) return;
  result.loss_after_repeats.clear();
  result.step_time_seconds.reset();
  result.flops.reset();
  result.energy.reset();
  result.communication.reset();
  result.input.reset();
  if (result.loss_scaling) result.loss_scaling->overflow.clear();
  result.message = last_line(result.message);
  if (detail == ResultDetail::trimmed) return;
  result.environment.reset();
  result.optimizer.reset();
  result.interference.reset();
}

}  // namespace

void keep_result_detail(BenchmarkRunStatus& status, ResultDetail detail) {
  for (auto& result : status.results) keep_detail(result, detail);
  if (status.preflight) keep_detail(*status.preflight, detail);
}

std::string rfc3339_utc_now() { return rfc3339_utc(std::chrono::system_clock::now()); }

std::string rfc3339_utc(std::chrono::system_clock::time_point when) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(std::chrono::floor<std::chrono::seconds>(when));
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buffer;
}

std::optional<std::chrono::system_clock::time_point> parse_rfc3339(const std::string& text) {
  static const std::regex pattern(R"(^(\d{4})-(\d{2})-(\d{2})T(\d{2}):(\d{2}):(\d{2})(\.\d+)?Z$)");
  std::smatch m;
  if (!std::regex_match(text, m, pattern)) return std::nullopt;
  std::tm t{};
  t.tm_year = std::stoi(m[1]) - 1900;
  t.tm_mon = std::stoi(m[2]) - 1;
  t.tm_mday = std::stoi(m[3]);
  t.tm_hour = std::stoi(m[4]);
  t.tm_min = std::stoi(m[5]);
  t.tm_sec = std::stoi(m[6]);
  // timegm would carry a 13th month or a 61st minute into the next year or hour: refused instead.
  const bool in_range = t.tm_mon >= 0 && t.tm_mon <= 11 && t.tm_mday >= 1 && t.tm_mday <= 31 && t.tm_hour <= 23 &&
                        t.tm_min <= 59 && t.tm_sec <= 60;
  if (!in_range) return std::nullopt;
  auto point = std::chrono::system_clock::from_time_t(timegm(&t));
  if (m[7].matched) {  // ".123456": keep sub-second precision (Lease MicroTime)
    const std::string digits = m[7].str().substr(1, 6);
    point += std::chrono::microseconds(std::stol(digits + std::string(6 - digits.size(), '0')));
  }
  return point;
}

bool failure_is_permanent(const std::string& reason) {
  // RdmaNotUsed: the fabric and NCCL's settings are the same on the next attempt. LossNotFinite:
  // the same spec starts from the same weights and data, and diverges again.
  return reason == kReasonUnsupported || reason == kReasonGangSchedulerUnavailable || reason == kReasonSelfTestFailed ||
         reason == kReasonRdmaNotUsed || reason == kReasonLossNotFinite;
}

}  // namespace dlbench
