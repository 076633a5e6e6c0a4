// What a worker prints for one case: the "dlbench.result/v1" document. The operator reads it
// from the launcher's termination message, `dlbench run` from the worker's output.
#pragma once

#include <array>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "dlbench/core/benchmark_run.hpp"
#include "dlbench/core/codec.hpp"

namespace dlbench {

inline constexpr const char* kResultSchema = "dlbench.result/v1";

// Where the numbers came from. Empty strings mean "not known / not used" and are omitted.
struct EnvironmentInfo {
  std::string host;
  std::vector<std::string> hosts;  // every host of the job, from the MPI host list
  std::string os;
  std::string cpu_model;
  int cpu_cores = 0;               // the threads a CPU rank ran (or the cores it may use)
  std::string cpu_threads_reason;  // why that many: the affinity mask, the cgroup's CPU quota, --threads
  std::string gpu_model;
  int gpu_count = 0;
  std::string driver_version;
  std::string cuda_version;
  std::string cudnn_version;
  std::string nccl_version;
  std::string mpi_version;
  std::string onednn_version;
  std::string backend;       // cpu | cuda
  std::string communicator;  // none | mpi | nccl
  std::string dlbench_version;
  // engine: command — what the wrapped script said about itself (`@dlbench fact` markers):
  // the framework and its version, and any other facts, verbatim.
  std::string framework;
  std::string framework_version;
  std::map<std::string, std::string> facts;
  // The worker backend's choices that change what runs (its developer switches, defaults
  // included): {"attention": "fused"}, the CUDA convolution calls, layout, batch-norm calls...
  std::map<std::string, std::string> backend_options;
  std::optional<NcclTransport> nccl_transport;  // from NCCL's own log lines (NCCL_DEBUG=INFO)
  bool operator==(const EnvironmentInfo&) const = default;
};

// What this process can see of its host: name, OS, CPU model and the cores it may run on.
EnvironmentInfo host_environment();

struct FlopsPerSample {
  double forward = 0;   // FLOPs (2 × MACs) of one forward pass of one sample
  double training = 0;  // forward + backward (≈ 3 × forward)
  bool operator==(const FlopsPerSample&) const = default;
};

// Memory of one device's training step, in bytes. Activations are the forward outputs and
// their gradients, which dlbench-worker plans by lifetime (memory shared once a buffer's last
// reader has run); `unsharedActivations` is what they would take with no sharing. Parameters
// are the fp32 master weights, their gradients and the optimizer state. `peakResident` is the
// process's peak resident set (host memory; on the CPU backend, everything).
struct MemoryReport {
  double activations = 0;
  double unshared_activations = 0;
  double parameters = 0;
  std::optional<double> peak_resident;
  bool operator==(const MemoryReport&) const = default;
};

// Where one training step's time goes (`dlbench-worker --profile N`): seconds per step, averaged
// over N eager steps timed layer by layer after the measured repeats (device events on a GPU,
// the host clock on the CPU). A layer's time is its own: a block's excludes the layers inside
// it. `outsideLayersSeconds` is the rest of the step, and `outsideParts` says what it was, by
// part (kStepParts): staging the batch, the loss, the wait for the gradients' reduction, loss
// scaling's check, the optimizer's update, and the rest ("other": the glue between layers).
// `kinds` sums the layers by kind.
struct LayerTime {
  std::string name;  // the layer's path ("layer1.0.conv1"); for a kind's sum, empty
  std::string kind;  // Conv2d, BatchNorm2d, Bottleneck, …
  double forward_seconds = 0;
  double backward_seconds = 0;
  bool operator==(const LayerTime&) const = default;
};
// The parts of a step outside every layer, as `outsideParts` names them.
inline constexpr std::array<std::string_view, 6> kStepParts = {"input",       "loss",   "gradientReductionWait",
                                                               "lossScaling", "update", "other"};
struct StepPartTime {
  std::string part;  // one of kStepParts
  double seconds = 0;
  bool operator==(const StepPartTime&) const = default;
};
// The most time first; equal times by name (the order a decoded document has too).
void order_step_parts(std::vector<StepPartTime>& parts);
struct StepProfile {
  int steps = 0;
  double step_seconds = 0;
  double outside_layers_seconds = 0;
  std::vector<LayerTime> layers;  // in the order forward first ran them
  std::vector<LayerTime> kinds;   // the most time first
  // outside_layers_seconds by part, the most first: the parts that ran (documents written before
  // 2026-12-08 have none).
  std::vector<StepPartTime> outside_parts;
  bool operator==(const StepProfile&) const = default;
};

struct ResultDocument {
  std::string run;  // the BenchmarkRun's name, when the worker knows it
  Model model = Model::resnet50;
  Engine engine = Engine::native;
  CaseSpec case_;
  int image_size = 224;  // square inputs ("imageSize")
  int image_height = 0;  // others: height × width ("imageHeight", "imageWidth"), overriding image_size
  int image_width = 0;
  int sequence_length = 0;  // a sequence model's tokens per sequence ("sequenceLength"), instead of an image size
  int devices = 1;             // must equal case nodes × gpusPerNode
  long global_batch_size = 1;  // must equal batchSizePerDevice × devices
  Methodology methodology;
  // engine native: how the case trained, the model's default learning rate resolved (the
  // spec may leave it unset; the result says what ran).
  std::optional<OptimizerSpec> optimizer;
  FlopsPerSample flops_per_sample;
  CaseState state = CaseState::Succeeded;
  std::string reason;
  std::string message;
  std::optional<Throughput> throughput;            // Succeeded: one entry per repeat
  std::optional<SampleSummary> step_time_seconds;  // over every measured step
  std::optional<InputReport> input;                // data.source imagefolder, cityscapes or bertpretraining
  std::optional<MemoryReport> memory;              // engine: native
  std::optional<InterferenceReport> interference;  // engine: native, over the measured repeats
  std::optional<StabilityReport> stability;        // Succeeded: how the repeats agreed (reason Unstable if not)
  std::optional<StepProfile> profile;              // dlbench-worker --profile
  std::optional<LossScalingReport> loss_scaling;   // precision amp, engine native
  // engine native: the training loss after each repeat, in run order (discarded repeats too);
  // NaN or infinite only with reason LossNotFinite. JSON writes those as "NaN", "Infinity" and
  // "-Infinity", as protobuf's JSON mapping does, since JSON numbers cannot hold them.
  std::vector<double> loss_after_repeats;
  // Model FLOPs utilization on a GPU whose peak is known: modelFlopsPerSample.training × the
  // reported throughput / (peakFlopsPerDevice × devices).
  std::optional<double> peak_flops_per_device;
  std::optional<double> mfu;
  // A GPU case where every device counts its energy: the joules all devices drew over each
  // reported repeat's measured steps, one per throughput repeat, in the same order.
  std::vector<double> energy_joules;
  // engine native, Succeeded, more than one rank: the gradient reduction timed after the repeats.
  std::optional<CommunicationReport> communication;
  EnvironmentInfo environment;
  std::string start_time;
  std::string end_time;
  bool operator==(const ResultDocument&) const = default;
};

nlohmann::json to_json(const ResultDocument& document);

// Validates the schema tag, every field and the document's consistency: devices and global
// batch agree with the case, a Succeeded document has one throughput per repeat, and its
// summary agrees with those repeats.
Decoded<ResultDocument> decode_result_document(const nlohmann::json& document);

// What fits in a Kubernetes termination message (the kubelet keeps 4096 bytes): the document
// without what matters least (the step profile, the host list, script facts, step times, input wait per step and
// skipped-file examples, environment details, the message), dropped in that order only as far as
// needed. Throws std::runtime_error when even
// the smallest form does not fit.
inline constexpr std::size_t kTerminationMessageLimit = 4096;
std::string compact_result_document(const std::string& json_text, std::size_t limit = kTerminationMessageLimit);

// What of a result document's environment goes into status (hosts, OS, thread counts and script
// facts stay in the document and the logs).
CaseEnvironment case_environment(const EnvironmentInfo& environment);

// What a Succeeded document's energyJoules make per sample and per device (EnergyReport); none
// without them.
std::optional<EnergyReport> energy_report(const ResultDocument& document);

// The entry that goes into status.results (speed-up is filled in later, across cases).
CaseResult to_case_result(const ResultDocument& document, int attempts = 1);

// Why a case whose loss after a repeat was NaN or infinite is not a result (LossNotFinite), as
// both engines say it: "the loss after repeat 3 was NaN (after repeat 1: 6.91): training
// diverged, so the steps timed did not train the model". `losses`: after each repeat run; the
// first that is not finite is named.
std::string describe_divergence(const std::vector<double>& losses);

// What `dlbench-worker --self-test` prints: the "dlbench.selftest/v1" document. The full table
// of checks goes to the log; the document carries the counts and what did not pass, so that it
// fits a termination message.
inline constexpr const char* kSelfTestSchema = "dlbench.selftest/v1";
inline constexpr std::size_t kSelfTestListedChecks = 12;

struct SelfTestEntry {
  int rank = 0;
  std::string precision;  // fp32 | tf32 | amp | bf16, or "-"
  std::string name;
  std::string outcome;  // failed | skipped
  double error = 0;
  double bound = 0;
  std::string detail;
  bool operator==(const SelfTestEntry&) const = default;
};

struct SelfTestDocument {
  std::string run;
  int nodes = 1;
  int devices = 1;  // ranks that ran it
  std::vector<std::string> precisions;
  CaseState state = CaseState::Succeeded;  // Succeeded: no check failed on any rank
  std::string reason;   // Failed: SelfTestFailed, BackendUnavailable, WorkerError
  std::string message;  // for people: counts, and the first failure
  int passed = 0, failed = 0, skipped = 0;  // every rank's checks together
  std::vector<int> failed_ranks;            // ranks where a check failed
  std::vector<SelfTestEntry> checks;  // what did not pass on rank 0: failed first, then skipped; at most 12
  EnvironmentInfo environment;
  std::string start_time;
  std::string end_time;
  bool operator==(const SelfTestDocument&) const = default;
};

nlohmann::json to_json(const SelfTestDocument& document);
Decoded<SelfTestDocument> decode_self_test_document(const nlohmann::json& document);
// As compact_result_document: drops environment details, then the listed checks from the back,
// as far as needed to fit `limit`.
std::string compact_self_test_document(const std::string& json_text, std::size_t limit = kTerminationMessageLimit);
// A preflight's outcome in status (status.preflight): the topology it ran on, state, reason,
// message and times.
CaseResult to_case_result(const SelfTestDocument& document, const CaseSpec& preflight, int attempts = 1);

}  // namespace dlbench
