// The controller loop: informers (list, then watch from the list's resourceVersion with
// bookmarks; relist on 410 Expired; reconnect with backoff) keep caches of the runs and their
// children and enqueue the owning run on every change; workers take keys from the work queue,
// call reconcile() on the cached world, and apply its actions through the Kubernetes client.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "dlbench/core/metrics.hpp"
#include "kube_client.hpp"
#include "manifests.hpp"
#include "work_queue.hpp"

namespace dlbench::operator_ {

class Informer {
 public:
  using Handler = std::function<void(const nlohmann::json& object)>;
  Informer(KubeClient& client, Resource resource, std::string ns, std::string selector, std::chrono::seconds watch_timeout,
           Handler on_change);
  ~Informer();
  void start();
  void request_stop() { stopping_ = true; }  // lets several informers wind down at once
  void stop();
  bool synced() const { return synced_; }
  std::vector<nlohmann::json> items(const std::function<bool(const nlohmann::json&)>& keep) const;
  std::optional<nlohmann::json> get(const std::string& ns, const std::string& name) const;
  int relists() const { return relists_; }

 private:
  void run();
  KubeClient& client_;
  Resource resource_;
  std::string namespace_, selector_;
  std::chrono::seconds watch_timeout_;
  Handler on_change_;
  mutable std::mutex mutex_;
  std::map<std::string, nlohmann::json> cache_;  // "ns/name"
  std::atomic<bool> stopping_{false}, synced_{false};
  std::atomic<int> relists_{0};
  std::thread thread_;
};

struct ControllerOptions {
  std::string namespace_;  // empty: every namespace
  int workers = 2;
  OperatorConfig config;
  std::chrono::seconds watch_timeout{60};
};

class Controller {
 public:
  Controller(KubeClient& client, ControllerOptions options);
  ~Controller();
  void start();
  void stop();
  bool synced() const;
  metrics::Registry& registry() { return registry_; }

 private:
  void work();
  void process(const std::string& key);
  void enqueue_owner(const nlohmann::json& object);

  KubeClient& client_;
  ControllerOptions options_;
  WorkQueue queue_;
  std::vector<std::unique_ptr<Informer>> informers_;  // runs first
  std::vector<std::thread> workers_;
  std::atomic<std::uint64_t> event_counter_{0};
  metrics::Registry registry_;
  metrics::Family<metrics::Counter>* reconciles_;
  metrics::Histogram* reconcile_seconds_;
  metrics::Gauge* queue_depth_;
  metrics::Family<metrics::Gauge>* runs_by_phase_;
  metrics::Family<metrics::Gauge>* case_throughput_;
  metrics::Family<metrics::Gauge>* case_speedup_;
  metrics::Family<metrics::Gauge>* case_efficiency_;
  metrics::Family<metrics::Gauge>* case_devices_ = nullptr;
  metrics::Family<metrics::Gauge>* case_failed_ = nullptr;
};

}  // namespace dlbench::operator_
