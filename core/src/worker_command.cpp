#include "dlbench/core/worker_command.hpp"

#include <algorithm>
#include <sstream>

#include "dlbench/core/nccl_log.hpp"
#include "dlbench/core/planner.hpp"

namespace dlbench {
namespace {

std::string real(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

}  // namespace

namespace {

// The self-test of every precision the run measures, on the backend and communicator the cases use,
// with the whole step of the run's model checked layer by layer (an image model's).
std::vector<std::string> self_test_arguments(const BenchmarkRun& run, const WorkerInvocation& how) {
  std::string precisions;
  for (const Precision p : planned_precisions(run.spec)) {
    precisions += (precisions.empty() ? "" : ",") + std::string(to_string(p));
  }
  return {how.program, "--self-test", "--backend", how.backend, "--precision", precisions,
          "--model", std::string(to_string(run.spec.model)), "--communicator", how.communicator,
          "--run", run.metadata.name};
}

std::vector<std::string> case_arguments(const BenchmarkRun& run, const CaseSpec& c, const WorkerInvocation& how) {
  const auto& spec = run.spec;
  const auto& m = spec.methodology;
  const OptimizerSpec o = optimizer_for_case(spec, c);
  std::vector<std::string> args{how.program,
                                "--model", std::string(to_string(spec.model)),
                                "--backend", how.backend,
                                "--batch-size", std::to_string(c.batch_size_per_device),
                                "--precision", std::string(to_string(c.precision)),
                                "--warmup-steps", std::to_string(m.warmup_steps),
                                "--measure-steps", std::to_string(m.measure_steps),
                                "--repeats", std::to_string(m.repeats),
                                "--statistic", std::string(to_string(m.statistic)),
                                "--extra-repeats", std::to_string(m.stability.extra_repeats),
                                "--learning-rate", real(o.learning_rate),
                                "--momentum", real(o.momentum),
                                "--weight-decay", real(o.weight_decay),
                                "--optimizer", std::string(to_string(o.name)),
                                "--communicator", how.communicator,
                                "--run", run.metadata.name};
  if (o.learning_rate_warmup_steps > 0) {  // the worker's default is none
    args.push_back("--learning-rate-warmup-steps");
    args.push_back(std::to_string(o.learning_rate_warmup_steps));
  }
  if (spec.cuda_graph) {  // the worker's default is eager steps
    args.push_back("--cuda-graph");
    args.push_back("on");
  }
  if (m.stability.max_cv) {  // unset: the worker's backend knows its default
    args.push_back("--max-cv");
    args.push_back(real(*m.stability.max_cv));
  }
  // A sequence model's input is its sequence length; an image model's, its image size.
  const bool sequences = is_sequence_model(spec.model);
  args.push_back(sequences ? "--sequence-length" : "--image-size");
  args.push_back(sequences ? std::to_string(sequence_length(spec.data)) : image_size_argument(spec.data));
  if (spec.data.source != DataSource::synthetic) {
    for (const std::string& a : {std::string("--data"), std::string(to_string(spec.data.source)), std::string("--data-path"), spec.data.path,
                                 std::string("--decode-threads"), std::to_string(spec.data.decode_threads),
                                 std::string("--prefetch-batches"), std::to_string(spec.data.prefetch_batches)}) {
      args.push_back(a);
    }
  }
  if (how.metrics_port >= 0) {  // the self-test serves no metrics
    args.push_back("--metrics-port");
    args.push_back(std::to_string(how.metrics_port));
  }
  return args;
}

}  // namespace

std::vector<std::string> worker_arguments(const BenchmarkRun& run, const CaseSpec& c, const WorkerInvocation& how) {
  std::vector<std::string> args = c.preflight ? self_test_arguments(run, how) : case_arguments(run, c, how);
  if (how.threads > 0) {
    args.push_back("--threads");
    args.push_back(std::to_string(how.threads));
  }
  if (!how.output.empty()) {
    args.push_back("--output");
    args.push_back(how.output);
  }
  return args;
}

std::vector<std::pair<std::string, std::string>> command_environment(const BenchmarkRun& run, const CaseSpec& c,
                                                                     const CommandNode& where) {
  const auto& spec = run.spec;
  const auto& m = spec.methodology;
  const long total_steps = static_cast<long>(m.repeats) * (m.warmup_steps + m.measure_steps);
  const OptimizerSpec optimizer = optimizer_for_case(spec, c);
  std::vector<std::pair<std::string, std::string>> env{{"DLBENCH_RUN", run.metadata.name},
          {"DLBENCH_CASE", case_id(c)},
          {"DLBENCH_MODEL", std::string(to_string(spec.model))},
          {"DLBENCH_IMAGE_SIZE", image_size_argument(spec.data)},
          {"DLBENCH_IMAGE_HEIGHT", std::to_string(spec.data.height())},
          {"DLBENCH_IMAGE_WIDTH", std::to_string(spec.data.width())},
          {"DLBENCH_SEQUENCE_LENGTH", std::to_string(sequence_length(spec.data))},
          {"DLBENCH_DATA_SOURCE", std::string(to_string(spec.data.source))},
          {"DLBENCH_NODES", std::to_string(c.nodes)},
          {"DLBENCH_NODE_RANK", std::to_string(where.node_rank)},
          {"DLBENCH_GPUS_PER_NODE", std::to_string(c.gpus_per_node)},
          {"DLBENCH_DEVICES", std::to_string(c.devices())},
          {"DLBENCH_BATCH_SIZE", std::to_string(c.batch_size_per_device)},
          {"DLBENCH_GLOBAL_BATCH_SIZE", std::to_string(c.global_batch_size())},
          {"DLBENCH_PRECISION", std::string(to_string(c.precision))},
          {"DLBENCH_WARMUP_STEPS", std::to_string(m.warmup_steps)},
          {"DLBENCH_MEASURE_STEPS", std::to_string(m.measure_steps)},
          {"DLBENCH_REPEATS", std::to_string(m.repeats)},
          {"DLBENCH_TOTAL_STEPS", std::to_string(total_steps)},
          {"DLBENCH_STATISTIC", std::string(to_string(m.statistic))},
          {"DLBENCH_LEARNING_RATE", real(optimizer.learning_rate)},
          {"DLBENCH_MOMENTUM", real(optimizer.momentum)},
          {"DLBENCH_WEIGHT_DECAY", real(optimizer.weight_decay)},
          {"DLBENCH_LEARNING_RATE_WARMUP_STEPS", std::to_string(optimizer.learning_rate_warmup_steps)},
          {"DLBENCH_OPTIMIZER", std::string(to_string(optimizer.name))},
          {"MASTER_ADDR", where.master_addr},
          {"MASTER_PORT", std::to_string(where.master_port)},
          {"WORLD_SIZE", std::to_string(c.nodes)},
          {"RANK", std::to_string(where.node_rank)},
          {"NODE_RANK", std::to_string(where.node_rank)},
          // torchrun reads PET_* for its own options (Kubeflow's PyTorchJob sets the same).
          {"PET_NNODES", std::to_string(c.nodes)},
          {"PET_NPROC_PER_NODE", std::to_string(c.gpus_per_node)},
          {"PET_NODE_RANK", std::to_string(where.node_rank)},
          {"PET_MASTER_ADDR", where.master_addr},
          {"PET_MASTER_PORT", std::to_string(where.master_port)},
          // Markers must arrive when they are printed, not when a pipe buffer fills.
          {"PYTHONUNBUFFERED", "1"}};
  if (spec.data.source != DataSource::synthetic) {
    env.emplace_back("DLBENCH_DATA_PATH", spec.data.path);
    env.emplace_back("DLBENCH_DECODE_THREADS", std::to_string(spec.data.decode_threads));
    env.emplace_back("DLBENCH_PREFETCH_BATCHES", std::to_string(spec.data.prefetch_batches));
  }
  if (!where.home.empty()) env.emplace_back("DLBENCH_HOME", where.home);
  if (m.stability.max_cv) env.emplace_back("DLBENCH_MAX_CV", real(*m.stability.max_cv));
  // NCCL's own word on its transports, read from the output (a multi-node case that asked for
  // RDMA is judged on it), unless the user chose NCCL's logging.
  const bool user_nccl_debug = std::any_of(spec.worker.env.begin(), spec.worker.env.end(),
                                           [](const EnvVar& e) { return e.name == "NCCL_DEBUG"; });
  if (c.devices() > 1 && !user_nccl_debug) {
    env.emplace_back("NCCL_DEBUG", kNcclDebugLevel);
    env.emplace_back("NCCL_DEBUG_SUBSYS", kNcclDebugSubsystems);
  }
  return env;
}

}  // namespace dlbench
