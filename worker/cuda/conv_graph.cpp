// A convolution pass through cuDNN's graph API: the graph is described once, the heuristics rank
// engines for it, the best-ranked admitted ones are made into plans and timed on the pass's own
// buffers in the first step, and the fastest runs from then on (cuda/conv_engines.hpp has the rules).
#include "cuda/conv_graph.hpp"

#include <dlfcn.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <optional>
#include <source_location>
#include <string>
#include <utility>
#include <vector>

#include "cuda/conv_engines.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/cuda_common.hpp"

namespace dlbench::worker::cuda_detail {

namespace {

[[noreturn]] void throw_cudnn(const std::string& what, cudnnStatus_t status, const std::source_location& where) {
  std::array<char, 1024> reason{};
  cudnnGetLastErrorString(reason.data(), reason.size());
  std::string message = what + ": " + cudnnGetErrorString(status);
  if (reason[0] != '\0') message += " (" + std::string(reason.data()) + ")";
  throw_gpu_error("cuDNN", "graph API", message.c_str(), where.file_name(), static_cast<int>(where.line()));
}

void check(cudnnStatus_t status, const std::string& what,
           const std::source_location& where = std::source_location::current()) {
  if (status != CUDNN_STATUS_SUCCESS) throw_cudnn(what, status, where);
}

std::int64_t get_int64(cudnnBackendDescriptor_t descriptor, cudnnBackendAttributeName_t name, const char* what) {
  std::int64_t value = 0, count = 0;
  check(cudnnBackendGetAttribute(descriptor, name, CUDNN_TYPE_INT64, 1, &count, &value), what);
  return value;
}

BackendDescriptor make_operands_pack(const ConvOperands& operands, void* workspace) {
  return make_variant_pack(std::vector<std::int64_t>{kInputUid, kFilterUid, kOutputUid},
                           std::vector<void*>{operands.input, operands.filter, operands.output}, workspace);
}

// The engine configuration a plan was made from and the graph it was made for: kept as long as
// the plan, which cuDNN builds from them.
struct ChosenPlan : ConvPlan {
  ChosenPlan(std::shared_ptr<const ConvOperationGraph> graph_, BackendDescriptor config_, BackendDescriptor plan_)
      : ConvPlan{std::move(plan_)}, graph(std::move(graph_)), config(std::move(config_)) {}
  std::shared_ptr<const ConvOperationGraph> graph;
  BackendDescriptor config;
};

}  // namespace

void check_cudnn_graph(cudnnStatus_t status, const std::string& what, const std::source_location& where) {
  check(status, what, where);
}

BackendDescriptor make_variant_pack(const std::vector<std::int64_t>& uids, const std::vector<void*>& pointers,
                                    void* workspace) {
  if (uids.size() != pointers.size()) throw std::logic_error("a variant pack needs a pointer for each uid");
  BackendDescriptor pack(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
  pack.set(CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids.data(), std::ssize(uids));
  pack.set(CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, pointers.data(), std::ssize(pointers));
  pack.set(CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, &workspace);
  pack.finalize("variant pack");
  return pack;
}

std::vector<std::optional<float>> time_plans(cudnnHandle_t handle, cudaStream_t stream,
                                             const std::vector<cudnnBackendDescriptor_t>& plans,
                                             cudnnBackendDescriptor_t variant_pack, int runs, GraphSearch& search) {
  struct Events {
    Events() {
      DLBENCH_CUDA_CHECK(cudaEventCreate(&start));
      DLBENCH_CUDA_CHECK(cudaEventCreate(&stop));
    }
    ~Events() {
      cudaEventDestroy(start);
      cudaEventDestroy(stop);
    }
    Events(const Events&) = delete;
    Events& operator=(const Events&) = delete;
    cudaEvent_t start = nullptr, stop = nullptr;
  } events;
  std::vector<std::optional<float>> milliseconds;
  for (std::size_t i = 0; i < plans.size(); ++i) {
    milliseconds.emplace_back();
    if (cudnnBackendExecute(handle, plans[i], variant_pack) != CUDNN_STATUS_SUCCESS) {
      ++search.failed;
      cudaGetLastError();  // a launch that failed leaves its error behind
      continue;
    }
    DLBENCH_CUDA_CHECK(cudaEventRecord(events.start, stream));
    for (int run = 0; run < runs; ++run) {
      check(cudnnBackendExecute(handle, plans[i], variant_pack), "timing plan " + std::to_string(i + 1));
    }
    DLBENCH_CUDA_CHECK(cudaEventRecord(events.stop, stream));
    DLBENCH_CUDA_CHECK(cudaEventSynchronize(events.stop));
    float elapsed = 0;
    DLBENCH_CUDA_CHECK(cudaEventElapsedTime(&elapsed, events.start, events.stop));
    milliseconds.back() = elapsed / static_cast<float>(runs);
    ++search.timed;
  }
  return milliseconds;
}

// Channels-last tensors here are NHWC activations and KRSC filters (cuda/conv.cpp's OHWI copy).
BackendDescriptor make_graph_tensor(std::int64_t uid, const std::array<std::int64_t, 4>& dims, DType dtype,
                                    Layout layout, bool is_virtual) {
  return make_graph_tensor(uid, dims, cudnn_type(dtype), layout, is_virtual);
}

BackendDescriptor make_graph_tensor(std::int64_t uid, const std::array<std::int64_t, 4>& dims, cudnnDataType_t type,
                                    Layout layout, bool is_virtual) {
  BackendDescriptor tensor(CUDNN_BACKEND_TENSOR_DESCRIPTOR);
  const std::array<std::int64_t, 4> strides = graph_strides(dims, layout == Layout::nhwc);
  // Every buffer the backend hands a convolution starts on 64 bytes (the arena's) or more
  // (cudaMalloc's 256): 16 is what vectorised engines ask for.
  const std::int64_t alignment = 16;
  tensor.set(CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, &type);
  tensor.set(CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, dims.data(), 4);
  tensor.set(CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, strides.data(), 4);
  tensor.set(CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, &uid);
  tensor.set(CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, &alignment);
  if (is_virtual) {
    const bool yes = true;
    tensor.set(CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, &yes);
  }
  tensor.finalize("tensor " + std::to_string(uid));
  return tensor;
}

BackendDescriptor make_convolution(const Conv2dConfig& config) {
  BackendDescriptor convolution(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR);
  // Products accumulate in fp32 whatever the data type, as with the legacy calls.
  const cudnnDataType_t accumulate = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  const std::int64_t spatial_dims = 2;
  const std::array<std::int64_t, 2> dilations{config.dilation, config.dilation};
  const std::array<std::int64_t, 2> strides{config.stride, config.stride};
  const std::array<std::int64_t, 2> padding{config.padding.h, config.padding.w};
  convolution.set(CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &accumulate);
  convolution.set(CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, &mode);
  convolution.set(CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, &spatial_dims);
  convolution.set(CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, dilations.data(), 2);
  convolution.set(CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, strides.data(), 2);
  convolution.set(CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, padding.data(), 2);
  convolution.set(CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, padding.data(), 2);
  convolution.finalize("the convolution");
  return convolution;
}

std::string nvrtc_soname() { return "libnvrtc.so." + std::to_string(CUDART_VERSION / 1000); }

bool keep_nvrtc_loaded() {
  // Opened once (thread-safe static) and never closed: its own teardown at exit is the one it expects.
  static const bool kept = dlopen(nvrtc_soname().c_str(), RTLD_NOW | RTLD_LOCAL) != nullptr;
  return kept;
}

std::vector<BackendDescriptor> ranked_configs(const BackendDescriptor& graph, cudnnBackendHeurMode_t mode,
                                              const BackendDescriptor* device) {
  keep_nvrtc_loaded();
  BackendDescriptor heuristics(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR);
  const cudnnBackendDescriptor_t raw_graph = graph.get();
  heuristics.set(CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, &raw_graph);
  heuristics.set(CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, &mode);
  if (device != nullptr) {
    const cudnnBackendDescriptor_t raw_device = device->get();
    heuristics.set(CUDNN_ATTR_ENGINEHEUR_DEVICEPROP, CUDNN_TYPE_BACKEND_DESCRIPTOR, &raw_device);
  }
  heuristics.finalize(mode == CUDNN_HEUR_MODE_FALLBACK ? "fallback heuristics" : "engine heuristics");
  std::int64_t count = 0;
  check(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0,
                                 &count, nullptr),
        "how many engines the heuristics rank");
  std::vector<BackendDescriptor> configs;
  std::vector<cudnnBackendDescriptor_t> raw;
  for (std::int64_t i = 0; i < count; ++i) {
    configs.emplace_back(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR);
    raw.push_back(configs.back().get());
  }
  std::int64_t returned = 0;
  check(cudnnBackendGetAttribute(heuristics.get(), CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, count,
                                 &returned, raw.data()),
        "the engines the heuristics rank");
  configs.erase(configs.begin() + static_cast<std::ptrdiff_t>(std::clamp<std::int64_t>(returned, 0, count)), configs.end());
  return configs;
}

EngineFacts engine_of(const BackendDescriptor& config) {
  BackendDescriptor engine(CUDNN_BACKEND_ENGINE_DESCRIPTOR);
  cudnnBackendDescriptor_t raw = engine.get();
  std::int64_t count = 0;
  check(cudnnBackendGetAttribute(config.get(), CUDNN_ATTR_ENGINECFG_ENGINE, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &count,
                                 &raw),
        "an engine configuration's engine");
  EngineFacts facts;
  facts.index = get_int64(engine.get(), CUDNN_ATTR_ENGINE_GLOBAL_INDEX, "an engine's index");
  std::array<cudnnBackendNumericalNote_t, CUDNN_NUMERICAL_NOTE_TYPE_COUNT> notes{};
  check(cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, CUDNN_TYPE_NUMERICAL_NOTE,
                                 static_cast<std::int64_t>(notes.size()), &count, notes.data()),
        "an engine's numerical notes");
  facts.notes.assign(notes.begin(), notes.begin() + std::clamp<std::ptrdiff_t>(count, 0, std::ssize(notes)));
  std::array<cudnnBackendBehaviorNote_t, CUDNN_BEHAVIOR_NOTE_TYPE_COUNT> behaviour{};
  check(cudnnBackendGetAttribute(engine.get(), CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, CUDNN_TYPE_BEHAVIOR_NOTE,
                                 static_cast<std::int64_t>(behaviour.size()), &count, behaviour.data()),
        "an engine's behaviour notes");
  const auto noted = behaviour.begin() + std::clamp<std::ptrdiff_t>(count, 0, std::ssize(behaviour));
  facts.runtime_compiled = std::find(behaviour.begin(), noted, CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION) != noted;
  return facts;
}

std::vector<BuiltPlan> build_plans(const BackendDescriptor& graph, cudnnHandle_t handle, const BackendDescriptor* device,
                                   const PlanRules& rules, GraphSearch& search, std::string* first_unbuildable_reason) {
  if ((handle == nullptr) == (device == nullptr)) {
    throw std::invalid_argument("build_plans: give a handle or a described device, one of them");
  }
  std::vector<BuiltPlan> built;
  for (const cudnnBackendHeurMode_t mode : {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    if (!built.empty()) break;  // the fallback list only where the ranked engines built nothing
    std::vector<BackendDescriptor> configs = ranked_configs(graph, mode, device);
    search.ranked += static_cast<int>(configs.size());
    std::vector<EngineFacts> engines;
    std::vector<RankedEngine> ranked;
    for (const BackendDescriptor& config : configs) {
      engines.push_back(engine_of(config));
      ranked.push_back({engine_admitted(engines.back().notes, rules.fp32_data, rules.tensor_cores_allowed,
                                        rules.determinism),
                        engines.back().runtime_compiled});
      search.ranked_runtime_compiled += engines.back().runtime_compiled ? 1 : 0;
    }
    const auto past_deadline = [&] {
      return rules.build_deadline && std::chrono::steady_clock::now() > *rules.build_deadline;
    };
    build_ranked(ranked, rules.most, rules.runtime_compilation, rules.compile_allowance, search, past_deadline,
                 [&](std::size_t i) {
      BackendDescriptor& config = configs[i];
      const EngineFacts& engine = engines[i];
      BackendDescriptor plan(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR);
      const cudnnBackendDescriptor_t raw_config = config.get();
      plan.set(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, &raw_config);
      if (handle != nullptr) {
        plan.set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, &handle);
      } else {
        const cudnnBackendDescriptor_t raw_device = device->get();
        plan.set(CUDNN_ATTR_EXECUTION_PLAN_DEVICEPROP, CUDNN_TYPE_BACKEND_DESCRIPTOR, &raw_device);
      }
      const auto building = std::chrono::steady_clock::now();
      const cudnnStatus_t status = cudnnBackendFinalize(plan.get());
      const auto took = std::chrono::steady_clock::now() - building;
      if (engine.runtime_compiled) {
        const double milliseconds = std::chrono::duration<double, std::milli>(took).count();
        ++search.compiles;
        search.compile_milliseconds += milliseconds;
        search.slowest_compile_milliseconds = std::max(search.slowest_compile_milliseconds, milliseconds);
        if (rules.compile_allowance != nullptr) rules.compile_allowance->charge(took);
      }
      if (status != CUDNN_STATUS_SUCCESS) {
        if (search.unbuildable++ == 0 && first_unbuildable_reason != nullptr) {
          std::array<char, 1024> reason{};
          cudnnGetLastErrorString(reason.data(), reason.size());
          *first_unbuildable_reason = "engine " + std::to_string(engine.index) + ": " + cudnnGetErrorString(status) +
                                      (reason[0] != '\0' ? " (" + std::string(reason.data()) + ")" : "");
        }
        return false;
      }
      const auto workspace = static_cast<std::size_t>(
          get_int64(plan.get(), CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, "a plan's workspace size"));
      if (workspace > rules.workspace_limit) {
        ++search.too_large;
        return false;
      }
      const bool tensor_cores =
          std::find(engine.notes.begin(), engine.notes.end(), CUDNN_NUMERICAL_NOTE_TENSOR_CORE) != engine.notes.end();
      built.push_back({std::move(config), std::move(plan), engine.index, workspace, tensor_cores, engine.runtime_compiled,
                       std::chrono::duration<double, std::milli>(took).count()});
      return true;
    });
  }
  return built;
}

BackendDescriptor::BackendDescriptor(cudnnBackendDescriptorType_t type) {
  check(cudnnBackendCreateDescriptor(type, &handle_), "creating a descriptor of type " + std::to_string(static_cast<int>(type)));
}
BackendDescriptor::~BackendDescriptor() {
  if (handle_ != nullptr) cudnnBackendDestroyDescriptor(handle_);
}
BackendDescriptor::BackendDescriptor(BackendDescriptor&& other) noexcept : handle_(std::exchange(other.handle_, nullptr)) {}
BackendDescriptor& BackendDescriptor::operator=(BackendDescriptor&& other) noexcept {
  if (this != &other) {
    if (handle_ != nullptr) cudnnBackendDestroyDescriptor(handle_);
    handle_ = std::exchange(other.handle_, nullptr);
  }
  return *this;
}
void BackendDescriptor::set_raw(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, std::int64_t count,
                                const void* values, const std::source_location& where) {
  check(cudnnBackendSetAttribute(handle_, name, type, count, values),
        "setting attribute " + std::to_string(static_cast<int>(name)), where);
}
void BackendDescriptor::finalize(const std::string& what, const std::source_location& where) {
  check(cudnnBackendFinalize(handle_), "finalizing " + what, where);
}

ConvGraphShapes conv_graph_shapes(const Conv2dConfig& config) {
  const Shape out = config.output();
  return {config.input.dims, {config.out_channels, config.input.c(), config.kernel.h, config.kernel.w},
          {out.n(), out.c(), out.h(), out.w()}};
}

BackendDescriptor make_convolution_operation(ConvPass pass, const BackendDescriptor& input, const BackendDescriptor& filter,
                                             const BackendDescriptor& output, const BackendDescriptor& convolution) {
  // Each pass overwrites its output but the accumulating one, which adds into dx.
  const float alpha = 1.0f, beta = pass == ConvPass::backward_data_accumulate ? 1.0f : 0.0f;
  BackendDescriptor operation(pass == ConvPass::forward           ? CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR
                              : pass == ConvPass::backward_filter ? CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR
                                                                  : CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR);
  // The operation's attributes for its input-, filter- and output-shaped tensors (x or dx, w or
  // dw, y or dy), its convolution and its scales, by pass.
  struct OperationAttributes {
    cudnnBackendAttributeName_t input, filter, output, convolution, alpha, beta;
  };
  const OperationAttributes names_of =
      pass == ConvPass::forward
          ? OperationAttributes{CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W,
                                CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y,
                                CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                                CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                                CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA}
      : pass == ConvPass::backward_filter
          ? OperationAttributes{CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X,
                                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW,
                                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY,
                                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
                                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
                                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA}
          : OperationAttributes{CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W,
                                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY,
                                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
                                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
                                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA};
  const cudnnBackendDescriptor_t x = input.get(), w = filter.get(), y = output.get(), conv = convolution.get();
  operation.set(names_of.input, CUDNN_TYPE_BACKEND_DESCRIPTOR, &x);
  operation.set(names_of.filter, CUDNN_TYPE_BACKEND_DESCRIPTOR, &w);
  operation.set(names_of.output, CUDNN_TYPE_BACKEND_DESCRIPTOR, &y);
  operation.set(names_of.convolution, CUDNN_TYPE_BACKEND_DESCRIPTOR, &conv);
  operation.set(names_of.alpha, CUDNN_TYPE_FLOAT, &alpha);
  operation.set(names_of.beta, CUDNN_TYPE_FLOAT, &beta);
  static constexpr std::array<const char*, kConvPasses> names{
      "the forward operation", "the backward-data operation", "the backward-filter operation",
      "the accumulating backward-data operation"};
  operation.finalize(names[static_cast<std::size_t>(pass)]);

  return operation;
}

BackendDescriptor make_operation_graph(const std::vector<const BackendDescriptor*>& operations, cudnnHandle_t handle) {
  BackendDescriptor graph(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
  std::vector<cudnnBackendDescriptor_t> raw;
  for (const BackendDescriptor* operation : operations) raw.push_back(operation->get());
  graph.set(CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, raw.data(), std::ssize(raw));
  if (handle != nullptr) graph.set(CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, &handle);
  graph.finalize("the operation graph");
  return graph;
}

ConvOperationGraph::ConvOperationGraph(const Conv2dConfig& config, const ConvGraphShapes& shapes, Layout layout,
                                       ConvPass pass, cudnnHandle_t handle)
    : input(make_graph_tensor(kInputUid, shapes.input, config.dtype, layout)),
      filter(make_graph_tensor(kFilterUid, shapes.filter, config.dtype, layout)),
      output(make_graph_tensor(kOutputUid, shapes.output, config.dtype, layout)),
      convolution(make_convolution(config)),
      operation(make_convolution_operation(pass, input, filter, output, convolution)),
      graph(make_operation_graph({&operation}, handle)) {}

// A pass's chosen plan and, while its buffers stay where they are (the arena's do, step after
// step), the variant pack that names them.
struct GraphConvPasses::Pass {
  std::shared_ptr<const ConvPlan> plan;
  std::optional<BackendDescriptor> variant_pack;
  ConvOperands operands;
  void* workspace = nullptr;
};

GraphConvPasses::GraphConvPasses(CudaBackend& backend, const Conv2dConfig& config, Layout layout, bool tensor_cores)
    : backend_(backend), config_(config), layout_(layout), tensor_cores_(tensor_cores) {
  for (auto& pass : passes_) pass = std::make_unique<Pass>();
}
GraphConvPasses::~GraphConvPasses() = default;

void GraphConvPasses::run(ConvPass pass, const ConvOperands& operands) {
  const ConvPlan& plan = plan_for(pass, operands);
  void* workspace = plan.workspace > 0 ? backend_.workspace(plan.workspace) : nullptr;
  Pass& mine = *passes_[static_cast<std::size_t>(pass)];
  if (!mine.variant_pack || !(mine.operands == operands) || mine.workspace != workspace) {
    mine.variant_pack = make_operands_pack(operands, workspace);
    mine.operands = operands;
    mine.workspace = workspace;
  }
  check(cudnnBackendExecute(backend_.cudnn(), plan.plan.get(), mine.variant_pack->get()),
        "running engine " + std::to_string(plan.engine));
}

const ConvPlan& GraphConvPasses::plan_for(ConvPass pass, const ConvOperands& operands) {
  Pass& mine = *passes_[static_cast<std::size_t>(pass)];
  if (mine.plan) return *mine.plan;
  const ConvAlgorithmKey key =
      conv_algorithm_key(config_, layout_, tensor_cores_, pass, backend_.conv_determinism());
  ConvPlanCache& cache = backend_.conv_plans();
  {
    std::lock_guard lock(cache.mutex);
    if (const auto it = cache.plans.find(key); it != cache.plans.end()) mine.plan = it->second;
  }
  if (!mine.plan) {
    mine.plan = choose(pass, key, operands);
    std::lock_guard lock(cache.mutex);
    cache.plans.emplace(key, mine.plan);
  }
  return *mine.plan;
}

std::shared_ptr<const ConvPlan> GraphConvPasses::choose(ConvPass pass, const ConvAlgorithmKey& key,
                                                        const ConvOperands& operands) {
  // Building a plan may compile a kernel at run time: past this, no more are built once one is.
  constexpr auto kBuildBudget = std::chrono::seconds(1);
  const auto started = std::chrono::steady_clock::now();
  auto graph = std::make_shared<const ConvOperationGraph>(config_, conv_graph_shapes(config_), layout_, pass,
                                                          backend_.cudnn());
  std::size_t free = 0, total = 0;
  DLBENCH_CUDA_CHECK(cudaMemGetInfo(&free, &total));
  const std::size_t borrowable = search_workspace_bytes(backend_.workspace_limit(), free);

  GraphSearch search;
  PlanRules rules;
  rules.most = kTimedEngines;
  rules.fp32_data = config_.dtype == DType::fp32;
  rules.tensor_cores_allowed = tensor_cores_;
  rules.determinism = backend_.conv_determinism();
  rules.workspace_limit = borrowable;
  rules.build_deadline = started + kBuildBudget;
  rules.runtime_compilation = RuntimeCompilation::last_resort;
  rules.compile_allowance = &backend_.conv_plans().compile_allowance;
  std::vector<std::unique_ptr<ChosenPlan>> built;
  for (BuiltPlan& plan : build_plans(graph->graph, backend_.cudnn(), nullptr, rules, search)) {
    auto chosen = std::make_unique<ChosenPlan>(graph, std::move(plan.config), std::move(plan.plan));
    chosen->workspace = plan.workspace;
    chosen->engine = plan.engine;
    chosen->tensor_cores = plan.tensor_cores;
    built.push_back(std::move(chosen));
  }
  if (built.empty()) {
    throw CudaError("cuDNN graph API: no engine can run " + describe_convolution(key) + ": " + describe_search(search));
  }

  // Each candidate runs once (which also shows it runs), then three times between two events.
  // Accumulating, dx holds the other branch's gradient: the timed runs add into scratch instead.
  std::size_t largest = 0;
  for (const auto& candidate : built) largest = std::max(largest, candidate->workspace);
  const std::shared_ptr<void> borrowed = largest > 0 ? backend_.allocate(largest) : nullptr;
  ConvOperands timed = operands;
  std::shared_ptr<void> scratch_dx;
  if (pass == ConvPass::backward_data_accumulate) {
    scratch_dx = backend_.allocate(static_cast<std::size_t>(config_.input.numel()) * dtype_size(config_.dtype));
    timed.input = scratch_dx.get();
  }
  const BackendDescriptor pack = make_operands_pack(timed, borrowed.get());
  std::vector<cudnnBackendDescriptor_t> plans;
  for (const auto& candidate : built) plans.push_back(candidate->plan.get());
  const std::vector<std::optional<float>> milliseconds =
      time_plans(backend_.cudnn(), backend_.stream(), plans, pack.get(), 3, search);
  const std::optional<std::size_t> kept = fastest_plan(milliseconds);
  if (!kept) {
    throw CudaError("cuDNN graph API: no engine ran " + describe_convolution(key) + ": " + describe_search(search));
  }
  ChosenPlan* fastest = built[*kept].get();
  fastest->milliseconds = *milliseconds[*kept];
  if (log_algorithms()) {
    std::cerr << "dlbench-worker: cudnn " +
                     describe_graph_choice(key, fastest->engine, fastest->tensor_cores, fastest->workspace,
                                           fastest->milliseconds, search) +
                     "\n";
  }
  for (auto& candidate : built) {
    if (candidate.get() == fastest) return std::shared_ptr<const ConvPlan>(std::move(candidate));
  }
  throw std::logic_error("the fastest plan is not among those built");
}

}  // namespace dlbench::worker::cuda_detail
