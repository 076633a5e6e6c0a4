// DLBENCH_INJECT_FAILURE's form and its count of steps; mpi.OneRanksFailureReachesEveryRank runs
// it on a job's ranks.
#include <stdexcept>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "injected_failure.hpp"

namespace dlbench::worker {
namespace {

using ::testing::HasSubstr;

TEST(InjectedFailure, ReadsRankAndStep) {
  EXPECT_FALSE(parse_injected_failure(nullptr));
  EXPECT_FALSE(parse_injected_failure(""));
  const auto failure = parse_injected_failure("3:120");
  ASSERT_TRUE(failure);
  EXPECT_EQ(failure->rank, 3);
  EXPECT_EQ(failure->step, 120);
  EXPECT_EQ(parse_injected_failure("0:1")->step, 1);
}

TEST(InjectedFailure, RefusesAnythingElseNamingTheVariableAndTheForm) {
  for (const char* wrong : {"1", "1:", ":5", "1:0", "-1:5", "1:-5", "1:5x", " 1:5", "1:5:2", "a:b", "1:99999999999999999999",
                            "99999999999:1"}) {
    try {
      parse_injected_failure(wrong);
      ADD_FAILURE() << wrong << " was taken";
    } catch (const std::invalid_argument& e) {
      EXPECT_THAT(e.what(), HasSubstr("DLBENCH_INJECT_FAILURE: \"" + std::string(wrong) + "\" is not RANK:STEP"));
    }
  }
}

TEST(InjectedFailure, ThrowsOnItsRanksChosenStepOnly) {
  StepFailpoint mine(InjectedFailure{1, 3}, 1);
  mine.before_step();
  mine.before_step();
  try {
    mine.before_step();
    ADD_FAILURE() << "step 3 did not fail";
  } catch (const std::runtime_error& e) {
    EXPECT_THAT(e.what(), HasSubstr("injected by DLBENCH_INJECT_FAILURE in step 3"));
  }
  EXPECT_NO_THROW(mine.before_step());  // once: a step after it (the failure handled) goes on

  StepFailpoint other(InjectedFailure{1, 3}, 0);
  StepFailpoint none(std::nullopt, 1);
  for (int step = 0; step < 10; ++step) {
    EXPECT_NO_THROW(other.before_step());
    EXPECT_NO_THROW(none.before_step());
  }
}

}  // namespace
}  // namespace dlbench::worker
