// dlbench-operator: runs BenchmarkRuns on a Kubernetes cluster as MPI jobs.
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <functional>
#include <initializer_list>
#include <iostream>
#include <map>
#include <string>
#include <thread>
#include <variant>

#include <malloc.h>
#include <unistd.h>

#include "controller.hpp"
#include "leader_election.hpp"
#include "dlbench/metrics/metrics.hpp"
#include "dlbench/core/names.hpp"

namespace {

volatile std::sig_atomic_t stop_requested = 0;
void on_signal(int) { stop_requested = 1; }

constexpr const char* kUsage = R"(dlbench-operator — runs BenchmarkRuns (dlbench.io/v1alpha1) as MPI jobs

  --kubeconfig PATH          default: $KUBECONFIG, ~/.kube/config, then in-cluster
  --namespace NS             watch one namespace (default: all)
  --workers N                concurrent reconciles (default 2)
  --metrics-port N           /metrics, /healthz, /readyz (default 8080)
  --worker-metrics-port N    the workers' /metrics, N + local rank (default 9400)
  --default-worker-image I   for runs that set no spec.worker.image
  --worker-image-pull-policy P  Always | IfNotPresent | Never for the pods' containers (default: Kubernetes')
  --worker-cpu-request Q     every worker container's CPU request (default 1; "" for none)
  --worker-memory-request Q  every worker container's memory request (default 2Gi; "" for none)
                             spec.podTemplateOverrides change them per run; qosClass Guaranteed
                             sets the limits to them
  --worker-backend B         cuda (default) | cpu
  --communicator C           nccl (default) | mpi
  --leader-elect true|false  lead through a Lease before reconciling (default false; on with replicas > 1)
  --lease-namespace NS       where the Lease "dlbench-operator" lives (default: default)
  --max-concurrent-cases N   cases running at once, operator-wide (default 1; 0: no limit). Each run
                             runs its cases one at a time; more runs wait, Pending, oldest first
  --log-level L              info (default): every reconcile that changed something, every error |
                             debug: also those that changed nothing
)";

// A whole number in [low, high], or an error naming the flag and the range.
bool parse_int(const std::string& flag, const std::string& value, int low, int high, int& out) {
  try {
    std::size_t used = 0;
    const long parsed = std::stol(value, &used);
    if (used == value.size() && parsed >= low && parsed <= high) {
      out = static_cast<int>(parsed);
      return true;
    }
  } catch (const std::exception&) {
  }
  std::cerr << "dlbench-operator: " << flag << " must be a whole number from " << low << " to " << high << ", got \""
            << value << "\"\n";
  return false;
}

// One of `allowed`, or an error naming the flag and the allowed values.
bool parse_choice(const std::string& flag, const std::string& value, std::initializer_list<const char*> allowed,
                  std::string& out) {
  std::string listed;
  for (const char* a : allowed) {
    if (value == a) {
      out = value;
      return true;
    }
    listed += (listed.empty() ? "" : ", ") + std::string(a);
  }
  std::cerr << "dlbench-operator: " << flag << " must be one of " << listed << ", got \"" << value << "\"\n";
  return false;
}

// What the command line sets.
struct OperatorFlags {
  std::string kubeconfig;
  dlbench::operator_::ControllerOptions options;
  int metrics_port = 8080;
  bool leader_elect = false;
  std::string lease_namespace = "default";
};

// A flag's value read into the flags; false (after saying why on stderr) for a value it refuses.
using FlagReader = std::function<bool(OperatorFlags&, const std::string& flag, const std::string& value)>;

bool read_quantity(const std::string& flag, const std::string& value, std::string& out) {
  if (!value.empty() && !dlbench::is_resource_quantity(value)) {
    std::cerr << "dlbench-operator: " << flag << " must be a quantity such as 4, 500m or 16Gi (or empty), got \""
              << dlbench::printable(value) << "\"\n";
    return false;
  }
  out = value;
  return true;
}

bool read_switch(const std::string& flag, const std::string& value, std::initializer_list<const char*> allowed,
                 const char* on, bool& out) {
  std::string choice;
  if (!parse_choice(flag, value, allowed, choice)) return false;
  out = choice == on;
  return true;
}

const std::map<std::string, FlagReader>& flag_readers() {
  static const std::map<std::string, FlagReader> readers{
      {"--kubeconfig", [](OperatorFlags& f, auto&, auto& v) { return f.kubeconfig = v, true; }},
      {"--namespace", [](OperatorFlags& f, auto&, auto& v) { return f.options.namespace_ = v, true; }},
      {"--workers", [](OperatorFlags& f, auto& n, auto& v) { return parse_int(n, v, 1, 64, f.options.workers); }},
      {"--metrics-port", [](OperatorFlags& f, auto& n, auto& v) { return parse_int(n, v, 0, 65535, f.metrics_port); }},
      {"--worker-metrics-port",
       [](OperatorFlags& f, auto& n, auto& v) { return parse_int(n, v, 1, 65535, f.options.config.metrics_port); }},
      {"--default-worker-image",
       [](OperatorFlags& f, auto&, auto& v) { return f.options.config.default_worker_image = v, true; }},
      {"--worker-image-pull-policy",
       [](OperatorFlags& f, auto& n, auto& v) {
         return parse_choice(n, v, {"Always", "IfNotPresent", "Never"}, f.options.config.image_pull_policy);
       }},
      {"--worker-cpu-request",
       [](OperatorFlags& f, auto& n, auto& v) { return read_quantity(n, v, f.options.config.worker_cpu_request); }},
      {"--worker-memory-request",
       [](OperatorFlags& f, auto& n, auto& v) { return read_quantity(n, v, f.options.config.worker_memory_request); }},
      {"--leader-elect",
       [](OperatorFlags& f, auto& n, auto& v) { return read_switch(n, v, {"true", "false"}, "true", f.leader_elect); }},
      {"--max-concurrent-cases",
       [](OperatorFlags& f, auto& n, auto& v) { return parse_int(n, v, 0, 100000, f.options.max_concurrent_cases); }},
      {"--log-level",
       [](OperatorFlags& f, auto& n, auto& v) {
         return read_switch(n, v, {"info", "debug"}, "debug", f.options.log_unchanged);
       }},
      {"--lease-namespace", [](OperatorFlags& f, auto&, auto& v) { return f.lease_namespace = v, true; }},
      {"--worker-backend",
       [](OperatorFlags& f, auto& n, auto& v) { return parse_choice(n, v, {"cuda", "cpu"}, f.options.config.worker_backend); }},
      {"--communicator",
       [](OperatorFlags& f, auto& n, auto& v) { return parse_choice(n, v, {"nccl", "mpi"}, f.options.config.communicator); }},
  };
  return readers;
}

// The flags, or the exit code: 0 after --help, 2 for a usage error (said on stderr).
std::variant<OperatorFlags, int> parse_flags(int argc, char** argv) {
  OperatorFlags flags;
  flags.options.watch_timeout = std::chrono::seconds(10);  // bounds how long SIGTERM waits for the informers
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    if (flag == "--help") {
      std::cout << kUsage;
      return 0;
    }
    std::string value;
    if (const auto equals = flag.find('='); equals != std::string::npos) {  // --flag=value, as manifests write it
      value = flag.substr(equals + 1);
      flag.resize(equals);
    } else if (i + 1 < argc) {
      value = argv[++i];
    } else {
      std::cerr << "dlbench-operator: " << flag << " needs a value\n" << kUsage;
      return 2;
    }
    const auto reader = flag_readers().find(flag);
    if (reader == flag_readers().end()) {
      std::cerr << "dlbench-operator: unknown option " << flag << "\n" << kUsage;
      return 2;
    }
    if (!reader->second(flags, flag, value)) return 2;
  }
  if (flags.options.config.worker_backend == "cuda" && flags.options.config.communicator == "mpi") {
    std::cerr << "dlbench-operator: --communicator mpi reduces host memory and --worker-backend cuda keeps gradients "
                 "on the GPU; allowed with cuda: nccl\n";
    return 2;
  }
  return flags;
}

std::int64_t steady_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// With leader election, a replica writes only while its last renewal is younger than the lease:
// once another replica may have taken over, a reconcile in flight must not write.
struct Lease {
  dlbench::operator_::LeaderElector& elector;
  std::atomic<std::int64_t> renewed_at{0};
  std::chrono::steady_clock::time_point last_renewal = std::chrono::steady_clock::now();

  bool fresh() const { return steady_ms() - renewed_at.load() < 15000; }

  // Every 5 s: false once another replica may lead (renewal refused, or unanswered past the lease).
  bool renew_when_due() {
    using dlbench::operator_::log_line;
    if (std::chrono::steady_clock::now() - last_renewal <= std::chrono::seconds(5)) return true;
    bool renewed = false, unanswered = false;
    try {
      renewed = elector.try_acquire_or_renew();
    } catch (const std::exception& e) {
      unanswered = true;  // retried until the lease runs out
      log_line("warning", "lease renewal failed", {{"error", e.what()}});
    }
    if (renewed) renewed_at = steady_ms();
    last_renewal = std::chrono::steady_clock::now();
    return renewed || (unanswered && fresh());
  }
};

// Ready while the caches are synced and the API server answers (an operator that cannot reach it
// cannot do its job), until a signal or a lost lease. The exit code.
int serve(dlbench::operator_::Controller& controller, dlbench::metrics::MetricsServer& server, Lease* lease) {
  using dlbench::operator_::log_line;
  bool was_healthy = false;
  while (stop_requested == 0) {
    const bool healthy = controller.healthy();
    if (healthy != was_healthy) {
      log_line(healthy ? "info" : "warning", healthy ? "ready" : "not ready: the API server does not answer");
    }
    was_healthy = healthy;
    server.set_ready(healthy);
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    if (lease != nullptr && !lease->renew_when_due()) {
      // Another replica may lead now: stop at once and let Kubernetes restart us as a follower.
      log_line("error", "lost the lease");
      controller.stop();
      return 1;
    }
  }
  server.set_ready(false);
  log_line("info", "stopping");
  controller.stop();  // finishes the reconciles in flight, then the informers
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace dlbench::operator_;
  // One malloc arena: glibc gives each allocating thread its own, and each keeps its freed
  // pieces; the operator's threads mostly wait on the network, so contention costs nothing
  // and memory at scale is lower (bench/operator_scale.py). MALLOC_ARENA_MAX still overrides.
  if (std::getenv("MALLOC_ARENA_MAX") == nullptr) mallopt(M_ARENA_MAX, 1);
  // OpenSSL writes to its socket with write(): an API server that closes a TLS connection
  // under a request must be an error for that request, not SIGPIPE for the operator.
  std::signal(SIGPIPE, SIG_IGN);
  auto parsed = parse_flags(argc, argv);
  if (const int* exit_code = std::get_if<int>(&parsed)) return *exit_code;
  OperatorFlags& flags = std::get<OperatorFlags>(parsed);
  try {
    const KubeConfig config = resolve_kube_config(flags.kubeconfig);
    KubeClient client(make_http_transport(config, std::chrono::seconds(30)));
    char host[256] = {};
    gethostname(host, sizeof host - 1);
    // Unique per process, not per host: two replicas may share a node (or a test machine).
    const std::string identity = std::string(host) + "_" + std::to_string(getpid());
    LeaderElector elector(client, flags.lease_namespace, "dlbench-operator", identity);
    Lease lease{elector};
    if (flags.leader_elect) flags.options.may_write = [&lease] { return lease.fresh(); };
    Controller controller(client, flags.options);
    dlbench::metrics::MetricsServer server(controller.registry(), flags.metrics_port);
    server.set_ready(false);
    std::signal(SIGTERM, on_signal);
    std::signal(SIGINT, on_signal);
    auto& leading = controller.registry()
                        .gauge("dlbench_operator_leader", "1 while this replica holds the Lease and reconciles.")
                        .add({});
    if (flags.leader_elect) {
      // A standby replica is healthy and ready (a Deployment rollout must not wait for the Lease);
      // dlbench_operator_leader says which replica works.
      server.set_ready(true);
      while (stop_requested == 0 && !elector.try_acquire_or_renew()) std::this_thread::sleep_for(std::chrono::seconds(2));
      if (stop_requested != 0) return 0;
      lease.renewed_at = steady_ms();
      lease.last_renewal = std::chrono::steady_clock::now();
      log_line("info", "leading", {{"identity", identity}});
    }
    leading.set(1);
    controller.start();
    log_line("info", "started", {{"server", config.server}, {"metricsPort", server.port()},
                                 {"maxConcurrentCases", flags.options.max_concurrent_cases}});
    return serve(controller, server, flags.leader_elect ? &lease : nullptr);
  } catch (const std::exception& e) {
    log_line("error", e.what());
    return 1;
  }
}
