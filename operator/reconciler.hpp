// Level-based reconciliation of one BenchmarkRun: from the run and what exists now to what
// should be done, with the status rebuilt from both. No I/O: the controller lists the world,
// calls reconcile(), and applies the actions (create-if-missing, delete, status patch, events).
//
// Per run, cases go one at a time in plan order; the first planned case without a result is
// the current one. Its attempt's children are created; the launcher only once every worker
// is Ready. The attempt ends with the launcher's result (its termination message), or with a
// failure named by its most specific witness: a worker's OOMKilled/Evicted/exit code before
// the launcher's "mpirun failed", Unschedulable when it timed out that way. A failed attempt
// is retried with fresh objects up to limits.backoffLimit; a finished case is never run again.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dlbench/core/benchmark_run.hpp"
#include "dlbench/core/run_state.hpp"
#include "manifests.hpp"
#include "observed.hpp"

namespace dlbench::operator_ {

// Whether the operator's limit on concurrent cases lets a Pending run start.
struct Admission {
  bool admitted = true;
  std::string why;  // when not: for the Queued condition
};

struct World {
  std::vector<ObservedPod> pods;      // every pod labelled with this run
  std::vector<ObservedJob> jobs;      // every job labelled with this run
  std::vector<ObservedObject> others;  // its secrets, config maps, services and pod groups
  TimePoint now;
  Admission admission;
  bool shared_node = false;  // another case's worker pod is on a node of this run's workers
  // Whether the API server serves PodGroups in this apiVersion (discovery: the gang scheduler's
  // CRD is installed). Asked only for a running case whose gang needs a PodGroup.
  std::function<bool(const std::string& api_version)> pod_groups_served = [](const std::string&) { return true; };
};

struct ObjectRef {
  std::string kind, name;
  bool operator==(const ObjectRef&) const = default;
};

struct Event {
  std::string type;  // Normal | Warning
  std::string reason, message;
  // "Kind/name" of the child whose creation the event announces: recorded only where this
  // reconcile created it (not where the API server answered that it exists already).
  std::string announces;
};

struct Actions {
  std::vector<nlohmann::json> create;  // create if missing (AlreadyExists is success)
  std::vector<ObjectRef> remove;
  std::optional<BenchmarkRunStatus> status;  // only when it changed
  BenchmarkRunStatus current;                 // the status after this reconcile, changed or not
  Statistic statistic = Statistic::median;    // the run's, for the case gauges
  std::vector<Event> events;
  std::optional<std::chrono::seconds> requeue_after;
  // Children whose absence from the caches a decision here rests on (a worker taken as deleted
  // because its pod is missing once every worker ran). One informer may relist before another
  // (an API server restored from a backup): the started record back, the pods not yet. The
  // controller asks the API server for each before acting, and waits where it still holds one.
  std::vector<ObjectRef> presumed_gone;
};

using KeySource = std::function<SshKeyPair()>;

Actions reconcile(const nlohmann::json& run, const World& world, const OperatorConfig& config, const KeySource& keys);

}  // namespace dlbench::operator_
