#include <gtest/gtest.h>

#include "dlbench/core/statistics.hpp"
#include "dlbench/core/status.hpp"

namespace dlbench {
namespace {

TEST(Conditions, TransitionTimeChangesOnlyWithStatus) {
  std::vector<Condition> conditions;
  EXPECT_TRUE(set_condition(conditions, {ConditionType::Ready, ConditionStatus::False, "Running", "1/4", "", 1}, "t1"));
  ASSERT_EQ(conditions.size(), 1u);
  EXPECT_EQ(conditions[0].last_transition_time, "t1");

  // Same status, new message: updated, transition time kept.
  EXPECT_TRUE(set_condition(conditions, {ConditionType::Ready, ConditionStatus::False, "Running", "2/4", "", 1}, "t2"));
  EXPECT_EQ(conditions[0].message, "2/4");
  EXPECT_EQ(conditions[0].last_transition_time, "t1");

  // Nothing new: no change reported (so no needless status write).
  EXPECT_FALSE(set_condition(conditions, {ConditionType::Ready, ConditionStatus::False, "Running", "2/4", "", 1}, "t3"));

  // Status flips: transition time moves.
  EXPECT_TRUE(set_condition(conditions, {ConditionType::Ready, ConditionStatus::True, "Succeeded", "", "", 1}, "t4"));
  EXPECT_EQ(conditions[0].last_transition_time, "t4");

  set_condition(conditions, {ConditionType::Progressing, ConditionStatus::False, "Done", "", "", 1}, "t5");
  ASSERT_EQ(conditions.size(), 2u);
  ASSERT_NE(find_condition(conditions, ConditionType::Progressing), nullptr);
  EXPECT_EQ(find_condition(conditions, ConditionType::Invalid), nullptr);
}

TEST(DerivedStatus, BestProgressAndScaling) {
  BenchmarkRunSpec spec;
  spec.matrix = Matrix{{1}, {1, 2}, {8}, {Precision::fp32}};
  const auto plan = plan_cases(spec);
  BenchmarkRunStatus status;
  CaseResult base;
  base.case_ = {1, 1, 8, Precision::fp32};
  base.throughput = Throughput{"samples/s", summarize(std::vector<double>{10.0, 11.0, 12.0}), {10.0, 11.0, 12.0}};
  status.results.push_back(base);
  refresh_derived_status(status, plan, Statistic::median);
  EXPECT_EQ(status.progress.completed_cases, 1);
  EXPECT_EQ(status.progress.total_cases, 2);
  EXPECT_EQ(status.progress.summary, "1/2");
  ASSERT_TRUE(status.best.has_value());
  EXPECT_EQ(status.best->case_id, "1x1-bs8-fp32");
  EXPECT_DOUBLE_EQ(status.best->throughput, 11.0);

  CaseResult two = base;
  two.case_ = {1, 2, 8, Precision::fp32};
  two.throughput = Throughput{"samples/s", summarize(std::vector<double>{19.8}), {19.8}};
  status.results.push_back(two);
  refresh_derived_status(status, plan, Statistic::median);
  EXPECT_EQ(status.progress.summary, "2/2");
  EXPECT_EQ(status.best->case_id, "1x2-bs8-fp32");
  EXPECT_DOUBLE_EQ(*status.results[1].speedup, 1.8);
  EXPECT_DOUBLE_EQ(*status.results[1].scaling_efficiency, 0.9);
}

TEST(DerivedStatus, Rfc3339Timestamp) {
  const std::string now = rfc3339_utc_now();
  ASSERT_EQ(now.size(), 20u);
  EXPECT_EQ(now[4], '-');
  EXPECT_EQ(now[10], 'T');
  EXPECT_EQ(now.back(), 'Z');
}

}  // namespace
}  // namespace dlbench
