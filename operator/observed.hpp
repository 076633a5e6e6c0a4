// What the reconciler sees of the world: the run's children as the API server reports
// them, reduced to the facts that decide what to do next.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dlbench/core/status.hpp"

namespace dlbench::operator_ {

using TimePoint = std::chrono::system_clock::time_point;

// "2026-11-21T05:00:00Z" → time point; nullopt when absent or malformed (core's, status.hpp).
using dlbench::parse_rfc3339;

struct ObservedObject {
  std::string kind, name, uid;
  std::string case_id;
  int attempt = 0;
  std::string role;  // worker, launcher, ssh, hostfile
  std::optional<TimePoint> created;
  bool deleting = false;
  // metadata.deletionTimestamp: for a pod, when its grace ends and its kubelet should have stopped it.
  std::optional<TimePoint> deletion_at;
};

struct ObservedPod : ObservedObject {
  std::string phase;  // Pending, Running, Succeeded, Failed
  bool ready = false;
  // Why it cannot go on, in the most specific words available: the container's terminated
  // reason (OOMKilled, Error with exit code), the pod's reason (Evicted), or scheduling
  // (Unschedulable with the scheduler's message). Empty while healthy.
  std::string failure_reason, failure_message;
  bool failed = false;          // terminally: phase Failed or a terminated container
  // When: the failed container's finishedAt, else when the pod stopped being Ready; unknown without either.
  std::optional<TimePoint> failed_at;
  // Why it is being taken down, where the cluster says (the DisruptionTarget condition: "reason:
  // message", EvictionByEvictionAPI from a drain, PreemptionByScheduler, DeletionByTaintManager, …).
  std::string disruption;
  bool unschedulable = false;   // not failed yet: the cluster may still make room
  std::string termination_message;  // of the first container, when terminated
  std::string node;                 // spec.nodeName, once scheduled
  bool gated = false;               // spec.schedulingGates not yet removed (Kueue has not admitted it)
  // When the scheduler first judged it after its gates went (PodScheduled's transition, unless
  // SchedulingGated): a gated case's clock starts there, not at creation.
  std::optional<TimePoint> scheduling_since;
};

struct ObservedJob : ObservedObject {
  bool succeeded = false, failed = false;
  std::string failure_reason, failure_message;  // the Failed condition's (DeadlineExceeded, …)
};

ObservedPod observe_pod(const nlohmann::json& pod);
ObservedJob observe_job(const nlohmann::json& job);
ObservedObject observe_object(const nlohmann::json& object);

}  // namespace dlbench::operator_
