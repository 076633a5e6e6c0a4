// The exposition format, checked against the text Prometheus expects.
#include <cmath>
#include <limits>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "dlbench/metrics/metrics.hpp"

namespace dlbench::metrics {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(Metrics, CounterGaugeAndOrder) {
  Registry r;
  auto& steps = r.counter("dlbench_steps_total", "Steps done.");
  steps.add({{"rank", "0"}}).increment();
  steps.add({{"rank", "0"}}).increment(2);
  r.gauge("dlbench_loss", "Loss.").add({}).set(0.25);
  EXPECT_EQ(r.serialize(),
            "# HELP dlbench_steps_total Steps done.\n# TYPE dlbench_steps_total counter\n"
            "dlbench_steps_total{rank=\"0\"} 3\n"
            "# HELP dlbench_loss Loss.\n# TYPE dlbench_loss gauge\ndlbench_loss 0.25\n");
  EXPECT_THROW(steps.add({}).increment(-1), std::invalid_argument);
}

TEST(Metrics, RemovedSeriesLeaveTheExpositionAndAScrapeHoldsWhatItRead) {
  Registry r;
  auto& runs = r.gauge("dlbench_operator_runs", "Runs by phase.");
  runs.add({{"run", "a"}, {"phase", "Running"}}).set(1);
  runs.add({{"run", "a"}, {"phase", "Pending"}}).set(1);
  runs.add({{"run", "b"}, {"phase", "Running"}}).set(1);
  const auto held = runs.members();  // a scrape in progress
  EXPECT_TRUE(runs.remove({{"run", "a"}, {"phase", "Pending"}}));
  EXPECT_FALSE(runs.remove({{"run", "a"}, {"phase", "Pending"}}));
  EXPECT_FALSE(runs.remove({{"run", "a"}}));  // exact labels only
  EXPECT_EQ(r.serialize(),
            "# HELP dlbench_operator_runs Runs by phase.\n# TYPE dlbench_operator_runs gauge\n"
            "dlbench_operator_runs{phase=\"Running\",run=\"a\"} 1\n"
            "dlbench_operator_runs{phase=\"Running\",run=\"b\"} 1\n");
  EXPECT_EQ(runs.remove_matching({{"run", "a"}}), 1u);
  EXPECT_EQ(runs.remove_matching({{"run", "a"}}), 0u);
  EXPECT_THAT(r.serialize(), Not(HasSubstr("run=\"a\"")));
  EXPECT_THAT(r.serialize(), HasSubstr("run=\"b\""));
  ASSERT_EQ(held.size(), 3u);
  EXPECT_EQ(held[0].second->value(), 1);  // still readable after its removal
}

TEST(Metrics, HistogramBucketsAreCumulativeWithInfSumAndCount) {
  Registry r;
  auto& h = r.histogram("dlbench_step_seconds", "Step time.", {0.1, 1.0}).add({{"case", "1x1"}});
  for (const double v : {0.05, 0.1, 0.5, 3.0}) h.observe(v);
  const std::string text = r.serialize();
  EXPECT_THAT(text, HasSubstr("dlbench_step_seconds_bucket{case=\"1x1\",le=\"0.1\"} 2\n"));  // le is inclusive
  EXPECT_THAT(text, HasSubstr("dlbench_step_seconds_bucket{case=\"1x1\",le=\"1\"} 3\n"));
  EXPECT_THAT(text, HasSubstr("dlbench_step_seconds_bucket{case=\"1x1\",le=\"+Inf\"} 4\n"));
  EXPECT_THAT(text, HasSubstr("dlbench_step_seconds_sum{case=\"1x1\"} 3.65\n"));
  EXPECT_THAT(text, HasSubstr("dlbench_step_seconds_count{case=\"1x1\"} 4\n"));
  EXPECT_THROW(r.histogram("dlbench_bad", "x", {1.0, 0.5}), std::invalid_argument);
}

TEST(Metrics, Escaping) {
  EXPECT_EQ(escape_label_value("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
  EXPECT_EQ(escape_help("line\\one\nline two \"quoted\""), "line\\\\one\\nline two \"quoted\"");
  Registry r;
  r.gauge("dlbench_x", "Help with\nnewline.").add({{"run", "my \"run\""}}).set(1);
  EXPECT_THAT(r.serialize(), HasSubstr("# HELP dlbench_x Help with\\nnewline.\n"));
  EXPECT_THAT(r.serialize(), HasSubstr("dlbench_x{run=\"my \\\"run\\\"\"} 1\n"));
}

TEST(Metrics, Values) {
  EXPECT_EQ(format_value(3.0), "3");
  EXPECT_EQ(format_value(0.1), "0.1");
  EXPECT_EQ(format_value(1e21), "1e+21");
  EXPECT_EQ(format_value(std::numeric_limits<double>::infinity()), "+Inf");
  EXPECT_EQ(format_value(-std::numeric_limits<double>::infinity()), "-Inf");
  EXPECT_EQ(format_value(std::nan("")), "NaN");
}

TEST(Metrics, NamesAreChecked) {
  Registry r;
  EXPECT_THROW(r.counter("dlbench_steps", "no _total"), std::invalid_argument);
  EXPECT_THROW(r.gauge("9lives", "x"), std::invalid_argument);
  r.gauge("dlbench_dup", "x");
  EXPECT_THROW(r.gauge("dlbench_dup", "x"), std::invalid_argument);
  EXPECT_THROW(r.gauge("dlbench_y", "x").add({{"bad-label", "v"}}), std::invalid_argument);
  EXPECT_THROW(r.histogram("dlbench_h", "x", {1}).add({{"le", "v"}}), std::invalid_argument);
}

TEST(Metrics, ExponentialBuckets) {
  EXPECT_EQ(exponential_buckets(0.001, 2, 4), (std::vector<double>{0.001, 0.002, 0.004, 0.008}));
}

}  // namespace
}  // namespace dlbench::metrics
