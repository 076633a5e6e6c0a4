// dlbench-operator: runs BenchmarkRuns on a Kubernetes cluster as MPI jobs.
#include <atomic>
#include <csignal>
#include <cstdlib>
#include <initializer_list>
#include <iostream>
#include <string>
#include <thread>
#include <variant>

#include <malloc.h>
#include <unistd.h>

#include "controller.hpp"
#include "leader_election.hpp"
#include "dlbench/core/command_line.hpp"
#include "dlbench/metrics/metrics.hpp"
#include "dlbench/core/names.hpp"
#include "dlbench/core/version.hpp"

namespace {

using dlbench::UsageError;

volatile std::sig_atomic_t stop_requested = 0;
void on_signal(int) { stop_requested = 1; }

constexpr const char* kDescription = "dlbench-operator — runs BenchmarkRuns (dlbench.io/v1alpha1) as MPI jobs";

// A whole number in [low, high], or an error naming the flag and the range.
int parse_int(const std::string& flag, const std::string& value, int low, int high) {
  return static_cast<int>(dlbench::parse_bounded(flag, value, low, high));
}

std::string parse_quantity(const std::string& flag, const std::string& value) {
  if (!value.empty() && !dlbench::is_resource_quantity(value)) {
    throw UsageError{flag + " must be a quantity such as 4, 500m or 16Gi (or empty), got \"" +
                     dlbench::printable(value) + "\""};
  }
  return value;
}

// What the command line sets.
struct OperatorFlags {
  std::string kubeconfig;
  dlbench::operator_::ControllerOptions options;
  int metrics_port = 8080;
  bool leader_elect = false;
  std::string lease_namespace = "default";
};

void add_flags(CLI::App& app, OperatorFlags& f) {
  using dlbench::add_text_option;
  auto& config = f.options.config;
  add_text_option(app, "--kubeconfig", [&f](const std::string& v) { f.kubeconfig = v; },
                  "default: $KUBECONFIG, ~/.kube/config, then in-cluster", "PATH");
  add_text_option(app, "--namespace", [&f](const std::string& v) { f.options.namespace_ = v; },
                  "watch one namespace (default: all)", "NS");
  add_text_option(app, "--workers", [&f](const std::string& v) { f.options.workers = parse_int("--workers", v, 1, 64); },
                  "concurrent reconciles (default 2)", "N");
  add_text_option(app, "--metrics-port", [&f](const std::string& v) { f.metrics_port = parse_int("--metrics-port", v, 0, 65535); },
                  "/metrics, /healthz, /readyz (default 8080)", "N");
  add_text_option(
      app, "--worker-metrics-port",
      [&config](const std::string& v) { config.metrics_port = parse_int("--worker-metrics-port", v, 1, 65535); },
      "the workers' /metrics, N + local rank (default 9400)", "N");
  add_text_option(app, "--default-worker-image", [&config](const std::string& v) { config.default_worker_image = v; },
                  "for runs that set no spec.worker.image", "IMAGE");
  add_text_option(
      app, "--worker-image-pull-policy",
      [&config](const std::string& v) {
        config.image_pull_policy = dlbench::one_of("--worker-image-pull-policy", v, {"Always", "IfNotPresent", "Never"});
      },
      "Always | IfNotPresent | Never for the pods' containers (default: Kubernetes')", "P");
  add_text_option(
      app, "--worker-cpu-request",
      [&config](const std::string& v) { config.worker_cpu_request = parse_quantity("--worker-cpu-request", v); },
      "every worker container's CPU request (default 1; \"\" for none)", "Q");
  add_text_option(
      app, "--worker-memory-request",
      [&config](const std::string& v) { config.worker_memory_request = parse_quantity("--worker-memory-request", v); },
      "every worker container's memory request (default 2Gi; \"\" for none); spec.podTemplateOverrides change "
      "them per run; qosClass Guaranteed sets the limits to them",
      "Q");
  add_text_option(
      app, "--worker-backend",
      [&config](const std::string& v) { config.worker_backend = dlbench::one_of("--worker-backend", v, {"cuda", "cpu"}); },
      "cuda (default) | cpu", "B");
  add_text_option(
      app, "--communicator",
      [&config](const std::string& v) { config.communicator = dlbench::one_of("--communicator", v, {"nccl", "mpi"}); },
      "nccl (default) | mpi", "C");
  add_text_option(
      app, "--disruption-budgets",
      [&config](const std::string& v) {
        config.disruption_budgets = dlbench::one_of("--disruption-budgets", v, {"true", "false"}) == "true";
      },
      "a PodDisruptionBudget over each case's pods while it runs, so that a drain waits for the case (default true)",
      "true|false");
  add_text_option(
      app, "--leader-elect",
      [&f](const std::string& v) { f.leader_elect = dlbench::one_of("--leader-elect", v, {"true", "false"}) == "true"; },
      "lead through a Lease before reconciling (default false; on with replicas > 1)", "true|false");
  add_text_option(app, "--lease-namespace", [&f](const std::string& v) { f.lease_namespace = v; },
                  "where the Lease \"dlbench-operator\" lives (default: default)", "NS");
  add_text_option(
      app, "--max-concurrent-cases",
      [&f](const std::string& v) { f.options.max_concurrent_cases = parse_int("--max-concurrent-cases", v, 0, 100000); },
      "cases running at once, operator-wide (default 1; 0: no limit). Each run runs its cases one at a time; more "
      "runs wait, Pending, oldest first",
      "N");
  add_text_option(
      app, "--log-level",
      [&f](const std::string& v) { f.options.log_unchanged = dlbench::one_of("--log-level", v, {"info", "debug"}) == "debug"; },
      "info (default): every reconcile that changed something, every error | debug: also those that changed nothing",
      "L");
}

// The flags, or the exit code: 0 after --help, 2 for a usage error (said on stderr).
std::variant<OperatorFlags, int> parse_flags(int argc, char** argv) {
  OperatorFlags flags;
  flags.options.watch_timeout = std::chrono::seconds(10);  // bounds how long SIGTERM waits for the informers
  CLI::App app{kDescription, "dlbench-operator"};
  dlbench::use_dlbench_help(app);
  app.set_help_flag("--help", "print this and exit");
  bool print_version = false;
  app.add_flag("--version", print_version, "print dlbench-operator's version (and the revision it was built from) and exit");
  add_flags(app, flags);
  try {
    dlbench::parse_command_line(app, {argv + 1, argv + argc});
    if (flags.options.config.worker_backend == "cuda" && flags.options.config.communicator == "mpi") {
      throw UsageError{"--communicator mpi reduces host memory and --worker-backend cuda keeps gradients on the GPU; "
                       "allowed with cuda: nccl"};
    }
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const UsageError& e) {
    std::cerr << "dlbench-operator: " << e.message << "\n";
    return dlbench::kExitUsageError;
  }
  if (print_version) {
    std::cout << "dlbench-operator " << dlbench::version() << "\n";
    return 0;
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
    // Which build runs, as Prometheus's convention has it: a gauge of 1 whose labels say it.
    controller.registry()
        .gauge("dlbench_operator_build_info", "1, labelled with this operator's version and the revision it was built from.")
        .add({{"version", std::string(dlbench::version())}})
        .set(1);
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
    log_line("info", "started", {{"version", std::string(dlbench::version())}, {"server", config.server},
                                 {"metricsPort", server.port()},
                                 {"maxConcurrentCases", flags.options.max_concurrent_cases}});
    return serve(controller, server, flags.leader_elect ? &lease : nullptr);
  } catch (const std::exception& e) {
    log_line("error", e.what());
    return 1;
  }
}
