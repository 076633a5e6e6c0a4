#include "dlbench/core/benchmark_run.hpp"

#include "dlbench/core/api_rules.hpp"

#include <algorithm>
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

namespace dlbench {

bool loss_scaling_trained_little(const LossScalingReport& report) {
  return report.final_scale < 1.0 || report.skipped_steps * 20 > report.steps;
}

CommunicationReport communication_report(int ranks, std::int64_t gradient_bytes, std::int64_t buckets,
                                         double allreduce_seconds, double step_seconds,
                                         double step_seconds_without_reduction) {
  CommunicationReport c{gradient_bytes, buckets, allreduce_seconds, 0, step_seconds, step_seconds_without_reduction, 0};
  // nccl-tests' bus bandwidth for an allreduce: what each link carries, 2 (n - 1) / n of the data.
  const double links_share = ranks > 1 ? 2.0 * (ranks - 1) / ranks : 1.0;
  if (allreduce_seconds > 0) c.bus_bandwidth = static_cast<double>(gradient_bytes) / allreduce_seconds * links_share;
  if (step_seconds > 0) c.exposed_share = std::clamp(1.0 - step_seconds_without_reduction / step_seconds, 0.0, 1.0);
  return c;
}

std::string image_size_argument(int height, int width) {
  if (height == width) return std::to_string(height);
  return std::to_string(height) + "x" + std::to_string(width);
}

std::string image_size_argument(const DataSpec& data) { return image_size_argument(data.height(), data.width()); }

int sequence_length(const DataSpec& data) {
  return data.sequence_length > 0 ? data.sequence_length : defaults::kSequenceLength;
}

std::string case_id(const CaseSpec& c) {
  if (c.preflight) return "preflight-" + std::to_string(c.nodes) + "x" + std::to_string(c.gpus_per_node);
  return std::to_string(c.nodes) + "x" + std::to_string(c.gpus_per_node) + "-bs" +
         std::to_string(c.batch_size_per_device) + "-" + std::string(to_string(c.precision));
}

OptimizerSpec optimizer_for_case(const BenchmarkRunSpec& spec, const CaseSpec& c) {
  const OptimizerRequest& o = spec.optimizer;
  const double rate = o.learning_rate ? *o.learning_rate : default_learning_rate(spec.model, o.name, c.global_batch_size());
  return {o.name, rate, o.momentum, o.weight_decay, o.learning_rate_warmup_steps};
}

std::string describe_optimizer(const BenchmarkRunSpec& spec) {
  const OptimizerRequest& o = spec.optimizer;
  if (o.learning_rate) return describe_optimizer(o.name, *o.learning_rate, o.learning_rate_warmup_steps);
  return std::string(to_string(o.name)) + " at the model's learning rate, " +
         describe_learning_rate_recipe(learning_rate_recipe(spec.model, o.name)) +
         describe_learning_rate_warmup(o.learning_rate_warmup_steps);
}

InputVerdict input_verdict(double wait_share) {
  return wait_share > kInputBoundWaitShare ? InputVerdict::input_bound : InputVerdict::compute_bound;
}

std::string describe_input(const InputReport& input) {
  std::ostringstream out;
  out << std::fixed << "waited " << std::setprecision(1) << 100.0 * input.wait_share << "% of the measured time ("
      << std::setprecision(3) << input.wait_seconds << " s), " << to_string(input.verdict) << "; the pipeline alone "
      << std::setprecision(0) << input.pipeline_throughput;
  if (input.source == DataSource::bertpretraining) {
    out << " sequences/s per rank, shard by shard";
    if (input.skipped_files > 0) out << "; " << input.skipped_files << " unreadable shards or sequences skipped";
    return out.str();
  }
  out << " images/s per rank with " << input.decode_threads << " decoding threads";
  if (input.skipped_files > 0) out << "; " << input.skipped_files << " unreadable files skipped";
  return out.str();
}

std::span<const EnvironmentField> case_environment_fields() {
  static constexpr EnvironmentField kFields[] = {
      {"dlbenchVersion", &CaseEnvironment::dlbench_version},
      {"backend", &CaseEnvironment::backend},
      {"communicator", &CaseEnvironment::communicator},
      {"cpuModel", &CaseEnvironment::cpu_model},
      {"gpuModel", &CaseEnvironment::gpu_model},
      {"driverVersion", &CaseEnvironment::driver_version},
      {"cudaVersion", &CaseEnvironment::cuda_version},
      {"cudnnVersion", &CaseEnvironment::cudnn_version},
      {"ncclVersion", &CaseEnvironment::nccl_version},
      {"mpiVersion", &CaseEnvironment::mpi_version},
      {"onednnVersion", &CaseEnvironment::onednn_version},
      {"framework", &CaseEnvironment::framework},
      {"frameworkVersion", &CaseEnvironment::framework_version},
  };
  return kFields;
}

std::string describe(const CaseEnvironment& e) {
  std::vector<std::string> groups;
  const auto joined = [](const std::vector<std::string>& items, const char* separator) {
    std::string out;
    for (const std::string& item : items) {
      if (item.empty()) continue;
      out += (out.empty() ? "" : separator) + item;
    }
    return out;
  };
  const auto named = [](const char* name, const std::string& version) {
    return version.empty() ? std::string() : std::string(name) + " " + version;
  };
  groups.push_back(joined({e.framework, e.framework_version}, " "));
  groups.push_back(joined({e.backend.empty() ? "" : e.backend + " backend", e.gpu_model,
                           named("driver", e.driver_version), named("CUDA", e.cuda_version),
                           named("cuDNN", e.cudnn_version), named("NCCL", e.nccl_version),
                           named("oneDNN", e.onednn_version), e.mpi_version},
                          ", "));
  groups.push_back(named("CPU", e.cpu_model));
  std::vector<std::string> options;
  for (const auto& [key, value] : e.backend_options) options.push_back(key + "=" + value);
  if (!options.empty()) groups.push_back("options " + joined(options, " "));
  groups.push_back(named("dlbench", e.dlbench_version));
  return joined(groups, "; ");
}

}  // namespace dlbench
