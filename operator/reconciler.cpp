#include "reconciler.hpp"

#include <algorithm>
#include <set>

#include "child_names.hpp"
#include "dlbench/core/api_rules.hpp"
#include "dlbench/core/codec.hpp"
#include "dlbench/core/planner.hpp"
#include "dlbench/core/result_document.hpp"
#include "dlbench/core/run_state.hpp"
#include "dlbench/core/status.hpp"

namespace dlbench::operator_ {

using nlohmann::json;

namespace {

struct AttemptOutcome {
  bool finished = false;
  CaseResult result;  // when finished
  // Not finished: worker 0 (engine: command) to be stopped now, its pod deleted gracefully, so
  // that its dlbench-exec stops the command and hands back the repeats it completed; the event
  // that says why.
  std::optional<ObjectRef> stop;
  std::string stop_message;
  // Not finished: when a wait ends, to look again then even if nothing changes.
  std::optional<TimePoint> look_again_at;
  // A worker judged deleted because the cache shows no pod of it (Actions::presumed_gone).
  std::optional<ObjectRef> presumed_gone;
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
  r.completion_time = rfc3339_utc(now);
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

// Whether every worker of the attempt ran: its launcher Job (made once all were Ready) or, with
// engine: command, its started record exists. A worker missing since is lost, never made again
// (its kubelet may delete its pod right after reporting its end, unseen by the cache).
bool every_worker_ran(const World& world, const ChildNames& names) {
  const auto named = [](std::string kind, std::string name) {
    return [kind, name](const ObservedObject& o) { return o.kind == kind && o.name == name; };
  };
  return std::any_of(world.jobs.begin(), world.jobs.end(), named("Job", names.launcher)) ||
         std::any_of(world.others.begin(), world.others.end(), named("ConfigMap", names.started));
}

// The pods of another case or attempt of this run that have not ended. Deleted (or about to be),
// each runs on until its kubelet has stopped it, within its grace: a case started now could train
// beside one, where the methodology has each case alone.
std::vector<const ObservedPod*> unended_previous_pods(const World& world, const std::string& id, int attempt) {
  std::vector<const ObservedPod*> out;
  for (const auto& p : world.pods) {
    if ((p.case_id != id || p.attempt != attempt) && p.phase != "Succeeded" && p.phase != "Failed") out.push_back(&p);
  }
  return out;
}

// Past its grace by kPreviousPodsOverdueSeconds: its kubelet is not stopping it (a lost node keeps
// a pod Terminating until the node is back or removed), and the next attempt waits no more.
bool overdue(const ObservedPod& pod, TimePoint now) {
  return pod.deletion_at && now - *pod.deletion_at > std::chrono::seconds(kPreviousPodsOverdueSeconds);
}

std::string awaiting_message(const std::string& id, int attempt, const std::vector<const ObservedPod*>& pods) {
  std::string names;
  for (std::size_t i = 0; i < pods.size() && i < 3; ++i) names += (i == 0 ? "" : ", ") + pods[i]->name;
  if (pods.size() > 3) names += " and " + std::to_string(pods.size() - 3) + " more";
  return id + " attempt " + std::to_string(attempt) + " starts once the pods before it have ended: " + names;
}

// Whether an unended pod of an earlier attempt is a worker on a node of this attempt's workers.
bool previous_worker_shares_a_node(const World& world, const std::string& id, int attempt,
                                   const std::vector<const ObservedPod*>& previous) {
  std::set<std::string> nodes;
  for (const auto& p : world.pods) {
    if (p.case_id == id && p.attempt == attempt && p.role == "worker" && !p.node.empty()) nodes.insert(p.node);
  }
  return std::any_of(previous.begin(), previous.end(),
                     [&](const ObservedPod* p) { return p->role == "worker" && nodes.contains(p->node); });
}

// Where the attempt's caseTimeoutSeconds counts from: its start, or — for a Kueue gang, which
// waits in its queue first — the moment the last worker was judged by the scheduler after its
// gates went. nullopt while it waits (the queue's wait is the queue's, not the case's).
std::optional<TimePoint> attempt_clock(const BenchmarkRun& run, const PlannedCase& current, int attempt,
                                       const World& world) {
  std::optional<TimePoint> clock = attempt_started(world, current.id, attempt);
  if (!run.spec.worker.gang || run.spec.worker.gang->scheduler != GangScheduler::kueue) return clock;
  for (const auto& p : world.pods) {
    if (p.case_id != current.id || p.attempt != attempt || p.role != "worker") continue;
    if (p.gated || !p.scheduling_since) return std::nullopt;  // in the queue, or not yet judged after it
    if (clock && *p.scheduling_since > *clock) clock = p.scheduling_since;
  }
  return clock;
}

// Decides whether the current attempt is over, and how.
AttemptOutcome judge(const BenchmarkRun& run, const PlannedCase& current, int attempt, const World& world) {
  AttemptOutcome outcome;
  const ObservedPod* failed_worker = nullptr;
  const ObservedPod* unschedulable = nullptr;
  const ObservedPod* launcher_pod = nullptr;  // engine: command — worker 0, whose dlbench-exec reports
  const ObservedJob* launcher_job = nullptr;
  const bool wrapped = run.spec.engine == Engine::command;
  const ChildNames names = child_names(run.metadata.name, current.id, attempt);
  const std::string reporter = wrapped ? names.worker(0) : "";
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
  // A worker missing once every worker ran was deleted.
  ObservedPod lost;
  if (failed_worker == nullptr && every_worker_ran(world, names)) {
    for (int i = 0; i < current.spec.nodes && failed_worker == nullptr; ++i) {
      const std::string name = names.worker(i);
      if (std::none_of(world.pods.begin(), world.pods.end(), [&](const ObservedPod& p) { return p.name == name; })) {
        lost.name = name;
        lost.deleting = lost.failed = true;
        lost.failure_message = "its pod is gone";
        failed_worker = &lost;
        outcome.presumed_gone = ObjectRef{"Pod", name};
      }
    }
  }

  // 1. The launcher's result, whether the case succeeded or the worker reported its failure (a
  //    document for another case is CaseMismatch, as dlbench run judges it).
  const bool launcher_done = launcher_pod != nullptr && (launcher_pod->phase == "Succeeded" || launcher_pod->phase == "Failed");
  if (launcher_done && !launcher_pod->termination_message.empty()) {
    // Not JSON: the launcher's last words, used below.
    if (auto result = result_from_document(launcher_pod->termination_message, current.spec, attempt,
                                               run.spec.worker.rdma, optimizer_for_case(run.spec, current.spec))) {
      outcome.finished = true;
      outcome.result = std::move(*result);
      if (outcome.result.state == CaseState::Succeeded || failed_worker == nullptr) return outcome;
    }
  }
  // 2. A worker that died says why better than the launcher that lost it. What rank 0 measured
  //    before comes back in the launcher's document (mpirun stops the other ranks, and rank 0 or its
  //    deputy writes the repeats it kept, Stopped), so a launcher still running (with engine:
  //    command, worker 0) is given the time it has to stop, from the worker's end; its repeats are
  //    kept under the worker's reason.
  if (failed_worker != nullptr) {
    // Deleted mid-case by someone else (this operator deletes an attempt's pods only once it has
    // ended): the container's end is the deletion's doing.
    const bool deleted = failed_worker->deleting;
    const std::string reason = deleted ? kReasonWorkerDeleted : failed_worker->failure_reason;
    const std::string message =
        "worker " + failed_worker->name +
        (deleted ? " was deleted mid-case" + (failed_worker->disruption.empty() ? "" : " (" + failed_worker->disruption + ")")
                 : "") +
        ": " + failed_worker->failure_message;
    if (outcome.finished) {
      outcome.result.reason = reason;
      outcome.result.message = message + "; " + outcome.result.message;
      return outcome;
    }
    const bool launcher_running = wrapped ? launcher_pod != nullptr && !launcher_pod->failed && !launcher_done
                                          : launcher_job != nullptr && !launcher_job->failed && !launcher_done;
    const auto margin = std::chrono::seconds(kLauncherStopMarginSeconds);
    const std::optional<TimePoint> margin_ends =
        failed_worker->failed_at ? std::optional<TimePoint>(*failed_worker->failed_at + margin) : std::nullopt;
    if (launcher_running && !wrapped && (!margin_ends || world.now <= *margin_ends)) {
      // Where the worker's end has no time, until the launcher ends or its Job's deadline fails it.
      outcome.look_again_at = margin_ends;
      return outcome;  // not yet: the launcher's document may hold repeats
    }
    if (launcher_running && wrapped) {
      // With engine: command, worker 0's dlbench-exec holds what its command measured. Its peer
      // gone, the command often fails within seconds and dlbench-exec writes the repeats it
      // completed; but it may as well wait on the peer for minutes (NCCL's collectives do). So it
      // is given the margin to end on its own, then stopped (its pod deleted: SIGTERM, which
      // dlbench-exec passes on, killing the command 10 s later and writing what it kept), and
      // waited for until its grace is over; then the worker's reason stands alone.
      if (!launcher_pod->deleting) {
        if (margin_ends && world.now <= *margin_ends) {
          outcome.look_again_at = margin_ends;
          return outcome;
        }
        outcome.stop = ref(*launcher_pod);
        outcome.stop_message = current.id + " attempt " + std::to_string(attempt) + ": worker " + failed_worker->name +
                               " ended mid-case and worker 0's command runs on (waiting on its lost peer?): " +
                               launcher_pod->name + " is deleted so that its dlbench-exec stops the command and hands "
                               "back the repeats it completed";
        return outcome;
      }
      if (launcher_pod->deletion_at && world.now <= *launcher_pod->deletion_at + margin) {
        outcome.look_again_at = *launcher_pod->deletion_at + margin;
        return outcome;
      }
    }
    outcome.finished = true;
    outcome.result = failure(current.spec, reason, message, attempt, world.now);
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
    if (launcher_pod != nullptr && launcher_pod->failed && launcher_pod->failure_reason != "Error" &&
        launcher_pod->failure_reason != "PodFailed" && !launcher_pod->failure_reason.empty()) {
      // The node's word on the launcher pod (OOMKilled, Evicted, …) says why better than mpirun.
      reason = launcher_pod->failure_reason;
      message = "launcher " + launcher_pod->name + ": " + launcher_pod->failure_message +
                (message.empty() ? "" : "; last output: " + message);
    }
    // The Job's deadline, or the launcher's own stop at the case's (its message says which words).
    if (launcher_job != nullptr && launcher_job->failure_reason == "DeadlineExceeded") reason = "Timeout";
    if (launcher_pod != nullptr && is_timeout_message(launcher_pod->termination_message)) reason = "Timeout";
    if (message.empty() && launcher_pod != nullptr) message = launcher_pod->failure_message;
    if (message.empty() && launcher_job != nullptr) message = launcher_job->failure_message;
    outcome.result = failure(current.spec, reason, message.substr(0, 1024), attempt, world.now);
    return outcome;
  }
  // 4. Out of time.
  const std::optional<TimePoint> clock = attempt_clock(run, current, attempt, world);
  // A launcher stops the case at the limit itself and hands back what it measured: given the time.
  const auto limit = std::chrono::seconds(run.spec.limits.case_timeout_seconds +
                                          (launcher_job != nullptr ? kLauncherStopMarginSeconds : 0));
  if (clock && world.now - *clock > limit) {
    outcome.finished = true;
    std::string message = timeout_message(run.spec.limits.case_timeout_seconds);
    if (unschedulable != nullptr) message += "; worker " + unschedulable->name + " unschedulable: " + unschedulable->failure_message;
    outcome.result = failure(current.spec, unschedulable != nullptr ? "Unschedulable" : "Timeout", message, attempt,
                             world.now);
  }
  return outcome;
}

// Creates what is missing of the current attempt, the launcher last.
void create_missing(const BenchmarkRun& run, const PlannedCase& current, int attempt, const World& world,
                    const OperatorConfig& config, const KeySource& keys, Actions& actions) {
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
  if (config.disruption_budgets && !present.contains("PodDisruptionBudget/" + names.budget)) {
    actions.create.push_back(build_disruption_budget(run, current.spec, attempt));
  }
  const bool all_ran = every_worker_ran(world, names);
  int ready = 0;
  const ObservedPod* first = nullptr;  // worker 0, once it exists
  for (int i = 0; i < current.spec.nodes; ++i) {
    const std::string name = names.worker(i);
    const auto pod = std::find_if(world.pods.begin(), world.pods.end(), [&](const ObservedPod& p) { return p.name == name; });
    if (pod == world.pods.end()) {
      // Once every worker ran, a worker gone is lost (judge): a new one would join no job.
      if (!all_ran) actions.create.push_back(build_worker_pod(run, current.spec, attempt, i, config));
      continue;
    }
    if (i == 0) first = &*pod;
    if (pod->ready) ++ready;
  }
  // Volcano / scheduler-plugins: the PodGroup, owned by worker 0, while the workers wait for it.
  if (first != nullptr && first->phase == "Pending" && !first->uid.empty()) {
    if (auto group = build_pod_group(run, current.spec, attempt, config, first->name, first->uid)) {
      actions.create.push_back(std::move(*group));
    }
  }
  // engine: command has no launcher to say that every worker ran: a record says it.
  if (wrapped && ready == current.spec.nodes && !all_ran) {
    actions.create.push_back(build_started_record(run, current.spec, attempt, rfc3339_utc(world.now)));
  }
  // The launcher must not race its workers: it starts when every sshd answers.
  if (!wrapped && ready == current.spec.nodes && !present.contains("Job/" + names.launcher)) {
    // The launcher stops the case when its time is spent, to hand back what it measured.
    std::optional<LauncherDeadline> deadline;
    if (const auto clock = attempt_clock(run, current, attempt, world)) {
      const std::chrono::seconds limit(run.spec.limits.case_timeout_seconds);
      deadline = LauncherDeadline{(limit - std::chrono::duration_cast<std::chrono::seconds>(world.now - *clock)).count(),
                                  *clock + limit};
    }
    actions.create.push_back(build_launcher_job(run, current.spec, attempt, config, deadline));
    actions.events.push_back(
        {"Normal", "LauncherCreated", current.id + " attempt " + std::to_string(attempt), "Job/" + names.launcher});
  }
}

}  // namespace

Actions reconcile(const json& run_json, const World& world, const OperatorConfig& config, const KeySource& keys) {
  Actions actions;
  const std::string now = rfc3339_utc(world.now);
  const std::int64_t generation = run_json.value("metadata", json::object()).value("generation", 0);
  const auto decoded = decode_benchmark_run(run_json);

  BenchmarkRunStatus previous;
  if (run_json.contains("status")) {
    if (auto s = decode_status(run_json["status"]); s.ok()) previous = *s.value;
  }
  const auto remove_all_children = [&] {
    for (const auto* o : children(world)) {
      if (!o->deleting) actions.remove.push_back(ref(*o));
    }
  };

  if (!decoded.ok()) {
    std::string message;
    for (const auto& e : decoded.errors) message += (message.empty() ? "" : "; ") + e.to_string();
    actions.current = previous;
    mark_invalid(actions.current, message, generation, now);
    remove_all_children();
    if (actions.current != previous) {
      actions.status = actions.current;
      actions.events.push_back({"Warning", "InvalidSpec", message, {}});
    }
    return actions;
  }
  const BenchmarkRun& run = *decoded.value;
  RunStateMachine machine(previous, plan_cases(run.spec), run.spec.methodology, generation,
                          1 + run.spec.limits.backoff_limit, now, plan_preflight(run.spec));

  if (!machine.finished() && machine.status().phase == Phase::Pending && !world.admission.admitted) {
    // Waiting for a slot under the operator's limit on concurrent cases: nothing is created, and
    // no case timeout runs.
    machine.queue(world.admission.why);
    remove_all_children();
    actions.requeue_after = std::chrono::seconds(2);
  } else if (!machine.finished()) {
    // The stored spec may leave the learning rate to the model: the event says which one runs.
    machine.admit(describe_optimizer(run.spec));
    const PlannedCase& current = *machine.current();
    const int attempt = machine.attempt();

    // Anything from another case or an older attempt is a leftover.
    for (const auto* o : children(world)) {
      if ((o->case_id != current.id || o->attempt != attempt) && !o->deleting) actions.remove.push_back(ref(*o));
    }
    const std::vector<const ObservedPod*> ending = unended_previous_pods(world, current.id, attempt);
    if (world.shared_node || previous_worker_shares_a_node(world, current.id, attempt, ending)) {
      machine.note_shared_node();
    }

    AttemptOutcome outcome = judge(run, current, attempt, world);
    if (const char* group_version = run.spec.worker.gang ? pod_group_api_version(run.spec.worker.gang->scheduler) : nullptr;
        !outcome.finished && group_version != nullptr && !world.pod_groups_served(group_version)) {
      // Nothing would ever admit the pods: say why now rather than time out.
      const GangScheduler scheduler = run.spec.worker.gang->scheduler;
      outcome.finished = true;
      outcome.result = failure(
          current.spec, kReasonGangSchedulerUnavailable,
          "spec.worker.gang.scheduler " + std::string(to_string(scheduler)) + " needs PodGroups (" + group_version +
              "), which this cluster does not serve: install " +
              (scheduler == GangScheduler::volcano ? "Volcano" : "the scheduler-plugins PodGroup CRD") +
              ", or use gang.scheduler kueue or no gang",
          attempt, world.now);
    }
    if (outcome.presumed_gone) actions.presumed_gone.push_back(*outcome.presumed_gone);
    if (outcome.stop) {
      actions.remove.push_back(*outcome.stop);
      actions.events.push_back({"Warning", "StoppingWorkerZero", outcome.stop_message, {}});
    }
    if (outcome.finished) {
      for (const auto* o : children(world)) {
        if (o->case_id == current.id && o->attempt == attempt && !o->deleting) actions.remove.push_back(ref(*o));
      }
      outcome.result.ran_alone = !machine.status().progress.shared_node;
      machine.attempt_ended(std::move(outcome.result));
      actions.requeue_after = std::chrono::seconds(1);
    } else if (const bool begun = attempt_started(world, current.id, attempt).has_value();
               !begun && !ending.empty() &&
               !std::all_of(ending.begin(), ending.end(), [&](const ObservedPod* p) { return overdue(*p, world.now); })) {
      // Nothing of this attempt until the pods before it have ended; no clock runs meanwhile.
      machine.await_previous_pods(awaiting_message(current.id, attempt, ending));
      actions.requeue_after = std::chrono::seconds(1);
    } else {
      machine.await_previous_pods("");
      if (!begun && !ending.empty()) {
        // Announced with worker 0: once, by the pass that starts the attempt.
        actions.events.push_back({"Warning", "PreviousPodsNotEnded",
                                  awaiting_message(current.id, attempt, ending) + "; they have not, " +
                                      std::to_string(kPreviousPodsOverdueSeconds) +
                                      " s past their grace (a lost node?): it starts beside them, not ranAlone "
                                      "where one shares its node",
                                  "Pod/" + child_names(run.metadata.name, current.id, attempt).worker(0)});
      }
      create_missing(run, current, attempt, world, config, keys, actions);
      // Wake up for the timeout even if nothing else changes (nothing to wait for while a gang is
      // in its queue: its admission is an event of its own).
      const std::optional<TimePoint> clock = attempt_clock(run, current, attempt, world);
      const auto deadline = clock.value_or(world.now) + std::chrono::seconds(run.spec.limits.case_timeout_seconds);
      const auto left = std::chrono::duration_cast<std::chrono::seconds>(deadline - world.now) + std::chrono::seconds(1);
      actions.requeue_after = std::max(std::chrono::seconds(1), std::min(left, std::chrono::seconds(60)));
    }
    if (!outcome.finished && outcome.look_again_at) {
      const auto until = std::chrono::duration_cast<std::chrono::seconds>(*outcome.look_again_at - world.now) + std::chrono::seconds(1);
      actions.requeue_after = std::max(std::chrono::seconds(1), std::min(actions.requeue_after.value_or(until), until));
    }
  }
  if (machine.finished()) {
    remove_all_children();
    actions.requeue_after.reset();
  }
  for (auto& e : machine.take_events()) actions.events.push_back({e.type, e.reason, e.message, {}});
  // A removal asked for twice is asked for once.
  std::vector<ObjectRef> unique;
  for (const auto& r : actions.remove) {
    if (std::find(unique.begin(), unique.end(), r) == unique.end()) unique.push_back(r);
  }
  actions.remove = std::move(unique);
  actions.current = machine.status();
  actions.statistic = run.spec.methodology.statistic;
  if (actions.current != previous) actions.status = actions.current;
  return actions;
}

}  // namespace dlbench::operator_
