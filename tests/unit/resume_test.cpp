// `dlbench run --resume`'s rules (core/resume): which spec changes keep results, and how an
// interrupted or finished status is reopened for the state machine to go on from.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "dlbench/core/planner.hpp"
#include "dlbench/core/resume.hpp"
#include "dlbench/core/run_state.hpp"
#include "dlbench/core/statistics.hpp"
#include "dlbench/core/status.hpp"

namespace dlbench {

void PrintTo(const SpecDifference& d, std::ostream* out) { *out << d.path << ": " << d.earlier << " -> " << d.now; }

namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

BenchmarkRunSpec two_batches() {
  BenchmarkRunSpec spec;
  spec.matrix = Matrix{{1}, {1}, {8, 16}, {Precision::fp32}};
  return spec;
}

CaseResult measured(const CaseSpec& c, double throughput) {
  CaseResult r;
  r.case_ = c;
  r.throughput = Throughput{"samples/s", summarize(std::vector<double>{throughput}), {throughput}};
  r.start_time = "t0";
  r.completion_time = "t0";
  return r;
}

// A run stopped by a signal after its first case, as `dlbench run` leaves it.
BenchmarkRunStatus interrupted_after_the_first(const BenchmarkRunSpec& spec) {
  RunStateMachine m({}, plan_cases(spec), spec.methodology, 1, 1, "t0");
  m.admit();
  m.attempt_ended(measured({1, 1, 8, Precision::fp32}, 10));
  m.interrupt();
  return m.status();
}

TEST(Resume, OnlyWhatChoosesTheCasesMayChange) {
  const BenchmarkRunSpec earlier = two_batches();
  BenchmarkRunSpec now = earlier;
  now.matrix->batch_size_per_device.push_back(32);
  now.limits.backoff_limit = 3;
  now.limits.case_timeout_seconds = 60;
  now.preflight = PreflightSpec{true};
  EXPECT_THAT(measurement_differences(earlier, now), IsEmpty());

  // A default written out is the default: the same spec.
  BenchmarkRunSpec explicit_default = earlier;
  explicit_default.methodology.measure_steps = Methodology{}.measure_steps;
  EXPECT_THAT(measurement_differences(earlier, explicit_default), IsEmpty());

  BenchmarkRunSpec fewer_steps = earlier;
  fewer_steps.methodology.measure_steps = 50;
  fewer_steps.data.image_size = 64;
  EXPECT_THAT(measurement_differences(earlier, fewer_steps),
              ElementsAre(SpecDifference{"spec.data.imageSize", "224", "64"},
                          SpecDifference{"spec.methodology.measureSteps", "100", "50"}));

  BenchmarkRunSpec other_model = earlier;
  other_model.model = Model::alexnet;
  other_model.worker.env.push_back({"NCCL_ALGO", "Ring", std::nullopt});
  EXPECT_THAT(measurement_differences(earlier, other_model),
              ElementsAre(SpecDifference{"spec.model", "\"resnet50\"", "\"alexnet\""},
                          SpecDifference{"spec.worker.env", "absent", "[{\"name\":\"NCCL_ALGO\",\"value\":\"Ring\"}]"}));

  // Eager steps and replayed graphs measure differently: no eager result is kept for a graph run.
  BenchmarkRunSpec graphs = earlier;
  graphs.cuda_graph = true;
  EXPECT_THAT(measurement_differences(earlier, graphs), ElementsAre(SpecDifference{"spec.cudaGraph", "absent", "true"}));
}

// dlbench run starts every run this way: from nothing, everything to run, the status untouched.
TEST(Resume, ANewRunGoesOnFromAnEmptyStatus) {
  BenchmarkRunSpec spec = two_batches();
  spec.preflight = PreflightSpec{true};
  const Resumption r = resume_from({}, plan_cases(spec), true, 1, "t0");
  EXPECT_EQ(r.kept, 0);
  EXPECT_EQ(r.to_run, 2);
  EXPECT_TRUE(r.preflight_to_run);
  EXPECT_FALSE(r.nothing_to_run());
  EXPECT_THAT(r.unplanned, IsEmpty());
  EXPECT_EQ(r.status, BenchmarkRunStatus{});
}

TEST(Resume, AnInterruptedRunGoesOnFromItsFirstCaseWithoutAResult) {
  const BenchmarkRunSpec spec = two_batches();
  const auto plan = plan_cases(spec);
  const BenchmarkRunStatus stopped = interrupted_after_the_first(spec);
  ASSERT_EQ(stopped.phase, Phase::Failed);
  ASSERT_EQ(find_condition(stopped.conditions, ConditionType::Failed)->reason, "Interrupted");

  const Resumption r = resume_from(stopped, plan, false, 1, "t1");
  EXPECT_EQ(r.kept, 1);
  EXPECT_EQ(r.to_run, 1);
  EXPECT_FALSE(r.preflight_to_run);
  EXPECT_THAT(r.unplanned, IsEmpty());
  EXPECT_EQ(r.status.phase, Phase::Pending);
  EXPECT_TRUE(r.status.completion_time.empty());
  EXPECT_EQ(r.status.start_time, "t0");
  const Condition* failed = find_condition(r.status.conditions, ConditionType::Failed);
  ASSERT_NE(failed, nullptr);
  EXPECT_EQ(failed->status, ConditionStatus::False);
  EXPECT_EQ(failed->reason, "Resumed");
  EXPECT_EQ(failed->message, "dlbench run --resume: 1 case results kept, 1 cases to run");
  EXPECT_EQ(r.status.results, stopped.results);

  RunStateMachine m(r.status, plan, spec.methodology, 1, 1, "t1");
  m.admit();
  ASSERT_NE(m.current(), nullptr);
  EXPECT_EQ(m.current()->id, "1x1-bs16-fp32");
  EXPECT_EQ(m.status().phase, Phase::Running);
  EXPECT_EQ(m.status().start_time, "t0");  // the run began when it first began
  EXPECT_EQ(m.status().progress.summary, "1/2");
  m.attempt_ended(measured({1, 1, 16, Precision::fp32}, 18));
  EXPECT_EQ(m.status().phase, Phase::Succeeded);
  EXPECT_EQ(m.status().completion_time, "t1");
  EXPECT_EQ(find_condition(m.status().conditions, ConditionType::Complete)->status, ConditionStatus::True);
  EXPECT_EQ(find_condition(m.status().conditions, ConditionType::Failed)->status, ConditionStatus::False);
  ASSERT_EQ(m.status().results.size(), 2u);
  EXPECT_EQ(m.status().results[0], stopped.results[0]);  // kept as measured, not measured again
}

TEST(Resume, AFinishedRunStandsUnlessItsMatrixGrew) {
  const BenchmarkRunSpec spec = two_batches();
  RunStateMachine m({}, plan_cases(spec), spec.methodology, 1, 1, "t0");
  m.admit();
  m.attempt_ended(measured({1, 1, 8, Precision::fp32}, 10));
  m.attempt_ended(measured({1, 1, 16, Precision::fp32}, 18));
  const BenchmarkRunStatus finished = m.status();
  ASSERT_EQ(finished.phase, Phase::Succeeded);

  const Resumption same = resume_from(finished, plan_cases(spec), false, 1, "t1");
  EXPECT_EQ(same.to_run, 0);
  EXPECT_TRUE(same.nothing_to_run());
  EXPECT_EQ(same.kept, 2);
  EXPECT_EQ(same.status, finished);  // nothing to go on with: not reopened

  BenchmarkRunSpec grown = spec;
  grown.matrix->batch_size_per_device.push_back(32);
  const auto plan = plan_cases(grown);
  const Resumption more = resume_from(finished, plan, false, 1, "t1");
  EXPECT_EQ(more.to_run, 1);
  EXPECT_EQ(more.status.phase, Phase::Pending);
  EXPECT_EQ(find_condition(more.status.conditions, ConditionType::Complete)->status, ConditionStatus::False);
  RunStateMachine again(more.status, plan, grown.methodology, 1, 1, "t1");
  again.admit();
  EXPECT_EQ(again.current()->id, "1x1-bs32-fp32");
  again.attempt_ended(measured({1, 1, 32, Precision::fp32}, 30));
  EXPECT_EQ(again.status().phase, Phase::Succeeded);
  EXPECT_EQ(find_condition(again.status().conditions, ConditionType::Complete)->status, ConditionStatus::True);
  EXPECT_EQ(again.status().progress.summary, "3/3");
}

// retry_failed: a Failed result is dropped and its case runs again, after the cases without one,
// with its attempts counted anew; a run whose cases all succeeded or were skipped has nothing to
// retry and stands as written.
TEST(Resume, RetryFailedRunsTheFailedCasesAgain) {
  const BenchmarkRunSpec spec = two_batches();
  RunStateMachine m({}, plan_cases(spec), spec.methodology, 1, 1, "t0");
  m.admit();
  CaseResult oom;
  oom.case_ = {1, 1, 8, Precision::fp32};
  oom.state = CaseState::Failed;
  oom.reason = "OutOfMemory";
  oom.message = "asked 2 GiB, 1 GiB free";
  m.attempt_ended(oom);
  m.attempt_ended(measured({1, 1, 16, Precision::fp32}, 18));
  const BenchmarkRunStatus finished = m.status();
  ASSERT_EQ(finished.phase, Phase::Succeeded);  // one case succeeded

  EXPECT_TRUE(resume_from(finished, plan_cases(spec), false, 1, "t1").nothing_to_run());  // the failure stays
  const Resumption r = resume_from(finished, plan_cases(spec), false, 1, "t1", true);
  EXPECT_EQ(r.retried, 1);
  EXPECT_EQ(r.kept, 1);
  EXPECT_EQ(r.to_run, 1);
  EXPECT_EQ(r.status.phase, Phase::Pending);
  EXPECT_THAT(find_condition(r.status.conditions, ConditionType::Complete)->message,
              HasSubstr("1 case results kept, 1 cases to run (1 that failed, again)"));
  RunStateMachine again(r.status, plan_cases(spec), spec.methodology, 1, 2, "t1");
  again.admit();
  ASSERT_NE(again.current(), nullptr);
  EXPECT_EQ(again.current()->id, "1x1-bs8-fp32");
  EXPECT_EQ(again.attempt(), 1);
  again.attempt_ended(measured({1, 1, 8, Precision::fp32}, 10));
  const BenchmarkRunStatus& s = again.status();
  EXPECT_EQ(s.phase, Phase::Succeeded);
  ASSERT_EQ(s.results.size(), 2u);
  EXPECT_EQ(s.results[1].state, CaseState::Succeeded);
  EXPECT_EQ(s.progress.summary, "2/2");

  const Resumption none = resume_from(s, plan_cases(spec), false, 1, "t2", true);
  EXPECT_EQ(none.retried, 0);
  EXPECT_TRUE(none.nothing_to_run());
  EXPECT_EQ(none.status, s);
}

TEST(Resume, ResultsOfCasesNoLongerPlannedAreNamedNotDropped) {
  const BenchmarkRunSpec spec = two_batches();
  const BenchmarkRunStatus stopped = interrupted_after_the_first(spec);
  BenchmarkRunSpec shrunk = spec;
  shrunk.matrix->batch_size_per_device = {16};
  const Resumption r = resume_from(stopped, plan_cases(shrunk), false, 1, "t1");
  EXPECT_THAT(r.unplanned, ElementsAre("1x1-bs8-fp32"));
  EXPECT_EQ(r.status.results.size(), 1u);
}

// A failed self-test decided nothing about the cases: after a resume it runs again, and so do
// the cases it skipped; a passed one is kept.
TEST(Resume, AFailedPreflightIsDecidedAgainAPassedOneIsKept) {
  BenchmarkRunSpec spec = two_batches();
  spec.preflight = PreflightSpec{true};
  const auto plan = plan_cases(spec);
  const auto preflight = plan_preflight(spec);
  RunStateMachine m({}, plan, spec.methodology, 1, 1, "t0", preflight);
  m.admit();
  CaseResult verdict;
  verdict.case_ = preflight->spec;
  verdict.state = CaseState::Failed;
  verdict.reason = kReasonSelfTestFailed;
  verdict.message = "1 of 34 checks failed";
  m.attempt_ended(verdict);
  ASSERT_EQ(m.status().results.size(), 2u);
  ASSERT_EQ(m.status().phase, Phase::Failed);

  const Resumption r = resume_from(m.status(), plan, true, 1, "t1");
  EXPECT_TRUE(r.preflight_to_run);
  EXPECT_EQ(r.kept, 0);
  EXPECT_EQ(r.to_run, 2);
  EXPECT_FALSE(r.status.preflight);
  EXPECT_EQ(find_condition(r.status.conditions, ConditionType::Failed)->reason, "Resumed");
  RunStateMachine again(r.status, plan, spec.methodology, 1, 1, "t1", preflight);
  again.admit();
  ASSERT_NE(again.current(), nullptr);
  EXPECT_TRUE(again.current()->spec.preflight);

  CaseResult passed = verdict;
  passed.state = CaseState::Succeeded;
  passed.reason.clear();
  passed.message = "34 checks passed";
  again.attempt_ended(passed);
  again.attempt_ended(measured({1, 1, 8, Precision::fp32}, 10));
  again.interrupt();
  const Resumption kept = resume_from(again.status(), plan, true, 1, "t2");
  EXPECT_FALSE(kept.preflight_to_run);
  ASSERT_TRUE(kept.status.preflight);
  EXPECT_EQ(kept.status.preflight->message, "34 checks passed");
  EXPECT_EQ(kept.to_run, 1);
  EXPECT_THAT(find_condition(kept.status.conditions, ConditionType::Failed)->message, HasSubstr("1 case results kept"));
}

}  // namespace
}  // namespace dlbench
