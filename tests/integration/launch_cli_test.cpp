// `dlbench launch`: what the launcher Job leaves in its termination message.
#include <filesystem>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "../support/process.hpp"
#include "dlbench/core/result_document.hpp"
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
