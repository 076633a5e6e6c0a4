// The operator's pure parts: child names, SSH keys, and the objects of one case attempt.
#include <algorithm>
#include <filesystem>
#include <map>
#include <fstream>
#include <regex>
#include <set>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "../support/process.hpp"
#include "../support/test_support.hpp"
#include "child_names.hpp"
#include "dlbench/core/codec.hpp"
#include "dlbench/core/status.hpp"
#include "manifests.hpp"
#include "ssh_keys.hpp"

namespace dlbench::operator_ {
namespace {

using ::testing::Contains;
using ::testing::HasSubstr;
using ::testing::Not;
using nlohmann::json;

bool is_dns_label(const std::string& s) {
  static const std::regex pattern("^[a-z0-9]([-a-z0-9]*[a-z0-9])?$");
  return s.size() <= 63 && std::regex_match(s, pattern);
}

BenchmarkRun sample_run(bool rdma = true) {
  json doc = testing::minimal_run();
  doc["metadata"] = {{"name", "resnet50-scaling"}, {"namespace", "bench"}, {"uid", "1234-abcd"}};
  doc["spec"]["worker"] = {{"image", "registry.local/dlbench-worker:1"},
                           {"nodeSelector", {{"nvidia.com/gpu.product", "H100"}}},
                           {"tolerations", {{{"key", "nvidia.com/gpu"}, {"operator", "Exists"}, {"effect", "NoSchedule"}}}},
                           {"env", {{{"name", "NCCL_DEBUG"}, {"value", "WARN"}}}},
                           {"schedulerName", "volcano"},
                           {"priorityClassName", "benchmarks"}};
  if (rdma) doc["spec"]["worker"]["rdma"] = {{"resource", "rdma/hca_shared_devices_a"}, {"perNode", 1}};
  doc["spec"]["limits"] = {{"caseTimeoutSeconds", 900}};
  return *decode_benchmark_run(doc).value;
}

const CaseSpec k2x8{2, 8, 128, Precision::amp};

TEST(ChildNames, DeterministicAndShort) {
  const ChildNames n = child_names("resnet50-scaling", "2x8-bs128-amp", 1);
  EXPECT_EQ(n.prefix, "resnet50-scaling-2x8-bs128-amp-a1");
  EXPECT_EQ(n.worker(1), "resnet50-scaling-2x8-bs128-amp-a1-worker-1");
  EXPECT_EQ(n.launcher, "resnet50-scaling-2x8-bs128-amp-a1-launcher");
  EXPECT_EQ(n.service, "resnet50-scaling-2x8-bs128-amp-a1-workers");
  EXPECT_EQ(child_names("resnet50-scaling", "2x8-bs128-amp", 2).prefix, "resnet50-scaling-2x8-bs128-amp-a2");
}

TEST(ChildNames, LongNamesAreCutWithAHashAndStayDistinct) {
  const std::string long_run(63, 'r');
  std::set<std::string> prefixes;
  for (const std::string& run : {long_run, long_run.substr(0, 62) + "s"}) {
    const ChildNames n = child_names(run, "16x8-bs65536-bf16", 3);
    for (const auto& name : {n.secret, n.hostfile, n.service, n.launcher, n.worker(1023)}) {
      EXPECT_TRUE(is_dns_label(name)) << name;
    }
    EXPECT_EQ(n.prefix, child_names(run, "16x8-bs65536-bf16", 3).prefix);
    prefixes.insert(n.prefix);
  }
  EXPECT_EQ(prefixes.size(), 2u);
  EXPECT_TRUE(std::regex_search(*prefixes.begin(), std::regex("-[0-9a-f]{8}$")));
}

TEST(SshKeys, OpenSshDerivesTheSamePublicKey) {
  const SshKeyPair keys = generate_ssh_key_pair("dlbench-test");
  EXPECT_TRUE(keys.private_key_pem.starts_with("-----BEGIN EC PRIVATE KEY-----"));
  EXPECT_TRUE(keys.public_key.starts_with("ecdsa-sha2-nistp256 AAAA"));
  const auto dir = std::filesystem::temp_directory_path() / ("dlbench-ssh-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "id") << keys.private_key_pem;
  std::filesystem::permissions(dir / "id", std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  const auto derived = testing::run_shell("ssh-keygen -y -f id", dir.string());
  std::filesystem::remove_all(dir);
  ASSERT_EQ(derived.exit_code, 0) << derived.err;
  const std::string ours = keys.public_key.substr(0, keys.public_key.rfind(' '));
  EXPECT_EQ(derived.out.substr(0, ours.size()), ours);
  EXPECT_NE(generate_ssh_key_pair().public_key, keys.public_key);  // fresh per attempt
}

TEST(Manifests, WorkerPodRequestsDevicesAndPassesSchedulingThrough) {
  const BenchmarkRun run = sample_run();
  const json pod = build_worker_pod(run, k2x8, 1, 1, OperatorConfig{});
  EXPECT_EQ(pod["metadata"]["name"], "resnet50-scaling-2x8-bs128-amp-a1-worker-1");
  EXPECT_EQ(pod["metadata"]["namespace"], "bench");
  const json owner = pod["metadata"]["ownerReferences"][0];
  EXPECT_EQ(owner["kind"], "BenchmarkRun");
  EXPECT_EQ(owner["uid"], "1234-abcd");
  EXPECT_EQ(owner["controller"], true);
  const json& spec = pod["spec"];
  EXPECT_EQ(spec["hostname"], pod["metadata"]["name"]);
  EXPECT_EQ(spec["subdomain"], "resnet50-scaling-2x8-bs128-amp-a1-workers");
  EXPECT_EQ(spec["restartPolicy"], "Never");
  const json& c = spec["containers"][0];
  EXPECT_EQ(c["image"], "registry.local/dlbench-worker:1");
  EXPECT_EQ(c["resources"]["limits"]["nvidia.com/gpu"], "8");
  EXPECT_EQ(c["resources"]["limits"]["rdma/hca_shared_devices_a"], "1");
  // Devices are asked for exactly; CPU and memory are requested by default (never BestEffort)
  // and left without limits unless the run asks for Guaranteed QoS.
  EXPECT_EQ(c["resources"]["requests"], json({{"nvidia.com/gpu", "8"}, {"rdma/hca_shared_devices_a", "1"},
                                              {"cpu", "1"}, {"memory", "2Gi"}}));
  EXPECT_EQ(c["resources"]["limits"], json({{"nvidia.com/gpu", "8"}, {"rdma/hca_shared_devices_a", "1"}}));
  EXPECT_THAT(c["securityContext"]["capabilities"]["add"].get<std::vector<std::string>>(), Contains("IPC_LOCK"));
  EXPECT_EQ(c["readinessProbe"]["tcpSocket"]["port"], 22);
  EXPECT_EQ(spec["nodeSelector"]["nvidia.com/gpu.product"], "H100");
  EXPECT_EQ(spec["tolerations"][0]["key"], "nvidia.com/gpu");
  EXPECT_EQ(spec["schedulerName"], "volcano");
  EXPECT_EQ(spec["priorityClassName"], "benchmarks");
  EXPECT_EQ(c["env"][0]["name"], "NCCL_DEBUG");
}

TEST(Manifests, EveryLocalRankHasANamedMetricsPort) {
  OperatorConfig config;
  config.metrics_port = 9500;
  const json ports = build_worker_pod(sample_run(), k2x8, 1, 0, config)["spec"]["containers"][0]["ports"];
  ASSERT_EQ(ports.size(), 9u);  // ssh + one per GPU
  EXPECT_EQ(ports[0]["name"], "ssh");
  for (std::size_t r = 0; r < 8; ++r) {
    EXPECT_EQ(ports[r + 1]["name"], "metrics-" + std::to_string(r));
    EXPECT_EQ(ports[r + 1]["containerPort"], 9500 + static_cast<int>(r));  // what dlbench-worker binds: port + local rank
  }
  const auto command = launcher_command(sample_run(), k2x8, config);
  EXPECT_THAT(command, Contains("9500"));
}

// dlbench launch's own options, before the "--" that starts mpirun: stop the case when what is left
// of limits.caseTimeoutSeconds (sample_run: 900 s) is spent after its start, or at the attempt's
// deadline by the cluster's clock, whichever comes first; the Job's deadline is a backstop after.
TEST(Manifests, TheLauncherStopsTheCaseAtItsLimitToHandBackItsRepeats) {
  struct Stop {
    std::string after, at, case_timeout;
  };
  const auto stop_of = [](const std::vector<std::string>& command) {
    const auto end = std::find(command.begin(), command.end(), "--");
    const auto value = [&](const char* flag) -> std::string {
      const auto f = std::find(command.begin(), end, flag);
      return f == end || f + 1 == end ? "none" : *(f + 1);
    };
    return Stop{value("--stop-after"), value("--stop-at"), value("--case-timeout")};
  };
  const auto deadline = *parse_rfc3339("2026-12-05T21:40:00Z");
  const auto mine = stop_of(launcher_command(sample_run(), k2x8, OperatorConfig{}));
  EXPECT_EQ(mine.after, "900");  // no attempt clock yet: the whole limit from its start
  EXPECT_EQ(mine.at, "none");
  EXPECT_EQ(mine.case_timeout, "900");
  for (const std::int64_t left : {300, 1}) {
    const auto told = stop_of(launcher_command(sample_run(), k2x8, OperatorConfig{}, LauncherDeadline{left, deadline}));
    EXPECT_EQ(told.after, std::to_string(left));
    EXPECT_EQ(told.at, "2026-12-05T21:40:00Z");
    EXPECT_EQ(told.case_timeout, "900");
  }
  for (const std::int64_t left : {0, -5}) {  // spent already: this operator's deadline is the case's end
    const auto none = stop_of(launcher_command(sample_run(), k2x8, OperatorConfig{}, LauncherDeadline{left, deadline}));
    EXPECT_EQ(none.after, "none");
    EXPECT_EQ(none.at, "none");
    EXPECT_EQ(none.case_timeout, "none");
  }
  const json job = build_launcher_job(sample_run(), k2x8, 1, OperatorConfig{}, LauncherDeadline{600, deadline});
  const auto in_job = stop_of(job["spec"]["template"]["spec"]["containers"][0]["command"]);
  EXPECT_EQ(in_job.after, "600");
  EXPECT_EQ(in_job.at, "2026-12-05T21:40:00Z");
  EXPECT_EQ(job["spec"]["activeDeadlineSeconds"], 900 + kLauncherStopMarginSeconds);
}

// The launcher goes beside worker 0, whose node has the image, where it fits (a quick start; its
// --stop-at holds the deadline either way); the term selects this attempt's workers and nothing else.
TEST(Manifests, TheLauncherPrefersWorkerZerosNodeWhereTheImageIsPulledAlready) {
  const BenchmarkRun run = sample_run();
  const json job = build_launcher_job(run, k2x8, 1, OperatorConfig{});
  const json& terms =
      job["spec"]["template"]["spec"]["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"];
  ASSERT_EQ(terms.size(), 1u);
  EXPECT_EQ(terms[0]["podAffinityTerm"]["topologyKey"], "kubernetes.io/hostname");
  const json& wanted = terms[0]["podAffinityTerm"]["labelSelector"]["matchLabels"];
  const auto matches = [&](const json& labels) {
    for (const auto& [key, value] : wanted.items()) {
      if (!labels.contains(key) || labels[key] != value) return false;
    }
    return true;
  };
  EXPECT_TRUE(matches(build_worker_pod(run, k2x8, 1, 0, OperatorConfig{})["metadata"]["labels"]));
  EXPECT_TRUE(matches(build_worker_pod(run, k2x8, 1, 1, OperatorConfig{})["metadata"]["labels"]));
  EXPECT_FALSE(matches(build_worker_pod(run, k2x8, 2, 0, OperatorConfig{})["metadata"]["labels"]));  // another attempt
  EXPECT_FALSE(matches(build_worker_pod(run, CaseSpec{1, 8, 128, Precision::amp}, 1, 0, OperatorConfig{})["metadata"]["labels"]));
  EXPECT_FALSE(matches(job["spec"]["template"]["metadata"]["labels"]));  // not itself
  // Preferred, never required: a full node leaves the launcher to go elsewhere.
  EXPECT_FALSE(job["spec"]["template"]["spec"]["affinity"]["podAffinity"].contains(
      "requiredDuringSchedulingIgnoredDuringExecution"));
}

TEST(Manifests, NoRdmaMeansNoRdmaResourceAndNoIpcLock) {
  const json pod = build_worker_pod(sample_run(false), k2x8, 1, 0, OperatorConfig{});
  const json& c = pod["spec"]["containers"][0];
  EXPECT_FALSE(c["resources"]["limits"].contains("rdma/hca_shared_devices_a"));
  EXPECT_THAT(c["securityContext"]["capabilities"]["add"].get<std::vector<std::string>>(), Not(Contains("IPC_LOCK")));
  const BenchmarkRun no_image = [] {
    BenchmarkRun r = sample_run(false);
    r.spec.worker.image.clear();
    return r;
  }();
  EXPECT_EQ(build_worker_pod(no_image, k2x8, 1, 0, OperatorConfig{})["spec"]["containers"][0]["image"],
            OperatorConfig{}.default_worker_image);
}

TEST(Manifests, HostfileServiceAndSecret) {
  const BenchmarkRun run = sample_run();
  const json hostfile = build_hostfile(run, k2x8, 1);
  EXPECT_EQ(hostfile["data"]["hostfile"],
            "resnet50-scaling-2x8-bs128-amp-a1-worker-0.resnet50-scaling-2x8-bs128-amp-a1-workers.bench.svc slots=8\n"
            "resnet50-scaling-2x8-bs128-amp-a1-worker-1.resnet50-scaling-2x8-bs128-amp-a1-workers.bench.svc slots=8\n");
  const json service = build_worker_service(run, k2x8, 1);
  EXPECT_EQ(service["spec"]["clusterIP"], "None");
  EXPECT_EQ(service["spec"]["publishNotReadyAddresses"], true);
  const json pod_labels = build_worker_pod(run, k2x8, 1, 0, OperatorConfig{})["metadata"]["labels"];
  for (const auto& [key, value] : service["spec"]["selector"].items()) EXPECT_EQ(pod_labels[key], value) << key;
  // The selector does not catch the launcher or another attempt's workers.
  EXPECT_NE(build_launcher_job(run, k2x8, 1, OperatorConfig{})["spec"]["template"]["metadata"]["labels"]
                ["app.kubernetes.io/component"],
            service["spec"]["selector"]["app.kubernetes.io/component"]);
  EXPECT_NE(child_labels(run, k2x8, 2, "worker"), service["spec"]["selector"]);
  const SshKeyPair keys{"PRIVATE", "ecdsa-sha2-nistp256 AAAA test"};
  const json secret = build_ssh_secret(run, k2x8, 1, keys);
  EXPECT_EQ(secret["stringData"]["id_ecdsa"], "PRIVATE");
  EXPECT_EQ(secret["stringData"]["authorized_keys"], "ecdsa-sha2-nistp256 AAAA test\n");
}

// A drain asks the Eviction API for each pod; the budget makes it wait for the case to end: it
// selects every pod of the attempt (workers and launcher) and no other's, and keeps them all.
TEST(Manifests, ADisruptionBudgetKeepsEveryPodOfTheAttempt) {
  const BenchmarkRun run = sample_run();
  const json budget = build_disruption_budget(run, k2x8, 1);
  EXPECT_EQ(budget["apiVersion"], "policy/v1");
  EXPECT_EQ(budget["metadata"]["name"], "resnet50-scaling-2x8-bs128-amp-a1-budget");
  EXPECT_EQ(budget["metadata"]["ownerReferences"][0]["kind"], "BenchmarkRun");
  EXPECT_EQ(budget["spec"]["minAvailable"], 3) << "two workers and the launcher";
  EXPECT_EQ(budget["spec"]["unhealthyPodEvictionPolicy"], "AlwaysAllow");
  const json& selector = budget["spec"]["selector"]["matchLabels"];
  ASSERT_EQ(selector.size(), 5u) << selector.dump();
  EXPECT_FALSE(selector.contains("app.kubernetes.io/component"));
  const auto selects = [&](const json& labels) {
    for (const auto& [key, value] : selector.items()) {
      if (labels.value(key, "") != value) return false;
    }
    return true;
  };
  EXPECT_TRUE(selects(build_worker_pod(run, k2x8, 1, 1, OperatorConfig{})["metadata"]["labels"]));
  EXPECT_TRUE(selects(build_launcher_job(run, k2x8, 1, OperatorConfig{})["spec"]["template"]["metadata"]["labels"]));
  EXPECT_FALSE(selects(build_worker_pod(run, k2x8, 2, 1, OperatorConfig{})["metadata"]["labels"])) << "another attempt";
  EXPECT_FALSE(selects(child_labels(run, CaseSpec{1, 8, 128, Precision::amp}, 1, "worker"))) << "another case";
  BenchmarkRun command = run;
  command.spec.engine = Engine::command;
  EXPECT_EQ(build_disruption_budget(command, k2x8, 1)["spec"]["minAvailable"], 2) << "no launcher";
}

TEST(Manifests, LauncherRunsMpirunWithTheCaseArguments) {
  const BenchmarkRun run = sample_run();
  const json job = build_launcher_job(run, k2x8, 1, OperatorConfig{});
  EXPECT_EQ(job["spec"]["backoffLimit"], 0);
  EXPECT_EQ(job["spec"]["activeDeadlineSeconds"], 900 + kLauncherStopMarginSeconds);  // the launcher stops at 900
  const json& c = job["spec"]["template"]["spec"]["containers"][0];
  EXPECT_EQ(c["terminationMessagePolicy"], "FallbackToLogsOnError");
  const auto command = c["command"].get<std::vector<std::string>>();
  const auto at = [&](const std::string& flag) {
    const auto it = std::find(command.begin(), command.end(), flag);
    return it == command.end() || it + 1 == command.end() ? std::string("<missing>") : *(it + 1);
  };
  EXPECT_EQ(command[0], "dlbench");
  EXPECT_EQ(at("--hostfile"), "/etc/dlbench/hostfile");
  EXPECT_EQ(at("-np"), "16");
  EXPECT_EQ(at("odls_base_sigkill_timeout"), "1");  // the deputy's second, whatever the site's Open MPI says
  EXPECT_EQ(at("-x"), "NCCL_DEBUG");
  EXPECT_EQ(at("--batch-size"), "128");
  EXPECT_EQ(at("--precision"), "amp");
  EXPECT_EQ(at("--communicator"), "nccl");
  EXPECT_EQ(at("--backend"), "cuda");
  EXPECT_EQ(at("--run"), "resnet50-scaling");
  std::set<std::string> env;
  for (const auto& e : c["env"]) env.insert(e["name"].get<std::string>());
  EXPECT_TRUE(env.contains("OMPI_MCA_orte_keep_fqdn_hostnames"));
  EXPECT_TRUE(env.contains("OMPI_MCA_plm_rsh_args"));
  EXPECT_TRUE(env.contains("OMPI_ALLOW_RUN_AS_ROOT"));
  OperatorConfig non_root;
  non_root.run_as_root = false;
  const json non_root_job = build_launcher_job(run, k2x8, 1, non_root);  // range-for over a temporary's member dangles
  for (const auto& e : non_root_job["spec"]["template"]["spec"]["containers"][0]["env"]) {
    EXPECT_THAT(e["name"].get<std::string>(), Not(HasSubstr("RUN_AS_ROOT")));
  }
  // One device: no communicator.
  const auto single = launcher_command(run, CaseSpec{1, 1, 128, Precision::amp}, OperatorConfig{});
  EXPECT_EQ(*(std::find(single.begin(), single.end(), "--communicator") + 1), "none");
  EXPECT_EQ(std::find(single.begin(), single.end(), "--cuda-graph"), single.end());  // eager, the worker's default
  // spec.cudaGraph: the one-device case's worker captures its step.
  BenchmarkRun graphs = run;
  graphs.spec.cuda_graph = true;
  const auto graph = launcher_command(graphs, CaseSpec{1, 1, 128, Precision::amp}, OperatorConfig{});
  const auto flag = std::find(graph.begin(), graph.end(), "--cuda-graph");
  ASSERT_NE(flag, graph.end());
  ASSERT_NE(flag + 1, graph.end());
  EXPECT_EQ(*(flag + 1), "on");
}

TEST(Manifests, CaseObjectsAreCompleteAndOwned) {
  const BenchmarkRun run = sample_run();
  const CaseObjects objects = build_case_objects(run, k2x8, 1, SshKeyPair{"k", "p"}, OperatorConfig{});
  ASSERT_EQ(objects.workers.size(), 2u);
  for (const json* o : {&objects.secret, &objects.hostfile, &objects.service, &objects.launcher, &objects.workers[0],
                        &objects.workers[1]}) {
    EXPECT_TRUE(is_dns_label((*o)["metadata"]["name"].get<std::string>()));
    EXPECT_EQ((*o)["metadata"]["ownerReferences"][0]["name"], "resnet50-scaling");
    EXPECT_EQ((*o)["metadata"]["labels"]["dlbench.io/case"], "2x8-bs128-amp");
  }
}

// engine: command — the user's image runs dlbench-exec, delivered by an init container; the case
// and the rendezvous are in the environment; node 0 reports through its termination message.
TEST(Manifests, CommandEnginePodsRunTheUsersImageUnderDlbenchExec) {
  BenchmarkRun run = sample_run(false);
  run.spec.engine = Engine::command;
  run.spec.command = {"sh", "-c", "exec python3 train.py"};
  run.spec.worker.image = "nvcr.io/nvidia/pytorch:24.10-py3";
  OperatorConfig config;
  config.default_worker_image = "registry.local/dlbench-worker:1";
  const CaseObjects objects = build_case_objects(run, k2x8, 1, SshKeyPair{"k", "p"}, config);
  EXPECT_TRUE(objects.secret.is_null());
  EXPECT_TRUE(objects.hostfile.is_null());
  EXPECT_TRUE(objects.launcher.is_null());
  ASSERT_EQ(objects.workers.size(), 2u);
  const ChildNames n = child_names("resnet50-scaling", "2x8-bs128-amp", 1);
  for (int index = 0; index < 2; ++index) {
    const json& pod = objects.workers[static_cast<std::size_t>(index)];
    const json& spec = pod["spec"];
    ASSERT_EQ(spec["initContainers"].size(), 1u);
    EXPECT_EQ(spec["initContainers"][0]["image"], "registry.local/dlbench-worker:1");
    EXPECT_EQ(spec["initContainers"][0]["command"], json({"dlbench-exec", "--install", "/dlbench"}));
    const json& c = spec["containers"][0];
    EXPECT_EQ(c["image"], "nvcr.io/nvidia/pytorch:24.10-py3");
    const auto command = c["command"].get<std::vector<std::string>>();
    EXPECT_EQ(command.front(), "/dlbench/dlbench-exec");
    EXPECT_THAT(command, Contains("--termination-log"));
    const auto dashes = std::find(command.begin(), command.end(), "--");
    ASSERT_NE(dashes, command.end());
    EXPECT_EQ(std::vector<std::string>(dashes + 1, command.end()), run.spec.command);
    EXPECT_EQ(std::count(command.begin(), command.end(), "--metrics-port"), index == 0 ? 1 : 0);
    std::map<std::string, std::string> env;
    for (const auto& e : c["env"]) env[e["name"]] = e["value"];
    EXPECT_EQ(env["DLBENCH_NODE_RANK"], std::to_string(index));
    EXPECT_EQ(env["RANK"], std::to_string(index));
    EXPECT_EQ(env["DLBENCH_NODES"], "2");
    EXPECT_EQ(env["DLBENCH_GPUS_PER_NODE"], "8");
    EXPECT_EQ(env["WORLD_SIZE"], "2");
    EXPECT_EQ(env["DLBENCH_BATCH_SIZE"], "128");
    EXPECT_EQ(env["DLBENCH_PRECISION"], "amp");
    EXPECT_EQ(env["DLBENCH_HOME"], "/dlbench");
    EXPECT_EQ(env["MASTER_ADDR"], n.worker(0) + "." + n.service + ".bench.svc");
    EXPECT_EQ(env["MASTER_PORT"], "29500");
    EXPECT_EQ(env["NCCL_DEBUG"], "WARN") << "the user's variables still reach the command";
    EXPECT_EQ(c["resources"]["limits"]["nvidia.com/gpu"], "8");
    EXPECT_EQ(c["terminationMessagePolicy"], "FallbackToLogsOnError");
    EXPECT_EQ(spec["hostname"], n.worker(index));
    EXPECT_EQ(spec["subdomain"], n.service);
    EXPECT_EQ(spec["schedulerName"], "volcano");
    EXPECT_FALSE(c.contains("readinessProbe")) << "no sshd to wait for";
  }
}

TEST(Manifests, RealDataVolumeIsMountedReadOnlyAtTheDataPathForBothEngines) {
  BenchmarkRun run = sample_run(false);
  run.spec.data.source = DataSource::imagefolder;
  run.spec.data.path = "/data/imagenet";
  run.spec.data.decode_threads = 6;
  DataVolume claim;
  claim.claim_name = "imagenet";
  claim.sub_path = "train";
  run.spec.data.volume = claim;
  OperatorConfig config;
  config.default_worker_image = "registry.local/dlbench-worker:1";
  const auto data_mount = [](const json& pod) {
    json mount, volume;
    for (const auto& m : pod["spec"]["containers"][0]["volumeMounts"]) {
      if (m["name"] == "data") mount = m;
    }
    for (const auto& v : pod["spec"]["volumes"]) {
      if (v["name"] == "data") volume = v;
    }
    return std::pair{mount, volume};
  };
  for (const Engine engine : {Engine::native, Engine::command}) {
    run.spec.engine = engine;
    if (engine == Engine::command) run.spec.command = {"python3", "train.py"};
    const json pod = build_worker_pod(run, k2x8, 1, 1, config);
    const auto [mount, volume] = data_mount(pod);
    EXPECT_EQ(mount, json({{"name", "data"}, {"mountPath", "/data/imagenet"}, {"readOnly", true}, {"subPath", "train"}}));
    EXPECT_EQ(volume, json({{"name", "data"}, {"persistentVolumeClaim", {{"claimName", "imagenet"}, {"readOnly", true}}}}));
  }
  // The worker reads it: the launcher passes the data flags, the command engine the variables.
  run.spec.engine = Engine::native;
  run.spec.command.clear();
  const auto command = launcher_command(run, k2x8, config);
  const auto at = [&](const std::string& flag) { return *(std::find(command.begin(), command.end(), flag) + 1); };
  EXPECT_EQ(at("--data"), "imagefolder");
  EXPECT_EQ(at("--data-path"), "/data/imagenet");
  EXPECT_EQ(at("--decode-threads"), "6");
  EXPECT_EQ(at("--prefetch-batches"), "2");
  run.spec.engine = Engine::command;
  run.spec.command = {"python3", "train.py"};
  std::map<std::string, std::string> env;
  const json command_pod = build_worker_pod(run, k2x8, 1, 0, config);  // range-for over a temporary's member dangles
  for (const auto& e : command_pod["spec"]["containers"][0]["env"]) env[e["name"]] = e["value"];
  EXPECT_EQ(env["DLBENCH_DATA_SOURCE"], "imagefolder");
  EXPECT_EQ(env["DLBENCH_DATA_PATH"], "/data/imagenet");
  EXPECT_EQ(env["DLBENCH_DECODE_THREADS"], "6");
  // hostPath and NFS volumes; synthetic data mounts nothing.
  DataVolume host;
  host.host_path = "/srv/imagenet";
  run.spec.data.volume = host;
  EXPECT_EQ(data_mount(build_worker_pod(run, k2x8, 1, 0, config)).second,
            json({{"name", "data"}, {"hostPath", {{"path", "/srv/imagenet"}, {"type", "Directory"}}}}));
  DataVolume nfs;
  nfs.nfs_server = "10.0.0.5";
  nfs.nfs_path = "/exports/imagenet";
  run.spec.data.volume = nfs;
  EXPECT_EQ(data_mount(build_worker_pod(run, k2x8, 1, 0, config)).second,
            json({{"name", "data"}, {"nfs", {{"server", "10.0.0.5"}, {"path", "/exports/imagenet"}, {"readOnly", true}}}}));
  // Cityscapes (DeepLabV3+'s real data) comes from its volume the same way.
  run.spec.model = Model::deeplabv3plus;
  run.spec.data.source = DataSource::cityscapes;
  run.spec.data.path = "/data/cityscapes";
  run.spec.data.volume = claim;
  EXPECT_EQ(data_mount(build_worker_pod(run, k2x8, 1, 0, config)).first,
            json({{"name", "data"}, {"mountPath", "/data/cityscapes"}, {"readOnly", true}, {"subPath", "train"}}));
  std::map<std::string, std::string> streets;
  const json streets_pod = build_worker_pod(run, k2x8, 1, 0, config);
  for (const auto& e : streets_pod["spec"]["containers"][0]["env"]) streets[e["name"]] = e["value"];
  EXPECT_EQ(streets["DLBENCH_DATA_SOURCE"], "cityscapes");
  EXPECT_EQ(streets["DLBENCH_DATA_PATH"], "/data/cityscapes");
  run.spec.engine = Engine::native;
  run.spec.command.clear();
  const auto streets_command = launcher_command(run, k2x8, config);
  EXPECT_EQ(*(std::find(streets_command.begin(), streets_command.end(), "--data") + 1), "cityscapes");
  // And BERT's pretraining shards (bert-base's).
  run.spec.model = Model::bert_base;
  run.spec.data.source = DataSource::bertpretraining;
  run.spec.data.path = "/data/shards";
  EXPECT_EQ(data_mount(build_worker_pod(run, k2x8, 1, 0, config)).first,
            json({{"name", "data"}, {"mountPath", "/data/shards"}, {"readOnly", true}, {"subPath", "train"}}));
  const auto shards_command = launcher_command(run, k2x8, config);
  EXPECT_EQ(*(std::find(shards_command.begin(), shards_command.end(), "--data") + 1), "bertpretraining");
  EXPECT_EQ(*(std::find(shards_command.begin(), shards_command.end(), "--data-path") + 1), "/data/shards");
  const BenchmarkRun synthetic = sample_run(false);
  const auto [mount, volume] = data_mount(build_worker_pod(synthetic, k2x8, 1, 0, config));
  EXPECT_TRUE(mount.is_null());
  EXPECT_TRUE(volume.is_null());
}

}  // namespace
}  // namespace dlbench::operator_

namespace dlbench::operator_ {
namespace {

// Worker pods of different cases never share a node unless the run says so; the launcher has
// no such rule (it needs no GPU and may sit anywhere).
TEST(Manifests, WorkersKeepOtherCasesOffTheirNodesUnlessTheRunShares) {
  const BenchmarkRun run = sample_run(false);
  const json pod = build_worker_pod(run, k2x8, 1, 0, OperatorConfig{});
  const ChildNames n = child_names(run.metadata.name, case_id(k2x8), 1);
  EXPECT_EQ(pod["metadata"]["labels"][kGroupLabel], n.prefix);
  const json& terms = pod["spec"]["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
  ASSERT_EQ(terms.size(), 1u);
  EXPECT_EQ(terms[0]["topologyKey"], "kubernetes.io/hostname");
  EXPECT_EQ(terms[0]["namespaceSelector"], json::object());  // other namespaces' cases too
  const json expression{{"key", kGroupLabel}, {"operator", "NotIn"}, {"values", {n.prefix}}};
  EXPECT_THAT(terms[0]["labelSelector"]["matchExpressions"], Contains(expression));
  // The launcher keeps no case off its node (it only prefers its own workers' node).
  EXPECT_FALSE(build_launcher_job(run, k2x8, 1, OperatorConfig{})["spec"]["template"]["spec"]["affinity"].contains(
      "podAntiAffinity"));
  BenchmarkRun sharing = run;
  sharing.spec.worker.share_nodes = true;
  EXPECT_FALSE(build_worker_pod(sharing, k2x8, 1, 0, OperatorConfig{})["spec"].contains("affinity"));
}

// --worker-image-pull-policy (the chart's worker.image.pullPolicy) reaches every container dlbench
// creates, for both engines; unset, Kubernetes' own default is left alone.
TEST(Manifests, ThePullPolicyReachesEveryContainer) {
  OperatorConfig config;
  const CaseObjects plain = build_case_objects(sample_run(), k2x8, 1, SshKeyPair{"k", "p"}, config);
  EXPECT_FALSE(plain.workers[0]["spec"]["containers"][0].contains("imagePullPolicy"));
  config.image_pull_policy = "Always";
  const CaseObjects mpi = build_case_objects(sample_run(), k2x8, 1, SshKeyPair{"k", "p"}, config);
  EXPECT_EQ(mpi.workers[1]["spec"]["containers"][0]["imagePullPolicy"], "Always");
  EXPECT_EQ(mpi.launcher["spec"]["template"]["spec"]["containers"][0]["imagePullPolicy"], "Always");
  BenchmarkRun command = sample_run(false);
  command.spec.engine = Engine::command;
  command.spec.command = {"python3", "train.py"};
  const CaseObjects wrapped = build_case_objects(command, k2x8, 1, SshKeyPair{"k", "p"}, config);
  EXPECT_EQ(wrapped.workers[0]["spec"]["initContainers"][0]["imagePullPolicy"], "Always");
  EXPECT_EQ(wrapped.workers[0]["spec"]["containers"][0]["imagePullPolicy"], "Always");
}

TEST(Manifests, CpuClustersAreAskedForNoGpus) {
  OperatorConfig cpu;
  cpu.worker_backend = "cpu";
  const BenchmarkRun run = sample_run(true);
  for (const BenchmarkRun& r : {run, [&] {
                                  BenchmarkRun c = run;
                                  c.spec.engine = Engine::command;
                                  c.spec.command = {"python3", "train.py"};
                                  return c;
                                }()}) {
    const json limits = build_worker_pod(r, k2x8, 1, 0, cpu)["spec"]["containers"][0]["resources"]["limits"];
    EXPECT_FALSE(limits.contains("nvidia.com/gpu")) << limits;
    EXPECT_EQ(limits["rdma/hca_shared_devices_a"], "1");  // asked for explicitly: still asked
  }
  EXPECT_EQ(build_worker_pod(run, k2x8, 1, 0, OperatorConfig{})["spec"]["containers"][0]["resources"]["limits"]
               ["nvidia.com/gpu"],
            "8");
}

TEST(Manifests, KueueAdmitsACasesWorkersAsOnePodGroup) {
  BenchmarkRun run = sample_run(false);
  run.spec.worker.gang = GangSpec{GangScheduler::kueue, "gpu-queue"};
  const ChildNames n = child_names(run.metadata.name, case_id(k2x8), 1);
  for (int i = 0; i < 2; ++i) {
    const json pod = build_worker_pod(run, k2x8, 1, i, OperatorConfig{});
    EXPECT_EQ(pod["metadata"]["labels"]["kueue.x-k8s.io/queue-name"], "gpu-queue");
    EXPECT_EQ(pod["metadata"]["labels"]["kueue.x-k8s.io/pod-group-name"], n.group);
    EXPECT_EQ(pod["metadata"]["annotations"]["kueue.x-k8s.io/pod-group-total-count"], "2");
    EXPECT_EQ(pod["spec"]["schedulingGates"], json::parse(R"([{"name": "kueue.x-k8s.io/admission"}])"));
    EXPECT_EQ(pod["metadata"]["annotations"]["prometheus.io/port"], "9400");  // kept beside Kueue's
  }
  EXPECT_FALSE(build_pod_group(run, k2x8, 1, OperatorConfig{}, "w0", "uid").has_value());
  EXPECT_FALSE(build_launcher_job(run, k2x8, 1, OperatorConfig{})["spec"]["template"]["spec"].contains("schedulingGates"));
}

TEST(Manifests, VolcanoAndSchedulerPluginsGetAPodGroupOwnedByWorkerZero) {
  BenchmarkRun run = sample_run(false);
  run.spec.worker.scheduler_name.clear();
  const ChildNames n = child_names(run.metadata.name, case_id(k2x8), 1);
  run.spec.worker.gang = GangSpec{GangScheduler::volcano, ""};
  const json volcano_pod = build_worker_pod(run, k2x8, 1, 1, OperatorConfig{});
  EXPECT_EQ(volcano_pod["spec"]["schedulerName"], "volcano");
  EXPECT_EQ(volcano_pod["metadata"]["annotations"]["scheduling.k8s.io/group-name"], n.group);
  const auto volcano = build_pod_group(run, k2x8, 1, OperatorConfig{}, n.worker(0), "pod-uid");
  ASSERT_TRUE(volcano.has_value());
  EXPECT_EQ((*volcano)["apiVersion"], "scheduling.volcano.sh/v1beta1");
  EXPECT_EQ((*volcano)["metadata"]["name"], n.group);
  EXPECT_EQ((*volcano)["spec"]["minMember"], 2);
  EXPECT_EQ((*volcano)["spec"]["minResources"]["nvidia.com/gpu"], "16");
  EXPECT_EQ((*volcano)["metadata"]["ownerReferences"][0]["uid"], "pod-uid");
  EXPECT_EQ((*volcano)["metadata"]["ownerReferences"][0]["kind"], "Pod");

  run.spec.worker.gang = GangSpec{GangScheduler::schedulerPlugins, ""};
  run.spec.worker.scheduler_name = "my-coscheduler";  // the run's own name wins
  const json plugins_pod = build_worker_pod(run, k2x8, 1, 0, OperatorConfig{});
  EXPECT_EQ(plugins_pod["spec"]["schedulerName"], "my-coscheduler");
  EXPECT_EQ(plugins_pod["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"], n.group);
  const auto plugins = build_pod_group(run, k2x8, 1, OperatorConfig{}, n.worker(0), "pod-uid");
  ASSERT_TRUE(plugins.has_value());
  EXPECT_EQ((*plugins)["apiVersion"], "scheduling.x-k8s.io/v1alpha1");
  EXPECT_EQ((*plugins)["spec"]["minMember"], 2);
  EXPECT_EQ((*plugins)["spec"]["scheduleTimeoutSeconds"], 900);
}

// Issue 35: spec.podTemplateOverrides, Trainer v2's shape, merged into the pods of their roles.
BenchmarkRun run_with_overrides(const json& overrides, const json& worker_fields = json::object()) {
  json doc = to_json(sample_run());
  doc.erase("status");
  doc["spec"]["podTemplateOverrides"] = overrides;
  for (const auto& [key, value] : worker_fields.items()) doc["spec"]["worker"][key] = value;
  const auto decoded = decode_benchmark_run(doc);
  EXPECT_TRUE(decoded.ok()) << (decoded.errors.empty() ? "" : decoded.errors.front().to_string());
  return decoded.value.value_or(BenchmarkRun{});
}

TEST(PodTemplateOverrides, MergeIntoTheWorkerPodsAndKeepWhatDlbenchOwns) {
  const BenchmarkRun run = run_with_overrides(json::parse(R"([
    {"targetJobs": [{"name": "worker"}],
     "metadata": {"labels": {"team": "perf"}, "annotations": {"k8s.v1.cni.cncf.io/networks": "ib-sriov"}},
     "spec": {"serviceAccountName": "bench", "nodeSelector": {"network": "ib"},
              "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}},
                           "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{"topologyKey": "zone"}]}},
              "tolerations": [{"key": "rdma", "operator": "Exists"}],
              "volumes": [{"name": "scratch", "emptyDir": {}}],
              "imagePullSecrets": [{"name": "registry"}],
              "schedulingGates": [{"name": "example.com/quota"}],
              "containers": [{"name": "worker", "env": [{"name": "NCCL_IB_HCA", "value": "mlx5"}],
                              "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
                              "resources": {"requests": {"cpu": "16", "memory": "64Gi"}, "limits": {"memory": "80Gi"}}}]}},
    {"targetJobs": [{"name": "worker"}, {"name": "launcher"}], "spec": {"nodeSelector": {"network": "roce"}}}
  ])"));
  const json pod = build_worker_pod(run, k2x8, 1, 0, OperatorConfig{});
  const json& meta = pod["metadata"];
  EXPECT_EQ(meta["labels"]["team"], "perf");
  EXPECT_EQ(meta["labels"]["app.kubernetes.io/component"], "worker");  // dlbench's, kept
  EXPECT_EQ(meta["annotations"]["k8s.v1.cni.cncf.io/networks"], "ib-sriov");
  EXPECT_EQ(meta["annotations"]["prometheus.io/port"], "9400");
  const json& spec = pod["spec"];
  EXPECT_EQ(spec["serviceAccountName"], "bench");
  EXPECT_EQ(spec["nodeSelector"], json({{"nvidia.com/gpu.product", "H100"}, {"network", "roce"}}));  // later wins
  EXPECT_TRUE(spec["affinity"].contains("nodeAffinity"));
  const json& anti = spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"];
  ASSERT_EQ(anti.size(), 2u) << "the user's term and dlbench's keep-other-cases-off term";
  EXPECT_EQ(anti[0]["topologyKey"], "zone");
  EXPECT_EQ(anti[1]["topologyKey"], "kubernetes.io/hostname");
  EXPECT_EQ(spec["tolerations"].size(), 2u);
  EXPECT_EQ(spec["volumes"].back(), json({{"name", "scratch"}, {"emptyDir", json::object()}}));
  EXPECT_EQ(spec["volumes"][0]["name"], "ssh");
  EXPECT_EQ(spec["imagePullSecrets"], json::parse(R"([{"name": "registry"}])"));
  EXPECT_EQ(spec["schedulingGates"], json::parse(R"([{"name": "example.com/quota"}])"));
  const json& c = spec["containers"][0];
  EXPECT_EQ(c["env"].back(), json({{"name", "NCCL_IB_HCA"}, {"value", "mlx5"}}));
  EXPECT_EQ(c["volumeMounts"].back(), json({{"name", "scratch"}, {"mountPath", "/scratch"}}));
  EXPECT_EQ(c["resources"]["requests"]["cpu"], "16");
  EXPECT_EQ(c["resources"]["requests"]["nvidia.com/gpu"], "8");
  EXPECT_EQ(c["resources"]["limits"], json({{"nvidia.com/gpu", "8"}, {"rdma/hca_shared_devices_a", "1"}, {"memory", "80Gi"}}));

  // The launcher gets only what targets it, in its pod template.
  const json job = build_launcher_job(run, k2x8, 1, OperatorConfig{});
  const json& template_ = job["spec"]["template"];
  EXPECT_FALSE(template_["metadata"]["labels"].contains("team"));
  EXPECT_EQ(template_["spec"]["nodeSelector"], json({{"network", "roce"}}));
  EXPECT_FALSE(template_["spec"].contains("serviceAccountName"));
}

// The launcher's preference for its workers' node is dlbench's default: a user's own pod affinity
// for the launcher replaces it, and an affinity of another kind sits beside it.
TEST(PodTemplateOverrides, ALaunchersOwnPodAffinityReplacesThePreferenceForItsWorkersNode) {
  const auto launcher_affinity = [](const char* overrides) {
    return build_launcher_job(run_with_overrides(json::parse(overrides)), k2x8, 1, OperatorConfig{})["spec"]["template"]
                             ["spec"]["affinity"];
  };
  const json own = launcher_affinity(R"([{"targetJobs": [{"name": "launcher"}],
      "spec": {"affinity": {"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                                              [{"topologyKey": "zone", "labelSelector": {"matchLabels": {"app": "x"}}}]}}}}])");
  EXPECT_EQ(own["podAffinity"], json::parse(R"({"requiredDuringSchedulingIgnoredDuringExecution":
                                              [{"topologyKey": "zone", "labelSelector": {"matchLabels": {"app": "x"}}}]})"));
  const json beside = launcher_affinity(R"([{"targetJobs": [{"name": "launcher"}],
      "spec": {"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": []}}}}}])");
  EXPECT_TRUE(beside.contains("nodeAffinity"));
  EXPECT_EQ(beside["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]["topologyKey"],
            "kubernetes.io/hostname");
}

TEST(PodTemplateOverrides, GuaranteedQosSetsLimitsToRequestsInEveryWorkerContainer) {
  const BenchmarkRun run = run_with_overrides(
      json::parse(R"([{"targetJobs": [{"name": "worker"}],
                       "spec": {"containers": [{"name": "worker", "resources": {"requests": {"cpu": "30"}}}]}}])"),
      {{"qosClass", "Guaranteed"}});
  const json c = build_worker_pod(run, k2x8, 1, 0, OperatorConfig{})["spec"]["containers"][0];
  EXPECT_EQ(c["resources"]["limits"], c["resources"]["requests"]);
  EXPECT_EQ(c["resources"]["limits"]["cpu"], "30");
  EXPECT_EQ(c["resources"]["limits"]["memory"], "2Gi");  // the operator's default request

  BenchmarkRun command = run;
  command.spec.engine = Engine::command;
  command.spec.command = {"python3", "train.py"};
  const json spec = build_worker_pod(command, k2x8, 1, 0, OperatorConfig{})["spec"];
  for (const char* list : {"initContainers", "containers"}) {
    for (const json& container : spec[list]) {
      EXPECT_EQ(container["resources"]["limits"]["cpu"], container["resources"]["requests"]["cpu"]) << list;
      EXPECT_EQ(container["resources"]["limits"]["memory"], container["resources"]["requests"]["memory"]) << list;
    }
  }
  // The operator's defaults are its flags' (the chart's worker.resources.requests).
  OperatorConfig small;
  small.worker_cpu_request = "500m";
  small.worker_memory_request = "";
  const json plain = build_worker_pod(sample_run(), k2x8, 1, 0, small)["spec"]["containers"][0]["resources"];
  EXPECT_EQ(plain["requests"]["cpu"], "500m");
  EXPECT_FALSE(plain["requests"].contains("memory"));
}

TEST(PodTemplateOverrides, HostNetworkMovesSshdOffTheNodesPortAndKeepsClusterDns) {
  const BenchmarkRun run = run_with_overrides(json::parse(
      R"([{"targetJobs": [{"name": "worker"}, {"name": "launcher"}], "spec": {"hostNetwork": true}}])"));
  const CaseObjects objects = build_case_objects(run, k2x8, 1, SshKeyPair{"k", "p"}, OperatorConfig{});
  for (const json& pod : objects.workers) {
    const json& spec = pod["spec"];
    EXPECT_EQ(spec["hostNetwork"], true);
    EXPECT_EQ(spec["dnsPolicy"], "ClusterFirstWithHostNet");
    const json& c = spec["containers"][0];
    EXPECT_THAT(c["command"].get<std::vector<std::string>>(), Contains("2222"));
    EXPECT_EQ(c["readinessProbe"]["tcpSocket"]["port"], 2222);
    EXPECT_EQ(c["ports"][0]["containerPort"], 2222);
  }
  EXPECT_THAT(objects.secret["stringData"]["config"].get<std::string>(), HasSubstr("\nPort 2222\n"));
  EXPECT_EQ(objects.service["spec"]["ports"][0]["targetPort"], 2222);
  EXPECT_EQ(objects.launcher["spec"]["template"]["spec"]["dnsPolicy"], "ClusterFirstWithHostNet");
  // Without it: port 22 everywhere.
  const CaseObjects plain = build_case_objects(sample_run(), k2x8, 1, SshKeyPair{"k", "p"}, OperatorConfig{});
  EXPECT_THAT(plain.secret["stringData"]["config"].get<std::string>(), HasSubstr("\nPort 22\n"));
  EXPECT_FALSE(plain.workers[0]["spec"].contains("hostNetwork"));
}

}  // namespace
}  // namespace dlbench::operator_
