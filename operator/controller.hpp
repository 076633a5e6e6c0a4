// The controller loop: informers (informer.hpp) keep slim caches of the runs and their children
// (cached.hpp) and enqueue the owning run on every change; workers take keys from the work
// queue, call reconcile() on the cached world, and apply its actions through the client.
//
// Against a stale cache: a status write is conditioned on the resourceVersion the reconcile
// read (409 → requeue), and after a write, or after creating children, the run is not reconciled
// again until the caches show the write and the children (expectations, as Kubernetes'
// ReplicaSet controller keeps them): a cache without them would have it create them again.
// Before creating children the run is read from the API server itself: a run being deleted, or
// gone, gets no new child. Every reconcile outcome and every list/watch error is logged (one
// JSON line, with the run and a reconcile id) and counted.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string_view>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cached.hpp"
#include "dlbench/core/status.hpp"
#include "dlbench/metrics/metrics.hpp"
#include "informer.hpp"
#include "kube_client.hpp"
#include "manifests.hpp"
#include "reconciler.hpp"
#include "work_queue.hpp"

namespace dlbench::operator_ {

// One JSON line on stderr: {"level":…,"msg":…, fields…}.
void log_line(const std::string& level, const std::string& message, const nlohmann::json& fields = nlohmann::json::object());

struct ControllerOptions {
  std::string namespace_;  // empty: every namespace
  int workers = 2;
  OperatorConfig config;
  std::chrono::seconds watch_timeout{60};
  // At most this many cases run at once, operator-wide (each run runs its cases one at a time,
  // so this is also the number of Running runs); 0: no limit. Others wait, Pending, in order.
  int max_concurrent_cases = 1;
  bool log_unchanged = false;  // also log reconciles that changed nothing (--log-level debug)
  // Whether this replica may still write (it holds the Lease); checked before every write.
  std::function<bool()> may_write = [] { return true; };
  // The clocks it reads (tests pass their own): steady for delays, expiries and durations; the
  // system's for the times written into statuses and events.
  std::function<std::chrono::steady_clock::time_point()> steady_now = std::chrono::steady_clock::now;
  std::function<std::chrono::system_clock::time_point()> system_now = std::chrono::system_clock::now;
};

// What one reconcile did, for the log and the dlbench_operator_reconciles_total{result} counter.
enum class ReconcileOutcome {
  changed,    // wrote a status, created or deleted children
  unchanged,  // the world already matched
  queued,     // waiting for a case slot (--max-concurrent-cases)
  stale,      // the cache has not seen our last status write yet
  gone,       // deleted, or being deleted
  conflict,   // the status write refused with 409 on a fresh read too
  error,      // an exception: retried with backoff
};
std::string_view to_string(ReconcileOutcome outcome);

class Controller {
 public:
  Controller(KubeClient& client, ControllerOptions options);
  ~Controller();
  void start();
  void stop();
  bool synced() const;
  // Synced and in touch with the API server: what /readyz reports.
  bool healthy() const;
  metrics::Registry& registry() { return registry_; }

 private:
  void work();
  ReconcileOutcome process(const std::string& key, std::uint64_t reconcile_id, nlohmann::json& fields);
  // Whether our last status write for `key` is not yet in the cache (`run` as cached).
  bool own_write_pending(const std::string& key, const CachedRun& cached, const nlohmann::json& run);
  // The run's children and neighbours as the caches hold them now.
  World observe(const std::string& ns, const std::string& name, const CachedRun& cached);
  // The children ("Kind/name") this operator created for the run that are not in the caches yet.
  std::set<std::string> creations_pending(const std::string& key, const CachedRun& cached);
  // An informer showed (or dropped) a child: it is no longer awaited.
  void child_seen(const std::string& run_key, const std::string& child);
  // An informer of `kind` announced a list asked for at `asked_at`: a child of that kind whose
  // creation was acknowledged before then and that the list did not hold is gone (deleted, or lost
  // by the API server), not late, and is no longer awaited. Likewise a run's status written before
  // then: the list shows the run as it is now, whether or not our write is still in it.
  void listed(const std::string& kind, std::chrono::steady_clock::time_point asked_at);
  // Whether an informer caches objects of `kind`.
  bool cached_kind(const std::string& kind) const;
  // Creates and deletes what the reconcile asked for; fills `fields` with the counts.
  struct Applied {
    std::set<std::string> created;  // "Kind/name"; not those the API server already held
    int deleted = 0;
  };
  Applied apply_children(const CachedRun& cached, const Actions& actions, nlohmann::json& fields);
  // Best effort: an Event that cannot be written must not fail a reconcile that changed the world.
  void record_event(const CachedRun& cached, const Event& event, TimePoint now, std::uint64_t reconcile_id);
  void enqueue_waiting_runs();
  void enqueue_neighbours(const CachedPod& pod);
  Admission admission_for(const CachedRun& run);
  // Discovery, remembered: whether the cluster serves PodGroups in `api_version`.
  bool pod_groups_served(const std::string& api_version);
  bool shares_a_node(const std::string& ns, const std::string& name, const std::vector<ObservedPod>& pods) const;
  void forget(const std::string& ns, const std::string& name);
  // Writes the status diff conditioned on the run's version as this reconcile read it; on a 409
  // reads the run afresh and writes again where only its metadata moved.
  struct StatusWrite {
    std::optional<ReconcileOutcome> refused;  // when not written: conflict or gone
    nlohmann::json stored;  // else the status as the API server stored it
    bool too_large = false;  // refused as more than the API server or its etcd takes
  };
  StatusWrite write_status(const std::string& ns, const std::string& name, const nlohmann::json& run,
                           const std::string& version, const nlohmann::json& patch);
  // `wanted` as a patch over the run's status, written with as much of each result as the API
  // server takes (ResultDetail, remembered for the run); nullopt where nothing changed.
  std::optional<StatusWrite> write_status_that_fits(const std::string& ns, const std::string& name,
                                                    const nlohmann::json& run, const std::string& version,
                                                    const BenchmarkRunStatus& wanted);
  void record_metrics(const std::string& ns, const std::string& name, const BenchmarkRunStatus& status,
                      Statistic statistic);

  KubeClient& client_;
  ControllerOptions options_;
  WorkQueue queue_;
  std::unique_ptr<Informer<CachedRun>> runs_;
  std::unique_ptr<Informer<CachedPod>> pods_;
  std::unique_ptr<Informer<CachedJob>> jobs_;
  std::vector<std::unique_ptr<Informer<CachedObject>>> others_;  // Secrets, ConfigMaps, Services
  std::vector<InformerBase*> informers_;  // all of the above
  std::vector<std::thread> workers_;
  std::atomic<std::uint64_t> event_counter_{0}, reconcile_counter_{0};
  // Expectations: run key → the status our last write left on the API server. Only this operator
  // writes a run's status, so while the cache shows another status of the same run, the cache has
  // not seen our write (whatever other writers did to the run's metadata meanwhile).
  struct WrittenStatus {
    std::string uid;
    nlohmann::json status;
    std::chrono::steady_clock::time_point at;
    // When the API server answered the write, on the steady clock (listed() compares it).
    std::chrono::steady_clock::time_point acknowledged;
  };
  mutable std::mutex expectations_mutex_;
  std::map<std::string, WrittenStatus> written_;
  // And run key → the children it created ("Kind/name") that no informer has shown yet, each with
  // when the API server acknowledged its creation (the steady clock; none while the create is out).
  struct AwaitedChildren {
    std::string uid;
    std::map<std::string, std::optional<std::chrono::steady_clock::time_point>> unseen;
    std::chrono::steady_clock::time_point since;
  };
  std::map<std::string, AwaitedChildren> awaited_;
  // Whether to log this stale pass of `key`: the first of a wait for `awaiting`, then one every
  // 10 s with how long it has waited (the passes come every 100 ms; the counter counts them all).
  bool log_stale(const std::string& key, const nlohmann::json& awaiting, nlohmann::json& fields);
  struct StaleWait {
    nlohmann::json awaiting;
    std::chrono::steady_clock::time_point since, logged;
  };
  std::mutex stale_mutex_;
  std::map<std::string, StaleWait> stale_waits_;  // run key → the wait its last pass logged
  // Admission: runs granted a slot whose Running status the cache does not show yet.
  std::mutex admission_mutex_;
  std::set<std::string> reservations_;
  // Discovery answers, by PodGroup apiVersion.
  struct Served {
    bool served = false;
    std::chrono::steady_clock::time_point at;
  };
  std::mutex discovery_mutex_;
  std::map<std::string, Served> served_;
  metrics::Registry registry_;
  metrics::Family<metrics::Counter>* reconciles_;
  metrics::Family<metrics::Counter>* api_errors_;
  metrics::Family<metrics::Counter>* watch_stalls_;
  metrics::Family<metrics::Counter>* expectations_abandoned_;
  metrics::Family<metrics::Counter>* results_trimmed_;
  metrics::Family<metrics::Counter>* events_;
  // How much of each result a run's status keeps (ResultDetail): less once a write of it was
  // refused as too large; by run key, under expectations_mutex_.
  std::map<std::string, ResultDetail> result_detail_;
  metrics::Family<metrics::Gauge>* case_cpu_pressure_;
  metrics::Family<metrics::Gauge>* case_repeats_cv_;
  metrics::Family<metrics::Gauge>* case_scaling_refused_;
  metrics::Family<metrics::Gauge>* case_loss_;
  metrics::Family<metrics::Gauge>* case_flops_;
  metrics::Family<metrics::Gauge>* case_mfu_;
  metrics::Family<metrics::Gauge>* case_energy_;
  metrics::Family<metrics::Gauge>* case_power_;
  metrics::Family<metrics::Gauge>* case_exposed_communication_;
  metrics::Family<metrics::Gauge>* case_bus_bandwidth_;
  metrics::Family<metrics::Gauge>* case_info_;
  metrics::Counter* status_conflicts_;
  metrics::Histogram* reconcile_seconds_;
  metrics::Gauge* queue_depth_;
  metrics::Gauge* cases_running_;
  metrics::Family<metrics::Gauge>* runs_by_phase_;
  metrics::Family<metrics::Gauge>* case_throughput_;
  metrics::Family<metrics::Gauge>* case_throughput_sequences_;
  metrics::Family<metrics::Gauge>* case_speedup_;
  metrics::Family<metrics::Gauge>* case_efficiency_;
  metrics::Family<metrics::Gauge>* case_devices_;
  metrics::Family<metrics::Gauge>* case_failed_;
};

}  // namespace dlbench::operator_
