// dlbench-worker's command line: the options of one invocation, parsed and checked once.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "arena.hpp"
#include "injected_failure.hpp"
#include "dlbench/core/api_rules.hpp"
#include "dlbench/core/benchmark_run.hpp"
#include "dlbench/core/enums.hpp"
#include "dlbench/core/usage_error.hpp"

namespace dlbench::worker {

inline constexpr int kExitFailed = 1;

// Every enum below is parsed with core's one spelling table; every number within the API's bounds.
struct Options {
  Model model = Model::resnet50;
  std::string backend = "cpu";
  long batch_size = 32;
  long image_height = 0;  // 0: the model's default
  long image_width = 0;
  Precision precision = Precision::fp32;
  long warmup_steps = 20;
  long measure_steps = 100;
  long repeats = 7;
  Statistic statistic = Statistic::median;
  std::optional<double> max_cv;  // unset: the backend's default
  long extra_repeats = defaults::kExtraRepeats;
  long sequence_length = 0;  // 0: the model's default (sequence models)
  OptimizerName optimizer = OptimizerName::sgd;
  double learning_rate = 0;  // 0: the model's recipe at the global batch (resolve_learning_rate)
  double momentum = 0.9;
  double weight_decay = 1e-4;
  long learning_rate_warmup_steps = 0;
  long threads = 0;
  std::string communicator = "auto";
  long bucket_mb = 25;
  unsigned long long seed = 42;
  std::string run;
  std::string output;
  long metrics_port = -1;  // off
  bool cuda_graph = false;
  MemoryReuse memory_plan = MemoryReuse::lifetime;
  long profile_steps = 0;  // --profile: off
  std::optional<InjectedFailure> inject_failure;  // DLBENCH_INJECT_FAILURE (injected_failure.hpp)
  std::string data = "synthetic";
  std::string data_path;
  long decode_threads = defaults::kDecodeThreads;
  long prefetch_batches = defaults::kPrefetchBatches;
  std::string init_from;    // weights file (safetensors, torchvision's names)
  std::string record_step;  // write one step's record there and exit
  bool self_test = false;
  std::vector<Precision> self_test_precisions;  // --self-test: every one unless --precision says
  std::vector<Model> self_test_models;  // --self-test: whose whole step is checked, with ResNet-50's
  // --self-test: only the checks whose name contains one of these run (none: every check)
  std::vector<std::string> self_test_checks;
};

// The options, or nothing when the command line only asked for --help, --list-models or
// --list-devices (printed here). Throws dlbench::UsageError.
std::optional<Options> parse_options(int argc, char** argv);

// No --learning-rate: the model's recipe for the optimizer at this job's global batch (the batch
// per rank times `ranks`), as core resolves a spec that leaves it unset (default_learning_rate).
void resolve_learning_rate(Options& o, int ranks);

// --threads 0: the cores this process may use (its affinity mask and its cgroup's CPU quota),
// shared evenly by the ranks on this node.
int default_threads();

// "224" or "512x1024", as --image-size takes it.
std::string image_size_text(const Options& o);

}  // namespace dlbench::worker
