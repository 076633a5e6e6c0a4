// The BenchmarkRun resource (dlbench.io/v1alpha1) as C++ types. Field names follow the
// YAML spelling; see ../shared/ARCHITECTURE.md and crds/benchmarkrun.yaml.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dlbench/core/enums.hpp"

namespace dlbench {

inline constexpr const char* kApiGroup = "dlbench.io";
inline constexpr const char* kApiVersion = "dlbench.io/v1alpha1";
inline constexpr const char* kKind = "BenchmarkRun";

struct ObjectMeta {
  std::string name;
  std::string namespace_;
  std::string uid;
  std::string resource_version;
  std::int64_t generation = 0;
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
  // Everything else the API server sends (ownerReferences, managedFields, …), kept verbatim
  // so that a decode/encode round trip loses nothing.
  nlohmann::json extra = nlohmann::json::object();

  bool operator==(const ObjectMeta&) const = default;
};

// Where an imagefolder data set comes from on Kubernetes: exactly one volume source, mounted
// read-only at data.path in every worker pod (optionally a sub-directory of it).
struct DataVolume {
  std::string claim_name;  // persistentVolumeClaim.claimName
  std::string host_path;   // hostPath.path
  std::string nfs_server;  // nfs.server
  std::string nfs_path;    // nfs.path
  std::string sub_path;    // relative path inside the volume
  bool operator==(const DataVolume&) const = default;
};

struct DataSpec {
  DataSource source = DataSource::synthetic;
  int image_size = 224;  // a square input's side
  // A non-square input, height × width (DeepLabV3+ on Cityscapes crops: 512 × 1024): both set or
  // neither; when set they override image_size (which the CRD defaults).
  int image_height = 0;
  int image_width = 0;
  int height() const { return image_height > 0 ? image_height : image_size; }
  int width() const { return image_width > 0 ? image_width : image_size; }
  // Tokens per sequence, for a sequence model (bert-base) only; 0: its default (128).
  int sequence_length = 0;
  // imagefolder: the directory of class folders of images (JPEG, PNG or WebP), the same absolute path on every
  // node (locally a directory; on Kubernetes where `volume` is mounted, or inside the image).
  std::string path;
  std::optional<DataVolume> volume;
  int decode_threads = 4;    // JPEG decoding threads per rank
  int prefetch_batches = 2;  // batches decoded ahead of the training step, per rank
  bool operator==(const DataSpec&) const = default;
};

// One point of the sweep: nodes × GPUs per node, batch per device, precision.
struct CaseSpec {
  int nodes = 1;
  int gpus_per_node = 1;
  int batch_size_per_device = 1;
  Precision precision = Precision::fp32;
  // The run's preflight (spec.preflight) on this topology, not a measured case: its id is
  // "preflight-<nodes>x<gpusPerNode>", so its children never share a name with a case's.
  bool preflight = false;

  int devices() const { return nodes * gpus_per_node; }
  int global_batch_size() const { return batch_size_per_device * devices(); }
  bool is_single_device() const { return nodes == 1 && gpus_per_node == 1; }
  bool operator==(const CaseSpec&) const = default;
};

// Stable, human-readable case id: "2x8-bs128-amp" ("preflight-2x8" for the preflight).
std::string case_id(const CaseSpec& c);
// The input size as dlbench-worker's --image-size takes it: "224", or "512x1024" (height x width).
std::string image_size_argument(int height, int width);
std::string image_size_argument(const DataSpec& data);
// A sequence model's tokens per sequence: data.sequenceLength, or its default.
int sequence_length(const DataSpec& data);

struct Matrix {
  std::vector<int> nodes;
  std::vector<int> gpus_per_node;
  std::vector<int> batch_size_per_device;
  std::vector<Precision> precision;
  bool operator==(const Matrix&) const = default;
};

// When a case's repeats count as agreeing (issue 37: a case measured at cv 57% was published as
// normal). A case whose last `repeats` repeats spread by more than max_cv (stddev / mean of their
// throughputs) is measured again, one repeat at a time, up to extra_repeats more; the reported
// repeats are always the last `repeats`, the earlier ones are kept as discarded. A case that stays
// unstable is recorded with reason Unstable and left out of best, speed-up and efficiency unless
// include_unstable.
struct StabilitySpec {
  std::optional<double> max_cv;  // unset: the device's default (kDefaultMaxCvGpu, kDefaultMaxCvCpu)
  int extra_repeats = 7;
  bool include_unstable = false;
  bool operator==(const StabilitySpec&) const = default;
};
// A GPU running alone repeats within about 1% (DLPerf's own tables); 2% leaves room for clocks.
inline constexpr double kDefaultMaxCvGpu = 0.02;
// A CPU shares its cores, caches and memory bandwidth with the node's other work and its clock
// follows the load of every core: alone on a 2-core EPYC VM, quickstart-sized cases spread by up
// to about 4.5%, and a disturbed repeat gives 10–30% (bench/RESULTS.md).
inline constexpr double kDefaultMaxCvCpu = 0.05;

struct Methodology {
  int warmup_steps = 20;
  int measure_steps = 100;
  int repeats = 7;
  Statistic statistic = Statistic::median;
  StabilitySpec stability;
  bool operator==(const Methodology&) const = default;
};

// The optimizer a case trains with, every field resolved: what a worker is asked for and what
// its result document says ran.
struct OptimizerSpec {
  OptimizerName name = OptimizerName::sgd;
  double learning_rate = 0.1;
  double momentum = 0.9;
  double weight_decay = 1e-4;
  // Linear warm-up (Goyal et al.): the t-th applied update trains at learning_rate · min(1, t /
  // learning_rate_warmup_steps), t counted from 1; 0: at learning_rate from the first update.
  std::int64_t learning_rate_warmup_steps = 0;
  bool operator==(const OptimizerSpec&) const = default;
};

// spec.optimizer as written: an unset learning rate is the model's recipe at each case's global
// batch (optimizer_for_case; api_rules.hpp's default_learning_rate).
struct OptimizerRequest {
  OptimizerName name = OptimizerName::sgd;
  std::optional<double> learning_rate;
  double momentum = 0.9;
  double weight_decay = 1e-4;
  std::int64_t learning_rate_warmup_steps = 0;
  bool operator==(const OptimizerRequest&) const = default;
};

struct RdmaSpec {
  std::string resource;
  int per_node = 1;
  // true (default): a multi-node case whose NCCL did not use an RDMA network ends Failed with
  // reason RdmaNotUsed; false: it stays Succeeded with that reason and a Warning event.
  bool required = true;
  bool operator==(const RdmaSpec&) const = default;
};

struct Toleration {
  std::string key;
  TolerationOperator operator_ = TolerationOperator::Equal;
  std::string value;
  TaintEffect effect = TaintEffect::Any;
  std::optional<std::int64_t> toleration_seconds;
  bool operator==(const Toleration&) const = default;
};

struct EnvVar {
  std::string name;
  std::optional<std::string> value;
  std::optional<nlohmann::json> value_from;  // a Kubernetes EnvVarSource, passed through
  bool operator==(const EnvVar&) const = default;
};

// Gang admission of a case's worker pods: Kueue admits a pod group (labels, total count,
// scheduling gate); Volcano and scheduler-plugins schedule a PodGroup with minMember = nodes.
struct GangSpec {
  GangScheduler scheduler = GangScheduler::kueue;
  std::string queue_name;  // kueue: the LocalQueue
  bool operator==(const GangSpec&) const = default;
};

struct WorkerSpec {
  std::string image;  // empty: the operator's configured default image
  std::string gpu_resource = "nvidia.com/gpu";
  std::optional<RdmaSpec> rdma;
  std::map<std::string, std::string> node_selector;
  std::vector<Toleration> tolerations;
  std::vector<EnvVar> env;
  std::string scheduler_name;
  std::string priority_class_name;
  // false (default): worker pods of other dlbench cases never share a node with this case's
  // (required pod anti-affinity), so that cases do not measure each other.
  bool share_nodes = false;
  std::optional<GangSpec> gang;
  QosClass qos_class = QosClass::Burstable;
  bool operator==(const WorkerSpec&) const = default;
};

// Kubeflow Trainer v2's podTemplateOverrides, for the pods dlbench creates: each entry is merged
// into the pods its targetJobs name ("worker", "launcher"), in list order. Maps merge (a later
// key wins), lists append, scalars replace; a container's env comes after dlbench's (the user's
// word wins) and its requests and limits merge over dlbench's defaults. What dlbench owns (its
// labels, volumes, mount paths, extended resources, scheduling gate) is refused: pod_ownership.hpp.
struct ContainerOverride {
  std::string name;  // the container: "worker" or "launcher"
  std::vector<EnvVar> env;
  nlohmann::json volume_mounts = nlohmann::json::array();  // {name, mountPath, readOnly, subPath}
  std::map<std::string, std::string> requests, limits;    // cpu, memory, ephemeral-storage, hugepages-*
  bool operator==(const ContainerOverride&) const = default;
};

struct PodTemplateOverride {
  std::vector<std::string> target_jobs;  // "worker", "launcher"
  std::map<std::string, std::string> labels, annotations;
  std::string service_account_name;
  std::map<std::string, std::string> node_selector;
  std::optional<nlohmann::json> affinity;  // a Kubernetes Affinity, passed through
  std::vector<Toleration> tolerations;
  nlohmann::json volumes = nlohmann::json::array();  // Kubernetes Volumes, passed through
  std::vector<std::string> image_pull_secrets;
  std::vector<std::string> scheduling_gates;
  std::optional<bool> host_network;
  std::optional<nlohmann::json> security_context;  // a PodSecurityContext, passed through
  std::vector<ContainerOverride> containers;
  bool operator==(const PodTemplateOverride&) const = default;
};

struct Limits {
  int case_timeout_seconds = 3600;
  int backoff_limit = 1;
  bool operator==(const Limits&) const = default;
};

// Before the first case: `selfTest` runs `dlbench-worker --self-test` on the largest topology
// the run asks for (its most nodes × its most GPUs per node), checking every precision of the
// run. A failed self-test skips every case (PreflightFailed): numbers from a GPU that computes
// wrong are not numbers. engine: native only (the worker image has dlbench-worker).
struct PreflightSpec {
  bool self_test = false;
  bool operator==(const PreflightSpec&) const = default;
};

struct BenchmarkRunSpec {
  Model model = Model::resnet50;
  Engine engine = Engine::native;
  std::vector<std::string> command;  // engine: command only — the wrapped script's argv
  DataSpec data;
  std::optional<Matrix> matrix;  // exactly one of matrix and cases
  std::vector<CaseSpec> cases;
  Methodology methodology;
  OptimizerRequest optimizer;
  WorkerSpec worker;
  Limits limits;
  std::optional<PreflightSpec> preflight;
  std::vector<PodTemplateOverride> pod_template_overrides;
  // engine native on CUDA: each case's training step captured once as a CUDA graph and replayed
  // (dlbench-worker --cuda-graph on), host launch overhead out of the step. One device a case: the
  // gradient allreduce is driven from the host between backward and the update, outside any
  // graph, so a multi-device case could only compare a graph with eager steps.
  bool cuda_graph = false;
  bool operator==(const BenchmarkRunSpec&) const = default;
};

// The optimizer case `c` of `spec` trains with: spec.optimizer, its learning rate resolved to
// the model's recipe at the case's global batch where the spec leaves it unset.
OptimizerSpec optimizer_for_case(const BenchmarkRunSpec& spec, const CaseSpec& c);
// How a run's cases train, for its one-line summaries: "sgd at learning rate 0.05", or "sgd at
// the model's learning rate, 0.1 at a global batch of 256 and linearly less below it".
std::string describe_optimizer(const BenchmarkRunSpec& spec);

struct Condition {
  ConditionType type = ConditionType::Ready;
  ConditionStatus status = ConditionStatus::Unknown;
  std::string reason;
  std::string message;
  std::string last_transition_time;  // RFC 3339
  std::int64_t observed_generation = 0;
  bool operator==(const Condition&) const = default;
};

struct Progress {
  int completed_cases = 0;
  int total_cases = 0;
  std::string current_case;
  int current_attempt = 0;  // of current_case, from 1; kept in status so a restart resumes it
  std::string summary;  // "5/12", for the PROGRESS printer column
  bool shared_node = false;  // another case's worker was seen on a node of the current attempt
  bool operator==(const Progress&) const = default;
};

// Summary statistics of one quantity over the repeats of a case.
struct SampleSummary {
  double median = 0;
  double mean = 0;
  double min = 0;
  double max = 0;
  double stddev = 0;  // sample standard deviation (n - 1); 0 for a single sample
  double cv = 0;      // coefficient of variation: stddev / mean
  bool operator==(const SampleSummary&) const = default;
};

struct Throughput {
  std::string unit = "samples/s";
  SampleSummary summary;
  std::vector<double> repeats;  // one throughput per repeat, in run order
  bool operator==(const Throughput&) const = default;
};

// A real-data case's input: how long the training step waited for the next batch, how fast
// the pipeline is on its own, and the verdict people read first.
struct InputReport {
  DataSource source = DataSource::imagefolder;
  double wait_seconds = 0;  // over every measured step, on the rank that waited longest
  double wait_share = 0;    // wait_seconds / that rank's measured time, 0 to 1
  std::optional<SampleSummary> wait_seconds_per_step;  // over the measured steps of that rank
  double pipeline_throughput = 0;  // images (sequences) /s one rank's pipeline prepares with training idle (slowest rank)
  InputVerdict verdict = InputVerdict::compute_bound;
  int decode_threads = 0;  // per rank
  long files = 0;          // image files (imagefolder), image and label pairs (cityscapes) or sequences (bertpretraining) in the data set
  long skipped_files = 0;  // unreadable or undecodable files (bertpretraining: shards and sequences) met, each counted once per rank
  std::vector<std::string> skipped_examples;  // "path: why", the first few of rank 0
  bool operator==(const InputReport&) const = default;
};

// Input-bound when the step waited for input for more than this share of the measured time.
inline constexpr double kInputBoundWaitShare = 0.10;
InputVerdict input_verdict(double wait_share);
// One line for people: "waited 0.6% of the measured time (0.018 s), compute-bound; the pipeline
// alone 854 images/s per rank with 1 decoding threads[; 2 unreadable files skipped]" (BERT's shards:
// "… the pipeline alone 143485 sequences/s per rank, shard by shard[; 3 unreadable shards or
// sequences skipped]").
std::string describe_input(const InputReport& input);

// What else wanted the CPUs while a case was measured, on the busiest of its nodes: the share of
// the measured time in which some task waited for a CPU (/proc/pressure/cpu, "some"), and the
// share of CPU time a hypervisor gave to other guests (/proc/stat's steal). ranAlone covers
// dlbench's own cases only; this covers any load. Interfered above kInterferedShare of either.
// A GPU case's devices over the measured repeats, read through NVML (the worst GPU of the case
// speaks for it): other compute processes, the SM clock against the device's maximum, the
// throttle reasons active in more than 10% of the samples, the hottest reading, the median power.
struct GpuReadings {
  int other_processes = 0;  // besides the rank's own, the most seen at once
  double sm_clock_min_mhz = 0;
  double sm_clock_median_mhz = 0;
  double sm_clock_max_mhz = 0;  // the device's maximum SM clock
  std::vector<GpuThrottleReason> throttle_reasons;
  double temperature_max_c = 0;
  double power_median_w = 0;
  int samples = 0;
  bool operator==(const GpuReadings&) const = default;
};

struct InterferenceReport {
  std::optional<double> cpu_pressure;  // 0 to 1; none where the kernel has no PSI
  double cpu_steal = 0;                // 0 to 1
  std::optional<GpuReadings> gpu;      // a GPU case where NVML could be loaded
  InterferenceVerdict verdict = InterferenceVerdict::clean;
  bool operator==(const InterferenceReport&) const = default;
};
inline constexpr double kInterferedShare = 0.10;
// interfered above kInterferedShare of CPU pressure or steal, or with another process on a GPU;
// else throttled where a GPU held its clocks down for heat, a hardware slowdown or a power brake.
InterferenceVerdict interference_verdict(const std::optional<double>& cpu_pressure, double cpu_steal,
                                         const GpuReadings* gpu = nullptr);

// How a case's repeats agreed: the verdict, the bound it was judged against, how many repeats
// were measured beyond methodology.repeats, and the throughputs of the repeats those replaced
// (in run order: nothing measured is lost). `remeasured` is false where the executor cannot
// measure again (engine: command runs its steps once).
struct StabilityReport {
  StabilityVerdict verdict = StabilityVerdict::stable;
  double max_cv = 0;
  double cv = 0;  // of the reported repeats
  int extra_repeats = 0;
  std::vector<double> discarded;
  bool operator==(const StabilityReport&) const = default;
};
inline constexpr const char* kReasonUnstable = "Unstable";
// The loss after a repeat was NaN or infinite: training diverged (too high a learning rate, an
// overflow), so the steps timed were not the model's training. The repeats measured up to then
// are kept in the result, never published; the case stops there and is never retried.
inline constexpr const char* kReasonLossNotFinite = "LossNotFinite";

// What NCCL said it used, from its NCCL_DEBUG=INFO lines: the network between nodes ("IB",
// "RoCE", "Socket", or a net plugin's own name such as "AWS Libfabric"; empty when NCCL did not
// say) and every channel transport seen ("NET/IB", "NET/Socket", "P2P", "SHM", "NVLS", ...),
// with whether a NET channel read GPU memory directly (GPUDirect RDMA).
struct NcclTransport {
  std::string network;
  std::vector<std::string> links;  // sorted, distinct
  bool gpu_direct_rdma = false;
  bool operator==(const NcclTransport&) const = default;
};
inline constexpr const char* kReasonRdmaNotUsed = "RdmaNotUsed";

// What measured a case, from its worker's (or wrapped script's) result document: the software
// and hardware a published figure must name, as DLPerf's tables do (GPU, driver, CUDA, cuDNN,
// NCCL), and the backend's choices that change what runs. Host names are left out: they say
// where, not with what, and a container's changes with every start.
struct CaseEnvironment {
  std::string dlbench_version;
  std::string backend;       // cpu | cuda
  std::string communicator;  // none | mpi | nccl
  std::string cpu_model;
  std::string gpu_model;
  std::string driver_version;
  std::string cuda_version;
  std::string cudnn_version;
  std::string nccl_version;
  std::string mpi_version;
  std::string onednn_version;
  std::string framework;  // engine: command — what the script said it ran on
  std::string framework_version;
  std::map<std::string, std::string> backend_options;
  bool operator==(const CaseEnvironment&) const = default;
};
// CaseEnvironment's text fields by their names in the API (status.results[].environment), in order.
struct EnvironmentField {
  const char* name;
  std::string CaseEnvironment::*member;
};
std::span<const EnvironmentField> case_environment_fields();
// One line for people, empty fields left out: "cuda backend, NVIDIA H200, driver 580.159,
// CUDA 13.0, cuDNN 9.10.2, NCCL 2.27.3, Open MPI v4.1.4; CPU …; options layout=nhwc;
// dlbench 0.1.0", with the framework and its version first where a script ran. Not the
// communicator: it follows from the case (one rank talks to nobody), not from the machine.
std::string describe(const CaseEnvironment& environment);

// The training arithmetic a measured case did: the FLOPs of one sample's forward and backward
// pass (the worker's count of its layers), what the reported throughput makes of them per device
// and second, and where the device's dense peak for the precision is known, the model FLOPs
// utilisation (per second per device / peak).
struct FlopsReport {
  double training_per_sample = 0;
  double per_second_per_device = 0;
  std::optional<double> peak_per_device;
  std::optional<double> mfu;
  bool operator==(const FlopsReport&) const = default;
};

// The energy a measured GPU case drew: every device's energy counter (NVML, Volta and later) read
// before and after each reported repeat's measured steps, the devices' draws summed. Joules per
// sample and the average power per device over the measured steps, each the methodology's
// statistic over the repeats (as throughput). Native GPU cases where every device has the counter.
struct EnergyReport {
  double joules_per_sample = 0;
  double watts_per_device = 0;
  bool operator==(const EnergyReport&) const = default;
};

// amp's dynamic loss scaling over all of a case's steps, warm-up and extra repeats included: the
// scale it ended at, and how many steps were skipped for an inf or NaN gradient (timed like any
// other step; their update changed nothing). A throughput whose steps were mostly skipped trained
// little: readers can see it.
struct LossScalingReport {
  double final_scale = 0;
  std::int64_t skipped_steps = 0;
  std::int64_t steps = 0;
  // Where the repeats trained little (loss_scaling_trained_little): the first step the worker saw
  // skipped among a few untimed steps after them, with the gradients that overflowed and the step
  // run again layer by layer naming the first output and input gradient that held an inf or NaN,
  // or why none was traced. Empty otherwise.
  std::string overflow;
  bool operator==(const LossScalingReport&) const = default;
};

// A multi-rank native case's gradient reduction, measured after its repeats and not part of its
// throughput: the whole gradient reduced alone, bucket by bucket as a step reduces it, and steps
// run with and without their reduction, each the median of a few, the slowest rank's. busBandwidth
// is nccl-tests' figure for an allreduce, gradientBytes / allreduceSeconds × 2 (ranks - 1) / ranks
// in bytes per second, comparable across rank counts and with the link's own rate; exposedShare is
// the part of a step its reduction added, 1 - stepSecondsWithoutReduction / stepSeconds (0 where
// the steps without it were no faster: the reduction hid behind backward). Where a case scales
// short, it says how much of that the interconnect took.
struct CommunicationReport {
  std::int64_t gradient_bytes = 0;
  std::int64_t buckets = 0;
  double allreduce_seconds = 0;
  double bus_bandwidth = 0;
  double step_seconds = 0;
  double step_seconds_without_reduction = 0;
  double exposed_share = 0;
  bool operator==(const CommunicationReport&) const = default;
};

// The report from what was timed, its two derived figures computed as above.
CommunicationReport communication_report(int ranks, std::int64_t gradient_bytes, std::int64_t buckets,
                                         double allreduce_seconds, double step_seconds,
                                         double step_seconds_without_reduction);

// The longest `overflow` the API admits (the worker cuts its own to fit).
inline constexpr std::size_t kLossScalingOverflowMaxLength = 1024;

// Whether a case's loss scaling says it trained little: more than 5% of its steps skipped for an
// inf or NaN gradient (a loss scaler's first few skips are how it finds its scale), or its scale
// halved below 1, where steps overflowed even unscaled. `dlbench report` lists such cases; the
// worker then traces an overflow for the result.
bool loss_scaling_trained_little(const LossScalingReport& report);

struct CaseResult {
  CaseSpec case_;
  CaseState state = CaseState::Succeeded;
  std::optional<Throughput> throughput;             // Succeeded only
  std::optional<SampleSummary> step_time_seconds;   // Succeeded only
  std::optional<InputReport> input;                 // real-data cases (imagefolder, cityscapes, bertpretraining)
  std::optional<InterferenceReport> interference;   // native cases: other load on the nodes
  std::optional<StabilityReport> stability;         // Succeeded: how the repeats agreed
  std::optional<NcclTransport> nccl_transport;      // what NCCL used, where it said
  std::optional<OptimizerSpec> optimizer;           // native cases: how the worker says it trained
  std::optional<CaseEnvironment> environment;       // what the worker or script said measured it
  // The loss after each repeat run, in order, where the worker or command reported it and every
  // one is finite (a LossNotFinite case's message names the one that was not).
  std::vector<double> loss_after_repeats;
  std::optional<LossScalingReport> loss_scaling;  // amp cases: steps skipped for overflow, the final scale
  std::optional<FlopsReport> flops;  // native cases measured: the training arithmetic per device
  std::optional<EnergyReport> energy;  // native GPU cases measured where every GPU counts its energy
  std::optional<CommunicationReport> communication;  // native cases of more than one rank, measured
  std::optional<double> speedup;                    // over the matching 1×1 case
  std::optional<double> scaling_efficiency;         // speedup / devices
  std::string scaling_refused;  // why speedup and efficiency are not published (an impossible figure)
  std::string reason;   // Failed/Skipped: a CamelCase reason such as OutOfMemory; Succeeded: Unstable or empty
  std::string message;  // what happened, for people
  int attempts = 1;
  std::string start_time;
  std::string completion_time;
  // Whether no other dlbench case's worker ran on this case's nodes while it ran (the operator
  // sees nodes; dlbench run cannot see other processes and leaves it unset).
  std::optional<bool> ran_alone;
  bool operator==(const CaseResult&) const = default;
};

struct BestResult {
  std::string case_id;
  double throughput = 0;
  std::string unit;  // the throughput's, for the UNIT printer column
  bool operator==(const BestResult&) const = default;
};

struct BenchmarkRunStatus {
  std::int64_t observed_generation = 0;
  Phase phase = Phase::Pending;
  std::vector<Condition> conditions;
  Progress progress;
  std::vector<CaseResult> results;
  // The preflight's outcome (spec.preflight): its topology as the case, state (Succeeded,
  // Failed, or Skipped where this executor cannot run it), reason, message, attempts, times.
  std::optional<CaseResult> preflight;
  std::optional<BestResult> best;  // highest reported throughput, for the BEST printer column
  std::string start_time;          // RFC 3339: admitted (Pending became Running)
  std::string completion_time;     // RFC 3339: ended (Complete or Failed)
  bool operator==(const BenchmarkRunStatus&) const = default;
};

struct BenchmarkRun {
  std::string api_version = kApiVersion;
  std::string kind = kKind;
  ObjectMeta metadata;
  BenchmarkRunSpec spec;
  std::optional<BenchmarkRunStatus> status;
  bool operator==(const BenchmarkRun&) const = default;
};

}  // namespace dlbench
