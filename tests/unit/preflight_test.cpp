// spec.preflight: the self-test before the first case, as both executors drive it through the
// one status machine — planned on the largest topology, run with the run's precisions, its
// outcome in status.preflight; a failure skips every case and fails the run, a skip (an
// executor that cannot run it) lets the cases run.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "dlbench/core/codec.hpp"
#include "dlbench/core/planner.hpp"
#include "dlbench/core/result_document.hpp"
#include "dlbench/core/run_state.hpp"
#include "dlbench/core/status.hpp"
#include "dlbench/core/worker_command.hpp"

namespace dlbench {
namespace {

using ::testing::HasSubstr;

BenchmarkRun run_with_preflight() {
  BenchmarkRun run;
  run.metadata.name = "checked";
  run.spec.matrix = Matrix{{1, 2}, {1, 8}, {64, 32}, {Precision::bf16, Precision::fp32}};
  run.spec.preflight = PreflightSpec{true};
  return run;
}

TEST(Preflight, IsPlannedOnTheLargestTopologyWithTheRunsPrecisions) {
  const BenchmarkRun run = run_with_preflight();
  const auto preflight = plan_preflight(run.spec);
  ASSERT_TRUE(preflight);
  EXPECT_EQ(preflight->spec.nodes, 2);
  EXPECT_EQ(preflight->spec.gpus_per_node, 8);
  EXPECT_EQ(preflight->spec.batch_size_per_device, 32);
  EXPECT_TRUE(preflight->spec.preflight);
  EXPECT_EQ(preflight->id, "preflight-2x8");
  EXPECT_FALSE(preflight->baseline);
  EXPECT_EQ(planned_precisions(run.spec), (std::vector<Precision>{Precision::fp32, Precision::bf16}));

  BenchmarkRunSpec without = run.spec;
  without.preflight.reset();
  EXPECT_FALSE(plan_preflight(without));
  without.preflight = PreflightSpec{false};
  EXPECT_FALSE(plan_preflight(without));
}

TEST(Preflight, RunsTheWorkersSelfTestForEveryPrecisionOfTheRun) {
  const BenchmarkRun run = run_with_preflight();
  WorkerInvocation how;
  how.backend = "cuda";
  how.communicator = "nccl";
  how.output = "/tmp/out.json";
  const auto args = worker_arguments(run, plan_preflight(run.spec)->spec, how);
  EXPECT_EQ(args, (std::vector<std::string>{"dlbench-worker", "--self-test", "--backend", "cuda", "--precision",
                                            "fp32,bf16", "--model", "resnet50", "--communicator", "nccl", "--run",
                                            "checked", "--output",
                                            "/tmp/out.json"}));
  // A case of the same topology is still a case.
  EXPECT_EQ(worker_arguments(run, CaseSpec{2, 8, 32, Precision::fp32}, how)[1], "--model");
}

SelfTestDocument self_test(CaseState state) {
  SelfTestDocument doc;
  doc.nodes = 2;
  doc.devices = 16;
  doc.precisions = {"fp32", "bf16"};
  doc.state = state;
  doc.passed = state == CaseState::Succeeded ? 64 : 60;
  doc.failed = state == CaseState::Succeeded ? 0 : 4;
  if (state != CaseState::Succeeded) {
    doc.reason = kReasonSelfTestFailed;
    doc.message = "4 of 64 checks failed on 16 devices (cuda, nccl), on ranks 9";
    doc.failed_ranks = {9};
    doc.checks = {{9, "bf16", "conv 1x1 stride 2", "failed", 0.3, 0.015, "y off by 3.00e-01, bound 1.50e-02"}};
  } else {
    doc.message = "64 checks passed, 0 skipped on 16 devices (cuda, nccl)";
  }
  doc.environment.backend = "cuda";
  doc.start_time = "t0";
  doc.end_time = "t1";
  return doc;
}

TEST(Preflight, ItsDocumentRoundTripsAndIsJudgedAsThePreflights) {
  const auto preflight = *plan_preflight(run_with_preflight().spec);
  for (const CaseState state : {CaseState::Succeeded, CaseState::Failed}) {
    const SelfTestDocument doc = self_test(state);
    const auto decoded = decode_self_test_document(to_json(doc));
    ASSERT_TRUE(decoded.ok()) << decoded.errors.front().to_string();
    EXPECT_EQ(*decoded.value, doc);
    const auto judged = result_from_document(to_json(doc).dump(), preflight.spec, 2, std::nullopt, {});
    ASSERT_TRUE(judged);
    EXPECT_EQ(judged->state, state);
    EXPECT_EQ(judged->case_, preflight.spec);
    EXPECT_EQ(judged->attempts, 2);
    EXPECT_EQ(judged->message, doc.message);
  }
  // A case's result document is no self-test, and a self-test is no case's result.
  const auto wrong = result_from_document(R"({"schema": "dlbench.result/v1"})", preflight.spec, 1, std::nullopt, {});
  ASSERT_TRUE(wrong);
  EXPECT_EQ(wrong->reason, "InvalidResult");
  EXPECT_THAT(wrong->message, HasSubstr("dlbench.selftest/v1"));
  EXPECT_FALSE(decode_result_document(to_json(self_test(CaseState::Succeeded))).ok());
}

TEST(Preflight, ItsDocumentRefusesWhatCannotBeTrue) {
  nlohmann::json doc = to_json(self_test(CaseState::Succeeded));
  doc["summary"]["failed"] = 2;
  EXPECT_THAT(decode_self_test_document(doc).errors.front().to_string(), HasSubstr("Succeeded with 2 failed checks"));
  doc = to_json(self_test(CaseState::Failed));
  doc["checks"][0]["outcome"] = "passed";
  EXPECT_THAT(decode_self_test_document(doc).errors.front().to_string(), HasSubstr("not one of failed, skipped"));
  doc = to_json(self_test(CaseState::Failed));
  doc["failedRanks"] = {16};
  EXPECT_FALSE(decode_self_test_document(doc).ok()) << "rank 16 of 16 devices";
}

TEST(Preflight, ACompactDocumentFitsATerminationMessage) {
  SelfTestDocument doc = self_test(CaseState::Failed);
  doc.checks.assign(kSelfTestListedChecks, doc.checks.front());
  for (auto& c : doc.checks) c.detail = std::string(400, 'x');
  for (int r = 0; r < 1000; ++r) doc.failed_ranks.push_back(r % 16);
  const std::string compact = compact_self_test_document(to_json(doc).dump());
  EXPECT_LE(compact.size(), kTerminationMessageLimit);
  const auto decoded = decode_self_test_document(nlohmann::json::parse(compact));
  ASSERT_TRUE(decoded.ok()) << decoded.errors.front().to_string();
  EXPECT_EQ(decoded.value->failed, 4);
  EXPECT_GE(decoded.value->checks.size(), 1u);
}

CaseResult outcome(const PlannedCase& c, CaseState state, const std::string& reason = "") {
  CaseResult r;
  r.case_ = c.spec;
  r.state = state;
  r.reason = reason;
  r.message = reason.empty() ? "ok" : "why";
  if (state == CaseState::Succeeded && !c.spec.preflight) {
    r.throughput = Throughput{"samples/s", {100, 100, 100, 100, 0, 0}, {100}};
  }
  return r;
}

RunStateMachine machine_for(const BenchmarkRun& run, int attempts = 2) {
  RunStateMachine m({}, plan_cases(run.spec), run.spec.methodology, 1, attempts, "now", plan_preflight(run.spec));
  m.admit();
  return m;
}

TEST(Preflight, GoesFirstAndThenTheCasesRun) {
  const BenchmarkRun run = run_with_preflight();
  RunStateMachine m = machine_for(run);
  ASSERT_NE(m.current(), nullptr);
  EXPECT_EQ(m.current()->id, "preflight-2x8");
  EXPECT_EQ(m.status().progress.current_case, "preflight-2x8");
  EXPECT_EQ(m.status().progress.total_cases, 16) << "the preflight is not a case";
  EXPECT_FALSE(m.attempt_ended(outcome(*m.current(), CaseState::Succeeded)));
  ASSERT_TRUE(m.status().preflight);
  EXPECT_EQ(m.status().preflight->state, CaseState::Succeeded);
  EXPECT_TRUE(m.status().results.empty());
  EXPECT_FALSE(m.current()->spec.preflight);
  EXPECT_TRUE(m.current()->baseline);
  const auto events = m.take_events();
  EXPECT_TRUE(std::any_of(events.begin(), events.end(), [](const RunEvent& e) { return e.reason == "PreflightSucceeded"; }));

  // The status as written and read back resumes after the preflight, as the operator does.
  const auto decoded = decode_status(to_json(m.status()));
  ASSERT_TRUE(decoded.ok()) << decoded.errors.front().to_string();
  RunStateMachine resumed(*decoded.value, plan_cases(run.spec), run.spec.methodology, 1, 2, "later",
                          plan_preflight(run.spec));
  EXPECT_EQ(resumed.current()->id, m.current()->id);
  EXPECT_TRUE(resumed.status().preflight->case_.preflight);
}

TEST(Preflight, AFailedSelfTestIsNotRetriedAndSkipsEveryCase) {
  const BenchmarkRun run = run_with_preflight();
  RunStateMachine m = machine_for(run, 3);
  EXPECT_FALSE(m.attempt_ended(outcome(*m.current(), CaseState::Failed, kReasonSelfTestFailed)));
  EXPECT_TRUE(m.finished());
  EXPECT_EQ(m.status().phase, Phase::Failed);
  EXPECT_EQ(m.status().preflight->state, CaseState::Failed);
  ASSERT_EQ(m.status().results.size(), 16u);
  for (const auto& r : m.status().results) {
    EXPECT_EQ(r.state, CaseState::Skipped);
    EXPECT_EQ(r.reason, kReasonPreflightFailed);
    EXPECT_THAT(r.message, HasSubstr("the preflight self-test failed: SelfTestFailed: why"));
  }
  const Condition* failed = find_condition(m.status().conditions, ConditionType::Failed);
  ASSERT_NE(failed, nullptr);
  EXPECT_EQ(failed->reason, kReasonPreflightFailed);
}

TEST(Preflight, ALostWorkerIsRetriedAndASkippedPreflightLetsTheCasesRun) {
  const BenchmarkRun run = run_with_preflight();
  RunStateMachine m = machine_for(run, 2);
  EXPECT_TRUE(m.attempt_ended(outcome(*m.current(), CaseState::Failed, "WorkerExited")));
  EXPECT_EQ(m.attempt(), 2);
  EXPECT_TRUE(m.current()->spec.preflight);
  RunStateMachine local = machine_for(run);
  CaseResult cannot = outcome(*local.current(), CaseState::Skipped, "NeedsMoreNodes");
  local.skip(cannot);
  EXPECT_EQ(local.status().preflight->state, CaseState::Skipped);
  EXPECT_EQ(local.status().preflight->attempts, 0);
  ASSERT_NE(local.current(), nullptr);
  EXPECT_FALSE(local.current()->spec.preflight);
  EXPECT_EQ(local.status().phase, Phase::Running);
}

TEST(Preflight, TheApiAdmitsItForTheNativeEngineOnly) {
  nlohmann::json doc = {{"apiVersion", kApiVersion},
                        {"kind", kKind},
                        {"metadata", {{"name", "p"}}},
                        {"spec",
                         {{"model", "resnet50"},
                          {"matrix", {{"batchSizePerDevice", {8}}, {"precision", {"fp32"}}}},
                          {"preflight", {{"selfTest", true}}}}}};
  const auto ok = decode_benchmark_run(doc);
  ASSERT_TRUE(ok.ok()) << ok.errors.front().to_string();
  EXPECT_TRUE(ok.value->spec.preflight->self_test);
  EXPECT_EQ(to_json(ok.value->spec)["preflight"], (nlohmann::json{{"selfTest", true}}));
  doc["spec"]["preflight"] = nlohmann::json::object();
  const auto defaulted = decode_benchmark_run(doc);
  ASSERT_TRUE(defaulted.ok());
  EXPECT_FALSE(defaulted.value->spec.preflight->self_test);
  doc["spec"]["preflight"] = {{"selfTest", true}};
  doc["spec"]["engine"] = "command";
  doc["spec"]["command"] = {"python3", "train.py"};
  const auto refused = decode_benchmark_run(doc);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.errors.front().path, "spec.preflight.selfTest");
  EXPECT_THAT(refused.errors.front().message, HasSubstr("only with engine: native"));
  doc["spec"]["engine"] = "native";
  doc["spec"].erase("command");
  doc["spec"]["preflight"] = {{"selfTest", "yes"}};
  EXPECT_FALSE(decode_benchmark_run(doc).ok());
  doc["spec"]["preflight"] = {{"gpuBurn", true}};
  EXPECT_FALSE(decode_benchmark_run(doc).ok());
}

}  // namespace
}  // namespace dlbench
