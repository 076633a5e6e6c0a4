// The Kubernetes objects of one case attempt, built from the BenchmarkRun alone (pure
// functions: the reconciler compares them with the world and creates what is missing).
//
//   Secret     <prefix>-ssh        a fresh SSH key pair for this attempt
//   ConfigMap  <prefix>-hostfile   "<worker>.<service>.<ns>.svc slots=G" per node
//   Service    <prefix>-workers    headless, publishes not-ready addresses (DNS before sshd)
//   Pod        <prefix>-worker-i   one per node: G GPUs (+ RDMA, + IPC_LOCK only then), sshd
//   Job        <prefix>-launcher   created once every worker is Ready; runs mpirun
//   PodDisruptionBudget <prefix>-budget  no voluntary eviction of the attempt's pods (--disruption-budgets)
//   ConfigMap  <prefix>-started    engine: command only: made once every worker was Ready
//
// engine: command has only the Service (for DNS: MASTER_ADDR is worker 0) and one Pod per node
// running the user's image: dlbench-exec -- COMMAND, copied in by an init container from the
// default worker image; worker 0's termination message is the result.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "child_names.hpp"
#include "dlbench/core/benchmark_run.hpp"
#include "dlbench/core/pod_ownership.hpp"
#include "ssh_keys.hpp"

namespace dlbench::operator_ {

struct OperatorConfig {
  // Also the image of the init container that brings dlbench-exec into engine: command pods.
  std::string default_worker_image = "dlbench-worker:0.1.0";
  std::string image_pull_policy;  // of every container dlbench creates; empty: Kubernetes' default
  std::string worker_backend = "cuda";
  std::string communicator = "nccl";  // GPU allreduce; "mpi" for CPU-only clusters
  int metrics_port = 9400;
  bool run_as_root = true;  // the worker image runs sshd as root
  // Every worker container's CPU and memory requests (a pod without requests is BestEffort, the
  // first to be starved or evicted); spec.podTemplateOverrides may change them per run, and
  // spec.worker.qosClass Guaranteed sets the limits to them.
  std::string worker_cpu_request = "1";
  std::string worker_memory_request = "2Gi";
  // A PodDisruptionBudget over each case attempt's pods while it runs, so that a drain (and
  // whatever else evicts through the Eviction API: node upgrades, the cluster autoscaler) waits
  // for the case to end instead of killing a worker mid-case.
  bool disruption_budgets = true;
};

inline constexpr const char* kTerminationLog = "/dev/termination-log";
// On every worker pod: its case attempt (the anti-affinity between cases selects on it).
inline constexpr const char* kGroupLabel = "dlbench.io/group";



struct CaseObjects {
  nlohmann::json secret, hostfile, service, launcher;  // secret, hostfile, launcher: null for engine: command
  std::vector<nlohmann::json> workers;
};

nlohmann::json owner_reference(const BenchmarkRun& run);
nlohmann::json child_labels(const BenchmarkRun& run, const CaseSpec& c, int attempt, const std::string& role);

// The apiVersion of the PodGroup a gang scheduler reads (its CRD's); nullptr for Kueue, which
// groups pods by their labels.
const char* pod_group_api_version(GangScheduler scheduler);

nlohmann::json build_ssh_secret(const BenchmarkRun& run, const CaseSpec& c, int attempt, const SshKeyPair& keys);
nlohmann::json build_hostfile(const BenchmarkRun& run, const CaseSpec& c, int attempt);
nlohmann::json build_worker_service(const BenchmarkRun& run, const CaseSpec& c, int attempt);
// policy/v1: minAvailable every pod of the attempt (its workers, and the launcher with mpirun),
// selected by run, case and attempt. An integer minAvailable is what a budget over pods without a
// scaling controller may use (maxUnavailable and percentages need one). unhealthyPodEvictionPolicy
// AlwaysAllow: a pod that is not Ready measures nothing and may go.
nlohmann::json build_disruption_budget(const BenchmarkRun& run, const CaseSpec& c, int attempt);
// engine: command's record that every worker of the attempt was Ready at once, its command
// started: what the launcher Job's existence says for mpirun. A worker missing since is lost
// (its kubelet may delete its pod right after reporting its end, unseen by the cache), never
// made again: a new one would join no job.
nlohmann::json build_started_record(const BenchmarkRun& run, const CaseSpec& c, int attempt, const std::string& at);
nlohmann::json build_worker_pod(const BenchmarkRun& run, const CaseSpec& c, int attempt, int index,
                                const OperatorConfig& config);  // either engine
// The PodGroup of the case's workers for Volcano or scheduler-plugins (minMember = nodes);
// nullopt without spec.worker.gang or with Kueue, which groups pods by their labels. Owned by
// worker 0 (name, uid): it goes with the attempt's pods, and the operator need not watch a
// kind that only some clusters have.
std::optional<nlohmann::json> build_pod_group(const BenchmarkRun& run, const CaseSpec& c, int attempt,
                                              const OperatorConfig& config, const std::string& owner_pod,
                                              const std::string& owner_uid);
// The user's spec.podTemplateOverrides that target `role` ("worker" or "launcher"), merged into a
// pod's metadata and spec in list order (see PodTemplateOverride for how each field merges).
void apply_pod_template_overrides(nlohmann::json& pod_metadata, nlohmann::json& pod_spec, const BenchmarkRun& run,
                                  std::string_view role);
// Whether the run's overrides put the `role` pods on the node's network (sshd then listens on
// kHostNetworkSshPort, and cluster DNS is kept with dnsPolicy ClusterFirstWithHostNet).
bool uses_host_network(const BenchmarkRun& run, std::string_view role);
// The attempt's deadline, as the launcher is told it: `at`, by the cluster's clock, and
// `seconds_left`, what was left of the case's limits.caseTimeoutSeconds when the Job was made.
// The launcher stops the case at `at` or `seconds_left` after its own start, whichever comes
// first: at the deadline however late its pod started (an image pulled on another node), and no
// later than the operator expects on a node whose clock lags.
struct LauncherDeadline {
  std::int64_t seconds_left = 0;
  std::chrono::system_clock::time_point at;
};
// `deadline` none: all of limits.caseTimeoutSeconds from the launcher's start. The launcher stops
// the case when its time is spent, and the repeats measured come back as a Timeout result before
// this operator's own deadline (kLauncherStopMarginSeconds later), which the Job's
// activeDeadlineSeconds backs. None left (seconds_left < 1): no stop of its own.
nlohmann::json build_launcher_job(const BenchmarkRun& run, const CaseSpec& c, int attempt, const OperatorConfig& config,
                                  std::optional<LauncherDeadline> deadline = std::nullopt);
// The launcher's command: mpirun over the hostfile, the case's dlbench-worker arguments.
std::vector<std::string> launcher_command(const BenchmarkRun& run, const CaseSpec& c, const OperatorConfig& config,
                                          std::optional<LauncherDeadline> deadline = std::nullopt);

CaseObjects build_case_objects(const BenchmarkRun& run, const CaseSpec& c, int attempt, const SshKeyPair& keys,
                               const OperatorConfig& config);

}  // namespace dlbench::operator_
