// crds/benchmarkrun.yaml and core/ describe the same API: same enums, bounds and defaults,
// and every field the C++ encoder writes exists in the schema (the API server would prune it
// otherwise and the status would silently lose data).
#include <filesystem>
#include <set>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "../support/test_support.hpp"
#include "dlbench/core/api_rules.hpp"
#include "dlbench/core/codec.hpp"
#include "dlbench/core/statistics.hpp"
#include "dlbench/core/yaml.hpp"

namespace dlbench {
namespace {

using nlohmann::json;

class CrdAgreement : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    const auto docs = load_yaml_file(testing::source_path("crds/benchmarkrun.yaml"));
    ASSERT_EQ(docs.size(), 1u);
    crd_ = new json(docs[0]);
  }
  static void TearDownTestSuite() { delete crd_; }

  static const json& version() { return (*crd_)["spec"]["versions"][0]; }
  static const json& schema() { return version()["schema"]["openAPIV3Schema"]; }

  // "spec.matrix.precision[]" → properties.spec.properties.matrix.properties.precision.items
  static const json* schema_at(const std::string& path) {
    const json* node = &schema();
    std::size_t start = 0;
    while (start <= path.size()) {
      const std::size_t dot = path.find('.', start);
      std::string segment = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
      const bool items = segment.ends_with("[]");
      if (items) segment.resize(segment.size() - 2);
      if (!node->contains("properties") || !(*node)["properties"].contains(segment)) return nullptr;
      node = &(*node)["properties"][segment];
      if (items) {
        if (!node->contains("items")) return nullptr;
        node = &(*node)["items"];
      }
      if (dot == std::string::npos) break;
      start = dot + 1;
    }
    return node;
  }

  // Every schema node with a constraint that core/ must know about, by rule path.
  static void collect_constraints(const json& node, const std::string& path, std::set<std::string>& out) {
    for (const char* key : {"enum", "minimum", "maximum", "default"}) {
      if (node.contains(key)) out.insert(path);
    }
    if (node.contains("properties")) {
      for (const auto& [name, child] : node["properties"].items()) {
        collect_constraints(child, path.empty() ? name : path + "." + name, out);
      }
    }
    if (node.contains("items")) collect_constraints(node["items"], path + "[]", out);
  }

  // Every key of an encoded document must be declared by the schema at that place.
  static void expect_declared(const json& value, const json& node, const std::string& path) {
    if (node.value("x-kubernetes-preserve-unknown-fields", false)) return;
    if (value.is_object()) {
      for (const auto& [key, child] : value.items()) {
        const std::string child_path = path.empty() ? key : path + "." + key;
        if (node.contains("properties") && node["properties"].contains(key)) {
          expect_declared(child, node["properties"][key], child_path);
        } else if (node.contains("additionalProperties")) {
          expect_declared(child, node["additionalProperties"], child_path);
        } else {
          ADD_FAILURE() << child_path << " is written by core/ but not declared in the CRD (it would be pruned)";
        }
      }
    } else if (value.is_array()) {
      ASSERT_TRUE(node.contains("items")) << path;
      for (const auto& item : value) expect_declared(item, node["items"], path + "[]");
    }
  }

  static json* crd_;
};

json* CrdAgreement::crd_ = nullptr;

TEST_F(CrdAgreement, NamesScopeAndSubresources) {
  EXPECT_EQ((*crd_)["metadata"]["name"], "benchmarkruns.dlbench.io");
  EXPECT_EQ((*crd_)["spec"]["group"], kApiGroup);
  EXPECT_EQ((*crd_)["spec"]["names"]["kind"], kKind);
  EXPECT_EQ((*crd_)["spec"]["scope"], "Namespaced");
  EXPECT_THAT((*crd_)["spec"]["names"]["shortNames"].get<std::vector<std::string>>(), ::testing::Contains("br"));
  EXPECT_FALSE((*crd_)["spec"]["names"]["categories"].empty());
  EXPECT_EQ(std::string("dlbench.io/") + version()["name"].get<std::string>(), kApiVersion);
  EXPECT_TRUE(version()["served"].get<bool>());
  EXPECT_TRUE(version()["storage"].get<bool>());
  EXPECT_TRUE(version()["subresources"].contains("status"));
}

TEST_F(CrdAgreement, EveryCoreRuleIsInTheSchema) {
  for (const FieldRule& rule : api_field_rules()) {
    SCOPED_TRACE(rule.path);
    const json* node = schema_at(rule.path);
    ASSERT_NE(node, nullptr) << "missing in the CRD";
    if (rule.allowed.empty()) {
      EXPECT_FALSE(node->contains("enum"));
    } else {
      ASSERT_TRUE(node->contains("enum"));
      EXPECT_EQ((*node)["enum"].get<std::vector<std::string>>(), rule.allowed);
    }
    EXPECT_EQ(node->contains("minimum"), rule.minimum.has_value());
    if (rule.minimum && node->contains("minimum")) {
      EXPECT_DOUBLE_EQ((*node)["minimum"].get<double>(), *rule.minimum);
    }
    EXPECT_EQ(node->contains("maximum"), rule.maximum.has_value());
    if (rule.maximum && node->contains("maximum")) {
      EXPECT_DOUBLE_EQ((*node)["maximum"].get<double>(), *rule.maximum);
    }
    EXPECT_EQ(node->value("exclusiveMinimum", false), rule.exclusive_minimum);
    EXPECT_EQ(node->value("exclusiveMaximum", false), rule.exclusive_maximum);
    EXPECT_EQ(node->contains("default"), rule.default_value.has_value());
    if (rule.default_value && node->contains("default")) {
      EXPECT_EQ((*node)["default"], *rule.default_value);
    }
    if (rule.min_items) {
      EXPECT_EQ(node->value("minItems", -1), *rule.min_items);
    }
    if (rule.max_items) {
      EXPECT_EQ(node->value("maxItems", -1), *rule.max_items);
    }
    if (rule.max_length) {
      EXPECT_EQ(node->value("maxLength", -1), *rule.max_length);
    }
  }
}

TEST_F(CrdAgreement, EverySchemaConstraintIsKnownToCore) {
  std::set<std::string> constrained;
  collect_constraints(schema(), "", constrained);
  std::set<std::string> known;
  for (const FieldRule& rule : api_field_rules()) known.insert(rule.path);
  for (const auto& path : constrained) {
    EXPECT_TRUE(known.contains(path)) << path << " has an enum, bound or default in the CRD that core/ does not know";
  }
  EXPECT_GT(constrained.size(), 30u);
}

TEST_F(CrdAgreement, EncodedRunIsFullyDeclared) {
  BenchmarkRun run;
  run.metadata.name = "full";
  run.spec.engine = Engine::command;
  run.spec.command = {"python3", "train.py"};
  run.spec.matrix = Matrix{{1, 2}, {8}, {128}, {Precision::amp}};
  run.spec.worker.image = "img";
  run.spec.worker.rdma = RdmaSpec{"rdma/hca", 1};
  run.spec.worker.node_selector = {{"a", "b"}};
  run.spec.worker.tolerations = {{"k", TolerationOperator::Equal, "v", TaintEffect::NoExecute, 30}};
  run.spec.worker.env = {{"A", "1", std::nullopt}, {"B", std::nullopt, json{{"fieldRef", {{"fieldPath", "x"}}}}}};
  run.spec.worker.scheduler_name = "volcano";
  run.spec.worker.priority_class_name = "high";
  run.spec.worker.share_nodes = true;
  run.spec.worker.gang = GangSpec{GangScheduler::kueue, "gpu-queue"};
  run.spec.worker.qos_class = QosClass::Guaranteed;
  PodTemplateOverride pod;
  pod.target_jobs = {"worker"};
  pod.labels = {{"team", "perf"}};
  pod.annotations = {{"k8s.v1.cni.cncf.io/networks", "ib"}};
  pod.service_account_name = "bench";
  pod.node_selector = {{"net", "ib"}};
  pod.affinity = json{{"nodeAffinity", json::object()}};
  pod.tolerations = {{"k", TolerationOperator::Exists, "", TaintEffect::NoSchedule, std::nullopt}};
  pod.volumes = json::array({{{"name", "scratch"}, {"emptyDir", json::object()}}});
  pod.image_pull_secrets = {"registry"};
  pod.scheduling_gates = {"example.com/gate"};
  pod.host_network = true;
  pod.security_context = json{{"fsGroup", 1000}};
  ContainerOverride container;
  container.name = "worker";
  container.env = {{"A", "1", std::nullopt}};
  container.volume_mounts = json::array({{{"name", "scratch"}, {"mountPath", "/scratch"}, {"readOnly", true}, {"subPath", "a"}}});
  container.requests = {{"cpu", "4"}};
  container.limits = {{"memory", "8Gi"}};
  pod.containers = {container};
  run.spec.pod_template_overrides = {pod};
  BenchmarkRunStatus status;
  status.observed_generation = 1;
  status.phase = Phase::Running;
  status.conditions = {{ConditionType::Progressing, ConditionStatus::True, "CaseRunning", "m", "t", 1}};
  status.progress = {1, 2, "1x8-bs128-amp", 2, "1/2", true};
  CaseResult result;
  result.case_ = {1, 1, 128, Precision::amp};
  result.throughput = Throughput{"samples/s", summarize(std::vector<double>{1.0, 2.0}), {1.0, 2.0}};
  result.step_time_seconds = summarize(std::vector<double>{0.1});
  result.speedup = 1.0;
  result.ran_alone = true;
  result.scaling_efficiency = 1.0;
  result.reason = "r";
  result.message = "m";
  result.start_time = "t0";
  result.completion_time = "t1";
  result.stability = StabilityReport{StabilityVerdict::stable, 0.02, 0.01, 1, {0.5}};
  result.interference = InterferenceReport{0.01, 0.0, GpuReadings{1, 1400, 1500, 1980, {GpuThrottleReason::thermal}, 90, 700, 10},
                                           InterferenceVerdict::interfered};
  result.scaling_refused = "why";
  result.nccl_transport = NcclTransport{"IB", {"NET/IB", "P2P"}, true};
  result.optimizer = OptimizerSpec{OptimizerName::adamw, 1e-4, 0.9, 0.01};
  result.loss_after_repeats = {6.5, 6.25};
  result.loss_scaling = LossScalingReport{32768.0, 3, 130, "untimed step 131 skipped, loss scale now 16384"};
  result.flops = FlopsReport{24.5e9, 1.2e14, 9.894e14, 0.12};
  result.environment = CaseEnvironment{"0.1.0", "cuda", "nccl", "cpu", "NVIDIA H200", "580.159", "13.0", "9.10.2",
                                       "2.27.3", "4.1.4", "2.6.3", "pytorch", "2.11.0", {{"layout", "nhwc"}}};
  status.results = {result};
  status.best = BestResult{"1x1-bs128-amp", 2.0, "samples/s"};
  status.start_time = "2026-11-26T09:00:00Z";
  status.completion_time = "2026-11-26T09:10:00Z";
  run.spec.methodology.stability = StabilitySpec{0.03, 2, true};
  CaseResult preflight = result;
  preflight.case_ = {2, 8, 128, Precision::amp, true};
  preflight.throughput.reset();
  preflight.step_time_seconds.reset();
  preflight.speedup.reset();
  preflight.scaling_efficiency.reset();
  preflight.ran_alone.reset();
  preflight.stability.reset();  // a self-test has no repeats and no load readings
  preflight.interference.reset();
  preflight.scaling_refused.clear();
  preflight.nccl_transport.reset();
  preflight.optimizer.reset();  // nor training
  preflight.loss_after_repeats.clear();
  preflight.loss_scaling.reset();
  preflight.flops.reset();
  // preflight.environment stays: what the self-test ran on.
  status.preflight = preflight;
  run.status = status;

  json encoded = to_json(run);
  encoded.erase("metadata");  // the API server owns metadata's schema
  expect_declared(encoded, schema(), "");
  // spec.preflight (native engine only, so on a copy of the spec).
  BenchmarkRunSpec native = run.spec;
  native.engine = Engine::native;
  native.command.clear();
  native.preflight = PreflightSpec{true};
  native.cuda_graph = true;
  native.matrix = Matrix{{1}, {1}, {128}, {Precision::amp}};
  expect_declared(to_json(native), schema()["properties"]["spec"], "spec");

  // The printer columns point at fields that the encoder writes.
  const json full = to_json(run);
  for (const auto& column : version()["additionalPrinterColumns"]) {
    std::string path = column["jsonPath"].get<std::string>();
    if (path == ".metadata.creationTimestamp") continue;
    json::json_pointer pointer("/" + path.substr(1));
    std::string slash_path;
    for (char c : path.substr(1)) slash_path += c == '.' ? '/' : c;
    EXPECT_TRUE(full.contains(json::json_pointer("/" + slash_path))) << column["name"] << " → " << path;
  }
}

TEST_F(CrdAgreement, PrinterColumnsAndValidationRules) {
  std::vector<std::string> names;
  for (const auto& column : version()["additionalPrinterColumns"]) names.push_back(column["name"]);
  EXPECT_THAT(names, ::testing::IsSupersetOf({"Model", "Phase", "Progress", "Best", "Age"}));
  std::vector<std::string> spec_rules;
  for (const auto& rule : schema()["properties"]["spec"]["x-kubernetes-validations"]) spec_rules.push_back(rule["rule"]);
  EXPECT_THAT(spec_rules, ::testing::Contains("has(self.matrix) != has(self.cases)"));
  const std::string immutability = schema()["x-kubernetes-validations"][0]["rule"];
  EXPECT_NE(immutability.find("self.spec == oldSelf.spec"), std::string::npos);
}

TEST_F(CrdAgreement, ShippedExamplesAgreeWithTheirNames) {
  int valid = 0;
  int invalid = 0;
  for (const auto& entry : std::filesystem::directory_iterator(testing::source_path("crds/examples"))) {
    if (entry.path().extension() != ".yaml") continue;
    const bool expect_invalid = entry.path().filename().string().starts_with("invalid-");
    for (const auto& doc : load_yaml_file(entry.path().string())) {
      const auto decoded = decode_benchmark_run(doc);
      EXPECT_EQ(decoded.ok(), !expect_invalid) << entry.path();
      (expect_invalid ? invalid : valid)++;
    }
  }
  EXPECT_GE(valid, 3);
  EXPECT_GE(invalid, 2);
}

}  // namespace
}  // namespace dlbench
