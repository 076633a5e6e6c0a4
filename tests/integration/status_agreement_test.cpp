// One status machine: the same worker outcomes, driven through `dlbench run` (the real binary,
// a scripted worker) and through the operator's reconciler (launcher pods that end with the
// same documents), give the same status — phase, conditions, progress, results, attempts.
#include <filesystem>
#include <fstream>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "../support/process.hpp"
#include "dlbench/core/codec.hpp"
#include "dlbench/core/result_document.hpp"
#include "dlbench/core/statistics.hpp"
#include "dlbench/core/yaml.hpp"
#include "reconciler.hpp"

namespace dlbench {
namespace {

using nlohmann::json;

constexpr const char* kRun = R"(apiVersion: dlbench.io/v1alpha1
kind: BenchmarkRun
metadata: {name: agree, namespace: default, uid: u-1, generation: 1}
spec:
  model: resnet50
  data: {imageSize: 32}
  matrix: {nodes: [1], gpusPerNode: [1], batchSizePerDevice: [4, 8, 16], precision: [fp32]}
  methodology: {warmupSteps: 1, measureSteps: 2, repeats: 3}
  limits: {backoffLimit: 1}
)";

// bs4's: resnet50's 0.1 at a global batch of 256, linearly less at 4.
constexpr const char* kAskedJson = R"({"name": "sgd", "learningRate": 0.0015625, "momentum": 0.9, "weightDecay": 0.0001})";

CaseSpec case_with_batch(int batch) { return {1, 1, batch, Precision::fp32}; }

// What the worker says it trained with: the spec's optimizer, resnet50's default rate resolved
// at the case's global batch.
OptimizerSpec asked(const CaseSpec& c) { return {OptimizerName::sgd, 0.1 * c.global_batch_size() / 256, 0.9, 1e-4}; }

std::string document(const CaseSpec& c, double throughput, const std::string& reason = "",
                     const std::optional<OptimizerSpec>& optimizer = std::nullopt) {
  ResultDocument doc;
  doc.case_ = c;
  doc.optimizer = optimizer.value_or(asked(c));
  doc.devices = c.devices();
  doc.global_batch_size = c.global_batch_size();
  doc.methodology.repeats = 3;
  doc.environment.backend = "cpu";
  if (reason.empty()) {
    const std::vector<double> repeats{throughput, throughput * 1.01, throughput * 0.99};
    doc.throughput = Throughput{"samples/s", summarize(repeats), repeats};
    doc.loss_after_repeats = {6.5, 6.25, 6};
    doc.loss_scaling = LossScalingReport{32768.0, 1, 9, {}};
  } else {
    doc.state = CaseState::Failed;
    doc.reason = reason;
    doc.message = "the worker says: " + reason;
  }
  return to_json(doc).dump();
}

// What each worker invocation reports, in order: bs4 fails once (retried) then succeeds; bs8
// reports another case, then says it trained at another learning rate (CaseMismatch twice:
// retried, then recorded); bs16 is Unsupported (recorded at once, no retry).
std::vector<std::string> invocations() {
  OptimizerSpec other = asked(case_with_batch(8));
  other.learning_rate = 0.01;
  return {document(case_with_batch(4), 0, "OutOfMemory"), document(case_with_batch(4), 40.0),
          document(case_with_batch(4), 41.0), document(case_with_batch(8), 42.0, "", other),
          document(case_with_batch(16), 0, "Unsupported")};
}

// Times differ between executors (and runs); everything else must not.
json comparable(json status) {
  // The run's own times too: the two executors run one after the other, so across a second's
  // turn they differ (seen under AddressSanitizer, where each takes half a second).
  EXPECT_TRUE(status.contains("startTime") && status.contains("completionTime")) << status.dump();
  status.erase("startTime");
  status.erase("completionTime");
  for (auto& c : status["conditions"]) c.erase("lastTransitionTime");
  for (auto& r : status["results"]) {
    r.erase("startTime");
    r.erase("completionTime");
    r.erase("ranAlone");  // the operator sees nodes; dlbench run cannot, and leaves it out
  }
  return status;
}

json through_the_cli() {
  const auto dir = std::filesystem::temp_directory_path() / ("dlbench-agree-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto docs = invocations();
  for (std::size_t i = 0; i < docs.size(); ++i) std::ofstream(dir / ("doc" + std::to_string(i) + ".json")) << docs[i];
  // The scripted worker: the next document to --output, in invocation order.
  std::ofstream(dir / "worker.sh") << "#!/bin/sh\n"
                                      "[ \"$1\" = --list-devices ] && { echo 'cpu 1'; exit 0; }\n"
                                      "n=$(cat count 2>/dev/null || echo 0); echo $((n + 1)) > count\n"
                                      "while [ $# -gt 0 ]; do [ \"$1\" = --output ] && out=$2; shift; done\n"
                                      "cp doc$n.json \"$out\"\n";
  std::filesystem::permissions(dir / "worker.sh", std::filesystem::perms::owner_all);
  std::ofstream(dir / "run.yaml") << kRun;
  const auto outcome = testing::run_shell(std::string(DLBENCH_CLI_BINARY) + " run -f run.yaml --worker " +
                                              (dir / "worker.sh").string() + " --output status.json",
                                          dir.string());
  EXPECT_EQ(outcome.exit_code, 0) << outcome.out << outcome.err;
  json status = json::parse(testing::slurp(dir / "status.json"))["status"];
  std::filesystem::remove_all(dir);
  return status;
}

json through_the_reconciler() {
  json run = parse_yaml_documents(kRun).at(0);
  const auto docs = invocations();
  std::size_t next = 0;
  const auto keys = [] { return operator_::SshKeyPair{"private", "public"}; };
  for (int pass = 0; pass < 40; ++pass) {
    operator_::World world;
    world.now = std::chrono::system_clock::now();
    const json progress = run.value("status", json::object()).value("progress", json::object());
    if (progress.contains("currentCase") && next < docs.size()) {
      // The current attempt's launcher ended with the next document as its termination message.
      operator_::ObservedPod launcher;
      launcher.kind = "Pod";
      launcher.name = "launcher-" + std::to_string(next);
      launcher.role = "launcher";
      launcher.case_id = progress["currentCase"];
      launcher.attempt = progress.value("currentAttempt", 1);
      launcher.phase = "Succeeded";
      launcher.termination_message = docs[next++];
      world.pods.push_back(launcher);
    }
    const auto actions = operator_::reconcile(run, world, {}, keys);
    if (actions.status) run["status"] = to_json(*actions.status);
    const std::string phase = run["status"].value("phase", "");
    if (phase == "Succeeded" || phase == "Failed") break;
  }
  EXPECT_EQ(next, docs.size()) << "the reconciler consumed every invocation";
  return run["status"];
}

TEST(StatusAgreement, SameOutcomesGiveTheSameStatusThroughBothExecutors) {
  const json cli = comparable(through_the_cli());
  const json op = comparable(through_the_reconciler());
  EXPECT_EQ(cli, op) << "dlbench run:\n" << cli.dump(1) << "\noperator:\n" << op.dump(1);
  // And the status is the one the methodology wants, not merely the same twice.
  ASSERT_EQ(op["results"].size(), 3u);
  EXPECT_EQ(op["phase"], "Succeeded");
  EXPECT_EQ(op["results"][0]["state"], "Succeeded");
  EXPECT_EQ(op["results"][0]["attempts"], 2);
  EXPECT_EQ(op["results"][0]["optimizer"], json::parse(kAskedJson)) << "the rate that ran, resolved, in the status";
  EXPECT_EQ(op["results"][0]["lossAfterRepeats"], json::parse("[6.5, 6.25, 6]"));
  EXPECT_EQ(op["results"][0]["lossScaling"], json::parse(R"({"finalScale": 32768.0, "skippedSteps": 1, "steps": 9})"));
  EXPECT_EQ(op["results"][1]["reason"], "CaseMismatch");
  EXPECT_EQ(op["results"][1]["message"],
            "the worker trained 1x1-bs8-fp32 with another optimizer than the spec's: learningRate 0.01 instead of 0.003125");
  EXPECT_EQ(op["results"][1]["attempts"], 2);
  EXPECT_EQ(op["results"][2]["reason"], "Unsupported");
  EXPECT_EQ(op["results"][2]["attempts"], 1);
  const auto ready = std::find_if(op["conditions"].begin(), op["conditions"].end(),
                                  [](const json& c) { return c["type"] == "Ready"; });
  ASSERT_NE(ready, op["conditions"].end());
  EXPECT_EQ((*ready)["reason"], "SucceededWithFailures");
  EXPECT_EQ((*ready)["message"], "1 succeeded, 2 failed, 0 skipped");
}

}  // namespace
}  // namespace dlbench
