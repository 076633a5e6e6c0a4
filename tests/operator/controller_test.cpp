// The controller end to end against the test API server, the test playing kubelet.
#include <signal.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <sstream>
#include <vector>
#include <thread>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "../support/process.hpp"
#include "../support/test_support.hpp"
#include "controller.hpp"
#include "dlbench/core/codec.hpp"
#include "dlbench/core/device_peaks.hpp"
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
  doc.loss_after_repeats = {6.5, 6.25, throughput / 4};  // a last loss to tell the cases apart
  doc.flops_per_sample = {1e12, 3e12};
  doc.peak_flops_per_device = 1e14;  // as on a GPU whose peak dlbench knows
  doc.mfu = model_flops_utilization(3e12, throughput, 1e14, c.devices());
  // Every device's energy counter, 0.5 J a sample over each repeat's measured steps.
  const double joules = 0.5 * static_cast<double>(c.global_batch_size()) * doc.methodology.measure_steps;
  doc.energy_joules = {joules, joules, joules};
  // A multi-rank case's reduction: 1 MB in 4 ms alone, a quarter of a 0.2 s step exposed.
  if (c.devices() > 1) doc.communication = communication_report(c.devices(), 1'000'000, 2, 0.004, 0.2, 0.15);
  doc.environment.backend = "cpu";
  doc.environment.communicator = c.devices() > 1 ? "mpi" : "none";
  doc.environment.cpu_model = "AMD EPYC \"Milan\"";  // a label value to escape
  doc.environment.onednn_version = "2.6.3";
  doc.environment.dlbench_version = "0.1.0";
  doc.environment.host = "node-a";
  return to_json(doc).dump();
}

// The test API server on a port of its own, with the BenchmarkRun CRD installed.
struct ApiServer {
  explicit ApiServer(std::vector<std::string> extra_args = {})
      : process([&] {
          std::vector<std::string> argv{"python3", DLBENCH_TEST_APISERVER};
          argv.insert(argv.end(), extra_args.begin(), extra_args.end());
          return argv;
        }()),
        port(process.port()) {
    KubeConfig config;
    config.server = "http://127.0.0.1:" + std::to_string(port);
    transport = make_http_transport(config, 10s);
    KubeClient client(transport);
    const Resource crds{"apiextensions.k8s.io", "v1", "customresourcedefinitions", false};
    for (int i = 0; i < 100; ++i) {
      try {
        client.create(crds, "", load_yaml_file(testing::source_path("crds/benchmarkrun.yaml")).at(0));
        return;
      } catch (const std::exception&) {
        std::this_thread::sleep_for(50ms);
      }
    }
    throw std::runtime_error("the test API server did not take the CRD");
  }
  testing::ListeningProcess process;
  int port;
  std::shared_ptr<HttpTransport> transport;
};

// The kubelet and the launchers, until `name` ends or `timeout` passes: worker pods become
// Ready; every launcher Job gets a pod that exits with a result at `throughput` of its case.
// Returns the run's last status; `launched` gets the case of every Job seen.
json play_kubelet(KubeClient& client, const std::string& name, const std::map<std::string, double>& throughput,
                  std::multiset<std::string>& launched, std::chrono::seconds timeout) {
  std::set<std::string> jobs_seen;
  json status;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    const json workers = client.list(resources::kPods, "default", "app.kubernetes.io/component=worker");
    for (const auto& pod : workers["items"]) {
      if (!pod.contains("status") || pod["status"].value("phase", "") != "Running") {
        client.merge_patch(resources::kPods, "default", pod["metadata"]["name"],
                           {{"status", {{"phase", "Running"}, {"conditions", {{{"type", "Ready"}, {"status", "True"}}}}}}},
                           "status");
      }
    }
    const json run = client.get(resources::kBenchmarkRuns, "default", name);
    const json jobs = client.list(resources::kJobs, "default");
    for (const auto& job : jobs["items"]) {
      const std::string job_name = job["metadata"]["name"];
      if (!jobs_seen.insert(job_name).second) continue;
      const auto labels = job["spec"]["template"]["metadata"]["labels"];
      const std::string id = labels["dlbench.io/case"];
      launched.insert(id);
      const CaseSpec c = [&] {
        for (const auto& p : plan_cases(decode_benchmark_run(run).value->spec)) {
          if (p.id == id) return p.spec;
        }
        throw std::runtime_error("a launcher for a case the run does not plan: " + id);
      }();
      json pod = {{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", {{"name", job_name + "-pod"}, {"labels", labels}}}};
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
      client.merge_patch(resources::kPods, "default", job_name + "-pod", patch, "status");
    }
    status = run.value("status", json::object());
    if (status.value("phase", "") == "Succeeded") break;
    std::this_thread::sleep_for(100ms);
  }
  return status;
}

ControllerOptions local_options() {
  ControllerOptions options;
  options.watch_timeout = 2s;
  options.config.worker_backend = "cpu";
  options.config.communicator = "mpi";
  return options;
}

// The minimal run (one 1x1 case) as `name` in namespace default.
json run_named(const std::string& name) {
  json run = testing::minimal_run();
  run["metadata"] = {{"name", name}, {"namespace", "default"}};
  return run;
}

// The run "scale" (1x1 and 2x1) through a controller against `server`, the test playing kubelet
// until it succeeds or 20 s pass: the run as the API server then holds it, the controller's
// metrics, and the case of every launcher Job seen.
struct ScaleRun {
  json run;
  std::string metrics;
  std::multiset<std::string> launched;
};
ScaleRun scale_run_against(ApiServer& server) {
  KubeClient client(server.transport);
  json run = run_named("scale");
  run["spec"]["matrix"] = {{"nodes", {1, 2}}, {"gpusPerNode", {1}}, {"batchSizePerDevice", {4}}, {"precision", {"fp32"}}};
  client.create(resources::kBenchmarkRuns, "default", run);
  Controller controller(client, local_options());
  controller.start();
  ScaleRun done;
  play_kubelet(client, "scale", {{"1x1-bs4-fp32", 10.0}, {"2x1-bs4-fp32", 19.0}}, done.launched, 20s);
  controller.stop();
  done.run = client.get(resources::kBenchmarkRuns, "default", "scale");
  done.metrics = controller.registry().serialize();
  return done;
}

TEST(Controller, RunsABenchmarkRunToSucceededAgainstAnApiServer) {
  ApiServer server;
  KubeClient client(server.transport);
  const ScaleRun done = scale_run_against(server);
  const json status = done.run.value("status", json::object());
  const std::multiset<std::string>& launched = done.launched;

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
  const std::string& exposition = done.metrics;
  EXPECT_THAT(exposition, ::testing::HasSubstr("dlbench_operator_reconciles_total{result=\"changed\"}"));
  EXPECT_THAT(exposition, ::testing::HasSubstr("dlbench_case_speedup{case=\"2x1-bs4-fp32\",namespace=\"default\",run=\"scale\"} 1.9"));
  // The loss after each case's last repeat, from its status.
  EXPECT_EQ(decoded.value->results[1].loss_after_repeats, (std::vector<double>{6.5, 6.25, 4.75}));
  EXPECT_THAT(exposition, ::testing::HasSubstr("dlbench_case_loss{case=\"1x1-bs4-fp32\",namespace=\"default\",run=\"scale\"} 2.5"));
  EXPECT_THAT(exposition, ::testing::HasSubstr("dlbench_case_loss{case=\"2x1-bs4-fp32\",namespace=\"default\",run=\"scale\"} 4.75"));
  // And its arithmetic: 3 TFLOPs a sample x 19 samples/s over 2 devices, 28.5% of a 100 TFLOP/s peak.
  EXPECT_THAT(exposition, ::testing::HasSubstr(
                              "dlbench_case_training_flops_per_second{case=\"2x1-bs4-fp32\",namespace=\"default\",run=\"scale\"} 2.85e+13"));
  EXPECT_THAT(exposition, ::testing::HasSubstr("dlbench_case_mfu_ratio{case=\"2x1-bs4-fp32\",namespace=\"default\",run=\"scale\"} 0.285"));
  // And its energy, through the API server's schema: 0.5 J a sample, at 19 samples/s over 2 devices 4.75 W each.
  ASSERT_TRUE(decoded.value->results[1].energy.has_value());
  EXPECT_DOUBLE_EQ(decoded.value->results[1].energy->joules_per_sample, 0.5);
  EXPECT_DOUBLE_EQ(decoded.value->results[1].energy->watts_per_device, 4.75);
  EXPECT_THAT(exposition, ::testing::HasSubstr(
                              "dlbench_case_energy_joules_per_sample{case=\"2x1-bs4-fp32\",namespace=\"default\",run=\"scale\"} 0.5"));
  EXPECT_THAT(exposition, ::testing::HasSubstr(
                              "dlbench_case_power_watts_per_device{case=\"2x1-bs4-fp32\",namespace=\"default\",run=\"scale\"} 4.75"));
  // And the 2-rank case's gradient reduction, through the API server's schema (which would prune
  // an undeclared field); the 1-rank case reduced nothing.
  EXPECT_FALSE(decoded.value->results[0].communication.has_value());
  ASSERT_TRUE(decoded.value->results[1].communication.has_value());
  EXPECT_EQ(decoded.value->results[1].communication, communication_report(2, 1'000'000, 2, 0.004, 0.2, 0.15));
  EXPECT_THAT(exposition, ::testing::HasSubstr(
                              "dlbench_case_exposed_communication_ratio{case=\"2x1-bs4-fp32\",namespace=\"default\",run=\"scale\"} 0.25"));
  EXPECT_THAT(exposition, ::testing::HasSubstr("dlbench_case_allreduce_bus_bandwidth_bytes_per_second{case=\"2x1-bs4-fp32\","
                                               "namespace=\"default\",run=\"scale\"} 2.5e+08"));
  // What measured each case, in its status (through the API server's schema) and as an info series.
  ASSERT_TRUE(decoded.value->results[1].environment.has_value());
  EXPECT_EQ(decoded.value->results[1].environment->communicator, "mpi");
  EXPECT_EQ(decoded.value->results[1].environment->onednn_version, "2.6.3");
  EXPECT_FALSE(status["results"][1]["environment"].contains("host"));
  EXPECT_THAT(exposition, ::testing::HasSubstr(
                              "dlbench_case_info{backend=\"cpu\",case=\"2x1-bs4-fp32\",communicator=\"mpi\","
                              "cpu_model=\"AMD EPYC \\\"Milan\\\"\",dlbench_version=\"0.1.0\",namespace=\"default\","
                              "onednn_version=\"2.6.3\",run=\"scale\"} 1\n"));
  EXPECT_THAT(exposition, ::testing::HasSubstr("dlbench_case_info{backend=\"cpu\",case=\"1x1-bs4-fp32\",communicator=\"none\""));
}

// Forwards every request; before the first PATCH to a path starting with `path`, runs `before`:
// another writer's change landing between the operator's read and its write.
class InterposingTransport : public HttpTransport {
 public:
  InterposingTransport(std::shared_ptr<HttpTransport> inner, std::string path, std::function<void()> before)
      : inner_(std::move(inner)), path_(std::move(path)), before_(std::move(before)) {}
  HttpResponse request(const std::string& method, const std::string& path, const std::string& body,
                       const std::string& content_type) override {
    const bool matches = method == "PATCH" && path.starts_with(path_);
    if (matches && !fired_.exchange(true)) before_();
    HttpResponse response = inner_->request(method, path, body, content_type);
    if (matches && response.status / 100 == 2) {
      std::lock_guard lock(mutex_);
      landed_.push_back(json::parse(body));
    }
    return response;
  }
  int stream(const std::string& path, std::chrono::seconds silence_limit,
             const std::function<bool(const std::string&)>& on_line) override {
    return inner_->stream(path, silence_limit, on_line);
  }
  bool fired() const { return fired_; }
  // The bodies of the matching PATCHes the server took, in order.
  std::vector<json> landed() const {
    std::lock_guard lock(mutex_);
    return landed_;
  }

 private:
  std::shared_ptr<HttpTransport> inner_;
  std::string path_;
  std::function<void()> before_;
  std::atomic<bool> fired_{false};
  mutable std::mutex mutex_;
  std::vector<json> landed_;
};

double sample_value(const std::string& exposition, const std::string& series) {
  const auto at = exposition.find("\n" + series + " ");
  if (at == std::string::npos) return 0.0;
  return std::stod(exposition.substr(at + series.size() + 2));
}

// An API server over etcd refuses an object past etcd's request limit (1.5 MiB by default: a run
// of hundreds of cases, each result about 1.5 KB). The operator writes the status again with less
// of each result and the run goes on: here against a server that takes a little less than this
// run's whole status.
TEST(Controller, AStatusLargerThanTheApiServerTakesIsWrittenWithLessOfEachResult) {
  std::size_t whole = 0;
  {
    ApiServer unlimited;
    const json run = scale_run_against(unlimited).run;
    ASSERT_EQ(run["status"].value("phase", ""), "Succeeded") << run.dump();
    ASSERT_TRUE(run["status"]["results"][1].contains("flops"));
    whole = run.dump().size();
  }
  ApiServer server({"--max-object-bytes", std::to_string(whole - 200)});
  ::testing::internal::CaptureStderr();
  const ScaleRun done = scale_run_against(server);
  const json& run = done.run;
  const std::string& metrics = done.metrics;
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(run["status"].value("phase", ""), "Succeeded") << log;
  EXPECT_LE(run.dump().size(), whole - 200);
  const auto decoded = decode_status(run["status"]);
  ASSERT_TRUE(decoded.ok()) << decoded.errors.front().to_string();
  ASSERT_EQ(decoded.value->results.size(), 2u);
  for (const CaseResult& r : decoded.value->results) {
    // Trimmed: what the report and compare read is there, the rest is not.
    EXPECT_EQ(r.state, CaseState::Succeeded);
    ASSERT_TRUE(r.throughput.has_value());
    EXPECT_EQ(r.throughput->repeats.size(), 3u);
    EXPECT_TRUE(r.environment.has_value());
    EXPECT_FALSE(r.flops.has_value());
    EXPECT_FALSE(r.energy.has_value());
    EXPECT_TRUE(r.loss_after_repeats.empty());
  }
  EXPECT_NEAR(*decoded.value->results[1].speedup, 1.9, 1e-9);
  EXPECT_EQ(sample_value(metrics, "dlbench_operator_status_results_trimmed_total{detail=\"trimmed\"}"), 1.0) << metrics;
  EXPECT_EQ(sample_value(metrics, "dlbench_operator_status_results_trimmed_total{detail=\"essential\"}"), 0.0);
  EXPECT_THAT(log, ::testing::HasSubstr(R"("detail":"trimmed","level":"warning","msg":"the status is larger than the API server takes: written again with less of each result","results":2,"run":"default/scale")"));
  // What the status leaves out is in the log: each result whole, as it was recorded.
  std::vector<json> logged;
  std::istringstream lines(log);
  for (std::string line; std::getline(lines, line);) {
    const json entry = json::parse(line, nullptr, false);
    if (entry.is_object() && entry.value("msg", "") == "case result recorded") logged.push_back(entry["result"]);
  }
  ASSERT_EQ(logged.size(), 2u) << log;
  EXPECT_EQ(logged[1]["case"].value("id", ""), "2x1-bs4-fp32");
  EXPECT_TRUE(logged[1].contains("flops"));
  EXPECT_TRUE(logged[1].contains("communication"));
  EXPECT_EQ(logged[1]["lossAfterRepeats"].size(), 3u);
}

// The write-status branch where the fresh read after a 409 shows another spec: the status
// computed from the old spec must not land, nor children for it, and the run is judged again
// from the new spec once the cache has it.
TEST(Controller, AStatusWriteOverAnEditedSpecIsRefusedAndTheRunJudgedAgain) {
  ApiServer server;
  KubeClient editor(server.transport);
  json run = run_named("edited");
  run["spec"]["matrix"] = {{"nodes", {1}}, {"gpusPerNode", {1}}, {"batchSizePerDevice", {4}}, {"precision", {"fp32"}}};
  editor.create(resources::kBenchmarkRuns, "default", run);
  // The user changes the batch size (allowed while the run has not started) just as the
  // operator's first status write leaves.
  const auto interposer = std::make_shared<InterposingTransport>(
      server.transport, resources::kBenchmarkRuns.path("default", "edited", "status"), [&] {
        editor.merge_patch(resources::kBenchmarkRuns, "default", "edited",
                           {{"spec", {{"matrix", {{"batchSizePerDevice", {8}}}}}}});
      });
  KubeClient client(interposer);

  Controller controller(client, local_options());
  controller.start();
  std::multiset<std::string> launched;
  const json status = play_kubelet(editor, "edited", {{"1x1-bs8-fp32", 12.0}}, launched, 20s);
  controller.stop();

  ASSERT_TRUE(interposer->fired());
  // Every status the operator wrote was judged from the edited spec (generation 2).
  const std::vector<json> landed = interposer->landed();
  ASSERT_FALSE(landed.empty());
  EXPECT_EQ(landed.front()["status"].value("observedGeneration", 0), 2) << landed.front().dump();
  for (const json& write : landed) {
    EXPECT_EQ(write["status"].value("observedGeneration", 2), 2) << write.dump();
  }
  ASSERT_EQ(status.value("phase", ""), "Succeeded") << status.dump();
  EXPECT_EQ(status.value("observedGeneration", 0), 2);
  const auto decoded = decode_status(status);
  ASSERT_TRUE(decoded.ok()) << decoded.errors.front().to_string();
  ASSERT_EQ(decoded.value->results.size(), 1u);
  EXPECT_EQ(case_id(decoded.value->results[0].case_), "1x1-bs8-fp32");
  // Nothing was started for the batch size the user took back.
  EXPECT_EQ(launched, (std::multiset<std::string>{"1x1-bs8-fp32"}));
  const json events = editor.list(resources::kEvents, "default");  // bound: items refers into it
  ASSERT_FALSE(events["items"].empty());
  for (const auto& e : events["items"]) {
    EXPECT_EQ(e.value("message", "").find("bs4"), std::string::npos) << e.dump();
  }
  const std::string exposition = controller.registry().serialize();
  EXPECT_GE(sample_value(exposition, "dlbench_operator_status_conflicts_total"), 1.0) << exposition;
  EXPECT_GE(sample_value(exposition, "dlbench_operator_reconciles_total{result=\"conflict\"}"), 1.0) << exposition;
}

// Counts the operator's creations, by the API's answer: 201, or 409 (it asked for what exists).
class CountingTransport : public HttpTransport {
 public:
  explicit CountingTransport(std::shared_ptr<HttpTransport> inner) : inner_(std::move(inner)) {}
  HttpResponse request(const std::string& method, const std::string& path, const std::string& body,
                       const std::string& content_type) override {
    HttpResponse response = inner_->request(method, path, body, content_type);
    const bool create = method == "POST" && path.find("/events") == std::string::npos;
    const bool status_write = (method == "PATCH" || method == "PUT") && path.ends_with("/status");
    if (create || status_write) {
      std::lock_guard lock(mutex_);
      if (create) ++creates_[response.status];
      const json stored = json::parse(response.body, nullptr, false);
      if (response.status == (create ? 201 : 200) && stored.is_object()) {
        written_.insert_or_assign(object_key(stored), resource_version(stored));
      }
    }
    return response;
  }
  // The newest version of each object the operator's informers have taken in, once its watch
  // event was handed on.
  int stream(const std::string& path, std::chrono::seconds silence_limit,
             const std::function<bool(const std::string&)>& on_line) override {
    return inner_->stream(path, silence_limit, [&](const std::string& line) {
      const bool more = on_line(line);
      const json event = json::parse(line, nullptr, false);
      if (event.is_object() && event.value("type", "") != "BOOKMARK" && event.value("object", json()).is_object()) {
        std::lock_guard lock(mutex_);
        auto& seen = watched_[object_key(event["object"])];
        seen = std::max(seen, resource_version(event["object"]));
      }
      return more;
    });
  }
  // Whether every object created through here (and kept by the API server), and every status
  // written through here, has been in a watch the operator read, at that version or later, but
  // the objects named with `except` at the end. A test waits for this before reading what the
  // operator awaits, or it may catch it awaiting more: under load the runs' watch can lag the
  // pods' by far more than a reconcile (CI saw it still awaiting its own status write).
  bool watched_every_write(const std::string& except = "") const {
    std::lock_guard lock(mutex_);
    return std::all_of(written_.begin(), written_.end(), [&](const auto& written) {
      const auto& [key, version] = written;
      if (!except.empty() && key.ends_with(except)) return true;
      const auto seen = watched_.find(key);
      return seen != watched_.end() && seen->second >= version;
    });
  }
  int creates(int status) const {
    std::lock_guard lock(mutex_);
    const auto it = creates_.find(status);
    return it == creates_.end() ? 0 : it->second;
  }

 private:
  std::shared_ptr<HttpTransport> inner_;
  static std::string object_key(const json& object) {
    return object.value("kind", "") + "/" + object.value("metadata", json::object()).value("name", "");
  }
  // The test API server's versions are one counter: their order is the order of the writes.
  static long long resource_version(const json& object) {
    const std::string version = object.value("metadata", json::object()).value("resourceVersion", "0");
    return std::strtoll(version.c_str(), nullptr, 10);
  }
  mutable std::mutex mutex_;
  std::map<int, int> creates_;
  std::map<std::string, long long> written_, watched_;  // object → newest version written, watched
};

// A watch cache that lags (as an API server's does under load): the operator must not take
// children it created a moment ago, and not yet seen, for missing. It waits for its informers
// to show them (expectations, as controller-runtime's ReplicaSet controller keeps them) instead
// of creating them again, and announces each launcher once.
TEST(Controller, ChildrenItCreatedAreAwaitedInTheCacheNotCreatedAgain) {
  ApiServer server({"--watch-delay", "0.6"});
  KubeClient kubelet(server.transport);
  json run = run_named("lagging");
  run["spec"]["matrix"] = {{"nodes", {1, 2}}, {"gpusPerNode", {1}}, {"batchSizePerDevice", {4}}, {"precision", {"fp32"}}};
  kubelet.create(resources::kBenchmarkRuns, "default", run);
  const auto counting = std::make_shared<CountingTransport>(server.transport);
  KubeClient client(counting);

  Controller controller(client, local_options());
  controller.start();
  std::multiset<std::string> launched;
  const json status = play_kubelet(kubelet, "lagging", {{"1x1-bs4-fp32", 10.0}, {"2x1-bs4-fp32", 19.0}}, launched, 60s);
  controller.stop();

  ASSERT_EQ(status.value("phase", ""), "Succeeded") << status.dump();
  EXPECT_EQ(launched, (std::multiset<std::string>{"1x1-bs4-fp32", "2x1-bs4-fp32"}));
  std::multiset<std::string> announced;
  const json events = kubelet.list(resources::kEvents, "default");  // bound: items refers into it
  for (const auto& e : events["items"]) {
    if (e.value("reason", "") == "LauncherCreated") announced.insert(e.value("message", ""));
  }
  EXPECT_EQ(announced, (std::multiset<std::string>{"1x1-bs4-fp32 attempt 1", "2x1-bs4-fp32 attempt 1"}));
  // Each event counted, by type and reason.
  EXPECT_EQ(sample_value(controller.registry().serialize(), R"(dlbench_operator_events_total{reason="LauncherCreated",type="Normal"})"),
            2.0);
  // Per case a Secret, a hostfile, a Service, a PodDisruptionBudget, its workers and a launcher: 6 + 7.
  EXPECT_EQ(counting->creates(201), 13);
  EXPECT_EQ(counting->creates(409), 0);
  // It did wait for its cache, and said so.
  const std::string exposition = controller.registry().serialize();
  EXPECT_GE(sample_value(exposition, "dlbench_operator_reconciles_total{result=\"stale\"}"), 1.0) << exposition;
}

// Whether `done` holds within `limit`, polled every 20 ms.
bool wait_until(const std::function<bool()>& done, std::chrono::milliseconds limit) {
  for (const auto deadline = std::chrono::steady_clock::now() + limit; std::chrono::steady_clock::now() < deadline;) {
    if (done()) return true;
    std::this_thread::sleep_for(20ms);
  }
  return done();
}

double stale_reconciles(Controller& controller) {
  return sample_value(controller.registry().serialize(), "dlbench_operator_reconciles_total{result=\"stale\"}");
}

// Hides from the operator's lists and watches every object whose name ends in `suffix`: a child
// that no informer ever shows (deleted before it was seen, during a relist).
class HidingTransport : public CountingTransport {
 public:
  HidingTransport(std::shared_ptr<HttpTransport> inner, std::string suffix)
      : CountingTransport(std::move(inner)), suffix_(std::move(suffix)) {}
  HttpResponse request(const std::string& method, const std::string& path, const std::string& body,
                       const std::string& content_type) override {
    HttpResponse response = CountingTransport::request(method, path, body, content_type);
    if (method != "GET" || response.status != 200) return response;
    json listed = json::parse(response.body, nullptr, false);
    if (!listed.is_object() || !listed.contains("items")) return response;
    json kept = json::array();
    for (auto& item : listed["items"]) {
      if (!hidden(item)) kept.push_back(std::move(item));
    }
    listed["items"] = std::move(kept);
    response.body = listed.dump();
    return response;
  }
  int stream(const std::string& path, std::chrono::seconds silence_limit,
             const std::function<bool(const std::string&)>& on_line) override {
    return CountingTransport::stream(path, silence_limit, [&](const std::string& line) {
      const json event = json::parse(line, nullptr, false);
      if (event.is_object() && event.contains("object") && hidden(event["object"])) return true;
      return on_line(line);
    });
  }

 private:
  bool hidden(const json& object) const {
    const std::string name = object.value("metadata", json::object()).value("name", "");
    return name.ends_with(suffix_);
  }
  std::string suffix_;
};

// An awaited child may never be shown: after 5 minutes the expectation lapses and the run is
// judged on what the caches hold (here: the worker missing, so it asks for it again).
TEST(Controller, AnAwaitedChildLapsesAfterFiveMinutes) {
  ApiServer server;
  KubeClient kubelet(server.transport);
  kubelet.create(resources::kBenchmarkRuns, "default", run_named("unseen"));
  const auto hiding = std::make_shared<HidingTransport>(server.transport, "-worker-0");
  KubeClient client(hiding);
  std::atomic<int> minutes_later{0};
  ControllerOptions options = local_options();
  options.steady_now = [&] { return std::chrono::steady_clock::now() + std::chrono::minutes(minutes_later.load()); };

  Controller controller(client, options);
  controller.start();
  const auto stale = [&] { return stale_reconciles(controller); };
  // Its first children go out; the others show, the worker never does, and it waits for it,
  // naming it in the log.
  ::testing::internal::CaptureStderr();
  std::optional<double> stale_once_shown;  // stale reconciles when the other children had shown
  const bool waited = wait_until([&] {
    if (hiding->creates(201) < 5 || !hiding->watched_every_write("-worker-0")) return false;
    if (!stale_once_shown) stale_once_shown = stale();
    return stale() >= *stale_once_shown + 2;
  }, 10000ms);
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(waited);
  EXPECT_THAT(log, ::testing::ContainsRegex(R"("awaiting":\["[A-Za-z]+/unseen-[^"]*-worker-0"\],"level":"info",)"
                                          R"("ms":[0-9.]+,"msg":"reconciled stale")"));
  EXPECT_EQ(hiding->creates(409), 0);
  // Five minutes on by its clock: it acts on the caches as they are, and the API server answers
  // that the worker exists.
  minutes_later = 5;
  EXPECT_TRUE(wait_until([&] { return hiding->creates(409) > 0; }, 5000ms));
  controller.stop();
}

// Drops the events of the runs' watch while frozen: the operator's cache keeps each run as it
// was, as after an API server restored from a backup whose runs the informer has not listed again
// while the pods' informer has.
class RunsWatchFreezingTransport : public CountingTransport {
 public:
  using CountingTransport::CountingTransport;
  int stream(const std::string& path, std::chrono::seconds silence_limit,
             const std::function<bool(const std::string&)>& on_line) override {
    const bool runs = path.find("/benchmarkruns") != std::string::npos;
    return CountingTransport::stream(path, silence_limit, [&](const std::string& line) {
      if (runs && frozen) return true;
      const bool more = on_line(line);
      if (runs) {
        const json event = json::parse(line, nullptr, false);
        if (event.is_object() && event.value("object", json::object()).value("status", json::object()).value("phase", "") == "Running") {
          running_watched = true;
        }
      }
      return more;
    });
  }
  std::atomic<bool> frozen{false};
  // Whether the operator's cache has taken in a run whose status says Running: its own write.
  std::atomic<bool> running_watched{false};
};

// Children are made and removed for the case the run is on. A cache that shows the run otherwise
// than the API server holds it would start a case beside the running one, or delete the running
// one's pods (seen in k8s.OperatorFaults after a restore). Before it makes or removes a child, the
// operator reads the run; where its spec or status differ from the cache's, it waits for the cache.
TEST(Controller, NoChildIsMadeOrRemovedWhileTheCacheShowsTheRunOtherwiseThanTheApiServer) {
  ApiServer server;
  KubeClient editor(server.transport);
  editor.create(resources::kBenchmarkRuns, "default", run_named("behind"));
  const auto freezing = std::make_shared<RunsWatchFreezingTransport>(server.transport);
  KubeClient client(freezing);
  Controller controller(client, local_options());
  const auto stored_status = [&] {
    return editor.get(resources::kBenchmarkRuns, "default", "behind").value("status", json::object());
  };
  const auto worker = [&]() -> std::string {
    const json pods = editor.list(resources::kPods, "default", "app.kubernetes.io/component=worker");
    return pods["items"].empty() ? "" : pods["items"][0]["metadata"].value("name", "");
  };
  ::testing::internal::CaptureStderr();
  controller.start();
  // The first case's Secret, hostfile, Service, budget and worker made, its status written and
  // seen by the cache (no kubelet: the worker never runs, so no launcher). Frozen before the cache
  // took in its own write, the operator would rightly wait for that write instead (a watch that
  // drops events is this test's device; a real one relists), and for 5 minutes.
  const bool started = wait_until([&] {
    return freezing->creates(201) >= 5 && stored_status().value("phase", "") == "Running" && !worker().empty() &&
           freezing->watched_every_write() && freezing->running_watched;
  }, 10000ms);
  // The runs' events stop reaching the cache; the world goes back: the run's status as before the
  // operator wrote one, its worker gone. The pods' informer shows the worker gone.
  freezing->frozen = true;
  const std::string gone = worker();
  editor.merge_patch(resources::kBenchmarkRuns, "default", "behind", {{"status", nullptr}}, "status");
  const int made = freezing->creates(201);
  const double before = stale_reconciles(controller);
  editor.remove(resources::kPods, "default", gone);
  const bool waited = wait_until([&] { return stale_reconciles(controller) >= before + 5; }, 5000ms);
  const int made_while_behind = freezing->creates(201) - made;
  const bool gone_while_behind = worker().empty();
  // The cache catches up (the next event of the run, another writer's annotation): the operator
  // acts on the run as the API server holds it, starting the case again from its status.
  freezing->frozen = false;
  editor.merge_patch(resources::kBenchmarkRuns, "default", "behind", {{"metadata", {{"annotations", {{"touched", "1"}}}}}});
  const bool again = wait_until([&] { return stored_status().value("phase", "") == "Running" && !worker().empty(); }, 8000ms);
  controller.stop();
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(started) << log;
  EXPECT_TRUE(waited) << log;
  EXPECT_EQ(made_while_behind, 0) << log;
  EXPECT_TRUE(gone_while_behind);
  EXPECT_THAT(log, ::testing::HasSubstr(R"("awaiting":"the cache to show the run as the API server holds it","level":"info")"));
  EXPECT_TRUE(again) << log;
}

// Shows the operator's pods informer one pod as deleted while the API server still holds it: a
// pods cache behind the others, as after an API server restored from a backup when the
// ConfigMaps' informer has listed again and the pods' not yet. While `lagging`, the pod's next
// event arrives as DELETED and its later ones not at all.
class PodsCacheLaggingTransport : public CountingTransport {
 public:
  using CountingTransport::CountingTransport;
  int stream(const std::string& path, std::chrono::seconds silence_limit,
             const std::function<bool(const std::string&)>& on_line) override {
    const bool pods = path.find("/pods") != std::string::npos;
    return CountingTransport::stream(path, silence_limit, [&](const std::string& line) {
      if (!pods || !lagging) return on_line(line);
      json event = json::parse(line, nullptr, false);
      if (!event.is_object() || event.value("object", json::object()).value("metadata", json::object()).value("name", "") != pod) {
        return on_line(line);
      }
      if (shown_deleted.exchange(true)) return true;
      event["type"] = "DELETED";
      return on_line(event.dump());
    });
  }
  std::string pod;
  std::atomic<bool> lagging{false}, shown_deleted{false};
};

// With engine: command, a worker missing from the cache once every worker ran is taken as deleted
// (WorkerDeleted): a new pod would join no job. But the caches may lag one another: the operator
// asks the API server first, and while it holds the pod, waits for the cache instead of recording
// a loss (seen in k8s.OperatorFaults after a restore: a case measured again failed WorkerDeleted).
TEST(Controller, AWorkerMissingOnlyFromTheCacheIsAwaitedNotTakenAsDeleted) {
  ApiServer server;
  KubeClient editor(server.transport);
  json run = run_named("lagging-pods");
  run["spec"]["engine"] = "command";
  run["spec"]["command"] = {"sleep", "600"};
  run["spec"]["limits"] = {{"backoffLimit", 0}};
  editor.create(resources::kBenchmarkRuns, "default", run);
  const auto lagging = std::make_shared<PodsCacheLaggingTransport>(server.transport);
  KubeClient client(lagging);
  Controller controller(client, local_options());
  const auto workers = [&] {
    std::vector<std::string> names;
    const json pods = editor.list(resources::kPods, "default", "app.kubernetes.io/component=worker");  // items refer into it
    for (const auto& p : pods["items"]) {
      names.push_back(p["metadata"].value("name", ""));
    }
    return names;
  };
  const auto started_records = [&] {
    return editor.list(resources::kConfigMaps, "default", "app.kubernetes.io/component=started")["items"].size();
  };
  const auto results = [&] {
    return editor.get(resources::kBenchmarkRuns, "default", "lagging-pods").value("status", json::object()).value("results", json::array());
  };
  ::testing::internal::CaptureStderr();
  controller.start();
  // The worker made and Ready (the test plays kubelet), so every worker ran: the started record.
  const bool made = wait_until([&] { return workers().size() == 1; }, 10000ms);
  const std::string worker = made ? workers()[0] : "";
  if (made) {
    editor.merge_patch(resources::kPods, "default", worker,
                       {{"status", {{"phase", "Running"}, {"conditions", {{{"type", "Ready"}, {"status", "True"}}}}}}}, "status");
  }
  const bool ran = wait_until([&] { return started_records() == 1 && lagging->watched_every_write(); }, 10000ms);
  // The pods' cache shows the worker gone; the API server holds it.
  lagging->pod = worker;
  lagging->lagging = true;
  editor.merge_patch(resources::kPods, "default", worker, {{"metadata", {{"annotations", {{"touched", "1"}}}}}});
  const bool hidden = wait_until([&] { return lagging->shown_deleted.load(); }, 5000ms);
  const double before = stale_reconciles(controller);
  const bool waited = wait_until([&] { return stale_reconciles(controller) >= before + 5; }, 5000ms);
  const json results_while_behind = results();
  // The cache catches up: nothing was lost.
  lagging->lagging = false;
  editor.merge_patch(resources::kPods, "default", worker, {{"metadata", {{"annotations", {{"touched", "2"}}}}}});
  std::this_thread::sleep_for(500ms);
  const json results_after = results();
  const int pods_made = lagging->creates(201);
  // Deleted for real: the API server no longer holds it, and the loss is recorded.
  editor.remove(resources::kPods, "default", worker);
  const bool recorded = wait_until([&] { return results().size() == 1; }, 10000ms);
  controller.stop();
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(made) << log;
  ASSERT_TRUE(ran) << log;
  ASSERT_TRUE(hidden) << log;
  EXPECT_TRUE(waited) << log;
  EXPECT_THAT(results_while_behind, ::testing::IsEmpty()) << log;
  EXPECT_THAT(results_after, ::testing::IsEmpty()) << log;
  EXPECT_THAT(log, ::testing::HasSubstr(R"("awaiting":"the cache to show Pod/)" + worker + R"(, which the API server holds")"));
  ASSERT_TRUE(recorded) << log;
  EXPECT_EQ(results()[0].value("reason", ""), "WorkerDeleted") << results().dump();
  EXPECT_EQ(results()[0].value("message", ""), "worker " + worker + " was deleted mid-case: its pod is gone");
  EXPECT_EQ(lagging->creates(201), pods_made) << "the worker is not made again";
}

// An API server that acknowledges writes and then loses them, as one restored from a backup
// does: the first create of an object whose name ends in `suffix` and the first status write
// are answered as stored (201, 200 with the object) and never reach the store. And a watch of a
// given resource that ends with 410 Gone, so that the informer lists again.
class ForgetfulTransport : public CountingTransport {
 public:
  ForgetfulTransport(std::shared_ptr<HttpTransport> inner, std::string suffix)
      : CountingTransport(inner), inner_(std::move(inner)), suffix_(std::move(suffix)) {}
  HttpResponse request(const std::string& method, const std::string& path, const std::string& body,
                       const std::string& content_type) override {
    if (method == "POST" && path.find("/events") == std::string::npos) {
      json object = json::parse(body);
      const std::string name = object["metadata"].value("name", "");
      if (!lost_create_ && name.ends_with(suffix_)) {
        lost_create_ = true;
        object["metadata"]["uid"] = "lost-" + name;
        object["metadata"]["resourceVersion"] = "1";
        return {201, object.dump()};
      }
    }
    if (method == "PATCH" && path.ends_with("/status") && !lost_status_write_) {
      lost_status_write_ = true;
      json stored = json::parse(inner_->request("GET", path.substr(0, path.size() - 7), "", "").body);
      stored.merge_patch(json::parse(body));
      return {200, stored.dump()};
    }
    return CountingTransport::request(method, path, body, content_type);
  }
  int stream(const std::string& path, std::chrono::seconds silence_limit,
             const std::function<bool(const std::string&)>& on_line) override {
    {
      std::lock_guard lock(mutex_);
      for (auto it = expiring_.begin(); it != expiring_.end(); ++it) {
        if (path.find(*it) == std::string::npos) continue;
        expiring_.erase(it);
        ++expired_;
        return 410;
      }
    }
    return CountingTransport::stream(path, silence_limit, on_line);
  }
  // The next watch of a path holding `resource` ("/pods") ends at once with 410 Gone.
  void expire_next_watch(const std::string& resource) {
    std::lock_guard lock(mutex_);
    expiring_.insert(resource);
  }
  int expired() const {
    std::lock_guard lock(mutex_);
    return expired_;
  }
  bool lost_both() const { return lost_create_ && lost_status_write_; }

 private:
  std::shared_ptr<HttpTransport> inner_;
  std::string suffix_;
  std::atomic<bool> lost_create_{false}, lost_status_write_{false};
  mutable std::mutex mutex_;
  std::set<std::string> expiring_;
  int expired_ = 0;
};

// A run whose first status write and worker Pod the API server acknowledges and loses.
class LostWrites : public ::testing::Test {
 protected:
  LostWrites() {
    kubelet.create(resources::kBenchmarkRuns, "default", run_named("restored"));
    ControllerOptions options = local_options();
    options.steady_now = [this] { return std::chrono::steady_clock::now() + std::chrono::seconds(seconds_later.load()); };
    controller = std::make_unique<Controller>(client, options);
  }
  ~LostWrites() override { controller->stop(); }
  double stale() { return stale_reconciles(*controller); }
  double abandoned(const std::string& awaiting, const std::string& reason) {
    return sample_value(controller->registry().serialize(), "dlbench_operator_expectations_abandoned_total{awaiting=\"" +
                                                                awaiting + "\",reason=\"" + reason + "\"}");
  }
  std::string stored_phase() {
    return kubelet.get(resources::kBenchmarkRuns, "default", "restored").value("status", json::object()).value("phase", "");
  }
  std::vector<std::string> stored_workers() {
    std::vector<std::string> names;
    const json pods = kubelet.list(resources::kPods, "default", "");  // bound: the loop refers into it
    for (const auto& pod : pods["items"]) {
      const std::string name = pod["metadata"]["name"];
      if (name.ends_with("-worker-0")) names.push_back(name);
    }
    return names;
  }
  // Starts it; true once both writes are lost and it has waited for them, by watch, in vain.
  bool start_and_lose_both() {
    controller->start();
    return wait_until([&] { return forgetful->lost_both() && stale() >= 3 && forgetful->watched_every_write(); },
                      10000ms);
  }
  bool written_again() {
    return wait_until([&] { return !stored_phase().empty() && stored_workers().size() == 1; }, 8000ms);
  }

  ApiServer server;
  KubeClient kubelet{server.transport};
  std::shared_ptr<ForgetfulTransport> forgetful = std::make_shared<ForgetfulTransport>(server.transport, "-worker-0");
  KubeClient client{forgetful};
  std::atomic<int> seconds_later{0};
  std::unique_ptr<Controller> controller;
};

// Writes the API server acknowledged and lost never show in a watch; a list asked for after
// them shows the world without them. The operator then stops awaiting them at once, not after
// 5 minutes, names them, counts them, and writes again: the status, and the worker Pod.
TEST_F(LostWrites, AreNotAwaitedOnceAListAskedForAfterThemShowsThemMissing) {
  ::testing::internal::CaptureStderr();
  const bool waiting = start_and_lose_both();
  // Lists of Jobs and Services say nothing of a Pod or a run: it still waits.
  forgetful->expire_next_watch("/jobs");
  forgetful->expire_next_watch("/services");
  const bool relisted = wait_until([&] { return forgetful->expired() == 2; }, 5000ms);
  const double before = stale();
  const bool still_waiting = wait_until([&] { return stale() >= before + 10; }, 5000ms);
  const std::string phase_while_waiting = stored_phase();
  const auto workers_while_waiting = stored_workers();
  // 11 s into the wait by its clock: one more line says how long it has waited.
  seconds_later = 11;
  const double at_eleven = stale();
  const bool waited_on = wait_until([&] { return stale() >= at_eleven + 3; }, 5000ms);
  // Lists of Pods and of runs, asked for after both writes: it acts on the world as listed.
  forgetful->expire_next_watch("/pods");
  forgetful->expire_next_watch("/benchmarkruns");
  const bool again = written_again();
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(waiting) << log;
  EXPECT_TRUE(relisted);
  EXPECT_TRUE(still_waiting) << log;
  EXPECT_TRUE(waited_on) << log;
  // A pass every 100 ms, counted; logged when a wait starts and every 10 s of it (the wait for the
  // status, its reminder, and the worker's wait where the runs' list came first).
  EXPECT_GE(stale(), 16.0);
  std::ptrdiff_t stale_lines = 0;
  for (auto at = log.find("\"msg\":\"reconciled stale\""); at != std::string::npos; at = log.find("\"msg\":\"reconciled stale\"", at + 1)) {
    ++stale_lines;
  }
  EXPECT_GE(stale_lines, 2) << log;
  EXPECT_LE(stale_lines, 3) << log;
  EXPECT_THAT(log, ::testing::ContainsRegex(R"("awaiting":"its own status write","level":"info","ms":[0-9.]+,)"
                                          R"("msg":"reconciled stale","reconcile":[0-9]+,"run":"default/restored",)"
                                          R"("waitedSeconds":1[1-9](\.[0-9])?\})"));
  EXPECT_EQ(phase_while_waiting, "");
  EXPECT_THAT(workers_while_waiting, ::testing::IsEmpty());
  EXPECT_TRUE(again) << log;
  EXPECT_EQ(forgetful->expired(), 4);
  EXPECT_THAT(log, ::testing::ContainsRegex(R"("children":\["Pod/restored-[^"]*-worker-0"\],"level":"warning",)"
                                          R"("msg":"created children are not in a list asked for after their creation)"));
  EXPECT_THAT(log, ::testing::HasSubstr(R"("msg":"the run's status is not the one it wrote, in a list asked for after the write)"));
  EXPECT_THAT(log, ::testing::Not(::testing::HasSubstr("never appeared in the cache")));
  EXPECT_EQ(abandoned("child", "relisted"), 1.0);
  EXPECT_EQ(abandoned("status", "relisted"), 1.0);
  EXPECT_EQ(abandoned("child", "expired") + abandoned("status", "expired"), 0.0);
}

// Without a list, they lapse after 5 minutes by its clock, as Kubernetes' expectations do.
TEST_F(LostWrites, LapseAfterFiveMinutesWithoutAList) {
  ::testing::internal::CaptureStderr();
  const bool waiting = start_and_lose_both();
  seconds_later = 300;
  const bool again = written_again();
  const std::string log = ::testing::internal::GetCapturedStderr();
  ASSERT_TRUE(waiting) << log;
  EXPECT_TRUE(again) << log;
  EXPECT_EQ(forgetful->expired(), 0);
  EXPECT_THAT(log, ::testing::HasSubstr(R"("level":"warning","msg":"its status write never appeared in the cache; acting without it","run":"default/restored")"));
  EXPECT_THAT(log, ::testing::ContainsRegex(R"("children":\["Pod/restored-[^"]*-worker-0"\],"level":"warning",)"
                                          R"("msg":"created children never appeared in the cache)"));
  EXPECT_EQ(abandoned("status", "expired"), 1.0);
  EXPECT_EQ(abandoned("child", "expired"), 1.0);
  EXPECT_EQ(abandoned("child", "relisted") + abandoned("status", "relisted"), 0.0);
}

}  // namespace
}  // namespace dlbench::operator_
