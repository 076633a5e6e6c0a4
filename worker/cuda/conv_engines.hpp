// How a convolution reaches cuDNN, apart from the calls themselves so that the rules are tested
// without a GPU: the legacy API (cudnnFind*AlgorithmEx, then cudnnConvolution*), or the graph API's
// engines (a one-operation graph, the engines cuDNN's heuristics rank first, timed here on the real
// buffers, the fastest kept), which is how PyTorch 2 reaches cuDNN 9.
//
// Why both: on an H200 (bench/RESULTS.md, 2026-11-27) the legacy calls ran fp32 ResNet-50 at 884
// images/s NCHW and 705 channels-last, where PyTorch, through the graph API, ran 920 channels-last.
// The legacy calls stay the default until the graph API has been timed against them on a GPU:
// DLBENCH_CUDA_CONV=graph asks for it, so that one device call can time both.
#pragma once

#include <cudnn.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "cuda/conv_algorithms.hpp"
#include "env_choice.hpp"
#include "tensor.hpp"

namespace dlbench::worker {

enum class ConvCallsApi { legacy, graph };

// `choice` is DLBENCH_CUDA_CONV's value (null or empty: unset, the legacy calls). Throws
// std::invalid_argument naming the variable and its allowed values for anything else.
inline constexpr Choices<ConvCallsApi, 2> kConvCallsApis{
    {{"legacy", ConvCallsApi::legacy}, {"graph", ConvCallsApi::graph}}};

inline ConvCallsApi conv_calls_api(const char* choice) {
  return env_choice("DLBENCH_CUDA_CONV", choice, kConvCallsApis).value_or(ConvCallsApi::legacy);
}

// How a residual block's two branch gradients meet on this backend: an AddOp apart (sum), or the
// branch that runs last adding its gradient in its convolution's backward data (accumulate: beta
// = 1), which saves a read and a write of the block's input gradient. Tested on the CPU with the
// same op composed (worker/residual_composing_backend.hpp). On an H200 (bench/RESULTS.md,
// 2026-11-28) the self-test passed with it in every precision, and ResNet-50 went from 7,085 to
// 7,268 images/s in amp, 6,685 to 6,835 in bf16 and 3,310 to 3,364 in tf32: the default for
// channels-last activations. NCHW (fp32) has not been timed with it, so sum stays its default.
enum class ResidualGradient { sum, accumulate };

// `choice` is DLBENCH_CUDA_RESIDUAL_GRAD's value (null or empty: unset). Throws
// std::invalid_argument naming the variable and its allowed values for anything else.
inline constexpr Choices<ResidualGradient, 2> kResidualGradients{
    {{"sum", ResidualGradient::sum}, {"accumulate", ResidualGradient::accumulate}}};

inline ResidualGradient residual_gradient(Layout layout, const char* choice) {
  return env_choice("DLBENCH_CUDA_RESIDUAL_GRAD", choice, kResidualGradients)
      .value_or(layout == Layout::nhwc ? ResidualGradient::accumulate : ResidualGradient::sum);
}

// Whether an engine with these numerical notes may run a convolution here. Never one that rounds
// its inputs to a narrower type or reduces in one (products accumulate in fp32, as with the legacy
// calls); on fp32 data, tensor cores (TF32) only where the run allows them (tf32, not fp32), the
// filter PyTorch applies for allow_tf32; where the run asks for deterministic algorithms
// (DLBENCH_CUDA_ALGORITHMS), none noted non-deterministic.
inline bool engine_admitted(const std::vector<cudnnBackendNumericalNote_t>& notes, bool fp32_data,
                            bool tensor_cores_allowed, ConvDeterminism determinism = ConvDeterminism::any) {
  for (const cudnnBackendNumericalNote_t note : notes) {
    if (note == CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS) return false;
    if (note == CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION) return false;
    if (note == CUDNN_NUMERICAL_NOTE_TENSOR_CORE && fp32_data && !tensor_cores_allowed) return false;
    if (note == CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC && determinism == ConvDeterminism::deterministic) return false;
  }
  return true;
}

// The graph API describes every tensor by its dimensions in N, C, H, W order (a filter's in K, C,
// R, S) and element strides that give the memory order: NCHW, or channels-last (NHWC; a filter's
// KRSC, cuDNN's NHWC filter).
inline std::array<std::int64_t, 4> graph_strides(const std::array<std::int64_t, 4>& dims, bool channels_last) {
  const std::int64_t c = dims[1], h = dims[2], w = dims[3];
  if (channels_last) return {h * w * c, 1, w * c, c};
  return {c * h * w, h * w, w, 1};
}

// How many of the heuristics' best-ranked engines are built and timed for each convolution
// (PyTorch's cudnn benchmark limit is 10): enough to reach the fastest in practice, few enough
// that the first step of a ResNet-50 does not spend minutes timing.
inline constexpr int kTimedEngines = 8;

// What the search for one pass's plan met, for its log line and its error.
struct GraphSearch {
  int ranked = 0;       // engine configurations the heuristics returned
  int refused = 0;      // by engine_admitted
  int unbuildable = 0;  // whose plan cuDNN would not finalize here
  int too_large = 0;    // whose workspace is more than the search may borrow
  int failed = 0;       // that built but did not run
  int timed = 0;
  int compile_refused = 0;  // runtime-compiled, not built: the backend's compile allowance was spent
  int ranked_runtime_compiled = 0;  // of `ranked`, configurations whose engine compiles at build
  int compiles = 0;                 // runtime-compiled plans finalized, built or not
  double compile_milliseconds = 0, slowest_compile_milliseconds = 0;  // over those
};

inline std::string describe_search(const GraphSearch& s) {
  return std::to_string(s.timed) + " timed of " + std::to_string(s.ranked) + " ranked (" + std::to_string(s.refused) +
         " refused by numerical notes, " + std::to_string(s.unbuildable) + " not buildable, " +
         std::to_string(s.too_large) + " over the workspace limit, " + std::to_string(s.failed) + " failed to run" +
         (s.compile_refused > 0 ? ", " + std::to_string(s.compile_refused) + " not compiled: the allowance was spent"
                                : std::string()) +
         ")";
}

// Whether plans whose engine compiles its kernel as the plan is built (cuDNN's runtime-fusion
// engines, behaviour note RUNTIME_COMPILATION: NVRTC, then the driver loads the result) are built in
// the heuristics' rank (`ranked`: the probe, which asks what every engine costs), or only where no
// precompiled engine builds a plan (`last_resort`: the model). A compile takes host time, 0.4 to
// 0.8 s a kernel on this project's Xeon (bench/RESULTS.md, 2026-12-04), for each distinct graph,
// where a precompiled plan takes microseconds. (cuDNN offers these engines only where the CUDA
// driver loads: a build machine without one sees none, and with the toolkit's stub driver they
// are ranked and compiled, never loaded.)
enum class RuntimeCompilation { ranked, last_resort };

// The order in which build_plans tries `ranked` configurations, given which compile at build:
// the heuristics' own, or with `last_resort` every precompiled one first, in rank order, then the
// runtime-compiled ones in rank order (which build_plans reaches only where none before built).
inline std::vector<std::size_t> build_order(const std::vector<bool>& runtime_compiled, RuntimeCompilation rule) {
  std::vector<std::size_t> order(runtime_compiled.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  if (rule == RuntimeCompilation::last_resort) {
    std::stable_partition(order.begin(), order.end(), [&](std::size_t i) { return !runtime_compiled[i]; });
  }
  return order;
}

// The time a backend may spend compiling kernels as plans are built, shared by all its searches:
// once spent, a runtime-compiled configuration is not built (GraphSearch::compile_refused), so a
// pass that only such engines run goes unfused, or fails its search, within a known bound instead
// of holding a case's first step for as long as compiles take. A compile under way is not cut.
class CompileAllowance {
 public:
  explicit CompileAllowance(std::chrono::milliseconds total) : total_(total) {}
  bool spent() const { return std::chrono::nanoseconds(used_.load()) >= total_; }
  void charge(std::chrono::nanoseconds took) { used_ += took.count(); }
  std::chrono::nanoseconds used() const { return std::chrono::nanoseconds(used_.load()); }

 private:
  std::chrono::milliseconds total_;
  std::atomic<std::int64_t> used_{0};  // nanoseconds
};

// One ranked configuration as build_plans's loop sees it (the rest of its facts are cuDNN's).
struct RankedEngine {
  bool admitted = true;  // engine_admitted's answer for it
  bool runtime_compiled = false;
};

// build_plans's loop, apart from cuDNN so that its rules are tested without a GPU: the ranked
// configurations tried in build_order, `try_build(i)` building configuration i (true where a plan
// was kept; it charges a compile's time to the allowance). It stops at `most` plans, once one is
// built and `past_deadline()` says so, and with `last_resort` at the first runtime-compiled
// configuration once a precompiled plan is built; it counts in `search` what numerics refused
// and what the spent allowance did not let compile.
template <typename PastDeadline, typename TryBuild>
void build_ranked(const std::vector<RankedEngine>& engines, int most, RuntimeCompilation rule,
                  const CompileAllowance* allowance, GraphSearch& search, PastDeadline past_deadline,
                  TryBuild try_build) {
  std::vector<bool> compiles;
  for (const RankedEngine& engine : engines) compiles.push_back(engine.runtime_compiled);
  int built = 0;
  bool precompiled_built = false;
  for (const std::size_t i : build_order(compiles, rule)) {
    if (built == most) break;
    if (built > 0 && past_deadline()) break;
    // In build order every later one compiles too, and a precompiled plan is there.
    if (engines[i].runtime_compiled && rule == RuntimeCompilation::last_resort && precompiled_built) break;
    if (!engines[i].admitted) {
      ++search.refused;
      continue;
    }
    if (engines[i].runtime_compiled && allowance != nullptr && allowance->spent()) {
      ++search.compile_refused;
      continue;
    }
    if (try_build(i)) {
      ++built;
      precompiled_built = precompiled_built || !engines[i].runtime_compiled;
    }
  }
}

// Which of the plans timed (best-ranked first; nullopt: it failed to run) to keep: the fastest, a
// tie going to the better-ranked; nullopt where none ran.
inline std::optional<std::size_t> fastest_plan(const std::vector<std::optional<float>>& milliseconds) {
  std::optional<std::size_t> fastest;
  for (std::size_t i = 0; i < milliseconds.size(); ++i) {
    if (milliseconds[i] && (!fastest || *milliseconds[i] < *milliseconds[*fastest])) fastest = i;
  }
  return fastest;
}

// Each timed plan's time, best-ranked first, for a log line: "0.161, 0.153, failed" (ms).
inline std::string describe_plan_times(const std::vector<std::optional<float>>& milliseconds) {
  std::string said;
  for (const std::optional<float>& ms : milliseconds) {
    if (!said.empty()) said += ", ";
    if (!ms) {
      said += "failed";
      continue;
    }
    char time[32];
    std::snprintf(time, sizeof time, "%.3f", static_cast<double>(*ms));
    said += time;
  }
  return said;
}

// One line for DLBENCH_LOG_ALGORITHMS, as describe_choice gives for the legacy calls: "forward fp32
// nchw 64x64x56x56 -> 64 3x3 stride 1 pad 1: graph engine 12, fma, 0.0 MiB workspace, 0.153 ms;
// 8 timed of 20 ranked (...)".
inline std::string describe_graph_choice(const ConvAlgorithmKey& key, std::int64_t engine, bool tensor_cores,
                                         std::size_t workspace, double milliseconds, const GraphSearch& search) {
  char time[32];
  std::snprintf(time, sizeof time, "%.3f ms", milliseconds);
  return describe_convolution(key) + ": graph engine " + std::to_string(engine) +
         (tensor_cores ? ", tensor ops, " : ", fma, ") + mebibytes(workspace) + " workspace, " + time + "; " +
         describe_search(search);
}

}  // namespace dlbench::worker
