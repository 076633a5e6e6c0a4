#include "controller.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>

#include "dlbench/core/codec.hpp"
#include "dlbench/core/statistics.hpp"
#include "merge_patch.hpp"

namespace dlbench::operator_ {

using nlohmann::json;

void log_line(const std::string& level, const std::string& message, const json& fields) {
  json line{{"level", level}, {"msg", message}};
  for (const auto& [k, v] : fields.items()) line[k] = v;
  static std::mutex mutex;  // whole lines, never interleaved
  std::lock_guard lock(mutex);
  std::cerr << line.dump(-1, ' ', false, json::error_handler_t::replace) << "\n";
}

namespace {

Resource resource_for(const std::string& kind, const std::string& api_version = "") {
  if (kind == "Pod") return resources::kPods;
  if (kind == "Job") return resources::kJobs;
  if (kind == "Secret") return resources::kSecrets;
  if (kind == "ConfigMap") return resources::kConfigMaps;
  if (kind == "Service") return resources::kServices;
  if (kind == "PodDisruptionBudget") return resources::kPodDisruptionBudgets;
  if (kind == "PodGroup") {
    const auto slash = api_version.find('/');
    return {api_version.substr(0, slash), api_version.substr(slash + 1), "podgroups", true};
  }
  throw std::invalid_argument("no resource for kind " + kind);
}

constexpr const char* kChildSelector = "app.kubernetes.io/managed-by=dlbench-operator";

bool is_deleting(const json& object) { return object["metadata"].contains("deletionTimestamp"); }

// The run as the API server holds it now, against the cached `run` a reconcile judged.
enum class LiveRun {
  gone,   // deleted, being deleted, or another object of its name
  moved,  // its generation, spec or status differ: the cache is behind
  same,   // the same in all a decision reads (metadata alone may differ: another writer's annotations)
};
LiveRun live_against(KubeClient& client, const std::string& ns, const std::string& name, const json& run) {
  const std::optional<json> live = client.find(resources::kBenchmarkRuns, ns, name);
  if (!live || is_deleting(*live) || (*live)["metadata"].value("uid", "") != run["metadata"].value("uid", "")) {
    return LiveRun::gone;
  }
  if ((*live)["metadata"].value("generation", 0) != run["metadata"].value("generation", 0) ||
      live->value("spec", json::object()) != run.value("spec", json::object()) ||
      live->value("status", json::object()) != run.value("status", json::object())) {
    return LiveRun::moved;
  }
  return LiveRun::same;
}

// A write refused for its size: 413 from the API server (3 MiB a request), or etcd's "request is too
// large" (1.5 MiB by default) passed on as a 500.
bool too_large(const KubeError& e) {
  return e.status == 413 || ((e.status == 500 || e.status == 422) &&
                             std::string_view(e.what()).find("too large") != std::string_view::npos);
}

}  // namespace

std::string_view to_string(ReconcileOutcome outcome) {
  switch (outcome) {
    case ReconcileOutcome::changed: return "changed";
    case ReconcileOutcome::unchanged: return "unchanged";
    case ReconcileOutcome::queued: return "queued";
    case ReconcileOutcome::stale: return "stale";
    case ReconcileOutcome::gone: return "gone";
    case ReconcileOutcome::conflict: return "conflict";
    case ReconcileOutcome::error: return "error";
  }
  return "error";
}

Controller::Controller(KubeClient& client, ControllerOptions options)
    : client_(client), options_(std::move(options)),
      queue_(std::chrono::milliseconds(5), std::chrono::seconds(300), options_.steady_now) {
  reconciles_ = &registry_.counter("dlbench_operator_reconciles_total",
                                   "Reconciliations, by result: changed, unchanged, queued, stale (the caches have not "
                                   "seen our last status write or the children we created yet), gone (deleted or being "
                                   "deleted), conflict (the status write refused with 409 on a fresh read too: the "
                                   "run's spec or status moved), "
                                   "error.");
  status_conflicts_ = &registry_
                           .counter("dlbench_operator_status_conflicts_total",
                                    "Status writes refused with 409 (the run changed since it was read); each is "
                                    "followed by a fresh read, and written again where only metadata moved.")
                           .add({});
  api_errors_ = &registry_.counter("dlbench_operator_watch_errors_total",
                                   "Failed lists and watches, by kind and HTTP status (0: no answer; 410: expired, "
                                   "relisted).");
  watch_stalls_ = &registry_.counter("dlbench_operator_watch_stalls_total",
                                     "Watches restarted because the API server sent nothing past their limit (the "
                                     "watch's timeout + 5 s): a hung API server or a path that drops packets.");
  expectations_abandoned_ = &registry_.counter(
      "dlbench_operator_expectations_abandoned_total",
      "Writes the operator awaited in its caches and acted without: `awaiting` status (its status write) or child (a "
      "child it created); `reason` relisted (a list asked for after the write did not hold it: the API server lost it, "
      "or it was overwritten or deleted) or expired (no informer showed it in 5 minutes).");
  results_trimmed_ = &registry_.counter(
      "dlbench_operator_status_results_trimmed_total",
      "Status writes refused as larger than the API server or its etcd takes (a run of hundreds of cases), and "
      "written again keeping less of each result: `detail` trimmed or essential (ResultDetail).");
  events_ = &registry_.counter(
      "dlbench_operator_events_total",
      "Events recorded on BenchmarkRuns, by type and reason: the Warnings (AttemptFailed, StoppingWorkerZero, "
      "PreviousPodsNotEnded, ...) count what went wrong in the cluster around the runs. An event the API server "
      "refused is counted too, and logged.");
  reconcile_seconds_ = &registry_
                            .histogram("dlbench_operator_reconcile_seconds", "Time of one reconciliation.",
                                       metrics::exponential_buckets(0.0005, 2, 16))
                            .add({});
  queue_depth_ = &registry_.gauge("dlbench_operator_queue_depth", "Runs waiting for reconciliation.").add({});
  cases_running_ = &registry_.gauge("dlbench_operator_cases_running", "Runs holding a case slot (Running).").add({});
  runs_by_phase_ = &registry_.gauge("dlbench_operator_runs", "BenchmarkRuns by phase (1 for the run's phase).");
  // One family per unit (the name ends in it): images, and a sequence model's sequences.
  case_throughput_ = &registry_.gauge("dlbench_case_throughput_samples_per_second",
                                      "Reported throughput of a finished case (median unless the run says mean), in "
                                      "samples (images) per second.");
  case_throughput_sequences_ = &registry_.gauge("dlbench_case_throughput_sequences_per_second",
                                                "Reported throughput of a finished case of a sequence model (bert-base), "
                                                "in sequences per second.");
  case_speedup_ = &registry_.gauge("dlbench_case_speedup", "Speed-up of a finished case over its 1x1 case.");
  case_efficiency_ = &registry_.gauge("dlbench_case_scaling_efficiency", "Speed-up / devices of a finished case.");
  case_devices_ = &registry_.gauge("dlbench_case_devices", "Devices (ranks) of a finished case: nodes x gpusPerNode.");
  case_failed_ = &registry_.gauge("dlbench_case_failed", "1 for a case that ended Failed, labelled with its reason.");
  case_scaling_refused_ = &registry_.gauge(
      "dlbench_case_scaling_refused",
      "1 for a finished case whose speed-up and efficiency were not published (impossible, or an unstable case or "
      "baseline: status.results[].scalingRefused says why), else 0.");
  case_repeats_cv_ = &registry_.gauge("dlbench_case_repeats_cv_ratio",
                                      "Spread (stddev / mean) of a finished case's reported repeats; `verdict` is stable "
                                      "or unstable (above methodology.stability.maxCv after the extra repeats).");
  case_cpu_pressure_ = &registry_.gauge("dlbench_case_cpu_pressure_ratio",
                                        "Share of a finished case's measured time in which some task waited for a CPU "
                                        "on its busiest node (PSI); `verdict` is clean or interfered (above 0.1).");
  case_loss_ = &registry_.gauge("dlbench_case_loss",
                                "Training loss after the last repeat of a finished case (status.results[]."
                                "lossAfterRepeats), where the worker or the command reported it.");
  case_flops_ = &registry_.gauge("dlbench_case_training_flops_per_second",
                                 "Training arithmetic of a finished case per device: the worker's FLOPs per sample "
                                 "x the reported throughput / devices (status.results[].flops).");
  case_mfu_ = &registry_.gauge("dlbench_case_mfu_ratio",
                               "Model FLOPs utilisation of a finished case: its training FLOP/s per device over the "
                               "device's dense peak for the precision, where dlbench knows the peak.");
  case_energy_ = &registry_.gauge("dlbench_case_energy_joules_per_sample",
                                  "Energy a finished GPU case's devices drew per sample over its measured steps, from "
                                  "each GPU's energy counter, the devices' summed (status.results[].energy).");
  case_power_ = &registry_.gauge("dlbench_case_power_watts_per_device",
                                 "Average power per device over a finished GPU case's measured steps, from each GPU's "
                                 "energy counter (status.results[].energy).");
  case_exposed_communication_ = &registry_.gauge(
      "dlbench_case_exposed_communication_ratio",
      "Share of a finished multi-rank case's step its gradient reduction added (1 - the step's time without the "
      "reduction / with it; status.results[].communication).");
  case_bus_bandwidth_ = &registry_.gauge(
      "dlbench_case_allreduce_bus_bandwidth_bytes_per_second",
      "Bus bandwidth of a finished multi-rank case's whole-gradient allreduce timed alone, as nccl-tests reports it "
      "(status.results[].communication).");
  case_info_ = &registry_.gauge("dlbench_case_info",
                                "What measured a finished case (status.results[].environment): the backend, the GPU "
                                "and CPU models, driver and library versions, dlbench's version; always 1.");
  const auto on_error = [this](const std::string& kind, const std::string& what, int status) {
    if (status == Informer<CachedRun>::kStalledWatch) {
      watch_stalls_->add({{"kind", kind}}).increment();
      log_line("warning", "watch stalled, restarting it: the API server sends nothing", {{"kind", kind}, {"error", what}});
      return;
    }
    api_errors_->add({{"kind", kind}, {"code", std::to_string(status)}}).increment();
    log_line(status == 410 ? "info" : "warning", status == 410 ? "watch expired, relisting" : "list or watch failed",
             {{"kind", kind}, {"code", status}, {"error", what}});
  };
  const auto on_run = [this](const std::string& type, const CachedRun& run) {
    if (type == "DELETED") {
      forget(run.ns, run.name);
      log_line("info", "run deleted", {{"run", run.key()}});
      enqueue_waiting_runs();  // its slot is free
    }
    queue_.add(run.key());
  };
  // A child's change wakes its owner run, and the child is no longer awaited.
  const auto owner = [this](const std::string& kind, const auto& child) {
    if (child.run.empty()) return;
    child_seen(child.run_key(), kind + "/" + child.facts.name);
    queue_.add(child.run_key());
  };
  const auto on_listed = [this](const std::string& kind, std::chrono::steady_clock::time_point asked_at) {
    listed(kind, asked_at);
  };
  runs_ = std::make_unique<Informer<CachedRun>>(client_, kKind, resources::kBenchmarkRuns, options_.namespace_, "",
                                                options_.watch_timeout, cache_run, on_run, on_error, on_listed);
  pods_ = std::make_unique<Informer<CachedPod>>(
      client_, "Pod", resources::kPods, options_.namespace_, kChildSelector, options_.watch_timeout, cache_pod,
      [this, owner](const std::string&, const CachedPod& pod) {
        owner("Pod", pod);
        enqueue_neighbours(pod);
      },
      on_error, on_listed);
  jobs_ = std::make_unique<Informer<CachedJob>>(
      client_, "Job", resources::kJobs, options_.namespace_, kChildSelector, options_.watch_timeout, cache_job,
      [owner](const std::string&, const CachedJob& job) { owner("Job", job); }, on_error, on_listed);
  std::vector<std::pair<const char*, const Resource*>> other_kinds{
      {"Secret", &resources::kSecrets}, {"ConfigMap", &resources::kConfigMaps}, {"Service", &resources::kServices}};
  if (options_.config.disruption_budgets) other_kinds.emplace_back("PodDisruptionBudget", &resources::kPodDisruptionBudgets);
  for (const auto& [kind, resource] : other_kinds) {
    others_.push_back(std::make_unique<Informer<CachedObject>>(
        client_, kind, *resource, options_.namespace_, kChildSelector, options_.watch_timeout, cache_object,
        [owner, kind](const std::string&, const CachedObject& o) { owner(kind, o); }, on_error, on_listed));
  }
  informers_ = {runs_.get(), pods_.get(), jobs_.get()};
  for (const auto& o : others_) informers_.push_back(o.get());
}

Controller::~Controller() { stop(); }

// A worker placed on (or leaving) a node: the runs with workers there hear of it, so that their
// ranAlone sees every neighbour.
void Controller::enqueue_neighbours(const CachedPod& pod) {
  if (pod.facts.node.empty()) return;
  std::set<std::string> owners;
  pods_->for_each([&](const CachedPod& p) {
    if (p.facts.node == pod.facts.node && !p.run.empty()) owners.insert(p.run_key());
  });
  for (const auto& key : owners) queue_.add(key);
}

void Controller::enqueue_waiting_runs() {
  std::vector<std::string> waiting;
  runs_->for_each([&](const CachedRun& r) {
    if (r.phase == "Pending" && !r.deleting) waiting.push_back(r.key());
  });
  for (const auto& key : waiting) queue_.add(key);
}

void Controller::start() {
  for (auto* i : informers_) i->start();
  for (int w = 0; w < options_.workers; ++w) workers_.emplace_back([this] { work(); });
}

void Controller::stop() {
  queue_.shut_down();
  for (auto& t : workers_) {
    if (t.joinable()) t.join();
  }
  workers_.clear();
  for (auto* i : informers_) i->request_stop();  // all at once: each may be inside a watch
  for (auto* i : informers_) i->stop();
}

bool Controller::synced() const {
  return std::all_of(informers_.begin(), informers_.end(), [](const auto* i) { return i->synced(); });
}

bool Controller::healthy() const {
  return std::all_of(informers_.begin(), informers_.end(), [](const auto* i) { return i->healthy(); });
}

void Controller::forget(const std::string& ns, const std::string& name) {
  const metrics::Labels run{{"namespace", ns}, {"run", name}};
  for (auto* family :
       {runs_by_phase_, case_throughput_, case_throughput_sequences_, case_speedup_, case_efficiency_, case_devices_, case_failed_, case_cpu_pressure_,
        case_repeats_cv_, case_scaling_refused_, case_loss_, case_flops_, case_mfu_, case_energy_, case_power_, case_exposed_communication_,
        case_bus_bandwidth_, case_info_}) {
    family->remove_matching(run);
  }
  {
    std::lock_guard lock(expectations_mutex_);
    written_.erase(ns + "/" + name);
    awaited_.erase(ns + "/" + name);
    result_detail_.erase(ns + "/" + name);
  }
  std::lock_guard lock(admission_mutex_);
  reservations_.erase(ns + "/" + name);
}

Admission Controller::admission_for(const CachedRun& run) {
  if (options_.max_concurrent_cases <= 0 || run.phase != "Pending") return {};
  const std::string key = run.key();
  std::lock_guard lock(admission_mutex_);
  std::set<std::string> holding;
  std::vector<std::pair<std::string, std::string>> waiting;  // (creationTimestamp, key), oldest first
  runs_->for_each([&](const CachedRun& r) {
    const std::string k = r.key();
    if (r.phase == "Running" && !r.deleting) holding.insert(k);
    if (r.phase != "Pending" || r.deleting) {
      reservations_.erase(k);  // the cache shows it Running (counted above), ended, or going
    } else if (!reservations_.contains(k)) {
      waiting.emplace_back(r.created, k);
    }
  });
  for (const auto& k : reservations_) holding.insert(k);
  cases_running_->set(static_cast<double>(holding.size()));
  if (holding.contains(key)) return {};
  std::sort(waiting.begin(), waiting.end());
  const auto free = options_.max_concurrent_cases - static_cast<int>(holding.size());
  const auto position = std::find_if(waiting.begin(), waiting.end(), [&](const auto& w) { return w.second == key; }) -
                        waiting.begin();
  if (position < free) {
    reservations_.insert(key);
    return {};
  }
  return {false, "waiting for a case slot: " + std::to_string(holding.size()) + " of " +
                     std::to_string(options_.max_concurrent_cases) +
                     " running (the operator's --max-concurrent-cases), oldest run first"};
}

bool Controller::pod_groups_served(const std::string& api_version) {
  const auto now = options_.steady_now();
  std::lock_guard lock(discovery_mutex_);
  auto& known = served_[api_version];
  // "Served" is believed for a minute (the CRD may be removed); "not served" is asked again every
  // time, so that a run applied right after the CRD's installation sees it.
  if (!known.served || now - known.at > std::chrono::minutes(1)) {
    known.served = client_.serves(api_version, "podgroups");
    known.at = now;
  }
  return known.served;
}

bool Controller::shares_a_node(const std::string& ns, const std::string& name, const std::vector<ObservedPod>& pods) const {
  std::set<std::string> nodes;
  for (const auto& p : pods) {
    if (p.role == "worker" && !p.node.empty()) nodes.insert(p.node);
  }
  if (nodes.empty()) return false;
  bool shared = false;
  pods_->for_each([&](const CachedPod& c) {
    const ObservedPod& p = c.facts;
    if (shared || p.role != "worker" || c.owned_by(ns, name)) return;
    shared = p.phase != "Succeeded" && p.phase != "Failed" && nodes.contains(p.node);
  });
  return shared;
}

void Controller::work() {
  while (auto key = queue_.get()) {
    queue_depth_->set(static_cast<double>(queue_.depth()));
    if (!synced()) {  // never act on a partial world
      queue_.done(*key);
      queue_.add_after(*key, std::chrono::milliseconds(200));
      continue;
    }
    const std::uint64_t id = ++reconcile_counter_;
    const auto start = options_.steady_now();
    json fields{{"run", *key}, {"reconcile", id}};
    ReconcileOutcome outcome = ReconcileOutcome::error;
    try {
      outcome = process(*key, id, fields);
      if (outcome != ReconcileOutcome::conflict) queue_.forget(*key);
    } catch (const std::exception& e) {
      outcome = ReconcileOutcome::error;
      fields["error"] = e.what();
    }
    const double seconds = std::chrono::duration<double>(options_.steady_now() - start).count();
    reconcile_seconds_->observe(seconds);
    const std::string result(to_string(outcome));
    reconciles_->add({{"result", result}}).increment();
    fields["ms"] = std::round(seconds * 10000) / 10;
    const bool failed = outcome == ReconcileOutcome::error || outcome == ReconcileOutcome::conflict;
    const bool logged = outcome == ReconcileOutcome::stale     ? log_stale(*key, fields.value("awaiting", json()), fields)
                        : outcome == ReconcileOutcome::unchanged ? options_.log_unchanged
                                                                 : true;
    if (outcome != ReconcileOutcome::stale) {
      std::lock_guard lock(stale_mutex_);
      stale_waits_.erase(*key);
    }
    if (logged) log_line(failed ? "warning" : "info", "reconciled " + result, fields);
    queue_.done(*key);
    if (failed) queue_.add_rate_limited(*key);
  }
}

bool Controller::log_stale(const std::string& key, const json& awaiting, json& fields) {
  const auto now = options_.steady_now();
  std::lock_guard lock(stale_mutex_);
  auto it = stale_waits_.find(key);
  if (it == stale_waits_.end() || it->second.awaiting != awaiting) {
    stale_waits_.insert_or_assign(key, StaleWait{awaiting, now, now});
    return true;
  }
  fields["waitedSeconds"] = std::round(std::chrono::duration<double>(now - it->second.since).count() * 10) / 10;
  if (now - it->second.logged < std::chrono::seconds(10)) return options_.log_unchanged;
  it->second.logged = now;
  return true;
}

bool Controller::own_write_pending(const std::string& key, const CachedRun& cached, const json& run) {
  std::lock_guard lock(expectations_mutex_);
  const auto it = written_.find(key);
  // As ControllerExpectations do, an expectation expires (5 minutes): a status someone edited
  // by hand must not stop the run for good.
  if (it == written_.end()) return false;
  if (it->second.uid == cached.uid && it->second.status != run.value("status", json::object())) {
    if (options_.steady_now() - it->second.at < std::chrono::minutes(5)) return true;
    log_line("warning", "its status write never appeared in the cache; acting without it", {{"run", key}});
    expectations_abandoned_->add({{"awaiting", "status"}, {"reason", "expired"}}).increment();
  }
  written_.erase(it);
  return false;
}

World Controller::observe(const std::string& ns, const std::string& name, const CachedRun& cached) {
  World world;
  world.now = options_.system_now();
  // A scan of compact facts: no index to keep in memory, and microseconds at thousands of children.
  for (auto& p : pods_->matching([&](const CachedPod& c) { return c.owned_by(ns, name); })) {
    world.pods.push_back(std::move(p.facts));
  }
  for (auto& j : jobs_->matching([&](const CachedJob& c) { return c.owned_by(ns, name); })) {
    world.jobs.push_back(std::move(j.facts));
  }
  for (const auto& informer : others_) {
    for (auto& o : informer->matching([&](const CachedObject& c) { return c.owned_by(ns, name); })) {
      world.others.push_back(std::move(o.facts));
    }
  }
  world.admission = admission_for(cached);
  world.shared_node = shares_a_node(ns, name, world.pods);
  world.pod_groups_served = [this](const std::string& api_version) { return pod_groups_served(api_version); };
  return world;
}

bool Controller::cached_kind(const std::string& kind) const {
  return std::any_of(informers_.begin(), informers_.end(), [&](const auto* i) { return i->kind() == kind; });
}

Controller::Applied Controller::apply_children(const CachedRun& cached, const Actions& actions, json& fields) {
  const std::string key = cached.key();
  Applied applied;
  for (const auto& object : actions.create) {
    const std::string kind = object.value("kind", "");
    const std::string child = kind + "/" + object["metadata"].value("name", "");
    // Awaited before it is asked for: the watch may show it before create() returns. A kind no
    // informer caches (a PodGroup) is never shown, so it is not awaited.
    const bool awaited = cached_kind(kind);
    if (awaited) {
      std::lock_guard lock(expectations_mutex_);
      auto& entry = awaited_[key];
      if (entry.uid != cached.uid || entry.unseen.empty()) entry = {cached.uid, {}, options_.steady_now()};
      entry.unseen.insert_or_assign(child, std::nullopt);
    }
    const auto acknowledged = [&] {
      if (!awaited) return;
      const auto at = std::chrono::steady_clock::now();
      std::lock_guard lock(expectations_mutex_);
      if (auto it = awaited_.find(key); it != awaited_.end()) {
        if (auto c = it->second.unseen.find(child); c != it->second.unseen.end()) c->second = at;
      }
    };
    const auto not_awaited = [&] {
      if (!awaited) return;
      std::lock_guard lock(expectations_mutex_);
      if (auto it = awaited_.find(key); it != awaited_.end()) it->second.unseen.erase(child);
    };
    try {
      client_.create(resource_for(kind, object.value("apiVersion", "")), cached.ns, object);
      acknowledged();
      applied.created.insert(child);
    } catch (const KubeError& e) {
      not_awaited();
      if (e.status != 409) throw;  // AlreadyExists: the world is ahead of the cache
    } catch (...) {
      not_awaited();
      throw;
    }
  }
  for (const auto& r : actions.remove) applied.deleted += client_.remove(resource_for(r.kind), cached.ns, r.name) ? 1 : 0;
  if (!applied.created.empty()) fields["created"] = applied.created.size();
  if (applied.deleted > 0) fields["deleted"] = applied.deleted;
  return applied;
}

std::set<std::string> Controller::creations_pending(const std::string& key, const CachedRun& cached) {
  std::lock_guard lock(expectations_mutex_);
  const auto it = awaited_.find(key);
  if (it == awaited_.end()) return {};
  if (it->second.uid != cached.uid || it->second.unseen.empty()) {
    awaited_.erase(it);
    return {};
  }
  std::set<std::string> unseen;
  for (const auto& [child, acknowledged] : it->second.unseen) unseen.insert(child);
  // As ControllerExpectations do, an expectation expires (5 minutes): a child gone before any
  // informer saw it, with no list since to show it missing (listed()), must not hold the run for good.
  if (options_.steady_now() - it->second.since >= std::chrono::minutes(5)) {
    log_line("warning", "created children never appeared in the cache; acting without them",
             {{"run", key}, {"children", unseen}});
    expectations_abandoned_->add({{"awaiting", "child"}, {"reason", "expired"}}).increment(static_cast<double>(unseen.size()));
    awaited_.erase(it);
    return {};
  }
  return unseen;
}

void Controller::listed(const std::string& kind, std::chrono::steady_clock::time_point asked_at) {
  if (kind == kKind) {
    // The cache holds each run as listed: a status we wrote before the list was asked for and that
    // the run does not show was lost (an API server restored from a backup) or overwritten by
    // hand. Waiting for it would hold the run for 5 minutes; the run as listed is the world.
    std::map<std::string, WrittenStatus> before;
    {
      std::lock_guard lock(expectations_mutex_);
      for (auto it = written_.begin(); it != written_.end();) {
        if (it->second.acknowledged < asked_at) {
          before.insert(written_.extract(it++));
        } else {
          ++it;
        }
      }
    }
    for (const auto& [key, written] : before) {
      const auto run = runs_->get(key);
      if (!run || run->uid != written.uid || run->parsed().value("status", json::object()) == written.status) continue;
      log_line("warning", "the run's status is not the one it wrote, in a list asked for after the write: acting on the run as listed",
               {{"run", key}});
      expectations_abandoned_->add({{"awaiting", "status"}, {"reason", "relisted"}}).increment();
      queue_.add(key);
    }
    return;
  }
  // The list's objects were announced before this, and each shown child left `unseen`: a child
  // of this kind still there, acknowledged before the list was asked for, was not in it.
  std::map<std::string, std::vector<std::string>> gone;  // run key → children
  {
    std::lock_guard lock(expectations_mutex_);
    for (auto& [key, entry] : awaited_) {
      std::erase_if(entry.unseen, [&](const auto& awaited) {
        const auto& [child, acknowledged] = awaited;
        if (!child.starts_with(kind + "/") || !acknowledged || *acknowledged >= asked_at) return false;
        gone[key].push_back(child);
        return true;
      });
    }
  }
  for (const auto& [key, children] : gone) {
    log_line("warning", "created children are not in a list asked for after their creation: gone, not late; acting without them",
             {{"run", key}, {"children", children}});
    expectations_abandoned_->add({{"awaiting", "child"}, {"reason", "relisted"}}).increment(static_cast<double>(children.size()));
    queue_.add(key);
  }
}

void Controller::child_seen(const std::string& run_key, const std::string& child) {
  std::lock_guard lock(expectations_mutex_);
  if (auto it = awaited_.find(run_key); it != awaited_.end()) it->second.unseen.erase(child);
}

void Controller::record_event(const CachedRun& cached, const Event& event, TimePoint now, std::uint64_t reconcile_id) {
  events_->add({{"reason", event.reason}, {"type", event.type}}).increment();
  const std::string time = rfc3339_utc(now);
  // Unique across operator restarts (as Kubernetes names them: <object>.<hex>).
  char suffix[32];
  std::snprintf(suffix, sizeof suffix, "%llx",
                static_cast<unsigned long long>(now.time_since_epoch().count()) + ++event_counter_);
  try {
    client_.create(resources::kEvents, cached.ns,
                   {{"apiVersion", "v1"},
                    {"kind", "Event"},
                    {"metadata", {{"name", cached.name + "." + suffix}, {"namespace", cached.ns}}},
                    {"involvedObject", {{"apiVersion", kApiVersion}, {"kind", kKind}, {"name", cached.name},
                                        {"namespace", cached.ns}, {"uid", cached.uid}}},
                    {"type", event.type},
                    {"reason", event.reason},
                    {"message", event.message},
                    {"firstTimestamp", time},
                    {"lastTimestamp", time},
                    {"count", 1},
                    {"source", {{"component", "dlbench-operator"}}}});
  } catch (const KubeError& error) {
    log_line("warning", "event not recorded",
             {{"run", cached.ns + "/" + cached.name}, {"reconcile", reconcile_id}, {"error", error.what()}});
  }
}

ReconcileOutcome Controller::process(const std::string& key, std::uint64_t reconcile_id, json& fields) {
  const auto slash = key.find('/');
  const std::string ns = key.substr(0, slash), name = key.substr(slash + 1);
  const auto cached = runs_->get(key);
  if (!cached) {
    forget(ns, name);  // deleted: owner references collect its children
    return ReconcileOutcome::gone;
  }
  if (cached->deleting) return ReconcileOutcome::gone;  // finalizers of others hold it: no new child, no write
  const json run = cached->parsed();
  // The log names what a stale pass waits for: a run held for minutes shows which expectation.
  if (own_write_pending(key, *cached, run)) {
    // Our last status write is not in the cache yet: acting now could run a finished case again.
    fields["awaiting"] = "its own status write";
    queue_.add_after(key, std::chrono::milliseconds(100));
    return ReconcileOutcome::stale;
  }
  if (const auto unseen = creations_pending(key, *cached); !unseen.empty()) {
    // Children we created are not in the caches yet: without them it would create them again.
    fields["awaiting"] = unseen;
    queue_.add_after(key, std::chrono::milliseconds(100));
    return ReconcileOutcome::stale;
  }
  const World world = observe(ns, name, *cached);
  Actions actions = reconcile(run, world, options_.config, [] { return generate_ssh_key_pair(); });
  fields["phase"] = std::string(to_string(actions.current.phase));
  if (!world.admission.admitted) fields["queued"] = world.admission.why;
  if (!options_.may_write()) throw std::runtime_error("this replica no longer holds the Lease");
  for (const ObjectRef& child : actions.presumed_gone) {
    // A live read: the caches may lag one another.
    if (client_.find(resource_for(child.kind), ns, child.name)) {
      fields["awaiting"] = "the cache to show " + child.kind + "/" + child.name + ", which the API server holds";
      queue_.add_after(key, std::chrono::milliseconds(100));
      return ReconcileOutcome::stale;
    }
  }
  if (!actions.create.empty() || !actions.remove.empty()) {
    // The cache may still hold a run that is gone or going, or that the API server holds otherwise:
    // ask it. Children are made and removed for the case the run is on, and a cache that shows
    // another (an API server restored from a backup: the runs' list not yet in, the pods' already)
    // would start a case beside the one running, or delete the running one's pods. Metadata alone
    // (another writer's annotations) changes no decision.
    switch (live_against(client_, ns, name, run)) {
      case LiveRun::gone: return ReconcileOutcome::gone;
      case LiveRun::moved:
        fields["awaiting"] = "the cache to show the run as the API server holds it";
        queue_.add_after(key, std::chrono::milliseconds(100));
        return ReconcileOutcome::stale;
      case LiveRun::same: break;
    }
  }
  // The status first: a result is on record before the children that produced it are deleted, so
  // that a refused write (409) leaves the world as it was, to be judged again on a fresh read.
  ReconcileOutcome outcome = world.admission.admitted ? ReconcileOutcome::unchanged : ReconcileOutcome::queued;
  if (actions.status) {
    if (std::optional<StatusWrite> written = write_status_that_fits(ns, name, run, cached->resource_version, *actions.status)) {
      if (written->refused) return *written->refused;
      {
        std::lock_guard lock(expectations_mutex_);
        written_[key] = {cached->uid, std::move(written->stored), options_.steady_now(), std::chrono::steady_clock::now()};
      }
      fields["statusWritten"] = true;
      // Each result whole in the log as it is recorded: what a status trimmed to fit the API
      // server leaves out (ResultDetail) is kept there.
      const std::size_t recorded = run.value("status", json::object()).value("results", json::array()).size();
      for (std::size_t i = recorded; i < actions.status->results.size(); ++i) {
        log_line("info", "case result recorded", {{"run", key}, {"result", to_json(actions.status->results[i])}});
      }
      if (outcome != ReconcileOutcome::queued) outcome = ReconcileOutcome::changed;
      const bool ended = actions.status->phase == Phase::Succeeded || actions.status->phase == Phase::Failed;
      if (ended && cached->phase == "Running") enqueue_waiting_runs();  // its case slot is free
    }
  }
  // The series follow the status even when this replica did not write it (after a restart).
  record_metrics(ns, name, actions.current, actions.statistic);
  const Applied applied = apply_children(*cached, actions, fields);
  if ((!applied.created.empty() || applied.deleted > 0) && outcome != ReconcileOutcome::queued) {
    outcome = ReconcileOutcome::changed;
  }
  for (const auto& e : actions.events) {
    if (!e.announces.empty() && !applied.created.contains(e.announces)) continue;  // it existed already
    fields["events"].push_back(e.reason);
    record_event(*cached, e, world.now, reconcile_id);
  }
  if (actions.requeue_after) queue_.add_after(key, *actions.requeue_after);
  return outcome;
}

std::optional<Controller::StatusWrite> Controller::write_status_that_fits(const std::string& ns, const std::string& name,
                                                                          const json& run, const std::string& version,
                                                                          const BenchmarkRunStatus& wanted) {
  const std::string key = ns + "/" + name;
  ResultDetail detail = ResultDetail::full;
  {
    std::lock_guard lock(expectations_mutex_);
    if (const auto it = result_detail_.find(key); it != result_detail_.end()) detail = it->second;
  }
  // Only what changed, with removed fields as null.
  const auto patch_for = [&] {
    BenchmarkRunStatus status = wanted;
    keep_result_detail(status, detail);
    return merge_patch_between(run.value("status", json::object()), to_json(status));
  };
  json patch = patch_for();
  if (patch.empty()) return std::nullopt;
  StatusWrite written = write_status(ns, name, run, version, patch);
  // Larger than the API server takes (etcd's 1.5 MiB a request by default: hundreds of cases):
  // written again with less of each result, as far as needed; a run's results never grow back.
  while (written.too_large && detail != ResultDetail::essential) {
    detail = detail == ResultDetail::full ? ResultDetail::trimmed : ResultDetail::essential;
    log_line("warning", "the status is larger than the API server takes: written again with less of each result",
             {{"run", key}, {"detail", to_string(detail)}, {"results", wanted.results.size()}});
    results_trimmed_->add({{"detail", to_string(detail)}}).increment();
    {
      std::lock_guard lock(expectations_mutex_);
      result_detail_[key] = detail;
    }
    patch = patch_for();
    written = write_status(ns, name, run, version, patch);
  }
  if (written.too_large) {
    throw std::runtime_error("the status is larger than the API server takes, even with each result's essentials only");
  }
  return written;
}

Controller::StatusWrite Controller::write_status(const std::string& ns, const std::string& name, const json& run,
                                                const std::string& version, const json& patch) {
  const auto write = [&](const json& metadata) -> StatusWrite {
    try {
      const json stored =
          client_.merge_patch(resources::kBenchmarkRuns, ns, name, {{"metadata", metadata}, {"status", patch}}, "status");
      return {std::nullopt, stored.value("status", json::object())};
    } catch (const KubeError& e) {
      if (e.status == 404) return {ReconcileOutcome::gone, {}};
      if (too_large(e)) return {std::nullopt, {}, true};
      if (e.status != 409) throw;
      status_conflicts_->increment();
      return {ReconcileOutcome::conflict, {}};
    }
  };
  // Conditioned on the version this reconcile read: a write over a status we have not seen (the
  // cache behind our own last write, or a run changed since) is refused.
  StatusWrite first = write({{"resourceVersion", version}});
  if (first.refused != ReconcileOutcome::conflict) return first;
  // Another writer (kubectl annotate, a GitOps tool) may move the run's version faster than any
  // cache follows it, and faster than a read and a conditioned write take: with writers back to
  // back, most of those pairs are refused too. So the fresh run is compared with this
  // reconcile's read instead. Where they differ in metadata alone, the diff and every decision
  // made from the read hold, and the diff is written without a condition: only the leading
  // operator writes a status (a replica that lost the Lease writes nothing), so the status the
  // fresh read shows is the one the write meets.
  switch (live_against(client_, ns, name, run)) {
    case LiveRun::gone: return {ReconcileOutcome::gone, {}};
    case LiveRun::moved: return first;  // judged again once the cache has caught up
    case LiveRun::same: break;
  }
  if (!options_.may_write()) throw std::runtime_error("this replica no longer holds the Lease");
  return write({{"uid", run["metadata"]["uid"]}});
}

void Controller::record_metrics(const std::string& ns, const std::string& name, const BenchmarkRunStatus& status,
                                Statistic statistic) {
  // One series per run, its phase's (a series per phase at 0 cost memory per run for nothing a
  // query needs: `== 1` and sums by phase read the same).
  for (const char* phase : {"Pending", "Running", "Succeeded", "Failed"}) {
    const metrics::Labels labels{{"namespace", ns}, {"run", name}, {"phase", phase}};
    if (phase == to_string(status.phase)) {
      runs_by_phase_->add(labels).set(1);
    } else {
      runs_by_phase_->remove(labels);
    }
  }
  // One info series per case, rebuilt from the status: a case measured again elsewhere replaces
  // its labels. One pass over the family per status, not one per case.
  case_info_->remove_matching({{"namespace", ns}, {"run", name}});
  for (const auto& r : status.results) {
    const metrics::Labels labels{{"namespace", ns}, {"run", name}, {"case", case_id(r.case_)}};
    if (r.environment) {
      const CaseEnvironment& e = *r.environment;
      metrics::Labels info = labels;
      for (const auto& [key, value] :
           {std::pair{"backend", e.backend}, {"communicator", e.communicator}, {"gpu_model", e.gpu_model},
            {"cpu_model", e.cpu_model}, {"driver_version", e.driver_version}, {"cuda_version", e.cuda_version},
            {"cudnn_version", e.cudnn_version}, {"nccl_version", e.nccl_version}, {"mpi_version", e.mpi_version},
            {"onednn_version", e.onednn_version}, {"framework", e.framework},
            {"framework_version", e.framework_version}, {"dlbench_version", e.dlbench_version}}) {
        if (!value.empty()) info[key] = value;
      }
      case_info_->add(info).set(1);
    }
    if (r.state == CaseState::Failed) {
      case_failed_->add({{"namespace", ns}, {"run", name}, {"case", case_id(r.case_)}, {"reason", r.reason}}).set(1);
    }
    if (r.state != CaseState::Succeeded || !r.throughput) continue;
    case_devices_->add(labels).set(r.case_.devices());
    metrics::Labels with_unit = labels;
    with_unit["unit"] = r.throughput->unit;
    auto* family = throughput_metric_suffix(r.throughput->unit) == "_sequences_per_second" ? case_throughput_sequences_
                                                                                          : case_throughput_;
    family->add(with_unit).set(reported_value(r.throughput->summary, statistic));
    if (r.speedup) case_speedup_->add(labels).set(*r.speedup);
    if (r.scaling_efficiency) case_efficiency_->add(labels).set(*r.scaling_efficiency);
    case_scaling_refused_->add(labels).set(r.scaling_refused.empty() ? 0 : 1);
    if (!r.loss_after_repeats.empty()) case_loss_->add(labels).set(r.loss_after_repeats.back());
    if (r.flops) {
      case_flops_->add(labels).set(r.flops->per_second_per_device);
      if (r.flops->mfu) case_mfu_->add(labels).set(*r.flops->mfu);
    }
    if (r.energy) {
      case_energy_->add(labels).set(r.energy->joules_per_sample);
      case_power_->add(labels).set(r.energy->watts_per_device);
    }
    if (r.communication) {
      case_exposed_communication_->add(labels).set(r.communication->exposed_share);
      case_bus_bandwidth_->add(labels).set(r.communication->bus_bandwidth);
    }
    if (r.stability) {
      metrics::Labels with_verdict = labels;
      with_verdict["verdict"] = std::string(to_string(r.stability->verdict));
      case_repeats_cv_->add(with_verdict).set(r.stability->cv);
    }
    if (r.interference && r.interference->cpu_pressure) {
      metrics::Labels with_verdict = labels;
      with_verdict["verdict"] = std::string(to_string(r.interference->verdict));
      case_cpu_pressure_->add(with_verdict).set(*r.interference->cpu_pressure);
    }
  }
}

}  // namespace dlbench::operator_
