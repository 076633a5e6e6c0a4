// A convolution pass through cuDNN's graph API (cuda/conv_engines.hpp says when and why): the
// one-operation graph, built without a device so that it is tested on any machine, and the plans
// cuDNN's engines make of it, chosen by timing on the device. Internal to worker/cuda.
#pragma once

#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <source_location>
#include <string>
#include <vector>

#include "backend.hpp"
#include "cuda/conv_algorithms.hpp"
#include "cuda/conv_engines.hpp"

namespace dlbench::worker {
class CudaBackend;
}

namespace dlbench::worker::cuda_detail {

// One cuDNN backend descriptor, destroyed with its owner.
class BackendDescriptor {
 public:
  explicit BackendDescriptor(cudnnBackendDescriptorType_t type);
  ~BackendDescriptor();
  BackendDescriptor(BackendDescriptor&& other) noexcept;
  BackendDescriptor& operator=(BackendDescriptor&& other) noexcept;
  BackendDescriptor(const BackendDescriptor&) = delete;
  BackendDescriptor& operator=(const BackendDescriptor&) = delete;

  // Both throw CudaError with cuDNN's own reason and the caller's file:line.
  template <typename T>
  void set(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, const T* values, std::int64_t count = 1,
           const std::source_location& where = std::source_location::current()) {
    set_raw(name, type, count, values, where);
  }
  void finalize(const std::string& what, const std::source_location& where = std::source_location::current());
  cudnnBackendDescriptor_t get() const { return handle_; }

 private:
  void set_raw(cudnnBackendAttributeName_t name, cudnnBackendAttributeType_t type, std::int64_t count,
               const void* values, const std::source_location& where);
  cudnnBackendDescriptor_t handle_ = nullptr;
};

// Throws CudaError naming `what`, cuDNN's status and its last error string, and the caller's file:line.
void check_cudnn_graph(cudnnStatus_t status, const std::string& what,
                       const std::source_location& where = std::source_location::current());

// A finalized tensor of 4 dimensions (N, C, H, W order, in `layout`'s memory order), or a virtual
// one: a fused graph's intermediate, never in memory.
BackendDescriptor make_graph_tensor(std::int64_t uid, const std::array<std::int64_t, 4>& dims, DType dtype,
                                    Layout layout, bool is_virtual = false);
// The same of cuDNN's type `type` (a fused graph's fp32 statistics and intermediates).
BackendDescriptor make_graph_tensor(std::int64_t uid, const std::array<std::int64_t, 4>& dims, cudnnDataType_t type,
                                    Layout layout, bool is_virtual = false);

// A finalized convolution descriptor for `config` (products accumulated in fp32).
BackendDescriptor make_convolution(const Conv2dConfig& config);

// One convolution pass as an operation on its input-, filter- and output-shaped tensors (x or dx,
// w or dw, y or dy): the accumulating backward-data pass adds into dx, the others overwrite.
BackendDescriptor make_convolution_operation(ConvPass pass, const BackendDescriptor& input, const BackendDescriptor& filter,
                                             const BackendDescriptor& output, const BackendDescriptor& convolution);

// A finalized graph of `operations`, for `handle`'s device (null: a graph built without a device).
BackendDescriptor make_operation_graph(const std::vector<const BackendDescriptor*>& operations, cudnnHandle_t handle);

// The engine configurations the heuristics rank for `graph`, best first: for the graph's own
// device (its handle's), or for the device `device` describes (a finalized
// CUDNN_BACKEND_DEVICEPROP_DESCRIPTOR, cuda/cudnn_device.hpp), which need not be in this machine.
// Keeps NVRTC loaded first (keep_nvrtc_loaded, below).
std::vector<BackendDescriptor> ranked_configs(const BackendDescriptor& graph, cudnnBackendHeurMode_t mode,
                                              const BackendDescriptor* device = nullptr);

// cuDNN's heuristics for its runtime-compiled engines open NVRTC (libnvrtc.so.<CUDA major>) and
// close it again at every query, so every query relocated the whole library anew: 97% of the time
// of a described H200's probe of ResNet-50's passes, 101.5 s against 2.4 s with it kept loaded
// (medians, a 2-core AMD EPYC, bench/RESULTS.md). The first call opens it for the process and
// never closes it, so cuDNN's own opens only count references. True where it is loaded; false
// where this machine has none (cuDNN then finds none either, and its runtime-compiled engines are
// not offered).
bool keep_nvrtc_loaded();
std::string nvrtc_soname();  // the soname of the CUDA dlbench was built with: libnvrtc.so.13

// An engine configuration's engine: cuDNN's global index and its numerical notes.
struct EngineFacts {
  std::int64_t index = -1;
  std::vector<cudnnBackendNumericalNote_t> notes;
  bool runtime_compiled = false;  // its behaviour notes say it compiles its kernel as its plan is built
};
EngineFacts engine_of(const BackendDescriptor& config);

// A plan an engine built for a graph, with the configuration it was made from (kept as long as the
// plan, which cuDNN builds from it).
struct BuiltPlan {
  BackendDescriptor config;
  BackendDescriptor plan;
  std::int64_t engine = -1;  // cuDNN's global engine index
  std::size_t workspace = 0;
  bool tensor_cores = false;
  bool runtime_compiled = false;  // EngineFacts::runtime_compiled
  double build_milliseconds = 0;  // finalizing the plan (a runtime-compiled one's compile)
};

// Which plans build_plans may build, and how many.
struct PlanRules {
  int most = 1;
  bool fp32_data = false;  // with tensor_cores_allowed and determinism: engine_admitted's rules
  bool tensor_cores_allowed = true;
  ConvDeterminism determinism = ConvDeterminism::any;
  std::size_t workspace_limit = std::numeric_limits<std::size_t>::max();
  // Building a plan may compile a kernel at run time: past this, no more are built once one is.
  std::optional<std::chrono::steady_clock::time_point> build_deadline;
  RuntimeCompilation runtime_compilation = RuntimeCompilation::ranked;
  CompileAllowance* compile_allowance = nullptr;  // where given, charged each compile, and heeded
};

// Plans for `graph`, best-ranked first (with RuntimeCompilation::last_resort, precompiled ones
// first: build_order): from the heuristics' mode A, then from their fallback list
// where A gave none that built; each configuration admitted by engine_admitted, built for
// `handle`'s device or, with a null handle, for the device `device` describes (one of the two,
// else std::invalid_argument). What was ranked, refused, unbuildable or over the workspace limit is
// counted in `search`; the first unbuildable one's reason is kept where `first_unbuildable_reason`
// is given.
std::vector<BuiltPlan> build_plans(const BackendDescriptor& graph, cudnnHandle_t handle, const BackendDescriptor* device,
                                   const PlanRules& rules, GraphSearch& search,
                                   std::string* first_unbuildable_reason = nullptr);

// A finalized variant pack: the buffers at `pointers` for the graph's tensors `uids` (as many), and
// the workspace (null where the plans need none).
BackendDescriptor make_variant_pack(const std::vector<std::int64_t>& uids, const std::vector<void*>& pointers,
                                    void* workspace);

// Each plan (best-ranked first) run once on `variant_pack` on `stream`, which shows it runs (one
// whose launch fails is nullopt, counted in `search.failed`), then `runs` times between two
// events: the mean milliseconds of a run (each timed counted in `search.timed`). The pack must hold
// a workspace as large as the largest plan's; the plans' outputs are overwritten, so the caller
// times on buffers whose outputs a real run writes afterwards, or on scratch.
std::vector<std::optional<float>> time_plans(cudnnHandle_t handle, cudaStream_t stream,
                                             const std::vector<cudnnBackendDescriptor_t>& plans,
                                             cudnnBackendDescriptor_t variant_pack, int runs, GraphSearch& search);

// The graph's names for a pass's three tensors, by shape: the input's (x, or dx), the filter's
// (w, or dw) and the output's (y, or dy).
inline constexpr std::int64_t kInputUid = 1, kFilterUid = 2, kOutputUid = 3;

// The dimensions the graph describes each of a pass's tensors with, N, C, H, W (a filter's K, C, R,
// S), and the layout they lie in.
struct ConvGraphShapes {
  std::array<std::int64_t, 4> input{}, filter{}, output{};
};
ConvGraphShapes conv_graph_shapes(const Conv2dConfig& config);

// One pass of one convolution as a finalized operation graph. `handle` may be null (a graph
// built without a device, which is all the tests without a GPU can do).
struct ConvOperationGraph {
  ConvOperationGraph(const Conv2dConfig& config, const ConvGraphShapes& shapes, Layout layout, ConvPass pass,
                     cudnnHandle_t handle);
  BackendDescriptor input, filter, output, convolution, operation, graph;
};

// The plan an engine made of one pass, and the workspace it runs with.
struct ConvPlan {
  BackendDescriptor plan;
  std::size_t workspace = 0;
  std::int64_t engine = -1;  // cuDNN's global engine index
  bool tensor_cores = false;
  double milliseconds = 0;  // as timed when chosen
};

struct FusedConvPlan;  // cuda/fused_conv.cpp

// The plans a backend has chosen, one per distinct convolution pass: each is timed once. And the
// plans of the passes fused with batch norms, one per distinct graph, by its description.
struct ConvPlanCache {
  // What the plans below may spend compiling kernels, together: 20 s (RuntimeCompilation).
  static constexpr std::chrono::seconds kCompileAllowance{20};
  std::mutex mutex;
  std::map<ConvAlgorithmKey, std::shared_ptr<const ConvPlan>> plans;
  std::map<std::string, std::shared_ptr<FusedConvPlan>> fused;  // each timed at its first run
  CompileAllowance compile_allowance{kCompileAllowance};
};

// The three pointers one pass runs on, by the uids above.
struct ConvOperands {
  void* input = nullptr;
  void* filter = nullptr;
  void* output = nullptr;
  bool operator==(const ConvOperands&) const = default;
};

// Runs one convolution's passes through the graph API on `backend`'s stream: the first call of
// each pass chooses its plan (or takes the one the backend chose for the same key) by timing the
// heuristics' best-ranked admitted engines on the call's own buffers.
class GraphConvPasses {
 public:
  GraphConvPasses(CudaBackend& backend, const Conv2dConfig& config, Layout layout, bool tensor_cores);
  ~GraphConvPasses();
  GraphConvPasses(const GraphConvPasses&) = delete;
  GraphConvPasses& operator=(const GraphConvPasses&) = delete;
  void run(ConvPass pass, const ConvOperands& operands);

 private:
  struct Pass;
  const ConvPlan& plan_for(ConvPass pass, const ConvOperands& operands);
  std::shared_ptr<const ConvPlan> choose(ConvPass pass, const ConvAlgorithmKey& key, const ConvOperands& operands);
  CudaBackend& backend_;
  Conv2dConfig config_;
  Layout layout_;
  bool tensor_cores_;
  std::array<std::unique_ptr<Pass>, kConvPasses> passes_;
};

}  // namespace dlbench::worker::cuda_detail
