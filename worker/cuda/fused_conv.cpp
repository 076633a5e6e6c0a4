// A convolution fused with the batch norms around it (FusedConv2dOp, DLBENCH_CUDA_CONV_BATCH_NORM=
// fused) through cuDNN's runtime-fusion engines: the graphs of cuda/conv_fusion.hpp over
// channels-last half activations. Each distinct graph's best-ranked plans are built once in a
// backend (within a second, as the graph API's plain passes are: a runtime-fusion engine compiles
// its kernel as its plan is built, though for a described H200 every fused pass goes to cuDNN's
// precompiled engines 1 and 2) and timed at the first run of any op that uses it, on that op's own
// buffers; the fastest runs from then on. The filter reaches the engine as CudaConv hands
// it over (a kept copy, or rounded into the parameter scratch as KRSC), and its gradient is widened
// back into fp32 OIHW.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <initializer_list>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "cuda/conv_algorithms.hpp"
#include "cuda/conv_engines.hpp"
#include "cuda/conv_fusion.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/cuda_common.hpp"
#include "cuda/kernels.hpp"

namespace dlbench::worker::cuda_detail {

// How many of the heuristics' best-ranked plans a fused graph builds and times: the probe on a
// described H200 finds 9 to 11 ranked and 3 built for every fused pass of ResNet-50.
inline constexpr int kTimedFusedPlans = 3;

// A fused graph and the plans engines built of it, or why none did (kept too: a block of the same
// shape need not ask the engines again). Until timed, every plan built, best-ranked first; then
// the fastest alone.
struct FusedConvPlan {
  std::string description;
  std::optional<FusedConvGraph> graph;
  std::vector<BuiltPlan> candidates;
  GraphSearch search;
  std::string refusal;
  std::mutex choosing;
  std::atomic<bool> timed = false;
};

namespace {

// For a log line: "compiled at build in 812 ms, " where the plan's engine compiled its kernel.
std::string compiled_at_build(const BuiltPlan& plan) {
  if (!plan.runtime_compiled) return "";
  return "compiled at build in " + std::to_string(static_cast<long>(plan.build_milliseconds)) + " ms, ";
}

std::string describe_fused(const Conv2dConfig& c, ConvFusion fusion) {
  ConvAlgorithmKey key = conv_algorithm_key(c, Layout::nhwc, true, ConvPass::forward, ConvDeterminism::any);
  return std::string(to_string(fusion)) + " " + describe_convolution(key).substr(std::string("forward ").size());
}

// The plans for `fusion` of `config` on `backend`'s device: the backend's, or built now. Throws
// CudaError where cuDNN refuses the graph or no engine builds a plan for it (then or before).
std::shared_ptr<FusedConvPlan> fused_plan(CudaBackend& backend, const Conv2dConfig& config, ConvFusion fusion) {
  const std::string key = describe_fused(config, fusion);
  ConvPlanCache& cache = backend.conv_plans();
  std::shared_ptr<FusedConvPlan> known;
  {
    std::lock_guard lock(cache.mutex);
    if (const auto it = cache.fused.find(key); it != cache.fused.end()) known = it->second;
  }
  if (!known) {
    auto plan = std::make_shared<FusedConvPlan>();
    plan->description = key;
    try {
      constexpr auto kBuildBudget = std::chrono::seconds(1);
      plan->graph.emplace(config, fusion, backend.cudnn());
      PlanRules rules;
      rules.most = kTimedFusedPlans;
      rules.build_deadline = std::chrono::steady_clock::now() + kBuildBudget;
      rules.runtime_compilation = RuntimeCompilation::last_resort;
      rules.compile_allowance = &cache.compile_allowance;
      EngineSearchResult result = search_engines(*plan->graph, backend.cudnn(), nullptr, rules);
      plan->search = result.search;
      if (result.built.empty()) {
        plan->refusal = "cuDNN graph API: no engine runs " + key + ": " + describe_search(result.search) +
                        (result.first_unbuildable_reason.empty() ? "" : "; " + result.first_unbuildable_reason);
      } else {
        plan->candidates = std::move(result.built);
      }
    } catch (const CudaOutOfMemory&) {
      throw;
    } catch (const CudaError& e) {  // cuDNN refused the graph itself
      plan->refusal = e.what();
    }
    std::lock_guard lock(cache.mutex);
    known = cache.fused.emplace(key, std::move(plan)).first->second;
  }
  if (known->candidates.empty()) throw CudaError(known->refusal);
  return known;
}

class CudaFusedConv2d final : public FusedConv2dOp {
 public:
  CudaFusedConv2d(CudaBackend& backend, const FusedConv2dConfig& c, std::string& data_gradient_refusal)
      : backend_(backend), config_(c),
        forward_(fused_plan(backend, c.conv,
                            c.normalized_input ? ConvFusion::scale_bias_relu_conv_genstats
                            : c.output_sums    ? ConvFusion::conv_genstats
                                               : ConvFusion::conv)) {
    if (c.normalized_input) wgrad_ = fused_plan(backend, c.conv, ConvFusion::scale_bias_relu_wgrad);
    if (c.normalized_input && c.input_batch_norm_gradients) {
      try {
        dgrad_ = fused_plan(backend, c.conv, ConvFusion::dgrad_drelu_dbn_weight);
      } catch (const CudaOutOfMemory&) {
        throw;
      } catch (const CudaError& e) {  // the forward passes fuse all the same
        data_gradient_refusal = e.what();
      }
    }
    // The fused forward that reads a normalised input always sums its output; with no batch norm
    // to take the sums, they go to memory of the op's own.
    if (c.normalized_input && !c.output_sums) {
      unused_sums_ = backend.allocate(2 * static_cast<std::size_t>(c.conv.out_channels) * sizeof(float));
    }
  }

  void forward(const Tensor& x, const Tensor* scale_shift, const Tensor& weight, Tensor& y, Tensor* sums) override {
    require_dtype("fused convolution", config_.conv.dtype, {&x, &y});
    std::map<std::int64_t, void*> at{{kInputUid, x.data}, {kFilterUid, filter(weight)}, {kOutputUid, y.data}};
    if (config_.normalized_input) add_scale_and_shift(at, scale_shift);
    if (config_.normalized_input || config_.output_sums) {
      float* s = nullptr;
      if (config_.output_sums) {
        if (sums == nullptr) throw std::logic_error("a fused convolution made with output_sums needs its sums");
        require_elements(*sums, 2 * config_.conv.out_channels, "fused convolution", "sums");
        s = sums->as<float>();
      } else {
        s = static_cast<float*>(unused_sums_.get());
      }
      // Zeroed first: whether the engines' statistics overwrite or add is not documented (the probe's
      // --check runs each plan a second time without zeroing and says which, on a GPU); clearing C
      // floats costs next to nothing.
      DLBENCH_CUDA_CHECK(cudaMemsetAsync(s, 0, 2 * static_cast<std::size_t>(config_.conv.out_channels) * sizeof(float),
                                         backend_.stream()));
      at[kSumUid] = s;
      at[kSquareSumUid] = s + config_.conv.out_channels;
    }
    run(*forward_, forward_pack_, at);
  }

  void backward_weights(const Tensor& x, const Tensor* scale_shift, const Tensor& dy, Tensor& dweight) override {
    if (!wgrad_) {
      throw std::logic_error("a fused convolution without a normalised input leaves its filter gradient to the plain one");
    }
    require_dtype("fused convolution", config_.conv.dtype, {&x, &dy});
    void* dw = backend_.parameter_scratch(filter_bytes());
    std::map<std::int64_t, void*> at{{kInputUid, x.data}, {kFilterUid, dw}, {kOutputUid, dy.data}};
    add_scale_and_shift(at, scale_shift);
    run(*wgrad_, wgrad_pack_, at);
    const Conv2dConfig& c = config_.conv;
    kernels::filter_to_fp32(c.dtype, dw, true, dweight.as<float>(), as_int(c.out_channels), as_int(c.input.c()),
                            as_int(c.input.c()), as_int(c.kernel.h), as_int(c.kernel.w), backend_.stream());
  }

  bool fuses_input_batch_norm_gradients() const override { return dgrad_ != nullptr; }

  // cuDNN's DgradDreluBNBwdWeight: the batch norm's statistics, γ and β, and what it writes, fp32 a
  // channel; the coefficients a, b, c C floats apart (16-byte aligned: C is a multiple of 8).
  void backward_data_batch_norm(const Tensor& dy, const Tensor& weight, const Tensor& x, const BatchNormStatistics& s,
                                const Tensor& gamma, const Tensor& beta, Tensor& masked, Tensor& dgamma, Tensor& dbeta,
                                Tensor& coefficients) override {
    if (!dgrad_) {
      FusedConv2dOp::backward_data_batch_norm(dy, weight, x, s, gamma, beta, masked, dgamma, dbeta, coefficients);
    }
    require_dtype("fused convolution", config_.conv.dtype, {&dy, &x, &masked});
    const std::int64_t channels = config_.conv.input.c();
    for (const Tensor* t : std::initializer_list<const Tensor*>{&s.mean, &s.spread, &gamma, &beta, &dgamma, &dbeta}) {
      require_elements(*t, channels, "fused convolution", "a batch norm's per-channel values");
    }
    require_elements(coefficients, 3 * channels, "fused convolution", "coefficients");
    float* k = coefficients.as<float>();
    const std::map<std::int64_t, void*> at{
        {kOutputUid, dy.data},         {kFilterUid, filter(weight)},    {kInputUid, masked.data},
        {kReluInputUid, x.data},       {kMeanUid, s.mean.data},         {kInvStdUid, s.spread.data},
        {kGammaUid, gamma.data},       {kBetaUid, beta.data},           {kDgammaUid, dgamma.data},
        {kDbetaUid, dbeta.data},       {kCoefficientDyUid, k},          {kCoefficientXUid, k + channels},
        {kCoefficientBiasUid, k + 2 * channels}};
    run(*dgrad_, dgrad_pack_, at);
  }

 private:
  // A variant pack kept while its buffers stay where they are (the arena's do, step after step).
  struct Pack {
    std::optional<BackendDescriptor> descriptor;
    std::vector<void*> pointers;
    void* workspace = nullptr;
  };

  void add_scale_and_shift(std::map<std::int64_t, void*>& at, const Tensor* scale_shift) const {
    if (scale_shift == nullptr) throw std::logic_error("a fused convolution made with normalized_input needs a scale and shift");
    require_dtype("fused convolution", config_.conv.dtype, {scale_shift});
    require_elements(*scale_shift, 2 * config_.conv.input.c(), "fused convolution", "scale_shift");
    at[kScaleUid] = scale_shift->data;
    at[kBiasUid] = static_cast<char*>(scale_shift->data) +
                   static_cast<std::size_t>(config_.conv.input.c()) * dtype_size(config_.conv.dtype);
  }

  // The pointers `at` gives, in the graph's order of its tensors.
  static std::vector<void*> pointers_of(const FusedConvPlan& plan, const std::map<std::int64_t, void*>& at) {
    std::vector<void*> pointers;
    for (const FusedTensor& t : plan.graph->tensors) {
      const auto it = at.find(t.uid);
      if (it == at.end()) throw std::logic_error("a fused convolution's graph names a tensor it was not given");
      pointers.push_back(it->second);
    }
    return pointers;
  }

  static BackendDescriptor variant_pack(const FusedConvPlan& plan, const std::vector<void*>& pointers,
                                        void* workspace) {
    std::vector<std::int64_t> uids;
    for (const FusedTensor& t : plan.graph->tensors) uids.push_back(t.uid);
    return make_variant_pack(uids, pointers, workspace);
  }

  // At the first run of `plan`'s graph: its plans timed on this run's buffers, the per-channel
  // outputs sent to scratch (the real run writes the rest afterwards), and the fastest kept.
  void choose(FusedConvPlan& plan, const std::map<std::int64_t, void*>& at) {
    std::lock_guard lock(plan.choosing);
    if (plan.timed) return;
    if (plan.candidates.size() > 1) {
      std::size_t largest = 0;
      for (const BuiltPlan& candidate : plan.candidates) largest = std::max(largest, candidate.workspace);
      std::map<std::int64_t, void*> timed_at = at;
      std::size_t per_channel_bytes = 0;
      for (const FusedTensor& t : plan.graph->tensors) {
        if (is_per_channel_output(t.uid)) per_channel_bytes += t.bytes;
      }
      const std::size_t scratch_offset = (largest + 255) / 256 * 256;  // the engines ask 16-byte alignment
      const std::shared_ptr<void> borrowed = backend_.allocate(scratch_offset + per_channel_bytes);
      char* scratch = static_cast<char*>(borrowed.get()) + scratch_offset;
      for (const FusedTensor& t : plan.graph->tensors) {
        if (!is_per_channel_output(t.uid)) continue;
        timed_at[t.uid] = scratch;
        scratch += t.bytes;  // fp32 a channel, channels a multiple of 8: 16-byte steps
      }
      const BackendDescriptor pack =
          variant_pack(plan, pointers_of(plan, timed_at), largest > 0 ? borrowed.get() : nullptr);
      std::vector<cudnnBackendDescriptor_t> plans;
      for (const BuiltPlan& candidate : plan.candidates) plans.push_back(candidate.plan.get());
      const std::vector<std::optional<float>> milliseconds =
          time_plans(backend_.cudnn(), backend_.stream(), plans, pack.get(), 3, plan.search);
      const std::optional<std::size_t> kept = fastest_plan(milliseconds);
      if (!kept) {
        throw CudaError("cuDNN graph API: no engine ran " + plan.description + ": " + describe_search(plan.search));
      }
      if (log_algorithms()) {
        const BuiltPlan& fastest = plan.candidates[*kept];
        std::cerr << "dlbench-worker: cudnn " + plan.description + ": graph engine " +
                         std::to_string(fastest.engine) + " (plan " + std::to_string(*kept + 1) + " of " +
                         std::to_string(plan.candidates.size()) + "), " + compiled_at_build(fastest) +
                         mebibytes(fastest.workspace) + " workspace, ms a run " + describe_plan_times(milliseconds) + "; " +
                         describe_search(plan.search) + "\n";
      }
      BuiltPlan fastest = std::move(plan.candidates[*kept]);
      plan.candidates.clear();
      plan.candidates.push_back(std::move(fastest));
    } else if (log_algorithms()) {
      const BuiltPlan& only = plan.candidates.front();
      std::cerr << "dlbench-worker: cudnn " + plan.description + ": graph engine " + std::to_string(only.engine) +
                       ", the one plan built, " + compiled_at_build(only) + mebibytes(only.workspace) + " workspace; " +
                       describe_search(plan.search) + "\n";
    }
    plan.timed = true;
  }

  void run(FusedConvPlan& plan, Pack& pack, const std::map<std::int64_t, void*>& at) {
    if (!plan.timed) choose(plan, at);
    const BuiltPlan& built = plan.candidates.front();
    void* workspace = built.workspace > 0 ? backend_.workspace(built.workspace) : nullptr;
    std::vector<void*> pointers = pointers_of(plan, at);
    if (!pack.descriptor || pack.pointers != pointers || pack.workspace != workspace) {
      pack.descriptor = variant_pack(plan, pointers, workspace);
      pack.pointers = std::move(pointers);
      pack.workspace = workspace;
    }
    check_cudnn_graph(cudnnBackendExecute(backend_.cudnn(), built.plan.get(), pack.descriptor->get()),
                      "running engine " + std::to_string(built.engine));
  }

  std::size_t filter_bytes() const {
    return static_cast<std::size_t>(config_.conv.weight().numel()) * dtype_size(config_.conv.dtype);
  }
  // The filter as the engine reads it: the kept copy, or rounded into the parameter scratch as KRSC.
  void* filter(const Tensor& weight) { return rounded_filter(backend_, weight, config_.conv, true); }

  CudaBackend& backend_;
  FusedConv2dConfig config_;
  std::shared_ptr<FusedConvPlan> forward_, wgrad_, dgrad_;
  Pack forward_pack_, wgrad_pack_, dgrad_pack_;
  std::shared_ptr<void> unused_sums_;
};

}  // namespace

std::unique_ptr<FusedConv2dOp> make_fused_conv(CudaBackend& backend, const FusedConv2dConfig& config,
                                               std::string& data_gradient_refusal) {
  return std::make_unique<CudaFusedConv2d>(backend, config, data_gradient_refusal);
}

}  // namespace dlbench::worker::cuda_detail
