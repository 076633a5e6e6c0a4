#include "dlbench/core/worker_command.hpp"

#include <sstream>

namespace dlbench {
namespace {

std::string real(double v) {
  std::ostringstream s;
  s.precision(17);
  s << v;
  return s.str();
}

}  // namespace

std::vector<std::string> worker_arguments(const BenchmarkRun& run, const CaseSpec& c, const WorkerInvocation& how) {
  const auto& spec = run.spec;
  const auto& m = spec.methodology;
  const auto& o = spec.optimizer;
  std::vector<std::string> args{how.program,
                                "--model", std::string(to_string(spec.model)),
                                "--backend", how.backend,
                                "--batch-size", std::to_string(c.batch_size_per_device),
                                "--image-size", std::to_string(spec.data.image_size),
                                "--precision", std::string(to_string(c.precision)),
                                "--warmup-steps", std::to_string(m.warmup_steps),
                                "--measure-steps", std::to_string(m.measure_steps),
                                "--repeats", std::to_string(m.repeats),
                                "--statistic", std::string(to_string(m.statistic)),
                                "--learning-rate", real(o.learning_rate),
                                "--momentum", real(o.momentum),
                                "--weight-decay", real(o.weight_decay),
                                "--communicator", how.communicator,
                                "--run", run.metadata.name};
  if (how.threads > 0) {
    args.push_back("--threads");
    args.push_back(std::to_string(how.threads));
  }
  if (how.metrics_port >= 0) {
    args.push_back("--metrics-port");
    args.push_back(std::to_string(how.metrics_port));
  }
  if (!how.output.empty()) {
    args.push_back("--output");
    args.push_back(how.output);
  }
  return args;
}

}  // namespace dlbench
