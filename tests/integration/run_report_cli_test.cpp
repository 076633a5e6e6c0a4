// `dlbench run` (the local executor, with the real worker and mpirun) and `dlbench report`.
#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <turbojpeg.h>

#include "../support/process.hpp"
#include "dlbench/core/codec.hpp"
#include "dlbench/core/statistics.hpp"
#include "dlbench/core/planner.hpp"
#include "dlbench/core/result_document.hpp"
#include "dlbench/core/status.hpp"

namespace dlbench {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
using testing::Outcome;

// A measured case's result as a worker reports it: its repeats and their summary.
CaseResult measured(const CaseSpec& c, const std::vector<double>& repeats) {
  CaseResult r;
  r.case_ = c;
  r.throughput = Throughput{"samples/s", summarize(repeats), repeats};
  return r;
}

class RunCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("dlbench-run-test-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return (dir_ / name).string();
  }
  Outcome dlbench(const std::string& args) {
    return testing::run_shell("OMP_NUM_THREADS=1 " + std::string(DLBENCH_CLI_BINARY) + " " + args, dir_.string());
  }
  // `dlbench ARGS` started in the background, for a test to signal: its pid. Its output goes to
  // out.txt, and its exit status to the file rc once it has ended.
  pid_t dlbench_in_background(const std::string& args) {
    const std::string command = "cd " + dir_.string() + " && ( " + DLBENCH_CLI_BINARY + " " + args +
                                " > out.txt 2>&1 & echo $! > pid.tmp; mv pid.tmp pid; wait $!; echo $? > rc.tmp; "
                                "mv rc.tmp rc ) &";
    EXPECT_EQ(std::system(command.c_str()), 0);
    for (int i = 0; i < 100 && !std::filesystem::exists(dir_ / "pid"); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return std::stoi(testing::slurp(dir_ / "pid"));
  }
  // A stand-in dlbench-worker that logs each call's --batch-size to the file `calls`, and for
  // batch 2, while the file `trigger` is there, runs `batch_2` (a shell command list) instead
  // of the real worker.
  std::string batch_2_stand_in(const std::string& trigger, const std::string& batch_2) {
    const std::string worker =
        write("worker.sh", "#!/bin/sh\necho \"$*\" | grep -o -- '--batch-size [0-9]*' >> '" + (dir_ / "calls").string() +
                               "'\ncase \" $* \" in *\" --batch-size 2 \"*) [ -f '" + (dir_ / trigger).string() +
                               "' ] && { " + batch_2 + " } ;; esac\nexec " + DLBENCH_WORKER_BINARY + " \"$@\"\n");
    std::filesystem::permissions(worker, std::filesystem::perms::owner_all);
    return worker;
  }
  BenchmarkRun status(const std::string& name) {
    const auto decoded = decode_benchmark_run(nlohmann::json::parse(testing::slurp(dir_ / name)));
    EXPECT_TRUE(decoded.ok()) << (decoded.errors.empty() ? "" : decoded.errors.front().to_string());
    return decoded.value.value_or(BenchmarkRun{});
  }

  static std::string sweep(const std::string& limits = "") {
    return R"(apiVersion: dlbench.io/v1alpha1
kind: BenchmarkRun
metadata: {name: small}
spec:
  model: resnet50
  data: {imageSize: 32}
  matrix: {nodes: [1, 2], gpusPerNode: [1, 2], batchSizePerDevice: [2], precision: [fp32]}
  # Two steps a repeat spread on a shared machine: scaled all the same, so that speed-ups are there.
  methodology: {warmupSteps: 1, measureSteps: 2, repeats: 2, stability: {includeUnstable: true}}
)" + limits;
  }

  // One rank, batches 1, 2 and 3, one timed step each: the smallest run with a case in the
  // middle for batch_2_stand_in to act on.
  static std::string three_batches(const std::string& name, const std::string& more = "") {
    return R"(apiVersion: dlbench.io/v1alpha1
kind: BenchmarkRun
metadata: {name: )" + name + R"(}
spec:
  model: resnet50
  data: {imageSize: 32}
  matrix: {gpusPerNode: [1], batchSizePerDevice: [1, 2, 3], precision: [fp32]}
  methodology: {warmupSteps: 0, measureSteps: 1, repeats: 1, stability: {includeUnstable: true}}
)" + more;
  }

  std::filesystem::path dir_;
};

// A GPU case's energy, from the worker's energyJoules to the case's line, the status and the
// report. No GPU here: a stand-in runs the real worker and adds what a GPU's counter would have
// read, 0.5 J a sample in every repeat.
TEST_F(RunCli, AMeasuredCasesEnergyReachesItsLineTheStatusAndTheReport) {
  const std::string worker = write("worker.py", std::string("#!/usr/bin/python3\nimport json, subprocess, sys\n") +
                                                    "args = sys.argv[1:]\nrc = subprocess.call([\"" + DLBENCH_WORKER_BINARY +
                                                    "\"] + args)\npath = args[args.index(\"--output\") + 1]\n"
                                                    "doc = json.load(open(path))\n"
                                                    "samples = doc[\"globalBatchSize\"] * doc[\"methodology\"][\"measureSteps\"]\n"
                                                    "doc[\"energyJoules\"] = [0.5 * samples] * len(doc[\"throughput\"][\"repeats\"])\n"
                                                    "json.dump(doc, open(path, \"w\"))\nsys.exit(rc)\n");
  std::filesystem::permissions(worker, std::filesystem::perms::owner_all);
  const Outcome o = dlbench("run -f " + write("run.yaml", three_batches("metered")) + " --worker " + worker +
                            " --backend cpu --output s.json");
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_THAT(o.out, ::testing::ContainsRegex("samples/s \\(median of 1\\), speed-up 1.00, efficiency 100%, 0.5000 J a "
                                              "sample, [0-9]+ W a device\n"));
  const BenchmarkRun s = status("s.json");
  ASSERT_EQ(s.status->results.size(), 3u);
  for (const CaseResult& r : s.status->results) {
    ASSERT_TRUE(r.energy.has_value()) << case_id(r.case_);
    EXPECT_DOUBLE_EQ(r.energy->joules_per_sample, 0.5);
    // One repeat: its watts a device are its joules a sample x its throughput.
    EXPECT_NEAR(r.energy->watts_per_device, 0.5 * r.throughput->summary.median, 1e-9 * r.throughput->summary.median);
  }
  EXPECT_THAT(dlbench("report s.json --format csv").out, HasSubstr("\njoulespersample,fp32,2,metered,1,1,0.5\n"));
}

// A precision the CPU backend cannot run is one Failed result with reason Unsupported, recorded
// on its first attempt (backoffLimit is not spent on it), and the run goes on with the next case.
TEST_F(RunCli, UnsupportedPrecisionIsAResultNotARetriedUsageError) {
  const std::string text = R"(apiVersion: dlbench.io/v1alpha1
kind: BenchmarkRun
metadata: {name: mixed}
spec:
  model: alexnet
  data: {imageSize: 64}
  matrix: {batchSizePerDevice: [1], precision: [fp32, amp]}
  methodology: {warmupSteps: 0, measureSteps: 1, repeats: 1}
  limits: {backoffLimit: 3}
)";
  const Outcome o = dlbench("run -f " + write("run.yaml", text) + " --backend cpu");
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_THAT(o.out, HasSubstr("attempt 1/4 failed: Unsupported"));
  EXPECT_THAT(o.out, ::testing::Not(HasSubstr("attempt 2/4")));
  const BenchmarkRun run = status("mixed.status.json");
  ASSERT_TRUE(run.status.has_value());
  ASSERT_EQ(run.status->results.size(), 2u);
  for (const auto& r : run.status->results) {
    if (r.case_.precision == Precision::fp32) {
      EXPECT_EQ(r.state, CaseState::Succeeded);
      // The real worker's word on how it trained: alexnet's own rate at batch 1, the spec having none.
      EXPECT_EQ(r.optimizer, (OptimizerSpec{OptimizerName::sgd, 0.01 / 256, 0.9, 1e-4}));
      // Its training arithmetic: alexnet's FLOPs x the one repeat's throughput, no peak on a CPU.
      ASSERT_TRUE(r.flops.has_value());
      EXPECT_GT(r.flops->training_per_sample, 1e8);
      EXPECT_NEAR(r.flops->per_second_per_device, r.flops->training_per_sample * r.throughput->summary.median,
                  1e-9 * r.flops->per_second_per_device);
      EXPECT_FALSE(r.flops->mfu.has_value());
      // And the loss after its one repeat, a finite cross-entropy over 1000 classes.
      ASSERT_EQ(r.loss_after_repeats.size(), 1u);
      EXPECT_GT(r.loss_after_repeats[0], 0);
      EXPECT_LT(r.loss_after_repeats[0], 100);
    } else {
      EXPECT_EQ(r.state, CaseState::Failed);
      EXPECT_EQ(r.reason, "Unsupported");
      EXPECT_EQ(r.attempts, 1);
      EXPECT_THAT(r.message, HasSubstr("Allowed on the cpu backend here: fp32"));
    }
  }
}

// spec.cudaGraph reaches the worker as --cuda-graph on: the cpu backend cannot capture a step, so
// each case is one Failed result with reason Unsupported, not retried and not a usage error; a
// multi-device case with it is refused before anything runs.
TEST_F(RunCli, StepGraphsOnABackendThatCannotCaptureThemAreUnsupportedResults) {
  const std::string text = R"(apiVersion: dlbench.io/v1alpha1
kind: BenchmarkRun
metadata: {name: graphs}
spec:
  model: alexnet
  cudaGraph: true
  data: {imageSize: 64}
  matrix: {batchSizePerDevice: [1, 2], precision: [fp32]}
  methodology: {warmupSteps: 0, measureSteps: 1, repeats: 1}
  limits: {backoffLimit: 2}
)";
  const std::string file = write("run.yaml", text);
  const Outcome valid = dlbench("validate -f " + file);
  ASSERT_EQ(valid.exit_code, 0) << valid.out << valid.err;
  EXPECT_THAT(valid.out, HasSubstr("report the median; each step a replayed CUDA graph (captured after one eager step)"));
  const Outcome o = dlbench("run -f " + file + " --backend cpu");
  EXPECT_EQ(o.exit_code, 1) << o.out << o.err;  // no case measured: the run is Failed
  EXPECT_THAT(o.out, HasSubstr("graphs: Failed (2/2 cases)"));
  EXPECT_THAT(o.out, HasSubstr("(cpu backend, "));
  EXPECT_THAT(o.out, HasSubstr(", steps as CUDA graphs), status in"));
  EXPECT_THAT(o.out, Not(HasSubstr("attempt 2/3")));
  const BenchmarkRun run = status("graphs.status.json");
  ASSERT_TRUE(run.status.has_value());
  ASSERT_EQ(run.status->results.size(), 2u);
  for (const auto& r : run.status->results) {
    EXPECT_EQ(r.state, CaseState::Failed) << case_id(r.case_);
    EXPECT_EQ(r.reason, "Unsupported");
    EXPECT_EQ(r.attempts, 1);
    EXPECT_THAT(r.message, HasSubstr("--cuda-graph on: the cpu backend cannot capture a step as a graph"));
    EXPECT_FALSE(r.throughput.has_value());
  }
  const Outcome two = dlbench("run -f " +
                              write("two.yaml", std::string(text).replace(text.find("matrix: {"), 9, "matrix: {nodes: [1, 2], ")) +
                              " --backend cpu");
  EXPECT_EQ(two.exit_code, 1) << two.out;  // an invalid spec, as BadInput's
  EXPECT_THAT(two.err, HasSubstr("spec.cudaGraph: true runs one device a case"));
  EXPECT_THAT(two.err, HasSubstr("spec.matrix.nodes[1] is 2; allowed with cudaGraph true: 1"));
  EXPECT_THAT(two.out, Not(HasSubstr("[1/")));  // no case started
}

// A learning rate that makes the loss NaN fails each case with LossNotFinite, on one rank and on
// two (both ranks stop after the same repeat), on the first attempt: the same spec diverges again.
TEST_F(RunCli, ADivergedCaseIsAFailedResultNotARetry) {
  const std::string text = R"(apiVersion: dlbench.io/v1alpha1
kind: BenchmarkRun
metadata: {name: diverges}
spec:
  model: alexnet
  data: {imageSize: 64}
  matrix: {gpusPerNode: [1, 2], batchSizePerDevice: [2], precision: [fp32]}
  optimizer: {learningRate: 100}
  methodology: {warmupSteps: 1, measureSteps: 2, repeats: 5}
  limits: {backoffLimit: 2}
)";
  const Outcome o = dlbench("run -f " + write("run.yaml", text) + " --backend cpu");
  ASSERT_EQ(o.exit_code, 1) << o.out << o.err;  // no case succeeded
  EXPECT_THAT(o.out, HasSubstr("dlbench run diverges: alexnet (sgd at learning rate 100), 2 cases"));
  EXPECT_THAT(o.out, HasSubstr("attempt 1/3 failed: LossNotFinite"));
  EXPECT_THAT(o.out, Not(HasSubstr("attempt 2/3")));
  const BenchmarkRun run = status("diverges.status.json");
  ASSERT_TRUE(run.status.has_value());
  EXPECT_EQ(run.status->phase, Phase::Failed);
  EXPECT_FALSE(run.status->best.has_value());
  ASSERT_EQ(run.status->results.size(), 2u);
  for (const auto& r : run.status->results) {
    EXPECT_EQ(r.state, CaseState::Failed) << r.case_.gpus_per_node;
    EXPECT_EQ(r.reason, "LossNotFinite") << r.message;
    EXPECT_EQ(r.attempts, 1);
    EXPECT_THAT(r.message, HasSubstr("was NaN"));
    ASSERT_TRUE(r.throughput.has_value());  // kept, not published
    EXPECT_LT(r.throughput->repeats.size(), 5u);
    EXPECT_FALSE(r.speedup.has_value());
    ASSERT_TRUE(r.optimizer.has_value());
    EXPECT_EQ(r.optimizer->learning_rate, 100);
    EXPECT_TRUE(r.loss_after_repeats.empty()) << "a NaN has no place in the status; the message says it";
  }
  const Outcome report = dlbench("report diverges.status.json");
  EXPECT_EQ(report.exit_code, 0) << report.err;
  EXPECT_THAT(report.out, HasSubstr("LossNotFinite"));
}

// InceptionV3 runs at its 299 pixels and `dlbench report` reads its status; below 299 the run is
// refused before anything starts, naming the field.
TEST_F(RunCli, InceptionV3RunsAt299PixelsAndIsRefusedBelow) {
  const std::string text = R"(apiVersion: dlbench.io/v1alpha1
kind: BenchmarkRun
metadata: {name: inception}
spec:
  model: inception_v3
  data: {imageSize: 299}
  matrix: {batchSizePerDevice: [2], precision: [fp32]}
  methodology: {warmupSteps: 0, measureSteps: 1, repeats: 1}
)";
  const Outcome o = dlbench("run -f " + write("run.yaml", text) + " --backend cpu");
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  const BenchmarkRun run = status("inception.status.json");
  ASSERT_TRUE(run.status.has_value());
  ASSERT_EQ(run.status->results.size(), 1u);
  EXPECT_EQ(run.status->results[0].state, CaseState::Succeeded);
  const Outcome report = dlbench("report inception.status.json");
  EXPECT_EQ(report.exit_code, 0) << report.err;
  EXPECT_THAT(report.out, HasSubstr("fp32: throughput (samples/s)"));

  std::string small = text;
  small.replace(small.find("imageSize: 299"), 14, "imageSize: 224");
  const Outcome refused = dlbench("run -f " + write("small.yaml", small) + " --backend cpu");
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_THAT(refused.err + refused.out, HasSubstr("spec.data.imageSize: 224 is too small for inception_v3"));
}

// bert-base through the local executor: the worker gets the sequence length and AdamW, the
// results and the report count sequences/s, and image fields are refused for it, naming the field.
TEST_F(RunCli, BertBaseRunsSequencesWithAdamWAndReportsSequencesPerSecond) {
  const std::string text = R"(apiVersion: dlbench.io/v1alpha1
kind: BenchmarkRun
metadata: {name: bert}
spec:
  model: bert-base
  data: {sequenceLength: 16}
  matrix: {batchSizePerDevice: [2], precision: [fp32]}
  methodology: {warmupSteps: 0, measureSteps: 1, repeats: 1}
  optimizer: {name: adamw, learningRate: 0.0001, momentum: 0.9, weightDecay: 0.01}
)";
  const Outcome o = dlbench("run -f " + write("run.yaml", text) + " --backend cpu");
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_THAT(o.out, HasSubstr("sequences/s"));
  const BenchmarkRun run = status("bert.status.json");
  ASSERT_TRUE(run.status.has_value());
  ASSERT_EQ(run.status->results.size(), 1u);
  const auto& result = run.status->results[0];
  EXPECT_EQ(result.state, CaseState::Succeeded) << result.message;
  ASSERT_TRUE(result.throughput.has_value());
  EXPECT_EQ(result.throughput->unit, "sequences/s");
  EXPECT_GT(result.throughput->summary.median, 0.0);
  const Outcome report = dlbench("report bert.status.json");
  EXPECT_EQ(report.exit_code, 0) << report.err;
  EXPECT_THAT(report.out, HasSubstr("fp32: throughput (sequences/s)"));

  std::string images = text;
  images.replace(images.find("data: {sequenceLength: 16}"), 26, "data: {imageSize: 300}");
  const Outcome refused = dlbench("run -f " + write("images.yaml", images) + " --backend cpu");
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_THAT(refused.err + refused.out,
              HasSubstr("spec.data.imageSize: 300 is not for bert-base: it trains on token sequences"));
}

// Where a precision has no measured case (amp on a CPU), its grids still count the model's unit,
// and the report lists every unmeasured case with its state, reason and message, in table and
// markdown (a message's pipes escaped, its lines kept apart); csv rows stay the grids' cells.
TEST_F(RunCli, TheReportSaysWhyACaseWasNotMeasured) {
  BenchmarkRun run;
  run.metadata.name = "bert";
  run.spec.model = Model::bert_base;
  run.spec.cases = {{1, 1, 8, Precision::amp}, {1, 2, 8, Precision::amp}};
  BenchmarkRunStatus s;
  s.phase = Phase::Failed;
  CaseResult unsupported;
  unsupported.case_ = run.spec.cases[0];
  unsupported.state = CaseState::Failed;
  unsupported.reason = "Unsupported";
  unsupported.message = "fp16 | amp needs a GPU";
  CaseResult exited = unsupported;
  exited.case_ = run.spec.cases[1];
  exited.reason = "WorkerExited";
  exited.message = "exit code 1; last lines:\nTraceback\nRuntimeError";
  exited.attempts = 2;
  s.results = {unsupported, exited};
  run.status = s;
  write("bert.json", to_json(run).dump());

  const Outcome table = dlbench("report bert.json");
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("amp: throughput (sequences/s)"));
  EXPECT_THAT(table.out, HasSubstr("\ncases not measured\n"
                                   "  1x1-bs8-amp: Failed, Unsupported: fp16 | amp needs a GPU\n"
                                   "  1x2-bs8-amp: Failed after 2 attempts, WorkerExited: exit code 1; last lines:\n"
                                   "      Traceback\n"
                                   "      RuntimeError\n"));
  const Outcome markdown = dlbench("report bert.json --format markdown");
  ASSERT_EQ(markdown.exit_code, 0) << markdown.err;
  EXPECT_THAT(markdown.out, HasSubstr("**amp: throughput (sequences/s)**"));
  EXPECT_THAT(markdown.out, HasSubstr("| case | state | reason | message |\n|---|---|---|---|\n"
                                      "| 1x1-bs8-amp | Failed | Unsupported | fp16 \\| amp needs a GPU |\n"
                                      "| 1x2-bs8-amp | Failed after 2 attempts | WorkerExited | "
                                      "exit code 1; last lines: Traceback RuntimeError |\n"));
  const Outcome csv = dlbench("report bert.json --format csv");
  ASSERT_EQ(csv.exit_code, 0) << csv.err;
  EXPECT_THAT(csv.out, Not(HasSubstr("Unsupported")));
  // A bare status says nothing of the model: the unit falls back on samples.
  write("bare.json", to_json(s).dump());
  EXPECT_THAT(dlbench("report bare.json").out, HasSubstr("amp: throughput (samples/s)"));
}

// An impossible speed-up (a disturbed baseline) is neither in the grids nor lost: its cells say
// "refused" and the report says why, from the status the operator or dlbench run wrote.
TEST_F(RunCli, TheReportShowsARefusedSpeedupAndWhy) {
  BenchmarkRun run;
  run.metadata.name = "noisy";
  run.spec.cases = {{1, 1, 2, Precision::fp32}, {1, 2, 2, Precision::fp32}};
  BenchmarkRunStatus s;
  s.phase = Phase::Succeeded;
  for (const auto& [c, repeats] : {std::pair{run.spec.cases[0], std::vector<double>{0.74, 0.30, 1.60}},
                                   std::pair{run.spec.cases[1], std::vector<double>{5.24, 5.20, 5.30}}}) {
    s.results.push_back(measured(c, repeats));
  }
  refresh_derived_status(s, plan_cases(run.spec), run.spec.methodology.statistic,
                           run.spec.methodology.stability.include_unstable);
  ASSERT_FALSE(s.results[1].scaling_refused.empty());
  run.status = s;
  write("noisy.json", to_json(run).dump());
  const Outcome table = dlbench("report noisy.json");
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, ::testing::ContainsRegex("speed-up over 1x1\n  batch +1x1 +1x2\n +2 +1.00 +refused\n"));
  EXPECT_THAT(table.out, HasSubstr("\nspeed-ups refused\n  1x2-bs2-fp32: speed-up 7.08 over 1x1-bs2-fp32 on 2 devices"));
  const Outcome markdown = dlbench("report noisy.json --format markdown");
  EXPECT_THAT(markdown.out, HasSubstr("**speed-ups refused**\n\n| case | why |\n|---|---|\n| 1x2-bs2-fp32 | speed-up 7.08"));
  // The disturbed case says what disturbed it, from its result's interference.
  s.results[0].interference = InterferenceReport{0.57, 0.0, std::nullopt, InterferenceVerdict::interfered};
  run.status = s;
  write("noisy.json", to_json(run).dump());
  EXPECT_THAT(dlbench("report noisy.json").out,
              HasSubstr("\nmeasured under other load or throttled\n  1x1-bs2-fp32: interfered: tasks waited for a CPU 57.0% of the "
                        "time, steal 0.0%\n"));
  // A GPU that held its clocks down for heat: throttled, with its readings.
  GpuReadings hot{0, 1410, 1500, 1980, {GpuThrottleReason::thermal}, 91, 650, 40};
  s.results[1].interference = InterferenceReport{0.01, 0.0, hot, interference_verdict(0.01, 0.0, &hot)};
  run.status = s;
  write("noisy.json", to_json(run).dump());
  EXPECT_THAT(dlbench("report noisy.json").out,
              HasSubstr("  1x2-bs2-fp32: throttled: tasks waited for a CPU 1.0% of the time, steal 0.0%; GPU: 0 other "
                        "processes, SM clock median 1500 of 1980 MHz, thermal\n"));

  // Its repeats did not agree after 7 more: its cell says unstable, it is nobody's baseline, and
  // the report gives the figures; includeUnstable lets it count again.
  s.results[0].stability = judge_stability(s.results[0].throughput->repeats, 3, 0.05);
  s.results[0].stability->extra_repeats = 0;
  s.results[0].reason = kReasonUnstable;
  s.results[0].message = describe_unstable(*s.results[0].stability, 3, s.results[0].throughput->summary);
  refresh_derived_status(s, plan_cases(run.spec), run.spec.methodology.statistic,
                           run.spec.methodology.stability.include_unstable);
  run.status = s;
  write("noisy.json", to_json(run).dump());
  const Outcome unstable = dlbench("report noisy.json");
  EXPECT_THAT(unstable.out, ::testing::ContainsRegex("throughput \\(samples/s\\)\n  batch +1x1 +1x2\n +2 +0.74 unstable +5.24\n"));
  EXPECT_THAT(unstable.out, HasSubstr("\nunstable cases (left out of best and scaling)\n  1x1-bs2-fp32: cv 75.1% over the last 3 "
                                      "repeats is above the bound 5.0% (not measured again)"));
  EXPECT_THAT(unstable.out, HasSubstr("  1x2-bs2-fp32: its baseline 1x1-bs2-fp32 is unstable (Unstable)"));
  EXPECT_THAT(dlbench("report noisy.json --format csv").out, HasSubstr("throughput,fp32,2,noisy,1,1,0.74\n"));
  run.spec.methodology.stability.include_unstable = true;
  write("noisy.json", to_json(run).dump());
  EXPECT_THAT(dlbench("report noisy.json").out, HasSubstr("speed-up 7.08 over 1x1-bs2-fp32"));  // judged again
}

// amp on the CPU with fp16 emulated, asked for through spec.worker.env (a diagnosis of amp's
// numerics without a GPU): the case runs and its status says so (backendOptions.fp16); the report
// marks its throughput as no fp16 figure and names the case, and lists its loss scaling, which at
// this shape skips every step, with the overflow the worker traced after the repeats.
TEST_F(RunCli, AmpWithFp16EmulatedOnTheCpuIsMarkedAsNoFp16Figure) {
  const std::string text = R"(apiVersion: dlbench.io/v1alpha1
kind: BenchmarkRun
metadata: {name: emulated}
spec:
  model: resnet50
  data: {imageSize: 32}
  matrix: {gpusPerNode: [1], batchSizePerDevice: [2], precision: [fp32, amp]}
  methodology: {warmupSteps: 0, measureSteps: 3, repeats: 1}
  worker:
    env:
    - {name: DLBENCH_CPU_FP16, value: emulated}
)";
  const Outcome o = dlbench("run -f " + write("run.yaml", text) + " --backend cpu");
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  const BenchmarkRun run = status("emulated.status.json");
  ASSERT_TRUE(run.status.has_value());
  ASSERT_EQ(run.status->results.size(), 2u);
  for (const CaseResult& r : run.status->results) {
    ASSERT_EQ(r.state, CaseState::Succeeded) << case_id(r.case_) << ": " << r.message;
    ASSERT_TRUE(r.environment.has_value());
    EXPECT_EQ(r.environment->backend_options.at("fp16"), "emulated");
    if (r.case_.precision == Precision::amp) {
      ASSERT_TRUE(r.loss_scaling.has_value());
      EXPECT_THAT(r.loss_scaling->overflow, HasSubstr("\nreplayed at loss scale "));
    }
  }
  const Outcome report = dlbench("report emulated.status.json");
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_THAT(report.out, HasSubstr("\namp: throughput (samples/s), fp16 emulated on the CPU: not fp16's speed\n"));
  EXPECT_THAT(report.out, HasSubstr("\nfp32: throughput (samples/s)\n"));
  EXPECT_THAT(report.out, HasSubstr("\namp cases with fp16 emulated on the CPU (their numerics, not fp16's speed)\n"
                                    "  1x1-bs2-amp: DLBENCH_CPU_FP16=emulated: each fp16 op ran as the CPU's fp32 op "));
  EXPECT_THAT(report.out, Not(HasSubstr("1x1-bs2-fp32: DLBENCH_CPU_FP16")));
  EXPECT_THAT(report.out, ::testing::ContainsRegex("amp cases whose loss scaling skipped much of the training\n"
                                                   "  1x1-bs2-amp: [0-9]+ of [0-9]+ steps skipped"));
  EXPECT_THAT(report.out, HasSubstr("\n    replayed at loss scale "));
}

// An amp case whose loss scaling skipped much of its training is named under its own heading, with
// its counts and final scale (the H200's real-data run of 2026-11-29: 42 of 400, the scale at
// 1.5e-8); one that skipped its first few steps, as a loss scaler finds its scale, is not.
TEST_F(RunCli, TheReportNamesAmpCasesWhoseLossScalingSkippedMuchOfTheTraining) {
  BenchmarkRun run;
  run.metadata.name = "scaled";
  run.spec.cases = {{1, 1, 256, Precision::amp}, {1, 1, 128, Precision::amp}};
  BenchmarkRunStatus s;
  s.phase = Phase::Succeeded;
  for (const CaseSpec& c : run.spec.cases) s.results.push_back(measured(c, {1566.0, 1570.0, 1560.0}));
  s.results[0].loss_scaling = LossScalingReport{1.49e-8, 42, 400, {}};
  s.results[1].loss_scaling = LossScalingReport{16384.0, 3, 400, {}};
  run.status = s;
  write("scaled.json", to_json(run).dump());
  const Outcome table = dlbench("report scaled.json");
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("\namp cases whose loss scaling skipped much of the training\n  1x1-bs256-amp: 42 of 400 "
                                   "steps skipped for an inf or NaN gradient, the scale ended at 1.49e-08 (below 1: steps "
                                   "overflowed even unscaled)\n"));
  EXPECT_THAT(table.out, Not(HasSubstr("1x1-bs128-amp: 3 of 400")));
  // More than 5% of the steps skipped is named too, though the scale held.
  s.results[1].loss_scaling = LossScalingReport{512.0, 25, 400, {}};
  s.results[0].loss_scaling.reset();
  run.status = s;
  write("scaled.json", to_json(run).dump());
  const Outcome again = dlbench("report scaled.json");
  EXPECT_THAT(again.out, HasSubstr("\n  1x1-bs128-amp: 25 of 400 steps skipped for an inf or NaN gradient, the scale ended "
                                   "at 512\n"));
  EXPECT_THAT(again.out, Not(HasSubstr("1x1-bs256-amp: ")));
  // Where the worker traced the first overflow after the repeats, its lines follow, indented; in
  // markdown, one cell.
  s.results[1].loss_scaling->overflow =
      "untimed step 401 skipped, loss scale now 256: loss 2.8; 1 of 161 parameters' gradients not finite\n"
      "replayed at loss scale 512: forward: every layer output finite; loss 2.8; backward: first non-finite input "
      "gradient: fc (Linear), 3 inf, 0 NaN of 524288";
  run.status = s;
  write("scaled.json", to_json(run).dump());
  const Outcome traced = dlbench("report scaled.json");
  EXPECT_THAT(traced.out, HasSubstr("\n  1x1-bs128-amp: 25 of 400 steps skipped for an inf or NaN gradient, the scale "
                                    "ended at 512\n    untimed step 401 skipped, loss scale now 256: loss 2.8; 1 of 161 "
                                    "parameters' gradients not finite\n    replayed at loss scale 512: forward: every "
                                    "layer output finite; loss 2.8; backward: first non-finite input gradient: fc (Linear), "
                                    "3 inf, 0 NaN of 524288\n"));
  const Outcome markdown = dlbench("report scaled.json --format markdown");
  EXPECT_THAT(markdown.out, HasSubstr("| 1x1-bs128-amp | 25 of 400 steps skipped for an inf or NaN gradient, the scale "
                                      "ended at 512 untimed step 401 skipped, "));
}

// A cluster's run whose cases landed on two GPU generations says which case ran on which, from
// its results' environments; a status from before results carried them falls back on the
// annotation dlbench run wrote; a result with no environment (skipped on the host) says nothing.
TEST_F(RunCli, TheReportSaysWhatMeasuredEachRunAndWhichCasesWhereTheyDiffer) {
  BenchmarkRun run;
  run.metadata.name = "mixed";
  run.spec.cases = {{1, 1, 64, Precision::amp}, {1, 8, 64, Precision::amp}, {2, 8, 64, Precision::amp}};
  BenchmarkRunStatus s;
  s.phase = Phase::Succeeded;
  CaseEnvironment h200;
  h200.dlbench_version = "0.1.0";
  h200.backend = "cuda";
  h200.communicator = "nccl";
  h200.gpu_model = "NVIDIA H200";
  h200.driver_version = "580.159";
  h200.cuda_version = "13.0";
  h200.cudnn_version = "9.10.2";
  h200.nccl_version = "2.27.3";
  CaseEnvironment h100 = h200;
  h100.gpu_model = "NVIDIA H100 80GB HBM3";
  for (const auto& [c, environment] : {std::pair{run.spec.cases[0], h200}, std::pair{run.spec.cases[1], h100},
                                       std::pair{run.spec.cases[2], h200}}) {
    CaseResult r = measured(c, {1000.0, 1001.0, 999.0});
    r.environment = environment;
    s.results.push_back(r);
  }
  run.status = s;
  write("mixed.json", to_json(run).dump());
  const Outcome table = dlbench("report mixed.json");
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("\nmeasured by\n"
                                   "  mixed (1x1-bs64-amp, 2x8-bs64-amp): cuda backend, NVIDIA H200, driver 580.159, "
                                   "CUDA 13.0, cuDNN 9.10.2, NCCL 2.27.3; dlbench 0.1.0\n"
                                   "  mixed (1x8-bs64-amp): cuda backend, NVIDIA H100 80GB HBM3, driver 580.159"));
  const auto rows = nlohmann::json::parse(dlbench("report mixed.json --format json").out);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[1].at("environment").at("gpuModel"), "NVIDIA H100 80GB HBM3");

  // One machine for every case: one line, without the cases. A case on one GPU states no NCCL and
  // talks to nobody, and its line is the others' (the line has what any case states). A case
  // skipped on the host has no environment and changes nothing.
  s.results[1].environment = h200;
  s.results[2].environment->mpi_version = "Open MPI v4.1.4";
  s.results[0].environment->nccl_version.clear();
  s.results[0].environment->communicator = "none";
  CaseResult skipped;
  skipped.case_ = {4, 8, 64, Precision::amp};
  skipped.state = CaseState::Skipped;
  skipped.reason = "InsufficientDevices";
  s.results.push_back(skipped);
  run.status = s;
  write("mixed.json", to_json(run).dump());
  EXPECT_THAT(dlbench("report mixed.json").out,
              HasSubstr("\nmeasured by\n  mixed: cuda backend, NVIDIA H200, driver 580.159, CUDA 13.0, cuDNN 9.10.2, "
                        "NCCL 2.27.3, Open MPI v4.1.4; dlbench 0.1.0\n"));

  // Older statuses: no environment in any result, the annotation speaks; with neither, no section.
  for (auto& r : s.results) r.environment.reset();
  run.status = s;
  run.metadata.annotations["dlbench.io/measured-by"] = "dlbench 0.1.0: cuda backend, 8 devices (NVIDIA H200); CPU x";
  write("mixed.json", to_json(run).dump());
  EXPECT_THAT(dlbench("report mixed.json").out,
              HasSubstr("\nmeasured by\n  mixed: dlbench 0.1.0: cuda backend, 8 devices (NVIDIA H200); CPU x\n"));
  run.metadata.annotations.clear();
  write("mixed.json", to_json(run).dump());
  EXPECT_THAT(dlbench("report mixed.json").out, Not(HasSubstr("measured by")));
}

// spec.worker.env reaches every rank on this host as on a cluster's pods (the 2-rank case through
// mpirun -x): oneDNN held to SSE4.1 says so in each result. An entry whose value comes from a
// Kubernetes source cannot be set here, and the run says so before its first case.
TEST_F(RunCli, WorkerEnvReachesEveryRankAndAKubernetesSourceIsNamed) {
  const std::string text = R"(apiVersion: dlbench.io/v1alpha1
kind: BenchmarkRun
metadata: {name: held}
spec:
  model: resnet50
  data: {imageSize: 32}
  matrix: {gpusPerNode: [1, 2], batchSizePerDevice: [1], precision: [fp32]}
  methodology: {warmupSteps: 0, measureSteps: 1, repeats: 1}
  worker:
    env:
    - {name: DNNL_MAX_CPU_ISA, value: SSE41}
    - name: HF_TOKEN
      valueFrom: {secretKeyRef: {name: tokens, key: hf}}
)";
  const Outcome o = dlbench("run -f " + write("run.yaml", text) + " --backend cpu");
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_THAT(o.out, HasSubstr("\nnote: spec.worker.env[1] (HF_TOKEN) takes its value from a Kubernetes source "
                               "(valueFrom), which this host does not have: left unset\n[1/2] "));
  const BenchmarkRun run = status("held.status.json");
  ASSERT_TRUE(run.status.has_value());
  ASSERT_EQ(run.status->results.size(), 2u);
  for (const auto& r : run.status->results) {
    ASSERT_EQ(r.state, CaseState::Succeeded) << r.message;
    ASSERT_TRUE(r.environment.has_value());
    EXPECT_EQ(r.environment->backend_options.at("isa"), "sse41") << case_id(r.case_);
  }
}

// A height × width crop, per-pixel labels; imagefolder data is refused for it, naming the field.
TEST_F(RunCli, DeepLabV3PlusRunsOnAHeightByWidthCropAndRefusesImageFolder) {
  const std::string text = R"(apiVersion: dlbench.io/v1alpha1
kind: BenchmarkRun
metadata: {name: deeplab}
spec:
  model: deeplabv3plus
  data: {imageHeight: 64, imageWidth: 96}
  matrix: {batchSizePerDevice: [2], precision: [fp32]}
  methodology: {warmupSteps: 0, measureSteps: 1, repeats: 1}
)";
  const Outcome o = dlbench("run -f " + write("run.yaml", text) + " --backend cpu");
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  const BenchmarkRun run = status("deeplab.status.json");
  ASSERT_TRUE(run.status.has_value());
  ASSERT_EQ(run.status->results.size(), 1u);
  EXPECT_EQ(run.status->results[0].state, CaseState::Succeeded);
  EXPECT_EQ(run.spec.data.height(), 64);
  EXPECT_EQ(run.spec.data.width(), 96);
  const Outcome report = dlbench("report deeplab.status.json");
  EXPECT_EQ(report.exit_code, 0) << report.err;
  EXPECT_THAT(report.out, HasSubstr("fp32: throughput (samples/s)"));

  std::string folder = text;
  folder.replace(folder.find("data: {imageHeight: 64, imageWidth: 96}"), 39,
                 "data: {source: imagefolder, path: /data/train}");
  const Outcome refused = dlbench("run -f " + write("folder.yaml", folder) + " --backend cpu");
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_THAT(refused.err + refused.out, HasSubstr("spec.data.source: imagefolder is not allowed for deeplabv3plus"));
}

// data.source cityscapes through `dlbench run` with real mpirun, on 1 and 2 ranks: DeepLabV3+ trains
// on the generated Cityscapes tree's crops, the status carries the input report, a broken pair is
// skipped and counted, and a classifier is refused the data set.
TEST_F(RunCli, DeepLabV3PlusTrainsOnCityscapesOnOneAndTwoRanks) {
  const std::string input = (std::filesystem::path(DLBENCH_CLI_BINARY).parent_path() / "dlbench-input").string();
  const std::string root = (dir_ / "cityscapes").string();
  const Outcome generated = testing::run_shell(input + " generate " + root +
                                                   " --data cityscapes --cities 2 --per-city 4 --width 160 "
                                                   "--height 80 --broken 1",
                                               dir_.string());
  ASSERT_EQ(generated.exit_code, 0) << generated.err;
  const std::string text = R"(apiVersion: dlbench.io/v1alpha1
kind: BenchmarkRun
metadata: {name: streets}
spec:
  model: deeplabv3plus
  data: {source: cityscapes, path: )" + root + R"(, imageHeight: 64, imageWidth: 96, decodeThreads: 2}
  matrix: {gpusPerNode: [1, 2], batchSizePerDevice: [2], precision: [fp32]}
  methodology: {warmupSteps: 1, measureSteps: 2, repeats: 2, stability: {includeUnstable: true}}
  limits: {backoffLimit: 0}
)";
  const Outcome o = dlbench("run -f " + write("streets.yaml", text) + " --backend cpu");
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_THAT(o.out, HasSubstr("input: waited"));
  const BenchmarkRun run = status("streets.status.json");
  ASSERT_EQ(run.status->results.size(), 2u);
  for (const CaseResult& r : run.status->results) {
    ASSERT_EQ(r.state, CaseState::Succeeded) << r.case_.devices() << " devices: " << r.message;
    ASSERT_TRUE(r.input.has_value());
    EXPECT_EQ(r.input->source, DataSource::cityscapes);
    EXPECT_EQ(r.input->files, 9);  // 8 pairs and the broken one
    EXPECT_EQ(r.input->skipped_files, 1);
    ASSERT_FALSE(r.input->skipped_examples.empty());
    EXPECT_THAT(r.input->skipped_examples[0], HasSubstr("broken"));
    EXPECT_EQ(r.input->decode_threads, 2);
    EXPECT_GT(r.input->pipeline_throughput, 0);
  }
  const Outcome report = dlbench("report streets.status.json");
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_THAT(report.out, HasSubstr("fp32: time waiting for input, and the verdict"));

  std::string classifier = text;
  classifier.replace(classifier.find("model: deeplabv3plus"), 20, "model: resnet50");
  const Outcome refused = dlbench("run -f " + write("classifier.yaml", classifier) + " --backend cpu");
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_THAT(refused.err + refused.out, HasSubstr("spec.data.source: cityscapes is not allowed for resnet50"));
}

// BERT-base on its real data: NVIDIA-format shards (one broken file, one sequence past the
// vocabulary), shards dealt out to two ranks; each case reports its input.
TEST_F(RunCli, BertBaseTrainsOnPretrainingShardsOnOneAndTwoRanks) {
  const std::string input = (std::filesystem::path(DLBENCH_CLI_BINARY).parent_path() / "dlbench-input").string();
  const std::string root = (dir_ / "shards").string();
  const Outcome generated = testing::run_shell(input + " generate " + root +
                                                   " --data bertpretraining --shards 2 --per-shard 6 "
                                                   "--sequence-length 16 --max-predictions 3 --broken 1 --bad-sequences 1",
                                               dir_.string());
  ASSERT_EQ(generated.exit_code, 0) << generated.err;
  const std::string text = R"(apiVersion: dlbench.io/v1alpha1
kind: BenchmarkRun
metadata: {name: wiki}
spec:
  model: bert-base
  data: {source: bertpretraining, path: )" + root + R"(, sequenceLength: 16}
  optimizer: {name: adamw, learningRate: 0.0001, weightDecay: 0.01}
  matrix: {gpusPerNode: [1, 2], batchSizePerDevice: [2], precision: [fp32]}
  methodology: {warmupSteps: 1, measureSteps: 2, repeats: 2, stability: {includeUnstable: true}}
  limits: {backoffLimit: 0}
)";
  const Outcome o = dlbench("run -f " + write("wiki.yaml", text) + " --backend cpu");
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_THAT(o.out, HasSubstr("sequences/s per rank, shard by shard; 2 unreadable shards or sequences skipped"));
  const BenchmarkRun run = status("wiki.status.json");
  ASSERT_EQ(run.status->results.size(), 2u);
  for (const CaseResult& r : run.status->results) {
    ASSERT_EQ(r.state, CaseState::Succeeded) << r.case_.devices() << " devices: " << r.message;
    ASSERT_TRUE(r.input.has_value());
    EXPECT_EQ(r.input->source, DataSource::bertpretraining);
    EXPECT_EQ(r.input->files, 12);  // sequences in the two readable shards
    EXPECT_EQ(r.input->skipped_files, 2) << "the broken shard and the sequence past the vocabulary";
    ASSERT_EQ(r.input->skipped_examples.size(), 2u);
    EXPECT_THAT(r.input->skipped_examples[0], HasSubstr("broken_0.hdf5: "));
    EXPECT_THAT(r.input->skipped_examples[1], HasSubstr("sequence 0: input_ids holds 30522 at token 1"));
    EXPECT_GT(r.input->pipeline_throughput, 0);
    ASSERT_TRUE(r.throughput.has_value());
    EXPECT_EQ(r.throughput->unit, "sequences/s");
  }
  std::string images = text;
  images.replace(images.find("model: bert-base"), 16, "model: resnet50");
  const Outcome refused = dlbench("run -f " + write("images.yaml", images) + " --backend cpu");
  EXPECT_NE(refused.exit_code, 0);
  EXPECT_THAT(refused.err + refused.out, HasSubstr("spec.data.source: bertpretraining is not allowed for resnet50"));
}

TEST_F(RunCli, RunsWhatFitsSkipsTheRestAndWritesTheStatus) {
  const Outcome o = dlbench("run -f " + write("run.yaml", sweep()) + " --max-devices 2");
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_THAT(o.out, HasSubstr("[2/4] 1x2-bs2-fp32: 2 ranks"));
  EXPECT_THAT(o.out, HasSubstr("repeat 2/2"));
  // After every repeat: where the run stands and the time left.
  EXPECT_THAT(o.out, HasSubstr("    [case 1/4 1x1-bs2-fp32, repeat 1 of 2; 1 of 8 repeats done in "));
  EXPECT_THAT(o.out, ::testing::ContainsRegex("\\[case 2/4 1x2-bs2-fp32, repeat 2 of 2; 4 of 8 repeats done in "
                                              "[0-9]+:[0-9][0-9], about [0-9]+:[0-9][0-9] left\\]"));
  BenchmarkRun run = status("small.status.json");
  ASSERT_TRUE(run.status.has_value());
  auto& s = *run.status;
  EXPECT_EQ(s.phase, Phase::Succeeded);
  EXPECT_EQ(s.progress.summary, "4/4");
  ASSERT_EQ(s.results.size(), 4u);
  EXPECT_EQ(case_id(s.results[0].case_), "1x1-bs2-fp32");
  EXPECT_EQ(s.results[0].state, CaseState::Succeeded);
  EXPECT_EQ(s.results[1].state, CaseState::Succeeded);  // 2 ranks under mpirun
  // What measured each: one rank talks to nobody; two talk through Open MPI, which says its version.
  ASSERT_TRUE(s.results[0].environment && s.results[1].environment);
  EXPECT_EQ(s.results[0].environment->communicator, "none");
  EXPECT_EQ(s.results[0].environment->mpi_version, "");
  EXPECT_EQ(s.results[1].environment->communicator, "mpi");
  EXPECT_THAT(s.results[1].environment->mpi_version, ::testing::MatchesRegex("Open MPI v[0-9]+\\.[0-9]+.*"));
  EXPECT_EQ(s.results[1].environment->nccl_version, "");  // no GPU
  // What the 2 ranks' gradient reduction cost, timed after their repeats; one rank reduces nothing.
  EXPECT_FALSE(s.results[0].communication.has_value());
  ASSERT_TRUE(s.results[1].communication.has_value());
  EXPECT_GT(s.results[1].communication->gradient_bytes, 25'000'000 * 4);  // ResNet-50's 25.6 M parameters
  EXPECT_GT(s.results[1].communication->bus_bandwidth, 0);
  EXPECT_FALSE(s.results[2].environment.has_value());   // skipped: nothing measured it
  // No learning rate in the spec: ResNet-50's 0.1 at a global batch of 256, linearly less at the
  // case's, which 2 ranks double.
  ASSERT_TRUE(s.results[0].optimizer && s.results[1].optimizer);
  EXPECT_DOUBLE_EQ(s.results[0].optimizer->learning_rate, 0.1 * 2 / 256);
  EXPECT_DOUBLE_EQ(s.results[1].optimizer->learning_rate, 0.1 * 4 / 256);
  // Two steps a repeat beside the other tests on two cores: the baseline is sometimes slowed
  // enough that 2 ranks look more than twice as fast. Then the speed-up is refused, saying why,
  // and the report below reads a copy whose 1x2 case ran 1.6 times the baseline.
  if (s.results[1].speedup.has_value()) {
    EXPECT_NEAR(*s.results[1].scaling_efficiency, *s.results[1].speedup / 2, 1e-12);
    EXPECT_EQ(s.results[1].scaling_refused, "");
  } else {
    EXPECT_THAT(s.results[1].scaling_refused, HasSubstr("is impossible, so one of the two cases was disturbed"));
    ASSERT_TRUE(s.results[0].throughput && s.results[1].throughput);
    std::vector<double> scaled = s.results[0].throughput->repeats;
    for (double& value : scaled) value *= 1.6;
    s.results[1].throughput = Throughput{"samples/s", summarize(scaled), scaled};
    refresh_derived_status(s, plan_cases(run.spec), run.spec.methodology.statistic,
                           run.spec.methodology.stability.include_unstable);
    ASSERT_TRUE(s.results[1].speedup.has_value()) << s.results[1].scaling_refused;
    write("small.status.json", to_json(run).dump());
  }
  EXPECT_EQ(s.results[2].state, CaseState::Skipped);  // 2 nodes
  EXPECT_EQ(s.results[2].reason, "NeedsMoreNodes");
  EXPECT_EQ(s.results[3].state, CaseState::Skipped);
  ASSERT_TRUE(s.best.has_value());
  const auto* ready = find_condition(s.conditions, ConditionType::Ready);
  ASSERT_NE(ready, nullptr);
  EXPECT_EQ(ready->status, ConditionStatus::True);

  // The report reads it back.
  const Outcome table = dlbench("report small.status.json");
  ASSERT_EQ(table.exit_code, 0) << table.err;
  EXPECT_THAT(table.out, HasSubstr("fp32: speed-up over 1x1"));
  EXPECT_THAT(table.out, HasSubstr("skipped"));
  EXPECT_THAT(table.out, HasSubstr("\ncases not measured\n  2x1-bs2-fp32: Skipped, NeedsMoreNodes: "));
  const Outcome csv = dlbench("report small.status.json --format csv");
  ASSERT_EQ(csv.exit_code, 0);
  std::istringstream lines(csv.out);
  std::string line;
  std::getline(lines, line);
  EXPECT_EQ(line, "table,precision,batchSizePerDevice,run,nodes,gpusPerNode,value");
  int rows = 0;
  while (std::getline(lines, line)) {
    EXPECT_EQ(std::count(line.begin(), line.end(), ','), 6) << line;
    ++rows;
    // The loss after the last repeat of each case measured: the worker's own, from the status.
    for (const int gpus : {1, 2}) {
      const std::string prefix = "loss,fp32,2,small,1," + std::to_string(gpus) + ",";
      if (!line.starts_with(prefix)) continue;
      const auto& losses = s.results[static_cast<std::size_t>(gpus - 1)].loss_after_repeats;
      ASSERT_FALSE(losses.empty());
      EXPECT_NEAR(std::stod(line.substr(prefix.size())), losses.back(), 1e-3 * losses.back()) << line;
    }
  }
  // throughput, speed-up, efficiency, learning rate, loss, training TFLOP/s, the reduction's share
  // of a step and its bus bandwidth × 4 cases
  EXPECT_EQ(rows, 8 * 4);
  EXPECT_THAT(table.out, HasSubstr("fp32: share of a step its gradient reduction added"));
  EXPECT_THAT(csv.out, HasSubstr("\nreductionshare,fp32,2,small,1,1,-\n"));
  EXPECT_THAT(csv.out, ::testing::ContainsRegex("\nbusbandwidth,fp32,2,small,1,2,[0-9.e-]+\n"));
  // Beside the loss, the rate each case trained at: resnet50's default at its global batch.
  EXPECT_THAT(csv.out, HasSubstr("\nlearningrate,fp32,2,small,1,1,0.00078125\n"));
  EXPECT_THAT(csv.out, HasSubstr("\nlearningrate,fp32,2,small,1,2,0.0015625\n"));
  EXPECT_THAT(table.out, HasSubstr("fp32: learning rate it trained at"));
  const double tflops = s.results[0].flops->per_second_per_device / 1e12;
  EXPECT_THAT(csv.out, ::testing::ContainsRegex("\ntflops,fp32,2,small,1,1,[0-9.e-]+\n"));
  EXPECT_THAT(table.out, HasSubstr("fp32: training arithmetic per device (TFLOP/s)"));
  EXPECT_THAT(table.out, Not(HasSubstr("model FLOPs utilisation"))) << "no peak is known for a CPU";
  const std::string tflops_prefix = "\ntflops,fp32,2,small,1,1,";
  const std::string tflops_row = csv.out.substr(csv.out.find(tflops_prefix) + tflops_prefix.size());
  EXPECT_NEAR(std::stod(tflops_row), tflops, 1e-3 * tflops);
  EXPECT_THAT(csv.out, HasSubstr("\nloss,fp32,2,small,2,1,skipped\n"));
  EXPECT_THAT(table.out, HasSubstr("fp32: loss after the last repeat"));
  const Outcome json = dlbench("report small.status.json --format json");
  EXPECT_EQ(nlohmann::json::parse(json.out).size(), 4u);
  // A case that warmed its rate up says so beside the rate; csv keeps its cells numbers.
  nlohmann::json warmed = nlohmann::json::parse(testing::slurp(dir_ / "small.status.json"));
  warmed["status"]["results"][0]["optimizer"]["learningRateWarmupSteps"] = 50;
  write("warmed.status.json", warmed.dump());
  const Outcome warmed_table = dlbench("report warmed.status.json");
  ASSERT_EQ(warmed_table.exit_code, 0) << warmed_table.err;
  EXPECT_THAT(warmed_table.out, HasSubstr("0.00078125, warm-up 50"));
  EXPECT_THAT(warmed_table.out, Not(HasSubstr("0.0015625, warm-up")));
  EXPECT_THAT(dlbench("report warmed.status.json --format csv").out,
              HasSubstr("\nlearningrate,fp32,2,small,1,1,0.00078125\n"));
  // No energy counter on a CPU: no energy table. A GPU case's energy is tabled where some case has it.
  EXPECT_THAT(table.out, Not(HasSubstr("energy per sample")));
  nlohmann::json metered = nlohmann::json::parse(testing::slurp(dir_ / "small.status.json"));
  metered["status"]["results"][0]["energy"] = {{"joulesPerSample", 0.25}, {"wattsPerDevice", 410.5}};
  write("metered.status.json", metered.dump());
  const Outcome metered_table = dlbench("report metered.status.json");
  ASSERT_EQ(metered_table.exit_code, 0) << metered_table.err;
  EXPECT_THAT(metered_table.out, HasSubstr("fp32: energy per sample, every device's (J)"));
  const std::string metered_csv = dlbench("report metered.status.json --format csv").out;
  EXPECT_THAT(metered_csv, HasSubstr("\njoulespersample,fp32,2,small,1,1,0.25\n"));
  EXPECT_THAT(metered_csv, HasSubstr("\njoulespersample,fp32,2,small,1,2,-\n"));
  // One run's name twice side by side: each column says which file, or which copy, it is.
  std::filesystem::copy_file(dir_ / "small.status.json", dir_ / "again.json");
  const Outcome both = dlbench("report small.status.json again.json --format markdown");
  EXPECT_THAT(both.out, HasSubstr("| batch | small in small.status.json 1x1 | small in small.status.json 1x2 |"));
  EXPECT_THAT(both.out, HasSubstr("| small in again.json 1x1 | small in again.json 1x2 |"));
  const Outcome twice = dlbench("report small.status.json small.status.json --format csv");
  EXPECT_THAT(twice.out, HasSubstr("throughput,fp32,2,small #1,1,1,"));
  EXPECT_THAT(twice.out, HasSubstr("throughput,fp32,2,small #2,1,1,"));
  EXPECT_THAT(dlbench("report small.status.json again.json --format json").out, HasSubstr("\"run\": \"small in again.json\""));

  // --relative: a copy of the run whose every throughput is 1.5 times the first run's.
  BenchmarkRun faster = status("small.status.json");
  faster.metadata.name = "faster";
  for (auto& r : faster.status->results) {
    if (!r.throughput) continue;
    for (double& t : r.throughput->repeats) t *= 1.5;
    r.throughput->summary = summarize(r.throughput->repeats);
  }
  write("faster.json", to_json(faster).dump());
  const Outcome relative = dlbench("report small.status.json faster.json --relative --format csv");
  ASSERT_EQ(relative.exit_code, 0) << relative.err;
  EXPECT_THAT(relative.out, HasSubstr("\nrelative,fp32,2,faster,1,1,1.500\n"));
  EXPECT_THAT(relative.out, HasSubstr("\nrelative,fp32,2,faster,1,2,1.500\n"));
  EXPECT_THAT(relative.out, HasSubstr("\nrelative,fp32,2,faster,2,1,skipped\n"));
  EXPECT_THAT(relative.out, Not(HasSubstr("relative,fp32,2,small,")));  // the first run is the reference
  const Outcome relative_table = dlbench("report small.status.json faster.json --relative");
  EXPECT_THAT(relative_table.out, ::testing::ContainsRegex("fp32: throughput relative to small \\(the first run\\)\n"
                                                           "  batch +faster 1x1 +faster 1x2 +faster 2x1 +faster 2x2\n"));
  EXPECT_THAT(relative_table.out, HasSubstr("1.50x"));
  const auto rows_json = nlohmann::json::parse(dlbench("report small.status.json faster.json --relative --format json").out);
  int compared = 0;
  for (const auto& row : rows_json) {
    if (!row.contains("relativeThroughput")) continue;
    EXPECT_EQ(row["run"], "faster");
    EXPECT_NEAR(row["relativeThroughput"].get<double>(), 1.5, 1e-12);
    ++compared;
  }
  EXPECT_EQ(compared, 2);
  const Outcome alone = dlbench("report small.status.json --relative");
  EXPECT_EQ(alone.exit_code, 2);
  EXPECT_THAT(alone.err, HasSubstr("--relative needs two or more runs"));
  faster.spec.model = Model::resnet152;
  write("other-model.json", to_json(faster).dump());
  const Outcome other_model = dlbench("report small.status.json other-model.json --relative");
  EXPECT_EQ(other_model.exit_code, 2);
  EXPECT_THAT(other_model.err, HasSubstr("--relative compares runs of one model: small trained resnet50, faster resnet152"));

  // The scaling plot: one line per run × precision × batch in each panel, plus the ideal.
  const Outcome plot = dlbench("report small.status.json --plot scaling.svg");
  ASSERT_EQ(plot.exit_code, 0) << plot.err;
  const std::string svg = testing::slurp(dir_ / "scaling.svg");
  EXPECT_TRUE(svg.starts_with("<svg xmlns=\"http://www.w3.org/2000/svg\""));
  const auto count = [&](const std::string& needle) {
    std::size_t n = 0;
    for (auto at = svg.find(needle); at != std::string::npos; at = svg.find(needle, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count("<polyline"), 3u);       // throughput, speed-up, ideal
  EXPECT_EQ(count("<circle"), 4u);         // 2 succeeded cases × 2 panels
  EXPECT_THAT(svg, HasSubstr("small fp32 bs2"));
  EXPECT_THAT(svg, HasSubstr("ideal (linear) speed-up"));
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
}

// data.source imagefolder through `dlbench run`: the worker reads a folder of JPEGs, the status
// carries the input report, and `dlbench report` puts the real-data run beside a synthetic one.
TEST_F(RunCli, ImageFolderRunsReportInputAndSitBesideSynthetic) {
  tjhandle tj = tjInitCompress();
  for (int c = 0; c < 2; ++c) {
    std::filesystem::create_directories(dir_ / "train" / ("class" + std::to_string(c)));
    for (int i = 0; i < 6; ++i) {
      std::vector<unsigned char> rgb(48 * 40 * 3);
      for (std::size_t k = 0; k < rgb.size(); ++k) rgb[k] = static_cast<unsigned char>((k * 7 + static_cast<std::size_t>(i * 31 + c)) % 251);
      unsigned char* jpeg = nullptr;
      unsigned long size = 0;
      ASSERT_EQ(tjCompress2(tj, rgb.data(), 48, 0, 40, TJPF_RGB, &jpeg, &size, TJSAMP_420, 85, 0), 0);
      std::ofstream(dir_ / "train" / ("class" + std::to_string(c)) / (std::to_string(i) + ".jpg"), std::ios::binary)
          .write(reinterpret_cast<const char*>(jpeg), static_cast<std::streamsize>(size));
      tjFree(jpeg);
    }
  }
  tjDestroy(tj);
  const auto spec = [&](const std::string& name, const std::string& data) {
    return "apiVersion: dlbench.io/v1alpha1\nkind: BenchmarkRun\nmetadata: {name: " + name + "}\nspec:\n  model: resnet50\n"
           "  data: " + data + "\n  cases: [{batchSizePerDevice: 2, precision: fp32}]\n"
           "  methodology: {warmupSteps: 1, measureSteps: 2, repeats: 2}\n  limits: {backoffLimit: 0}\n";
  };
  const std::string train = (dir_ / "train").string();
  const Outcome real = dlbench("run -f " + write("real.yaml", spec("real", "{source: imagefolder, imageSize: 32, path: " +
                                                                             train + ", decodeThreads: 2}")));
  ASSERT_EQ(real.exit_code, 0) << real.out << real.err;
  EXPECT_THAT(real.out, HasSubstr("input: waited"));
  const BenchmarkRun run = status("real.status.json");
  ASSERT_EQ(run.status->results.size(), 1u);
  const CaseResult& r = run.status->results[0];
  ASSERT_EQ(r.state, CaseState::Succeeded) << r.message;
  ASSERT_TRUE(r.input.has_value());
  EXPECT_EQ(r.input->files, 12);
  EXPECT_EQ(r.input->decode_threads, 2);
  EXPECT_EQ(r.input->skipped_files, 0);
  EXPECT_GT(r.input->pipeline_throughput, 0);
  EXPECT_EQ(r.input->verdict, input_verdict(r.input->wait_share));
  ASSERT_TRUE(r.input->wait_seconds_per_step.has_value());

  ASSERT_EQ(dlbench("run -f " + write("synthetic.yaml", spec("synthetic", "{imageSize: 32}"))).exit_code, 0);
  const Outcome report = dlbench("report synthetic.status.json real.status.json");
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_THAT(report.out, HasSubstr("real (imagefolder) 1x1"));
  EXPECT_THAT(report.out, HasSubstr("fp32: time waiting for input, and the verdict"));
  EXPECT_THAT(report.out, HasSubstr("synthetic"));
  EXPECT_THAT(report.out, HasSubstr(std::string(to_string(r.input->verdict))));
  // Synthetic alone: no input table.
  EXPECT_THAT(dlbench("report synthetic.status.json").out, Not(HasSubstr("waiting for input")));

  // A path that is not there: a Failed result naming it, not a crash or a hang.
  const Outcome missing = dlbench("run -f " + write("missing.yaml", spec("missing", "{source: imagefolder, path: " + train +
                                                                                       "-gone}")));
  EXPECT_EQ(missing.exit_code, 1);
  const BenchmarkRun gone = status("missing.status.json");
  ASSERT_EQ(gone.status->results.size(), 1u);
  EXPECT_EQ(gone.status->results[0].state, CaseState::Failed);
  EXPECT_EQ(gone.status->results[0].reason, "DataUnavailable");
  EXPECT_THAT(gone.status->results[0].message, HasSubstr(train + "-gone does not exist"));
}

TEST_F(RunCli, FailedCasesKeepTheirReasonAndRetries) {
  const std::string limits = "  limits: {backoffLimit: 1}\n";
  const Outcome o = dlbench("run -f " + write("run.yaml", sweep(limits)) +
                            " --max-devices 1 --worker /bin/false --output out.json");
  EXPECT_EQ(o.exit_code, 1);
  const auto s = *status("out.json").status;
  EXPECT_EQ(s.phase, Phase::Failed);
  ASSERT_EQ(s.results.size(), 4u);
  EXPECT_EQ(s.results[0].state, CaseState::Failed);
  EXPECT_EQ(s.results[0].reason, "WorkerExited");
  EXPECT_EQ(s.results[0].attempts, 2);
  EXPECT_EQ(s.results[1].reason, "NotEnoughDevices");
}

// spec.preflight: the real worker's self-test on the largest topology this host runs (two CPU
// ranks over MPI), then the cases.
TEST_F(RunCli, APreflightSelfTestRunsBeforeTheCases) {
  const std::string text = R"(apiVersion: dlbench.io/v1alpha1
kind: BenchmarkRun
metadata: {name: checked}
spec:
  model: alexnet
  data: {imageSize: 64}
  matrix: {gpusPerNode: [1, 2], batchSizePerDevice: [1], precision: [fp32]}
  methodology: {warmupSteps: 0, measureSteps: 1, repeats: 1}
  preflight: {selfTest: true}
)";
  const Outcome o = dlbench("run -f " + write("run.yaml", text) + " --backend cpu --max-devices 2");
  ASSERT_EQ(o.exit_code, 0) << o.out << o.err;
  EXPECT_THAT(o.out, HasSubstr("[preflight] self-test of 2 devices: 2 ranks"));
  EXPECT_THAT(o.out, HasSubstr("checks passed"));
  EXPECT_LT(o.out.find("[preflight]"), o.out.find("[1/2] 1x1-bs1-fp32"));
  const auto s = *status("checked.status.json").status;
  ASSERT_TRUE(s.preflight);
  EXPECT_EQ(s.preflight->state, CaseState::Succeeded);
  EXPECT_EQ(s.preflight->case_.devices(), 2);
  EXPECT_THAT(s.preflight->message, HasSubstr("on 2 devices (cpu, mpi)"));
  EXPECT_EQ(s.phase, Phase::Succeeded);
  EXPECT_EQ(s.results.size(), 2u);
}

// A self-test that fails: no case runs (the stand-in worker fails the test if one does), each
// is Skipped with PreflightFailed, and the run fails saying why.
TEST_F(RunCli, AFailedPreflightRunsNoCase) {
  SelfTestDocument failed;
  failed.state = CaseState::Failed;
  failed.reason = kReasonSelfTestFailed;
  failed.message = "1 of 34 checks failed on 1 device (cpu, none), on ranks 0; first: fp32 linear: y off by 1e-1";
  failed.passed = 33;
  failed.failed = 1;
  failed.failed_ranks = {0};
  failed.environment.backend = "cpu";
  const std::string worker = write("worker.sh", "#!/bin/sh\ncase \" $* \" in *\" --self-test \"*) ;; *) exit 3;; esac\n"
                                                "while [ $# -gt 0 ]; do [ \"$1\" = --output ] && out=$2; shift; done\n"
                                                "cat > \"$out\" <<'EOF'\n" + to_json(failed).dump() + "\nEOF\nexit 1\n");
  std::filesystem::permissions(worker, std::filesystem::perms::owner_all);
  const std::string text = R"(apiVersion: dlbench.io/v1alpha1
kind: BenchmarkRun
metadata: {name: broken}
spec:
  model: alexnet
  matrix: {batchSizePerDevice: [1, 2], precision: [fp32]}
  limits: {backoffLimit: 2}
  preflight: {selfTest: true}
)";
  const Outcome o = dlbench("run -f " + write("run.yaml", text) + " --max-devices 1 --worker " + worker);
  EXPECT_EQ(o.exit_code, 1) << o.out << o.err;
  EXPECT_THAT(o.out, HasSubstr("attempt 1/3 failed: SelfTestFailed: 1 of 34 checks failed"));
  EXPECT_THAT(o.out, Not(HasSubstr("attempt 2/3")));
  const auto s = *status("broken.status.json").status;
  EXPECT_EQ(s.preflight->state, CaseState::Failed);
  ASSERT_EQ(s.results.size(), 2u);
  for (const auto& r : s.results) {
    EXPECT_EQ(r.state, CaseState::Skipped);
    EXPECT_EQ(r.reason, "PreflightFailed");
    EXPECT_THAT(r.message, HasSubstr("fp32 linear: y off by 1e-1"));
  }
  EXPECT_EQ(find_condition(s.conditions, ConditionType::Failed)->reason, "PreflightFailed");
}

// A stand-in worker that lists its devices at once, as dlbench-worker does, and never ends a case.
constexpr const char* kSlowWorker =
    "#!/bin/sh\ncase \" $* \" in *\" --list-devices \"*) echo 'cpu 1 precisions=fp32'; exit 0;; esac\nsleep 30\n";

TEST_F(RunCli, TimeoutIsRecorded) {
  const std::string worker = write("slow-worker.sh", kSlowWorker);
  std::filesystem::permissions(worker, std::filesystem::perms::owner_all);
  const std::string limits = "  limits: {caseTimeoutSeconds: 1, backoffLimit: 0}\n";
  const auto start = std::chrono::steady_clock::now();
  const Outcome o = dlbench("run -f " + write("run.yaml", sweep(limits)) + " --max-devices 1 --worker " + worker);
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(20));
  EXPECT_EQ(o.exit_code, 1);
  const auto s = *status("small.status.json").status;
  EXPECT_EQ(s.results[0].reason, "Timeout");
}

// A case stopped at its deadline keeps the repeats its worker measured: SIGTERM first (the worker
// writes them, reason Stopped), SIGKILL 10 s later; the result says Timeout, the repeats in it,
// unjudged. Before, the deadline's SIGKILL lost them. (A thousand repeats outlast the deadline on
// any CPU; the first ends well before it on a loaded one.)
TEST_F(RunCli, ATimedOutCaseKeepsTheRepeatsItsWorkerMeasured) {
  const std::string run = R"(apiVersion: dlbench.io/v1alpha1
kind: BenchmarkRun
metadata: {name: slow}
spec:
  model: resnet50
  data: {imageSize: 32}
  matrix: {gpusPerNode: [1], batchSizePerDevice: [2], precision: [fp32]}
  methodology: {warmupSteps: 0, measureSteps: 3, repeats: 1000}
  limits: {caseTimeoutSeconds: 20, backoffLimit: 0}
)";
  const auto start = std::chrono::steady_clock::now();
  const Outcome o = dlbench("run -f " + write("run.yaml", run) + " --backend cpu");
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(40));
  EXPECT_EQ(o.exit_code, 1) << o.err;
  const auto s = *status("slow.status.json").status;
  ASSERT_EQ(s.results.size(), 1u);
  const CaseResult& r = s.results[0];
  EXPECT_EQ(r.state, CaseState::Failed);
  EXPECT_EQ(r.reason, "Timeout");
  ASSERT_TRUE(r.throughput) << r.message;
  EXPECT_GE(r.throughput->repeats.size(), 1u);
  EXPECT_LT(r.throughput->repeats.size(), 1000u);
  EXPECT_EQ(r.loss_after_repeats.size(), r.throughput->repeats.size());
  EXPECT_THAT(r.message, HasSubstr("no result within limits.caseTimeoutSeconds (20 s); the "));
  EXPECT_EQ(r.message, timeout_message(20, r.throughput->repeats.size()));
  EXPECT_FALSE(r.stability);
}

TEST_F(RunCli, InterruptKeepsFinishedResults) {
  const std::string worker = write("slow-worker.sh", kSlowWorker);
  std::filesystem::permissions(worker, std::filesystem::perms::owner_all);
  const pid_t pid = dlbench_in_background("run -f " + write("run.yaml", sweep()) + " --max-devices 1 --worker " + worker);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  kill(pid, SIGINT);
  for (int i = 0; i < 100 && kill(pid, 0) == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_NE(kill(pid, 0), 0) << "dlbench run did not stop";
  const auto s = *status("small.status.json").status;
  EXPECT_EQ(s.phase, Phase::Failed);
  const auto* failed = find_condition(s.conditions, ConditionType::Failed);
  ASSERT_NE(failed, nullptr);
  EXPECT_EQ(failed->reason, "Interrupted");
  EXPECT_TRUE(s.results.empty());  // the interrupted case is not recorded as a result
}

// Ctrl-C on a case whose worker ignores SIGTERM: SIGKILL 10 s later, so that a hung worker cannot
// hold the run (and the host) past the grace a stopped case is given.
TEST_F(RunCli, AnInterruptedCaseThatIgnoresSigtermIsKilledAfterItsGrace) {
  const std::string worker = write("deaf-worker.sh", "#!/bin/sh\ncase \" $* \" in *\" --list-devices \"*) echo 'cpu 1 "
                                                     "precisions=fp32'; exit 0;; esac\ntrap '' TERM\nsleep 120\n");
  std::filesystem::permissions(worker, std::filesystem::perms::owner_all);
  const pid_t pid = dlbench_in_background("run -f " + write("run.yaml", sweep()) + " --max-devices 1 --worker " + worker);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const auto interrupted = std::chrono::steady_clock::now();
  kill(pid, SIGINT);
  for (int i = 0; i < 600 && !std::filesystem::exists(dir_ / "rc"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  const auto took = std::chrono::steady_clock::now() - interrupted;
  ASSERT_TRUE(std::filesystem::exists(dir_ / "rc")) << "dlbench run did not stop within 60 s of Ctrl-C";
  EXPECT_EQ(std::stoi(testing::slurp(dir_ / "rc")), 130);
  EXPECT_GE(took, std::chrono::seconds(9)) << "the worker was given less than its grace";
  EXPECT_LT(took, std::chrono::seconds(40));
  const auto s = *status("small.status.json").status;
  const auto* failed = find_condition(s.conditions, ConditionType::Failed);
  ASSERT_NE(failed, nullptr);
  EXPECT_EQ(failed->reason, "Interrupted");
  testing::run_shell("pkill -f '" + worker + "' || true", dir_.string());  // this test's path, no other's
}

// dlbench run killed where it cannot stop its case (SIGKILL): the worker it started is not left
// training on the host (it gets SIGTERM as its parent dies).
TEST_F(RunCli, AKilledRunTakesItsWorkerWithIt) {
  const std::string worker = write("pid-worker.sh", "#!/bin/sh\ncase \" $* \" in *\" --list-devices \"*) echo 'cpu 1 "
                                                    "precisions=fp32'; exit 0;; esac\necho $$ > " +
                                                    (dir_ / "worker.pid.tmp").string() + "; mv " +
                                                    (dir_ / "worker.pid.tmp").string() + " " +
                                                    (dir_ / "worker.pid").string() + "\nexec sleep 60\n");
  std::filesystem::permissions(worker, std::filesystem::perms::owner_all);
  const pid_t pid = dlbench_in_background("run -f " + write("run.yaml", sweep()) + " --max-devices 1 --worker " + worker);
  for (int i = 0; i < 200 && !std::filesystem::exists(dir_ / "worker.pid"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(std::filesystem::exists(dir_ / "worker.pid")) << testing::slurp(dir_ / "out.txt");
  const pid_t worker_pid = std::stoi(testing::slurp(dir_ / "worker.pid"));
  ASSERT_EQ(kill(worker_pid, 0), 0) << "the worker is running";
  ASSERT_EQ(kill(pid, SIGKILL), 0);
  // The worker was dlbench's child, not this test's: ended, it is gone or a zombie nobody reaped yet.
  const auto running = [&] {
    const std::string stat = testing::slurp("/proc/" + std::to_string(worker_pid) + "/stat");
    const auto state = stat.rfind(") ");
    return kill(worker_pid, 0) == 0 && state != std::string::npos && stat.compare(state + 2, 1, "Z") != 0;
  };
  for (int i = 0; i < 100 && running(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const bool left_running = running();
  if (left_running) kill(worker_pid, SIGKILL);
  EXPECT_FALSE(left_running) << "the worker outlived the dlbench run that started it";
}

// --resume after Ctrl-C: the finished case is kept as measured, only the cases without a result
// run (the stand-in worker logs which), and a resume with nothing left changes nothing.
TEST_F(RunCli, AnInterruptedRunResumesWithTheCasesItHadNotMeasured) {
  const std::string text = three_batches("resumed");
  // Batch 2 stops dlbench (its parent) as Ctrl-C would, while the file `stop` is there.
  const std::string worker = batch_2_stand_in("stop", "kill -INT $PPID; sleep 5; exit 1;");
  const std::string run = "run -f " + write("run.yaml", text) + " --max-devices 1 --worker " + worker;
  write("stop", "");
  const Outcome first = dlbench(run);
  ASSERT_EQ(first.exit_code, 130) << first.out << first.err;
  const BenchmarkRun stopped = status("resumed.status.json");
  ASSERT_EQ(stopped.status->results.size(), 1u);
  EXPECT_EQ(find_condition(stopped.status->conditions, ConditionType::Failed)->reason, "Interrupted");
  const std::string measured_by = stopped.metadata.annotations.at("dlbench.io/measured-by");
  EXPECT_THAT(measured_by, ::testing::StartsWith("dlbench "));
  EXPECT_THAT(measured_by, HasSubstr(": cpu backend, 1 device; CPU "));

  std::filesystem::remove(dir_ / "stop");
  std::filesystem::remove(dir_ / "calls");
  const Outcome resumed = dlbench(run + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out << resumed.err;
  EXPECT_EQ(testing::slurp(dir_ / "calls"), "--batch-size 2\n--batch-size 3\n");
  EXPECT_THAT(resumed.out, HasSubstr("resuming from resumed.status.json: 1 of 3 cases have their result, 2 to run"));
  EXPECT_THAT(resumed.out, HasSubstr("[2/3] 1x1-bs2-fp32: 1 rank"));
  EXPECT_THAT(resumed.out, Not(HasSubstr("[1/3]")));
  const BenchmarkRun finished = status("resumed.status.json");
  const BenchmarkRunStatus& s = *finished.status;
  EXPECT_EQ(s.phase, Phase::Succeeded);
  ASSERT_EQ(s.results.size(), 3u);
  EXPECT_EQ(s.results[0], stopped.status->results[0]);  // as measured before, not again
  EXPECT_EQ(s.results[2].state, CaseState::Succeeded);
  EXPECT_EQ(s.start_time, stopped.status->start_time);
  const Condition* failed = find_condition(s.conditions, ConditionType::Failed);
  ASSERT_NE(failed, nullptr);
  EXPECT_EQ(failed->status, ConditionStatus::False);
  EXPECT_EQ(failed->reason, "Resumed");
  EXPECT_EQ(find_condition(s.conditions, ConditionType::Complete)->status, ConditionStatus::True);
  EXPECT_EQ(finished.metadata.annotations.at("dlbench.io/measured-by"), measured_by);
  // Each result says what measured it, and all three say the same; the report says it once, in
  // every format but csv.
  ASSERT_TRUE(s.results[0].environment.has_value());
  EXPECT_EQ(s.results[0].environment->backend, "cpu");
  EXPECT_EQ(s.results[0].environment->dlbench_version, measured_by.substr(8, measured_by.find(':') - 8));
  EXPECT_FALSE(s.results[0].environment->onednn_version.empty());
  EXPECT_EQ(s.results[1].environment, s.results[0].environment);
  EXPECT_EQ(s.results[2].environment, s.results[0].environment);
  const std::string environment = describe(*s.results[0].environment);
  EXPECT_THAT(environment, ::testing::StartsWith("cpu backend, oneDNN "));
  EXPECT_THAT(dlbench("report resumed.status.json").out, HasSubstr("\nmeasured by\n  resumed: " + environment + "\n"));
  EXPECT_THAT(dlbench("report resumed.status.json --format markdown").out,
              HasSubstr("| run | software and hardware |\n|---|---|\n| resumed | " + environment + " |\n"));
  const auto rows = nlohmann::json::parse(dlbench("report resumed.status.json --format json").out);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[0].at("measuredBy"), measured_by);
  EXPECT_EQ(rows[0].at("environment").at("backend"), "cpu");

  std::filesystem::remove(dir_ / "calls");
  const std::string before = testing::slurp(dir_ / "resumed.status.json");
  const Outcome again = dlbench(run + " --resume");
  EXPECT_EQ(again.exit_code, 0) << again.out << again.err;
  EXPECT_THAT(again.out, HasSubstr("nothing left to run, every one of its 3 cases has its result in resumed.status.json"));
  EXPECT_EQ(testing::slurp(dir_ / "calls"), "");  // the worker was asked only for its devices
  EXPECT_EQ(testing::slurp(dir_ / "resumed.status.json"), before);
}

// --resume --retry-failed: a case that failed (here, its worker exits 1 while the file `broken`
// is there) runs again with all its attempts, and its new result replaces the old; the
// succeeded cases are kept as measured. Without --resume the flag is a usage error.
TEST_F(RunCli, RetryFailedRunsTheFailedCasesAgainAndKeepsTheRest) {
  const std::string text = three_batches("flaky", "  limits: {backoffLimit: 1}\n");
  const std::string worker = batch_2_stand_in("broken", "echo 'device lost' >&2; exit 1;");
  const std::string run = "run -f " + write("run.yaml", text) + " --max-devices 1 --worker " + worker;
  write("broken", "");
  const Outcome first = dlbench(run);
  ASSERT_EQ(first.exit_code, 0) << first.out << first.err;  // two cases succeeded
  const BenchmarkRunStatus before = *status("flaky.status.json").status;
  ASSERT_EQ(before.results.size(), 3u);
  ASSERT_EQ(before.results[1].state, CaseState::Failed);
  EXPECT_EQ(before.results[1].attempts, 2);

  // The flag needs --resume.
  const Outcome alone = dlbench(run + " --retry-failed");
  EXPECT_EQ(alone.exit_code, 2) << alone.out << alone.err;
  EXPECT_THAT(alone.err, HasSubstr("--retry-failed requires --resume"));
  // Plain --resume keeps the failure: nothing left to run.
  std::filesystem::remove(dir_ / "calls");
  EXPECT_THAT(dlbench(run + " --resume").out, HasSubstr("nothing left to run"));

  std::filesystem::remove(dir_ / "broken");
  std::filesystem::remove(dir_ / "calls");
  const Outcome retried = dlbench(run + " --resume --retry-failed");
  ASSERT_EQ(retried.exit_code, 0) << retried.out << retried.err;
  EXPECT_EQ(testing::slurp(dir_ / "calls"), "--batch-size 2\n");  // only the failed case
  EXPECT_THAT(retried.out, HasSubstr("resuming from flaky.status.json: 2 of 3 cases have their result, 1 to run "
                                     "(1 that failed, again)"));
  const BenchmarkRunStatus after = *status("flaky.status.json").status;
  EXPECT_EQ(after.phase, Phase::Succeeded);
  ASSERT_EQ(after.results.size(), 3u);
  EXPECT_EQ(after.results[0], before.results[0]);  // kept as measured
  EXPECT_EQ(after.results[1], before.results[2]);
  EXPECT_EQ(case_id(after.results[2].case_), "1x1-bs2-fp32");
  EXPECT_EQ(after.results[2].state, CaseState::Succeeded);
  EXPECT_EQ(after.results[2].attempts, 1);  // its attempts counted anew
  EXPECT_EQ(after.progress.summary, "3/3");
  // Nothing failed any more: the flag finds nothing to run.
  std::filesystem::remove(dir_ / "calls");
  EXPECT_THAT(dlbench(run + " --resume --retry-failed").out, HasSubstr("nothing left to run"));
  EXPECT_EQ(testing::slurp(dir_ / "calls"), "");
}

// What --resume refuses, each time naming why and leaving the status as it was; and what it
// takes: a matrix that grew runs only its new cases.
TEST_F(RunCli, ResumeKeepsOnlyResultsMeasuredTheSameWay) {
  const std::string worker = write("worker.sh", "#!/bin/sh\necho \"$*\" | grep -o -- '--batch-size [0-9]*' >> '" +
                                                    (dir_ / "calls").string() + "'\nexit 1\n");
  std::filesystem::permissions(worker, std::filesystem::perms::owner_all);
  const auto spec = [](const std::string& name, const std::string& batches, int measure_steps) {
    return "apiVersion: dlbench.io/v1alpha1\nkind: BenchmarkRun\nmetadata: {name: " + name +
           "}\nspec:\n  model: resnet50\n  matrix: {batchSizePerDevice: [" + batches +
           "], precision: [fp32]}\n  methodology: {measureSteps: " + std::to_string(measure_steps) +
           "}\n  limits: {backoffLimit: 0}\n";
  };
  const auto run = [&](const std::string& text, const std::string& flags) {
    return dlbench("run -f " + write("run.yaml", text) + " --worker " + worker + " --output s.json " + flags);
  };
  ASSERT_EQ(run(spec("r", "1, 2", 1), "--max-devices 1").exit_code, 1);  // every case failed: WorkerExited
  const std::string before = testing::slurp(dir_ / "s.json");
  const auto refused = [&](const Outcome& o, const std::string& why) {
    EXPECT_EQ(o.exit_code, 1) << o.out << o.err;
    EXPECT_THAT(o.err, HasSubstr("error: --resume: s.json " + why)) << o.err;
    EXPECT_THAT(o.err, HasSubstr("its results are kept as they are"));
    EXPECT_EQ(testing::slurp(dir_ / "s.json"), before);
  };
  std::filesystem::remove(dir_ / "calls");
  refused(run(spec("r", "1, 2", 1), "--max-devices 2 --resume"), "holds results measured by \"dlbench ");
  refused(run(spec("r", "1, 2", 2), "--max-devices 1 --resume"),
          "was measured under another spec (spec.methodology.measureSteps 1 there, 2 here)");
  refused(run(spec("r", "2", 1), "--max-devices 1 --resume"), "holds results of cases this spec no longer plans (1x1-bs1-fp32)");
  refused(run(spec("other", "1, 2", 1), "--max-devices 1 --resume"), "is the status of run \"r\", not \"other\"");
  EXPECT_EQ(testing::slurp(dir_ / "calls"), "");  // no case ran (the worker was asked only for its devices)

  // A status from before dlbench recorded what measured it.
  nlohmann::json unsigned_status = nlohmann::json::parse(before);
  unsigned_status["metadata"].erase("annotations");
  write("unsigned.json", unsigned_status.dump());
  const Outcome old = dlbench("run -f " + write("run.yaml", spec("r", "1, 2", 1)) + " --worker " + worker +
                              " --max-devices 1 --output unsigned.json --resume");
  EXPECT_EQ(old.exit_code, 1);
  EXPECT_THAT(old.err, HasSubstr("does not say what measured its results (no dlbench.io/measured-by annotation)"));
  write("garbage.json", "{");
  EXPECT_EQ(dlbench("run -f " + (dir_ / "run.yaml").string() + " --max-devices 1 --output garbage.json --resume").exit_code, 2);
  write("pod.json", R"({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "r"}, "spec": {}})");
  const Outcome pod = dlbench("run -f " + (dir_ / "run.yaml").string() + " --max-devices 1 --output pod.json --resume");
  EXPECT_EQ(pod.exit_code, 1);
  EXPECT_THAT(pod.err, HasSubstr("--resume: pod.json: invalid, "));

  const Outcome grown = run(spec("r", "1, 2, 4", 1), "--max-devices 1 --resume");
  EXPECT_EQ(grown.exit_code, 1) << grown.out << grown.err;  // the new case fails too, with this worker
  EXPECT_EQ(testing::slurp(dir_ / "calls"), "--batch-size 4\n");
  EXPECT_EQ(status("s.json").status->results.size(), 3u);

  std::filesystem::remove(dir_ / "calls");
  const Outcome none = dlbench("run -f " + (dir_ / "run.yaml").string() + " --worker " + worker +
                               " --max-devices 1 --output fresh.json --resume");
  EXPECT_THAT(none.out, HasSubstr("--resume: no status at fresh.json yet; the run starts anew"));
  EXPECT_EQ(testing::slurp(dir_ / "calls"), "--batch-size 1\n--batch-size 2\n--batch-size 4\n");
}

// One dlbench run writes a status at a time: a second is refused before it measures anything,
// naming the first; a status nobody could write is refused before anything runs too.
// A status that cannot be written mid-run (here its path taken by a directory while batch 2 runs;
// a full disk or a file-size limit alike): the run stops, saying why, with exit code 2; no result
// is lost, since the status goes to the temporary directory instead; nothing half-written is left
// beside it; and --resume goes on from the status kept.
TEST_F(RunCli, AStatusThatCannotBeWrittenIsKeptInTheTemporaryDirectoryAndResumes) {
  const std::string status_path = (dir_ / "unwritten.status.json").string();
  const std::string worker = batch_2_stand_in("taken", "rm -f '" + status_path + "'; mkdir '" + status_path + "';");
  const std::string run = "run -f " + write("run.yaml", three_batches("unwritten")) + " --max-devices 1 --worker " + worker;
  std::filesystem::create_directories(dir_ / "tmp");
  write("taken", "");
  const Outcome first =
      testing::run_shell("TMPDIR=" + (dir_ / "tmp").string() + " OMP_NUM_THREADS=1 " + DLBENCH_CLI_BINARY + " " + run,
                         dir_.string());
  ASSERT_EQ(first.exit_code, 2) << first.out << first.err;
  EXPECT_THAT(first.err, HasSubstr("error: cannot write unwritten.status.json (renaming unwritten.status.json.tmp over "
                                   "it): Is a directory\n"));
  std::vector<std::filesystem::path> kept;
  for (const auto& entry : std::filesystem::directory_iterator(dir_ / "tmp")) {
    if (entry.path().filename().string().ends_with(".unwritten.status.json")) kept.push_back(entry.path());
  }
  ASSERT_EQ(kept.size(), 1u) << first.err;
  EXPECT_THAT(first.err, HasSubstr("the run's status, with the 2 results measured so far, is kept in " + kept[0].string() +
                                   " instead: move it to unwritten.status.json once that can be written, and "
                                   "`dlbench run -f " + (dir_ / "run.yaml").string() + " --resume` goes on from it\n"));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "unwritten.status.json.tmp"));
  std::filesystem::remove(dir_ / "unwritten.status.json");
  std::filesystem::rename(kept[0], dir_ / "unwritten.status.json");
  const BenchmarkRun stopped = status("unwritten.status.json");
  ASSERT_EQ(stopped.status->results.size(), 2u);
  EXPECT_EQ(stopped.status->results[1].state, CaseState::Succeeded);
  EXPECT_EQ(stopped.status->phase, Phase::Failed);
  EXPECT_EQ(find_condition(stopped.status->conditions, ConditionType::Failed)->reason, "StatusNotWritten");

  std::filesystem::remove(dir_ / "taken");
  std::filesystem::remove(dir_ / "calls");
  const Outcome resumed = dlbench(run + " --resume");
  ASSERT_EQ(resumed.exit_code, 0) << resumed.out << resumed.err;
  EXPECT_EQ(testing::slurp(dir_ / "calls"), "--batch-size 3\n");
  const BenchmarkRun finished = status("unwritten.status.json");
  ASSERT_EQ(finished.status->results.size(), 3u);
  EXPECT_EQ(finished.status->results[0], stopped.status->results[0]);  // as measured before, not again
  EXPECT_EQ(finished.status->results[1], stopped.status->results[1]);
  EXPECT_EQ(finished.status->phase, Phase::Succeeded);
}

// And where the temporary directory cannot take it either (its name there taken too), the status
// follows on stdout, whole, so that a terminal or a log keeps what was measured.
TEST_F(RunCli, AStatusThatCannotBeWrittenAnywhereFollowsOnStdout) {
  const std::string status_path = (dir_ / "unwritten.status.json").string();
  const std::string tmp = (dir_ / "tmp").string();
  const std::string worker = batch_2_stand_in("taken", "rm -f '" + status_path + "'; mkdir '" + status_path + "' '" +
                                                           tmp + "/dlbench-run-'$PPID'.unwritten.status.json';");
  const std::string run = "run -f " + write("run.yaml", three_batches("unwritten")) + " --max-devices 1 --worker " + worker;
  std::filesystem::create_directories(tmp);
  write("taken", "");
  const Outcome first = testing::run_shell("TMPDIR=" + tmp + " OMP_NUM_THREADS=1 " + DLBENCH_CLI_BINARY + " " + run,
                                           dir_.string());
  ASSERT_EQ(first.exit_code, 2) << first.out << first.err;
  EXPECT_THAT(first.err, HasSubstr("error: cannot write unwritten.status.json (renaming"));
  EXPECT_THAT(first.err, ::testing::ContainsRegex("error: cannot write [^ ]*/tmp/dlbench-run-[0-9]+\\.unwritten\\.status\\.json "
                                                  "\\(renaming [^)]* over it\\): Is a directory\n"));
  EXPECT_THAT(first.err, HasSubstr("the run's status, with the 2 results measured so far, follows on stdout: save it as "
                                   "unwritten.status.json once that can be written"));
  const auto json_start = first.out.rfind("\n{\n");
  ASSERT_NE(json_start, std::string::npos) << first.out;
  const auto decoded = decode_benchmark_run(nlohmann::json::parse(first.out.substr(json_start + 1)));
  ASSERT_TRUE(decoded.ok()) << first.out.substr(json_start + 1);
  ASSERT_EQ(decoded.value->status->results.size(), 2u);
  EXPECT_EQ(decoded.value->status->results[0].state, CaseState::Succeeded);
  EXPECT_EQ(find_condition(decoded.value->status->conditions, ConditionType::Failed)->reason, "StatusNotWritten");
  for (const auto& entry : std::filesystem::directory_iterator(tmp)) {
    EXPECT_FALSE(entry.path().filename().string().ends_with(".tmp")) << entry.path();
  }
}

// A log that cannot be written (a full disk; here the logs' folder taken by a file while batch 2
// runs) costs the log, not the case, and the run says so.
TEST_F(RunCli, ALogThatCannotBeWrittenCostsTheLogNotTheCase) {
  const std::string logs = (dir_ / "unlogged.logs").string();
  const std::string worker = batch_2_stand_in("taken", "rm -rf '" + logs + "'; touch '" + logs + "';");
  write("taken", "");
  const Outcome run = dlbench("run -f " + write("run.yaml", three_batches("unlogged")) + " --max-devices 1 --worker " + worker);
  ASSERT_EQ(run.exit_code, 0) << run.out << run.err;
  EXPECT_THAT(run.out, HasSubstr("[3/3] 1x1-bs3-fp32: 1 rank\n  its output is not kept: cannot write "
                                 "unlogged.logs/1x1-bs3-fp32-a1.log: Not a directory\n"));
  EXPECT_THAT(run.out, Not(HasSubstr("1x1-bs2-fp32-a1.log: Not a directory")));
  const BenchmarkRun finished = status("unlogged.status.json");
  ASSERT_EQ(finished.status->results.size(), 3u);
  EXPECT_EQ(finished.status->results[2].state, CaseState::Succeeded);
}

TEST_F(RunCli, ASecondRunWritingTheSameStatusIsRefused) {
  const std::string run = "run -f " + write("run.yaml", sweep()) + " --max-devices 1 --worker /bin/false";
  const int held = ::open((dir_ / "s.json.lock").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_GE(held, 0);
  ASSERT_EQ(::flock(held, LOCK_EX), 0);
  ASSERT_EQ(::write(held, "4242", 4), 4);
  const Outcome refused = dlbench(run + " --output s.json");
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_THAT(refused.err, HasSubstr("another dlbench run (pid 4242) is writing s.json; wait for it to end"));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "s.json"));
  ::close(held);  // the first run ended (or died: the kernel lets go of its lock all the same)

  const Outcome ran = dlbench(run + " --output s.json");
  EXPECT_EQ(ran.exit_code, 1) << ran.out << ran.err;  // /bin/false: every case Failed, WorkerExited
  EXPECT_TRUE(std::filesystem::exists(dir_ / "s.json"));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "s.json.lock"));  // removed when the run ended

  const Outcome nowhere = dlbench(run + " --output " + (dir_ / "missing" / "s.json").string());
  EXPECT_EQ(nowhere.exit_code, 2);
  EXPECT_THAT(nowhere.err, HasSubstr("cannot write " + (dir_ / "missing" / "s.json.lock").string() +
                                     " beside the status: No such file or directory"));
  EXPECT_THAT(nowhere.out, Not(HasSubstr("[1/")));
}

// Each attempt's whole output (the worker's stderr, or dlbench-exec's) is kept beside the status:
// the status's message keeps only the last lines, cut short, and the line that says why may be
// neither. A flood is kept up to 64 MiB.
TEST_F(RunCli, EachAttemptsWholeOutputIsKeptBesideTheStatus) {
  const std::string first_line(300, 'w');
  std::string script = "#!/bin/sh\necho '" + first_line + "' >&2\necho 'the real reason: out of cheese' >&2\n";
  for (int i = 0; i < 20; ++i) script += "echo 'noise " + std::to_string(i) + "' >&2\n";
  script += "exit 3\n";
  const std::string worker = write("worker.sh", script);
  std::filesystem::permissions(worker, std::filesystem::perms::owner_all);
  const std::string run = "run -f " + write("run.yaml", sweep()) + " --max-devices 1 --worker " + worker;
  const Outcome o = dlbench(run + " --output s.status.json");
  EXPECT_EQ(o.exit_code, 1) << o.out << o.err;
  EXPECT_THAT(o.out, HasSubstr("status in s.status.json, logs in s.logs/"));
  EXPECT_THAT(o.out, HasSubstr("its whole output: s.logs/1x1-bs2-fp32-a1.log"));
  EXPECT_THAT(o.out, HasSubstr("its whole output: s.logs/1x1-bs2-fp32-a2.log"));
  const std::string message = status("s.status.json").status->results.at(0).message;
  EXPECT_THAT(message, Not(HasSubstr("out of cheese")));  // the last 12 lines only
  for (const char* attempt : {"a1", "a2"}) {
    const std::string log = testing::slurp(dir_ / "s.logs" / ("1x1-bs2-fp32-" + std::string(attempt) + ".log"));
    EXPECT_THAT(log, ::testing::StartsWith(first_line + "\nthe real reason: out of cheese\nnoise 0\n"));
    EXPECT_THAT(log, ::testing::EndsWith("noise 19\n"));
  }
  EXPECT_FALSE(std::filesystem::exists(dir_ / "s.logs" / "1x2-bs2-fp32-a1.log"));  // skipped: nothing ran

  const std::string flood = write("flood.sh", "#!/bin/sh\nhead -c 70000000 /dev/zero | tr '\\0' x >&2\nexit 3\n");
  std::filesystem::permissions(flood, std::filesystem::perms::owner_all);
  const Outcome flooded = dlbench("run -f " + (dir_ / "run.yaml").string() + " --max-devices 1 --worker " + flood +
                                  " --output f.json --logs flood-logs");
  EXPECT_EQ(flooded.exit_code, 1) << flooded.out << flooded.err;
  const auto size = std::filesystem::file_size(dir_ / "flood-logs" / "1x1-bs2-fp32-a1.log");
  EXPECT_GT(size, 64u * 1024 * 1024);
  EXPECT_LT(size, 64u * 1024 * 1024 + 200);
  EXPECT_THAT(testing::slurp(dir_ / "flood-logs" / "1x1-bs2-fp32-a1.log"),
              ::testing::EndsWith("[dlbench run: the log ends here, at 64 MiB; the output went on]\n"));

  write("a-file", "");
  const Outcome nowhere = dlbench(run + " --output n.json --logs a-file/logs");
  EXPECT_EQ(nowhere.exit_code, 2);
  EXPECT_THAT(nowhere.err, HasSubstr("cannot make a-file/logs for the cases' logs"));
}

// What the worker lists is what runs: a GPU it sees (after a slow first driver initialisation)
// makes the CUDA backend the default, and the GPU's model goes into the status's record of what
// measured it. The stand-in lists one GPU and fails every case.
TEST_F(RunCli, AGpuTheWorkerListsIsTheBackendAndItsModelIsRecorded) {
  const std::string worker = write("worker.sh",
                                   "#!/bin/sh\ncase \" $* \" in *\" --list-devices \"*) sleep 6; echo 'cpu 2 precisions=fp32'; "
                                   "echo 'cuda 1 precisions=fp32,amp name=NVIDIA Fake 80GB'; exit 0;; esac\nexit 1\n");
  std::filesystem::permissions(worker, std::filesystem::perms::owner_all);
  const std::string limits = "  limits: {backoffLimit: 0}\n";
  const Outcome o = dlbench("run -f " + write("run.yaml", sweep(limits)) + " --worker " + worker + " --output g.json");
  EXPECT_EQ(o.exit_code, 1) << o.out << o.err;
  EXPECT_THAT(o.out, HasSubstr("cases on this host (cuda backend, 1 device), status in g.json"));
  EXPECT_THAT(status("g.json").metadata.annotations.at("dlbench.io/measured-by"),
              ::testing::MatchesRegex("dlbench [0-9.]+\\+[0-9a-z.]+: cuda backend, 1 device \\(NVIDIA Fake 80GB\\); CPU .+"));
}

// Ctrl-C while the worker lists its devices (a GPU driver can take long to start) stops dlbench
// at once: nothing ran, so there is nothing to keep and no status is written.
TEST_F(RunCli, InterruptWhileTheDevicesAreListedStopsAtOnce) {
  const std::string worker = write("hung-worker.sh", "#!/bin/sh\nsleep 30\n");
  std::filesystem::permissions(worker, std::filesystem::perms::owner_all);
  const pid_t pid = dlbench_in_background("run -f " + write("run.yaml", sweep()) + " --worker " + worker);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  ASSERT_EQ(kill(pid, SIGINT), 0);
  const auto interrupted = std::chrono::steady_clock::now();
  while (!std::filesystem::exists(dir_ / "rc") && std::chrono::steady_clock::now() - interrupted < std::chrono::seconds(20)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - interrupted, std::chrono::seconds(3));
  EXPECT_EQ(testing::slurp(dir_ / "rc"), "130\n");
  EXPECT_THAT(testing::slurp(dir_ / "out.txt"), HasSubstr("dlbench run small: interrupted before the first case"));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "small.status.json"));
}

TEST_F(RunCli, BadInput) {
  EXPECT_EQ(dlbench("run").exit_code, 2);
  EXPECT_EQ(dlbench("run -f missing.yaml").exit_code, 2);
  const Outcome invalid = dlbench("run -f " + std::string(DLBENCH_SOURCE_DIR) + "/crds/examples/invalid-values.yaml");
  EXPECT_EQ(invalid.exit_code, 1);
  EXPECT_THAT(invalid.err, HasSubstr("spec.matrix.precision[1]"));
  EXPECT_EQ(dlbench("report").exit_code, 2);
  EXPECT_THAT(dlbench("report x.json --format pdf").err, HasSubstr("is not one of table, markdown, csv, json"));
}

TEST_F(RunCli, TheBackendIsWhatTheWorkerFinds) {
  const std::string run = write("run.yaml", sweep());
  const Outcome bad = dlbench("run -f " + run + " --backend gpu");
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_THAT(bad.err, HasSubstr("is not one of auto, cpu, cuda"));
  const Outcome devices = testing::run_shell(std::string(DLBENCH_WORKER_BINARY) + " --list-devices", dir_.string());
  ASSERT_EQ(devices.exit_code, 0);
  ASSERT_THAT(devices.out, HasSubstr("cpu "));
  if (devices.out.find("cuda 0") == std::string::npos && devices.out.find("cuda") != std::string::npos) {
    GTEST_SKIP() << "this host has a GPU: --backend cuda would run (the gpu tests cover the backend)";
  }
  // No GPU here (or CUDA not built in): asking for cuda is refused before anything runs.
  const Outcome cuda = dlbench("run -f " + run + " --backend cuda --output s.json");
  EXPECT_EQ(cuda.exit_code, 1);
  EXPECT_THAT(cuda.err, HasSubstr("--backend cuda: `"));
  EXPECT_THAT(cuda.err, HasSubstr("allowed here: cpu"));
  EXPECT_FALSE(std::filesystem::exists(dir_ / "s.json"));
}

}  // namespace
}  // namespace dlbench
