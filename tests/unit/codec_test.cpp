// JSON round trips and defaults.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "../support/test_support.hpp"
#include "dlbench/core/api_rules.hpp"
#include "dlbench/core/codec.hpp"
#include "dlbench/core/yaml.hpp"

namespace dlbench {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using nlohmann::json;
using testing::minimal_run;

BenchmarkRun decode_ok(const json& doc) {
  auto decoded = decode_benchmark_run(doc);
  EXPECT_TRUE(decoded.ok()) << (decoded.errors.empty() ? "" : decoded.errors.front().to_string());
  return decoded.value.value_or(BenchmarkRun{});
}

json full_run_json() {
  return json::parse(R"({
    "apiVersion": "dlbench.io/v1alpha1", "kind": "BenchmarkRun",
    "metadata": {"name": "full", "namespace": "bench", "uid": "u-1", "resourceVersion": "42", "generation": 3,
                 "labels": {"team": "perf"}, "annotations": {"note": "x"},
                 "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "o-1"}]},
    "spec": {
      "model": "vgg16", "engine": "native",
      "data": {"source": "synthetic", "imageSize": 112, "decodeThreads": 4, "prefetchBatches": 2},
      "matrix": {"nodes": [1, 2], "gpusPerNode": [8], "batchSizePerDevice": [64, 128], "precision": ["amp", "bf16"]},
      "methodology": {"warmupSteps": 5, "measureSteps": 50, "repeats": 3, "statistic": "mean",
                      "stability": {"maxCv": 0.03, "extraRepeats": 2, "includeUnstable": true}},
      "optimizer": {"name": "sgd", "learningRate": 0.05, "momentum": 0.8, "weightDecay": 0.0005},
      "worker": {"image": "registry.local/dlbench-worker:1", "gpuResource": "nvidia.com/gpu",
                 "rdma": {"resource": "rdma/hca_shared_devices_a", "perNode": 2, "required": false}, "qosClass": "Guaranteed",
                 "nodeSelector": {"nvidia.com/gpu.product": "H100"},
                 "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
                                 {"key": "spot", "operator": "Equal", "value": "yes", "effect": "NoExecute", "tolerationSeconds": 60}],
                 "env": [{"name": "NCCL_DEBUG", "value": "INFO"},
                         {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}],
                 "schedulerName": "volcano", "priorityClassName": "bench"},
      "limits": {"caseTimeoutSeconds": 600, "backoffLimit": 2},
      "podTemplateOverrides": [
        {"targetJobs": [{"name": "worker"}, {"name": "launcher"}],
         "metadata": {"labels": {"team": "perf"}, "annotations": {"k8s.v1.cni.cncf.io/networks": "ib"}},
         "spec": {"serviceAccountName": "bench", "nodeSelector": {"net": "ib"},
                  "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}},
                  "tolerations": [{"key": "rdma", "operator": "Exists"}],
                  "volumes": [{"name": "scratch", "emptyDir": {"medium": "Memory"}}],
                  "imagePullSecrets": [{"name": "registry"}], "schedulingGates": [{"name": "example.com/quota"}],
                  "hostNetwork": true, "securityContext": {"fsGroup": 1000},
                  "containers": [{"name": "worker", "env": [{"name": "NCCL_IB_HCA", "value": "mlx5"}],
                                  "volumeMounts": [{"name": "scratch", "mountPath": "/scratch", "readOnly": true, "subPath": "a"}],
                                  "resources": {"requests": {"cpu": "64", "memory": "256Gi"}}}]}}]
    },
    "status": {
      "observedGeneration": 3, "phase": "Running",
      "conditions": [{"type": "Progressing", "status": "True", "reason": "CaseRunning", "message": "running 1x8-bs64-amp",
                      "lastTransitionTime": "2026-11-21T05:00:00Z", "observedGeneration": 3}],
      "progress": {"completedCases": 2, "totalCases": 12, "currentCase": "1x8-bs64-amp", "summary": "2/12"},
      "results": [
        {"case": {"id": "1x1-bs64-amp", "nodes": 1, "gpusPerNode": 1, "batchSizePerDevice": 64, "precision": "amp"},
         "state": "Succeeded", "attempts": 1,
         "throughput": {"unit": "samples/s", "median": 100.0, "mean": 100.0, "min": 99.0, "max": 101.0, "stddev": 1.0, "cv": 0.01,
                        "repeats": [99.0, 100.0, 101.0]},
         "stepTimeSeconds": {"median": 0.64, "mean": 0.64, "min": 0.63, "max": 0.65, "stddev": 0.01, "cv": 0.015},
         "stability": {"verdict": "stable", "maxCv": 0.03, "cv": 0.01, "extraRepeats": 1, "discarded": [80.0]},
         "ncclTransport": {"network": "RoCE", "links": ["NET/IB", "P2P"], "gpuDirectRdma": true},
         "speedup": 1.0, "scalingEfficiency": 1.0, "startTime": "2026-11-21T05:00:00Z", "completionTime": "2026-11-21T05:01:00Z"},
        {"case": {"id": "1x1-bs64-bf16", "nodes": 1, "gpusPerNode": 1, "batchSizePerDevice": 64, "precision": "bf16"},
         "state": "Failed", "attempts": 2, "reason": "OutOfMemory", "message": "asked 80 GiB, 10 GiB free"}
      ],
      "best": {"case": "1x1-bs64-amp", "throughput": 100.0}
    }
  })");
}

TEST(Codec, FullDocumentRoundTripsExactly) {
  const json original = full_run_json();
  const BenchmarkRun run = decode_ok(original);
  EXPECT_EQ(to_json(run), original);
  EXPECT_EQ(decode_ok(to_json(run)), run);
}

TEST(Codec, DecodesEveryField) {
  const BenchmarkRun run = decode_ok(full_run_json());
  EXPECT_EQ(run.metadata.namespace_, "bench");
  EXPECT_EQ(run.metadata.generation, 3);
  EXPECT_EQ(run.metadata.labels.at("team"), "perf");
  EXPECT_TRUE(run.metadata.extra.contains("ownerReferences"));
  EXPECT_EQ(run.spec.model, Model::vgg16);
  EXPECT_EQ(run.spec.data.image_size, 112);
  ASSERT_TRUE(run.spec.matrix.has_value());
  EXPECT_EQ(run.spec.matrix->precision, (std::vector<Precision>{Precision::amp, Precision::bf16}));
  EXPECT_EQ(run.spec.methodology.statistic, Statistic::mean);
  EXPECT_DOUBLE_EQ(run.spec.optimizer.weight_decay, 0.0005);
  ASSERT_TRUE(run.spec.worker.rdma.has_value());
  EXPECT_EQ(run.spec.worker.rdma->per_node, 2);
  ASSERT_EQ(run.spec.worker.tolerations.size(), 2u);
  EXPECT_EQ(run.spec.worker.tolerations[1].toleration_seconds, 60);
  EXPECT_EQ(run.spec.worker.env[1].value_from->at("fieldRef").at("fieldPath"), "metadata.name");
  EXPECT_EQ(run.spec.worker.scheduler_name, "volcano");
  EXPECT_EQ(run.spec.limits.backoff_limit, 2);
  ASSERT_TRUE(run.status.has_value());
  EXPECT_EQ(run.status->phase, Phase::Running);
  ASSERT_EQ(run.status->results.size(), 2u);
  EXPECT_EQ(run.status->results[1].state, CaseState::Failed);
  EXPECT_EQ(run.status->results[1].reason, "OutOfMemory");
  EXPECT_EQ(run.status->results[0].throughput->repeats, (std::vector<double>{99.0, 100.0, 101.0}));
}

TEST(Codec, ExamplesRoundTripThroughYamlAndJson) {
  for (const char* name : {"quickstart", "dlperf-resnet50-scaling", "vgg16-paddle-baseline", "resnet50-cuda-graph"}) {
    const auto docs = load_yaml_file(testing::source_path(std::string("crds/examples/") + name + ".yaml"));
    ASSERT_EQ(docs.size(), 1u) << name;
    const BenchmarkRun run = decode_ok(docs[0]);
    const json canonical = to_json(run);
    EXPECT_EQ(decode_ok(canonical), run) << name;
    EXPECT_EQ(to_json(decode_ok(canonical)), canonical) << name;
    // YAML written by us reads back to the same document.
    EXPECT_EQ(parse_yaml_documents(to_yaml(canonical)).at(0), canonical) << name;
  }
}

TEST(Codec, StatusDecodeReportsPaths) {
  const auto decoded = decode_status(json{{"phase", "Done"}, {"results", {{{"state", "Succeeded"}}}}});
  std::vector<std::string> errors;
  for (const auto& e : decoded.errors) errors.push_back(e.to_string());
  EXPECT_THAT(errors, ElementsAre(R"(status.phase: "Done" is not one of Pending, Running, Succeeded, Failed)",
                                  ::testing::HasSubstr("status.results[0].case: required"),
                                  "status.results[0].throughput: required when state is Succeeded"));
}

TEST(Codec, CaseResultRules) {
  const json failed_without_reason = {
      {"case", {{"nodes", 1}, {"gpusPerNode", 1}, {"batchSizePerDevice", 8}, {"precision", "fp32"}}},
      {"state", "Failed"}};
  EXPECT_THAT(decode_case_result(failed_without_reason).errors,
              ElementsAre(FieldError{"reason", "required when state is Failed"}));
  json wrong_id = failed_without_reason;
  wrong_id["reason"] = "Timeout";
  wrong_id["case"]["id"] = "2x1-bs8-fp32";
  EXPECT_THAT(decode_case_result(wrong_id).errors,
              ElementsAre(FieldError{"case.id", R"("2x1-bs8-fp32" does not match the case fields (expected "1x1-bs8-fp32"))"}));
  json negative = full_run_json()["status"]["results"][0];
  negative["throughput"]["repeats"][1] = -5.0;
  EXPECT_THAT(decode_case_result(negative).errors,
              ElementsAre(FieldError{"throughput.repeats[1]", "-5.0 is not a finite, non-negative number"}));
}

// methodology.stability: the bound, the extra repeats and the opt-in are checked where they are
// read, and a result's stability report must hold together.
TEST(Codec, StabilitySettingsAndReportsAreChecked) {
  const auto errors_with = [](const json& stability) {
    json doc = minimal_run();
    doc["spec"]["methodology"] = {{"stability", stability}};
    return decode_benchmark_run(doc).errors;
  };
  EXPECT_THAT(errors_with({{"maxCv", 0}}),
              ElementsAre(FieldError{"spec.methodology.stability.maxCv",
                                     "0 is out of range; allowed: greater than 0 and at most 1"}));
  EXPECT_THAT(errors_with({{"maxCv", "2%"}}),
              ElementsAre(FieldError{"spec.methodology.stability.maxCv",
                                     R"(expected a number greater than 0 and at most 1, got a string ("2%"))"}));
  EXPECT_THAT(errors_with({{"extraRepeats", -1}}), ::testing::SizeIs(1));
  EXPECT_THAT(errors_with({{"includeUnstable", "yes"}}), ::testing::SizeIs(1));
  EXPECT_THAT(errors_with({{"maxCV", 0.02}}), ::testing::SizeIs(1));  // a misspelt key is refused, not ignored
  json doc = minimal_run();
  doc["spec"]["methodology"] = {{"stability", {{"maxCv", 0.1}, {"extraRepeats", 0}}}};
  const BenchmarkRun run = decode_ok(doc);
  EXPECT_EQ(run.spec.methodology.stability, (StabilitySpec{0.1, 0, false}));

  json result = full_run_json()["status"]["results"][0];
  ASSERT_TRUE(decode_case_result(result).ok());
  result["stability"]["discarded"] = {80.0, 90.0};  // two values for one extra repeat
  EXPECT_THAT(decode_case_result(result).errors,
              ElementsAre(FieldError{"stability.discarded",
                                     "2 throughputs for extraRepeats 1; they must be as many, or none"}));
  result["stability"]["discarded"] = json::array();  // dropped to fit a termination message
  EXPECT_TRUE(decode_case_result(result).ok());
  result["stability"]["verdict"] = "shaky";
  EXPECT_THAT(decode_case_result(result).errors, ::testing::SizeIs(1));
}

TEST(Defaults, AppliedAndReportedInOrder) {
  json doc = minimal_run();
  const auto applied = apply_defaults(doc);
  std::vector<std::string> paths;
  for (const auto& a : applied) paths.push_back(a.path);
  EXPECT_THAT(paths, ElementsAre("spec.engine", "spec.data", "spec.data.source", "spec.data.imageSize",
                                 "spec.data.decodeThreads", "spec.data.prefetchBatches", "spec.matrix.nodes", "spec.matrix.gpusPerNode", "spec.methodology",
                                 "spec.methodology.warmupSteps", "spec.methodology.measureSteps",
                                 "spec.methodology.repeats", "spec.methodology.statistic", "spec.methodology.stability",
                                 "spec.methodology.stability.extraRepeats", "spec.methodology.stability.includeUnstable",
                                 "spec.optimizer",
                                 "spec.optimizer.name", "spec.optimizer.momentum",
                                 "spec.optimizer.weightDecay", "spec.optimizer.learningRateWarmupSteps", "spec.worker", "spec.worker.gpuResource", "spec.worker.qosClass", "spec.limits",
                                 "spec.limits.caseTimeoutSeconds", "spec.limits.backoffLimit"));
  EXPECT_EQ(doc["spec"]["methodology"], (json{{"warmupSteps", 20}, {"measureSteps", 100}, {"repeats", 7}, {"statistic", "median"},
                                              {"stability", {{"extraRepeats", 7}, {"includeUnstable", false}}}}));
  EXPECT_EQ(doc["spec"]["matrix"]["nodes"], json::array({1}));
  EXPECT_EQ(doc["spec"]["worker"]["gpuResource"], "nvidia.com/gpu");
}

TEST(Defaults, ExplicitValuesWinAndNullCountsAsAbsent) {
  json doc = minimal_run();
  doc["spec"]["methodology"] = {{"repeats", 3}, {"warmupSteps", nullptr}};
  doc["spec"]["limits"] = nullptr;
  apply_defaults(doc);
  EXPECT_EQ(doc["spec"]["methodology"]["repeats"], 3);
  EXPECT_EQ(doc["spec"]["methodology"]["warmupSteps"], 20);
  EXPECT_EQ(doc["spec"]["limits"]["backoffLimit"], 1);
}

TEST(Defaults, NestedOptionalObjectsAndListItems) {
  json doc = minimal_run();
  doc["spec"].erase("matrix");
  doc["spec"]["cases"] = {{{"batchSizePerDevice", 64}, {"precision", "amp"}},
                          {{"nodes", 2}, {"gpusPerNode", 8}, {"batchSizePerDevice", 64}, {"precision", "amp"}}};
  doc["spec"]["worker"] = {{"rdma", {{"resource", "rdma/hca"}}}, {"tolerations", {{{"key", "k"}}}}};
  const auto applied = apply_defaults(doc);
  std::vector<std::string> paths;
  for (const auto& a : applied) paths.push_back(a.path);
  EXPECT_THAT(paths, ::testing::IsSupersetOf({"spec.cases[0].nodes", "spec.cases[0].gpusPerNode",
                                              "spec.worker.rdma.perNode", "spec.worker.tolerations[0].operator"}));
  EXPECT_THAT(paths, ::testing::Not(::testing::Contains("spec.cases[1].nodes")));
  EXPECT_EQ(doc["spec"]["cases"][1]["nodes"], 2);
  EXPECT_EQ(doc["spec"]["worker"]["rdma"]["perNode"], 1);
  // No rdma given: no rdma invented.
  json plain = minimal_run();
  apply_defaults(plain);
  EXPECT_FALSE(plain["spec"]["worker"].contains("rdma"));
}

// An unset learning rate is the model's recipe for its optimizer at each case's global batch,
// never one rate for all: SGD's linearly less below the recipe's batch and the recipe's at or
// above it, AdamW's and LAMB's the same at every batch. A set one is kept for every case, and
// the spec written back leaves an unset rate unset.
TEST(Defaults, TheLearningRateFollowsTheModelOptimizerAndGlobalBatch) {
  const auto rate = [](const std::string& model, const json& optimizer, int batch, int gpus = 1) {
    json doc = minimal_run();
    doc["spec"]["model"] = model;
    if (model == "inception_v3") doc["spec"]["data"] = {{"imageSize", 299}};
    if (!optimizer.is_null()) doc["spec"]["optimizer"] = optimizer;
    const BenchmarkRun run = decode_ok(doc);
    return optimizer_for_case(run.spec, CaseSpec{1, gpus, batch, Precision::fp32}).learning_rate;
  };
  EXPECT_DOUBLE_EQ(rate("resnet50", nullptr, 256), 0.1);
  EXPECT_DOUBLE_EQ(rate("resnet50", nullptr, 64), 0.025);
  EXPECT_DOUBLE_EQ(rate("resnet50", nullptr, 64, 4), 0.1);   // the global batch, not the device's
  EXPECT_DOUBLE_EQ(rate("resnet50", nullptr, 256, 8), 0.1);  // never above the recipe's rate
  EXPECT_DOUBLE_EQ(rate("resnet152", nullptr, 32), 0.0125);
  EXPECT_DOUBLE_EQ(rate("inception_v3", nullptr, 128), 0.05);
  EXPECT_DOUBLE_EQ(rate("alexnet", nullptr, 512), 0.01);
  EXPECT_DOUBLE_EQ(rate("vgg16", {{"momentum", 0.8}}, 128), 0.005);
  EXPECT_DOUBLE_EQ(rate("deeplabv3plus", nullptr, 16), 0.007);
  EXPECT_DOUBLE_EQ(rate("deeplabv3plus", nullptr, 8), 0.0035);
  EXPECT_DOUBLE_EQ(rate("bert-base", nullptr, 64), 0.0025);
  EXPECT_DOUBLE_EQ(rate("bert-base", {{"name", "adamw"}}, 8), 1e-4);
  EXPECT_DOUBLE_EQ(rate("resnet50", {{"name", "adamw"}}, 8), 1e-3);
  EXPECT_DOUBLE_EQ(rate("bert-base", {{"name", "lamb"}}, 8), 1e-3);
  EXPECT_DOUBLE_EQ(rate("alexnet", {{"learningRate", 0.1}}, 8), 0.1);
  EXPECT_DOUBLE_EQ(rate("alexnet", {{"learningRate", 0.1}}, 1024), 0.1);
  json doc = minimal_run();
  doc["spec"]["model"] = "vgg16";
  const BenchmarkRun run = decode_ok(doc);
  EXPECT_FALSE(run.spec.optimizer.learning_rate.has_value());
  const json written = to_json(run);
  EXPECT_FALSE(written["spec"]["optimizer"].contains("learningRate"));
  EXPECT_EQ(decode_ok(written).spec.optimizer, run.spec.optimizer);
  doc["spec"]["optimizer"] = {{"learningRate", 0.02}};
  EXPECT_EQ(to_json(decode_ok(doc))["spec"]["optimizer"]["learningRate"], 0.02);
  EXPECT_EQ(describe_optimizer(run.spec), "sgd at the model's learning rate, 0.01 at a global batch of 256 and linearly less below it");
  EXPECT_EQ(describe_optimizer(decode_ok(doc).spec), "sgd at learning rate 0.02");
}

TEST(Defaults, DecodedDefaultsMatchTheDocumentedValues) {
  const BenchmarkRun run = decode_ok(minimal_run());
  EXPECT_EQ(run.spec.engine, Engine::native);
  EXPECT_EQ(run.spec.data.image_size, 224);
  EXPECT_EQ(run.spec.methodology.warmup_steps, 20);
  EXPECT_EQ(run.spec.methodology.measure_steps, 100);
  EXPECT_EQ(run.spec.methodology.repeats, 7);
  EXPECT_EQ(run.spec.methodology.statistic, Statistic::median);
  EXPECT_FALSE(run.spec.optimizer.learning_rate.has_value());  // the model's, resolved per case
  EXPECT_DOUBLE_EQ(run.spec.optimizer.momentum, 0.9);
  EXPECT_DOUBLE_EQ(run.spec.optimizer.weight_decay, 0.0001);
  EXPECT_EQ(run.spec.worker.gpu_resource, "nvidia.com/gpu");
  EXPECT_EQ(run.spec.limits.case_timeout_seconds, 3600);
  EXPECT_EQ(run.spec.limits.backoff_limit, 1);
  EXPECT_EQ(run.spec.matrix->nodes, std::vector<int>{1});
  EXPECT_EQ(run.spec.data.decode_threads, 4);
  EXPECT_EQ(run.spec.data.prefetch_batches, 2);
  EXPECT_EQ(run.spec.methodology.stability, (StabilitySpec{std::nullopt, 7, false}));  // maxCv: the device's
  EXPECT_EQ(run.spec.worker.qos_class, QosClass::Burstable);
  EXPECT_EQ(run.spec.optimizer.learning_rate_warmup_steps, 0);
  EXPECT_EQ(decode_benchmark_run(minimal_run()).defaults.size(), 27u);
}

}  // namespace
}  // namespace dlbench
