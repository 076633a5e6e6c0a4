#include "work_queue.hpp"

#include <algorithm>

namespace dlbench::operator_ {

WorkQueue::WorkQueue(Duration base_delay, Duration max_delay, Now now)
    : base_delay_(base_delay), max_delay_(max_delay), now_(std::move(now)) {}

void WorkQueue::add_locked(const std::string& key) {
  if (shutting_down_ || dirty_.contains(key)) return;
  dirty_.insert(key);
  if (processing_.contains(key)) return;  // queued again by done()
  queue_.push_back(key);
  changed_.notify_one();
}

void WorkQueue::add(const std::string& key) {
  std::lock_guard lock(mutex_);
  add_locked(key);
}

void WorkQueue::add_after(const std::string& key, Duration delay) {
  std::lock_guard lock(mutex_);
  if (shutting_down_) return;
  if (delay <= Duration::zero()) {
    add_locked(key);
    return;
  }
  // Once per key, at its earliest time (as client-go's delaying queue): a key requeued on every
  // pass would otherwise pile up copies, one per reconcile, until each came due.
  const auto at = now_() + delay;
  if (const auto pending = due_.find(key); pending != due_.end()) {
    if (pending->second <= at) return;
    const auto [first, last] = delayed_.equal_range(pending->second);
    for (auto it = first; it != last; ++it) {
      if (it->second == key) {
        delayed_.erase(it);
        break;
      }
    }
  }
  delayed_.emplace(at, key);
  due_[key] = at;
  changed_.notify_all();  // a sleeping get() may need to wake earlier
}

WorkQueue::Duration WorkQueue::backoff(const std::string& key) const {
  std::lock_guard lock(mutex_);
  const auto it = failures_.find(key);
  const int n = it == failures_.end() ? 0 : it->second;
  Duration d = base_delay_;
  for (int i = 0; i < n && d < max_delay_; ++i) d *= 2;
  return std::min(d, max_delay_);
}

void WorkQueue::add_rate_limited(const std::string& key) {
  const Duration delay = backoff(key);
  {
    std::lock_guard lock(mutex_);
    ++failures_[key];
  }
  add_after(key, delay);
}

void WorkQueue::forget(const std::string& key) {
  std::lock_guard lock(mutex_);
  failures_.erase(key);
}

int WorkQueue::failures(const std::string& key) const {
  std::lock_guard lock(mutex_);
  const auto it = failures_.find(key);
  return it == failures_.end() ? 0 : it->second;
}

void WorkQueue::promote_due_locked(Clock::time_point now) {
  while (!delayed_.empty() && delayed_.begin()->first <= now) {
    const std::string key = delayed_.begin()->second;
    delayed_.erase(delayed_.begin());
    due_.erase(key);
    add_locked(key);
  }
}

std::optional<std::string> WorkQueue::get(Duration timeout) {
  std::unique_lock lock(mutex_);
  const auto deadline = timeout == Duration::max() ? Clock::time_point::max() : now_() + timeout;
  while (true) {
    const auto now = now_();
    promote_due_locked(now);
    if (!queue_.empty()) {
      std::string key = queue_.front();
      queue_.pop_front();
      dirty_.erase(key);
      processing_.insert(key);
      return key;
    }
    if (shutting_down_ || now >= deadline) return std::nullopt;
    auto wake = deadline;
    if (!delayed_.empty()) wake = std::min(wake, delayed_.begin()->first);
    // Waits for the time left on the queue's clock (a test's clock does not move by itself: its
    // tests ask with get(0s), which returns above).
    if (wake == Clock::time_point::max()) {
      changed_.wait(lock);
    } else {
      changed_.wait_for(lock, wake - now);
    }
  }
}

void WorkQueue::done(const std::string& key) {
  std::lock_guard lock(mutex_);
  processing_.erase(key);
  if (dirty_.contains(key) && !shutting_down_) {
    queue_.push_back(key);
    changed_.notify_one();
  }
}

void WorkQueue::shut_down() {
  std::lock_guard lock(mutex_);
  shutting_down_ = true;
  changed_.notify_all();
}

std::size_t WorkQueue::depth() const {
  std::lock_guard lock(mutex_);
  return queue_.size();
}

std::size_t WorkQueue::waiting() const {
  std::lock_guard lock(mutex_);
  return delayed_.size();
}

}  // namespace dlbench::operator_
