// `dlbench launch`: what the launcher Job leaves in its termination message.
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
  std::string message() { return testing::slurp(dir_ / "message"); }
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
  const auto made = testing::run_shell("DLBENCH_INJECT_FAILURE=0:3 OMP_NUM_THREADS=1 " + std::string(DLBENCH_WORKER_BINARY) +
                                           " --model resnet50 --image-size 32 --batch-size 1 --warmup-steps 1"
                                           " --measure-steps 1 --repeats 5 --output failed.json",
                                       dir_.string());
  ASSERT_EQ(made.exit_code, 1) << made.err;
  auto failed = nlohmann::json::parse(testing::slurp(dir_ / "failed.json"));
  ASSERT_EQ(failed["reason"], "WorkerError");
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
