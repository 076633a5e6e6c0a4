// dlbench-operator: runs BenchmarkRuns on a Kubernetes cluster as MPI jobs.
#include <csignal>
#include <iostream>
#include <string>
#include <thread>

#include "controller.hpp"
#include "dlbench/core/metrics.hpp"

namespace {

volatile std::sig_atomic_t stop_requested = 0;
void on_signal(int) { stop_requested = 1; }

constexpr const char* kUsage = R"(dlbench-operator — runs BenchmarkRuns (dlbench.io/v1alpha1) as MPI jobs

  --kubeconfig PATH          default: $KUBECONFIG, ~/.kube/config, then in-cluster
  --namespace NS             watch one namespace (default: all)
  --workers N                concurrent reconciles (default 2)
  --metrics-port N           /metrics, /healthz, /readyz (default 8080)
  --default-worker-image I   for runs that set no spec.worker.image
  --worker-backend B         cuda (default) | cpu
  --communicator C           nccl (default) | mpi
)";

}  // namespace

int main(int argc, char** argv) {
  using namespace dlbench::operator_;
  std::string kubeconfig;
  ControllerOptions options;
  options.watch_timeout = std::chrono::seconds(10);  // bounds how long SIGTERM waits for the informers
  int metrics_port = 8080;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (flag == "--help") {
      std::cout << kUsage;
      return 0;
    }
    if (i + 1 >= argc) {
      std::cerr << "dlbench-operator: " << flag << " needs a value\n" << kUsage;
      return 2;
    }
    const std::string value = argv[++i];
    if (flag == "--kubeconfig") {
      kubeconfig = value;
    } else if (flag == "--namespace") {
      options.namespace_ = value;
    } else if (flag == "--workers") {
      options.workers = std::max(1, std::atoi(value.c_str()));
    } else if (flag == "--metrics-port") {
      metrics_port = std::atoi(value.c_str());
    } else if (flag == "--default-worker-image") {
      options.config.default_worker_image = value;
    } else if (flag == "--worker-backend" && (value == "cuda" || value == "cpu")) {
      options.config.worker_backend = value;
    } else if (flag == "--communicator" && (value == "nccl" || value == "mpi")) {
      options.config.communicator = value;
    } else {
      std::cerr << "dlbench-operator: bad option " << flag << " " << value << "\n" << kUsage;
      return 2;
    }
  }
  try {
    const KubeConfig config = resolve_kube_config(kubeconfig);
    KubeClient client(make_http_transport(config, std::chrono::seconds(30)));
    Controller controller(client, options);
    dlbench::metrics::MetricsServer server(controller.registry(), metrics_port);
    server.set_ready(false);
    std::signal(SIGTERM, on_signal);
    std::signal(SIGINT, on_signal);
    controller.start();
    std::cerr << R"({"level":"info","msg":"started","server":")" << config.server << R"(","metricsPort":)" << server.port()
              << "}\n";
    while (stop_requested == 0) {
      server.set_ready(controller.synced());
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
    server.set_ready(false);
    std::cerr << R"({"level":"info","msg":"stopping"})" << "\n";
    controller.stop();  // finishes the reconciles in flight, then the informers
    return 0;
  } catch (const std::exception& e) {
    std::cerr << R"({"level":"error","msg":)" << nlohmann::json(e.what()).dump() << "}\n";
    return 1;
  }
}
