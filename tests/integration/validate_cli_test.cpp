// The real dlbench binary, as a user runs it.
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "../support/process.hpp"
#include "../support/test_support.hpp"
#include "dlbench/core/planner.hpp"
#include "dlbench/core/yaml.hpp"

namespace dlbench {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

using testing::Outcome;
using testing::slurp;

Outcome dlbench(const std::string& args, const std::string& stdin_text = "") {
  return testing::run_shell(std::string(DLBENCH_CLI_BINARY) + " " + args, DLBENCH_SOURCE_DIR, stdin_text);
}

TEST(ValidateCli, ValidSweepPrintsEveryPlannedCase) {
  const Outcome o = dlbench("validate -f crds/examples/vgg16-paddle-baseline.yaml");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  EXPECT_THAT(o.out, HasSubstr("vgg16-paddle-baseline): valid"));
  EXPECT_THAT(o.out, HasSubstr("16 cases"));
  EXPECT_THAT(o.out, HasSubstr("baseline (added)"));
  EXPECT_THAT(o.out, HasSubstr("spec.methodology.repeats = 7"));
  const auto doc = load_yaml_file(testing::source_path("crds/examples/vgg16-paddle-baseline.yaml")).at(0);
  for (const auto& c : plan_cases(decode_benchmark_run(doc).value->spec)) EXPECT_THAT(o.out, HasSubstr(c.id));
  // Baselines come first in the printed order.
  EXPECT_LT(o.out.find("1x1-bs128-amp"), o.out.find("1x8-bs32-fp32"));
  // No learning rate in the spec: VGG16's recipe, each case's rate in its row.
  EXPECT_THAT(o.out, HasSubstr("optimizer sgd at the model's learning rate, 0.01 at a global batch of 256 and linearly less below it"));
  EXPECT_THAT(o.out, HasSubstr("LEARNING RATE"));
  const auto row = [&](const std::string& id) {
    const auto at = o.out.find(" " + id + " ");
    return at == std::string::npos ? std::string() : o.out.substr(at, o.out.find('\n', at) - at) + " ";
  };
  EXPECT_THAT(row("1x1-bs128-amp"), HasSubstr(" 0.005 "));  // 128 of 256
  EXPECT_THAT(row("1x8-bs32-fp32"), HasSubstr(" 0.01 "));   // 256: the recipe's batch
  EXPECT_THAT(row("4x8-bs128-fp32"), HasSubstr(" 0.01 "));  // 4,096: never above the recipe's rate
}

TEST(ValidateCli, InvalidExamplePrintsFieldPathsAndExitsOne) {
  const Outcome o = dlbench("validate -f crds/examples/invalid-values.yaml");
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_THAT(o.err, HasSubstr("invalid, 9 errors"));
  EXPECT_THAT(o.err, HasSubstr(R"(spec.matrix.precision[1]: "fp8" is not one of fp32, tf32, amp, bf16)"));
  EXPECT_THAT(o.err, HasSubstr(R"(spec.model: "resnet51" is not one of resnet50, resnet152, vgg16, alexnet, inception_v3)"));
  EXPECT_THAT(o.err, HasSubstr("spec.limits.backoffLimit: 11 is out of range; allowed: 0 to 10"));

  const Outcome s = dlbench("validate -f crds/examples/invalid-structure.yaml");
  EXPECT_EQ(s.exit_code, 1);
  EXPECT_THAT(s.err, HasSubstr("spec: set either matrix or cases, not both"));
  EXPECT_THAT(s.err, HasSubstr("spec.worker.nodeSelektor: unknown field"));
  EXPECT_THAT(s.err, HasSubstr(R"(spec.methodology.repeats: expected an integer from 1 to 1000, got a string ("7"))"));
}

TEST(ValidateCli, UnreadableInputExitsTwo) {
  const Outcome missing = dlbench("validate -f crds/examples/does-not-exist.yaml");
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_THAT(missing.err, HasSubstr("cannot open crds/examples/does-not-exist.yaml"));

  const Outcome syntax = dlbench("validate -f -", "spec: [1, 2\nmodel: x\n");
  EXPECT_EQ(syntax.exit_code, 2);
  EXPECT_THAT(syntax.err, HasSubstr("<stdin>: not valid YAML: line"));

  const Outcome empty = dlbench("validate -f -", "# nothing here\n");
  EXPECT_EQ(empty.exit_code, 2);
  EXPECT_THAT(empty.err, HasSubstr("holds no document"));
}

TEST(ValidateCli, SeveralDocumentsAreEachReported) {
  const std::string two = slurp(testing::source_path("crds/examples/quickstart.yaml")) + "---\n" +
                          slurp(testing::source_path("crds/examples/invalid-values.yaml"));
  const Outcome o = dlbench("validate -f -", two);
  EXPECT_EQ(o.exit_code, 1);
  EXPECT_THAT(o.out, HasSubstr("<stdin> document 1 (quickstart): valid"));
  EXPECT_THAT(o.err, HasSubstr("<stdin> document 2 (invalid-values): invalid"));
}

TEST(ValidateCli, JsonOutputIsMachineReadable) {
  const Outcome o = dlbench("validate -f crds/examples/quickstart.yaml -o json");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  const auto parsed = nlohmann::json::parse(o.out);
  ASSERT_EQ(parsed.size(), 1u);
  EXPECT_EQ(parsed[0]["benchmarkRun"]["spec"]["optimizer"]["momentum"], 0.9);  // defaults materialised
  // The learning rate is the model's recipe at each case's global batch: left to the cases.
  EXPECT_FALSE(parsed[0]["benchmarkRun"]["spec"]["optimizer"].contains("learningRate"));
  ASSERT_EQ(parsed[0]["cases"].size(), 2u);
  EXPECT_EQ(parsed[0]["cases"][0]["id"], "1x1-bs8-fp32");
  EXPECT_EQ(parsed[0]["cases"][0]["baseline"], true);
  EXPECT_EQ(parsed[0]["cases"][0]["optimizer"],
            nlohmann::json::parse(R"({"name": "sgd", "learningRate": 0.003125, "momentum": 0.9, "weightDecay": 0.0001})"));
  EXPECT_EQ(parsed[0]["cases"][1]["globalBatchSize"], 16);
  EXPECT_EQ(parsed[0]["cases"][1]["optimizer"]["learningRate"], 0.00625);
}

TEST(ValidateCli, YamlOutputReadsBack) {
  const Outcome o = dlbench("validate -f crds/examples/dlperf-resnet50-scaling.yaml -o yaml");
  ASSERT_EQ(o.exit_code, 0) << o.err;
  const auto docs = parse_yaml_documents(o.out);
  ASSERT_EQ(docs.size(), 1u);
  EXPECT_TRUE(decode_benchmark_run(docs[0]["benchmarkRun"]).ok());
  EXPECT_EQ(docs[0]["cases"].size(), 8u);
}

TEST(ValidateCli, UsageErrorsExitTwo) {
  const Outcome format = dlbench("validate -f crds/examples/quickstart.yaml -o xml");
  EXPECT_EQ(format.exit_code, 2);
  EXPECT_THAT(format.err, HasSubstr(R"(--output: "xml" is not one of table, json, yaml)"));
  EXPECT_EQ(dlbench("validate").exit_code, 2);
  EXPECT_EQ(dlbench("frobnicate").exit_code, 2);
  const Outcome help = dlbench("help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_THAT(help.out, HasSubstr("dlbench validate -f FILE"));
  EXPECT_THAT(dlbench("validate -q -f crds/examples/quickstart.yaml").out, Not(HasSubstr("valid")));
}

}  // namespace
}  // namespace dlbench
