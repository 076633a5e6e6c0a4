#include <chrono>
#include <fstream>

#include <gtest/gtest.h>

#include "dlbench/core/planner.hpp"
#include "dlbench/core/run_state.hpp"
#include "dlbench/core/statistics.hpp"
#include "dlbench/core/status.hpp"
#include "dlbench/core/codec.hpp"

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
  refresh_derived_status(status, plan, Statistic::median, false);
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
  refresh_derived_status(status, plan, Statistic::median, false);
  EXPECT_EQ(status.progress.summary, "2/2");
  EXPECT_EQ(status.best->case_id, "1x2-bs8-fp32");
  EXPECT_DOUBLE_EQ(*status.results[1].speedup, 1.8);
  EXPECT_DOUBLE_EQ(*status.results[1].scaling_efficiency, 0.9);
}

// The terminal conditions of a Job and a TrainJob, and the run's own start and end.
TEST(RunConditions, CompleteOrFailedAtTheEndWithStartAndCompletionTimes) {
  BenchmarkRunSpec spec;
  spec.matrix = Matrix{{1}, {1}, {8}, {Precision::fp32}};
  const auto plan = plan_cases(spec);
  const auto succeeded = [] {
    CaseResult r;
    r.case_ = {1, 1, 8, Precision::fp32};
    r.throughput = Throughput{"sequences/s", summarize(std::vector<double>{10.0}), {10.0}};
    return r;
  };
  RunStateMachine pending({}, plan, spec.methodology, 1, 1, "t0");
  EXPECT_TRUE(pending.status().start_time.empty());
  RunStateMachine m({}, plan, spec.methodology, 1, 1, "t1");
  m.admit();
  EXPECT_EQ(m.status().start_time, "t1");
  EXPECT_EQ(find_condition(m.status().conditions, ConditionType::Complete), nullptr);  // not while running
  m.attempt_ended(succeeded());
  const Condition* complete = find_condition(m.status().conditions, ConditionType::Complete);
  ASSERT_NE(complete, nullptr);
  EXPECT_EQ(complete->status, ConditionStatus::True);
  EXPECT_EQ(complete->reason, "Succeeded");
  EXPECT_EQ(find_condition(m.status().conditions, ConditionType::Failed), nullptr);
  EXPECT_EQ(m.status().completion_time, "t1");
  EXPECT_EQ(m.status().best->unit, "sequences/s");

  RunStateMachine lost({}, plan, spec.methodology, 1, 1, "t2");
  lost.admit();
  CaseResult oom;
  oom.case_ = {1, 1, 8, Precision::fp32};
  oom.state = CaseState::Failed;
  oom.reason = "OutOfMemory";
  lost.attempt_ended(oom);
  EXPECT_EQ(find_condition(lost.status().conditions, ConditionType::Complete), nullptr);
  EXPECT_EQ(find_condition(lost.status().conditions, ConditionType::Failed)->status, ConditionStatus::True);
  EXPECT_EQ(lost.status().completion_time, "t2");

  // An invalid spec has failed as well; fixed, the run starts again and Failed is over.
  BenchmarkRunStatus invalid;
  mark_invalid(invalid, "spec.model: bad", 1, "t3");
  const Condition* failed = find_condition(invalid.conditions, ConditionType::Failed);
  ASSERT_NE(failed, nullptr);
  EXPECT_EQ(failed->status, ConditionStatus::True);
  EXPECT_EQ(failed->reason, "InvalidSpec");
  EXPECT_EQ(invalid.completion_time, "t3");
  RunStateMachine fixed(invalid, plan, spec.methodology, 2, 1, "t4");
  EXPECT_EQ(fixed.status().phase, Phase::Pending);
  EXPECT_EQ(find_condition(fixed.status().conditions, ConditionType::Failed)->status, ConditionStatus::False);
  EXPECT_TRUE(fixed.status().completion_time.empty());
}

TEST(DerivedStatus, Rfc3339Timestamp) {
  const std::string now = rfc3339_utc_now();
  ASSERT_EQ(now.size(), 20u);
  EXPECT_EQ(now[4], '-');
  EXPECT_EQ(now[10], 'T');
  EXPECT_EQ(now.back(), 'Z');
  EXPECT_TRUE(parse_rfc3339(now));
}

// The operator's times and dlbench launch's --stop-at: UTC only, to the second on the way out.
TEST(DerivedStatus, Rfc3339ReadsUtcWithOrWithoutAFractionAndWritesWholeSeconds) {
  const auto at = parse_rfc3339("2026-12-05T21:40:00Z");
  ASSERT_TRUE(at);
  EXPECT_EQ(std::chrono::system_clock::to_time_t(*at), 1796506800);
  EXPECT_EQ(rfc3339_utc(*at), "2026-12-05T21:40:00Z");
  const auto micro = parse_rfc3339("2026-12-05T21:40:00.25Z");
  ASSERT_TRUE(micro);
  EXPECT_EQ(*micro - *at, std::chrono::milliseconds(250));
  EXPECT_EQ(rfc3339_utc(*micro), "2026-12-05T21:40:00Z");  // rounded down
  EXPECT_EQ(rfc3339_utc(*at + std::chrono::seconds(3600 * 24 * 27)), "2027-01-01T21:40:00Z");
  for (const std::string bad : {"", "soon", "2026-12-05 21:40:00Z", "2026-12-05T21:40:00", "2026-12-05T21:40:00+01:00",
                                "2026-12-05T21:40Z", "x2026-12-05T21:40:00Z", "2026-13-05T21:40:00Z",
                                "2026-00-05T21:40:00Z", "2026-12-00T21:40:00Z", "2026-12-05T24:00:00Z",
                                "2026-12-05T21:60:00Z"}) {
    EXPECT_FALSE(parse_rfc3339(bad)) << bad;
  }
}

}  // namespace
}  // namespace dlbench

namespace dlbench {
namespace {

TEST(TimeoutMessage, NamesTheLimitAndTheRepeatsKeptAndIsKnownAgain) {
  EXPECT_EQ(timeout_message(900), "no result within limits.caseTimeoutSeconds (900 s)");
  EXPECT_EQ(timeout_message(60, 1), "no result within limits.caseTimeoutSeconds (60 s); the 1 repeat measured before is kept, unjudged");
  EXPECT_EQ(timeout_message(60, 4), "no result within limits.caseTimeoutSeconds (60 s); the 4 repeats measured before are kept, unjudged");
  EXPECT_TRUE(is_timeout_message(timeout_message(5) + "; no result document (exit code 143): ..."));
  EXPECT_FALSE(is_timeout_message("no result document (exit code 1): no result within limits.caseTimeoutSeconds (5 s)"));
  EXPECT_FALSE(is_timeout_message(""));
}

TEST(StoppedMessage, TheJobsLastLinesFollowLeavingOutRulesAndTheWorkersOwnLine) {
  const std::string said = "stopped by SIGTERM after 2 repeats";
  const std::deque<std::string> lines{"  case 1x2 repeat 2/30: 12.19 samples/s",
                                      "--------------------------------------------------------------------------",
                                      "dlbench-worker: " + said, "", "   ",
                                      "mpirun noticed that process rank 1 with PID 0 on node a exited on signal 9 (Killed)."};
  EXPECT_EQ(stopped_message_with_last_lines(said, lines),
            said + "\n  case 1x2 repeat 2/30: 12.19 samples/s\n"
                   "mpirun noticed that process rank 1 with PID 0 on node a exited on signal 9 (Killed).");
  EXPECT_EQ(stopped_message_with_last_lines(said, {}), said);
  EXPECT_EQ(stopped_message_with_last_lines(said, {"-----", "dlbench-worker: " + said}), said);
  // Bounded: the last characters kept, where the reason is.
  const std::string bounded = stopped_message_with_last_lines(said, {std::string(5000, 'x'), "the end"}, 100);
  EXPECT_EQ(bounded.size(), said.size() + 1 + 3 + 100);
  EXPECT_EQ(bounded.substr(bounded.size() - 7), "the end");
  EXPECT_FALSE(failure_is_permanent(kReasonStopped));
}

// The sample status of docs/ (four measured CPU cases), decoded.
BenchmarkRun sample_run() {
  std::ifstream in(std::string(DLBENCH_SOURCE_DIR) + "/docs/samples/isa-avx512.status.json");
  const auto decoded = decode_benchmark_run(nlohmann::json::parse(in));
  EXPECT_TRUE(decoded.ok()) << (decoded.errors.empty() ? "" : decoded.errors.front().to_string());
  return decoded.value.value_or(BenchmarkRun{});
}

std::size_t encoded_bytes(const BenchmarkRun& run) { return to_json(run).dump().size(); }

// A run of 1,000 cases outgrows what an API server over a default etcd takes (1.5 MiB a request);
// with less of each result it fits, and what the report and compare read stays.
TEST(ResultDetail, AThousandResultsFitAnApiServerOnceTrimmedWithWhatTheReportReadsKept) {
  BenchmarkRun run = sample_run();
  ASSERT_TRUE(run.status.has_value());
  const CaseResult measured = run.status->results.front();
  ASSERT_TRUE(measured.environment && measured.step_time_seconds && measured.flops && measured.optimizer);
  ASSERT_FALSE(measured.loss_after_repeats.empty());
  run.status->results.assign(1000, measured);
  CaseResult failed = measured;  // a failure whose message holds the job's last lines
  failed.state = CaseState::Failed;
  failed.throughput.reset();
  failed.reason = "WorkerExited";
  failed.message = std::string(2000, 'x') + "\nmpirun: process rank 1 exited on signal 9\n";
  run.status->results[1] = failed;
  constexpr std::size_t kEtcdRequestLimit = 1536 * 1024;
  EXPECT_GT(encoded_bytes(run), kEtcdRequestLimit);

  BenchmarkRun trimmed = run;
  keep_result_detail(*trimmed.status, ResultDetail::trimmed);
  EXPECT_LT(encoded_bytes(trimmed), kEtcdRequestLimit - 256 * 1024);  // room for a spec of 500 cases
  BenchmarkRun essential = run;
  keep_result_detail(*essential.status, ResultDetail::essential);
  EXPECT_LT(encoded_bytes(essential), 1024u * 1024u);

  const CaseResult& kept = trimmed.status->results[0];
  EXPECT_EQ(kept.case_, measured.case_);
  EXPECT_EQ(kept.throughput, measured.throughput);  // every repeat, for compare
  EXPECT_EQ(kept.stability, measured.stability);
  EXPECT_EQ(kept.speedup, measured.speedup);
  EXPECT_EQ(kept.scaling_efficiency, measured.scaling_efficiency);
  EXPECT_EQ(kept.environment, measured.environment);
  EXPECT_EQ(kept.optimizer, measured.optimizer);
  EXPECT_EQ(kept.interference, measured.interference);
  EXPECT_EQ(kept.start_time, measured.start_time);
  EXPECT_TRUE(kept.loss_after_repeats.empty());
  EXPECT_FALSE(kept.step_time_seconds.has_value());
  EXPECT_FALSE(kept.flops.has_value());
  EXPECT_EQ(trimmed.status->results[1].message, "mpirun: process rank 1 exited on signal 9");
  EXPECT_EQ(trimmed.status->results[1].reason, "WorkerExited");
  const CaseResult& least = essential.status->results[0];
  EXPECT_EQ(least.throughput, measured.throughput);
  EXPECT_EQ(least.stability, measured.stability);
  EXPECT_FALSE(least.environment.has_value());
  EXPECT_FALSE(least.optimizer.has_value());

  // Each is still a status the API admits, and comes back as written.
  for (const BenchmarkRun* r : {&trimmed, &essential}) {
    const auto decoded = decode_benchmark_run(to_json(*r));
    ASSERT_TRUE(decoded.ok()) << decoded.errors.front().to_string();
    EXPECT_EQ(decoded.value->status, r->status);
  }
  // Full detail changes nothing.
  BenchmarkRun full = run;
  keep_result_detail(*full.status, ResultDetail::full);
  EXPECT_EQ(full, run);
}

}  // namespace
}  // namespace dlbench
