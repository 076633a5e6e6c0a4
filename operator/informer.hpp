// An informer: lists, then watches from the list's resourceVersion (bookmarks on; relist on 410
// Expired; reconnect with backoff), and keeps a cache of T, what the controller needs of each
// object (cached.hpp). Every change is announced to a handler; a relist announces the objects
// that vanished while nobody watched as DELETED, so that their owners hear of it, and then says
// when that list was asked for, so that objects created before it and never shown are known gone.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "kube_client.hpp"

namespace dlbench::operator_ {

// What the controller does with every informer, whatever it caches.
class InformerBase {
 public:
  virtual ~InformerBase() = default;
  virtual void start() = 0;
  virtual void request_stop() = 0;  // lets several informers wind down at once
  virtual void stop() = 0;
  virtual const std::string& kind() const = 0;
  virtual bool synced() const = 0;
  // Synced, and its last list or watch reached the API server.
  virtual bool healthy() const = 0;
};

template <typename T>
class Informer final : public InformerBase {
 public:
  using Convert = std::function<T(const nlohmann::json& object)>;
  using Handler = std::function<void(const std::string& type, const T& object)>;
  // `http_status`: the API's status; 0 for a connection that failed; kStalledWatch for a watch on
  // which the server went silent past its limit (KubeClient::watch).
  using ErrorHandler = std::function<void(const std::string& kind, const std::string& what, int http_status)>;
  // After each list has been announced: `asked_at` is when the list was asked for (the steady
  // clock), so an object created and acknowledged before then and not announced is not there.
  using ListedHandler = std::function<void(const std::string& kind, std::chrono::steady_clock::time_point asked_at)>;
  static constexpr int kStalledWatch = -1;

  Informer(KubeClient& client, std::string kind, Resource resource, std::string ns, std::string selector,
           std::chrono::seconds watch_timeout, Convert convert, Handler on_change, ErrorHandler on_error,
           ListedHandler on_listed = {});
  ~Informer() override;
  Informer(const Informer&) = delete;
  Informer& operator=(const Informer&) = delete;

  void start() override;
  void request_stop() override { stopping_ = true; }
  void stop() override;
  const std::string& kind() const override { return kind_; }
  bool synced() const override { return synced_; }
  bool healthy() const override { return synced_ && !failing_; }
  int relists() const { return relists_; }

  std::optional<T> get(const std::string& key) const;  // "namespace/name"
  std::vector<T> matching(const std::function<bool(const T&)>& keep) const;
  // Visits every cached object under the cache's lock: `visit` must not call back into it.
  void for_each(const std::function<void(const T&)>& visit) const;

 private:
  void run();

  KubeClient& client_;
  std::string kind_;
  Resource resource_;
  std::string namespace_, selector_;
  std::chrono::seconds watch_timeout_;
  Convert convert_;
  Handler on_change_;
  ErrorHandler on_error_;
  ListedHandler on_listed_;
  mutable std::mutex mutex_;
  std::map<std::string, T> cache_;  // by "namespace/name"
  std::atomic<bool> stopping_{false}, synced_{false}, failing_{false};
  std::atomic<int> relists_{0};
  std::thread thread_;
};

}  // namespace dlbench::operator_
