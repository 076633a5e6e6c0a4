#include <atomic>
#include <set>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "work_queue.hpp"

namespace dlbench::operator_ {
namespace {

using namespace std::chrono_literals;

TEST(WorkQueue, DeduplicatesWaitingKeysInFifoOrder) {
  WorkQueue q;
  q.add("ns/a");
  q.add("ns/b");
  q.add("ns/a");
  EXPECT_EQ(q.depth(), 2u);
  EXPECT_EQ(q.get(0s), "ns/a");
  EXPECT_EQ(q.get(0s), "ns/b");
  EXPECT_EQ(q.get(10ms), std::nullopt);
}

TEST(WorkQueue, AKeyIsNeverProcessedTwiceAtOnce) {
  WorkQueue q;
  q.add("ns/a");
  const auto first = q.get(0s);
  ASSERT_EQ(first, "ns/a");
  q.add("ns/a");  // changed while being reconciled
  q.add("ns/a");
  EXPECT_EQ(q.get(20ms), std::nullopt) << "handed out while still processing";
  q.done("ns/a");
  EXPECT_EQ(q.get(0s), "ns/a");  // once more, because it changed
  q.done("ns/a");
  EXPECT_EQ(q.get(10ms), std::nullopt);
}

TEST(WorkQueue, ExponentialBackoffPerKeyResetByForget) {
  WorkQueue q(10ms, 80ms);
  EXPECT_EQ(q.backoff("ns/a"), 10ms);
  q.add_rate_limited("ns/a");
  EXPECT_EQ(q.failures("ns/a"), 1);
  EXPECT_EQ(q.backoff("ns/a"), 20ms);
  for (int i = 0; i < 5; ++i) q.add_rate_limited("ns/a");
  EXPECT_EQ(q.backoff("ns/a"), 80ms);  // capped
  EXPECT_EQ(q.backoff("ns/b"), 10ms);  // per key
  q.forget("ns/a");
  EXPECT_EQ(q.backoff("ns/a"), 10ms);
}

// A clock the test moves: delays are exact, and nothing sleeps.
struct TestClock {
  WorkQueue::Clock::time_point now{};
  WorkQueue::Now function() {
    return [this] { return now; };
  }
};

TEST(WorkQueue, DelayedKeysComeBackAfterTheirDelay) {
  TestClock clock;
  WorkQueue q(5ms, 300s, clock.function());
  q.add_after("ns/late", 60ms);
  q.add_after("ns/early", 20ms);
  EXPECT_EQ(q.waiting(), 2u);
  clock.now += 19ms;
  EXPECT_EQ(q.get(0s), std::nullopt);
  clock.now += 1ms;
  EXPECT_EQ(q.get(0s), "ns/early");
  clock.now += 39ms;
  EXPECT_EQ(q.get(0s), std::nullopt);
  clock.now += 1ms;
  EXPECT_EQ(q.get(0s), "ns/late");
}

TEST(WorkQueue, ADelayedKeyWaitsOnceAtItsEarliestTime) {
  TestClock clock;
  WorkQueue q(5ms, 300s, clock.function());
  for (int i = 0; i < 100; ++i) q.add_after("ns/run", 10s);  // a requeue on every pass
  EXPECT_EQ(q.waiting(), 1u);
  q.add_after("ns/run", 30ms);  // sooner: replaces the later one
  q.add_after("ns/run", 5s);    // later than what waits: nothing to do
  EXPECT_EQ(q.waiting(), 1u);
  clock.now += 29ms;
  EXPECT_EQ(q.get(0s), std::nullopt);
  clock.now += 1ms;
  EXPECT_EQ(q.get(0s), "ns/run");
  q.done("ns/run");
  EXPECT_EQ(q.waiting(), 0u);
  clock.now += 20s;
  EXPECT_EQ(q.get(0s), std::nullopt);  // no copy left behind
  q.add_after("ns/run", 10ms);  // and it can wait again
  EXPECT_EQ(q.waiting(), 1u);
  clock.now += 10ms;
  EXPECT_EQ(q.get(0s), "ns/run");
}

TEST(WorkQueue, BackoffDelaysComeDueOnTheQueuesClock) {
  TestClock clock;
  WorkQueue q(10ms, 80ms, clock.function());
  q.add_rate_limited("ns/a");  // 10 ms
  clock.now += 9ms;
  EXPECT_EQ(q.get(0s), std::nullopt);
  clock.now += 1ms;
  EXPECT_EQ(q.get(0s), "ns/a");
  q.done("ns/a");
  q.add_rate_limited("ns/a");  // 20 ms
  clock.now += 19ms;
  EXPECT_EQ(q.get(0s), std::nullopt);
  clock.now += 1ms;
  EXPECT_EQ(q.get(0s), "ns/a");
}

TEST(WorkQueue, ShutdownWakesBlockedWorkers) {
  WorkQueue q;
  std::thread worker([&] { EXPECT_EQ(q.get(), std::nullopt); });
  std::this_thread::sleep_for(20ms);
  q.shut_down();
  worker.join();
}

TEST(WorkQueue, ConcurrentWorkersNeverShareAKey) {
  WorkQueue q;
  std::mutex m;
  std::set<std::string> in_flight;
  std::atomic<int> processed{0}, overlaps{0};
  std::vector<std::thread> workers;
  for (int w = 0; w < 4; ++w) {
    workers.emplace_back([&] {
      while (auto key = q.get()) {
        {
          std::lock_guard lock(m);
          if (!in_flight.insert(*key).second) ++overlaps;
        }
        std::this_thread::sleep_for(100us);
        {
          std::lock_guard lock(m);
          in_flight.erase(*key);
        }
        ++processed;
        q.done(*key);
      }
    });
  }
  for (int i = 0; i < 2000; ++i) q.add("ns/run-" + std::to_string(i % 7));
  for (int i = 0; i < 200 && (q.depth() > 0 || processed < 7); ++i) std::this_thread::sleep_for(5ms);
  q.shut_down();
  for (auto& t : workers) t.join();
  EXPECT_EQ(overlaps, 0);
  EXPECT_GE(processed, 7);
  EXPECT_LE(processed, 2000);
}

}  // namespace
}  // namespace dlbench::operator_
