// dlbench-worker: trains one model on one backend for one case and reports it with the
// methodology: a table for people and one dlbench.result/v1 JSON document for programs.
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <fstream>
#include <iomanip>
#include <iostream>
#include <map>
#include <new>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "communicator.hpp"
#include "cpu_budget.hpp"
#include "gpu_monitor.hpp"
#include "interference.hpp"
#include "cpu/cpu_backend.hpp"
#ifdef DLBENCH_HAVE_CUDA
#include "cuda/cuda_backend.hpp"
#endif
#ifdef DLBENCH_HAVE_NCCL
#include "cuda/nccl_communicator.hpp"
#endif
#include "gradient_buckets.hpp"
#include "input/input_pipeline.hpp"
#include "dlbench/core/api_rules.hpp"
#include "dlbench/core/device_peaks.hpp"
#include "dlbench/core/names.hpp"
#include "dlbench/core/result_document.hpp"
#include "dlbench/core/statistics.hpp"
#include "dlbench/core/status.hpp"
#include "methodology.hpp"
#include "models/model.hpp"
#include "layer_profiler.hpp"
#include "self_test.hpp"
#include "trainer.hpp"
#include "weights_file.hpp"
#include "worker_metrics.hpp"

namespace {

using namespace dlbench;
using namespace dlbench::worker;

constexpr int kExitUsage = 2;
constexpr int kExitFailed = 1;

constexpr const char* kUsage = R"(dlbench-worker — train a model on synthetic or real data and measure it

Usage: dlbench-worker [options]
  --model NAME            resnet50 | resnet152 | vgg16 | alexnet | inception_v3 | deeplabv3plus |
                          bert-base (--list-models says what each is)     (default resnet50)
  --backend NAME          cpu | cuda (when built with CUDA)                (default cpu)
  --batch-size N          samples per device and step, >= 1              (default 32)
  --image-size N|HxW      input size in pixels, square or height x width (default: the model's:
                          224; 299 for inception_v3; 512x1024 for deeplabv3plus)
  --precision P           fp32 | tf32 | amp | bf16 (default fp32); one the backend cannot run
                          ends as a Failed result with reason Unsupported (cpu: fp32, and bf16
                          where the CPU has AVX512_BF16; cuda: fp32, tf32)
  --warmup-steps N        untimed steps before each repeat, >= 0         (default 20)
  --measure-steps N       timed steps per repeat, >= 1                   (default 100)
  --repeats N             repeats; the median is reported, >= 1          (default 7)
  --statistic S           median | mean                                  (default median)
  --max-cv X              the spread (stddev / mean) the last --repeats throughputs may have;
                          0 < x <= 1 (default 0.02 on cuda, 0.05 on cpu)
  --extra-repeats N       measure again, one repeat at a time, up to N more while the last
                          --repeats spread more than --max-cv; still so: reason Unstable (default 7)
  --sequence-length N     bert-base: tokens per sequence, 8 to 512       (default 128)
  --optimizer O           sgd | adamw | lamb (AdamW, and LAMB with its per-tensor trust ratio:
                          beta2 0.999, epsilon 1e-6, gradients clipped to a global norm of
                          1; no decay on biases and norms)               (default sgd)
  --learning-rate X       learning rate, > 0                             (default 0.1)
  --momentum X            SGD momentum, AdamW's and LAMB's beta1; 0 <= x < 1 (default 0.9)
  --weight-decay X        weight decay, 0 <= x <= 1 (AdamW: decoupled)    (default 0.0001)
  --threads N             CPU threads per rank; 0 = this process's cores
                          shared by the ranks on this node               (default 0)
  --communicator C        auto | none | mpi | nccl (cuda); auto = under
                          mpirun, nccl on cuda and mpi on cpu            (default auto)
  --bucket-mb N           gradient bucket size in MiB, >= 1              (default 25)
  --seed N                weights, synthetic data, shuffling and augmentation (default 42)
  --data S                synthetic | imagefolder                        (default synthetic)
  --data-path DIR         imagefolder: DIR/<class>/<image>.jpg, the same on every node
  --decode-threads N      imagefolder: JPEG decoding threads per rank, 1 to 256 (default 4)
  --prefetch-batches N    imagefolder: batches prepared ahead per rank, 1 to 64 (default 2)
  --run NAME              BenchmarkRun name to record in the result
  --metrics-port N        serve Prometheus /metrics on N + local rank while running;
                          0 picks a free port (printed); default: off
  --output FILE           write the JSON result there (default: stdout, table to stderr)
  --cuda-graph on|off     cuda, one rank: capture the training step once as a CUDA graph
                          and replay it (the first step runs eagerly; dropout masks are
                          then fixed)                                     (default off)
  --memory-plan P         lifetime: activation and gradient buffers share memory once
                          their last reader has run; none: each has its own; poison: each
                          has its own and is filled with NaN once its last declared reader
                          has run (finds an op reading past its lifetime) (default lifetime)
  --profile N             after the repeats, time N more steps layer by layer (CUDA events
                          on a GPU, the host clock on the CPU): a table of where a step
                          goes, by layer kind and slowest layers, and "profile" in the result
  --init-from FILE        start from the weights in FILE instead of the seed's: a safetensors
                          file with torchvision's state_dict names and shapes (batch-norm
                          running statistics in it are allowed and not used)
  --record-step FILE      run one training step on the synthetic batch and write it to FILE
                          (safetensors: input, labels, loss, and initial.*, grad.* and
                          updated.* for every parameter), then exit; one rank
  --self-test             check this backend against the CPU backend in fp32 (op by op, a few
                          training steps), loss scaling, step-graph replay and the
                          communicator across every rank, for each --precision (a comma
                          list; default every one, those the backend cannot run skipped);
                          prints a table, writes a dlbench.selftest/v1 document like a
                          result, exits 1 if a check failed on any rank
  --list-models           print the models and exit
  --list-devices          print "cpu <threads> precisions=<what runs here>" and, when built
                          with CUDA, "cuda <GPUs> precisions=..."
  --help                  print this and exit
With imagefolder each step takes the next batch of the rank's shard (a per-epoch shuffle of
the files; RandomResizedCrop, flip and normalisation as torchvision's); the result adds how
long steps waited for input, the pipeline's own images/s per rank and an input-bound or
compute-bound verdict. Unreadable JPEG files are skipped and counted.
Under mpirun every rank trains on its own synthetic batch with the same initial weights
(broadcast from rank 0); gradients are averaged in buckets while backward runs; the
global batch is batch size × ranks; throughput uses the slowest rank's time; rank 0 reports.
Exit codes: 0 measured, 1 the case failed (a Failed result is still written), 2 bad usage.
)";

// The process's peak resident set, as the kernel counts it (Linux: KiB).
std::optional<double> peak_resident_bytes() {
  rusage usage{};
  if (getrusage(RUSAGE_SELF, &usage) != 0) return std::nullopt;
  return static_cast<double>(usage.ru_maxrss) * 1024.0;
}

// --threads 0: the cores this process may use (its affinity mask and its cgroup's CPU quota),
// shared evenly by the ranks on this node (under the operator every rank of a worker pod starts
// with the default).
int default_threads() { return default_thread_budget().threads; }

struct Options;

struct Options;
std::string image_size_text(const Options& o);

struct Options {
  std::string model = "resnet50";
  std::string backend = "cpu";
  long batch_size = 32;
  long image_height = 0;  // 0: the model's default
  long image_width = 0;
  Precision precision = Precision::fp32;  // parsed once, with core's spelling table
  long warmup_steps = 20;
  long measure_steps = 100;
  long repeats = 7;
  std::string statistic = "median";
  std::optional<double> max_cv;  // unset: the backend's default
  long extra_repeats = defaults::kExtraRepeats;
  long sequence_length = 0;  // 0: the model's default (sequence models)
  OptimizerName optimizer = OptimizerName::sgd;
  double learning_rate = 0.1;
  double momentum = 0.9;
  double weight_decay = 1e-4;
  long threads = 0;
  std::string communicator = "auto";
  long bucket_mb = 25;
  unsigned long long seed = 42;
  std::string run;
  std::string output;
  long metrics_port = -1;  // off
  bool cuda_graph = false;
  std::string memory_plan = "lifetime";
  long profile_steps = 0;  // --profile: off
  std::string data = "synthetic";
  std::string data_path;
  long decode_threads = defaults::kDecodeThreads;
  long prefetch_batches = defaults::kPrefetchBatches;
  std::string init_from;    // weights file (safetensors, torchvision's names)
  std::string record_step;  // write one step's record there and exit
  bool self_test = false;
  std::vector<Precision> self_test_precisions;  // --self-test: every one unless --precision says
};

std::string image_size_text(const Options& o) {
  return image_size_argument(static_cast<int>(o.image_height), static_cast<int>(o.image_width));
}


struct UsageError {
  std::string message;
};

template <typename T>
T parse_number(const std::string& flag, const std::string& text) {
  T value{};
  const char* end = text.data() + text.size();
  auto [ptr, ec] = std::from_chars(text.data(), end, value);
  if (ec != std::errc{} || ptr != end) throw UsageError{flag + ": \"" + printable(text) + "\" is not a number"};
  return value;
}

long parse_bounded(const std::string& flag, const std::string& text, long lo, long hi) {
  const long v = parse_number<long>(flag, text);
  if (v < lo || v > hi) {
    throw UsageError{flag + ": " + text + " is out of range; allowed: " + std::to_string(lo) + " to " + std::to_string(hi)};
  }
  return v;
}

double parse_real(const std::string& flag, const std::string& text, double lo, bool lo_open, double hi, bool hi_open) {
  const double v = parse_number<double>(flag, text);
  // NaN compares false with everything: it must be refused explicitly, as must the infinities.
  if (!std::isfinite(v) || (lo_open ? v <= lo : v < lo) || (hi_open ? v >= hi : v > hi)) {
    std::ostringstream range;
    range << (lo_open ? "greater than " : "at least ") << lo << " and " << (hi_open ? "less than " : "at most ") << hi;
    throw UsageError{flag + ": " + text + " is out of range; allowed: " + range.str()};
  }
  return v;
}

long parse_bounded(const std::string& flag, const std::string& text, IntBounds b) {
  return parse_bounded(flag, text, static_cast<long>(b.min), static_cast<long>(b.max));
}

double parse_real(const std::string& flag, const std::string& text, RealBounds b) {
  return parse_real(flag, text, b.min, b.exclusive_min, b.max, b.exclusive_max);
}

std::string choice(const std::string& flag, const std::string& text, const std::vector<std::string>& allowed) {
  for (const auto& a : allowed) {
    if (a == text) return text;
  }
  std::string list;
  for (const auto& a : allowed) list += (list.empty() ? "" : ", ") + a;
  throw UsageError{flag + ": \"" + printable(text) + "\" is not one of " + list};
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

std::optional<Options> parse(int argc, char** argv) {
  Options o;
  std::vector<std::string> models;
  for (const auto& m : model_catalog()) models.push_back(m.name);
  for (int i = 1; i < argc; ++i) {
    std::string flag = argv[i];
    std::string value;
    if (const auto eq = flag.find('='); flag.starts_with("--") && eq != std::string::npos) {
      value = flag.substr(eq + 1);
      flag = flag.substr(0, eq);
    } else if (flag != "--help" && flag != "--list-models" && flag != "--list-devices" && flag != "--self-test") {
      if (i + 1 >= argc) throw UsageError{flag + " needs a value"};
      value = argv[++i];
    }
    if (flag == "--help") {
      std::cout << kUsage;
      return std::nullopt;
    } else if (flag == "--list-models") {
      for (const auto& m : model_catalog()) {
        if (m.sequences) {
          std::cout << std::left << std::setw(14) << m.name << m.description << " (sequence length "
                    << m.default_sequence_length << ", 8 to 512)\n";
          continue;
        }
        std::cout << std::left << std::setw(14) << m.name << m.description << " (image size " << m.default_height();
        if (m.default_width() != m.default_height()) std::cout << "x" << m.default_width();
        std::cout << ", >= " << m.min_image_size << ", " << m.classes << " classes" << (m.per_pixel_labels ? " per pixel" : "")
                  << ")\n";
      }
      return std::nullopt;
    } else if (flag == "--list-devices") {
      // What `dlbench run --backend auto` reads: one "backend count" line per backend built in.
      // After the count, the precisions that run here (older readers take the first two fields).
      std::cout << "cpu " << default_threads() << " precisions=" << allowed_precisions(CpuBackend(1), ",") << "\n";
#ifdef DLBENCH_HAVE_CUDA
      int gpus = 0;
      if (cudaGetDeviceCount(&gpus) != cudaSuccess) gpus = 0;
      // No GPU here, no precision runs here: a CUDA build on a CPU machine lists none.
      std::cout << "cuda " << gpus << " precisions=" << (gpus > 0 ? cuda_precisions(",") : "") << "\n";
#endif
      return std::nullopt;
    } else if (flag == "--self-test") {
      o.self_test = true;
    } else if (flag == "--model") {
      o.model = choice(flag, value, models);
    } else if (flag == "--backend") {
#ifdef DLBENCH_HAVE_CUDA
      o.backend = choice(flag, value, {"cpu", "cuda"});
#else
      o.backend = choice(flag, value, {"cpu"});
#endif
    } else if (flag == "--batch-size") {
      o.batch_size = parse_bounded(flag, value, bounds::kBatchSizePerDevice);
    } else if (flag == "--image-size") {
      // N (square) or HxW, each side within the API's bounds.
      const std::size_t x = value.find('x');
      o.image_height = parse_bounded(flag, value.substr(0, x), bounds::kImageSize);
      o.image_width = x == std::string::npos ? o.image_height : parse_bounded(flag, value.substr(x + 1), bounds::kImageSize);
    } else if (flag == "--precision") {
      // One precision for a case; a comma list for --self-test (checked once every flag is read).
      o.self_test_precisions.clear();
      std::istringstream list(value);
      for (std::string p; std::getline(list, p, ',');) o.self_test_precisions.push_back(enum_choice<Precision>(flag, p));
      if (o.self_test_precisions.empty()) enum_choice<Precision>(flag, value);  // "" is none of them: refused, naming them
      o.precision = o.self_test_precisions.front();
    } else if (flag == "--warmup-steps") {
      o.warmup_steps = parse_bounded(flag, value, bounds::kWarmupSteps);
    } else if (flag == "--measure-steps") {
      o.measure_steps = parse_bounded(flag, value, bounds::kMeasureSteps);
    } else if (flag == "--repeats") {
      o.repeats = parse_bounded(flag, value, bounds::kRepeats);
    } else if (flag == "--statistic") {
      o.statistic = choice(flag, value, {"median", "mean"});
    } else if (flag == "--max-cv") {
      o.max_cv = parse_real(flag, value, bounds::kMaxCv);
    } else if (flag == "--extra-repeats") {
      o.extra_repeats = parse_bounded(flag, value, bounds::kExtraRepeats);
    } else if (flag == "--sequence-length") {
      o.sequence_length = parse_bounded(flag, value, bounds::kSequenceLength);
    } else if (flag == "--optimizer") {
      o.optimizer = enum_choice<OptimizerName>(flag, value);
    } else if (flag == "--learning-rate") {
      o.learning_rate = parse_real(flag, value, bounds::kLearningRate);
    } else if (flag == "--momentum") {
      o.momentum = parse_real(flag, value, bounds::kMomentum);
    } else if (flag == "--weight-decay") {
      o.weight_decay = parse_real(flag, value, bounds::kWeightDecay);
    } else if (flag == "--threads") {
      o.threads = parse_bounded(flag, value, 0, 4096);
    } else if (flag == "--communicator") {
      o.communicator = choice(flag, value, {"auto", "none", "mpi", "nccl"});
    } else if (flag == "--bucket-mb") {
      o.bucket_mb = parse_bounded(flag, value, 1, 4096);
    } else if (flag == "--seed") {
      o.seed = parse_number<unsigned long long>(flag, value);
    } else if (flag == "--run") {
      // The BenchmarkRun's name: it goes into metric labels and the result document.
      if (!value.empty() && !is_dns1123_label(value)) {
        throw UsageError{"--run: \"" + printable(value) +
                         "\" is not a BenchmarkRun name (a DNS-1123 label: lowercase letters, digits and '-', at most 63)"};
      }
      o.run = value;
    } else if (flag == "--metrics-port") {
      o.metrics_port = parse_bounded(flag, value, 0, 65535);
    } else if (flag == "--output") {
      o.output = value;
    } else if (flag == "--init-from") {
      o.init_from = value;
    } else if (flag == "--record-step") {
      o.record_step = value;
    } else if (flag == "--data") {
      o.data = choice(flag, value, {"synthetic", "imagefolder"});
    } else if (flag == "--data-path") {
      o.data_path = value;
    } else if (flag == "--decode-threads") {
      o.decode_threads = parse_bounded(flag, value, bounds::kDecodeThreads);
    } else if (flag == "--prefetch-batches") {
      o.prefetch_batches = parse_bounded(flag, value, bounds::kPrefetchBatches);
    } else if (flag == "--cuda-graph") {
      o.cuda_graph = choice(flag, value, {"on", "off"}) == "on";
    } else if (flag == "--profile") {
      o.profile_steps = parse_bounded(flag, value, 1, 1000);
    } else if (flag == "--memory-plan") {
      o.memory_plan = choice(flag, value, {"lifetime", "none", "poison"});
    } else {
      throw UsageError{"unknown option " + printable(flag) + " (see --help)"};
    }
  }
  if (o.self_test_precisions.size() > 1 && !o.self_test) {
    throw UsageError{"--precision: a list (" + std::string(to_string(o.self_test_precisions.front())) +
                     ",...) only with --self-test; a case runs one of " + allowed_values<Precision>()};
  }
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
    if (o.data != "synthetic") throw UsageError{"--record-step: records a step on synthetic data; --data is " + o.data};
    if (o.cuda_graph) throw UsageError{"--record-step: runs one eager step; not with --cuda-graph on"};
    if (const int ranks = mpirun_ranks(); ranks > 1) {
      throw UsageError{"--record-step: records one rank's step; run it without mpirun (here " + std::to_string(ranks) +
                       " ranks)"};
    }
  }
  if (o.self_test) o.precision = Precision::fp32;  // the primary backend: fp32 math (tf32 gets its own)
  if (o.data == "imagefolder" && o.data_path.empty()) {
    throw UsageError{"--data imagefolder needs --data-path DIR (DIR/<class>/<image>.jpg)"};
  }
  if (o.data != "imagefolder" && !o.data_path.empty()) {
    throw UsageError{"--data-path: only with --data imagefolder (--data is " + o.data + ")"};
  }
  if (o.cuda_graph && o.backend != "cuda") {
    throw UsageError{"--cuda-graph: on needs --backend cuda; allowed here: off"};
  }
  if (o.cuda_graph && o.profile_steps > 0) {
    throw UsageError{"--profile: times eager steps layer by layer, and a replayed step graph runs no layer; not with "
                     "--cuda-graph on"};
  }
  if (o.cuda_graph && uses_loss_scaling(o.precision) && !o.self_test) {
    // Refused here, not after the model is built: a replayed graph applies every step's update,
    // and amp's loss scaler decides on the host whether a step with an inf or NaN is skipped.
    throw UsageError{"--cuda-graph: on replays every step's update as captured, and amp's loss scaling skips "
                     "steps from the host; allowed with --precision amp: off"};
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
  const ModelInfo model = model_info(o.model);
  if (model.sequences) {
    if (o.data != "synthetic") {
      throw UsageError{"--data " + o.data + ": " + o.model + " trains on synthetic token sequences; allowed: synthetic"};
    }
    if (o.image_height != 0) throw UsageError{"--image-size: " + o.model + " takes token sequences; use --sequence-length"};
    if (o.sequence_length == 0) o.sequence_length = model.default_sequence_length;
    return o;
  }
  if (o.sequence_length != 0) {
    throw UsageError{"--sequence-length: " + o.model + " takes images (--image-size); sequence models: bert-base"};
  }
  if (o.image_height == 0) {
    o.image_height = model.default_height();
    o.image_width = model.default_width();
  }
  if (std::min(o.image_height, o.image_width) < model.min_image_size) {
    throw UsageError{"--image-size: " + image_size_text(o) + " is too small for " + o.model + "; allowed: " +
                     std::to_string(model.min_image_size) + " to " + std::to_string(bounds::kImageSize.max) +
                     " on each side"};
  }
  if (o.data == "imagefolder" && model.per_pixel_labels) {
    throw UsageError{"--data imagefolder: " + o.model +
                     " trains on a label per pixel and imagefolder gives one per image; allowed: synthetic"};
  }
  if (o.data == "imagefolder" && o.image_height != o.image_width) {
    throw UsageError{"--data imagefolder: crops are square; --image-size " + image_size_text(o) +
                     " needs synthetic data"};
  }
  return o;
}

// Distinct hosts in rank order: the job's nodes.
std::vector<std::string> distinct(const std::vector<std::string>& hosts) {
  std::vector<std::string> out;
  for (const auto& h : hosts) {
    if (std::find(out.begin(), out.end(), h) == out.end()) out.push_back(h);
  }
  return out;
}

// "key=value;key=value" (Backend::version_info) -> the value of `key`, or "".
std::string info_value(const std::string& info, const std::string& key) {
  std::istringstream in(info);
  for (std::string item; std::getline(in, item, ';');) {
    if (item.rfind(key + "=", 0) == 0) return item.substr(key.size() + 1);
  }
  return "";
}

// `requested_threads`: --threads, 0 for the default budget.
EnvironmentInfo environment(const Backend* backend, const std::string& backend_name, Communicator& communicator,
                            const std::vector<std::string>& hosts, long requested_threads) {
  EnvironmentInfo e = host_environment();
  e.hosts = distinct(hosts);
  const ThreadBudget budget = default_thread_budget();
  e.cpu_cores = budget.threads;
  const std::string info = backend != nullptr ? backend->version_info() : "";
  if (const auto* cpu = dynamic_cast<const CpuBackend*>(backend)) {
    e.cpu_cores = cpu->threads();
    e.cpu_threads_reason = requested_threads > 0 ? "--threads " + std::to_string(requested_threads) : budget.reason;
    e.onednn_version = info_value(info, "onednn");
  }
#ifdef DLBENCH_HAVE_CUDA
  if (const auto* gpu = dynamic_cast<const CudaBackend*>(backend)) {
    e.gpu_model = gpu->properties().name;
    cudaGetDeviceCount(&e.gpu_count);
    e.driver_version = info_value(info, "driver");
    e.cuda_version = info_value(info, "cuda");
    e.cudnn_version = info_value(info, "cudnn");
  }
#endif
  e.backend = backend_name;
  e.communicator = communicator.name();
  e.dlbench_version = DLBENCH_VERSION;
  return e;
}

void print_table(std::ostream& out, const ResultDocument& doc, std::int64_t parameters,
                 const std::vector<double>& losses) {
  out << "dlbench-worker: " << to_string(doc.model) << " on " << doc.environment.backend << " ("
      << doc.environment.cpu_model << ", " << doc.environment.cpu_cores << " threads), case " << case_id(doc.case_)
      << (doc.sequence_length > 0 ? ", sequence length " + std::to_string(doc.sequence_length)
                                  : ", image " + image_size_argument(doc.image_height, doc.image_width));
  // A case that failed before its model was built (no GPU, say) has no parameters or memory to tell.
  if (parameters > 0) {
    out << ", " << parameters << " parameters, activations " << std::fixed << std::setprecision(2)
        << (doc.memory ? doc.memory->activations : 0.0) / (1 << 30) << " GiB";
  }
  if (doc.memory && doc.memory->unshared_activations > 0) {
    out << " (" << std::setprecision(0) << 100.0 * doc.memory->activations / doc.memory->unshared_activations
        << "% of unshared)";
  }
  if (doc.memory && doc.memory->peak_resident) {
    out << ", peak resident " << std::setprecision(2) << *doc.memory->peak_resident / (1 << 30) << " GiB";
  }
  out << "\n";
  out << "  methodology: warm-up " << doc.methodology.warmup_steps << ", measure " << doc.methodology.measure_steps
      << ", repeats " << doc.methodology.repeats << "\n";
  const std::string unit = doc.throughput ? doc.throughput->unit : "samples/s";
  out << "  repeat  " << std::setw(9) << unit << "   step ms   loss after\n";
  if (doc.throughput) {
    // Repeats measured again come first (discarded), then the reported ones; one loss per repeat.
    const std::size_t extra = doc.stability ? static_cast<std::size_t>(doc.stability->extra_repeats) : 0;
    for (std::size_t i = 0; i < extra + doc.throughput->repeats.size(); ++i) {
      const bool discarded = i < extra && i < doc.stability->discarded.size();
      if (i < extra && !discarded) continue;
      const double tp = discarded ? doc.stability->discarded[i] : doc.throughput->repeats[i - extra];
      out << "  " << std::setw(6) << i + 1 << "  " << std::setw(9) << std::fixed << std::setprecision(2) << tp << "  "
          << std::setw(8) << std::setprecision(2) << 1000.0 * static_cast<double>(doc.global_batch_size) / tp << "  "
          << std::setw(10) << std::setprecision(4) << (i < losses.size() ? losses[i] : 0.0)
          << (discarded ? "  (discarded: measured again)" : "") << "\n";
    }
    const auto& s = doc.throughput->summary;
    const double gflops = s.median * doc.flops_per_sample.training / 1e9;
    out << "  median " << std::setprecision(2) << s.median << " " << unit << " (min " << s.min << ", max " << s.max
        << ", cv " << std::setprecision(2) << 100.0 * s.cv << "%), " << std::setprecision(1) << gflops
        << " GFLOP/s of training arithmetic";
    if (doc.mfu) out << ", MFU " << std::setprecision(1) << 100.0 * *doc.mfu << "%";
    out << "\n";
    if (doc.stability) {
      out << "  stability: ";
      if (doc.stability->verdict == StabilityVerdict::unstable) {
        out << "UNSTABLE (" << doc.reason << "): " << doc.message << "\n";
      } else {
        out << "stable, cv " << std::setprecision(2) << 100.0 * doc.stability->cv << "% <= " << 100.0 * doc.stability->max_cv
            << "%";
        if (doc.stability->extra_repeats > 0) out << " after " << doc.stability->extra_repeats << " more repeats";
        out << "\n";
      }
    }
    if (doc.input) out << "  input: " << describe_input(*doc.input) << "\n";
    if (doc.interference) {
      out << "  other load: " << std::setprecision(1);
      if (doc.interference->cpu_pressure) out << "tasks waited for a CPU " << 100.0 * *doc.interference->cpu_pressure << "% of the time, ";
      out << "steal " << 100.0 * doc.interference->cpu_steal << "%";
      if (const auto& g = doc.interference->gpu) {
        out << "; GPU: " << g->other_processes << " other processes, SM clock " << std::setprecision(0)
            << g->sm_clock_min_mhz << "-" << g->sm_clock_median_mhz << " (median) of " << g->sm_clock_max_mhz << " MHz, "
            << g->temperature_max_c << " C at most, " << g->power_median_w << " W median";
        for (const GpuThrottleReason r : g->throttle_reasons) out << ", " << to_string(r);
      }
      out << ": " << to_string(doc.interference->verdict) << "\n";
    }
    if (doc.profile) print_profile(out, *doc.profile);
  } else {
    out << "  FAILED: " << doc.reason << ": " << doc.message << "\n";
  }
}

// The worst GPU of the case speaks for it: the most other processes, the lowest clocks, every
// reason any GPU saw, the hottest, the most power. Ranks without readings (no NVML) send nothing.
std::optional<GpuReadings> worst_gpu(const std::optional<GpuReadings>& mine, Communicator& comm) {
  if (comm.size() == 1) return mine;
  constexpr double kNone = -1e30;  // loses every max
  constexpr GpuThrottleReason kReasons[] = {GpuThrottleReason::thermal, GpuThrottleReason::hw_slowdown,
                                            GpuThrottleReason::power_brake, GpuThrottleReason::power_cap};
  std::vector<double> worst(12, kNone);
  if (mine) {
    worst = {1.0, static_cast<double>(mine->other_processes), -mine->sm_clock_min_mhz, -mine->sm_clock_median_mhz,
             mine->sm_clock_max_mhz, mine->temperature_max_c, mine->power_median_w, static_cast<double>(mine->samples)};
    for (const GpuThrottleReason r : kReasons) {
      const auto& seen = mine->throttle_reasons;
      worst.push_back(std::find(seen.begin(), seen.end(), r) != seen.end() ? 1.0 : 0.0);
    }
  }
  comm.max(worst.data(), static_cast<std::int64_t>(worst.size()));
  if (worst[0] < 0) return std::nullopt;
  GpuReadings g;
  g.other_processes = static_cast<int>(worst[1]);
  g.sm_clock_min_mhz = -worst[2];
  g.sm_clock_median_mhz = -worst[3];
  g.sm_clock_max_mhz = worst[4];
  g.temperature_max_c = worst[5];
  g.power_median_w = worst[6];
  g.samples = static_cast<int>(worst[7]);
  for (std::size_t i = 0; i < std::size(kReasons); ++i) {
    if (worst[8 + i] > 0) g.throttle_reasons.push_back(kReasons[i]);
  }
  return g;
}

// Other load over the measured repeats, as the busiest node saw it (every rank reads its own),
// and the worst GPU's readings where there are any.
InterferenceReport node_interference(InterferenceReport mine, const std::optional<GpuReadings>& gpu, Communicator& comm) {
  if (comm.size() > 1) {
    std::vector<double> worst{mine.cpu_pressure.value_or(-1.0), mine.cpu_steal};
    comm.max(worst.data(), static_cast<std::int64_t>(worst.size()));
    mine.cpu_pressure = worst[0] >= 0 ? std::optional<double>(worst[0]) : std::nullopt;
    mine.cpu_steal = worst[1];
  }
  mine.gpu = worst_gpu(gpu, comm);
  mine.verdict = interference_verdict(mine.cpu_pressure, mine.cpu_steal, mine.gpu ? &*mine.gpu : nullptr);
  return mine;
}

// This rank's GPU through NVML, for a case on the CUDA backend; nullptr (and a note) without it.
std::unique_ptr<GpuMonitor> open_gpu_monitor([[maybe_unused]] const Backend& device, [[maybe_unused]] int rank) {
#ifdef DLBENCH_HAVE_CUDA
  if (const auto* gpu = dynamic_cast<const CudaBackend*>(&device)) {
    const cudaDeviceProp& p = gpu->properties();
    char bus_id[32];
    std::snprintf(bus_id, sizeof bus_id, "%08x:%02x:%02x.0", static_cast<unsigned>(p.pciDomainID),
                  static_cast<unsigned>(p.pciBusID), static_cast<unsigned>(p.pciDeviceID));
    std::string why;
    auto monitor = GpuMonitor::open(bus_id, why);
    if (!monitor) std::cerr << "dlbench-worker rank " << rank << ": no GPU readings: " << why << "\n";
    return monitor;
  }
#endif
  return nullptr;
}

// --profile: `steps` more eager steps, every layer timed (after the measurement, so that its
// marks cost the measured steps nothing). Every rank runs them: the steps' allreduces pair up.
StepProfile profile_steps(Trainer& trainer, Backend& device, int steps) {
  LayerProfiler profiler(trainer.network(), device);
  trainer.set_layer_observer(&profiler);
  profiler.step_boundary();
  for (int i = 0; i < steps; ++i) {
    trainer.step();
    profiler.step_boundary();
  }
  trainer.set_layer_observer(nullptr);
  return profiler.finish(steps);
}

// The JSON document to --output (or stdout); the exit code for it.
int write_document(const Options& o, const nlohmann::json& document, bool succeeded) {
  const std::string text = document.dump(2) + "\n";
  if (o.output.empty()) {
    std::cout << text;
  } else {
    std::ofstream out(o.output);
    out << text;
    if (!out) {
      std::cerr << "dlbench-worker: cannot write " << o.output << "\n";
      return kExitFailed;
    }
  }
  return succeeded ? 0 : kExitFailed;
}

// auto under mpirun: NCCL when the ranks train on GPUs, MPI otherwise.
std::unique_ptr<Communicator> make_communicator(const Options& o, int* argc, char*** argv, Backend* backend) {
#ifdef DLBENCH_HAVE_NCCL
  auto* gpu = dynamic_cast<CudaBackend*>(backend);
  if (gpu != nullptr && (o.communicator == "nccl" || (o.communicator == "auto" && launched_by_mpi()))) {
    return make_nccl_communicator(argc, argv, gpu->device(), gpu->stream());
  }
#else
  (void)backend;
#endif
#ifdef DLBENCH_HAVE_MPI
  if (o.communicator == "mpi" || o.communicator == "nccl" || (o.communicator == "auto" && launched_by_mpi())) {
    return make_mpi_communicator(argc, argv);  // nccl without a GPU: MPI, so that the failure is reported
  }
#else
  (void)argc;
  (void)argv;
#endif
  (void)o;
  return std::make_unique<NoCommunicator>();
}

// The backend the options ask for. On the GPU each rank takes the device of its local rank.
std::unique_ptr<Backend> make_backend(const Options& o) {
#ifdef DLBENCH_HAVE_CUDA
  if (o.backend == "cuda") {
    const char* local_rank = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    int devices = 0;
    if (cudaGetDeviceCount(&devices) != cudaSuccess) cudaGetLastError();
    // With no device the constructor throws, saying why.
    const int device = (local_rank != nullptr ? std::atoi(local_rank) : 0) % std::max(devices, 1);
    return std::make_unique<CudaBackend>(device, cuda_math(o.precision), activation_dtype(o.precision));
  }
#endif
  return std::make_unique<CpuBackend>(o.threads > 0 ? static_cast<int>(o.threads) : default_threads());
}

// Why this worker cannot run the case's precision on its backend, or nothing when it can. The API
// admits every precision; a case that lands where its precision cannot run ends as a Failed
// result with reason Unsupported (never retried), not as a usage error.
std::optional<std::string> unsupported_precision(const Options& o, const Backend* backend) {
  if (backend == nullptr) return std::nullopt;  // the backend's own failure says more
  const auto why = cannot_run(o.precision, *backend);
  if (!why) return std::nullopt;
  return *why + ". Allowed on the " + o.backend + " backend here: " + allowed_precisions(*backend, ", ");
}

// Every model here ends in ImageNet's 1,000 classes; an imagefolder data set may not have more.
constexpr std::int64_t kModelClasses = 1000;

// The real-data side of a case: the pipeline and what the steps waited for it.
struct RealData {
  input::ImageFolder folder;
  std::unique_ptr<input::InputPipeline> pipeline;
  std::deque<double> waits;         // each step's, until the methodology reports its time
  std::vector<double> measured_waits;
  double measured_seconds = 0;      // this rank's own measured time
  double pipeline_throughput = 0;   // images/s, training idle
};

// The pipeline alone: the batches prefetched while the model was set up are drained, then
// batches are timed until a second has passed (at least two, at most fifty).
double measure_pipeline_alone(input::InputPipeline& pipeline, int prefetch_batches, long batch_size) {
  using clock = std::chrono::steady_clock;
  for (int i = 0; i <= prefetch_batches; ++i) pipeline.next();
  const auto start = clock::now();
  long batches = 0;
  double seconds = 0;
  do {
    pipeline.next();
    ++batches;
    seconds = std::chrono::duration<double>(clock::now() - start).count();
  } while (batches < 50 && (batches < 2 || seconds < 1.0));
  return static_cast<double>(batches * batch_size) / seconds;
}

class DataUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class Unsupported : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// `backend` is null when it could not be set up (no GPU, say): the case fails with why.
class BackendUnavailable : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The case's trainer: its model, batch, precision and SGD, from the seed's weights or --init-from's.
// Owned by pointer: the trainer's arena holds its buffers' addresses, so it never moves.
std::unique_ptr<Trainer> make_trainer(const Options& o, Backend& device, int rank, bool keep_every_buffer = false) {
  const ModelInfo model = model_info(o.model);
  const SgdConfig sgd{static_cast<float>(o.learning_rate), static_cast<float>(o.momentum), static_cast<float>(o.weight_decay)};
  const MemoryReuse reuse = o.memory_plan == "none" || keep_every_buffer ? MemoryReuse::none
                            : o.memory_plan == "poison"                   ? MemoryReuse::poison
                                                                          : MemoryReuse::lifetime;
  std::unique_ptr<Trainer> trainer;
  if (model.sequences) {
    if (const auto why = device.cannot_run_transformers()) throw Unsupported(*why);
    trainer = std::make_unique<Trainer>(device, build_model(o.model), PretrainingBatchLayout{o.batch_size, o.sequence_length},
                                        model.classes, sgd, o.seed, static_cast<std::uint64_t>(rank), reuse,
                                        activation_dtype(o.precision));
  } else {
    trainer = std::make_unique<Trainer>(device, build_model(o.model, model.classes),
                                        Shape(o.batch_size, 3, o.image_height, o.image_width), model.classes, sgd, o.seed,
                                        static_cast<std::uint64_t>(rank), reuse, activation_dtype(o.precision));
  }
  if (o.optimizer != OptimizerName::sgd) {
    if (const auto why = device.cannot_run_transformers()) throw Unsupported(std::string(to_string(o.optimizer)) + ": " + *why);
    const AdamWConfig adam{static_cast<float>(o.learning_rate), static_cast<float>(o.momentum), 0.999f, 1e-6f,
                           static_cast<float>(o.weight_decay), 1.0f};
    if (o.optimizer == OptimizerName::lamb) {
      trainer->use_lamb(adam);
    } else {
      trainer->use_adamw(adam);
    }
  }
  if (uses_loss_scaling(o.precision)) trainer->use_loss_scaling({});
  if (!o.init_from.empty()) load_parameters(read_weights_file(o.init_from), o.init_from, trainer->parameters(), device);
  return trainer;
}

// --record-step: one eager step, everything it read and wrote, for comparing with another
// framework on the same weights and batch (tests/golden).
int record_step(const Options& o, Backend* backend, const std::string& backend_error) {
  try {
    if (backend == nullptr) throw BackendUnavailable(backend_error);
    if (const auto why = unsupported_precision(o, backend)) throw Unsupported(*why);
    // Every buffer its own memory, so that the step's dropout masks are still there after it.
    const std::unique_ptr<Trainer> owner = make_trainer(o, *backend, 0, true);
    Trainer& trainer = *owner;
    WeightsFile record;
    record.metadata = {{"format", "dlbench.step/v1"},
                       {"model", o.model},
                       {"backend", o.backend},
                       {"precision", std::string(to_string(o.precision))},
                       {"batch_size", std::to_string(o.batch_size)},
                       {"seed", std::to_string(o.seed)},
                       {"optimizer", std::string(to_string(o.optimizer))},
                       {"learning_rate", std::to_string(o.learning_rate)},
                       {"momentum", std::to_string(o.momentum)},
                       {"weight_decay", std::to_string(o.weight_decay)},
                       {"init_from", o.init_from},
                       {"dlbench_version", DLBENCH_VERSION}};
    const auto ints = [](const std::vector<std::int32_t>& from, std::int64_t offset, std::int64_t count) {
      const auto begin = from.begin() + offset;
      return std::vector<std::int64_t>(begin, begin + count);
    };
    if (trainer.input().dtype == DType::int32) {
      // A pretraining batch: token ids, token types, the masked positions (within each sequence)
      // with their original tokens, and the next-sentence labels.
      record.metadata["sequence_length"] = std::to_string(o.sequence_length);
      std::vector<std::int32_t> tokens, block;
      trainer.copy_sequences_to_host(tokens, block);
      const PretrainingBatchLayout layout{o.batch_size, o.sequence_length};
      const std::int64_t n = layout.sequences, length = layout.tokens, p = layout.predictions();
      std::vector<std::int64_t> positions = ints(block, layout.masked_rows(), n * p);
      for (std::size_t i = 0; i < positions.size(); ++i) positions[i] -= static_cast<std::int64_t>(i) / p * length;
      record.tensors.push_back(NamedTensor::of_ints("input", {n, length}, ints(tokens, 0, n * length).data()));
      record.tensors.push_back(NamedTensor::of_ints("token_type_ids", {n, length}, ints(block, layout.token_types(), n * length).data()));
      record.tensors.push_back(NamedTensor::of_ints("masked_positions", {n, p}, positions.data()));
      record.tensors.push_back(NamedTensor::of_ints("masked_tokens", {n, p}, ints(block, layout.masked_tokens(), n * p).data()));
      record.tensors.push_back(NamedTensor::of_ints("labels", {n}, ints(block, layout.next_sentence_labels(), n).data()));
    } else {
      record.metadata["image_size"] = image_size_text(o);
      std::vector<float> pixels;
      std::vector<std::int32_t> labels32;
      trainer.copy_batch_to_host(pixels, labels32);
      const std::vector<std::int64_t> labels(labels32.begin(), labels32.end());
      record.tensors.push_back(NamedTensor::of_floats("input", dims_of(trainer.input().shape), pixels.data()));
      // One label per sample, or per pixel: (N, H, W) for a segmentation model.
      const std::vector<std::int64_t> label_dims =
          labels.size() == static_cast<std::size_t>(o.batch_size)
              ? std::vector<std::int64_t>{o.batch_size}
              : std::vector<std::int64_t>{o.batch_size, o.image_height, o.image_width};
      record.tensors.push_back(NamedTensor::of_ints("labels", label_dims, labels.data()));
    }
    for (auto& t : parameter_tensors(trainer.parameters(), *backend, "initial.")) record.tensors.push_back(std::move(t));
    const float loss = trainer.step_and_loss();
    backend->synchronize();
    record.tensors.push_back(NamedTensor::of_floats("loss", {}, &loss));
    for (const DropoutMaskState& state : step_state(trainer.network())) {
      Tensor mask = activation(state.shape, state.layout, DType::fp32);
      const std::shared_ptr<void> storage = backend->allocate(mask.bytes());
      mask.data = storage.get();
      backend->dropout_mask(mask, state.p, state.layer_seed);
      record.tensors.push_back(NamedTensor::of_floats("state." + state.name, dims_of(mask.shape), download(*backend, mask).data()));
    }
    for (auto& t : parameter_tensors(trainer.parameters(), *backend, "grad.", true)) record.tensors.push_back(std::move(t));
    for (auto& t : parameter_tensors(trainer.parameters(), *backend, "updated.")) record.tensors.push_back(std::move(t));
    write_weights_file(o.record_step, record);
    std::cerr << "dlbench-worker: recorded one " << o.model << " step (loss " << loss << ", "
              << trainer.parameters().parameters().size() << " parameters) to " << o.record_step << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "dlbench-worker: --record-step: " << e.what() << "\n";
    return kExitFailed;
  }
}

int run(const Options& o, Communicator& comm, Backend* backend, const std::string& backend_error) {
  const std::vector<std::string> hosts = comm.hosts();
  const auto nodes = static_cast<int>(distinct(hosts).size());
  ResultDocument doc;
  doc.run = o.run;
  doc.model = *enum_from_string<Model>(o.model);
  // Ranks per node as the job ran them; an uneven spread is recorded as ranks / nodes rounded up.
  doc.case_ = {nodes, (comm.size() + nodes - 1) / nodes, static_cast<int>(o.batch_size), o.precision};
  doc.image_size = static_cast<int>(o.image_height);
  doc.image_height = static_cast<int>(o.image_height);
  doc.image_width = static_cast<int>(o.image_width);
  doc.sequence_length = static_cast<int>(o.sequence_length);
  const std::string unit(throughput_unit(doc.model));  // core's word: sequences/s for bert-base
  doc.devices = doc.case_.devices();
  doc.global_batch_size = static_cast<long>(doc.case_.global_batch_size());
  const bool reporter = comm.rank() == 0;
  doc.methodology = {static_cast<int>(o.warmup_steps), static_cast<int>(o.measure_steps), static_cast<int>(o.repeats),
                     *enum_from_string<Statistic>(o.statistic),
                     StabilitySpec{o.max_cv, static_cast<int>(o.extra_repeats), false}};
  doc.environment = environment(backend, o.backend, comm, hosts, o.threads);
  doc.start_time = rfc3339_utc_now();

  std::int64_t parameters = 0;
  std::vector<double> losses;
  std::unique_ptr<WorkerMetrics> live;
  if (o.metrics_port >= 0) {
    const char* local_rank = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
    const int port = o.metrics_port == 0 ? 0 : static_cast<int>(o.metrics_port) + (local_rank ? std::atoi(local_rank) : 0);
    try {
      live = std::make_unique<WorkerMetrics>(
          WorkerIdentity{o.run, case_id(doc.case_), o.model, std::string(to_string(o.precision)), o.backend, comm.name(), DLBENCH_VERSION,
                         backend != nullptr ? backend->version_info() : "", comm.rank(), doc.global_batch_size, unit},
          port);
      std::cerr << "dlbench-worker rank " << comm.rank() << ": metrics on port " << live->port() << "\n";
    } catch (const std::exception& e) {
      // Live metrics are an aid; the measurement goes on without them rather than being lost.
      std::cerr << "dlbench-worker rank " << comm.rank() << ": warning: no live metrics: " << e.what() << "\n";
    }
  }
  try {
    if (const auto why = unsupported_precision(o, backend)) throw Unsupported(*why);
    if (backend == nullptr) throw BackendUnavailable(backend_error);
    Backend& device = *backend;
    // Every rank must agree that the data can be used before any of them enters a collective:
    // a node without the path must not leave the others waiting in an allreduce.
    const auto agree_on_data = [&](std::string error) {
      if (comm.size() > 1) {
        double failed = error.empty() ? 0.0 : 1.0;
        comm.max(&failed, 1);
        if (failed > 0 && error.empty()) error = "another rank cannot use data.path " + o.data_path + " (see its log)";
      }
      if (!error.empty()) throw DataUnavailable(error);
    };
    std::unique_ptr<RealData> real;
    if (o.data == "imagefolder") {
      real = std::make_unique<RealData>();
      std::string error;
      try {
        real->folder = input::scan_image_folder(o.data_path);
        if (real->folder.classes.size() > static_cast<std::size_t>(kModelClasses)) {
          error = "data.path " + o.data_path + " has " + std::to_string(real->folder.classes.size()) +
                  " class folders; the models have " + std::to_string(kModelClasses) + " outputs";
        }
      } catch (const input::DataUnavailable& e) {
        error = e.what();
      }
      agree_on_data(error);
    }
    const std::unique_ptr<Trainer> owner = make_trainer(o, device, comm.rank());
    Trainer& trainer = *owner;
    ParameterStore& store = trainer.parameters();
    comm.broadcast(store.values(), store.count(), 0);  // identical start on every rank
    GradientBuckets buckets(comm, store, static_cast<std::size_t>(o.bucket_mb) << 20);
    if (comm.size() > 1) {
      trainer.set_gradients_ready([&](const std::vector<Parameter*>& ready) { buckets.gradients_ready(ready); });
      trainer.set_before_update([&] { buckets.finish(); });
    }
    parameters = trainer.parameter_count();
    doc.memory = MemoryReport{static_cast<double>(trainer.arena().planned_bytes()),
                              static_cast<double>(trainer.arena().unshared_bytes()), static_cast<double>(store.bytes()),
                              std::nullopt};
    if (live) {
      live->set_memory(doc.memory->activations, doc.memory->parameters);
    }
    const double macs = trainer.forward_macs_per_sample();
    doc.flops_per_sample = {2.0 * macs, 6.0 * macs};  // backward ≈ 2 × forward
    trainer.use_step_graph(o.cuda_graph);
    float last_loss = 0;
    const std::unique_ptr<StepMarks> marks = device.make_step_marks();
    Workload workload{[&] { trainer.step(); }, [&] { device.synchronize(); }, {}, {}, marks.get()};
    if (live || real) {
      // Steps are reported in the order they ran, once their repeat's marks are read.
      workload.on_step = [&](int repeat, bool measured, double s) {
        double wait = 0;
        if (real) {
          wait = real->waits.front();
          real->waits.pop_front();
        }
        if (real && measured) {
          real->measured_waits.push_back(wait);
          real->measured_seconds += s;
        }
        if (!live) return;
        if (real) live->on_input_wait(wait);
        live->on_step(repeat, measured, s);
      };
    }
    if (real) {
      input::InputPipelineConfig config;
      config.batch_size = static_cast<int>(o.batch_size);
      config.image_size = static_cast<int>(o.image_height);  // square: checked with the options
      config.threads = static_cast<int>(o.decode_threads);
      config.prefetch_batches = static_cast<int>(o.prefetch_batches);
      config.seed = o.seed;
      config.rank = comm.rank();
      config.world = comm.size();
      config.layout = trainer.input().layout == Layout::nhwc ? input::PixelLayout::nhwc : input::PixelLayout::nchw;
      std::string error;
      try {
        real->pipeline = std::make_unique<input::InputPipeline>(real->folder, config);
        real->pipeline_throughput = measure_pipeline_alone(*real->pipeline, config.prefetch_batches, o.batch_size);
      } catch (const input::DataUnavailable& e) {
        error = e.what();
      }
      agree_on_data(error);
      if (live) live->set_input_pipeline_throughput(real->pipeline_throughput);
      // The wait for the next batch is part of the step: the methodology times it with the rest.
      workload.step = [&] {
        const auto begin = std::chrono::steady_clock::now();
        const input::Batch batch = real->pipeline->next();
        real->waits.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count());
        trainer.load_batch(batch.pixels, batch.labels);
        trainer.step();
      };
    }
    if (comm.size() > 1) {
      workload.slowest_rank = [&](std::vector<double>& seconds) {
        comm.max(seconds.data(), static_cast<std::int64_t>(seconds.size()));
      };
    }
    const double bound = max_cv(doc.methodology.stability, o.backend == "cuda");
    std::vector<double> measured;  // every repeat's throughput, in run order
    const std::unique_ptr<GpuMonitor> gpu_monitor = open_gpu_monitor(device, comm.rank());
    if (gpu_monitor) gpu_monitor->start(std::chrono::milliseconds(100));
    const CpuCounters load_before = read_cpu_counters();
    const auto repeats = run_methodology(
        workload, doc.methodology, doc.global_batch_size,
        [&](int r, const RepeatMeasurement& m) {
          last_loss = trainer.last_loss();  // after the repeat, untimed
          losses.push_back(last_loss);
          measured.push_back(m.throughput);
          if (live) live->on_repeat(m.throughput, last_loss);
          if (!reporter) return;
          std::cerr << "  case " << case_id(doc.case_) << " repeat " << r + 1 << "/" << o.repeats
                    << (r >= o.repeats ? " (again: the last repeats spread too much)" : "") << ": " << std::fixed
                    << std::setprecision(2) << m.throughput << " " << unit << "\n";
        },
        [&] { return measure_again(measured, doc.methodology.repeats, doc.methodology.stability, bound); });
    // The last --repeats are reported; the earlier ones, replaced by the re-measurement, are kept.
    doc.stability = judge_stability(measured, doc.methodology.repeats, bound);
    const std::vector<double> throughputs(measured.end() - doc.methodology.repeats, measured.end());
    std::vector<double> all_steps;
    for (auto r = repeats.end() - doc.methodology.repeats; r != repeats.end(); ++r) {
      all_steps.insert(all_steps.end(), r->step_seconds.begin(), r->step_seconds.end());
    }
    doc.throughput = Throughput{unit, summarize(throughputs), throughputs};
    doc.step_time_seconds = summarize(all_steps);
    if (doc.stability->verdict == StabilityVerdict::unstable) {
      doc.reason = kReasonUnstable;
      doc.message = describe_unstable(*doc.stability, doc.methodology.repeats, doc.throughput->summary);
    }
    const InterferenceReport cpu_load = interference_between(load_before, read_cpu_counters());
    doc.interference = node_interference(cpu_load, gpu_monitor ? std::optional(gpu_monitor->stop()) : std::nullopt, comm);
    doc.environment.nccl_transport = comm.transport();  // after the collectives: NCCL connects lazily
    if (o.profile_steps > 0) doc.profile = profile_steps(trainer, device, static_cast<int>(o.profile_steps));
    if (real) {
      InputReport report;
      double total_wait = 0;
      for (const double w : real->measured_waits) total_wait += w;
      // The rank that waited longest and the slowest pipeline speak for the job.
      std::vector<double> worst{total_wait, real->measured_seconds > 0 ? total_wait / real->measured_seconds : 0.0,
                                -real->pipeline_throughput, static_cast<double>(real->pipeline->skipped_count())};
      if (comm.size() > 1) comm.max(worst.data(), static_cast<std::int64_t>(worst.size()));
      report.wait_seconds = worst[0];
      report.wait_share = std::clamp(worst[1], 0.0, 1.0);
      report.wait_seconds_per_step = summarize(real->measured_waits);
      report.pipeline_throughput = -worst[2];
      report.verdict = input_verdict(report.wait_share);
      report.decode_threads = static_cast<int>(o.decode_threads);
      report.files = static_cast<long>(real->folder.files.size());
      report.skipped_files = static_cast<long>(worst[3]);
      for (const auto& skipped : real->pipeline->skipped_examples()) {
        report.skipped_examples.push_back(printable(skipped.path + ": " + skipped.why, 300));
      }
      doc.input = report;
      if (live) live->set_input_verdict(report.wait_share, report.verdict == InputVerdict::input_bound);
    }
    doc.state = CaseState::Succeeded;
    if (const auto peak = peak_flops_per_second(doc.environment.gpu_model, doc.case_.precision)) {
      doc.peak_flops_per_device = *peak;
      doc.mfu = model_flops_utilization(doc.flops_per_sample.training,
                                        reported_value(doc.throughput->summary, doc.methodology.statistic), *peak,
                                        doc.devices);
    }
  } catch (const Unsupported& e) {
    doc.state = CaseState::Failed;
    doc.reason = kReasonUnsupported;
    doc.message = "--precision " + std::string(to_string(o.precision)) + " on --backend " + o.backend + ": " + e.what();
  } catch (const DataUnavailable& e) {
    doc.state = CaseState::Failed;
    doc.reason = "DataUnavailable";
    doc.message = e.what();
  } catch (const BackendUnavailable& e) {
    doc.state = CaseState::Failed;
    doc.reason = "BackendUnavailable";
    doc.message = "--backend " + o.backend + ": " + e.what();
#ifdef DLBENCH_HAVE_CUDA
  } catch (const CudaOutOfMemory& e) {
    doc.state = CaseState::Failed;
    doc.reason = "OutOfMemory";
    doc.message = "device memory exhausted at batch size " + std::to_string(o.batch_size) + ": asked for " +
                  std::to_string(e.requested) + " bytes, " + std::to_string(e.free) + " of " + std::to_string(e.total) +
                  " free";
#endif
  } catch (const std::bad_alloc&) {
    doc.state = CaseState::Failed;
    doc.reason = "OutOfMemory";
    doc.message = "host memory exhausted at batch size " + std::to_string(o.batch_size);
  } catch (const std::exception& e) {
    doc.state = CaseState::Failed;
    doc.reason = "WorkerError";
    doc.message = e.what();
  }
  doc.end_time = rfc3339_utc_now();
  if (doc.memory) doc.memory->peak_resident = peak_resident_bytes();
  if (live) live->finished(doc.state == CaseState::Succeeded);
  if (!reporter) {
    if (doc.state != CaseState::Succeeded) std::cerr << "dlbench-worker rank " << comm.rank() << ": " << doc.message << "\n";
    return doc.state == CaseState::Succeeded ? 0 : kExitFailed;
  }

  print_table(o.output.empty() ? std::cerr : std::cout, doc, parameters, losses);
  return write_document(o, to_json(doc), doc.state == CaseState::Succeeded);
}

// One line of the self-test's table.
void print_check(std::ostream& out, const SelfTestCheck& c) {
  std::ostringstream error, bound;
  error << std::scientific << std::setprecision(2) << c.error;
  bound << std::scientific << std::setprecision(2) << c.bound;
  const bool measured = c.error != 0 || c.bound != 0;
  out << "  " << std::left << std::setw(5) << c.precision << " " << std::setw(40) << c.name << std::right << " "
      << std::setw(9) << (measured ? error.str() : "-") << " " << std::setw(9) << (measured ? bound.str() : "-") << "  "
      << std::left << std::setw(7) << to_string(c.outcome) << std::right << " " << c.detail << "\n";
}

// --self-test: every rank checks its own backend; the ranks agree on who failed; rank 0 reports.
int self_test(const Options& o, Communicator& comm, Backend* backend, const std::string& backend_error) {
  SelfTestDocument doc;
  doc.run = o.run;
  const std::vector<std::string> hosts = comm.hosts();
  doc.nodes = static_cast<int>(distinct(hosts).size());
  doc.devices = comm.size();
  for (const Precision p : o.self_test_precisions) doc.precisions.emplace_back(to_string(p));
  doc.environment = environment(backend, o.backend, comm, hosts, o.threads);
  doc.start_time = rfc3339_utc_now();
  const bool reporter = comm.rank() == 0;
  std::ostream& table = o.output.empty() ? std::cerr : std::cout;
  std::vector<SelfTestCheck> checks;
  std::string error;
  std::unique_ptr<CpuBackend> reference;
  if (backend == nullptr) {
    doc.reason = "BackendUnavailable";
    error = "--backend " + o.backend + ": " + backend_error;
  } else {
    try {
      reference = std::make_unique<CpuBackend>(o.threads > 0 ? static_cast<int>(o.threads) : default_threads());
    } catch (const std::exception& e) {
      doc.reason = "WorkerError";
      error = e.what();
    }
  }
  // The ranks agree whether all of them can check before any enters a collective: with one rank
  // unable (no GPU on its node, say), the others check alone rather than wait for it.
  double any_broken = error.empty() ? 0.0 : 1.0;
  comm.max(&any_broken, 1);
  NoCommunicator alone;
  Communicator& collectives = any_broken > 0 ? static_cast<Communicator&>(alone) : comm;
  if (error.empty()) {
    try {
      SelfTestSubject subject{*backend, [&](Precision precision) {
                                Options one = o;
                                one.precision = precision;
                                return make_backend(one);
                              },
                              o.self_test_precisions};
      if (reporter) {
        table << "dlbench-worker --self-test: " << o.backend << " against cpu fp32 (oneDNN), " << comm.size()
              << (comm.size() == 1 ? " rank" : " ranks") << " (" << comm.name() << ")\n"
              << "  " << std::left << std::setw(5) << "prec" << " " << std::setw(40) << "check" << std::right << " "
              << std::setw(9) << "error" << " " << std::setw(9) << "bound" << "  result  detail\n";
      }
      checks = run_self_test(subject, *reference, collectives, [&](const SelfTestCheck& c) {
        if (reporter) print_check(table, c);
        else if (c.outcome == CheckOutcome::failed) print_check(std::cerr << "rank " << comm.rank() << ":", c);
      });
    } catch (const std::exception& e) {
      doc.reason = "WorkerError";
      error = e.what();
    }
  }
  int passed = 0, failed = 0, skipped = 0;
  for (const auto& c : checks) (c.outcome == CheckOutcome::passed ? passed : c.outcome == CheckOutcome::failed ? failed : skipped) += 1;
  // Every rank learns every rank's counts: [failed or broken per rank..., passed, failed, skipped per rank...].
  const auto ranks = static_cast<std::size_t>(comm.size());
  std::vector<double> counts(4 * ranks, 0.0);
  const auto me = static_cast<std::size_t>(comm.rank());
  counts[me] = (failed > 0 || !error.empty()) ? 1.0 : 0.0;
  counts[ranks + 3 * me] = passed;
  counts[ranks + 3 * me + 1] = failed;
  counts[ranks + 3 * me + 2] = skipped;
  comm.max(counts.data(), static_cast<std::int64_t>(counts.size()));
  for (std::size_t r = 0; r < ranks; ++r) {
    if (counts[r] > 0) doc.failed_ranks.push_back(static_cast<int>(r));
    doc.passed += static_cast<int>(counts[ranks + 3 * r]);
    doc.failed += static_cast<int>(counts[ranks + 3 * r + 1]);
    doc.skipped += static_cast<int>(counts[ranks + 3 * r + 2]);
  }
  for (const CheckOutcome kind : {CheckOutcome::failed, CheckOutcome::skipped}) {
    for (const auto& c : checks) {
      if (c.outcome != kind || doc.checks.size() >= kSelfTestListedChecks) continue;
      doc.checks.push_back({comm.rank(), c.precision, c.name, std::string(to_string(c.outcome)), c.error, c.bound,
                            printable(c.detail, 200)});
    }
  }
  const std::string where = " on " + std::to_string(doc.devices) + (doc.devices == 1 ? " device" : " devices") + " (" +
                            o.backend + ", " + comm.name() + ")";
  if (!error.empty()) {
    doc.state = CaseState::Failed;
    doc.message = error;
  } else if (!doc.failed_ranks.empty()) {
    doc.state = CaseState::Failed;
    doc.reason = kReasonSelfTestFailed;
    std::string first;
    for (const auto& c : checks) {
      if (c.outcome == CheckOutcome::failed) {
        first = "; first: " + c.precision + " " + c.name + ": " + c.detail;
        break;
      }
    }
    std::string ranks_failed;
    for (const int r : doc.failed_ranks) ranks_failed += (ranks_failed.empty() ? "" : ",") + std::to_string(r);
    doc.message = std::to_string(doc.failed) + " of " + std::to_string(doc.passed + doc.failed + doc.skipped) +
                  " checks failed" + where + ", on ranks " + ranks_failed + printable(first, 300);
  } else {
    doc.state = CaseState::Succeeded;
    doc.message = std::to_string(doc.passed) + " checks passed, " + std::to_string(doc.skipped) + " skipped" + where;
  }
  doc.end_time = rfc3339_utc_now();
  if (!reporter) return doc.state == CaseState::Succeeded ? 0 : kExitFailed;
  table << "self-test " << (doc.state == CaseState::Succeeded ? "passed" : "FAILED") << ": " << doc.message << "\n";
  return write_document(o, to_json(doc), doc.state == CaseState::Succeeded);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const auto options = parse(argc, argv);
    if (!options) return 0;
    std::unique_ptr<Backend> backend;
    std::string backend_error;
    try {
      backend = make_backend(*options);
    } catch (const std::exception& e) {
      backend_error = e.what();
    }
    auto communicator = make_communicator(*options, &argc, &argv, backend.get());
    if (options->self_test) return self_test(*options, *communicator, backend.get(), backend_error);
    if (!options->record_step.empty()) return record_step(*options, backend.get(), backend_error);
    return run(*options, *communicator, backend.get(), backend_error);
  } catch (const UsageError& e) {
    std::cerr << "dlbench-worker: " << e.message << "\n";
    return kExitUsage;
  } catch (const std::exception& e) {
    // Whatever escaped the case's own handling: said, and a failure exit, never an abort.
    std::cerr << "dlbench-worker: " << e.what() << "\n";
    return kExitFailed;
  }
}
