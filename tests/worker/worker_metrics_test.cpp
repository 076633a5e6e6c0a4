// What dlbench-worker (and dlbench-exec) show Prometheus about a repeat that ended.
#include "worker_metrics.hpp"

#include <cmath>
#include <limits>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace dlbench::worker {
namespace {

using ::testing::HasSubstr;

WorkerIdentity identity() {
  return {"metrics-test", "1x1-bs8-fp32", "resnet50", "fp32", "cpu", "none", "test", "", 0, 8};
}

// The loss gauge holds the loss after the last repeat as it is: a diverged one shows as NaN
// (what the case then ends with, LossNotFinite), not as the last finite loss before it.
TEST(WorkerMetrics, TheLossGaugeHoldsTheLastRepeatsLossEvenWhenItIsNotFinite) {
  WorkerMetrics live(identity(), 0);
  const std::string series = "dlbench_worker_loss{case=\"1x1-bs8-fp32\",model=\"resnet50\",precision=\"fp32\",rank=\"0\","
                             "run=\"metrics-test\"} ";
  live.on_repeat(40.5);
  live.set_loss(6.5);
  EXPECT_THAT(live.registry().serialize(), HasSubstr(series + "6.5\n"));
  EXPECT_THAT(live.registry().serialize(),
              HasSubstr("dlbench_worker_repeat_throughput_samples_per_second{case=\"1x1-bs8-fp32\""));
  live.set_loss(std::numeric_limits<double>::quiet_NaN());
  EXPECT_THAT(live.registry().serialize(), HasSubstr(series + "NaN\n"));
  live.set_loss(std::numeric_limits<double>::infinity());
  EXPECT_THAT(live.registry().serialize(), HasSubstr(series + "+Inf\n"));
}

}  // namespace
}  // namespace dlbench::worker
