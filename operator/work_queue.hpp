// The reconciler's work queue, keyed by "namespace/name", with client-go's guarantees:
//  - a key waiting in the queue is there once, however often it is added;
//  - a key is never handed to two workers at once: added while processing, it is queued
//    again when done() is called;
//  - add_rate_limited() delays a key by base · 2^failures (capped) — exponential backoff per
//    key, reset by forget() after a success;
//  - add_after() requeues after a delay (periodic resync, waiting for a pod to start); a key
//    waits there once, at the earliest time asked for.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <queue>
#include <set>
#include <string>
#include <vector>

namespace dlbench::operator_ {

class WorkQueue {
 public:
  using Clock = std::chrono::steady_clock;
  using Duration = Clock::duration;
  // The clock delays are measured on; tests pass their own and move it instead of sleeping.
  using Now = std::function<Clock::time_point()>;

  explicit WorkQueue(Duration base_delay = std::chrono::milliseconds(5), Duration max_delay = std::chrono::seconds(300),
                     Now now = Clock::now);

  void add(const std::string& key);
  void add_after(const std::string& key, Duration delay);
  void add_rate_limited(const std::string& key);
  void forget(const std::string& key);
  int failures(const std::string& key) const;
  // The delay add_rate_limited() would use next for this key.
  Duration backoff(const std::string& key) const;

  // Blocks until a key is ready (or `timeout` passes on the queue's clock, or shutdown): the caller
  // owns it until done(). get(0s) never blocks.
  std::optional<std::string> get(Duration timeout = Duration::max());
  void done(const std::string& key);
  void shut_down();

  std::size_t depth() const;  // keys ready now
  std::size_t waiting() const;  // keys delayed

 private:
  void add_locked(const std::string& key);
  void promote_due_locked(Clock::time_point now);

  Duration base_delay_, max_delay_;
  Now now_;
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::deque<std::string> queue_;
  std::set<std::string> dirty_, processing_;
  std::multimap<Clock::time_point, std::string> delayed_;
  std::map<std::string, Clock::time_point> due_;  // each delayed key's time
  std::map<std::string, int> failures_;
  bool shutting_down_ = false;
};

}  // namespace dlbench::operator_
