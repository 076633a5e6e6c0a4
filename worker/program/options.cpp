#include "program/options.hpp"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <iomanip>
#include <iostream>
#include <sstream>
#include <string_view>

#include "cpu/cpu_backend.hpp"
#include "cpu_budget.hpp"
#include "dlbench/core/api_rules.hpp"
#include "dlbench/core/command_line.hpp"
#include "dlbench/core/names.hpp"
#include "dlbench/core/version.hpp"
#include "models/model.hpp"
#include "backend.hpp"
#ifdef DLBENCH_HAVE_CUDA
#include <cuda_runtime.h>

#include "cuda/cuda_backend.hpp"
#endif

namespace dlbench::worker {
namespace {

// After the options in --help: what the options do together.
constexpr const char* kFooter = R"(With imagefolder each step takes the next batch of the rank's shard (a per-epoch shuffle of
the files; RandomResizedCrop, flip and normalisation as torchvision's); the result adds how
long steps waited for input, the pipeline's own images/s per rank and an input-bound or
compute-bound verdict. Unreadable image files are skipped and counted. cityscapes (deeplabv3plus)
does the same with Cityscapes' image and label PNGs (random rescale 0.5-2x, flip, crop padded
with ignored pixels, as torchvision's segmentation reference; labels to the 19 training ids).
Under mpirun every rank trains on its own synthetic batch with the same initial weights
(each rank draws a share and the ranks sum them); gradients are averaged in buckets while backward runs; the
global batch is batch size × ranks; throughput uses the slowest rank's time; rank 0 reports.
Exit codes: 0 measured, 1 the case failed (a Failed result is still written), 2 bad usage.)";

template <typename T>
T parse_number(const std::string& flag, const std::string& text) {
  T value{};
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc{} || ptr != end) throw UsageError{flag + ": \"" + printable(text) + "\" is not a number"};
  return value;
}

using dlbench::parse_bounded;
std::int64_t parse_bounded(const std::string& flag, const std::string& text, IntBounds b) {
  return parse_bounded(flag, text, b.min, b.max);
}

double parse_real(const std::string& flag, const std::string& text, RealBounds b) {
  const double v = parse_number<double>(flag, text);
  // NaN compares false with everything: it must be refused explicitly, as must the infinities.
  if (!std::isfinite(v) || !b.contains(v)) {
    throw UsageError{flag + ": " + text + " is out of range; allowed: " + b.describe()};
  }
  return v;
}

// One of an API enum's spellings (core's one table), parsed once.
template <typename E>
E enum_choice(const std::string& flag, const std::string& text) {
  if (const auto value = enum_from_string<E>(text)) return *value;
  throw UsageError{flag + ": \"" + printable(text) + "\" is not one of " + allowed_values<E>()};
}

// The job's rank count as mpirun tells it (1 outside mpirun), for options that take one rank.
int mpirun_ranks() {
  const char* world = std::getenv("OMPI_COMM_WORLD_SIZE");
  return world != nullptr ? std::max(1, std::atoi(world)) : 1;
}

// DLBENCH_INJECT_FAILURE, refused at the start where it is malformed. A rank the job lacks fails
// nothing, said once: a BenchmarkRun's worker.env reaches every case, the one-rank baseline too.
std::optional<InjectedFailure> injected_failure_from_environment() {
  std::optional<InjectedFailure> failure;
  try {
    failure = parse_injected_failure(std::getenv(kInjectFailureVariable));
  } catch (const std::invalid_argument& e) {
    throw UsageError{e.what()};
  }
  if (const int ranks = mpirun_ranks(); failure && failure->rank >= ranks) {
    const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
    if (rank == nullptr || std::string_view(rank) == "0") {
      std::cerr << "dlbench-worker: " << kInjectFailureVariable << " names rank " << failure->rank << "; this job has "
                << ranks << (ranks == 1 ? " rank" : " ranks") << ": nothing is injected\n";
    }
    return std::nullopt;
  }
  return failure;
}

void print_models() {
  for (const auto& m : model_catalog()) {
    std::cout << std::left << std::setw(14) << m.name() << m.description;
    if (m.sequences) {
      std::cout << " (sequence length " << m.default_sequence_length << ", 8 to 512)\n";
      continue;
    }
    std::cout << " (image size " << m.default_height();
    if (m.default_width() != m.default_height()) std::cout << "x" << m.default_width();
    std::cout << ", >= " << m.min_image_size << ", " << m.classes << " classes" << (m.per_pixel_labels ? " per pixel" : "")
              << ")\n";
  }
}

// What `dlbench run --backend auto` reads: one "backend count" line per backend built in. After
// the count, the precisions that run here (older readers take the first two fields).
void print_devices() {
  std::cout << "cpu " << default_threads() << " precisions=" << allowed_precisions(CpuBackend(1), ",") << "\n";
#ifdef DLBENCH_HAVE_CUDA
  int gpus = 0;
  if (cudaGetDeviceCount(&gpus) != cudaSuccess) gpus = 0;
  // No GPU here, no precision runs here: a CUDA build on a CPU machine lists none.
  std::cout << "cuda " << gpus << " precisions=" << (gpus > 0 ? cuda_precisions(",") : "");
  // The model, last on the line (it has spaces): what `dlbench run` records as having measured.
  if (cudaDeviceProp properties{}; gpus > 0 && cudaGetDeviceProperties(&properties, 0) == cudaSuccess) {
    std::cout << " name=" << properties.name;
  }
  std::cout << "\n";
#endif
}

// One value for a case, the first; a comma list for --self-test (refused_as_list checks which, once
// every flag is read).
template <typename Enum>
void read_list(const std::string& flag, const std::string& value, std::vector<Enum>& list, Enum& first) {
  list.clear();
  std::istringstream items(value);
  for (std::string item; std::getline(items, item, ',');) list.push_back(enum_choice<Enum>(flag, item));
  if (list.empty()) enum_choice<Enum>(flag, value);  // "" is none of them: refused, naming them
  first = list.front();
}

void read_precisions(Options& o, const std::string& flag, const std::string& value) {
  read_list(flag, value, o.self_test_precisions, o.precision);
}
void read_models(Options& o, const std::string& flag, const std::string& value) {
  read_list(flag, value, o.self_test_models, o.model);
}

// Parts of check names, '|' between them: printable text, none empty, a bounded number.
void read_check_names(Options& o, const std::string& flag, const std::string& value) {
  constexpr std::size_t kMostParts = 64, kLongestPart = 200;
  const std::string allowed = "allowed: parts of the checks' names with '|' between them, such as \"vgg16 step|training\"";
  o.self_test_checks.clear();
  std::istringstream parts(value);
  for (std::string part; std::getline(parts, part, '|');) {
    if (part.empty() || part.size() > kLongestPart || printable(part, kLongestPart) != part) {
      throw UsageError{flag + ": \"" + printable(value) + "\" has a part that is empty, longer than " +
                       std::to_string(kLongestPart) + " characters or not printable; " + allowed};
    }
    if (o.self_test_checks.size() == kMostParts) {
      throw UsageError{flag + ": more than " + std::to_string(kMostParts) + " parts"};
    }
    o.self_test_checks.push_back(part);
  }
  if (o.self_test_checks.empty() || value.ends_with('|')) {
    throw UsageError{flag + ": \"" + printable(value) + "\" names no check; " + allowed};
  }
}

// A list is for --self-test: a case `does` one of the values.
template <typename Enum>
void refuse_list_without_self_test(const Options& o, const std::string& flag, const std::vector<Enum>& list,
                                   const std::string& does) {
  if (list.size() <= 1 || o.self_test) return;
  throw UsageError{flag + ": a list (" + std::string(to_string(list.front())) + ",...) only with --self-test; a case " +
                   does + " one of " + allowed_values<Enum>()};
}

// N (square) or HxW, each side within the API's bounds.
void read_image_size(Options& o, const std::string& flag, const std::string& value) {
  const std::size_t x = value.find('x');
  o.image_height = parse_bounded(flag, value.substr(0, x), bounds::kImageSize);
  o.image_width = x == std::string::npos ? o.image_height : parse_bounded(flag, value.substr(x + 1), bounds::kImageSize);
}

// The BenchmarkRun's name: it goes into metric labels and the result document.
std::string run_name(const std::string& value) {
  if (!value.empty() && !is_dns1123_label(value)) {
    throw UsageError{"--run: \"" + printable(value) +
                     "\" is not a BenchmarkRun name (a DNS-1123 label: lowercase letters, digits and '-', at most 63)"};
  }
  return value;
}

MemoryReuse memory_plan(const std::string& flag, const std::string& value) {
  const std::string plan = one_of(flag, value, {"lifetime", "none", "poison"});
  return plan == "none" ? MemoryReuse::none : plan == "poison" ? MemoryReuse::poison : MemoryReuse::lifetime;
}

using FlagReader = std::function<void(Options&, const std::string& flag, const std::string& value)>;

// An option that takes a value: its flag, what --help calls the value and says of it, and how
// its text is read.
struct ValueOption {
  const char* flag;
  const char* value_name;
  const char* description;
  FlagReader read;
};

const std::vector<ValueOption>& value_options() {
  static const std::vector<ValueOption> options{
      {"--model", "NAME",
       "resnet50 | resnet152 | vgg16 | alexnet | inception_v3 | deeplabv3plus | bert-base (--list-models says what "
       "each is; default resnet50). With --self-test a comma list: each image model's whole step is checked layer by "
       "layer, with resnet50's",
       read_models},
#ifdef DLBENCH_HAVE_CUDA
      {"--backend", "NAME", "cpu | cuda (default cpu)",
       [](Options& o, auto& f, auto& v) { o.backend = one_of(f, v, {"cpu", "cuda"}); }},
#else
      {"--backend", "NAME", "cpu (cuda when built with CUDA; default cpu)",
       [](Options& o, auto& f, auto& v) { o.backend = one_of(f, v, {"cpu"}); }},
#endif
      {"--batch-size", "N", "samples per device and step, >= 1 (default 32)",
       [](Options& o, auto& f, auto& v) { o.batch_size = parse_bounded(f, v, bounds::kBatchSizePerDevice); }},
      {"--image-size", "N|HxW",
       "input size in pixels, square or height x width (default: the model's: 224; 299 for inception_v3; 512x1024 "
       "for deeplabv3plus)",
       read_image_size},
      {"--precision", "P",
       "fp32 | tf32 | amp | bf16 (default fp32); one the backend cannot run ends as a Failed result with reason "
       "Unsupported (cpu: fp32, and bf16 where the CPU has AVX512_BF16; cuda: fp32, tf32 and amp, and bf16 on "
       "compute capability 8.0 or newer). With --self-test a comma list",
       read_precisions},
      {"--warmup-steps", "N", "untimed steps before each repeat, >= 0 (default 20)",
       [](Options& o, auto& f, auto& v) { o.warmup_steps = parse_bounded(f, v, bounds::kWarmupSteps); }},
      {"--measure-steps", "N", "timed steps per repeat, >= 1 (default 100)",
       [](Options& o, auto& f, auto& v) { o.measure_steps = parse_bounded(f, v, bounds::kMeasureSteps); }},
      {"--repeats", "N", "repeats; the median is reported, >= 1 (default 7)",
       [](Options& o, auto& f, auto& v) { o.repeats = parse_bounded(f, v, bounds::kRepeats); }},
      {"--statistic", "S", "median | mean (default median)",
       [](Options& o, auto& f, auto& v) { o.statistic = enum_choice<Statistic>(f, v); }},
      {"--max-cv", "X",
       "the spread (stddev / mean) the last --repeats throughputs may have; 0 < x <= 1 (default 0.02 on cuda, 0.05 "
       "on cpu)",
       [](Options& o, auto& f, auto& v) { o.max_cv = parse_real(f, v, bounds::kMaxCv); }},
      {"--extra-repeats", "N",
       "measure again, one repeat at a time, up to N more while the last --repeats spread more than --max-cv; still "
       "so: reason Unstable (default 7)",
       [](Options& o, auto& f, auto& v) { o.extra_repeats = parse_bounded(f, v, bounds::kExtraRepeats); }},
      {"--sequence-length", "N", "bert-base: tokens per sequence, 8 to 512 (default 128)",
       [](Options& o, auto& f, auto& v) { o.sequence_length = parse_bounded(f, v, bounds::kSequenceLength); }},
      {"--optimizer", "O",
       "sgd | adamw | lamb (AdamW, and LAMB with its per-tensor trust ratio: beta2 0.999, epsilon 1e-6, gradients "
       "clipped to a global norm of 1; no decay on biases and norms; default sgd)",
       [](Options& o, auto& f, auto& v) { o.optimizer = enum_choice<OptimizerName>(f, v); }},
      {"--learning-rate", "X",
       "learning rate, > 0 (default: the model's recipe for the optimizer; sgd: 0.1 ResNets and inception_v3, 0.01 "
       "alexnet, vgg16 and bert-base, each at a global batch of 256, 0.007 deeplabv3plus at 16, linearly less below "
       "it; adamw: 1e-4 bert-base, 1e-3 the others; lamb: 1e-3)",
       [](Options& o, auto& f, auto& v) { o.learning_rate = parse_real(f, v, bounds::kLearningRate); }},
      {"--learning-rate-warmup-steps", "N",
       "raise the learning rate linearly over the first N updates: the t-th trains at rate · t / N; 0 to 1000000 "
       "(default 0: at the rate from the first)",
       [](Options& o, auto& f, auto& v) {
         o.learning_rate_warmup_steps = parse_bounded(f, v, bounds::kLearningRateWarmupSteps);
       }},
      {"--momentum", "X", "SGD momentum, AdamW's and LAMB's beta1; 0 <= x < 1 (default 0.9)",
       [](Options& o, auto& f, auto& v) { o.momentum = parse_real(f, v, bounds::kMomentum); }},
      {"--weight-decay", "X", "weight decay, 0 <= x <= 1 (AdamW: decoupled; default 0.0001)",
       [](Options& o, auto& f, auto& v) { o.weight_decay = parse_real(f, v, bounds::kWeightDecay); }},
      {"--threads", "N", "CPU threads per rank; 0 = this process's cores shared by the ranks on this node (default 0)",
       [](Options& o, auto& f, auto& v) { o.threads = parse_bounded(f, v, 0, 4096); }},
      {"--communicator", "C", "auto | none | mpi | nccl (cuda); auto = under mpirun, nccl on cuda and mpi on cpu "
                              "(default auto)",
       [](Options& o, auto& f, auto& v) { o.communicator = one_of(f, v, {"auto", "none", "mpi", "nccl"}); }},
      {"--bucket-mb", "N", "gradient bucket size in MiB, >= 1 (default 25)",
       [](Options& o, auto& f, auto& v) { o.bucket_mb = parse_bounded(f, v, 1, 4096); }},
      {"--seed", "N", "weights, synthetic data, shuffling and augmentation (default 42)",
       [](Options& o, auto& f, auto& v) { o.seed = parse_number<unsigned long long>(f, v); }},
      {"--data", "S",
       "synthetic | imagefolder (image classifiers) | cityscapes (deeplabv3plus) | bertpretraining (bert-base) "
       "(default synthetic)",
       [](Options& o, auto& f, auto& v) {
         o.data = one_of(f, v, {"synthetic", "imagefolder", "cityscapes", "bertpretraining"});
       }},
      {"--data-path", "DIR",
       "imagefolder: DIR/<class>/<image>.jpg; cityscapes: DIR/leftImg8bit/train/<city>/<name>_leftImg8bit.png and "
       "DIR/gtFine/train/<city>/<name>_gtFine_labelIds.png; bertpretraining: DIR/*.hdf5 shards (NVIDIA's format) or "
       "one shard; the same on every node",
       [](Options& o, auto&, auto& v) { o.data_path = v; }},
      {"--decode-threads", "N", "imagefolder, cityscapes: decoding threads per rank, 1 to 256 (default 4)",
       [](Options& o, auto& f, auto& v) { o.decode_threads = parse_bounded(f, v, bounds::kDecodeThreads); }},
      {"--prefetch-batches", "N", "imagefolder, cityscapes: batches prepared ahead per rank, 1 to 64 (default 2)",
       [](Options& o, auto& f, auto& v) { o.prefetch_batches = parse_bounded(f, v, bounds::kPrefetchBatches); }},
      {"--run", "NAME", "BenchmarkRun name to record in the result", [](Options& o, auto&, auto& v) { o.run = run_name(v); }},
      {"--metrics-port", "N",
       "serve Prometheus /metrics on N + local rank while running; 0 picks a free port (printed); default: off",
       [](Options& o, auto& f, auto& v) { o.metrics_port = parse_bounded(f, v, 0, 65535); }},
      {"--self-test-checks", "TEXT[|TEXT...]",
       "with --self-test: run only the checks whose name (as the table prints it) contains one of the TEXTs, "
       "case-sensitive: \"vgg16 step|alexnet step\" checks those models' whole steps alone; the self-test fails "
       "when no check's name contains any",
       read_check_names},
      {"--output", "FILE", "write the JSON result there (default: stdout, table to stderr)",
       [](Options& o, auto&, auto& v) { o.output = v; }},
      {"--cuda-graph", "on|off",
       "cuda, one rank: capture the training step once as a CUDA graph and replay it, in every precision (the "
       "first step runs eagerly; amp's loss scaling skips and backs off on the device; default off)",
       [](Options& o, auto& f, auto& v) { o.cuda_graph = one_of(f, v, {"on", "off"}) == "on"; }},
      {"--memory-plan", "P",
       "lifetime: activation and gradient buffers share memory once their last reader has run; none: each has its "
       "own; poison: each has its own and is filled with NaN once its last declared reader has run (finds an op "
       "reading past its lifetime; default lifetime)",
       [](Options& o, auto& f, auto& v) { o.memory_plan = memory_plan(f, v); }},
      {"--profile", "N",
       "after the repeats, time N more steps layer by layer (CUDA events on a GPU, the host clock on the CPU): a "
       "table of where a step goes, by layer kind and slowest layers, and \"profile\" in the result",
       [](Options& o, auto& f, auto& v) { o.profile_steps = parse_bounded(f, v, 1, 1000); }},
      {"--init-from", "FILE",
       "start from the weights in FILE instead of the seed's: a safetensors file with torchvision's state_dict "
       "names and shapes (batch-norm running statistics in it are allowed and not used)",
       [](Options& o, auto&, auto& v) { o.init_from = v; }},
      {"--record-step", "FILE",
       "run one training step on the synthetic batch and write it to FILE (safetensors: input, labels, loss, and "
       "initial.*, grad.* and updated.* for every parameter), then exit; one rank",
       [](Options& o, auto&, auto& v) { o.record_step = v; }},
  };
  return options;
}

// --self-test, --init-from and --record-step, and what each excludes.
void check_modes(Options& o) {
  if (!o.self_test && !o.self_test_checks.empty()) throw UsageError{"--self-test-checks: only with --self-test"};
  refuse_list_without_self_test(o, "--precision", o.self_test_precisions, "runs");
  refuse_list_without_self_test(o, "--model", o.self_test_models, "trains");
  if (o.self_test && o.self_test_models.empty()) o.self_test_models.push_back(o.model);
  if (o.self_test && o.self_test_precisions.empty()) {
    const auto all = enum_values<Precision>();
    o.self_test_precisions.assign(all.begin(), all.end());
  }
  if (!o.init_from.empty()) {
    if (o.self_test) throw UsageError{"--init-from: not with --self-test (it checks ops on its own weights)"};
    if (std::ifstream probe(o.init_from, std::ios::binary); !probe) {
      throw UsageError{"--init-from: cannot read " + printable(o.init_from)};
    }
  }
  if (!o.record_step.empty()) {
    if (o.self_test) throw UsageError{"--record-step: not with --self-test"};
    if (o.data != "synthetic" && o.data != "bertpretraining") {
      throw UsageError{"--record-step: records a step on synthetic data or BERT's pretraining shards; --data is " + o.data};
    }
    if (o.cuda_graph) throw UsageError{"--record-step: runs one eager step; not with --cuda-graph on"};
    if (const int ranks = mpirun_ranks(); ranks > 1) {
      throw UsageError{"--record-step: records one rank's step; run it without mpirun (here " + std::to_string(ranks) +
                       " ranks)"};
    }
  }
  if (o.self_test) o.precision = Precision::fp32;  // the primary backend: fp32 math (tf32 gets its own)
}

// The backend, its communicator, step graphs and the data source: which go together.
void check_execution(const Options& o) {
  if (o.data == "imagefolder" && o.data_path.empty()) {
    throw UsageError{"--data imagefolder needs --data-path DIR (DIR/<class>/<image>.jpg)"};
  }
  if (o.data == "cityscapes" && o.data_path.empty()) {
    throw UsageError{"--data cityscapes needs --data-path DIR (DIR/leftImg8bit/train and DIR/gtFine/train)"};
  }
  if (o.data == "bertpretraining" && o.data_path.empty()) {
    throw UsageError{"--data bertpretraining needs --data-path DIR (DIR/*.hdf5, NVIDIA's pretraining shards)"};
  }
  if (o.data == "synthetic" && !o.data_path.empty()) {
    throw UsageError{"--data-path: only with --data imagefolder, cityscapes or bertpretraining (--data is synthetic)"};
  }
  if (o.cuda_graph && o.profile_steps > 0) {
    throw UsageError{"--profile: times eager steps layer by layer, and a replayed step graph runs no layer; not with "
                     "--cuda-graph on"};
  }
  if (const int ranks = mpirun_ranks(); o.cuda_graph && ranks > 1) {
    throw UsageError{"--cuda-graph: on runs one rank (the gradient allreduce is driven from the host between "
                     "backward and the update); allowed with " + std::to_string(ranks) + " ranks: off"};
  }
  if (o.communicator == "mpi" && o.backend == "cuda") {
    // The MPI communicator reduces host buffers; device pointers would need a CUDA-aware MPI.
    throw UsageError{"--communicator: mpi reduces host memory and the cuda backend keeps gradients on the GPU; "
                     "allowed with --backend cuda: auto, none, nccl"};
  }
  if (o.communicator == "nccl" && o.backend != "cuda") {
    throw UsageError{"--communicator: nccl reduces device buffers and needs --backend cuda; allowed here: auto, none, mpi"};
  }
#ifndef DLBENCH_HAVE_NCCL
  if (o.communicator == "nccl") throw UsageError{"--communicator: nccl is not built in (needs CUDA and MPI); allowed: auto, none, mpi"};
#endif
#ifndef DLBENCH_HAVE_MPI
  if (o.communicator == "mpi") throw UsageError{"--communicator: mpi is not built in (DLBENCH_WITH_MPI=OFF); allowed: none"};
#endif
}

// The model's input: token sequences or images, its default size, and what its data may be.
void apply_model(Options& o) {
  const ModelInfo model = model_info(o.model);
  const std::string name = model.name();
  if (model.sequences) {
    if (o.data != "synthetic" && o.data != "bertpretraining") {
      throw UsageError{"--data " + o.data + ": " + name + " trains on token sequences; allowed: synthetic, bertpretraining"};
    }
    if (o.image_height != 0) throw UsageError{"--image-size: " + name + " takes token sequences; use --sequence-length"};
    if (o.sequence_length == 0) o.sequence_length = model.default_sequence_length;
    return;
  }
  if (o.sequence_length != 0) {
    throw UsageError{"--sequence-length: " + name + " takes images (--image-size); sequence models: bert-base"};
  }
  if (o.image_height == 0) {
    o.image_height = model.default_height();
    o.image_width = model.default_width();
  }
  if (std::min(o.image_height, o.image_width) < model.min_image_size) {
    throw UsageError{"--image-size: " + image_size_text(o) + " is too small for " + name + "; allowed: " +
                     std::to_string(model.min_image_size) + " to " + std::to_string(bounds::kImageSize.max) +
                     " on each side"};
  }
  if (o.data == "imagefolder" && model.per_pixel_labels) {
    throw UsageError{"--data imagefolder: " + name +
                     " trains on a label per pixel and imagefolder gives one per image; allowed: synthetic, cityscapes"};
  }
  if (o.data == "cityscapes" && !model.per_pixel_labels) {
    throw UsageError{"--data cityscapes: " + name +
                     " trains on a label per image and cityscapes gives one per pixel; allowed: synthetic, imagefolder"};
  }
  if (o.data == "bertpretraining") {
    throw UsageError{"--data bertpretraining: " + name + " trains on images and bertpretraining holds token sequences; "
                     "allowed: synthetic, " + (model.per_pixel_labels ? "cityscapes" : "imagefolder")};
  }
  if (o.data == "imagefolder" && o.image_height != o.image_width) {
    throw UsageError{"--data imagefolder: crops are square; --image-size " + image_size_text(o) + " needs synthetic data"};
  }
}

}  // namespace

int default_threads() { return default_thread_budget().threads; }

std::string image_size_text(const Options& o) {
  return image_size_argument(static_cast<int>(o.image_height), static_cast<int>(o.image_width));
}

std::optional<Options> parse_options(int argc, char** argv) {
  Options o;
  CLI::App app{"dlbench-worker — train a model on synthetic or real data and measure it", "dlbench-worker"};
  app.set_help_flag("--help", "print this and exit");
  app.footer(kFooter);
  use_dlbench_help(app);
  for (const ValueOption& option : value_options()) {
    const std::string flag = option.flag;
    add_text_option(app, flag, [&o, flag, read = option.read](const std::string& v) { read(o, flag, v); },
                    option.description, option.value_name);
  }
  app.add_flag("--self-test", o.self_test,
               "check this backend against the CPU backend in fp32 (op by op, a few training steps), loss scaling, "
               "step-graph replay and the communicator across every rank, for each --precision (a comma list; "
               "default every one, those the backend cannot run skipped); prints a table, writes a "
               "dlbench.selftest/v1 document like a result, exits 1 if a check failed on any rank");
  bool list_models = false, list_devices = false, print_version = false;
  app.add_flag("--version", print_version, "print dlbench-worker's version (and the revision it was built from) and exit");
  app.add_flag("--list-models", list_models, "print the models and exit");
  app.add_flag("--list-devices", list_devices,
               "print \"cpu <threads> precisions=<what runs here>\" and, when built with CUDA, \"cuda <GPUs> "
               "precisions=...\"");
  try {
    parse_command_line(app, {argv + 1, argv + argc});
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return std::nullopt;
  }
  if (print_version) {
    std::cout << "dlbench-worker " << version() << "\n";
    return std::nullopt;
  }
  if (list_models) print_models();
  if (list_devices) print_devices();
  if (list_models || list_devices) return std::nullopt;
  check_modes(o);
  check_execution(o);
  apply_model(o);
  o.inject_failure = injected_failure_from_environment();
  return o;
}

void resolve_learning_rate(Options& o, int ranks) {
  if (o.learning_rate == 0) o.learning_rate = default_learning_rate(o.model, o.optimizer, o.batch_size * ranks);
}

}  // namespace dlbench::worker
