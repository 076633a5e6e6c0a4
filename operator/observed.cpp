#include "observed.hpp"

#include <string_view>

namespace dlbench::operator_ {

ObservedObject observe_object(const nlohmann::json& object) {
  ObservedObject o;
  o.kind = object.value("kind", "");
  const auto& meta = object.value("metadata", nlohmann::json::object());
  o.name = meta.value("name", "");
  o.uid = meta.value("uid", "");
  const auto labels = meta.value("labels", nlohmann::json::object());
  o.case_id = labels.value("dlbench.io/case", "");
  o.role = labels.value("app.kubernetes.io/component", "");
  try {
    o.attempt = std::stoi(labels.value("dlbench.io/attempt", "0"));
  } catch (const std::exception&) {
    o.attempt = 0;
  }
  o.created = parse_rfc3339(meta.value("creationTimestamp", ""));
  o.deleting = meta.contains("deletionTimestamp");
  if (o.deleting) o.deletion_at = parse_rfc3339(meta.value("deletionTimestamp", ""));
  return o;
}

ObservedPod observe_pod(const nlohmann::json& pod) {
  ObservedPod p;
  static_cast<ObservedObject&>(p) = observe_object(pod);
  const auto status = pod.value("status", nlohmann::json::object());
  p.phase = status.value("phase", "Pending");
  const auto spec = pod.value("spec", nlohmann::json::object());
  p.node = spec.value("nodeName", "");
  p.gated = !spec.value("schedulingGates", nlohmann::json::array()).empty();
  std::optional<TimePoint> not_ready_since;
  for (const auto& c : status.value("conditions", nlohmann::json::array())) {
    if (c.value("type", "") == "Ready") p.ready = c.value("status", "") == "True";
    if (c.value("type", "") == "Ready" && !p.ready) not_ready_since = parse_rfc3339(c.value("lastTransitionTime", ""));
    if (c.value("type", "") == "DisruptionTarget" && c.value("status", "") == "True") {
      p.disruption = c.value("reason", "") + (c.value("message", "").empty() ? "" : ": " + c.value("message", ""));
    }
    if (c.value("type", "") == "PodScheduled" && c.value("reason", "") != "SchedulingGated") {
      p.scheduling_since = parse_rfc3339(c.value("lastTransitionTime", ""));
    }
    if (c.value("type", "") == "PodScheduled" && c.value("status", "") == "False" &&
        c.value("reason", "") == "Unschedulable") {
      p.unschedulable = true;
      p.failure_reason = "Unschedulable";
      p.failure_message = c.value("message", "");
    }
  }
  // Init containers first: one that failed (an image without dlbench-exec, say) is why the pod did.
  for (const char* statuses : {"initContainerStatuses", "containerStatuses"}) {
    const bool init = std::string_view(statuses) == "initContainerStatuses";
    for (const auto& cs : status.value(statuses, nlohmann::json::array())) {
      const auto state = cs.value("state", nlohmann::json::object());
      if (!state.contains("terminated")) continue;
      const auto& t = state["terminated"];
      if (!init && p.termination_message.empty()) p.termination_message = t.value("message", "");
      const int exit_code = t.value("exitCode", 0);
      if ((exit_code != 0 || t.value("reason", "") == "OOMKilled") && !p.failed) {
        p.failed = true;
        p.failed_at = parse_rfc3339(t.value("finishedAt", ""));
        p.failure_reason = t.value("reason", "Error");
        p.failure_message = std::string(init ? "init container " : "container ") + cs.value("name", "?") +
                            " exited with code " + std::to_string(exit_code);
        if (!t.value("message", "").empty()) p.failure_message += ": " + t.value("message", "");
      }
    }
  }
  if (p.phase == "Failed") {
    if (!p.failed_at) p.failed_at = not_ready_since;
    p.failed = true;
    if (status.contains("reason")) {  // Evicted, DeadlineExceeded, … outrank the container's words
      p.failure_reason = status.value("reason", "");
      p.failure_message = status.value("message", "");
    } else if (p.failure_reason.empty()) {
      p.failure_reason = "PodFailed";
    }
  }
  // Running pods count as healthy even if a restart once failed (restartPolicy is Never).
  if (!p.failed && !p.unschedulable) {
    p.failure_reason.clear();
    p.failure_message.clear();
  }
  return p;
}

ObservedJob observe_job(const nlohmann::json& job) {
  ObservedJob j;
  static_cast<ObservedObject&>(j) = observe_object(job);
  const auto status = job.value("status", nlohmann::json::object());
  for (const auto& c : status.value("conditions", nlohmann::json::array())) {
    if (c.value("status", "") != "True") continue;
    if (c.value("type", "") == "Complete") j.succeeded = true;
    if (c.value("type", "") == "Failed") {
      j.failed = true;
      j.failure_reason = c.value("reason", "Failed");
      j.failure_message = c.value("message", "");
    }
  }
  if (status.value("succeeded", 0) > 0) j.succeeded = true;
  return j;
}

}  // namespace dlbench::operator_
