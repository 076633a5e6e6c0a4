// Which of a model's convolutions cuDNN's engines run fused with the batch norm around them
// (cuda/conv_fusion.hpp), and, on a GPU, what the fused passes cost against the plain ones: the
// question to settle before dlbench's layers take the MLPerf-style conv+BN fusion (ResNet-50 in amp
// at 1.28x PyTorch eager, where the target is 1.3x and its batch norms took 16.8 ms of a
// 40.3 ms step on an H200).
//
//   conv_fusion_probe --device h200                 engines for a described H200, no GPU needed
//   conv_fusion_probe --device-json FILE            for the device a JSON describes
//   conv_fusion_probe --gpu [--time] [--check] [--write-device-json FILE]
//                                                   this machine's GPU: each built plan run on
//                                                   random values and timed (events, best of 5);
//                                                   each fused pass's output checked against its
//                                                   plain pass's around the host's reference
//                                                   (cuda/conv_fusion_reference.hpp)
//
// A described device answers which engines cuDNN would build, and with what workspace; only the
// device itself says how fast they run and whether they compute right.
#include <cuda_runtime.h>
#include <cudnn.h>
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cpu/cpu_backend.hpp"
#include "cuda/conv_fusion.hpp"
#include "cuda/conv_fusion_reference.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/cudnn_device.hpp"
#include "dlbench/core/command_line.hpp"
#include "model_convolutions.hpp"

namespace {

using namespace dlbench::worker;
using namespace dlbench::worker::cuda_detail;

struct Options {
  std::string model = "resnet50";
  std::int64_t batch = 256;
  std::int64_t image = 224;
  std::string precision = "amp";
  std::string device;       // a described GPU's name
  std::string device_json;  // a file
  bool gpu = false;
  bool time = false;
  bool check = false;
  int plans = 3;
  // Which engines' plans are built: the model's way (precompiled first, runtime-compiled only where
  // none builds: RuntimeCompilation::last_resort), or in the heuristics' rank.
  std::string order = "model";
  std::vector<std::string> passes;  // the passes probed (with their plain baselines); empty: every one
  std::string write_device_json;
  std::string output;
  // A CUDA driver stub (the toolkit's lib64/stubs/libcuda.so) loaded before cuDNN looks for the
  // driver: its soname is libcuda.so.1, so cuDNN's own dlopen finds it, and a machine without a GPU
  // sees the runtime-fusion engines ranked and compiled (never loaded).
  std::string stub_driver;
};

// The CUDA driver's library here: "absent" (a build machine need not have one), "stub" (the
// toolkit's lib64/stubs/libcuda.so, whose every call answers CUDA_ERROR_STUB_LIBRARY, 34) or
// "present".
std::string cuda_driver_here() {
  void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL);
  if (driver == nullptr) return "absent";
  std::string kind = "present";
  if (void* init = dlsym(driver, "cuInit"); init != nullptr) {
    constexpr int kStubLibrary = 34;  // CUDA_ERROR_STUB_LIBRARY
    if (reinterpret_cast<int (*)(unsigned)>(init)(0) == kStubLibrary) kind = "stub";
  }
  dlclose(driver);
  return kind;
}

std::string shape_name(const Conv2dConfig& c) {
  std::string name = "ic" + std::to_string(c.input.c()) + "ih" + std::to_string(c.input.h()) + "oc" +
                     std::to_string(c.out_channels) + "k" + std::to_string(c.kernel.h) + "x" +
                     std::to_string(c.kernel.w) + "s" + std::to_string(c.stride);
  if (c.dilation > 1) name += "d" + std::to_string(c.dilation);
  return name;
}

class DeviceBuffers {
 public:
  DeviceBuffers() = default;
  DeviceBuffers(const DeviceBuffers&) = delete;
  DeviceBuffers& operator=(const DeviceBuffers&) = delete;
  ~DeviceBuffers() {
    for (void* p : owned_) cudaFree(p);
  }
  void* allocate(std::size_t bytes) {
    void* p = nullptr;
    DLBENCH_CUDA_CHECK(cudaMalloc(&p, std::max<std::size_t>(bytes, 256)));
    owned_.push_back(p);
    return p;
  }

 private:
  std::vector<void*> owned_;
};

using HostValues = std::map<std::int64_t, std::vector<std::uint16_t>>;

// One graph's tensors on the device: `given` values where the caller has them, the statistics
// zeroed, random values elsewhere (one drawn pattern, copied from an offset a uid).
struct DeviceTensors {
  DeviceBuffers buffers;
  std::map<std::int64_t, void*> at;
  std::map<std::int64_t, std::size_t> bytes;
};

void fill(DeviceTensors& tensors, const FusedConvGraph& graph, DType dtype, const HostValues& given = {}) {
  for (const FusedTensor& tensor : graph.tensors) {
    void* p = tensors.buffers.allocate(tensor.bytes);
    tensors.at[tensor.uid] = p;
    tensors.bytes[tensor.uid] = tensor.bytes;
    if (tensor.value_bytes == 4) {  // statistics, parameters and coefficients: zero, or given below
      DLBENCH_CUDA_CHECK(cudaMemset(p, 0, tensor.bytes));
      continue;
    }
    if (const auto it = given.find(tensor.uid); it != given.end()) {
      if (it->second.size() * 2 != tensor.bytes) throw std::logic_error("a given tensor's size differs from the graph's");
      DLBENCH_CUDA_CHECK(cudaMemcpy(p, it->second.data(), tensor.bytes, cudaMemcpyHostToDevice));
      continue;
    }
    // Random values drawn once, copied over the tensor from an offset of its own: drawing each of
    // a batch of 256's 205 million values anew would cost seconds a tensor. The pattern's length is
    // prime, so that it never lines up with a pixel's channels.
    static constexpr std::size_t kPatternLength = 1000003;
    static const std::map<DType, std::vector<std::uint16_t>> patterns{
        {DType::fp16, random_half_values(DType::fp16, kPatternLength, 20261203u)},
        {DType::bf16, random_half_values(DType::bf16, kPatternLength, 20261203u)}};
    const std::vector<std::uint16_t>& pattern = patterns.at(dtype);
    std::size_t from = static_cast<std::size_t>(tensor.uid) * 7919 % kPatternLength;
    for (std::size_t done = 0, values = tensor.bytes / 2; done < values;) {
      const std::size_t run = std::min(values - done, kPatternLength - from);
      DLBENCH_CUDA_CHECK(cudaMemcpy(static_cast<std::uint16_t*>(p) + done, pattern.data() + from, run * 2,
                                    cudaMemcpyHostToDevice));
      done += run;
      from = 0;
    }
  }
}

void upload(DeviceTensors& tensors, std::int64_t uid, const std::vector<float>& values) {
  if (values.size() * sizeof(float) != tensors.bytes.at(uid)) throw std::logic_error("an uploaded tensor's size differs");
  DLBENCH_CUDA_CHECK(cudaMemcpy(tensors.at.at(uid), values.data(), tensors.bytes.at(uid), cudaMemcpyHostToDevice));
}

template <typename T>
std::vector<T> download(const DeviceTensors& tensors, std::int64_t uid) {
  std::vector<T> values(tensors.bytes.at(uid) / sizeof(T));
  DLBENCH_CUDA_CHECK(cudaMemcpy(values.data(), tensors.at.at(uid), values.size() * sizeof(T), cudaMemcpyDeviceToHost));
  return values;
}

BackendDescriptor variant_pack(const DeviceTensors& tensors, void* workspace) {
  std::vector<std::int64_t> uids;
  std::vector<void*> pointers;
  for (const auto& [uid, p] : tensors.at) {
    uids.push_back(uid);
    pointers.push_back(p);
  }
  return make_variant_pack(uids, pointers, workspace);
}

// A graph and the plans the engines built for it.
struct Probed {
  FusedConvGraph graph;
  EngineSearchResult search;
};

// Each of `probed`'s plans on random values (time_plans: one run to show it runs, then 5 between
// two events), best-ranked first; nullopt for one that did not run.
std::vector<std::optional<float>> plan_milliseconds(cudnnHandle_t handle, const Probed& probed, DType dtype,
                                                    cudaStream_t stream) {
  DeviceTensors tensors;
  fill(tensors, probed.graph, dtype);
  std::size_t workspace_bytes = 0;
  for (const BuiltPlan& plan : probed.search.built) workspace_bytes = std::max(workspace_bytes, plan.workspace);
  void* workspace = workspace_bytes > 0 ? tensors.buffers.allocate(workspace_bytes) : nullptr;
  const BackendDescriptor pack = variant_pack(tensors, workspace);
  std::vector<cudnnBackendDescriptor_t> plans;
  for (const BuiltPlan& plan : probed.search.built) plans.push_back(plan.plan.get());
  GraphSearch counted;
  return time_plans(handle, stream, plans, pack.get(), 5, counted);
}

// Runs `probed`'s plan `index` (0: the best-ranked) on `tensors` and waits for it.
void run_plan(cudnnHandle_t handle, const Probed& probed, std::size_t index, DeviceTensors& tensors) {
  const BuiltPlan& plan = probed.search.built.at(index);
  void* workspace = plan.workspace > 0 ? tensors.buffers.allocate(plan.workspace) : nullptr;
  check_cudnn_graph(cudnnBackendExecute(handle, plan.plan.get(), variant_pack(tensors, workspace).get()),
                    "running engine " + std::to_string(plan.engine));
  DLBENCH_CUDA_CHECK(cudaDeviceSynchronize());
}

// The per-channel values `graph` writes (statistics, weight gradients, coefficients), one after another.
std::vector<float> download_per_channel_outputs(const DeviceTensors& tensors, const FusedConvGraph& graph) {
  std::vector<float> all;
  for (const FusedTensor& t : graph.tensors) {
    if (!is_per_channel_output(t.uid)) continue;
    const std::vector<float> values = download<float>(tensors, t.uid);
    all.insert(all.end(), values.begin(), values.end());
  }
  return all;
}

void zero_per_channel_outputs(DeviceTensors& tensors, const FusedConvGraph& graph) {
  for (const FusedTensor& t : graph.tensors) {
    if (is_per_channel_output(t.uid)) DLBENCH_CUDA_CHECK(cudaMemset(tensors.at.at(t.uid), 0, t.bytes));
  }
}

// A fused pass against its plain pass around the host's reference, on the same random inputs:
// the output's error as a share of its largest value and, where it computes them, the
// statistics' error against the host's sums of the output it wrote, or the batch norm's gradients'
// error against the host's from the gradient it wrote (statistics_error holds either); and what a
// second run without zeroing did to its per-channel outputs (repeated_run_effect).
struct CheckResult {
  double output_error = 0;
  std::optional<double> statistics_error;
  std::string second_run;
};
inline constexpr double kOutputBound = 1e-2, kStatisticsBound = 1e-2;

// One result for each plan the fused pass built, best-ranked first: the model times them and may
// run any of them.
std::vector<CheckResult> check_fused(cudnnHandle_t handle, const Conv2dConfig& config, DType dtype,
                                     const Probed& fused, const Probed& plain) {
  DeviceTensors ours;
  fill(ours, fused.graph, dtype);
  // The batch norm whose gradients the pass reduces, as its forward left it for its input's values:
  // the one before the convolution (its input is the ReLU's, recomputed), or, in the shortcut's
  // form, the block's last (its input apart from the ReLU's, the block's output).
  const ConvFusion fusion = fused.graph.fusion;
  const bool shortcut = fusion == ConvFusion::dgrad_add_drelu || fusion == ConvFusion::dgrad_add_drelu_dbn_weight;
  const std::int64_t batch_norm_input = fusion == ConvFusion::dgrad_add_drelu_dbn_weight ? kBatchNormInputUid
                                                                                        : kReluInputUid;
  std::optional<BatchNormParameters> batch_norm;
  if (reduces_batch_norm_gradients(fusion)) {
    batch_norm = batch_norm_parameters(dtype, download<std::uint16_t>(ours, batch_norm_input),
                                       static_cast<std::size_t>(config.input.c()), 20261203u);
    upload(ours, kMeanUid, batch_norm->mean);
    upload(ours, kInvStdUid, batch_norm->inv_std);
    upload(ours, kGammaUid, batch_norm->gamma);
    if (ours.at.contains(kBetaUid)) upload(ours, kBetaUid, batch_norm->beta);
  }
  const auto input = [&](std::int64_t uid) { return download<std::uint16_t>(ours, uid); };
  HostValues given;
  std::int64_t output_uid = kOutputUid;
  switch (fusion) {
    case ConvFusion::conv_genstats: given = {{kInputUid, input(kInputUid)}, {kFilterUid, input(kFilterUid)}}; break;
    case ConvFusion::scale_bias_relu_conv_genstats:
      given = {{kInputUid, scale_bias_relu(dtype, input(kInputUid), input(kScaleUid), input(kBiasUid))},
               {kFilterUid, input(kFilterUid)}};
      break;
    case ConvFusion::scale_bias_relu_wgrad:
      given = {{kInputUid, scale_bias_relu(dtype, input(kInputUid), input(kScaleUid), input(kBiasUid))},
               {kOutputUid, input(kOutputUid)}};
      output_uid = kFilterUid;
      break;
    case ConvFusion::dgrad_drelu:
    case ConvFusion::dgrad_scale_bias_drelu:
    case ConvFusion::dgrad_drelu_dbn_weight:
    case ConvFusion::dgrad_add_drelu:
    case ConvFusion::dgrad_add_drelu_dbn_weight:
      given = {{kFilterUid, input(kFilterUid)}, {kOutputUid, input(kOutputUid)}};
      output_uid = kInputUid;
      break;
    case ConvFusion::conv:
    case ConvFusion::wgrad:
    case ConvFusion::dgrad: throw std::logic_error("a plain pass has nothing to be checked against");
    case ConvFusion::runtime_fusion_canary: throw std::logic_error("the runtime-fusion canary is never checked");
  }
  DeviceTensors theirs;
  fill(theirs, plain.graph, dtype, given);
  run_plan(handle, plain, 0, theirs);
  std::vector<std::uint16_t> want = download<std::uint16_t>(theirs, output_uid);
  if (shortcut) add_into(dtype, want, input(kShortcutGradientUid));
  if (fusion == ConvFusion::dgrad_drelu || shortcut) {
    relu_backward(dtype, want, input(kReluInputUid));
  } else if (fusion == ConvFusion::dgrad_scale_bias_drelu) {
    const auto scale = input(kScaleUid), bias = input(kBiasUid);
    relu_backward(dtype, want, input(kReluInputUid), &scale, &bias);
  } else if (fusion == ConvFusion::dgrad_drelu_dbn_weight) {
    relu_backward(dtype, want, input(kReluInputUid), *batch_norm);
  }

  std::vector<CheckResult> results;
  for (std::size_t index = 0; index < fused.search.built.size(); ++index) {
    zero_per_channel_outputs(ours, fused.graph);  // as the model does before a run
    run_plan(handle, fused, index, ours);
    const std::vector<std::uint16_t> got = download<std::uint16_t>(ours, output_uid);
    CheckResult result;
    result.output_error = relative_max_error(dtype, got, want);
    if (ours.at.contains(kSumUid)) {
      result.statistics_error = statistics_error(download<float>(ours, kSumUid), download<float>(ours, kSquareSumUid),
                                                 channel_sums(dtype, got, static_cast<std::size_t>(config.out_channels)));
    }
    if (batch_norm) {
      result.statistics_error = batch_norm_gradients_error(
          dtype, download<float>(ours, kDgammaUid), download<float>(ours, kDbetaUid),
          download<float>(ours, kCoefficientDyUid), download<float>(ours, kCoefficientXUid),
          download<float>(ours, kCoefficientBiasUid), input(batch_norm_input), got, *batch_norm);
    }
    const std::vector<float> once = download_per_channel_outputs(ours, fused.graph);
    if (!once.empty()) {
      run_plan(handle, fused, index, ours);
      result.second_run = repeated_run_effect(once, download_per_channel_outputs(ours, fused.graph));
    }
    results.push_back(std::move(result));
  }
  return results;
}

// The passes `names` asks for, with the plain pass each is checked and timed against, in
// kConvFusions's order; every pass where `names` is empty. Throws UsageError for a name that is
// not a pass.
std::vector<ConvFusion> passes_probed(const std::vector<std::string>& names) {
  std::set<ConvFusion> chosen;
  for (const std::string& name : names) {
    const auto it = std::ranges::find_if(kConvFusions, [&](ConvFusion f) { return to_string(f) == name; });
    if (it == kConvFusions.end()) {
      std::string allowed;
      for (const ConvFusion f : kConvFusions) allowed += (allowed.empty() ? "" : ", ") + std::string(to_string(f));
      throw dlbench::UsageError{"--passes: '" + name + "' is not one of " + allowed};
    }
    chosen.insert(*it);
    chosen.insert(baseline_of(*it));
  }
  std::vector<ConvFusion> fusions;
  for (const ConvFusion f : kConvFusions) {
    if (names.empty() || chosen.contains(f)) fusions.push_back(f);
  }
  return fusions;
}

int run(const Options& options) {
  const DType dtype = options.precision == "bf16" ? DType::bf16 : DType::fp16;
  const std::vector<ConvFusion> fusions = passes_probed(options.passes);
  cudnnHandle_t handle = nullptr;
  cudaStream_t stream = nullptr;
  std::optional<BackendDescriptor> described;
  std::string device_name;
  if (options.gpu) {
    int devices = 0;
    if (const cudaError_t status = cudaGetDeviceCount(&devices); status != cudaSuccess || devices == 0) {
      throw std::runtime_error(std::string("--gpu: no usable CUDA device (") +
                               (status != cudaSuccess ? cudaGetErrorString(status) : "none found") + ")");
    }
    DLBENCH_CUDA_CHECK(cudaStreamCreate(&stream));
    DLBENCH_CUDNN_CHECK(cudnnCreate(&handle));
    DLBENCH_CUDNN_CHECK(cudnnSetStream(handle, stream));
    cudaDeviceProp properties{};
    DLBENCH_CUDA_CHECK(cudaGetDeviceProperties(&properties, 0));
    device_name = properties.name;
    if (!options.write_device_json.empty()) {
      std::ofstream(options.write_device_json) << device_json(device_properties_of(handle)) << "\n";
    }
  } else if (!options.device_json.empty()) {
    std::ifstream file(options.device_json);
    if (!file) throw dlbench::UsageError{"--device-json: cannot read " + options.device_json};
    std::stringstream text;
    text << file.rdbuf();
    described = device_properties_from_json(text.str());
    device_name = "described by " + options.device_json;
  } else {
    const GpuDescription& gpu = described_gpu(options.device);
    described = device_properties_from_json(cudnn_device_json(gpu));
    device_name = gpu.name + " (described, not present)";
  }

  CpuBackend cpu(1);
  const std::vector<dlbench::bench::ModelConvolution> convolutions =
      dlbench::bench::model_convolutions(cpu, options.model, options.batch, options.image);
  int total = 0;
  for (const auto& convolution : convolutions) total += convolution.count;

  std::printf("%s: %s batch %ld at %ld, %s, cuDNN %zu; %d convolutions, %zu shapes\n", device_name.c_str(),
              options.model.c_str(), static_cast<long>(options.batch), static_cast<long>(options.image),
              options.precision.c_str(), cudnnGetVersion(), total, convolutions.size());
  // First, whether generic runtime-fusion engines are offered here at all: a convolution with an
  // epilogue only they run (ConvFusion::runtime_fusion_canary), on the first shape with channels in
  // eights. None ranked says this machine is offered none of them, so a fused pass none builds here
  // may still build where they are. cuDNN offers them only where the CUDA driver loads (it refuses
  // them, RUNTIME_PREREQUISITE_MISSING, "libcuda == nullptr", in its debug log): a described
  // device on a machine without one never meets them, whatever the description says. With the
  // toolkit's stub driver they are ranked and compiled, and fail to load.
  nlohmann::json canary;
  const std::string driver = cuda_driver_here();
  canary["cudaDriver"] = driver;
  for (const auto& convolution : convolutions) {
    Conv2dConfig config = convolution.config;
    if (config.input.c() % 8 != 0 || config.out_channels % 8 != 0) continue;
    config.dtype = dtype;
    canary["shape"] = shape_name(config);
    try {
      const FusedConvGraph graph(config, ConvFusion::runtime_fusion_canary, handle);
      const EngineSearchResult search = search_engines(graph, handle, described ? &*described : nullptr, 1);
      int compiled = 0;
      for (const BuiltPlan& plan : search.built) compiled += plan.runtime_compiled;
      canary["ranked"] = search.search.ranked;
      canary["built"] = search.built.size();
      canary["runtimeCompiledPlans"] = compiled;
      canary["rankedRuntimeCompiled"] = search.search.ranked_runtime_compiled;
      if (search.search.compiles > 0) {
        canary["compiles"] = search.search.compiles;
        canary["compileMilliseconds"] = search.search.compile_milliseconds;
      }
      std::string said;
      if (!search.built.empty()) {
        canary["buildMilliseconds"] = search.built.front().build_milliseconds;
        said = " (built in " + std::to_string(static_cast<long>(search.built.front().build_milliseconds)) + " ms)";
      }
      if (driver == "absent" && search.search.ranked == 0) {
        said = ": none offered here, since this machine has no CUDA driver (libcuda.so.1), which cuDNN needs for "
               "them; a pass none builds below may build where one is";
      } else if (driver == "stub") {
        said = ": the CUDA driver here is the toolkit's stub, so cuDNN ranks and compiles them but cannot load "
               "what it compiled; a pass only they run builds below for none, and may where a GPU is";
      } else if (search.search.ranked == 0) {
        said = ": none offered here, so a pass none builds below may build elsewhere";
      }
      std::printf("runtime-fusion engines (%s on %s): %d ranked, %zu built, %d compiled at build%s\n",
                  std::string(to_string(ConvFusion::runtime_fusion_canary)).c_str(),
                  canary["shape"].get<std::string>().c_str(), search.search.ranked, search.built.size(), compiled,
                  said.c_str());
    } catch (const CudaError& e) {
      canary["refusedGraph"] = e.what();
      std::printf("runtime-fusion engines: the canary graph was refused: %s\n", e.what());
    }
    break;
  }
  std::printf("%-24s %5s %-30s %6s %6s %6s %7s %9s%s\n", "shape", "count", "pass", "ranked", "built", "engine",
              "ws MiB", options.time ? "ms" : "", "");
  nlohmann::json rows = nlohmann::json::array();
  // Per fusion: the convolutions (counted with their multiplicity) it builds for, and where timed,
  // its milliseconds a step and its baseline's over the same convolutions.
  struct Tally {
    int supported = 0;
    double milliseconds = 0, baseline_milliseconds = 0;
    int timed = 0;
    int checked = 0, off = 0;  // convolutions whose fused pass was checked, and found off its bound
    int fastest_not_first = 0;  // convolutions whose fastest plan was not the best-ranked
    int compiles = 0;           // runtime-compiled plans finalized (each shape's once), built or not
    double compile_ms = 0, slowest_compile_ms = 0;
    std::map<std::string, int> second_run;  // convolutions by what a second run did to their sums
  };
  std::map<ConvFusion, Tally> tallies;
  // The document is written again after each shape, so that a run cut short by its deadline (plans
  // compiled at run time can be slow to build) still leaves every shape it finished.
  const auto write_document = [&](bool complete) {
    if (options.output.empty()) return;
    nlohmann::json summary = nlohmann::json::array();
    for (const ConvFusion fusion : fusions) {
      const Tally& tally = tallies[fusion];
      nlohmann::json entry{{"pass", std::string(to_string(fusion))},
                           {"baseline", std::string(to_string(baseline_of(fusion)))},
                           {"convolutionsBuilt", tally.supported},
                           {"convolutions", total}};
      if (tally.checked > 0) {
        entry["convolutionsChecked"] = tally.checked;
        entry["convolutionsOff"] = tally.off;
      }
      if (!tally.second_run.empty()) entry["secondRunWithoutZeroing"] = tally.second_run;
      if (tally.compiles > 0) {
        entry["compiles"] = tally.compiles;
        entry["compileMilliseconds"] = tally.compile_ms;
        entry["slowestCompileMilliseconds"] = tally.slowest_compile_ms;
      }
      if (options.time && tally.supported > 0) entry["convolutionsFastestNotFirstPlan"] = tally.fastest_not_first;
      if (tally.timed > 0) {
        entry["millisecondsPerStep"] = tally.milliseconds;
        entry["baselineMillisecondsPerStep"] = tally.baseline_milliseconds;
        entry["convolutionsTimed"] = tally.timed;
      }
      summary.push_back(entry);
    }
    const nlohmann::json document{{"device", device_name},      {"cudnnVersion", cudnnGetVersion()},
                                  {"model", options.model},     {"batchSize", options.batch},
                                  {"imageSize", options.image}, {"precision", options.precision},
                                  {"timed", options.time},      {"checked", options.check},
                                  {"order", options.order},
                                  {"complete", complete},       {"runtimeFusionCanary", canary},
                                  {"summary", summary},         {"passes", rows}};
    std::ofstream(options.output) << document.dump(2) << "\n";
  };
  for (const auto& [model_config, count, first] : convolutions) {
    Conv2dConfig config = model_config;
    config.dtype = dtype;
    // Every pass's graph and plans first: a fused pass is checked against its plain pass's plan.
    std::map<ConvFusion, Probed> probed;
    std::map<ConvFusion, std::string> refused;
    for (const ConvFusion fusion : fusions) {
      try {
        FusedConvGraph graph(config, fusion, handle);
        PlanRules rules;
        rules.most = options.plans;
        rules.runtime_compilation =
            options.order == "model" ? RuntimeCompilation::last_resort : RuntimeCompilation::ranked;
        EngineSearchResult search = search_engines(graph, handle, described ? &*described : nullptr, rules);
        probed.emplace(fusion, Probed{std::move(graph), std::move(search)});
      } catch (const CudaError& e) {
        refused[fusion] = e.what();
      }
    }
    std::map<ConvFusion, double> milliseconds;
    for (const ConvFusion fusion : fusions) {
      nlohmann::json row{{"shape", shape_name(config)}, {"count", count}, {"first", first},
                         {"pass", std::string(to_string(fusion))}};
      std::string said;
      if (const auto it = probed.find(fusion); it == probed.end()) {
        row["refusedGraph"] = refused.at(fusion);
        said = "graph refused: " + refused.at(fusion);
      } else {
        const EngineSearchResult& search = it->second.search;
        row["ranked"] = search.search.ranked;
        row["refused"] = search.search.refused;
        row["unbuildable"] = search.search.unbuildable;
        row["built"] = search.built.size();
        row["rankedRuntimeCompiled"] = search.search.ranked_runtime_compiled;
        if (search.search.compiles > 0) {  // runtime-compiled plans finalized, built or not
          row["compiles"] = search.search.compiles;
          row["compileMilliseconds"] = search.search.compile_milliseconds;
          Tally& tally = tallies[fusion];
          tally.compiles += search.search.compiles;
          tally.compile_ms += search.search.compile_milliseconds;
          tally.slowest_compile_ms = std::max(tally.slowest_compile_ms, search.search.slowest_compile_milliseconds);
        }
        if (!search.first_unbuildable_reason.empty()) row["firstUnbuildable"] = search.first_unbuildable_reason;
        if (search.built.empty()) said = search.first_unbuildable_reason;
        if (!search.built.empty()) {
          row["engine"] = search.built.front().engine;
          int compiled = 0;
          nlohmann::json build_ms = nlohmann::json::array();
          for (const BuiltPlan& plan : search.built) {
            compiled += plan.runtime_compiled;
            build_ms.push_back(plan.build_milliseconds);
          }
          row["runtimeCompiledPlans"] = compiled;  // of those built: kernels compiled as the plan was
          row["planBuildMilliseconds"] = build_ms;  // in build order
          row["workspaceBytes"] = search.built.front().workspace;
          tallies[fusion].supported += count;
          if (options.time) {
            const std::vector<std::optional<float>> times = plan_milliseconds(handle, it->second, dtype, stream);
            nlohmann::json each = nlohmann::json::array();
            for (const std::optional<float>& ms : times) each.push_back(ms ? nlohmann::json(*ms) : nlohmann::json());
            row["planMilliseconds"] = each;  // best-ranked first; null: it did not run
            if (const std::optional<std::size_t> fastest = fastest_plan(times)) {
              row["milliseconds"] = *times[*fastest];
              row["fastestPlan"] = *fastest + 1;
              if (*fastest > 0) tallies[fusion].fastest_not_first += count;
              milliseconds[fusion] = *times[*fastest];
            }
          }
          const auto plain = probed.find(baseline_of(fusion));
          if (options.check && fusion != baseline_of(fusion) && plain != probed.end() &&
              !plain->second.search.built.empty()) {
            // Every plan built is checked (the model may run any); the row says the worst.
            const std::vector<CheckResult> checks = check_fused(handle, config, dtype, it->second, plain->second);
            const bool gradients = reduces_batch_norm_gradients(fusion);
            const char* second_name = gradients ? "batchNormGradientsError" : "statisticsError";
            CheckResult worst;
            // NaN is worse than any number (std::max would keep the number).
            const auto worse = [](double candidate, double held) {
              return std::isnan(candidate) || (!std::isnan(held) && candidate > held);
            };
            nlohmann::json each = nlohmann::json::array();
            for (const CheckResult& check : checks) {
              nlohmann::json plan{{"outputError", check.output_error}};
              if (check.statistics_error) plan[second_name] = *check.statistics_error;
              if (!check.second_run.empty()) plan["secondRunWithoutZeroing"] = check.second_run;
              each.push_back(plan);
              if (worse(check.output_error, worst.output_error)) worst.output_error = check.output_error;
              if (check.statistics_error &&
                  (!worst.statistics_error || worse(*check.statistics_error, *worst.statistics_error))) {
                worst.statistics_error = check.statistics_error;
              }
            }
            const bool off = !(worst.output_error <= kOutputBound) ||
                             (worst.statistics_error && !(*worst.statistics_error <= kStatisticsBound));
            row["plansChecked"] = each;
            row["outputError"] = worst.output_error;
            // What the second error measures: the output's statistics, or the batch norm's gradients.
            if (worst.statistics_error) row[second_name] = *worst.statistics_error;
            row["check"] = off ? "off" : "ok";
            Tally& tally = tallies[fusion];
            tally.checked += count;
            if (off) tally.off += count;
            char text[160];
            std::snprintf(text, sizeof text, "%s: output %.2e of its largest (bound %.0e)", off ? "OFF" : "ok",
                          worst.output_error, kOutputBound);
            said = text;
            if (worst.statistics_error) {
              std::snprintf(text, sizeof text, ", %s %.2e (bound %.0e)", gradients ? "batch-norm gradients" : "statistics",
                            *worst.statistics_error, kStatisticsBound);
              said += text;
            }
            said += ", worst of " + std::to_string(checks.size()) + " plans";
            if (!checks.empty() && !checks.front().second_run.empty()) {
              said += "; sums after a second run without zeroing: " + checks.front().second_run;
              tally.second_run[checks.front().second_run] += count;
            }
          }
        }
      }
      const bool built = row.value("built", 0) > 0;
      std::printf("%-24s %5d %-30s %6d %6d %6s %7.1f %9s %s\n", row["shape"].get<std::string>().c_str(), count,
                  row["pass"].get<std::string>().c_str(), row.value("ranked", 0), row.value("built", 0),
                  built ? std::to_string(row["engine"].get<std::int64_t>()).c_str() : "-",
                  built ? static_cast<double>(row["workspaceBytes"].get<std::size_t>()) / (1 << 20) : 0.0,
                  row.contains("milliseconds") ? std::to_string(row["milliseconds"].get<double>()).substr(0, 7).c_str()
                                               : "",
                  said.c_str());
      rows.push_back(row);
    }
    for (const auto& [fusion, ms] : milliseconds) {
      const auto baseline = milliseconds.find(baseline_of(fusion));
      if (baseline == milliseconds.end()) continue;
      Tally& tally = tallies[fusion];
      tally.milliseconds += count * ms;
      tally.baseline_milliseconds += count * baseline->second;
      tally.timed += count;
    }
    std::fflush(stdout);
    write_document(false);
  }

  bool any_off = false;
  std::printf("\n%-30s %14s%s\n", "pass", "convolutions", options.time ? "   ms a step (its baseline's, same convolutions)" : "");
  for (const ConvFusion fusion : fusions) {
    const Tally& tally = tallies[fusion];
    std::printf("%-30s %6d of %-5d", std::string(to_string(fusion)).c_str(), tally.supported, total);
    if (tally.timed > 0) {
      std::printf("   %8.3f (%8.3f over %d)", tally.milliseconds, tally.baseline_milliseconds, tally.timed);
    }
    if (tally.checked > 0) std::printf("   checked %d, %d off", tally.checked, tally.off);
    std::printf("\n");
    any_off = any_off || tally.off > 0;
  }
  write_document(true);
  if (handle != nullptr) cudnnDestroy(handle);
  if (stream != nullptr) cudaStreamDestroy(stream);
  if (any_off) std::fprintf(stderr, "conv_fusion_probe: a fused pass computed off its bound (OFF above)\n");
  return any_off ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{"conv_fusion_probe — which convolution passes cuDNN's engines fuse with batch norm, and their cost",
               "conv_fusion_probe"};
  dlbench::use_dlbench_help(app);
  app.add_option("--model", options.model, "the model whose convolutions are probed (default resnet50)");
  app.add_option("--batch-size", options.batch, "images a batch (default 256)");
  app.add_option("--image-size", options.image, "image side in pixels (default 224)");
  app.add_option("--precision", options.precision, "amp (fp16 data) or bf16 (default amp)");
  app.add_option("--device", options.device, "a described GPU, none needed here: h200");
  app.add_option("--device-json", options.device_json, "a GPU described by cuDNN's JSON (--write-device-json's)");
  app.add_flag("--gpu", options.gpu, "this machine's GPU 0");
  app.add_flag("--time", options.time, "with --gpu: time each pass's built plans, keep the fastest");
  app.add_flag("--check", options.check,
               "with --gpu: check each fused pass against its plain pass around the host's reference; exit 1 where "
               "one is off its bound");
  app.add_option("--plans", options.plans, "plans built (and timed) a pass, best-ranked first (default 3)");
  app.add_option("--passes", options.passes,
                 "the passes probed, each with its plain pass (default every one: conv, conv+genstats, ...)")
      ->delimiter(',');
  app.add_option("--order", options.order,
                 "model: precompiled engines first, runtime-compiled ones only where none builds, as the model "
                 "builds them (default); ranked: the heuristics' order");
  app.add_option("--write-device-json", options.write_device_json, "with --gpu: write the GPU's JSON to this file");
  app.add_option("--stub-driver", options.stub_driver,
                 "without --gpu: load this CUDA driver stub (the toolkit's lib64/stubs/libcuda.so) first, so that "
                 "cuDNN ranks and compiles its runtime-fusion engines here");
  app.add_option("--output", options.output, "write every pass and the summary as JSON to this file");
  try {
    try {
      dlbench::parse_command_line(app, std::vector<std::string>(argv + 1, argv + argc));
    } catch (const CLI::CallForHelp&) {
      std::cout << app.help();
      return 0;
    }
    const int devices = options.gpu + !options.device.empty() + !options.device_json.empty();
    if (devices != 1) throw dlbench::UsageError{"give one of --device NAME, --device-json FILE, --gpu"};
    if (options.precision != "amp" && options.precision != "bf16") {
      throw dlbench::UsageError{"--precision: '" + options.precision + "' is not one of amp, bf16"};
    }
    passes_probed(options.passes);  // refuses a name that is no pass before anything runs
    if (options.order != "model" && options.order != "ranked") {
      throw dlbench::UsageError{"--order: '" + options.order + "' is not one of model, ranked"};
    }
    if ((options.time || options.check || !options.write_device_json.empty()) && !options.gpu) {
      throw dlbench::UsageError{"--time, --check and --write-device-json need --gpu"};
    }
    if (!options.stub_driver.empty()) {
      if (options.gpu) throw dlbench::UsageError{"--stub-driver: not with --gpu, whose machine has its own driver"};
      // Kept loaded for the process: cuDNN's dlopen("libcuda.so.1") finds it by its soname.
      if (dlopen(options.stub_driver.c_str(), RTLD_NOW | RTLD_GLOBAL) == nullptr) {
        throw dlbench::UsageError{"--stub-driver: cannot load " + options.stub_driver + ": " + dlerror()};
      }
    }
    if (!options.device.empty()) {
      try {
        described_gpu(options.device);
      } catch (const std::invalid_argument& e) {
        throw dlbench::UsageError{e.what()};
      }
    }
    if (options.plans < 1 || options.plans > 50) throw dlbench::UsageError{"--plans: between 1 and 50"};
    if (options.batch < 1 || options.image < 1) throw dlbench::UsageError{"--batch-size and --image-size: 1 or more"};
    return run(options);
  } catch (const dlbench::UsageError& u) {
    std::cerr << "conv_fusion_probe: " << u.message << "\n";
    return 2;
  } catch (const std::exception& e) {
    std::cerr << "conv_fusion_probe: " << e.what() << "\n";
    return 1;
  }
}
