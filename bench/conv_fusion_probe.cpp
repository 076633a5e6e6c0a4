// Which of a model's convolutions cuDNN's engines run fused with the batch norm around them
// (cuda/conv_fusion.hpp), and, on a GPU, what the fused passes cost against the plain ones: the
// question to settle before dlbench's layers take the MLPerf-style conv+BN fusion (ResNet-50 in amp
// at 1.28x PyTorch eager, where the target is 1.3x and its batch norms took 16.8 ms of a
// 40.3 ms step on an H200).
//
//   conv_fusion_probe --device h200                 engines for a described H200, no GPU needed
//   conv_fusion_probe --device-json FILE            for the device a JSON describes
//   conv_fusion_probe --gpu [--time] [--write-device-json FILE]
//                                                   this machine's GPU: each built plan run on
//                                                   random values and timed (events, best of 5)
//
// A described device answers which engines cuDNN would build, and with what workspace; only the
// device itself says how fast they run. Correctness is not this program's: a fused layer in the
// model is checked by the self-test against the CPU, like every other.
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cpu/cpu_backend.hpp"
#include "cuda/conv_fusion.hpp"
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
  int plans = 3;
  std::string write_device_json;
  std::string output;
};

std::string shape_name(const Conv2dConfig& c) {
  std::string name = "ic" + std::to_string(c.input.c()) + "ih" + std::to_string(c.input.h()) + "oc" +
                     std::to_string(c.out_channels) + "k" + std::to_string(c.kernel.h) + "x" +
                     std::to_string(c.kernel.w) + "s" + std::to_string(c.stride);
  if (c.dilation > 1) name += "d" + std::to_string(c.dilation);
  return name;
}

// Random values of magnitude 0.5 to 1 with either sign, as 16-bit patterns of `dtype`: what the
// timed passes read (zeros would draw less power and could clock higher than training does).
std::vector<std::uint16_t> random_halves(DType dtype, std::size_t count) {
  std::mt19937 generator(20261203);
  std::uniform_int_distribution<int> mantissa(0, dtype == DType::bf16 ? 0x7F : 0x3FF);
  std::vector<std::uint16_t> values(count);
  const std::uint16_t half_exponent = dtype == DType::bf16 ? 0x3F00 : 0x3800;
  for (std::size_t i = 0; i < count; ++i) {
    values[i] = static_cast<std::uint16_t>((i % 2 ? 0x8000 : 0) | half_exponent | mantissa(generator));
  }
  return values;
}

class DeviceBuffers {
 public:
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

// The fastest of `plans` on random values: one run to show it runs, then 5 between two events.
std::optional<double> fastest_milliseconds(cudnnHandle_t handle, const FusedConvGraph& graph,
                                           const std::vector<BuiltPlan>& plans, DType dtype, cudaStream_t stream) {
  DeviceBuffers buffers;
  std::vector<std::int64_t> uids;
  std::vector<void*> pointers;
  std::size_t largest = 0;
  for (const FusedTensor& tensor : graph.tensors) largest = std::max(largest, tensor.bytes);
  const std::vector<std::uint16_t> values = random_halves(dtype, largest / 2);
  for (const FusedTensor& tensor : graph.tensors) {
    uids.push_back(tensor.uid);
    pointers.push_back(buffers.allocate(tensor.bytes));
    DLBENCH_CUDA_CHECK(cudaMemcpy(pointers.back(), values.data(), tensor.bytes, cudaMemcpyHostToDevice));
  }
  std::size_t workspace_bytes = 0;
  for (const BuiltPlan& plan : plans) workspace_bytes = std::max(workspace_bytes, plan.workspace);
  void* workspace = workspace_bytes > 0 ? buffers.allocate(workspace_bytes) : nullptr;
  BackendDescriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids.data(), std::ssize(uids));
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, pointers.data(), std::ssize(pointers));
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, &workspace);
  pack.finalize("the variant pack");
  cudaEvent_t start = nullptr, stop = nullptr;
  DLBENCH_CUDA_CHECK(cudaEventCreate(&start));
  DLBENCH_CUDA_CHECK(cudaEventCreate(&stop));
  std::optional<double> best;
  for (const BuiltPlan& plan : plans) {
    if (cudnnBackendExecute(handle, plan.plan.get(), pack.get()) != CUDNN_STATUS_SUCCESS) {
      cudaGetLastError();
      continue;
    }
    constexpr int kRuns = 5;
    DLBENCH_CUDA_CHECK(cudaEventRecord(start, stream));
    for (int run = 0; run < kRuns; ++run) {
      check_cudnn_graph(cudnnBackendExecute(handle, plan.plan.get(), pack.get()),
                        "running engine " + std::to_string(plan.engine));
    }
    DLBENCH_CUDA_CHECK(cudaEventRecord(stop, stream));
    DLBENCH_CUDA_CHECK(cudaEventSynchronize(stop));
    float milliseconds = 0;
    DLBENCH_CUDA_CHECK(cudaEventElapsedTime(&milliseconds, start, stop));
    const double each = milliseconds / kRuns;
    if (!best || each < *best) best = each;
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return best;
}

int run(const Options& options) {
  const DType dtype = options.precision == "bf16" ? DType::bf16 : DType::fp16;
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
  std::printf("%-24s %5s %-30s %6s %6s %6s %7s %9s%s\n", "shape", "count", "pass", "ranked", "built", "engine",
              "ws MiB", options.time ? "ms" : "", "");
  nlohmann::json rows = nlohmann::json::array();
  // Per fusion: the convolutions (counted with their multiplicity) it builds for, and where timed,
  // its milliseconds a step and its baseline's over the same convolutions.
  struct Tally {
    int supported = 0;
    double milliseconds = 0, baseline_milliseconds = 0;
    int timed = 0;
  };
  std::map<ConvFusion, Tally> tallies;
  // The document is written again after each shape, so that a run cut short by its deadline (plans
  // compiled at run time can be slow to build) still leaves every shape it finished.
  const auto write_document = [&](bool complete) {
    if (options.output.empty()) return;
    nlohmann::json summary = nlohmann::json::array();
    for (const ConvFusion fusion : kConvFusions) {
      const Tally& tally = tallies[fusion];
      nlohmann::json entry{{"pass", std::string(to_string(fusion))},
                           {"baseline", std::string(to_string(baseline_of(fusion)))},
                           {"convolutionsBuilt", tally.supported},
                           {"convolutions", total}};
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
                                  {"timed", options.time},      {"complete", complete},
                                  {"summary", summary},         {"passes", rows}};
    std::ofstream(options.output) << document.dump(2) << "\n";
  };
  for (const auto& [model_config, count, first] : convolutions) {
    Conv2dConfig config = model_config;
    config.dtype = dtype;
    std::map<ConvFusion, double> milliseconds;
    for (const ConvFusion fusion : kConvFusions) {
      nlohmann::json row{{"shape", shape_name(config)}, {"count", count}, {"first", first},
                         {"pass", std::string(to_string(fusion))}};
      try {
        const FusedConvGraph graph(config, fusion, handle);
        const EngineSearchResult search = search_engines(graph, handle, described ? &*described : nullptr,
                                                         options.plans);
        row["ranked"] = search.ranked;
        row["refused"] = search.refused;
        row["unbuildable"] = search.unbuildable;
        row["built"] = search.built.size();
        if (!search.first_unbuildable_reason.empty()) row["firstUnbuildable"] = search.first_unbuildable_reason;
        if (!search.built.empty()) {
          row["engine"] = search.built.front().engine;
          row["workspaceBytes"] = search.built.front().workspace;
          tallies[fusion].supported += count;
          if (options.time) {
            if (const auto ms = fastest_milliseconds(handle, graph, search.built, dtype, stream)) {
              row["milliseconds"] = *ms;
              milliseconds[fusion] = *ms;
            }
          }
        }
      } catch (const CudaError& e) {
        row["refusedGraph"] = e.what();
      }
      const bool built = row.value("built", 0) > 0;
      std::printf("%-24s %5d %-30s %6d %6d %6s %7.1f %9s %s\n", row["shape"].get<std::string>().c_str(), count,
                  row["pass"].get<std::string>().c_str(), row.value("ranked", 0), row.value("built", 0),
                  built ? std::to_string(row["engine"].get<std::int64_t>()).c_str() : "-",
                  built ? static_cast<double>(row["workspaceBytes"].get<std::size_t>()) / (1 << 20) : 0.0,
                  row.contains("milliseconds") ? std::to_string(row["milliseconds"].get<double>()).substr(0, 7).c_str()
                                               : "",
                  row.contains("refusedGraph")   ? ("graph refused: " + row["refusedGraph"].get<std::string>()).c_str()
                  : built || !row.contains("firstUnbuildable") ? ""
                                                               : row["firstUnbuildable"].get<std::string>().c_str());
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

  std::printf("\n%-30s %14s%s\n", "pass", "convolutions", options.time ? "   ms a step (its baseline's, same convolutions)" : "");
  for (const ConvFusion fusion : kConvFusions) {
    const Tally& tally = tallies[fusion];
    std::printf("%-30s %6d of %-5d", std::string(to_string(fusion)).c_str(), tally.supported, total);
    if (tally.timed > 0) {
      std::printf("   %8.3f (%8.3f over %d)", tally.milliseconds, tally.baseline_milliseconds, tally.timed);
    }
    std::printf("\n");
  }
  write_document(true);
  if (handle != nullptr) cudnnDestroy(handle);
  if (stream != nullptr) cudaStreamDestroy(stream);
  return 0;
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
  app.add_option("--plans", options.plans, "plans built (and timed) a pass, best-ranked first (default 3)");
  app.add_option("--write-device-json", options.write_device_json, "with --gpu: write the GPU's JSON to this file");
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
    if ((options.time || !options.write_device_json.empty()) && !options.gpu) {
      throw dlbench::UsageError{"--time and --write-device-json need --gpu"};
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
