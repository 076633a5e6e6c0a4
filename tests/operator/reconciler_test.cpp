// The reconciler against a fake cluster: a map of objects that applies its actions, and a
// simulated kubelet that starts pods, finishes launchers with real result documents, kills
// workers, and lets time pass.
#include <algorithm>
#include <map>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "../support/test_support.hpp"
#include "dlbench/core/codec.hpp"
#include "dlbench/core/result_document.hpp"
#include "dlbench/core/statistics.hpp"
#include "dlbench/core/status.hpp"
#include "reconciler.hpp"

namespace dlbench::operator_ {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using nlohmann::json;
using namespace std::chrono_literals;

struct FakeCluster {
  std::map<std::string, json> objects;  // "Kind/name"
  TimePoint now = *parse_rfc3339("2026-11-21T06:00:00Z");
  json run;
  int launches = 0;
  bool pod_groups_served = true;  // what the controller's discovery would say
  // As an API server deletes a pod on a node that has not ended: it stays, Terminating, this long
  // (until the test removes it, as its kubelet would); 0: every removal at once.
  std::chrono::seconds pod_grace{0};
  OperatorConfig config;  // the operator's flags

  explicit FakeCluster(json benchmark_run) : run(std::move(benchmark_run)) {
    run["metadata"]["uid"] = "uid-1";
    run["metadata"]["generation"] = 1;
  }

  World world() const {
    World w;
    w.now = now;
    w.pod_groups_served = [served = pod_groups_served](const std::string&) { return served; };
    for (const auto& [key, o] : objects) {
      if (o["kind"] == "Pod") {
        w.pods.push_back(observe_pod(o));
      } else if (o["kind"] == "Job") {
        w.jobs.push_back(observe_job(o));
      } else {
        w.others.push_back(observe_object(o));
      }
    }
    return w;
  }

  Actions step() {
    int key_count = 0;
    const Actions a = reconcile(run, world(), config, [&] {
      ++key_count;
      return SshKeyPair{"private", "public"};
    });
    for (json o : a.create) {
      const std::string key = o["kind"].get<std::string>() + "/" + o["metadata"]["name"].get<std::string>();
      if (objects.contains(key)) continue;  // AlreadyExists
      o["metadata"]["creationTimestamp"] = rfc3339_utc(now);
      o["status"] = json::object();
      objects[key] = o;
    }
    for (const auto& r : a.remove) {
      const auto it = objects.find(r.kind + "/" + r.name);
      if (it == objects.end()) continue;
      json& o = it->second;
      const std::string phase = o.value("status", json::object()).value("phase", "");
      const bool on_a_node = !o.value("spec", json::object()).value("nodeName", "").empty();
      if (pod_grace.count() > 0 && r.kind == "Pod" && on_a_node && phase != "Succeeded" && phase != "Failed") {
        if (!o["metadata"].contains("deletionTimestamp")) o["metadata"]["deletionTimestamp"] = rfc3339_utc(now + pod_grace);
      } else {
        objects.erase(it);
      }
    }
    if (a.status) run["status"] = to_json(*a.status);
    return a;
  }

  std::vector<std::string> names(const std::string& kind) const {
    std::vector<std::string> out;
    for (const auto& [key, o] : objects) {
      if (o["kind"] == kind) out.push_back(o["metadata"]["name"]);
    }
    return out;
  }

  void make_workers_ready() {
    for (auto& [key, o] : objects) {
      if (o["kind"] != "Pod" || o["metadata"]["labels"]["app.kubernetes.io/component"] != "worker") continue;
      o["status"] = {{"phase", "Running"},
                     {"conditions", {{{"type", "PodScheduled"}, {"status", "True"}}, {{"type", "Ready"}, {"status", "True"}}}}};
    }
  }

  // The scheduler's part: the worker pods bound to `node`.
  void place_workers(const std::string& node) {
    for (auto& [key, o] : objects) {
      if (o["kind"] == "Pod" && o["metadata"]["labels"]["app.kubernetes.io/component"] == "worker") o["spec"]["nodeName"] = node;
    }
  }

  // The pods being deleted, as their kubelet ends them: gone.
  void end_terminating_pods() {
    std::erase_if(objects, [](const auto& entry) { return entry.second["metadata"].contains("deletionTimestamp"); });
  }

  std::vector<std::string> terminating_pods() const {
    std::vector<std::string> out;
    for (const auto& [key, o] : objects) {
      if (o["metadata"].contains("deletionTimestamp")) out.push_back(o["metadata"]["name"]);
    }
    return out;
  }

  json& job() {
    for (auto& [key, o] : objects) {
      if (o["kind"] == "Job") return o;
    }
    throw std::runtime_error("no job");
  }

  // The launcher's pod ends with `message` in its termination log.
  void finish_launcher(const std::string& message, bool succeeded) {
    json& j = job();
    json pod;
    pod["apiVersion"] = "v1";
    pod["kind"] = "Pod";
    pod["metadata"]["name"] = j["metadata"]["name"].get<std::string>() + "-x" + std::to_string(++launches);
    pod["metadata"]["labels"] = j["spec"]["template"]["metadata"]["labels"];
    pod["metadata"]["creationTimestamp"] = rfc3339_utc(now);
    pod["status"]["phase"] = succeeded ? "Succeeded" : "Failed";
    json terminated;
    terminated["exitCode"] = succeeded ? 0 : 1;
    terminated["message"] = message;
    json container;
    container["name"] = "launcher";
    container["state"]["terminated"] = terminated;
    pod["status"]["containerStatuses"] = json::array({container});
    objects["Pod/" + pod["metadata"]["name"].get<std::string>()] = pod;
    j["status"] = {{"conditions", {{{"type", succeeded ? "Complete" : "Failed"}, {"status", "True"}}}}};
  }

  std::string result_for(const std::string& id, double throughput) {
    const auto status = decode_status(run["status"]);
    const CaseSpec c = [&] {
      for (const auto& p : plan_cases(decode_benchmark_run(run).value->spec)) {
        if (p.id == id) return p.spec;
      }
      throw std::runtime_error("no case " + id);
    }();
    ResultDocument doc;
    doc.case_ = c;
    doc.devices = c.devices();
    doc.global_batch_size = c.global_batch_size();
    doc.methodology.repeats = 3;
    const std::vector<double> repeats{throughput * 0.99, throughput, throughput * 1.01};
    doc.throughput = Throughput{"samples/s", summarize(repeats), repeats};
    doc.environment.backend = "cuda";
    return to_json(doc).dump();
  }

  BenchmarkRunStatus status() const { return *decode_status(run["status"]).value; }
};

json scaling_run(int backoff_limit = 0) {
  json doc = testing::minimal_run();
  doc["metadata"] = {{"name", "scaling"}, {"namespace", "bench"}};
  doc["spec"]["matrix"] = {{"nodes", {1, 2}}, {"gpusPerNode", {8}}, {"batchSizePerDevice", {128}}, {"precision", {"amp"}}};
  doc["spec"]["limits"] = {{"backoffLimit", backoff_limit}, {"caseTimeoutSeconds", 3600}};
  return doc;
}

TEST(Reconciler, InvalidRunIsMarkedAndNothingIsCreated) {
  json doc = scaling_run();
  doc["spec"]["matrix"]["precision"] = {"fp8"};
  FakeCluster cluster(doc);
  const Actions a = cluster.step();
  EXPECT_TRUE(a.create.empty());
  const auto s = cluster.status();
  EXPECT_EQ(s.phase, Phase::Failed);
  const Condition* invalid = find_condition(s.conditions, ConditionType::Invalid);
  ASSERT_NE(invalid, nullptr);
  EXPECT_THAT(invalid->message, HasSubstr("spec.matrix.precision[0]: \"fp8\" is not one of fp32, tf32, amp, bf16"));
  // Ready says why as well: it is the condition `kubectl wait` and most readers look at.
  const Condition* ready = find_condition(s.conditions, ConditionType::Ready);
  ASSERT_NE(ready, nullptr);
  EXPECT_EQ(ready->reason, "InvalidSpec");
  EXPECT_THAT(ready->message, HasSubstr("the spec is invalid: spec.matrix.precision[0]: \"fp8\""));
}

json command_run(int backoff_limit = 0) {
  json doc = scaling_run(backoff_limit);
  doc["spec"]["engine"] = "command";
  doc["spec"]["command"] = {"python3", "train.py"};
  return doc;
}

// A pod's only container ends: exit code, termination message, and the phase that follows.
void terminate_pod(json& pod, int exit_code, const std::string& message, const std::string& reason = "") {
  json terminated;
  terminated["exitCode"] = exit_code;
  terminated["message"] = message;
  terminated["reason"] = reason.empty() ? (exit_code == 0 ? "Completed" : "Error") : reason;
  json container;
  container["name"] = "worker";
  container["state"]["terminated"] = terminated;
  pod["status"] = json::object();
  pod["status"]["phase"] = exit_code == 0 ? "Succeeded" : "Failed";
  pod["status"]["containerStatuses"] = json::array({container});
}

// engine: command — one pod per node runs the user's command under dlbench-exec; no SSH Secret,
// hostfile or launcher; worker 0's termination message is the result.
TEST(Reconciler, CommandEngineRunsPodsPerNodeAndReadsWorkerZero) {
  FakeCluster cluster(command_run());
  const std::vector<std::pair<std::string, double>> cases{
      {"1x1-bs128-amp", 900.0}, {"1x8-bs128-amp", 7000.0}, {"2x8-bs128-amp", 13000.0}};
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto& [id, throughput] = cases[i];
    cluster.step();
    const auto pods = cluster.names("Pod");
    ASSERT_EQ(pods.size(), static_cast<std::size_t>(id.starts_with("2x") ? 2 : 1));
    EXPECT_TRUE(cluster.names("Secret").empty());
    EXPECT_TRUE(cluster.names("ConfigMap").empty());
    EXPECT_EQ(cluster.names("Service").size(), 1u);
    cluster.make_workers_ready();
    cluster.step();
    EXPECT_TRUE(cluster.names("Job").empty()) << "no launcher for engine: command";
    cluster.now += 2min;
    // Node 1 finishes first, node 0 then reports the case.
    for (auto& [key, o] : cluster.objects) {
      if (o["kind"] != "Pod") continue;
      const std::string name = o["metadata"]["name"];
      if (name.ends_with("-worker-1")) terminate_pod(o, 0, "");
    }
    cluster.step();
    EXPECT_EQ(cluster.status().results.size(), i) << "node 1 done, node 0 still running: the case goes on";
    EXPECT_FALSE(cluster.objects.empty());
    for (auto& [key, o] : cluster.objects) {
      if (o["kind"] == "Pod" && std::string(o["metadata"]["name"]).ends_with("-worker-0")) {
        terminate_pod(o, 0, cluster.result_for(id, throughput));
      }
    }
    cluster.step();
    EXPECT_TRUE(cluster.objects.empty()) << "children of a finished case are deleted";
  }
  const auto s = cluster.status();
  EXPECT_EQ(s.phase, Phase::Succeeded);
  ASSERT_EQ(s.results.size(), 3u);
  EXPECT_NEAR(*s.results[2].speedup, 13000.0 / 900.0, 1e-9);
}

// Each attempt's pods are under a PodDisruptionBudget from before they exist until the attempt
// ends, so that a drain waits for the case; the next attempt gets its own; --disruption-budgets
// false makes none.
TEST(Reconciler, EachAttemptHasADisruptionBudgetWhileItRuns) {
  FakeCluster cluster(scaling_run(1));
  const Actions first = cluster.step();
  const auto position = [&](const std::string& kind) {
    return std::find_if(first.create.begin(), first.create.end(), [&](const json& o) { return o["kind"] == kind; }) -
           first.create.begin();
  };
  EXPECT_LT(position("PodDisruptionBudget"), position("Pod")) << "made before any pod";
  EXPECT_THAT(cluster.names("PodDisruptionBudget"), ElementsAre("scaling-1x1-bs128-amp-a1-budget"));
  cluster.make_workers_ready();
  cluster.step();
  // Deleted mid-case (an admin unblocking a drain): made again; `drain --disable-eviction` is the way round.
  cluster.objects.erase("PodDisruptionBudget/scaling-1x1-bs128-amp-a1-budget");
  cluster.step();
  EXPECT_THAT(cluster.names("PodDisruptionBudget"), ElementsAre("scaling-1x1-bs128-amp-a1-budget"));
  cluster.finish_launcher("mpirun failed", false);
  cluster.step();
  EXPECT_TRUE(cluster.names("PodDisruptionBudget").empty()) << "the failed attempt's goes with its pods";
  cluster.step();
  EXPECT_EQ(cluster.status().progress.current_attempt, 2);
  EXPECT_THAT(cluster.names("PodDisruptionBudget"), ElementsAre("scaling-1x1-bs128-amp-a2-budget"));
  cluster.make_workers_ready();
  cluster.step();
  cluster.finish_launcher(cluster.result_for("1x1-bs128-amp", 900.0), true);
  cluster.step();
  cluster.step();
  EXPECT_THAT(cluster.names("PodDisruptionBudget"), ElementsAre("scaling-1x8-bs128-amp-a1-budget"));

  FakeCluster without(scaling_run(1));
  without.config.disruption_budgets = false;
  without.step();
  EXPECT_TRUE(without.names("PodDisruptionBudget").empty());
  EXPECT_FALSE(without.names("Pod").empty());
}

TEST(Reconciler, CommandEngineFailuresKeepTheirReasons) {
  // A Failed result from dlbench-exec (the script exited 1) is the case's result.
  {
    FakeCluster cluster(command_run());
    cluster.step();
    ResultDocument doc = *decode_result_document(json::parse(cluster.result_for("1x1-bs128-amp", 1.0))).value;
    doc.engine = Engine::command;
    doc.state = CaseState::Failed;
    doc.throughput.reset();
    doc.reason = "CommandFailed";
    doc.message = "the command exited with code 1 after 0 of 21 step markers; last output:\nboom";
    for (auto& [key, o] : cluster.objects) {
      if (o["kind"] == "Pod") terminate_pod(o, 1, to_json(doc).dump());
    }
    cluster.step();
    ASSERT_EQ(cluster.status().results.size(), 1u);
    EXPECT_EQ(cluster.status().results[0].reason, "CommandFailed");
    EXPECT_THAT(cluster.status().results[0].message, HasSubstr("boom"));
  }
  // Node 0's pod OOMKilled with no result: the pod's reason.
  {
    FakeCluster cluster(command_run());
    cluster.step();
    for (auto& [key, o] : cluster.objects) {
      if (o["kind"] == "Pod") terminate_pod(o, 137, "", "OOMKilled");
    }
    cluster.step();
    ASSERT_EQ(cluster.status().results.size(), 1u);
    EXPECT_EQ(cluster.status().results[0].reason, "OOMKilled");
    EXPECT_THAT(cluster.status().results[0].message, HasSubstr("exited with code 137"));
  }
  // Node 0 exited 0 but left no result document: never waits for the timeout.
  {
    FakeCluster cluster(command_run());
    cluster.step();
    for (auto& [key, o] : cluster.objects) {
      if (o["kind"] == "Pod") terminate_pod(o, 0, "");
    }
    cluster.step();
    ASSERT_EQ(cluster.status().results.size(), 1u);
    EXPECT_EQ(cluster.status().results[0].reason, "NoResult");
  }
  // The init container could not deliver dlbench-exec: said so.
  {
    FakeCluster cluster(command_run());
    cluster.step();
    for (auto& [key, o] : cluster.objects) {
      if (o["kind"] != "Pod") continue;
      json terminated{{"exitCode", 127}, {"reason", "Error"}, {"message", "dlbench-exec: not found"}};
      o["status"] = {{"phase", "Failed"},
                     {"initContainerStatuses", {{{"name", "dlbench-exec"}, {"state", {{"terminated", terminated}}}}}}};
    }
    cluster.step();
    ASSERT_EQ(cluster.status().results.size(), 1u);
    EXPECT_THAT(cluster.status().results[0].message, HasSubstr("init container dlbench-exec exited with code 127"));
  }
}

// The Started event says how the cases train: a spec that leaves the learning rate to the model
// (AlexNet's 0.01 at a global batch of 256 here) does not show it in the stored object.
TEST(Reconciler, TheStartedEventNamesTheLearningRateThatRuns) {
  json doc = testing::minimal_run();
  doc["spec"]["model"] = "alexnet";
  FakeCluster cluster(doc);
  const Actions a = cluster.step();
  const auto started = std::find_if(a.events.begin(), a.events.end(), [](const Event& e) { return e.reason == "Started"; });
  ASSERT_NE(started, a.events.end());
  EXPECT_THAT(started->message,
              HasSubstr("cases planned, sgd at the model's learning rate, 0.01 at a global batch of 256 and linearly less below it"));
}

TEST(Reconciler, RunsEveryCaseInOrderWithTheLauncherAfterItsWorkers) {
  FakeCluster cluster(scaling_run());
  const std::vector<std::pair<std::string, double>> cases{
      {"1x1-bs128-amp", 1000.0}, {"1x8-bs128-amp", 7600.0}, {"2x8-bs128-amp", 14400.0}};
  for (const auto& [id, throughput] : cases) {
    cluster.step();
    EXPECT_EQ(cluster.status().progress.current_case, id);
    EXPECT_EQ(cluster.status().phase, Phase::Running);
    EXPECT_TRUE(cluster.names("Job").empty()) << "launcher before its workers are Ready";
    const auto workers = cluster.names("Pod");
    EXPECT_EQ(workers.size(), static_cast<std::size_t>(id.starts_with("2x") ? 2 : 1));
    EXPECT_EQ(cluster.names("Secret").size(), 1u);
    EXPECT_EQ(cluster.names("Service").size(), 1u);
    cluster.step();  // nothing changed: still no launcher
    EXPECT_TRUE(cluster.names("Job").empty());
    cluster.make_workers_ready();
    cluster.step();
    ASSERT_EQ(cluster.names("Job").size(), 1u);
    EXPECT_THAT(cluster.names("Job")[0], HasSubstr(id + "-a1-launcher"));
    cluster.now += 5min;
    cluster.finish_launcher(cluster.result_for(id, throughput), true);
    cluster.step();
    EXPECT_TRUE(cluster.objects.empty()) << "children of a finished case are deleted";
  }
  const auto s = cluster.status();
  EXPECT_EQ(s.phase, Phase::Succeeded);
  ASSERT_EQ(s.results.size(), 3u);
  EXPECT_NEAR(*s.results[1].speedup, 7.6, 1e-9);
  EXPECT_NEAR(*s.results[2].scaling_efficiency, 14.4 / 16, 1e-9);
  EXPECT_EQ(s.best->case_id, "2x8-bs128-amp");
  EXPECT_EQ(s.progress.summary, "3/3");
  EXPECT_EQ(find_condition(s.conditions, ConditionType::Ready)->status, ConditionStatus::True);
  // Finished: reconciling again changes nothing and creates nothing.
  const Actions again = cluster.step();
  EXPECT_TRUE(again.create.empty());
  EXPECT_FALSE(again.status.has_value());
}

TEST(Reconciler, TheWorkersReasonBeatsTheLaunchers) {
  FakeCluster cluster(scaling_run(0));
  cluster.step();
  cluster.make_workers_ready();
  cluster.step();
  for (auto& [key, o] : cluster.objects) {
    if (o["kind"] == "Pod") {
      json terminated;
      terminated["exitCode"] = 137;
      terminated["reason"] = "OOMKilled";
      json container;
      container["name"] = "worker";
      container["state"]["terminated"] = terminated;
      o["status"] = json::object();
      o["status"]["phase"] = "Failed";
      o["status"]["containerStatuses"] = json::array({container});
    }
  }
  cluster.finish_launcher("mpirun noticed that process rank 0 exited on signal 9", false);
  const Actions a = cluster.step();
  const auto s = cluster.status();
  ASSERT_EQ(s.results.size(), 1u);
  EXPECT_EQ(s.results[0].state, CaseState::Failed);
  EXPECT_EQ(s.results[0].reason, "OOMKilled");
  EXPECT_THAT(s.results[0].message, HasSubstr("exited with code 137"));
  EXPECT_EQ(s.progress.current_case, "1x8-bs128-amp");  // the run goes on
  EXPECT_TRUE(std::any_of(a.events.begin(), a.events.end(), [](const Event& e) { return e.reason == "CaseFailed"; }));
}

TEST(Reconciler, RetriesWithFreshObjectsUpToTheBackoffLimit) {
  FakeCluster cluster(scaling_run(1));
  cluster.step();
  cluster.make_workers_ready();
  for (auto& [key, o] : cluster.objects) {
    if (o["kind"] == "Pod") o["status"] = {{"phase", "Failed"}, {"reason", "Evicted"}, {"message", "node had disk pressure"}};
  }
  cluster.step();
  EXPECT_EQ(cluster.status().progress.current_attempt, 2);
  EXPECT_TRUE(cluster.status().results.empty());
  EXPECT_TRUE(cluster.objects.empty());
  cluster.step();
  for (const auto& name : cluster.names("Pod")) EXPECT_THAT(name, HasSubstr("-a2-worker-"));
  // The second attempt fails the same way: now it is recorded, with both attempts.
  for (auto& [key, o] : cluster.objects) {
    if (o["kind"] == "Pod") o["status"] = {{"phase", "Failed"}, {"reason", "Evicted"}, {"message", "node had disk pressure"}};
  }
  cluster.step();
  const auto s = cluster.status();
  ASSERT_EQ(s.results.size(), 1u);
  EXPECT_EQ(s.results[0].reason, "Evicted");
  EXPECT_EQ(s.results[0].attempts, 2);
}

// A worker that cannot run the case's precision reports Unsupported: another attempt would fail
// the same way, so it is recorded at once although backoffLimit allows retries.
TEST(Reconciler, AnUnsupportedResultIsRecordedWithoutRetrying) {
  FakeCluster cluster(scaling_run(3));
  cluster.step();
  cluster.make_workers_ready();
  cluster.step();
  ResultDocument doc = *decode_result_document(json::parse(cluster.result_for("1x1-bs128-amp", 1.0))).value;
  doc.state = CaseState::Failed;
  doc.throughput.reset();
  doc.reason = "Unsupported";
  doc.message = "--precision amp on --backend cpu: not implemented";
  cluster.finish_launcher(to_json(doc).dump(), false);
  cluster.step();
  const auto s = cluster.status();
  ASSERT_EQ(s.results.size(), 1u);
  EXPECT_EQ(s.results[0].reason, "Unsupported");
  EXPECT_EQ(s.results[0].attempts, 1);
  EXPECT_EQ(s.progress.current_case, "1x8-bs128-amp");  // the run goes on with the next case
}

// spec.preflight: the self-test runs first, as a case of its own on the largest topology (its
// children named for it), with `dlbench-worker --self-test` in the launcher.
std::string self_test_document(bool passed) {
  SelfTestDocument doc;
  doc.nodes = 2;
  doc.devices = 16;
  doc.precisions = {"amp"};
  doc.state = passed ? CaseState::Succeeded : CaseState::Failed;
  doc.passed = passed ? 20 : 19;
  doc.failed = passed ? 0 : 1;
  doc.reason = passed ? "" : kReasonSelfTestFailed;
  doc.message = passed ? "20 checks passed, 0 skipped on 16 devices (cuda, nccl)"
                       : "1 of 20 checks failed on 16 devices (cuda, nccl), on ranks 11";
  if (!passed) doc.failed_ranks = {11};
  doc.environment.backend = "cuda";
  return to_json(doc).dump();
}

json preflight_run() {
  json run = scaling_run(2);
  run["spec"]["preflight"] = {{"selfTest", true}};
  return run;
}

TEST(Reconciler, APreflightSelfTestRunsFirstOnTheLargestTopology) {
  FakeCluster cluster(preflight_run());
  cluster.step();
  EXPECT_EQ(cluster.status().progress.current_case, "preflight-2x8");
  EXPECT_EQ(cluster.names("Pod").size(), 2u) << "two nodes";
  for (const auto& name : cluster.names("Pod")) EXPECT_THAT(name, HasSubstr("preflight-2x8-a1-worker"));
  cluster.make_workers_ready();
  cluster.step();
  ASSERT_EQ(cluster.names("Job").size(), 1u);
  const json command = cluster.job()["spec"]["template"]["spec"]["containers"][0]["command"];
  EXPECT_THAT(command.dump(), HasSubstr(R"("dlbench-worker","--self-test","--backend","cuda","--precision","amp")"));
  EXPECT_THAT(command.dump(), HasSubstr(R"("-np","16")"));
  cluster.finish_launcher(self_test_document(true), true);
  cluster.step();
  auto s = cluster.status();
  ASSERT_TRUE(s.preflight);
  EXPECT_EQ(s.preflight->state, CaseState::Succeeded);
  EXPECT_EQ(s.preflight->case_.devices(), 16);
  EXPECT_THAT(s.preflight->message, HasSubstr("20 checks passed"));
  EXPECT_TRUE(s.results.empty());
  EXPECT_TRUE(cluster.objects.empty()) << "the preflight's children are deleted";
  cluster.step();
  EXPECT_EQ(cluster.status().progress.current_case, "1x1-bs128-amp");
}

TEST(Reconciler, AFailedPreflightSkipsEveryCaseWithoutRetrying) {
  FakeCluster cluster(preflight_run());
  cluster.step();
  cluster.make_workers_ready();
  cluster.step();
  cluster.finish_launcher(self_test_document(false), false);
  const Actions a = cluster.step();
  const auto s = cluster.status();
  EXPECT_EQ(s.phase, Phase::Failed);
  EXPECT_EQ(s.preflight->state, CaseState::Failed);
  EXPECT_EQ(s.preflight->reason, kReasonSelfTestFailed);
  EXPECT_EQ(s.preflight->attempts, 1) << "a verdict, not retried with backoffLimit 2";
  ASSERT_EQ(s.results.size(), 3u);
  for (const auto& r : s.results) EXPECT_EQ(r.reason, kReasonPreflightFailed);
  EXPECT_EQ(find_condition(s.conditions, ConditionType::Failed)->reason, kReasonPreflightFailed);
  EXPECT_TRUE(std::any_of(a.events.begin(), a.events.end(), [](const Event& e) { return e.reason == "PreflightFailed"; }));
  EXPECT_TRUE(cluster.objects.empty());
  EXPECT_TRUE(cluster.step().create.empty()) << "nothing runs after a failed preflight";
}

TEST(Reconciler, AGangSchedulerWithoutItsPodGroupCrdFailsEveryCaseAtOnceSayingSo) {
  json run = scaling_run(3);
  run["spec"]["worker"]["gang"] = {{"scheduler", "volcano"}};
  FakeCluster cluster(run);
  cluster.pod_groups_served = false;
  for (int i = 0; i < 10; ++i) {
    const Actions a = cluster.step();
    EXPECT_TRUE(a.create.empty()) << "nothing is created that nothing would admit";
    if (cluster.status().phase == Phase::Failed) break;
  }
  const auto s = cluster.status();
  EXPECT_EQ(s.phase, Phase::Failed);
  ASSERT_EQ(static_cast<int>(s.results.size()), s.progress.total_cases);
  ASSERT_GT(s.progress.total_cases, 1);
  for (const auto& r : s.results) {
    EXPECT_EQ(r.state, CaseState::Failed);
    EXPECT_EQ(r.reason, "GangSchedulerUnavailable");
    EXPECT_EQ(r.attempts, 1) << "no attempt can change it: backoffLimit is not spent";
    EXPECT_THAT(r.message, HasSubstr("scheduling.volcano.sh/v1beta1"));
    EXPECT_THAT(r.message, HasSubstr("install Volcano"));
  }
  EXPECT_TRUE(cluster.objects.empty());

  // Served (the CRD installed): the same spec runs.
  FakeCluster served(run);
  served.step();
  EXPECT_FALSE(served.names("Pod").empty());
  EXPECT_TRUE(served.status().results.empty());
}

TEST(Reconciler, TimeoutSaysWhyWhenWorkersCannotBeScheduled) {
  FakeCluster cluster(scaling_run(0));
  cluster.step();
  for (auto& [key, o] : cluster.objects) {
    if (o["kind"] == "Pod") {
      o["status"] = {{"phase", "Pending"},
                     {"conditions",
                      {{{"type", "PodScheduled"}, {"status", "False"}, {"reason", "Unschedulable"},
                        {"message", "0/4 nodes are available: 4 Insufficient nvidia.com/gpu."}}}}};
    }
  }
  const Actions waiting = cluster.step();
  EXPECT_TRUE(cluster.status().results.empty()) << "unschedulable is not failed yet";
  ASSERT_TRUE(waiting.requeue_after.has_value());
  EXPECT_LE(*waiting.requeue_after, 60s);
  cluster.now += 3601s;
  cluster.step();
  const auto s = cluster.status();
  ASSERT_EQ(s.results.size(), 1u);
  EXPECT_EQ(s.results[0].reason, "Unschedulable");
  EXPECT_THAT(s.results[0].message, HasSubstr("Insufficient nvidia.com/gpu"));
}

// The launcher is told to stop the case when its limit is spent, counted from the attempt's start
// (the workers' wait is spent already): at that time by the cluster's clock, or what is left of
// the limit after its own start, whichever comes first; this operator waits
// kLauncherStopMarginSeconds more for it, and the repeats measured come back as a Timeout result
// that keeps them.
TEST(Reconciler, TheLauncherStopsTheCaseAtItsLimitAndTheRepeatsComeBackAsATimeout) {
  FakeCluster cluster(scaling_run(0));
  const TimePoint attempt_start = cluster.now;
  cluster.step();
  cluster.now += 100s;  // the workers' images pulled, sshd started
  cluster.make_workers_ready();
  cluster.step();
  const std::vector<std::string> command = cluster.job()["spec"]["template"]["spec"]["containers"][0]["command"];
  const auto stop = std::find(command.begin(), command.end(), "--stop-after");
  ASSERT_NE(stop, command.end());
  ASSERT_LT(stop + 5, command.end());
  EXPECT_EQ(*(stop + 1), "3500");
  EXPECT_EQ(*(stop + 2), "--stop-at");
  EXPECT_EQ(*(stop + 3), rfc3339_utc(attempt_start + 3600s));
  EXPECT_EQ(*(stop + 4), "--case-timeout");
  EXPECT_EQ(*(stop + 5), "3600");
  EXPECT_LT(stop, std::find(command.begin(), command.end(), "--")) << "dlbench launch's own option";

  cluster.now += 3500s + 2s;  // the limit is spent; the launcher is stopping the case
  cluster.step();
  EXPECT_TRUE(cluster.status().results.empty()) << "the launcher has its margin to hand back the repeats";
  auto timed_out = json::parse(cluster.result_for("1x1-bs128-amp", 1000.0));
  timed_out["state"] = "Failed";
  timed_out["reason"] = "Timeout";
  timed_out["message"] = timeout_message(3600, 3);
  cluster.now += 3s;
  cluster.finish_launcher(timed_out.dump(), false);
  cluster.step();
  const auto s = cluster.status();
  ASSERT_EQ(s.results.size(), 1u);
  const CaseResult& r = s.results[0];
  EXPECT_EQ(r.state, CaseState::Failed);
  EXPECT_EQ(r.reason, "Timeout");
  EXPECT_EQ(r.message, timeout_message(3600, 3));
  ASSERT_TRUE(r.throughput);
  EXPECT_EQ(r.throughput->repeats.size(), 3u) << "the repeats measured before the stop are kept";
}

// A worker killed mid-case (OOMKilled here; a node lost or drained the same way): mpirun stops the
// other ranks, and rank 0 writes the repeats it had measured (Stopped). The result keeps them under
// the worker's reason; the launcher is given kLauncherStopMarginSeconds from the worker's end to
// hand them back, and without a document after that the worker's reason stands alone.
TEST(Reconciler, AWorkerKilledMidCaseKeepsTheRepeatsRankZeroMeasuredUnderTheWorkersReason) {
  const auto kill_worker = [](FakeCluster& cluster) {
    for (auto& [key, o] : cluster.objects) {
      if (o["kind"] != "Pod" || o["metadata"]["labels"]["app.kubernetes.io/component"] != "worker") continue;
      json terminated{{"exitCode", 137}, {"reason", "OOMKilled"}, {"finishedAt", rfc3339_utc(cluster.now)}};
      o["status"] = {{"phase", "Failed"},
                     {"containerStatuses", json::array({{{"name", "worker"}, {"state", {{"terminated", terminated}}}}})}};
    }
  };
  FakeCluster cluster(scaling_run(0));
  cluster.step();
  cluster.make_workers_ready();
  cluster.step();
  ASSERT_EQ(cluster.names("Job").size(), 1u);
  kill_worker(cluster);
  cluster.now += 5s;
  cluster.step();
  EXPECT_TRUE(cluster.status().results.empty()) << "the launcher is stopping the ranks: its repeats are awaited";
  auto stopped = json::parse(cluster.result_for("1x1-bs128-amp", 1000.0));
  stopped["state"] = "Failed";
  stopped["reason"] = "Stopped";
  stopped["message"] = "stopped by SIGTERM after 3 repeats; mpirun noticed that process rank 0 exited on signal 9";
  cluster.finish_launcher(stopped.dump(), false);
  cluster.step();
  const auto s = cluster.status();
  ASSERT_EQ(s.results.size(), 1u);
  const CaseResult& r = s.results[0];
  EXPECT_EQ(r.state, CaseState::Failed);
  EXPECT_EQ(r.reason, "OOMKilled");
  EXPECT_THAT(r.message, HasSubstr("exited with code 137"));
  EXPECT_THAT(r.message, HasSubstr("stopped by SIGTERM after 3 repeats"));
  ASSERT_TRUE(r.throughput);
  EXPECT_EQ(r.throughput->repeats.size(), 3u) << "the repeats measured before the worker was killed are kept";

  // A launcher that hands back nothing: the worker's reason once the margin is spent.
  FakeCluster silent(scaling_run(0));
  silent.step();
  silent.make_workers_ready();
  silent.step();
  kill_worker(silent);
  silent.now += std::chrono::seconds(kLauncherStopMarginSeconds);
  silent.step();
  EXPECT_TRUE(silent.status().results.empty());
  silent.now += 1s;
  silent.step();
  ASSERT_EQ(silent.status().results.size(), 1u);
  EXPECT_EQ(silent.status().results[0].reason, "OOMKilled");
  EXPECT_FALSE(silent.status().results[0].throughput);
}

// engine: command, node 1's pod OOMKilled mid-case: node 0's command loses its peer and fails, and
// dlbench-exec writes the repeats it measured. Worker 0 is given the launcher's margin from the
// worker's end, and the result keeps its repeats under the worker's reason.
TEST(Reconciler, ACommandWorkerKilledMidCaseKeepsWhatWorkerZeroMeasured) {
  FakeCluster cluster(command_run());
  const auto pod_ending = [&](const std::string& suffix) -> json& {
    for (auto& [key, o] : cluster.objects) {
      if (o["kind"] == "Pod" && std::string(o["metadata"]["name"]).ends_with(suffix)) return o;
    }
    throw std::runtime_error("no pod " + suffix);
  };
  for (const std::string id : {"1x1-bs128-amp", "1x8-bs128-amp"}) {
    cluster.step();
    cluster.make_workers_ready();
    cluster.step();
    terminate_pod(pod_ending("-worker-0"), 0, cluster.result_for(id, 900.0));
    cluster.step();
  }
  cluster.step();
  cluster.make_workers_ready();
  cluster.step();
  json& killed = pod_ending("2x8-bs128-amp-a1-worker-1");
  terminate_pod(killed, 137, "", "OOMKilled");
  killed["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"] = rfc3339_utc(cluster.now);
  cluster.now += 5s;
  cluster.step();
  ASSERT_EQ(cluster.status().results.size(), 2u) << "worker 0's dlbench-exec may hold repeats: awaited";
  ResultDocument doc = *decode_result_document(json::parse(cluster.result_for("2x8-bs128-amp", 13000.0))).value;
  doc.engine = Engine::command;
  doc.state = CaseState::Failed;
  doc.reason = "CommandFailed";
  doc.message = "the command exited with code 1 after 3 repeats; last output:\nConnection reset by peer";
  terminate_pod(pod_ending("2x8-bs128-amp-a1-worker-0"), 1, to_json(doc).dump());
  cluster.step();
  const BenchmarkRunStatus status = cluster.status();
  ASSERT_EQ(status.results.size(), 3u);
  const CaseResult& r = status.results[2];
  EXPECT_EQ(r.reason, "OOMKilled");
  EXPECT_THAT(r.message, HasSubstr("-worker-1: container worker exited with code 137"));
  EXPECT_THAT(r.message, HasSubstr("Connection reset by peer"));
  ASSERT_TRUE(r.throughput);
  EXPECT_EQ(r.throughput->repeats.size(), 3u);
}

// With engine: command, worker 0's command may wait on a lost peer for minutes (NCCL's collectives
// do): given the margin to end on its own, worker 0 is then stopped (its pod deleted, which its
// dlbench-exec answers by stopping the command and writing the repeats it completed), and waited
// for until its grace is over; what it wrote is kept under the lost worker's reason.
// command_run()'s one-node cases measured, its 2x8 case created (not yet Ready), pods deleted
// gracefully (30 s) as on a node.
void run_to_the_two_node_command_case(FakeCluster& cluster) {
  cluster.pod_grace = 30s;
  for (const std::string id : {"1x1-bs128-amp", "1x8-bs128-amp"}) {
    cluster.step();
    cluster.make_workers_ready();
    cluster.step();
    terminate_pod(cluster.objects.at("Pod/" + child_names("scaling", id, 1).worker(0)), 0, cluster.result_for(id, 900.0));
    cluster.step();
  }
  cluster.step();
}

TEST(Reconciler, ACommandWorkerZeroThatRunsOnAfterItsPeerIsLostIsStoppedAndKeepsWhatItCompleted) {
  const auto to_the_two_node_case = [](FakeCluster& cluster) {
    run_to_the_two_node_command_case(cluster);
    cluster.make_workers_ready();
    cluster.place_workers("node-a");
    cluster.step();
    json& killed = cluster.objects.at("Pod/" + child_names("scaling", "2x8-bs128-amp", 1).worker(1));
    terminate_pod(killed, 137, "", "OOMKilled");
    killed["status"]["containerStatuses"][0]["state"]["terminated"]["finishedAt"] = rfc3339_utc(cluster.now);
  };
  const std::string worker_zero = "Pod/" + child_names("scaling", "2x8-bs128-amp", 1).worker(0);
  const auto stopping = [](const Actions& a) {
    return std::count_if(a.events.begin(), a.events.end(), [](const Event& e) { return e.reason == "StoppingWorkerZero"; });
  };

  FakeCluster cluster(command_run());
  to_the_two_node_case(cluster);
  cluster.now += 5s;
  Actions a = cluster.step();
  EXPECT_EQ(cluster.status().results.size(), 2u);
  EXPECT_FALSE(cluster.objects.at(worker_zero)["metadata"].contains("deletionTimestamp")) << "its own end awaited first";
  ASSERT_TRUE(a.requeue_after);
  EXPECT_EQ(*a.requeue_after, std::chrono::seconds(kLauncherStopMarginSeconds - 5 + 1)) << "looks again when the margin ends";
  EXPECT_EQ(stopping(a), 0);
  cluster.now += std::chrono::seconds(kLauncherStopMarginSeconds - 5 + 1);
  a = cluster.step();
  EXPECT_EQ(cluster.status().results.size(), 2u) << "what its dlbench-exec writes once stopped is awaited";
  EXPECT_TRUE(cluster.objects.at(worker_zero)["metadata"].contains("deletionTimestamp")) << "stopped";
  ASSERT_EQ(stopping(a), 1);
  const auto event = std::find_if(a.events.begin(), a.events.end(), [](const Event& e) { return e.reason == "StoppingWorkerZero"; });
  EXPECT_EQ(event->type, "Warning");
  EXPECT_THAT(event->message, HasSubstr("2x8-bs128-amp attempt 1: worker scaling-2x8-bs128-amp-a1-worker-1 ended mid-case and "
                                        "worker 0's command runs on"));
  cluster.now += 2s;
  a = cluster.step();
  EXPECT_EQ(stopping(a), 0) << "asked once";
  EXPECT_EQ(*a.requeue_after, 30s - 2s + std::chrono::seconds(kLauncherStopMarginSeconds) + 1s)
      << "looks again when its grace and the margin after it are over";
  // SIGTERM: dlbench-exec stops the command 10 s later and writes the 2 repeats it completed.
  cluster.now += 8s;
  ResultDocument doc = *decode_result_document(json::parse(cluster.result_for("2x8-bs128-amp", 13000.0))).value;
  doc.engine = Engine::command;
  doc.state = CaseState::Failed;
  doc.reason = "Interrupted";
  doc.message = "stopped by a signal after 9 of 21 step markers; 2 of 3 repeats complete, kept here unjudged";
  doc.throughput->repeats.pop_back();
  terminate_pod(cluster.objects.at(worker_zero), 1, to_json(doc).dump());
  cluster.step();
  BenchmarkRunStatus status = cluster.status();
  ASSERT_EQ(status.results.size(), 3u);
  EXPECT_EQ(status.results[2].reason, "OOMKilled");
  EXPECT_THAT(status.results[2].message, HasSubstr("-worker-1: container worker exited with code 137"));
  EXPECT_THAT(status.results[2].message, HasSubstr("2 of 3 repeats complete, kept here unjudged"));
  ASSERT_TRUE(status.results[2].throughput);
  EXPECT_EQ(status.results[2].throughput->repeats.size(), 2u);

  // A worker 0 whose kubelet never stops it (its node lost too): waited for until its grace is
  // over and the margin after it; then the lost worker's reason alone.
  FakeCluster stuck(command_run());
  to_the_two_node_case(stuck);
  stuck.now += std::chrono::seconds(kLauncherStopMarginSeconds + 1);
  EXPECT_EQ(stopping(stuck.step()), 1);
  stuck.now += 30s + std::chrono::seconds(kLauncherStopMarginSeconds);
  stuck.step();
  EXPECT_EQ(stuck.status().results.size(), 2u);
  stuck.now += 1s;
  stuck.step();
  status = stuck.status();
  ASSERT_EQ(status.results.size(), 3u);
  EXPECT_EQ(status.results[2].reason, "OOMKilled");
  EXPECT_FALSE(status.results[2].throughput);
}

// engine: command has no launcher Job to say that the case began: once every worker was Ready a
// record does, and a worker gone since (its kubelet deletes its pod right after reporting its end,
// unseen by a cache that relisted) is lost, never made again; one lost before it ran is made again.
TEST(Reconciler, ACommandWorkerGoneOnceEveryWorkerRanIsLostNotMadeAgain) {
  FakeCluster cluster(command_run());
  run_to_the_two_node_command_case(cluster);
  const std::string worker_one = "Pod/" + child_names("scaling", "2x8-bs128-amp", 1).worker(1);
  const std::string record = "ConfigMap/" + child_names("scaling", "2x8-bs128-amp", 1).started;
  cluster.objects.erase(worker_one);
  EXPECT_THAT(cluster.step().presumed_gone, ::testing::IsEmpty()) << "made again, not taken as lost";
  EXPECT_TRUE(cluster.objects.contains(worker_one)) << "never ran: made again";
  EXPECT_FALSE(cluster.objects.contains(record));
  cluster.make_workers_ready();
  cluster.place_workers("node-a");
  cluster.step();
  ASSERT_TRUE(cluster.objects.contains(record)) << "every worker Ready: recorded";
  EXPECT_EQ(cluster.objects.at(record)["data"]["everyWorkerReadyAt"], rfc3339_utc(cluster.now));
  EXPECT_EQ(cluster.objects.at(record)["metadata"]["labels"]["dlbench.io/case"], "2x8-bs128-amp");

  cluster.objects.erase(worker_one);
  cluster.now += 1s;
  const Actions a = cluster.step();
  // The caches may lag one another: the controller confirms the pod is gone before acting.
  EXPECT_EQ(a.presumed_gone, (std::vector<ObjectRef>{{"Pod", worker_one.substr(4)}}));
  EXPECT_FALSE(cluster.objects.contains(worker_one)) << "lost, not made again";
  EXPECT_EQ(cluster.status().results.size(), 2u);
  EXPECT_TRUE(std::any_of(a.events.begin(), a.events.end(), [](const Event& e) { return e.reason == "StoppingWorkerZero"; }))
      << "no end time to wait from: worker 0 is stopped at once";
  ResultDocument doc = *decode_result_document(json::parse(cluster.result_for("2x8-bs128-amp", 13000.0))).value;
  doc.engine = Engine::command;
  doc.state = CaseState::Failed;
  doc.reason = "Interrupted";
  doc.message = "stopped by a signal after 7 of 21 step markers; 1 of 3 repeats complete, kept here unjudged";
  doc.throughput->repeats.resize(1);
  terminate_pod(cluster.objects.at("Pod/" + child_names("scaling", "2x8-bs128-amp", 1).worker(0)), 1, to_json(doc).dump());
  cluster.step();
  const BenchmarkRunStatus status = cluster.status();
  ASSERT_EQ(status.results.size(), 3u);
  EXPECT_EQ(status.results[2].reason, kReasonWorkerDeleted);
  EXPECT_THAT(status.results[2].message, HasSubstr("-a1-worker-1 was deleted mid-case: its pod is gone; stopped by a signal"));
  ASSERT_TRUE(status.results[2].throughput);
  EXPECT_EQ(status.results[2].throughput->repeats.size(), 1u);
}

// A worker deleted mid-case by someone else (here a drain, through the Eviction API): its end is the
// deletion's doing, and the result says so, with the cluster's word for the disruption; retried.
TEST(Reconciler, AWorkerDeletedMidCaseIsWorkerDeletedWithTheDisruption) {
  FakeCluster cluster(scaling_run(1));
  cluster.step();
  cluster.make_workers_ready();
  cluster.step();
  for (auto& [key, o] : cluster.objects) {
    if (o["kind"] != "Pod" || o["metadata"]["labels"]["app.kubernetes.io/component"] != "worker") continue;
    o["metadata"]["deletionTimestamp"] = rfc3339_utc(cluster.now + 30s);
    json terminated{{"exitCode", 143}, {"reason", "Error"}, {"finishedAt", rfc3339_utc(cluster.now)}};
    o["status"] = {{"phase", "Failed"},
                   {"conditions", {{{"type", "DisruptionTarget"}, {"status", "True"}, {"reason", "EvictionByEvictionAPI"},
                                    {"message", "Eviction API: evicting"}}}},
                   {"containerStatuses", json::array({{{"name", "worker"}, {"state", {{"terminated", terminated}}}}})}};
  }
  cluster.finish_launcher("mpirun noticed that process rank 0 exited on signal 9", false);
  const Actions a = cluster.step();
  EXPECT_EQ(cluster.status().progress.current_attempt, 2) << "retried";
  const auto failed = std::find_if(a.events.begin(), a.events.end(), [](const Event& e) { return e.reason == "AttemptFailed"; });
  ASSERT_NE(failed, a.events.end());
  EXPECT_THAT(failed->message, HasSubstr(std::string(kReasonWorkerDeleted) + ": worker "));
  EXPECT_THAT(failed->message, HasSubstr("-a1-worker-0 was deleted mid-case (EvictionByEvictionAPI: Eviction API: evicting): "
                                         "container worker exited with code 143"));

  // Its kubelet removes the pod right after reporting its end: a cache may never show the end. A
  // worker gone while the launcher runs is lost, not made again (it would join no job), and what
  // rank 0 kept comes back with the launcher.
  FakeCluster vanished(scaling_run(0));
  vanished.step();
  vanished.make_workers_ready();
  vanished.step();
  const std::vector<std::string> workers = vanished.names("Pod");
  ASSERT_EQ(workers.size(), 1u);
  vanished.objects.erase("Pod/" + workers[0]);
  const Actions waiting = vanished.step();
  EXPECT_TRUE(waiting.create.empty()) << json(waiting.create).dump();
  EXPECT_TRUE(vanished.status().results.empty()) << "the launcher is stopping the ranks";
  auto stopped = json::parse(vanished.result_for("1x1-bs128-amp", 1000.0));
  stopped["state"] = "Failed";
  stopped["reason"] = "Stopped";
  stopped["message"] = "stopped by SIGTERM after 3 repeats";
  vanished.finish_launcher(stopped.dump(), false);
  vanished.step();
  const BenchmarkRunStatus status = vanished.status();
  ASSERT_EQ(status.results.size(), 1u);
  const CaseResult& r = status.results[0];
  EXPECT_EQ(r.reason, kReasonWorkerDeleted);
  EXPECT_EQ(r.message, "worker " + workers[0] + " was deleted mid-case: its pod is gone; stopped by SIGTERM after 3 repeats");
  ASSERT_TRUE(r.throughput);
  EXPECT_EQ(r.throughput->repeats, (std::vector<double>{990.0, 1000.0, 1010.0}));
}

// Stopped at its deadline before rank 0 had a repeat, the launcher has no document: its words
// still say Timeout. A launcher that never ends is timed out kLauncherStopMarginSeconds after the
// limit, by this operator.
TEST(Reconciler, ALauncherStoppedWithoutAResultIsATimeoutAndOneThatNeverEndsIsTimedOutAfterItsMargin) {
  FakeCluster cluster(scaling_run(0));
  cluster.step();
  cluster.make_workers_ready();
  cluster.step();
  cluster.finish_launcher(timeout_message(3600) + "; no result document (exit code 143): mpirun: Forwarding signal 15",
                          false);
  cluster.step();
  ASSERT_EQ(cluster.status().results.size(), 1u);
  EXPECT_EQ(cluster.status().results[0].reason, "Timeout");
  EXPECT_THAT(cluster.status().results[0].message, HasSubstr("no result document (exit code 143)"));

  cluster.step();  // the next case
  cluster.make_workers_ready();
  cluster.step();
  ASSERT_EQ(cluster.names("Job").size(), 1u);
  cluster.now += 3600s + std::chrono::seconds(kLauncherStopMarginSeconds) - 1s;
  cluster.step();
  EXPECT_EQ(cluster.status().results.size(), 1u);
  cluster.now += 2s;
  cluster.step();
  ASSERT_EQ(cluster.status().results.size(), 2u);
  EXPECT_EQ(cluster.status().results[1].reason, "Timeout");
  EXPECT_EQ(cluster.status().results[1].message, timeout_message(3600));
}

TEST(Reconciler, ARestartedOperatorNeverRunsAFinishedCaseAgain) {
  FakeCluster cluster(scaling_run());
  cluster.step();
  cluster.make_workers_ready();
  cluster.step();
  cluster.finish_launcher(cluster.result_for("1x1-bs128-amp", 1000.0), true);
  cluster.step();
  // A new operator process: only the run's status and the (empty) world survive.
  FakeCluster restarted(cluster.run);
  restarted.run = cluster.run;
  restarted.step();
  for (const auto& name : restarted.names("Pod")) EXPECT_THAT(name, HasSubstr("1x8-bs128-amp-a1"));
  EXPECT_EQ(restarted.status().results.size(), 1u);
}

TEST(Reconciler, LeftoversOfOtherCasesAreRemoved) {
  FakeCluster cluster(scaling_run());
  cluster.objects["Pod/stale"] = {{"kind", "Pod"},
                                  {"metadata",
                                   {{"name", "stale"},
                                    {"labels", {{"dlbench.io/case", "9x9-bs1-fp32"}, {"dlbench.io/attempt", "1"},
                                                {"app.kubernetes.io/component", "worker"}}}}}};
  const Actions a = cluster.step();
  EXPECT_NE(std::find(a.remove.begin(), a.remove.end(), ObjectRef{"Pod", "stale"}), a.remove.end());
}

TEST(Reconciler, RunFailsOnlyWhenNoCaseSucceeded) {
  json doc = scaling_run(0);
  doc["spec"]["matrix"]["nodes"] = {1};
  doc["spec"]["matrix"]["gpusPerNode"] = {1};
  FakeCluster cluster(doc);
  cluster.step();
  cluster.make_workers_ready();
  cluster.step();
  cluster.finish_launcher("no result document (exit code 1): boom", false);
  cluster.step();
  const auto s = cluster.status();
  EXPECT_EQ(s.phase, Phase::Failed);
  EXPECT_EQ(s.results[0].reason, "LauncherFailed");
  EXPECT_THAT(s.results[0].message, HasSubstr("boom"));
  ASSERT_NE(find_condition(s.conditions, ConditionType::Failed), nullptr);
}

}  // namespace
}  // namespace dlbench::operator_

namespace dlbench::operator_ {
namespace {

// The launcher pod itself OOMKilled or Evicted: the node's reason, not LauncherFailed with an
// empty message.
TEST(Reconciler, ALauncherPodsOwnFailureKeepsItsReason) {
  for (const std::string reason : {"OOMKilled", "Evicted"}) {
    FakeCluster cluster(scaling_run(0));
    cluster.step();
    cluster.make_workers_ready();
    cluster.step();
    cluster.finish_launcher("", false);
    for (auto& [key, o] : cluster.objects) {
      if (o["kind"] != "Pod" || o["metadata"]["labels"]["app.kubernetes.io/component"] != "launcher") continue;
      if (reason == "Evicted") {
        o["status"] = {{"phase", "Failed"}, {"reason", "Evicted"}, {"message", "The node was low on resource: memory."}};
      } else {
        o["status"]["containerStatuses"][0]["state"]["terminated"] = {{"exitCode", 137}, {"reason", "OOMKilled"}};
      }
    }
    cluster.step();
    const auto s = cluster.status();
    ASSERT_EQ(s.results.size(), 1u) << reason;
    EXPECT_EQ(s.results[0].reason, reason);
    EXPECT_THAT(s.results[0].message, HasSubstr("launcher "));
    EXPECT_THAT(s.results[0].message, HasSubstr(reason == "Evicted" ? "low on resource" : "code 137"));
  }
}

// A document for another case is CaseMismatch, as dlbench run says, not a launcher failure.
TEST(Reconciler, AResultForAnotherCaseIsCaseMismatch) {
  FakeCluster cluster(scaling_run(0));
  cluster.step();
  cluster.make_workers_ready();
  cluster.step();
  cluster.finish_launcher(cluster.result_for("2x8-bs128-amp", 900), true);  // while the 1x1 baseline runs
  cluster.step();
  const auto s = cluster.status();
  ASSERT_EQ(s.results.size(), 1u);
  EXPECT_EQ(s.results[0].reason, "CaseMismatch");
  EXPECT_THAT(s.results[0].message, HasSubstr("ran 2x8-bs128-amp instead of 1x1-bs128-amp"));
}

// Fixing the spec ends Invalid=True: it does not stay beside Ready.
TEST(Reconciler, AFixedSpecClearsInvalidAndRuns) {
  json bad = scaling_run();
  bad["spec"]["matrix"]["precision"] = {"fp8"};
  FakeCluster cluster(bad);
  cluster.step();
  ASSERT_EQ(cluster.status().phase, Phase::Failed);
  cluster.run["spec"]["matrix"]["precision"] = {"amp"};
  cluster.run["metadata"]["generation"] = 2;
  cluster.step();
  const auto s = cluster.status();
  EXPECT_EQ(s.phase, Phase::Running);
  const Condition* invalid = find_condition(s.conditions, ConditionType::Invalid);
  ASSERT_NE(invalid, nullptr);
  EXPECT_EQ(invalid->status, ConditionStatus::False);
  EXPECT_EQ(invalid->observed_generation, 2);
  EXPECT_FALSE(cluster.names("Pod").empty());
}

// Not admitted (the operator's case slots are taken): Pending, Queued, nothing created, and no
// case timeout running; admitted later, it starts.
TEST(Reconciler, AQueuedRunCreatesNothingUntilAdmitted) {
  FakeCluster cluster(scaling_run(0));
  World w = cluster.world();
  w.admission = {false, "waiting for a case slot: 1 of 1 running"};
  const Actions a = reconcile(cluster.run, w, OperatorConfig{}, [] { return SshKeyPair{"p", "q"}; });
  EXPECT_TRUE(a.create.empty());
  ASSERT_TRUE(a.status.has_value());
  EXPECT_EQ(a.status->phase, Phase::Pending);
  const Condition* progressing = find_condition(a.status->conditions, ConditionType::Progressing);
  ASSERT_NE(progressing, nullptr);
  EXPECT_EQ(progressing->reason, "Queued");
  EXPECT_THAT(progressing->message, HasSubstr("1 of 1 running"));
  EXPECT_TRUE(a.events.empty());
  cluster.run["status"] = to_json(*a.status);
  cluster.now += 2h;  // longer than caseTimeoutSeconds: waiting is not running
  cluster.step();
  EXPECT_EQ(cluster.status().phase, Phase::Running);
  EXPECT_TRUE(cluster.status().results.empty());
  EXPECT_FALSE(cluster.names("Pod").empty());
}

// ranAlone: false once another case's worker was seen on one of the case's nodes, even if that
// neighbour left before the result; true otherwise. The flag does not leak into the next case.
TEST(Reconciler, RanAloneRecordsWhetherANodeWasShared) {
  FakeCluster cluster(scaling_run(0));
  cluster.step();
  cluster.make_workers_ready();
  World shared = cluster.world();
  shared.shared_node = true;
  const Actions a = reconcile(cluster.run, shared, OperatorConfig{}, [] { return SshKeyPair{"p", "q"}; });
  ASSERT_TRUE(a.status.has_value());
  EXPECT_TRUE(a.status->progress.shared_node);
  cluster.run["status"] = to_json(*a.status);
  cluster.step();
  cluster.finish_launcher(cluster.result_for("1x1-bs128-amp", 120), true);
  cluster.step();
  ASSERT_EQ(cluster.status().results.size(), 1u);
  EXPECT_EQ(cluster.status().results[0].state, CaseState::Succeeded);
  EXPECT_EQ(cluster.status().results[0].ran_alone, false);
  EXPECT_FALSE(cluster.status().progress.shared_node);
  cluster.step();
  cluster.make_workers_ready();
  cluster.step();
  cluster.finish_launcher(cluster.result_for("1x8-bs128-amp", 900), true);
  cluster.step();
  ASSERT_EQ(cluster.status().results.size(), 2u);
  EXPECT_EQ(cluster.status().results[1].state, CaseState::Succeeded);
  EXPECT_EQ(cluster.status().results[1].ran_alone, true);
}

// The first attempt of the first case failed with its worker still running on node-a: deleted,
// it stays Terminating (a 30 s grace) while attempt 2 is current.
FakeCluster first_attempt_failed_with_its_worker_running() {
  FakeCluster cluster(scaling_run(1));
  cluster.pod_grace = 30s;
  cluster.step();
  cluster.make_workers_ready();
  cluster.place_workers("node-a");
  cluster.step();
  cluster.finish_launcher("mpirun: a rank failed", false);
  cluster.step();
  return cluster;
}

// A pod deleted on its node runs on until its kubelet has stopped it (its grace, 30 s by default):
// the next attempt's pods could train beside it. Nothing of the next attempt is made until the
// pods before it have ended, and the Progressing condition says so; no case clock runs meanwhile.
TEST(Reconciler, TheNextAttemptStartsOnlyOnceThePodsBeforeItHaveEnded) {
  FakeCluster cluster = first_attempt_failed_with_its_worker_running();
  ASSERT_EQ(cluster.status().progress.current_attempt, 2);
  const std::vector<std::string> ending = cluster.terminating_pods();
  ASSERT_EQ(ending.size(), 1u) << "the first attempt's worker, Terminating";
  EXPECT_THAT(ending[0], HasSubstr("-a1-worker-0"));
  for (int pass = 0; pass < 3; ++pass) {
    cluster.now += 10s;
    const Actions a = cluster.step();
    EXPECT_TRUE(a.create.empty()) << "pass " << pass << ": " << json(a.create).dump();
    EXPECT_EQ(a.requeue_after, 1s);
    const BenchmarkRunStatus status = cluster.status();
    const Condition* progressing = find_condition(status.conditions, ConditionType::Progressing);
    ASSERT_NE(progressing, nullptr);
    EXPECT_EQ(progressing->reason, kReasonAwaitingPreviousPods);
    EXPECT_EQ(progressing->message, "1x1-bs128-amp attempt 2 starts once the pods before it have ended: " + ending[0]);
  }
  cluster.end_terminating_pods();
  cluster.step();
  const auto pods = cluster.names("Pod");
  ASSERT_EQ(pods.size(), 1u);
  EXPECT_THAT(pods[0], HasSubstr("-a2-worker-0"));
  const BenchmarkRunStatus status = cluster.status();
  const Condition* progressing = find_condition(status.conditions, ConditionType::Progressing);
  ASSERT_NE(progressing, nullptr);
  EXPECT_EQ(progressing->reason, "CaseRunning");
  EXPECT_EQ(progressing->message, "1x1-bs128-amp attempt 2");
  // Its clock starts at its own pods: the 30 s waited for the pods before it are not the case's.
  cluster.make_workers_ready();
  cluster.now += std::chrono::seconds(decode_benchmark_run(cluster.run).value->spec.limits.case_timeout_seconds) - 5s;
  cluster.step();
  EXPECT_TRUE(cluster.status().results.empty()) << "timed out counting the wait";
}

// A pod that its kubelet does not stop (a lost node keeps it Terminating) is waited for until
// kPreviousPodsOverdueSeconds past its grace; the attempt then starts beside it, says so once,
// and its result is not ranAlone where that pod shares its node.
TEST(Reconciler, APodPastItsGraceIsWaitedForNoLongerAndTheCaseBesideItIsNotRanAlone) {
  FakeCluster cluster = first_attempt_failed_with_its_worker_running();
  ASSERT_EQ(cluster.terminating_pods().size(), 1u);
  cluster.now += 30s + std::chrono::seconds(kPreviousPodsOverdueSeconds);
  EXPECT_TRUE(cluster.step().create.empty()) << "not yet past the margin";
  cluster.now += 1s;
  const Actions started = cluster.step();
  const auto announced = std::find_if(started.events.begin(), started.events.end(),
                                      [](const Event& e) { return e.reason == "PreviousPodsNotEnded"; });
  ASSERT_NE(announced, started.events.end());
  EXPECT_EQ(announced->type, "Warning");
  EXPECT_THAT(announced->message, HasSubstr("1x1-bs128-amp attempt 2 starts once the pods before it have ended: " +
                                            cluster.terminating_pods()[0]));
  EXPECT_THAT(announced->announces, HasSubstr("-a2-worker-0"));
  std::vector<std::string> created;
  for (const auto& o : started.create) created.push_back(o["metadata"]["name"]);
  EXPECT_THAT(created, ::testing::Contains(HasSubstr("-a2-worker-0")));
  // Its workers land on the stuck pod's node (the old one is placed there already).
  for (auto& [key, o] : cluster.objects) {
    if (key.find("-a2-worker-") != std::string::npos) {
      o["spec"]["nodeName"] = "node-a";
      o["status"] = {{"phase", "Running"}, {"conditions", {{{"type", "Ready"}, {"status", "True"}}}}};
    }
  }
  cluster.step();
  EXPECT_TRUE(cluster.status().progress.shared_node);
  cluster.finish_launcher(cluster.result_for("1x1-bs128-amp", 120), true);
  cluster.step();
  ASSERT_EQ(cluster.status().results.size(), 1u);
  EXPECT_EQ(cluster.status().results[0].state, CaseState::Succeeded);
  EXPECT_EQ(cluster.status().results[0].ran_alone, false);
}

}  // namespace
}  // namespace dlbench::operator_
