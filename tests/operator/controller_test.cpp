// The controller end to end against the test API server, the test playing kubelet.
#include <signal.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <sys/wait.h>
#include <unistd.h>

#include <set>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "../support/process.hpp"
#include "../support/test_support.hpp"
#include "controller.hpp"
#include "dlbench/core/codec.hpp"
#include "dlbench/core/planner.hpp"
#include "dlbench/core/result_document.hpp"
#include "dlbench/core/statistics.hpp"
#include "dlbench/core/yaml.hpp"

namespace dlbench::operator_ {
namespace {

using nlohmann::json;
using namespace std::chrono_literals;


std::string result_for(const CaseSpec& c, double throughput) {
  ResultDocument doc;
  doc.case_ = c;
  doc.devices = c.devices();
  doc.global_batch_size = c.global_batch_size();
  doc.methodology.repeats = 3;
  const std::vector<double> repeats{throughput, throughput, throughput};
  doc.throughput = Throughput{"samples/s", summarize(repeats), repeats};
  doc.environment.backend = "cpu";
  return to_json(doc).dump();
}

TEST(Controller, RunsABenchmarkRunToSucceededAgainstAnApiServer) {
  const int port = testing::free_port();
  const testing::ChildProcess server({"python3", DLBENCH_TEST_APISERVER, "--port", std::to_string(port)});
  KubeConfig config;
  config.server = "http://127.0.0.1:" + std::to_string(port);
  KubeClient client(make_http_transport(config, 10s));
  const Resource crds{"apiextensions.k8s.io", "v1", "customresourcedefinitions", false};
  for (int i = 0; i < 100; ++i) {
    try {
      client.create(crds, "", load_yaml_file(testing::source_path("crds/benchmarkrun.yaml")).at(0));
      break;
    } catch (const std::exception&) {
      std::this_thread::sleep_for(50ms);
    }
  }
  json run = testing::minimal_run();
  run["metadata"] = {{"name", "scale"}, {"namespace", "default"}};
  run["spec"]["matrix"] = {{"nodes", {1, 2}}, {"gpusPerNode", {1}}, {"batchSizePerDevice", {4}}, {"precision", {"fp32"}}};
  client.create(resources::kBenchmarkRuns, "default", run);

  ControllerOptions options;
  options.watch_timeout = 2s;
  options.config.worker_backend = "cpu";
  options.config.communicator = "mpi";
  Controller controller(client, options);
  controller.start();

  // The kubelet: workers become Ready; a launcher Job gets a pod that finishes with a result.
  const std::map<std::string, double> throughput{{"1x1-bs4-fp32", 10.0}, {"2x1-bs4-fp32", 19.0}};
  std::set<std::string> launched;
  json status;
  const auto deadline = std::chrono::steady_clock::now() + 20s;
  while (std::chrono::steady_clock::now() < deadline) {
    const json workers = client.list(resources::kPods, "default", "app.kubernetes.io/component=worker");
    for (const auto& pod : workers["items"]) {
      if (!pod.contains("status") || pod["status"].value("phase", "") != "Running") {
        client.merge_patch(resources::kPods, "default", pod["metadata"]["name"],
                           {{"status", {{"phase", "Running"}, {"conditions", {{{"type", "Ready"}, {"status", "True"}}}}}}},
                           "status");
      }
    }
    const json jobs = client.list(resources::kJobs, "default");
    for (const auto& job : jobs["items"]) {
      const std::string name = job["metadata"]["name"];
      if (launched.contains(name)) continue;
      launched.insert(name);
      const auto labels = job["spec"]["template"]["metadata"]["labels"];
      const std::string id = labels["dlbench.io/case"];
      const CaseSpec c = [&] {
        for (const auto& p : plan_cases(decode_benchmark_run(run).value->spec)) {
          if (p.id == id) return p.spec;
        }
        throw std::runtime_error(id);
      }();
      json pod = {{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", {{"name", name + "-pod"}, {"labels", labels}}}};
      client.create(resources::kPods, "default", pod);
      json terminated;
      terminated["exitCode"] = 0;
      terminated["message"] = result_for(c, throughput.at(id));
      json container;
      container["name"] = "launcher";
      container["state"]["terminated"] = terminated;
      json patch;
      patch["status"]["phase"] = "Succeeded";
      patch["status"]["containerStatuses"] = json::array({container});
      client.merge_patch(resources::kPods, "default", name + "-pod", patch, "status");
    }
    status = client.get(resources::kBenchmarkRuns, "default", "scale").value("status", json::object());
    if (status.value("phase", "") == "Succeeded") break;
    std::this_thread::sleep_for(100ms);
  }
  controller.stop();

  ASSERT_EQ(status.value("phase", ""), "Succeeded")
      << "pods: " << client.list(resources::kPods, "default")["items"].dump() << "\njobs: "
      << client.list(resources::kJobs, "default")["items"].size() << " launched: " << launched.size();
  const auto decoded = decode_status(status);
  ASSERT_TRUE(decoded.ok()) << decoded.errors.front().to_string();
  ASSERT_EQ(decoded.value->results.size(), 2u);
  EXPECT_NEAR(*decoded.value->results[1].speedup, 1.9, 1e-9);
  EXPECT_EQ(launched.size(), 2u);  // one launcher per case, never more
  std::set<std::string> reasons;
  const json events = client.list(resources::kEvents, "default");
  for (const auto& e : events["items"]) reasons.insert(e["reason"]);
  EXPECT_TRUE(reasons.contains("LauncherCreated"));
  EXPECT_TRUE(reasons.contains("CaseSucceeded"));
  EXPECT_TRUE(reasons.contains("Succeeded"));
  EXPECT_TRUE(client.list(resources::kPods, "default", "app.kubernetes.io/component=worker")["items"].empty());
  const std::string exposition = controller.registry().serialize();
  EXPECT_THAT(exposition, ::testing::HasSubstr("dlbench_operator_reconciles_total{result=\"changed\"}"));
  EXPECT_THAT(exposition, ::testing::HasSubstr("dlbench_case_speedup{case=\"2x1-bs4-fp32\",namespace=\"default\",run=\"scale\"} 1.9"));
}

}  // namespace
}  // namespace dlbench::operator_
