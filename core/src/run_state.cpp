#include "dlbench/core/run_state.hpp"

#include <algorithm>
#include <vector>

#include <nlohmann/json.hpp>

#include "decoder.hpp"
#include "dlbench/core/codec.hpp"
#include "dlbench/core/nccl_log.hpp"
#include "dlbench/core/result_document.hpp"
#include "dlbench/core/status.hpp"

namespace dlbench {

namespace {

// The optimizer's fields a worker ran otherwise than asked: "learningRate 0.01 instead of 0.1",
// each number in its shortest exact digits (detail::format_number), so that 0.1 against 0.1000001 does not
// print as "0.1 instead of 0.1".
std::string optimizer_differences(const OptimizerSpec& ran, const OptimizerSpec& asked) {
  std::vector<std::string> differences;
  if (ran.name != asked.name) {
    differences.push_back("name " + std::string(to_string(ran.name)) + " instead of " + std::string(to_string(asked.name)));
  }
  const auto compare = [&](const char* field, double r, double a) {
    if (r != a) differences.push_back(std::string(field) + " " + detail::format_number(r) + " instead of " + detail::format_number(a));
  };
  compare("learningRate", ran.learning_rate, asked.learning_rate);
  compare("momentum", ran.momentum, asked.momentum);
  compare("weightDecay", ran.weight_decay, asked.weight_decay);
  // Whole numbers up to a million: exact as doubles, and format_number prints them without a point.
  compare("learningRateWarmupSteps", static_cast<double>(ran.learning_rate_warmup_steps),
          static_cast<double>(asked.learning_rate_warmup_steps));
  std::string out;
  for (const auto& d : differences) out += (out.empty() ? "" : ", ") + d;
  return out;
}

}  // namespace

std::optional<CaseResult> result_from_document(const std::string& text, const CaseSpec& expected, int attempt,
                                               const std::optional<RdmaSpec>& rdma, const OptimizerSpec& optimizer) {
  nlohmann::json document;
  try {
    document = nlohmann::json::parse(text);
  } catch (const std::exception&) {
    return std::nullopt;
  }
  CaseResult failure;
  failure.case_ = expected;
  failure.state = CaseState::Failed;
  failure.attempts = attempt;
  if (expected.preflight) {
    const auto self_test = decode_self_test_document(document);
    if (!self_test.ok()) {
      failure.reason = "InvalidResult";
      failure.message = self_test.errors.front().to_string();
      return failure;
    }
    return to_case_result(*self_test.value, expected, attempt);
  }
  const auto decoded = decode_result_document(document);
  if (!decoded.ok()) {
    failure.reason = "InvalidResult";
    failure.message = decoded.errors.front().to_string();
    return failure;
  }
  // A document for other work (another case; or another optimizer: another image's defaults, a
  // flag lost on the way): its figures are not this case's.
  const auto mismatch = [&](std::string message) {
    failure.reason = "CaseMismatch";
    failure.message = std::move(message);
    failure.start_time = decoded.value->start_time;
    failure.completion_time = decoded.value->end_time;
    return failure;
  };
  if (decoded.value->case_ != expected) {
    return mismatch("the worker ran " + case_id(decoded.value->case_) + " instead of " + case_id(expected));
  }
  if (decoded.value->optimizer && *decoded.value->optimizer != optimizer) {
    failure.optimizer = decoded.value->optimizer;  // the status says what ran
    return mismatch("the worker trained " + case_id(expected) + " with another optimizer than the spec's: " +
                    optimizer_differences(*decoded.value->optimizer, optimizer));
  }
  CaseResult result = to_case_result(*decoded.value, attempt);
  judge_rdma(result, rdma);
  return result;
}

RunStateMachine::RunStateMachine(BenchmarkRunStatus status, std::vector<PlannedCase> plan, const Methodology& methodology,
                                 std::int64_t generation, int max_attempts, std::string now,
                                 std::optional<PlannedCase> preflight)
    : status_(std::move(status)), plan_(std::move(plan)), preflight_(std::move(preflight)), statistic_(methodology.statistic),
      include_unstable_(methodology.stability.include_unstable),
      generation_(generation),
      max_attempts_(std::max(1, max_attempts)), now_(std::move(now)) {
  status_.observed_generation = generation_;
  // The spec decodes now: an Invalid=True left from an earlier generation is over, and a run
  // that failed only for being invalid starts again.
  if (const Condition* invalid = find_condition(status_.conditions, ConditionType::Invalid);
      invalid != nullptr && invalid->status == ConditionStatus::True) {
    set_condition(status_.conditions, {ConditionType::Invalid, ConditionStatus::False, "SpecValid", "", "", generation_},
                  now_);
    if (status_.phase == Phase::Failed) status_.phase = Phase::Pending;
    if (const Condition* failed = find_condition(status_.conditions, ConditionType::Failed);
        failed != nullptr && failed->reason == "InvalidSpec") {
      set_condition(status_.conditions, {ConditionType::Failed, ConditionStatus::False, "SpecValid", "", "", generation_},
                    now_);
      status_.completion_time.clear();
    }
  }
  refresh();
}

const PlannedCase* RunStateMachine::current() const {
  if (preflight_ && !status_.preflight) return &*preflight_;
  for (const PlannedCase& c : plan_) {
    const bool has_result = std::any_of(status_.results.begin(), status_.results.end(),
                                        [&](const CaseResult& r) { return case_id(r.case_) == c.id; });
    if (!has_result) return &c;
  }
  return nullptr;
}

void RunStateMachine::queue(const std::string& why) {
  if (status_.phase != Phase::Pending) return;
  set_condition(status_.conditions, {ConditionType::Progressing, ConditionStatus::True, "Queued", why, "", generation_},
                now_);
  set_condition(status_.conditions, {ConditionType::Ready, ConditionStatus::False, "Queued", status_.progress.summary, "",
                                     generation_},
                now_);
}

void RunStateMachine::await_previous_pods(const std::string& why) {
  if (status_.phase != Phase::Running || current() == nullptr) return;
  if (why.empty()) {
    const Condition* progressing = find_condition(status_.conditions, ConditionType::Progressing);
    if (progressing != nullptr && progressing->reason == kReasonAwaitingPreviousPods) refresh();
    return;
  }
  set_condition(status_.conditions,
                {ConditionType::Progressing, ConditionStatus::True, kReasonAwaitingPreviousPods, why, "", generation_}, now_);
}

void RunStateMachine::admit(const std::string& training) {
  if (status_.phase != Phase::Pending) return;
  status_.phase = Phase::Running;
  if (status_.start_time.empty()) status_.start_time = now_;
  events_.push_back(
      {"Normal", "Started", std::to_string(plan_.size()) + " cases planned" + (training.empty() ? "" : ", " + training)});
  refresh();
}

bool RunStateMachine::attempt_ended(CaseResult result) {
  const PlannedCase* c = current();
  if (c == nullptr || finished()) return false;
  const int attempt = std::max(1, status_.progress.current_attempt);
  result.attempts = attempt;
  status_.progress.shared_node = false;  // a new attempt, or a new case, starts unshared
  const bool succeeded = result.state == CaseState::Succeeded;
  if (!succeeded && attempt < max_attempts_ && !failure_is_permanent(result.reason)) {
    events_.push_back({"Warning", "AttemptFailed",
                       c->id + " attempt " + std::to_string(attempt) + "/" + std::to_string(max_attempts_) + ": " +
                           result.reason + ": " + result.message});
    status_.progress.current_attempt = attempt + 1;
    refresh();
    return true;
  }
  record(std::move(result));
  return false;
}

void RunStateMachine::record(CaseResult result) {
  const PlannedCase* c = current();
  const bool succeeded = result.state == CaseState::Succeeded;
  const bool skipped = result.state == CaseState::Skipped;
  const std::string what = succeeded ? "Succeeded" : skipped ? "Skipped" : "Failed";
  const std::string why = succeeded ? "" : ": " + result.reason + ": " + result.message;
  if (c->spec.preflight) {
    events_.push_back({succeeded ? "Normal" : "Warning", "Preflight" + what, c->id + (succeeded ? ": " + result.message : why)});
    status_.preflight = result;
    if (result.state == CaseState::Failed) {
      // Numbers from devices that compute wrong are not numbers: no case runs.
      for (const PlannedCase& p : plan_) {
        CaseResult not_run;
        not_run.case_ = p.spec;
        not_run.state = CaseState::Skipped;
        not_run.attempts = 0;
        not_run.reason = kReasonPreflightFailed;
        not_run.message = "the preflight self-test failed: " + result.reason + ": " + result.message;
        status_.results.push_back(std::move(not_run));
      }
    }
  } else {
    events_.push_back({succeeded ? "Normal" : "Warning", "Case" + what, c->id + why});
    if (succeeded && result.reason == kReasonRdmaNotUsed) {  // kept (rdma.required: false), never silent
      events_.push_back({"Warning", kReasonRdmaNotUsed, c->id + ": " + result.message});
    }
    status_.results.push_back(std::move(result));
  }
  refresh();
}

void RunStateMachine::skip(CaseResult result) {
  const PlannedCase* c = current();
  if (c == nullptr || finished()) return;
  result.state = CaseState::Skipped;
  result.attempts = 0;
  status_.progress.shared_node = false;
  record(std::move(result));
}

void RunStateMachine::interrupt(const std::string& reason, const std::string& stopped) {
  if (finished()) return;
  interrupted_ = true;
  status_.phase = Phase::Failed;
  if (status_.completion_time.empty()) status_.completion_time = now_;
  const std::string message = stopped + " after " + std::to_string(status_.results.size()) + " of " +
                              std::to_string(plan_.size()) + " cases; their results are kept";
  events_.push_back({"Warning", reason, message});
  refresh();
  set_condition(status_.conditions, {ConditionType::Failed, ConditionStatus::True, reason, message, "", generation_},
                now_);
  set_condition(status_.conditions, {ConditionType::Ready, ConditionStatus::False, reason, message, "", generation_},
                now_);
  set_condition(status_.conditions, {ConditionType::Progressing, ConditionStatus::False, reason, "", "", generation_},
                now_);
}

void RunStateMachine::refresh() {
  refresh_derived_status(status_, plan_, statistic_, include_unstable_);
  const PlannedCase* c = current();
  if (interrupted_) {  // ended by a signal: no current case
    status_.progress.current_case.clear();
    status_.progress.current_attempt = 0;
    return;
  }
  if (c != nullptr && status_.phase != Phase::Running) {
    // Pending (queued or not yet admitted): no current case to announce yet.
    if (status_.phase == Phase::Pending) status_.progress.current_case.clear();
    return;
  }
  if (c != nullptr) {
    if (status_.progress.current_case != c->id || status_.progress.current_attempt < 1) {
      status_.progress.current_case = c->id;
      status_.progress.current_attempt = 1;
    }
    set_condition(status_.conditions,
                  {ConditionType::Progressing, ConditionStatus::True, "CaseRunning",
                   c->id + " attempt " + std::to_string(status_.progress.current_attempt), "", generation_},
                  now_);
    set_condition(status_.conditions,
                  {ConditionType::Ready, ConditionStatus::False, "Running", status_.progress.summary, "", generation_},
                  now_);
    return;
  }
  // Every case has its result: the run is over.
  int succeeded = 0, failed = 0, skipped = 0;
  for (const CaseResult& r : status_.results) {
    (r.state == CaseState::Succeeded ? succeeded : r.state == CaseState::Failed ? failed : skipped) += 1;
  }
  const std::string summary = std::to_string(succeeded) + " succeeded, " + std::to_string(failed) + " failed, " +
                              std::to_string(skipped) + " skipped";
  const Phase phase = succeeded > 0 ? Phase::Succeeded : Phase::Failed;
  if (status_.phase != phase) {
    events_.push_back({succeeded > 0 ? "Normal" : "Warning", succeeded > 0 ? "Succeeded" : "Failed",
                       status_.progress.summary + " cases: " + summary});
  }
  status_.phase = phase;
  if (status_.completion_time.empty()) status_.completion_time = now_;
  status_.progress.current_case.clear();
  status_.progress.current_attempt = 0;
  set_condition(status_.conditions,
                {ConditionType::Ready, succeeded > 0 ? ConditionStatus::True : ConditionStatus::False,
                 succeeded > 0 ? (failed > 0 ? "SucceededWithFailures" : "Succeeded") : "NoCaseSucceeded", summary, "",
                 generation_},
                now_);
  set_condition(status_.conditions, {ConditionType::Progressing, ConditionStatus::False, "Finished", "", "", generation_},
                now_);
  if (succeeded > 0) {
    set_condition(status_.conditions,
                  {ConditionType::Complete, ConditionStatus::True, failed > 0 ? "SucceededWithFailures" : "Succeeded",
                   summary, "", generation_},
                  now_);
  } else {
    const bool preflight_failed = status_.preflight && status_.preflight->state == CaseState::Failed;
    set_condition(status_.conditions,
                  {ConditionType::Failed, ConditionStatus::True, preflight_failed ? kReasonPreflightFailed : "NoCaseSucceeded",
                   preflight_failed ? "the preflight self-test failed: " + status_.preflight->message : summary, "",
                   generation_},
                  now_);
  }
}

void mark_invalid(BenchmarkRunStatus& status, const std::string& errors, std::int64_t generation, const std::string& now) {
  status.observed_generation = generation;
  status.phase = Phase::Failed;
  status.progress.current_case.clear();
  status.progress.current_attempt = 0;
  if (status.completion_time.empty()) status.completion_time = now;
  set_condition(status.conditions, {ConditionType::Invalid, ConditionStatus::True, "InvalidSpec", errors, "", generation},
                now);
  // A run that cannot run has failed, for `kubectl wait --for=condition=Failed` as for a Job.
  set_condition(status.conditions,
                {ConditionType::Failed, ConditionStatus::True, "InvalidSpec", "the spec is invalid: " + errors, "", generation},
                now);
  // Ready says why too: `kubectl get -o wide` and `kubectl wait` users read Ready, not Invalid.
  set_condition(status.conditions,
                {ConditionType::Ready, ConditionStatus::False, "InvalidSpec", "the spec is invalid: " + errors, "", generation},
                now);
}

}  // namespace dlbench
