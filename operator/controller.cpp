#include "controller.hpp"

#include <cstdio>
#include <iostream>

#include "dlbench/core/codec.hpp"
#include "dlbench/core/statistics.hpp"
#include "merge_patch.hpp"
#include "reconciler.hpp"

namespace dlbench::operator_ {

using nlohmann::json;

namespace {

std::string key_of(const json& object) {
  const auto& meta = object["metadata"];
  return meta.value("namespace", "") + "/" + meta.value("name", "");
}

const Resource& resource_for(const std::string& kind) {
  if (kind == "Pod") return resources::kPods;
  if (kind == "Job") return resources::kJobs;
  if (kind == "Secret") return resources::kSecrets;
  if (kind == "ConfigMap") return resources::kConfigMaps;
  if (kind == "Service") return resources::kServices;
  throw std::invalid_argument("no resource for kind " + kind);
}

constexpr const char* kChildSelector = "app.kubernetes.io/managed-by=dlbench-operator";

}  // namespace

Informer::Informer(KubeClient& client, Resource resource, std::string ns, std::string selector,
                   std::chrono::seconds watch_timeout, Handler on_change)
    : client_(client), resource_(std::move(resource)), namespace_(std::move(ns)), selector_(std::move(selector)),
      watch_timeout_(watch_timeout), on_change_(std::move(on_change)) {}

Informer::~Informer() { stop(); }

void Informer::start() { thread_ = std::thread([this] { run(); }); }

void Informer::stop() {
  stopping_ = true;
  if (thread_.joinable()) thread_.join();
}

void Informer::run() {
  auto backoff = std::chrono::milliseconds(200);
  while (!stopping_) {
    try {
      // List: the cache becomes exactly the world, and every object is announced.
      const json list = client_.list(resource_, namespace_, selector_);
      std::string version = list["metadata"].value("resourceVersion", "");
      {
        std::lock_guard lock(mutex_);
        cache_.clear();
        for (const auto& item : list["items"]) cache_[key_of(item)] = item;
      }
      synced_ = true;
      for (const auto& item : list["items"]) on_change_(item);
      backoff = std::chrono::milliseconds(200);
      // Watch from there; a closed stream resumes from the last version seen.
      while (!stopping_) {
        version = client_.watch(resource_, namespace_, selector_, version, watch_timeout_,
                                [&](const KubeClient::WatchEvent& e) {
                                  if (e.type == "BOOKMARK") return;
                                  {
                                    std::lock_guard lock(mutex_);
                                    if (e.type == "DELETED") {
                                      cache_.erase(key_of(e.object));
                                    } else {
                                      cache_[key_of(e.object)] = e.object;
                                    }
                                  }
                                  on_change_(e.object);
                                });
      }
    } catch (const KubeError& e) {
      if (e.status == 410) {
        ++relists_;  // too old: list again
        continue;
      }
      std::this_thread::sleep_for(backoff);
      backoff = std::min(backoff * 2, std::chrono::milliseconds(30000));
    } catch (const std::exception&) {
      std::this_thread::sleep_for(backoff);  // connection dropped, server restarting, …
      backoff = std::min(backoff * 2, std::chrono::milliseconds(30000));
    }
  }
}

std::vector<json> Informer::items(const std::function<bool(const json&)>& keep) const {
  std::lock_guard lock(mutex_);
  std::vector<json> out;
  for (const auto& [key, o] : cache_) {
    if (keep(o)) out.push_back(o);
  }
  return out;
}

std::optional<json> Informer::get(const std::string& ns, const std::string& name) const {
  std::lock_guard lock(mutex_);
  const auto it = cache_.find(ns + "/" + name);
  if (it == cache_.end()) return std::nullopt;
  return it->second;
}

Controller::Controller(KubeClient& client, ControllerOptions options) : client_(client), options_(std::move(options)) {
  reconciles_ = &registry_.counter("dlbench_operator_reconciles_total", "Reconciliations, by result (success, error).");
  reconcile_seconds_ = &registry_
                            .histogram("dlbench_operator_reconcile_seconds", "Time of one reconciliation.",
                                       metrics::exponential_buckets(0.0005, 2, 16))
                            .add({});
  queue_depth_ = &registry_.gauge("dlbench_operator_queue_depth", "Runs waiting for reconciliation.").add({});
  runs_by_phase_ = &registry_.gauge("dlbench_operator_runs", "BenchmarkRuns by phase.");
  case_throughput_ = &registry_.gauge("dlbench_case_throughput_samples_per_second",
                                      "Reported throughput of a finished case (median unless the run says mean).");
  case_speedup_ = &registry_.gauge("dlbench_case_speedup", "Speed-up of a finished case over its 1x1 case.");
  case_efficiency_ = &registry_.gauge("dlbench_case_scaling_efficiency", "Speed-up / devices of a finished case.");
  case_devices_ = &registry_.gauge("dlbench_case_devices", "Devices (ranks) of a finished case: nodes x gpusPerNode.");
  case_failed_ = &registry_.gauge("dlbench_case_failed", "1 for a case that ended Failed, labelled with its reason.");
  const auto on_run = [this](const json& o) { queue_.add(key_of(o)); };
  const auto on_child = [this](const json& o) { enqueue_owner(o); };
  informers_.push_back(std::make_unique<Informer>(client_, resources::kBenchmarkRuns, options_.namespace_, "",
                                                  options_.watch_timeout, on_run));
  for (const Resource* r : {&resources::kPods, &resources::kJobs, &resources::kSecrets, &resources::kConfigMaps,
                            &resources::kServices}) {
    informers_.push_back(std::make_unique<Informer>(client_, *r, options_.namespace_, kChildSelector,
                                                    options_.watch_timeout, on_child));
  }
}

Controller::~Controller() { stop(); }

void Controller::enqueue_owner(const json& object) {
  const auto labels = object["metadata"].value("labels", json::object());
  if (labels.contains("dlbench.io/run")) {
    queue_.add(object["metadata"].value("namespace", "") + "/" + labels["dlbench.io/run"].get<std::string>());
  }
}

void Controller::start() {
  for (auto& i : informers_) i->start();
  for (int w = 0; w < options_.workers; ++w) workers_.emplace_back([this] { work(); });
}

void Controller::stop() {
  queue_.shut_down();
  for (auto& t : workers_) {
    if (t.joinable()) t.join();
  }
  workers_.clear();
  for (auto& i : informers_) i->request_stop();  // all at once: each may be inside a watch
  for (auto& i : informers_) i->stop();
}

bool Controller::synced() const {
  for (const auto& i : informers_) {
    if (!i->synced()) return false;
  }
  return true;
}

void Controller::work() {
  while (auto key = queue_.get()) {
    queue_depth_->set(static_cast<double>(queue_.depth()));
    if (!synced()) {  // never act on a partial world
      queue_.done(*key);
      queue_.add_after(*key, std::chrono::milliseconds(200));
      continue;
    }
    const auto start = std::chrono::steady_clock::now();
    try {
      process(*key);
      queue_.forget(*key);
      reconciles_->add({{"result", "success"}}).increment();
    } catch (const std::exception&) {
      reconciles_->add({{"result", "error"}}).increment();
      queue_.done(*key);
      queue_.add_rate_limited(*key);
      continue;
    }
    reconcile_seconds_->observe(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    queue_.done(*key);
  }
}

void Controller::process(const std::string& key) {
  const auto slash = key.find('/');
  const std::string ns = key.substr(0, slash), name = key.substr(slash + 1);
  const auto run = informers_[0]->get(ns, name);
  if (!run) return;  // deleted: owner references clean up its children
  World world;
  world.now = std::chrono::system_clock::now();
  const auto mine = [&](const json& o) {
    return o["metadata"].value("namespace", "") == ns &&
           o["metadata"].value("labels", json::object()).value("dlbench.io/run", "") == name;
  };
  for (std::size_t i = 1; i < informers_.size(); ++i) {
    for (const auto& o : informers_[i]->items(mine)) {
      const std::string kind = o.value("kind", "");
      if (i == 1) {
        auto pod = o;
        pod["kind"] = "Pod";  // list items may come without kind
        world.pods.push_back(observe_pod(pod));
      } else if (i == 2) {
        auto job = o;
        job["kind"] = "Job";
        world.jobs.push_back(observe_job(job));
      } else {
        auto other = o;
        other["kind"] = i == 3 ? "Secret" : i == 4 ? "ConfigMap" : "Service";
        world.others.push_back(observe_object(other));
      }
    }
  }
  const Actions actions = reconcile(*run, world, options_.config, [] { return generate_ssh_key_pair(); });
  for (const auto& object : actions.create) {
    try {
      client_.create(resource_for(object["kind"]), ns, object);
    } catch (const KubeError& e) {
      if (e.status != 409) throw;  // AlreadyExists: the world is ahead of the cache
    }
  }
  for (const auto& r : actions.remove) client_.remove(resource_for(r.kind), ns, r.name);
  if (actions.status) {
    // Only what changed, with removed fields as null; nothing at all when the status is the same.
    const json patch = merge_patch_between((*run).value("status", json::object()), to_json(*actions.status));
    if (!patch.empty()) client_.merge_patch(resources::kBenchmarkRuns, ns, name, {{"status", patch}}, "status");
    runs_by_phase_->add({{"namespace", ns}, {"run", name}, {"phase", std::string(to_string(actions.status->phase))}}).set(1);
    for (const char* phase : {"Pending", "Running", "Succeeded", "Failed"}) {
      if (phase != to_string(actions.status->phase)) {
        runs_by_phase_->add({{"namespace", ns}, {"run", name}, {"phase", phase}}).set(0);
      }
    }
    const auto decoded = decode_benchmark_run(*run);
    const auto statistic = decoded.value ? decoded.value->spec.methodology.statistic : Statistic::median;
    for (const auto& r : actions.status->results) {
      const metrics::Labels labels{{"namespace", ns}, {"run", name}, {"case", case_id(r.case_)}};
      if (r.state == CaseState::Failed) {
        case_failed_->add({{"namespace", ns}, {"run", name}, {"case", case_id(r.case_)}, {"reason", r.reason}}).set(1);
      }
      if (r.state != CaseState::Succeeded || !r.throughput) continue;
      case_devices_->add(labels).set(r.case_.devices());
      case_throughput_->add(labels).set(reported_value(r.throughput->summary, statistic));
      if (r.speedup) case_speedup_->add(labels).set(*r.speedup);
      if (r.scaling_efficiency) case_efficiency_->add(labels).set(*r.scaling_efficiency);
    }
  }
  for (const auto& e : actions.events) {
    const std::string now = format_rfc3339(world.now);
    // Unique across operator restarts (as Kubernetes names them: <object>.<hex>), and best effort:
    // an Event that cannot be written must not fail the reconcile that already changed the world.
    char suffix[32];
    std::snprintf(suffix, sizeof suffix, "%llx",
                  static_cast<unsigned long long>(world.now.time_since_epoch().count()) + ++event_counter_);
    try {
      client_.create(resources::kEvents, ns,
                     {{"apiVersion", "v1"},
                      {"kind", "Event"},
                      {"metadata", {{"name", name + "." + suffix}, {"namespace", ns}}},
                      {"involvedObject", {{"apiVersion", kApiVersion}, {"kind", kKind}, {"name", name}, {"namespace", ns},
                                          {"uid", (*run)["metadata"].value("uid", "")}}},
                      {"type", e.type},
                      {"reason", e.reason},
                      {"message", e.message},
                      {"firstTimestamp", now},
                      {"lastTimestamp", now},
                      {"count", 1},
                      {"source", {{"component", "dlbench-operator"}}}});
    } catch (const KubeError& error) {
      std::cerr << R"({"level":"warning","msg":"event not recorded","run":")" << ns << "/" << name
                << R"(","reason":)" << nlohmann::json(error.what()).dump() << "}\n";
    }
  }
  if (actions.requeue_after) queue_.add_after(key, *actions.requeue_after);
}

}  // namespace dlbench::operator_
