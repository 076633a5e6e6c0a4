#include <algorithm>
#include <random>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "dlbench/core/planner.hpp"

namespace dlbench {
namespace {

using ::testing::ElementsAre;

std::vector<std::string> ids(const std::vector<PlannedCase>& plan) {
  std::vector<std::string> out;
  for (const auto& c : plan) out.push_back(c.id);
  return out;
}

BenchmarkRunSpec matrix_spec(std::vector<int> nodes, std::vector<int> gpus, std::vector<int> batches,
                             std::vector<Precision> precisions) {
  BenchmarkRunSpec spec;
  spec.matrix = Matrix{std::move(nodes), std::move(gpus), std::move(batches), std::move(precisions)};
  return spec;
}

TEST(Planner, CaseIds) {
  EXPECT_EQ(case_id({2, 8, 128, Precision::amp}), "2x8-bs128-amp");
  EXPECT_EQ(case_id({1, 1, 64, Precision::fp32}), "1x1-bs64-fp32");
}

TEST(Planner, BaselinesFirstThenDevicesAscending) {
  const auto plan = plan_cases(matrix_spec({1, 2}, {1, 8}, {128}, {Precision::fp32}));
  EXPECT_THAT(ids(plan), ElementsAre("1x1-bs128-fp32", "2x1-bs128-fp32", "1x8-bs128-fp32", "2x8-bs128-fp32"));
  EXPECT_TRUE(plan[0].baseline);
  EXPECT_FALSE(plan[0].added_as_baseline);
  EXPECT_FALSE(plan[1].baseline);
}

TEST(Planner, AddsMissingBaselinePerBatchAndPrecision) {
  const auto plan = plan_cases(matrix_spec({1, 2}, {8}, {64, 128}, {Precision::fp32, Precision::amp}));
  ASSERT_EQ(plan.size(), 12u);
  const auto planned_ids = ids(plan);
  EXPECT_THAT(std::vector<std::string>(planned_ids.begin(), planned_ids.begin() + 4),
              ElementsAre("1x1-bs64-fp32", "1x1-bs64-amp", "1x1-bs128-fp32", "1x1-bs128-amp"));
  for (std::size_t i = 0; i < 4; ++i) {
    EXPECT_TRUE(plan[i].baseline);
    EXPECT_TRUE(plan[i].added_as_baseline);
  }
  for (std::size_t i = 4; i < plan.size(); ++i) EXPECT_FALSE(plan[i].baseline);
  EXPECT_EQ(plan[4].id, "1x8-bs64-fp32");
  EXPECT_EQ(plan.back().id, "2x8-bs128-amp");
}

TEST(Planner, ExistingBaselineIsNotDuplicated) {
  BenchmarkRunSpec spec;
  spec.cases = {{4, 8, 128, Precision::amp}, {1, 1, 128, Precision::amp}, {1, 8, 128, Precision::amp}};
  const auto plan = plan_cases(spec);
  EXPECT_THAT(ids(plan), ElementsAre("1x1-bs128-amp", "1x8-bs128-amp", "4x8-bs128-amp"));
  EXPECT_FALSE(plan[0].added_as_baseline);
}

TEST(Planner, EqualDevicesOrderByNodesThenBatchThenPrecision) {
  BenchmarkRunSpec spec;
  spec.cases = {{2, 4, 64, Precision::bf16}, {1, 8, 64, Precision::bf16}, {1, 8, 32, Precision::bf16},
                {1, 8, 32, Precision::fp32}};
  EXPECT_THAT(ids(plan_cases(spec)), ElementsAre("1x1-bs32-fp32", "1x1-bs32-bf16", "1x1-bs64-bf16", "1x8-bs32-fp32",
                                                 "1x8-bs32-bf16", "1x8-bs64-bf16", "2x4-bs64-bf16"));
}

TEST(Planner, DeterministicWhateverTheInputOrder) {
  const auto reference = plan_cases(matrix_spec({1, 2, 4}, {1, 8}, {64, 128, 256}, {Precision::fp32, Precision::amp}));
  std::mt19937 rng(7);
  for (int trial = 0; trial < 20; ++trial) {
    std::vector<int> nodes{1, 2, 4}, gpus{1, 8}, batches{64, 128, 256};
    std::vector<Precision> precisions{Precision::fp32, Precision::amp};
    std::shuffle(nodes.begin(), nodes.end(), rng);
    std::shuffle(gpus.begin(), gpus.end(), rng);
    std::shuffle(batches.begin(), batches.end(), rng);
    std::shuffle(precisions.begin(), precisions.end(), rng);
    EXPECT_EQ(plan_cases(matrix_spec(nodes, gpus, batches, precisions)), reference);
  }
  EXPECT_EQ(reference.size(), 36u);  // 3 × 2 × 3 × 2, the 1×1 ones included
}

}  // namespace
}  // namespace dlbench
