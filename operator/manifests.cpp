#include "manifests.hpp"

#include <algorithm>

#include "dlbench/core/codec.hpp"
#include "dlbench/core/status.hpp"
#include "dlbench/core/worker_command.hpp"

namespace dlbench::operator_ {

using nlohmann::json;

namespace {

const std::string& namespace_of(const BenchmarkRun& run) {
  static const std::string fallback = "default";
  return run.metadata.namespace_.empty() ? fallback : run.metadata.namespace_;
}

json metadata(const BenchmarkRun& run, const CaseSpec& c, int attempt, const std::string& name, const std::string& role) {
  return {{"name", name},
          {"namespace", namespace_of(run)},
          {"labels", child_labels(run, c, attempt, role)},
          {"ownerReferences", json::array({owner_reference(run)})}};
}

std::string image(const BenchmarkRun& run, const OperatorConfig& config) {
  return run.spec.worker.image.empty() ? config.default_worker_image : run.spec.worker.image;
}

// --worker-image-pull-policy (the chart's worker.image.pullPolicy) on a container dlbench creates.
void set_pull_policy(json& container, const OperatorConfig& config) {
  if (!config.image_pull_policy.empty()) container["imagePullPolicy"] = config.image_pull_policy;
}

json tolerations(const BenchmarkRun& run) {
  json out = json::array();
  for (const auto& t : run.spec.worker.tolerations) out.push_back(to_json(t));
  return out;
}

json user_env(const BenchmarkRun& run) {
  json out = json::array();
  for (const auto& e : run.spec.worker.env) out.push_back(to_json(e));
  return out;
}

// What a worker pod of case c asks for, both engines: its GPUs (none on a CPU cluster, where no
// node has them), and RDMA devices when asked.
json device_resources(const BenchmarkRun& run, const CaseSpec& c, const OperatorConfig& config) {
  const auto& w = run.spec.worker;
  json resources = json::object();
  if (config.worker_backend != "cpu") resources[w.gpu_resource] = std::to_string(c.gpus_per_node);
  if (w.rdma) resources[w.rdma->resource] = std::to_string(w.rdma->per_node);
  return resources;
}

// Worker i's name in cluster DNS through the case's headless Service.
std::string worker_dns_name(const BenchmarkRun& run, const ChildNames& n, int index) {
  return n.worker(index) + "." + n.service + "." + namespace_of(run) + ".svc";
}

// Scheduling fields shared by workers and the launcher.
void apply_scheduling(json& pod_spec, const BenchmarkRun& run) {
  const auto& w = run.spec.worker;
  if (!w.node_selector.empty()) pod_spec["nodeSelector"] = w.node_selector;
  if (!w.tolerations.empty()) pod_spec["tolerations"] = tolerations(run);
  if (!w.scheduler_name.empty()) pod_spec["schedulerName"] = w.scheduler_name;
  if (!w.priority_class_name.empty()) pod_spec["priorityClassName"] = w.priority_class_name;
}

// The worker container's requests: its devices, and CPU and memory by default. Limits are the
// devices (extended resources must have limits equal to requests); Guaranteed QoS adds CPU and
// memory after the overrides (guarantee_qos).
json worker_resources(const BenchmarkRun& run, const CaseSpec& c, const OperatorConfig& config) {
  const json devices = device_resources(run, c, config);
  json requests = devices;
  if (!config.worker_cpu_request.empty()) requests["cpu"] = config.worker_cpu_request;
  if (!config.worker_memory_request.empty()) requests["memory"] = config.worker_memory_request;
  return {{"limits", devices}, {"requests", requests}};
}

// spec.worker.qosClass Guaranteed: every container of the worker pod gets limits equal to its
// requests for CPU and memory, so that the kubelet classes the pod Guaranteed (and its static
// CPU manager may give it whole cores).
void guarantee_qos(json& pod_spec, const BenchmarkRun& run) {
  if (run.spec.worker.qos_class != QosClass::Guaranteed) return;
  for (const char* list : {"initContainers", "containers"}) {
    if (!pod_spec.contains(list)) continue;
    for (json& container : pod_spec[list]) {
      for (const char* resource : {"cpu", "memory"}) {
        const json& requests = container["resources"]["requests"];
        if (requests.contains(resource)) container["resources"]["limits"][resource] = requests[resource];
      }
    }
  }
}

// sshd's port on the worker pods: the node's own sshd has 22 when they share its network.
int ssh_port(const BenchmarkRun& run) { return uses_host_network(run, kWorkerRole) ? kHostNetworkSshPort : kSshPort; }

// Worker pods only: who admits them together, and which nodes they may share.
void apply_worker_placement(json& pod_spec, json& meta, const BenchmarkRun& run, const CaseSpec& c, int attempt) {
  const auto& w = run.spec.worker;
  const ChildNames n = child_names(run.metadata.name, case_id(c), attempt);
  meta["labels"][kGroupLabel] = n.prefix;
  if (!w.share_nodes) {
    // No worker of another dlbench case on the same node, in any namespace. The scheduler applies
    // it both ways: a sharing case cannot land beside this one either.
    // Added to the terms of the user's own affinity (spec.podTemplateOverrides), if any.
    pod_spec["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"].push_back(
        {{"topologyKey", "kubernetes.io/hostname"},
         {"namespaceSelector", json::object()},
         {"labelSelector",
          {{"matchExpressions",
            json::array({{{"key", "app.kubernetes.io/managed-by"}, {"operator", "In"}, {"values", {"dlbench-operator"}}},
                         {{"key", "app.kubernetes.io/component"}, {"operator", "In"}, {"values", {"worker"}}},
                         {{"key", kGroupLabel}, {"operator", "NotIn"}, {"values", {n.prefix}}}})}}}});
  }
  if (!w.gang) return;
  switch (w.gang->scheduler) {
    case GangScheduler::kueue:
      // Kueue's plain-pod groups: admitted together once the queue has room for all of them;
      // until then the admission gate keeps every pod off the scheduler.
      meta["labels"]["kueue.x-k8s.io/queue-name"] = w.gang->queue_name;
      meta["labels"]["kueue.x-k8s.io/pod-group-name"] = n.group;
      meta["annotations"]["kueue.x-k8s.io/pod-group-total-count"] = std::to_string(c.nodes);
      pod_spec["schedulingGates"].push_back({{"name", kKueueAdmissionGate}});
      break;
    case GangScheduler::volcano:
      meta["annotations"]["scheduling.k8s.io/group-name"] = n.group;
      if (w.scheduler_name.empty()) pod_spec["schedulerName"] = "volcano";
      break;
    case GangScheduler::schedulerPlugins:
      meta["labels"]["scheduling.x-k8s.io/pod-group"] = n.group;
      if (w.scheduler_name.empty()) pod_spec["schedulerName"] = "scheduler-plugins-scheduler";
      break;
  }
}

}  // namespace

bool uses_host_network(const BenchmarkRun& run, std::string_view role) {
  bool host = false;
  for (const PodTemplateOverride& o : run.spec.pod_template_overrides) {
    const bool targets = std::find(o.target_jobs.begin(), o.target_jobs.end(), role) != o.target_jobs.end();
    if (targets && o.host_network) host = *o.host_network;
  }
  return host;
}

void apply_pod_template_overrides(json& pod_metadata, json& pod_spec, const BenchmarkRun& run, std::string_view role) {
  for (const PodTemplateOverride& o : run.spec.pod_template_overrides) {
    if (std::find(o.target_jobs.begin(), o.target_jobs.end(), role) == o.target_jobs.end()) continue;
    for (const auto& [key, value] : o.labels) pod_metadata["labels"][key] = value;
    for (const auto& [key, value] : o.annotations) pod_metadata["annotations"][key] = value;
    if (!o.service_account_name.empty()) pod_spec["serviceAccountName"] = o.service_account_name;
    for (const auto& [key, value] : o.node_selector) pod_spec["nodeSelector"][key] = value;
    if (o.affinity) {
      for (const auto& [kind, value] : o.affinity->items()) pod_spec["affinity"][kind] = value;
    }
    for (const auto& t : o.tolerations) pod_spec["tolerations"].push_back(to_json(t));
    for (const auto& v : o.volumes) pod_spec["volumes"].push_back(v);
    for (const auto& name : o.image_pull_secrets) pod_spec["imagePullSecrets"].push_back({{"name", name}});
    for (const auto& name : o.scheduling_gates) pod_spec["schedulingGates"].push_back({{"name", name}});
    if (o.host_network) {
      pod_spec["hostNetwork"] = *o.host_network;
      // The pods still find each other (and the launcher its workers) through cluster DNS.
      if (*o.host_network) pod_spec["dnsPolicy"] = "ClusterFirstWithHostNet";
      else pod_spec.erase("dnsPolicy");
    }
    if (o.security_context) pod_spec["securityContext"] = *o.security_context;
    for (const ContainerOverride& c : o.containers) {
      for (json& container : pod_spec["containers"]) {
        if (container["name"] != c.name) continue;
        for (const auto& e : c.env) container["env"].push_back(to_json(e));  // after dlbench's: the user's word wins
        for (const auto& m : c.volume_mounts) container["volumeMounts"].push_back(m);
        for (const auto& [resource, quantity] : c.requests) container["resources"]["requests"][resource] = quantity;
        for (const auto& [resource, quantity] : c.limits) container["resources"]["limits"][resource] = quantity;
      }
    }
  }
}

const char* pod_group_api_version(GangScheduler scheduler) {
  switch (scheduler) {
    case GangScheduler::volcano:
      return "scheduling.volcano.sh/v1beta1";
    case GangScheduler::schedulerPlugins:
      return "scheduling.x-k8s.io/v1alpha1";
    case GangScheduler::kueue:
      break;
  }
  return nullptr;
}

std::optional<json> build_pod_group(const BenchmarkRun& run, const CaseSpec& c, int attempt, const OperatorConfig& config,
                                    const std::string& owner_pod, const std::string& owner_uid) {
  const auto& gang = run.spec.worker.gang;
  if (!gang || gang->scheduler == GangScheduler::kueue) return std::nullopt;  // Kueue groups by labels alone
  const ChildNames n = child_names(run.metadata.name, case_id(c), attempt);
  json min_resources = device_resources(run, c, config);
  for (auto& [resource, quantity] : min_resources.items()) {
    quantity = std::to_string(std::stoi(quantity.get<std::string>()) * c.nodes);
  }
  json group{{"kind", "PodGroup"}, {"metadata", metadata(run, c, attempt, n.group, "group")}};
  group["metadata"]["ownerReferences"] = json::array({{{"apiVersion", "v1"}, {"kind", "Pod"}, {"name", owner_pod},
                                                       {"uid", owner_uid}, {"blockOwnerDeletion", true}}});
  group["apiVersion"] = pod_group_api_version(gang->scheduler);
  if (gang->scheduler == GangScheduler::volcano) {
    group["spec"] = {{"minMember", c.nodes}, {"minResources", min_resources}};
  } else {
    group["spec"] = {{"minMember", c.nodes}, {"scheduleTimeoutSeconds", run.spec.limits.case_timeout_seconds}};
  }
  return group;
}

json owner_reference(const BenchmarkRun& run) {
  return {{"apiVersion", kApiVersion}, {"kind", kKind},           {"name", run.metadata.name},
          {"uid", run.metadata.uid},   {"controller", true}, {"blockOwnerDeletion", true}};
}

json child_labels(const BenchmarkRun& run, const CaseSpec& c, int attempt, const std::string& role) {
  return {{"app.kubernetes.io/name", "dlbench"},
          {"app.kubernetes.io/component", role},
          {"app.kubernetes.io/managed-by", "dlbench-operator"},
          {"dlbench.io/run", run.metadata.name},
          {"dlbench.io/case", case_id(c)},
          {"dlbench.io/attempt", std::to_string(attempt)}};
}

json build_ssh_secret(const BenchmarkRun& run, const CaseSpec& c, int attempt, const SshKeyPair& keys) {
  const ChildNames n = child_names(run.metadata.name, case_id(c), attempt);
  return {{"apiVersion", "v1"},
          {"kind", "Secret"},
          {"metadata", metadata(run, c, attempt, n.secret, "ssh")},
          {"type", "Opaque"},
          {"stringData",
           {{"id_ecdsa", keys.private_key_pem},
            {"id_ecdsa.pub", keys.public_key + "\n"},
            {"authorized_keys", keys.public_key + "\n"},
            {"config", "StrictHostKeyChecking no\nUserKnownHostsFile /dev/null\nLogLevel ERROR\n"
                       "IdentityFile " + std::string(kSshMount) + "/id_ecdsa\nPort " + std::to_string(ssh_port(run)) +
                           "\n"}}}};
}

namespace {
// An attempt's ConfigMap: one key, labelled as the attempt's `component`.
json attempt_config_map(const BenchmarkRun& run, const CaseSpec& c, int attempt, const std::string& name,
                        const std::string& component, const std::string& key, const std::string& value) {
  return {{"apiVersion", "v1"},
          {"kind", "ConfigMap"},
          {"metadata", metadata(run, c, attempt, name, component)},
          {"data", {{key, value}}}};
}
}  // namespace

json build_hostfile(const BenchmarkRun& run, const CaseSpec& c, int attempt) {
  const ChildNames n = child_names(run.metadata.name, case_id(c), attempt);
  std::string hostfile;
  for (int i = 0; i < c.nodes; ++i) {
    hostfile += worker_dns_name(run, n, i) + " slots=" +
                std::to_string(c.gpus_per_node) + "\n";
  }
  return attempt_config_map(run, c, attempt, n.hostfile, "hostfile", "hostfile", hostfile);
}

json build_worker_service(const BenchmarkRun& run, const CaseSpec& c, int attempt) {
  const ChildNames n = child_names(run.metadata.name, case_id(c), attempt);
  json selector = child_labels(run, c, attempt, "worker");
  return {{"apiVersion", "v1"},
          {"kind", "Service"},
          {"metadata", metadata(run, c, attempt, n.service, "worker")},
          {"spec",
           {{"clusterIP", "None"},
            // Workers must resolve each other before sshd is Ready, or mpirun races DNS.
            {"publishNotReadyAddresses", true},
            {"selector", selector},
            {"ports", json::array({{{"name", "ssh"}, {"port", kSshPort}, {"targetPort", ssh_port(run)}}})}}}};
}

json build_started_record(const BenchmarkRun& run, const CaseSpec& c, int attempt, const std::string& at) {
  const ChildNames n = child_names(run.metadata.name, case_id(c), attempt);
  return attempt_config_map(run, c, attempt, n.started, "started", "everyWorkerReadyAt", at);
}

json build_disruption_budget(const BenchmarkRun& run, const CaseSpec& c, int attempt) {
  const ChildNames n = child_names(run.metadata.name, case_id(c), attempt);
  json selector = child_labels(run, c, attempt, "");
  selector.erase("app.kubernetes.io/component");  // workers and launcher alike
  const int pods = c.nodes + (run.spec.engine == Engine::command ? 0 : 1);
  return {{"apiVersion", "policy/v1"},
          {"kind", "PodDisruptionBudget"},
          {"metadata", metadata(run, c, attempt, n.budget, "budget")},
          {"spec",
           {{"minAvailable", pods},
            {"selector", {{"matchLabels", selector}}},
            {"unhealthyPodEvictionPolicy", "AlwaysAllow"}}}};
}

namespace {

// Real data (imagefolder, cityscapes, bertpretraining) with a volume: the volume, read-only, at data.path in the worker container (the
// same path on every node, where the worker or the wrapped script reads it).
void mount_data_volume(json& pod_spec, json& container, const BenchmarkRun& run) {
  const DataSpec& data = run.spec.data;
  if (data.source == DataSource::synthetic || !data.volume) return;
  const DataVolume& v = *data.volume;
  json volume{{"name", "data"}};
  if (!v.claim_name.empty()) volume["persistentVolumeClaim"] = {{"claimName", v.claim_name}, {"readOnly", true}};
  if (!v.host_path.empty()) volume["hostPath"] = {{"path", v.host_path}, {"type", "Directory"}};
  if (!v.nfs_server.empty()) volume["nfs"] = {{"server", v.nfs_server}, {"path", v.nfs_path}, {"readOnly", true}};
  json mount{{"name", "data"}, {"mountPath", data.path}, {"readOnly", true}};
  if (!v.sub_path.empty()) mount["subPath"] = v.sub_path;
  pod_spec["volumes"].push_back(volume);
  container["volumeMounts"].push_back(mount);
}

}  // namespace

// engine: command — the user's image runs dlbench-exec -- COMMAND on every node, PyTorchJob
// style: no sshd, no mpirun, no launcher. An init container from dlbench's image copies the
// static dlbench-exec (and the examples) into an emptyDir at kExecMount; node 0's dlbench-exec
// writes the case's result document to its termination message.
json build_command_worker_pod(const BenchmarkRun& run, const CaseSpec& c, int attempt, int index,
                              const OperatorConfig& config) {
  const ChildNames n = child_names(run.metadata.name, case_id(c), attempt);
  const auto& w = run.spec.worker;
  const json resources = device_resources(run, c, config);
  const std::string master = worker_dns_name(run, n, 0);
  json env = json::array();
  for (const auto& [name, value] : command_environment(run, c, {index, master, kDefaultMasterPort, kExecMount})) {
    env.push_back({{"name", name}, {"value", value}});
  }
  for (const auto& e : user_env(run)) env.push_back(e);  // after dlbench's: the user's word wins
  std::vector<std::string> command{std::string(kExecMount) + "/dlbench-exec", "--termination-log", kTerminationLog,
                                   "--timeout", std::to_string(run.spec.limits.case_timeout_seconds)};
  json ports = json::array({{{"name", "rendezvous"}, {"containerPort", kDefaultMasterPort}}});
  if (index == 0) {
    command.push_back("--metrics-port");
    command.push_back(std::to_string(config.metrics_port));
    ports.push_back({{"name", "metrics-0"}, {"containerPort", config.metrics_port}});
  }
  command.push_back("--");
  command.insert(command.end(), run.spec.command.begin(), run.spec.command.end());
  json security{{"capabilities", {{"drop", json::array({"ALL"})}}}};
  if (w.rdma) security["capabilities"]["add"] = json::array({"IPC_LOCK"});
  const json exec_mount{{"name", "dlbench"}, {"mountPath", kExecMount}};
  json installer{{"name", "dlbench-exec"},
                 {"image", config.default_worker_image},
                 {"command", json::array({"dlbench-exec", "--install", kExecMount})},
                 {"resources", {{"requests", {{"cpu", "10m"}, {"memory", "16Mi"}}}}},
                 {"securityContext", {{"capabilities", {{"drop", json::array({"ALL"})}}}}},
                 {"volumeMounts", json::array({exec_mount})}};
  json container{{"name", "worker"},
                 {"image", image(run, config)},
                 {"command", command},
                 {"env", env},
                 {"resources", worker_resources(run, c, config)},
                 {"securityContext", security},
                 {"ports", ports},
                 {"terminationMessagePath", kTerminationLog},
                 {"terminationMessagePolicy", "FallbackToLogsOnError"},
                 {"volumeMounts", json::array({exec_mount, {{"name", "dshm"}, {"mountPath", "/dev/shm"}}})}};
  set_pull_policy(installer, config);
  set_pull_policy(container, config);
  json pod_spec{{"hostname", n.worker(index)},
                {"subdomain", n.service},
                {"restartPolicy", "Never"},
                {"initContainers", json::array({installer})},
                {"containers", json::array({container})},
                {"volumes", json::array({{{"name", "dlbench"}, {"emptyDir", json::object()}},
                                         {{"name", "dshm"}, {"emptyDir", {{"medium", "Memory"}}}}})}};
  mount_data_volume(pod_spec, pod_spec["containers"][0], run);
  apply_scheduling(pod_spec, run);
  json meta = metadata(run, c, attempt, n.worker(index), "worker");
  if (index == 0) meta["annotations"] = {{"prometheus.io/port", std::to_string(config.metrics_port)}};
  apply_pod_template_overrides(meta, pod_spec, run, kWorkerRole);
  guarantee_qos(pod_spec, run);
  apply_worker_placement(pod_spec, meta, run, c, attempt);
  return {{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", meta}, {"spec", pod_spec}};
}

json build_worker_pod(const BenchmarkRun& run, const CaseSpec& c, int attempt, int index, const OperatorConfig& config) {
  if (run.spec.engine == Engine::command) return build_command_worker_pod(run, c, attempt, index, config);
  const ChildNames n = child_names(run.metadata.name, case_id(c), attempt);
  const auto& w = run.spec.worker;
  const int sshd_port = ssh_port(run);
  json security{{"capabilities", {{"drop", json::array({"ALL"})}, {"add", json::array({"CHOWN", "SETUID", "SETGID",
                                                                                             "SYS_CHROOT", "AUDIT_WRITE"})}}}};
  // RDMA registers (pins) memory: IPC_LOCK only when the case asks for RDMA devices.
  if (w.rdma) security["capabilities"]["add"].push_back("IPC_LOCK");
  // Every rank serves its own /metrics on metrics_port + local rank: one named port each, so
  // that a PodMonitor (or anyone) finds them all.
  json ports = json::array({{{"name", "ssh"}, {"containerPort", sshd_port}}});
  for (int r = 0; r < c.gpus_per_node; ++r) {
    ports.push_back({{"name", "metrics-" + std::to_string(r)}, {"containerPort", config.metrics_port + r}});
  }
  json container{{"name", "worker"},
                 {"image", image(run, config)},
                 {"command", json::array({"/usr/sbin/sshd", "-De", "-p", std::to_string(sshd_port), "-o",
                                          "AuthorizedKeysFile=" + std::string(kSshMount) + "/authorized_keys", "-o",
                                          "StrictModes=no"})},
                 {"env", user_env(run)},
                 {"resources", worker_resources(run, c, config)},
                 {"securityContext", security},
                 {"ports", ports},
                 {"readinessProbe", {{"tcpSocket", {{"port", sshd_port}}}, {"periodSeconds", 2}}},
                 {"volumeMounts", json::array({{{"name", "ssh"}, {"mountPath", kSshMount}, {"readOnly", true}},
                                               {{"name", "dshm"}, {"mountPath", "/dev/shm"}}})}};
  set_pull_policy(container, config);
  json pod_spec{{"hostname", n.worker(index)},
                {"subdomain", n.service},
                {"restartPolicy", "Never"},
                {"containers", json::array({container})},
                {"volumes", json::array({{{"name", "ssh"}, {"secret", {{"secretName", n.secret}, {"defaultMode", 0400}}}},
                                         // NCCL's shared-memory transport wants more than the default 64 MiB.
                                         {{"name", "dshm"}, {"emptyDir", {{"medium", "Memory"}}}}})}};
  mount_data_volume(pod_spec, pod_spec["containers"][0], run);
  apply_scheduling(pod_spec, run);
  json meta = metadata(run, c, attempt, n.worker(index), "worker");
  meta["annotations"] = {{"prometheus.io/port", std::to_string(config.metrics_port)}};
  apply_pod_template_overrides(meta, pod_spec, run, kWorkerRole);
  guarantee_qos(pod_spec, run);
  apply_worker_placement(pod_spec, meta, run, c, attempt);
  return {{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", meta}, {"spec", pod_spec}};
}

std::vector<std::string> launcher_command(const BenchmarkRun& run, const CaseSpec& c, const OperatorConfig& config,
                                          std::optional<LauncherDeadline> deadline) {
  std::vector<std::string> command{"dlbench", "launch", "--termination-log", kTerminationLog};
  const std::int64_t limit = run.spec.limits.case_timeout_seconds;
  // None left: this operator's deadline and the Job's are the case's end.
  if (const std::int64_t stop_after = deadline ? deadline->seconds_left : limit; stop_after >= 1) {
    command.insert(command.end(), {"--stop-after", std::to_string(stop_after)});
    if (deadline) command.insert(command.end(), {"--stop-at", rfc3339_utc(deadline->at)});
    command.insert(command.end(), {"--case-timeout", std::to_string(limit)});
  }
  command.insert(command.end(), {"--", "mpirun", "--hostfile", std::string(kConfigMount) + "/hostfile", "-np",
                                 std::to_string(c.devices()), "--bind-to", "none", "--map-by", "slot"});
  for (auto& a : mpirun_stop_arguments()) command.push_back(std::move(a));
  for (const auto& e : run.spec.worker.env) {  // user variables reach every rank
    command.push_back("-x");
    command.push_back(e.name);
  }
  WorkerInvocation how;
  how.backend = config.worker_backend;
  how.communicator = c.devices() > 1 ? config.communicator : "none";
  how.metrics_port = config.metrics_port;
  for (auto& a : worker_arguments(run, c, how)) command.push_back(std::move(a));
  return command;
}

json build_launcher_job(const BenchmarkRun& run, const CaseSpec& c, int attempt, const OperatorConfig& config,
                        std::optional<LauncherDeadline> deadline) {
  const ChildNames n = child_names(run.metadata.name, case_id(c), attempt);
  json env = user_env(run);
  env.push_back({{"name", "OMPI_MCA_orte_keep_fqdn_hostnames"}, {"value", "true"}});
  env.push_back({{"name", "OMPI_MCA_orte_default_hostfile"}, {"value", std::string(kConfigMount) + "/hostfile"}});
  // sshd may still be starting on a worker that just turned Ready: retry instead of failing.
  env.push_back({{"name", "OMPI_MCA_plm_rsh_args"},
                 {"value", "-F " + std::string(kSshMount) + "/config -o ConnectionAttempts=10"}});
  if (config.run_as_root) {
    env.push_back({{"name", "OMPI_ALLOW_RUN_AS_ROOT"}, {"value", "1"}});
    env.push_back({{"name", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM"}, {"value", "1"}});
  }
  json container{{"name", "launcher"},
                 {"image", image(run, config)},
                 {"command", launcher_command(run, c, config, deadline)},
                 {"env", env},
                 {"terminationMessagePath", kTerminationLog},
                 {"terminationMessagePolicy", "FallbackToLogsOnError"},
                 {"resources", {{"requests", {{"cpu", "100m"}, {"memory", "128Mi"}}}}},
                 {"volumeMounts", json::array({{{"name", "ssh"}, {"mountPath", kSshMount}, {"readOnly", true}},
                                               {{"name", "hostfile"}, {"mountPath", kConfigMount + std::string("/hostfile")},
                                                {"subPath", "hostfile"}}})}};
  set_pull_policy(container, config);
  json pod_spec{{"restartPolicy", "Never"},
                {"containers", json::array({container})},
                {"volumes", json::array({{{"name", "ssh"}, {"secret", {{"secretName", n.secret}, {"defaultMode", 0400}}}},
                                         {{"name", "hostfile"}, {"configMap", {{"name", n.hostfile}}}}})}};
  apply_scheduling(pod_spec, run);
  pod_spec.erase("nodeSelector");  // the launcher needs no GPU node
  // Beside worker 0 where it fits: that node has pulled the image already, so the launcher starts
  // at once. Its --stop-at holds the case's deadline wherever it runs; a launcher still pulling
  // at the deadline itself would lose the case's repeats all the same.
  pod_spec["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"] = json::array(
      {{{"weight", 100},
        {"podAffinityTerm",
         {{"topologyKey", "kubernetes.io/hostname"},
          {"labelSelector", {{"matchLabels", {{kGroupLabel, n.prefix}, {"app.kubernetes.io/component", "worker"}}}}}}}}});
  json pod_meta{{"labels", child_labels(run, c, attempt, "launcher")}};
  apply_pod_template_overrides(pod_meta, pod_spec, run, kLauncherRole);
  return {{"apiVersion", "batch/v1"},
          {"kind", "Job"},
          {"metadata", metadata(run, c, attempt, n.launcher, "launcher")},
          {"spec",
           {{"backoffLimit", 0},  // retries are the operator's (limits.backoffLimit), with fresh objects
            // A backstop: the launcher stops the case itself at the limit, to hand back its repeats.
            {"activeDeadlineSeconds", run.spec.limits.case_timeout_seconds + kLauncherStopMarginSeconds},
            {"template", {{"metadata", pod_meta}, {"spec", pod_spec}}}}}};
}

CaseObjects build_case_objects(const BenchmarkRun& run, const CaseSpec& c, int attempt, const SshKeyPair& keys,
                               const OperatorConfig& config) {
  CaseObjects objects;
  objects.service = build_worker_service(run, c, attempt);
  for (int i = 0; i < c.nodes; ++i) objects.workers.push_back(build_worker_pod(run, c, attempt, i, config));
  if (run.spec.engine == Engine::command) return objects;  // no SSH, no hostfile, no launcher
  objects.secret = build_ssh_secret(run, c, attempt, keys);
  objects.hostfile = build_hostfile(run, c, attempt);
  objects.launcher = build_launcher_job(run, c, attempt, config);
  return objects;
}

}  // namespace dlbench::operator_
