// A real Prometheus (Debian's) scrapes a real running dlbench-worker on loopback; the series
// are asserted through Prometheus's own HTTP query API, and promtool checks the exposition.
#include <signal.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "../support/process.hpp"

namespace dlbench {
namespace {

using namespace std::chrono_literals;


std::string http_get(const std::string& url) {
  std::string out;
  FILE* pipe = popen(("curl -s --max-time 5 '" + url + "'").c_str(), "r");
  if (pipe == nullptr) return out;
  char buffer[4096];
  while (const std::size_t n = std::fread(buffer, 1, sizeof buffer, pipe)) out.append(buffer, n);
  pclose(pipe);
  return out;
}

// The first sample's value for a PromQL query, or NaN while there is none.
double query(int prometheus_port, const std::string& promql) {
  std::string encoded;
  for (const char c : promql) {
    if (std::isalnum(static_cast<unsigned char>(c)) || c == '_') {
      encoded += c;
    } else {
      char hex[4];
      std::snprintf(hex, sizeof hex, "%%%02X", static_cast<unsigned char>(c));
      encoded += hex;
    }
  }
  const std::string body =
      http_get("http://127.0.0.1:" + std::to_string(prometheus_port) + "/api/v1/query?query=" + encoded);
  const auto j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || j.value("status", "") != "success" || j["data"]["result"].empty()) return std::nan("");
  return std::stod(j["data"]["result"][0]["value"][1].get<std::string>());
}

pid_t spawn(const std::string& command, const std::filesystem::path& log) {
  const pid_t pid = fork();
  if (pid == 0) {
    setpgid(0, 0);
    const std::string line = "exec " + command + " > " + log.string() + " 2>&1";
    execl("/bin/sh", "sh", "-c", line.c_str(), nullptr);
    _exit(127);
  }
  return pid;
}

TEST(PrometheusScrape, WorkerSeriesArriveWithSaneValues) {
  const auto dir = std::filesystem::temp_directory_path() / ("dlbench-prom-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  const int worker_port = testing::free_port(), prometheus_port = testing::free_port();
  const pid_t worker = spawn(std::string(DLBENCH_WORKER_BINARY) +
                                 " --model resnet50 --image-size 32 --batch-size 1 --warmup-steps 2 "
                                 "--measure-steps 100000 --repeats 1 --threads 1 --run scrape-test --metrics-port " +
                                 std::to_string(worker_port) + " --output " + (dir / "r.json").string(),
                             dir / "worker.log");
  std::ofstream(dir / "prometheus.yml") << "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                                        << "scrape_configs:\n  - job_name: dlbench-worker\n"
                                        << "    static_configs: [{targets: ['127.0.0.1:" << worker_port << "']}]\n";
  const pid_t prometheus = spawn("prometheus --config.file=" + (dir / "prometheus.yml").string() +
                                     " --storage.tsdb.path=" + (dir / "data").string() +
                                     " --web.listen-address=127.0.0.1:" + std::to_string(prometheus_port),
                                 dir / "prometheus.log");

  // Wait (bounded) until Prometheus has scraped measured steps.
  double measured = std::nan("");
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (std::chrono::steady_clock::now() < deadline) {
    measured = query(prometheus_port, "dlbench_worker_steps_total{phase=\"measure\",run=\"scrape-test\"}");
    if (measured >= 3) break;
    std::this_thread::sleep_for(500ms);
  }
  const std::string exposition = http_get("http://127.0.0.1:" + std::to_string(worker_port) + "/metrics");
  std::ofstream(dir / "metrics.txt") << exposition;
  const auto promtool = testing::run_shell("promtool check metrics < metrics.txt", dir.string());

  EXPECT_GE(measured, 3) << testing::slurp(dir / "prometheus.log").substr(0, 2000);
  EXPECT_EQ(query(prometheus_port, "up{job=\"dlbench-worker\"}"), 1.0);
  EXPECT_EQ(query(prometheus_port, "dlbench_worker_info{backend=\"cpu\"}"), 1.0);
  EXPECT_EQ(query(prometheus_port, "dlbench_worker_steps_total{phase=\"warmup\"}"), 2.0);
  EXPECT_GT(query(prometheus_port, "dlbench_worker_throughput_samples_per_second{model=\"resnet50\",case=\"1x1-bs1-fp32\",unit=\"samples/s\"}"), 0.0);
  EXPECT_GT(query(prometheus_port, "dlbench_worker_step_seconds_count"), 4.0);
  const double mean_step = query(prometheus_port, "dlbench_worker_step_seconds_sum / dlbench_worker_step_seconds_count");
  EXPECT_GT(mean_step, 0.0);
  EXPECT_LT(mean_step, 60.0);
  EXPECT_EQ(query(prometheus_port, "dlbench_worker_phase{phase=\"measure\"}"), 1.0);
  EXPECT_GT(query(prometheus_port, "dlbench_worker_device_memory_bytes{kind=\"parameters\"}"), 3e8);  // 3 × 25.6 M × 4 B
  EXPECT_EQ(promtool.exit_code, 0) << promtool.out << promtool.err;

  kill(-worker, SIGKILL);
  kill(-prometheus, SIGTERM);
  waitpid(worker, nullptr, 0);
  waitpid(prometheus, nullptr, 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace dlbench
