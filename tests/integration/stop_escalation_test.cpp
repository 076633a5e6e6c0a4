// The two-step stop `dlbench run` and `dlbench launch` give a child, against a clock the test moves.
#include <chrono>
#include <csignal>
#include <vector>

#include <gtest/gtest.h>

#include "stop_escalation.hpp"

namespace dlbench::cli {
namespace {

using std::chrono::seconds;

TEST(StopEscalation, TheStopSignalGoesOnceAndSigkillOnceWhenTheGraceIsOver) {
  std::vector<int> sent;
  StopEscalation stop([&](int signal) { sent.push_back(signal); }, seconds(10));
  const auto t0 = StopEscalation::Clock::time_point{} + seconds(100);
  stop.kill_when_due(t0 + seconds(60));  // never stopped: nothing to escalate
  EXPECT_TRUE(sent.empty());
  EXPECT_FALSE(stop.stopped());

  EXPECT_TRUE(stop.stop(SIGUSR1, t0));
  EXPECT_TRUE(stop.stopped());
  // A second stop (Ctrl-C after the deadline) neither signals again nor restarts the grace.
  EXPECT_FALSE(stop.stop(SIGTERM, t0 + seconds(5)));
  stop.kill_when_due(t0 + seconds(9));
  EXPECT_EQ(sent, (std::vector<int>{SIGUSR1}));
  EXPECT_FALSE(stop.killed());

  stop.kill_when_due(t0 + seconds(10));
  stop.kill_when_due(t0 + seconds(11));
  EXPECT_EQ(sent, (std::vector<int>{SIGUSR1, SIGKILL}));
  EXPECT_TRUE(stop.killed());
}

}  // namespace
}  // namespace dlbench::cli
