#include "reconciler.hpp"

#include <algorithm>
#include <ctime>
#include <set>

#include "child_names.hpp"
#include "dlbench/core/codec.hpp"
#include "dlbench/core/planner.hpp"
#include "dlbench/core/result_document.hpp"
#include "dlbench/core/status.hpp"

namespace dlbench::operator_ {

using nlohmann::json;

std::string format_rfc3339(TimePoint t) {
  const std::time_t seconds = std::chrono::system_clock::to_time_t(t);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char buffer[32];
  std::strftime(buffer, sizeof buffer, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return buffer;
}

namespace {

struct AttemptOutcome {
  bool finished = false;
  bool succeeded = false;
  CaseResult result;  // when finished
};

ObjectRef ref(const ObservedObject& o) { return {o.kind, o.name}; }

// Every child that exists and is not on its way out, in a stable order.
std::vector<const ObservedObject*> children(const World& world) {
  std::vector<const ObservedObject*> out;
  for (const auto& p : world.pods) out.push_back(&p);
  for (const auto& j : world.jobs) out.push_back(&j);
  for (const auto& o : world.others) out.push_back(&o);
  return out;
}

CaseResult failure(const CaseSpec& c, std::string reason, std::string message, int attempt, TimePoint now) {
  CaseResult r;
  r.case_ = c;
  r.state = CaseState::Failed;
  r.reason = std::move(reason);
  r.message = std::move(message);
  r.attempts = attempt;
  r.completion_time = format_rfc3339(now);
  return r;
}

// When the attempt began: its oldest object's creation time.
std::optional<TimePoint> attempt_started(const World& world, const std::string& id, int attempt) {
  std::optional<TimePoint> started;
  for (const auto* o : children(world)) {
    if (o->case_id == id && o->attempt == attempt && o->created && (!started || *o->created < *started)) started = o->created;
  }
  return started;
}

// Decides whether the current attempt is over, and how.
AttemptOutcome judge(const BenchmarkRun& run, const PlannedCase& current, int attempt, const World& world) {
  AttemptOutcome outcome;
  const ObservedPod* failed_worker = nullptr;
  const ObservedPod* unschedulable = nullptr;
  const ObservedPod* launcher_pod = nullptr;  // engine: command — worker 0, whose dlbench-exec reports
  const ObservedJob* launcher_job = nullptr;
  const bool wrapped = run.spec.engine == Engine::command;
  const std::string reporter = wrapped ? child_names(run.metadata.name, current.id, attempt).worker(0) : "";
  const std::optional<TimePoint> started = attempt_started(world, current.id, attempt);
  for (const auto& p : world.pods) {
    if (p.case_id != current.id || p.attempt != attempt) continue;
    if (wrapped && p.role == "worker" && p.name == reporter) {
      launcher_pod = &p;
      if (p.unschedulable && unschedulable == nullptr) unschedulable = &p;
      continue;
    }
    if (p.role == "worker" && p.failed && failed_worker == nullptr) failed_worker = &p;
    if (p.role == "worker" && p.unschedulable && unschedulable == nullptr) unschedulable = &p;
    if (p.role == "launcher" && (launcher_pod == nullptr || p.phase == "Succeeded" || p.phase == "Failed")) {
      launcher_pod = &p;
    }
  }
  for (const auto& j : world.jobs) {
    if (j.case_id == current.id && j.attempt == attempt && j.role == "launcher") launcher_job = &j;
  }

  // 1. The launcher's result, whether the case succeeded or the worker reported its failure.
  const bool launcher_done = launcher_pod != nullptr && (launcher_pod->phase == "Succeeded" || launcher_pod->phase == "Failed");
  if (launcher_done && !launcher_pod->termination_message.empty()) {
    try {
      const auto decoded = decode_result_document(json::parse(launcher_pod->termination_message));
      if (decoded.ok() && decoded.value->case_ == current.spec) {
        outcome.finished = true;
        outcome.result = to_case_result(*decoded.value, attempt);
        outcome.succeeded = outcome.result.state == CaseState::Succeeded;
        if (outcome.succeeded || failed_worker == nullptr) return outcome;
      }
    } catch (const std::exception&) {
      // Not a result document: the launcher's last words, used below.
    }
  }
  // 2. A worker that died says why better than the launcher that lost it.
  if (failed_worker != nullptr) {
    outcome.finished = true;
    outcome.result = failure(current.spec, failed_worker->failure_reason,
                             "worker " + failed_worker->name + ": " + failed_worker->failure_message, attempt, world.now);
    return outcome;
  }
  // 3. The launcher failed on its own; with engine: command, node 0's pod died without a result
  //    (OOMKilled, Evicted, its init container failed): the pod's own words.
  if (wrapped && launcher_pod != nullptr && (launcher_pod->failed || launcher_done)) {
    outcome.finished = true;
    std::string reason = launcher_pod->failed ? launcher_pod->failure_reason : "NoResult";
    std::string message = "worker " + launcher_pod->name + ": " +
                          (launcher_pod->failed ? launcher_pod->failure_message
                                                : "dlbench-exec ended without a result document: " +
                                                      launcher_pod->termination_message);
    outcome.result = failure(current.spec, reason.empty() ? "CommandFailed" : reason, message.substr(0, 1024), attempt,
                             world.now);
    return outcome;
  }
  if ((launcher_job != nullptr && launcher_job->failed) || (launcher_done && launcher_pod->phase == "Failed")) {
    outcome.finished = true;
    std::string reason = "LauncherFailed";
    std::string message = launcher_pod != nullptr ? launcher_pod->termination_message : "";
    if (launcher_job != nullptr && launcher_job->failure_reason == "DeadlineExceeded") reason = "Timeout";
    if (message.empty() && launcher_job != nullptr) message = launcher_job->failure_message;
    outcome.result = failure(current.spec, reason, message.substr(0, 1024), attempt, world.now);
    return outcome;
  }
  // 4. Out of time.
  const auto limit = std::chrono::seconds(run.spec.limits.case_timeout_seconds);
  if (started && world.now - *started > limit) {
    outcome.finished = true;
    std::string message = "no result within limits.caseTimeoutSeconds (" +
                          std::to_string(run.spec.limits.case_timeout_seconds) + " s)";
    if (unschedulable != nullptr) message += "; worker " + unschedulable->name + " unschedulable: " + unschedulable->failure_message;
    outcome.result = failure(current.spec, unschedulable != nullptr ? "Unschedulable" : "Timeout", message, attempt,
                             world.now);
  }
  return outcome;
}

}  // namespace

Actions reconcile(const json& run_json, const World& world, const OperatorConfig& config, const KeySource& keys) {
  Actions actions;
  const std::string now = format_rfc3339(world.now);
  const std::int64_t generation = run_json.value("metadata", json::object()).value("generation", 0);
  const auto decoded = decode_benchmark_run(run_json);

  BenchmarkRunStatus previous;
  if (run_json.contains("status")) {
    if (auto s = decode_status(run_json["status"]); s.ok()) previous = *s.value;
  }
  BenchmarkRunStatus status = previous;
  status.observed_generation = generation;

  const auto remove_all_children = [&] {
    for (const auto* o : children(world)) {
      if (!o->deleting) actions.remove.push_back(ref(*o));
    }
  };

  if (!decoded.ok()) {
    std::string message;
    for (const auto& e : decoded.errors) message += (message.empty() ? "" : "; ") + e.to_string();
    status.phase = Phase::Failed;
    set_condition(status.conditions, {ConditionType::Invalid, ConditionStatus::True, "InvalidSpec", message, "", generation}, now);
    set_condition(status.conditions, {ConditionType::Ready, ConditionStatus::False, "InvalidSpec", "", "", generation}, now);
    remove_all_children();
    if (status != previous) {
      actions.status = status;
      actions.events.push_back({"Warning", "InvalidSpec", message});
    }
    return actions;
  }
  const BenchmarkRun& run = *decoded.value;
  const auto plan = plan_cases(run.spec);
  std::set<std::string> finished;
  for (const auto& r : status.results) finished.insert(case_id(r.case_));
  const auto current_it = std::find_if(plan.begin(), plan.end(), [&](const PlannedCase& c) { return !finished.contains(c.id); });

  if (current_it != plan.end()) {
    const PlannedCase& current = *current_it;
    int attempt = status.progress.current_case == current.id && status.progress.current_attempt > 0
                      ? status.progress.current_attempt
                      : 1;
    if (status.phase == Phase::Pending) actions.events.push_back({"Normal", "Started", std::to_string(plan.size()) + " cases planned"});
    status.phase = Phase::Running;
    status.progress.current_case = current.id;
    status.progress.current_attempt = attempt;

    // Anything from another case or an older attempt is a leftover.
    for (const auto* o : children(world)) {
      if ((o->case_id != current.id || o->attempt != attempt) && !o->deleting) actions.remove.push_back(ref(*o));
    }

    const AttemptOutcome outcome = judge(run, current, attempt, world);
    const int max_attempts = 1 + run.spec.limits.backoff_limit;
    if (outcome.finished) {
      for (const auto* o : children(world)) {
        if (o->case_id == current.id && o->attempt == attempt && !o->deleting) actions.remove.push_back(ref(*o));
      }
      if (!outcome.succeeded && attempt < max_attempts && !failure_is_permanent(outcome.result.reason)) {
        actions.events.push_back({"Warning", "AttemptFailed",
                                  current.id + " attempt " + std::to_string(attempt) + "/" + std::to_string(max_attempts) +
                                      ": " + outcome.result.reason + ": " + outcome.result.message});
        status.progress.current_attempt = attempt + 1;
      } else {
        status.results.push_back(outcome.result);
        status.progress.current_attempt = 0;
        actions.events.push_back({outcome.succeeded ? "Normal" : "Warning", outcome.succeeded ? "CaseSucceeded" : "CaseFailed",
                                  current.id + (outcome.succeeded ? "" : ": " + outcome.result.reason + ": " +
                                                                             outcome.result.message)});
      }
      actions.requeue_after = std::chrono::seconds(1);
    } else {
      // Create what is missing, the launcher last.
      const ChildNames names = child_names(run.metadata.name, current.id, attempt);
      std::set<std::string> present;
      for (const auto* o : children(world)) present.insert(o->kind + "/" + o->name);
      const bool wrapped = run.spec.engine == Engine::command;  // no SSH, hostfile or launcher
      if (!wrapped && !present.contains("Secret/" + names.secret)) {
        actions.create.push_back(build_ssh_secret(run, current.spec, attempt, keys()));
      }
      if (!wrapped && !present.contains("ConfigMap/" + names.hostfile)) {
        actions.create.push_back(build_hostfile(run, current.spec, attempt));
      }
      if (!present.contains("Service/" + names.service)) actions.create.push_back(build_worker_service(run, current.spec, attempt));
      int ready = 0;
      for (int i = 0; i < current.spec.nodes; ++i) {
        const std::string name = names.worker(i);
        const auto pod = std::find_if(world.pods.begin(), world.pods.end(), [&](const ObservedPod& p) { return p.name == name; });
        if (pod == world.pods.end()) {
          actions.create.push_back(build_worker_pod(run, current.spec, attempt, i, config));
        } else if (pod->ready) {
          ++ready;
        }
      }
      // The launcher must not race its workers: it starts when every sshd answers.
      if (!wrapped && ready == current.spec.nodes && !present.contains("Job/" + names.launcher)) {
        actions.create.push_back(build_launcher_job(run, current.spec, attempt, config));
        actions.events.push_back({"Normal", "LauncherCreated", current.id + " attempt " + std::to_string(attempt)});
      }
      // Wake up for the timeout even if nothing else changes.
      const std::optional<TimePoint> started = attempt_started(world, current.id, attempt);
      const auto deadline = (started ? *started : world.now) + std::chrono::seconds(run.spec.limits.case_timeout_seconds);
      const auto left = std::chrono::duration_cast<std::chrono::seconds>(deadline - world.now) + std::chrono::seconds(1);
      actions.requeue_after = std::max(std::chrono::seconds(1), std::min(left, std::chrono::seconds(60)));
    }
  }

  refresh_derived_status(status, plan, run.spec.methodology.statistic);
  const auto next = std::find_if(plan.begin(), plan.end(), [&](const PlannedCase& c) {
    return std::none_of(status.results.begin(), status.results.end(), [&](const CaseResult& r) { return case_id(r.case_) == c.id; });
  });
  if (next == plan.end()) {
    // Every case has its result: the run is over.
    const bool any_succeeded = std::any_of(status.results.begin(), status.results.end(),
                                           [](const CaseResult& r) { return r.state == CaseState::Succeeded; });
    const auto failures = std::count_if(status.results.begin(), status.results.end(),
                                        [](const CaseResult& r) { return r.state != CaseState::Succeeded; });
    if (status.phase != Phase::Succeeded && status.phase != Phase::Failed) {
      actions.events.push_back({any_succeeded ? "Normal" : "Warning", any_succeeded ? "Succeeded" : "Failed",
                                status.progress.summary + " cases, " + std::to_string(failures) + " failed"});
    }
    status.phase = any_succeeded ? Phase::Succeeded : Phase::Failed;
    status.progress.current_case.clear();
    status.progress.current_attempt = 0;
    set_condition(status.conditions,
                  {ConditionType::Ready, any_succeeded ? ConditionStatus::True : ConditionStatus::False,
                   any_succeeded ? (failures > 0 ? "SucceededWithFailures" : "Succeeded") : "NoCaseSucceeded",
                   std::to_string(failures) + " of " + std::to_string(plan.size()) + " cases failed", "", generation},
                  now);
    set_condition(status.conditions, {ConditionType::Progressing, ConditionStatus::False, "Finished", "", "", generation}, now);
    if (!any_succeeded) {
      set_condition(status.conditions, {ConditionType::Failed, ConditionStatus::True, "NoCaseSucceeded", "", "", generation}, now);
    }
    remove_all_children();
    actions.requeue_after.reset();
  } else {
    if (next->id != status.progress.current_case) {  // a case just finished: point at the next one
      status.progress.current_case = next->id;
      status.progress.current_attempt = 1;
    }
    set_condition(status.conditions,
                  {ConditionType::Progressing, ConditionStatus::True, "CaseRunning",
                   status.progress.current_case + " attempt " + std::to_string(status.progress.current_attempt), "",
                   generation},
                  now);
    set_condition(status.conditions, {ConditionType::Ready, ConditionStatus::False, "Running", status.progress.summary, "", generation},
                  now);
  }
  // A removal asked for twice is asked for once.
  std::vector<ObjectRef> unique;
  for (const auto& r : actions.remove) {
    if (std::find(unique.begin(), unique.end(), r) == unique.end()) unique.push_back(r);
  }
  actions.remove = std::move(unique);
  if (status != previous) actions.status = status;
  return actions;
}

}  // namespace dlbench::operator_
