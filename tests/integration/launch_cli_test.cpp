// `dlbench launch`: what the launcher Job leaves in its termination message.
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "../support/process.hpp"
#include "dlbench/core/result_document.hpp"
#include "dlbench/core/status.hpp"
#include "launch_command.hpp"

namespace dlbench {
namespace {

using ::testing::HasSubstr;

class LaunchCli : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() / ("dlbench-launch-" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  testing::Outcome launch(const std::string& command) {
    return testing::run_shell(std::string(DLBENCH_CLI_BINARY) + " launch --termination-log message -- " + command,
                              dir_.string());
  }
  testing::Outcome launch_with(const std::string& options, const std::string& command) {
    return testing::run_shell(
        std::string(DLBENCH_CLI_BINARY) + " launch --termination-log message " + options + " -- " + command,
        dir_.string());
  }
  std::string message() { return testing::slurp(dir_ / "message"); }
  // A real worker's Failed document (WorkerError, the repeats before the failure kept): one warm-up
  // and one measured step a repeat, rank 0's step `failing_step` failing.
  nlohmann::json failed_worker_document(int failing_step) {
    const auto made = testing::run_shell("DLBENCH_INJECT_FAILURE=0:" + std::to_string(failing_step) + " OMP_NUM_THREADS=1 " +
                                             std::string(DLBENCH_WORKER_BINARY) +
                                             " --model resnet50 --image-size 32 --batch-size 1 --warmup-steps 1"
                                             " --measure-steps 1 --repeats 5 --output failed.json",
                                         dir_.string());
    EXPECT_EQ(made.exit_code, 1) << made.err;
    auto failed = nlohmann::json::parse(testing::slurp(dir_ / "failed.json"));
    EXPECT_EQ(failed["reason"], "WorkerError");
    return failed;
  }
  std::filesystem::path dir_;
};

TEST_F(LaunchCli, ValidResultGoesToTheTerminationMessage) {
  const auto o = launch("env OMP_NUM_THREADS=1 " + std::string(DLBENCH_WORKER_BINARY) +
                        " --model resnet50 --image-size 32 --batch-size 1 --warmup-steps 1 --measure-steps 1 --repeats 7");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  const std::string text = message();
  EXPECT_LE(text.size(), kTerminationMessageLimit);
  const auto decoded = decode_result_document(nlohmann::json::parse(text));
  ASSERT_TRUE(decoded.ok()) << decoded.errors.front().to_string();
  EXPECT_EQ(decoded.value->throughput->repeats.size(), 7u);
  EXPECT_THAT(o.err, HasSubstr("repeat 7/7"));  // the worker's stderr is passed through
}

TEST_F(LaunchCli, FailureKeepsTheExitCodeAndTheLastWords) {
  const auto o = launch("sh -c 'echo starting >&2; echo \"ORTE was unable to reach a daemon\" >&2; exit 3'");
  EXPECT_EQ(o.exit_code, 3);
  EXPECT_THAT(message(), HasSubstr("no result document (exit code 3)"));
  EXPECT_THAT(message(), HasSubstr("ORTE was unable to reach a daemon"));
  const auto garbage = launch("echo not-json");
  EXPECT_EQ(garbage.exit_code, 1);  // a clean exit without a result is still a failure
  EXPECT_THAT(message(), HasSubstr("no result document"));
  EXPECT_EQ(launch("").exit_code, 2);
}

// One rank's failure that the others never learnt of: it writes its result and aborts the job,
// and rank 0, stopped by mpirun, writes what it measured (Stopped). The failing rank's result is
// the case's, whichever came first; a Stopped result alone gets the job's last lines, which say
// why it was stopped.
TEST_F(LaunchCli, AFailedRanksResultBeatsRankZerosStoppedOneAndAStoppedOneGetsTheLastLines) {
  auto failed = failed_worker_document(3);
  ASSERT_FALSE(HasFailure());
  failed["message"] = "rank 1: a device error";
  auto stopped = failed;
  stopped["reason"] = kReasonStopped;
  stopped["message"] = "stopped by SIGTERM after 1 repeat";
  std::ofstream(dir_ / "failed.json") << failed.dump(2) << "\n";
  std::ofstream(dir_ / "stopped.json") << stopped.dump(2) << "\n";
  const std::string mpirun_says =
      "echo ------ >&2; echo 'mpirun noticed that process rank 1 with PID 0 on node a exited on signal 9 (Killed).' >&2";

  for (const std::string order : {"stopped.json failed.json", "failed.json stopped.json"}) {
    const auto o = launch("sh -c \"cat " + order + "; " + mpirun_says + "; exit 137\"");
    EXPECT_EQ(o.exit_code, 137);
    const auto chosen = nlohmann::json::parse(message());
    EXPECT_EQ(chosen["reason"], "WorkerError") << order;
    EXPECT_EQ(chosen["message"], "rank 1: a device error") << order;
  }
  const auto o = launch("sh -c \"echo 'dlbench-worker: stopped by SIGTERM after 1 repeat' >&2; cat stopped.json; " +
                        mpirun_says + "; exit 137\"");
  EXPECT_EQ(o.exit_code, 137);
  const auto alone = nlohmann::json::parse(message());
  EXPECT_EQ(alone["reason"], kReasonStopped);
  EXPECT_EQ(alone["message"],
            "stopped by SIGTERM after 1 repeat\n"
            "mpirun noticed that process rank 1 with PID 0 on node a exited on signal 9 (Killed).");
  EXPECT_TRUE(decode_result_document(alone).ok());

  launch("sh -c \"cat stopped.json; echo '{'\"");  // a second value cut short: no result
  EXPECT_THAT(message(), HasSubstr("no result document"));
}

// Rank 0 and its deputy both stopped (another rank ended): rank 0's document is the case's, in
// either order; the deputy's alone (rank 0 killed outright) is, with its rank named.
TEST_F(LaunchCli, RankZerosStoppedResultBeatsItsDeputysAndTheDeputysStandsAlone) {
  auto rank0 = failed_worker_document(5);  // two repeats kept, as a stopped rank 0 keeps them
  ASSERT_FALSE(HasFailure());
  ASSERT_EQ(rank0["throughput"]["repeats"].size(), 2u);
  rank0["reason"] = kReasonStopped;
  rank0["message"] = "stopped by SIGTERM after 2 repeats";
  auto deputy = rank0;
  deputy["message"] = "rank 2: stopped by SIGTERM after 2 repeats, kept here unjudged for rank 0";
  deputy["throughput"]["repeats"] = {1.0, 2.0};  // told apart by more than the message
  std::ofstream(dir_ / "rank0.json") << rank0.dump(2) << "\n";
  std::ofstream(dir_ / "deputy.json") << deputy.dump(2) << "\n";
  for (const std::string order : {"deputy.json rank0.json", "rank0.json deputy.json"}) {
    launch("sh -c \"cat " + order + "; exit 143\"");
    ASSERT_TRUE(message().starts_with("{")) << message();
    const auto chosen = nlohmann::json::parse(message());
    EXPECT_TRUE(decode_result_document(chosen).ok()) << order;
    EXPECT_EQ(chosen["message"], "stopped by SIGTERM after 2 repeats") << order;
    EXPECT_EQ(chosen["throughput"]["repeats"], rank0["throughput"]["repeats"]) << order;
  }
  launch("sh -c \"cat deputy.json; echo 'mpirun noticed that process rank 0 with PID 0 on node a exited on signal 9 "
         "(Killed).' >&2; exit 137\"");
  const auto alone = nlohmann::json::parse(message());
  EXPECT_TRUE(decode_result_document(alone).ok());
  EXPECT_EQ(alone["reason"], kReasonStopped);
  EXPECT_EQ(alone["message"],
            "rank 2: stopped by SIGTERM after 2 repeats, kept here unjudged for rank 0\n"
            "mpirun noticed that process rank 0 with PID 0 on node a exited on signal 9 (Killed).");
  EXPECT_EQ(alone["throughput"]["repeats"], deputy["throughput"]["repeats"]);
}

// The case's deadline (the operator's --stop-after): the worker is stopped as mpirun would stop
// it, and the repeats it measured come back as a Timeout result, valid, that keeps them. (30 s:
// the first repeat needs a few on a machine busy with a build; a thousand outlast it anywhere.)
TEST_F(LaunchCli, AtItsDeadlineTheCaseIsStoppedAndItsRepeatsComeBackAsATimeout) {
  const auto start = std::chrono::steady_clock::now();
  const auto o = testing::run_shell(std::string(DLBENCH_CLI_BINARY) +
                                        " launch --termination-log message --stop-after 30 --case-timeout 60 -- env "
                                        "OMP_NUM_THREADS=1 " + DLBENCH_WORKER_BINARY +
                                        " --model resnet50 --image-size 32 --batch-size 1 --warmup-steps 1"
                                        " --measure-steps 3 --repeats 1000",
                                    dir_.string());
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(30 + kLaunchStopGraceSeconds));
  EXPECT_EQ(o.exit_code, 128 + SIGUSR1) << o.err;
  EXPECT_THAT(o.err, HasSubstr("dlbench launch: the case's deadline, 30 s: stopping the command"));
  const auto document = nlohmann::json::parse(message());
  const auto decoded = decode_result_document(document);
  ASSERT_TRUE(decoded.ok()) << decoded.errors.front().to_string();
  EXPECT_EQ(decoded.value->state, CaseState::Failed);
  EXPECT_EQ(decoded.value->reason, "Timeout");
  ASSERT_TRUE(decoded.value->throughput);
  const std::size_t kept = decoded.value->throughput->repeats.size();
  EXPECT_GE(kept, 1u);
  EXPECT_LT(kept, 1000u);
  EXPECT_EQ(decoded.value->message, timeout_message(60, kept));
  EXPECT_THAT(decoded.value->message, HasSubstr("no result within limits.caseTimeoutSeconds (60 s); the "));
}

// SIGTERM to the launcher (a pod's deletion, the Job's activeDeadlineSeconds) reaches the command,
// whose rank 0 then writes its repeats (Stopped): before, the launcher, PID 1 in its container,
// ignored it and the kubelet's SIGKILL lost them.
TEST_F(LaunchCli, ASigtermIsPassedOnAndTheRepeatsMeasuredAreKeptAsStopped) {
  const auto o = testing::run_shell("{ " + std::string(DLBENCH_CLI_BINARY) +
                                        " launch --termination-log message -- env OMP_NUM_THREADS=1 " +
                                        DLBENCH_WORKER_BINARY +
                                        " --model resnet50 --image-size 32 --batch-size 1 --warmup-steps 1"
                                        " --measure-steps 3 --repeats 1000 2> launch.err & launcher=$!;"
                                        // after its first repeat, however loaded the machine (at most 120 s)
                                        " for i in $(seq 600); do grep -q 'repeat 1/' launch.err && break; sleep 0.2; done;"
                                        " kill -TERM $launcher; wait $launcher; }",
                                    dir_.string());
  const std::string err = testing::slurp(dir_ / "launch.err");
  EXPECT_EQ(o.exit_code, 128 + SIGUSR1) << err;
  EXPECT_THAT(err, HasSubstr("dlbench launch: SIGTERM: stopping the command"));
  const auto decoded = decode_result_document(nlohmann::json::parse(message()));
  ASSERT_TRUE(decoded.ok()) << decoded.errors.front().to_string();
  EXPECT_EQ(decoded.value->reason, kReasonStopped);
  ASSERT_TRUE(decoded.value->throughput);
  EXPECT_GE(decoded.value->throughput->repeats.size(), 1u);
  EXPECT_THAT(decoded.value->message, HasSubstr("stopped by SIGUSR1 after "));
}

// Stopped at the deadline without a document, the launcher's words say Timeout (the operator
// knows them again); a command that ignores the stop is killed kLaunchStopGraceSeconds later, and
// its children, still holding its output open, do not hold the launcher (mpirun's ssh would).
TEST_F(LaunchCli, AtItsDeadlineACommandWithoutAResultIsATimeoutAndOneThatIgnoresTheStopIsKilled) {
  const auto quiet = launch_with("--stop-after 1 --case-timeout 30", "sleep 60");
  EXPECT_EQ(quiet.exit_code, 128 + SIGUSR1);
  EXPECT_TRUE(is_timeout_message(message())) << message();
  EXPECT_THAT(message(), HasSubstr("no result within limits.caseTimeoutSeconds (30 s); no result document (exit code 138)"));

  const auto start = std::chrono::steady_clock::now();
  // The shell records its sleep's pid so that only this test's orphan is killed afterwards: a
  // pattern (pkill -f 'sleep 120') also matched the launcher of a test running beside this one.
  const auto stubborn =
      launch_with("--stop-after 1", "sh -c 'trap \"\" USR1; echo deaf >&2; sleep 120 & echo $! > orphan.pid; wait $!; sleep 1'");
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, std::chrono::seconds(1 + kLaunchStopGraceSeconds));
  EXPECT_LT(took, std::chrono::seconds(1 + kLaunchStopGraceSeconds + 20));
  EXPECT_EQ(stubborn.exit_code, 128 + SIGKILL);
  EXPECT_THAT(message(), HasSubstr("no result within limits.caseTimeoutSeconds (1 s); no result document (exit code 137)"));
  EXPECT_THAT(message(), HasSubstr("deaf"));
  EXPECT_TRUE(std::filesystem::exists(dir_ / "orphan.pid"));
  testing::run_shell("kill \"$(cat orphan.pid)\" 2>/dev/null || true", dir_.string());
}

TEST_F(LaunchCli, AStopAfterThatIsNotWholeSecondsIsAUsageError) {
  for (const std::string bad : {"0", "-3", "604801"}) {
    const auto o = launch_with("--stop-after " + bad, "true");
    EXPECT_EQ(o.exit_code, 2) << bad;
    EXPECT_THAT(o.err, HasSubstr("--stop-after: " + bad + " is out of range; allowed: 1 to 604800")) << bad;
  }
  for (const std::string bad : {"1.5", "soon"}) {
    const auto o = launch_with("--stop-after " + bad, "true");
    EXPECT_EQ(o.exit_code, 2) << bad;
    EXPECT_THAT(o.err, HasSubstr("--stop-after: \"" + bad + "\" is not a number")) << bad;
  }
  EXPECT_EQ(launch_with("--case-timeout x", "true").exit_code, 2);
}

// The operator's --stop-at: the attempt's deadline by the cluster's clock stops the command
// however late the launcher started, before a --stop-after that would come later; a time that
// is not one, or without the limit a Timeout names, is a usage error.
TEST_F(LaunchCli, AtTheTimeItIsToldTheCaseIsStoppedBeforeALaterStopAfter) {
  const auto start = std::chrono::steady_clock::now();
  const std::string at = rfc3339_utc(std::chrono::system_clock::now() + std::chrono::seconds(3));
  const auto o = launch_with("--stop-after 600 --stop-at " + at + " --case-timeout 60",
                             "sh -c \"echo waiting >&2; exec sleep 120\"");
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_GE(took, std::chrono::seconds(1));  // `at` is rounded down to its second
  EXPECT_LT(took, std::chrono::seconds(3 + kLaunchStopGraceSeconds + 20));
  EXPECT_EQ(o.exit_code, 128 + SIGUSR1) << o.err;
  EXPECT_THAT(o.err, HasSubstr("dlbench launch: the case's deadline, " + at + ": stopping the command"));
  EXPECT_THAT(message(), HasSubstr("no result within limits.caseTimeoutSeconds (60 s); no result document"));
  EXPECT_TRUE(is_timeout_message(message()));

  for (const std::string bad : {"soon", "2026-12-05 21:40:00", "2026-12-05T21:40:00+01:00"}) {
    const auto refused = launch_with("--stop-at '" + bad + "' --case-timeout 60", "true");
    EXPECT_EQ(refused.exit_code, 2) << bad;
    EXPECT_THAT(refused.err, HasSubstr("--stop-at: \"" + bad + "\" is not a UTC time like 2026-12-05T21:40:00Z")) << bad;
  }
  const auto alone = launch_with("--stop-at " + at, "true");
  EXPECT_EQ(alone.exit_code, 2);
  EXPECT_THAT(alone.err, HasSubstr("--stop-at needs --case-timeout"));
}

TEST(CompactResult, DropsBulkNeverNumbers) {
  ResultDocument doc;
  doc.case_ = {64, 8, 256, Precision::amp};
  doc.devices = 512;
  doc.global_batch_size = 256L * 512;
  doc.methodology.repeats = 7;
  const std::vector<double> repeats{1.5, 2.5, 3.5, 4.5, 5.5, 6.5, 7.5};
  doc.throughput = Throughput{"samples/s", {4.5, 4.5, 1.5, 7.5, 2.16, 0.48}, repeats};
  doc.environment.backend = "cuda";
  for (int i = 0; i < 128; ++i) doc.environment.hosts.push_back("gpu-node-" + std::to_string(i) + ".cluster.example.org");
  doc.environment.cpu_model = std::string(500, 'x');
  const std::string text = to_json(doc).dump();
  ASSERT_GT(text.size(), kTerminationMessageLimit);
  const std::string compact = compact_result_document(text, kTerminationMessageLimit);
  EXPECT_LE(compact.size(), kTerminationMessageLimit);
  const auto j = nlohmann::json::parse(compact);
  EXPECT_FALSE(j["environment"].contains("hosts"));
  EXPECT_EQ(j["throughput"]["repeats"].get<std::vector<double>>(), repeats);
  EXPECT_EQ(j["environment"]["cpuModel"].get<std::string>().size(), 500u);  // it fitted once hosts were gone
  EXPECT_THROW(compact_result_document(text, 200), std::runtime_error);
}

}  // namespace
}  // namespace dlbench
