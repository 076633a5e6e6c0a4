#include "dlbench/core/benchmark_run.hpp"

#include "dlbench/core/api_rules.hpp"

#include <iomanip>
#include <sstream>
#include <string>

namespace dlbench {

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

}  // namespace dlbench
