// A convolution pass fused with the batch norm around it, as cuDNN's runtime-fusion engines take
// it through the graph API (the ResNet-50 recipe of NVIDIA's MLPerf submissions): the forward
// convolution computing its output's per-channel sums and sums of squares as it writes it (the
// batch norm's statistics without a pass over y), the same with the previous batch norm's scale,
// shift and ReLU applied to its input as it reads it (no normalised tensor in memory), the filter
// gradient recomputing that input the same way, and the data gradient applying the ReLU's
// backward as it writes. Each graph here is one pass of one convolution; which of them an engine
// runs, on which device, is what conv_fusion_probe (bench/) asks. Internal to worker/cuda.
#pragma once

#include <cudnn.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "backend.hpp"
#include "cuda/conv_graph.hpp"

namespace dlbench::worker::cuda_detail {

// Each fused pass and the plain pass it would replace (conv, wgrad, dgrad: the baselines).
enum class ConvFusion {
  conv,                           // y = conv(x, w)
  conv_genstats,                  // y = conv(x, w); Σy and Σy² per channel
  scale_bias_relu_conv_genstats,  // y = conv(relu(x * s + b), w); Σy and Σy² per channel
  wgrad,                          // dw = wgrad(x, dy)
  scale_bias_relu_wgrad,          // dw = wgrad(relu(x * s + b), dy)
  dgrad,                          // dx = dgrad(dy, w)
  dgrad_drelu,                    // dx = dgrad(dy, w) where r > 0, else 0 (r: the ReLU's input)
  dgrad_scale_bias_drelu,         // the same, r recomputed as r = x * s + b from the batch norm's input x
  // cuDNN's DgradDreluBNBwdWeight: the same with r = (x - mean) * inv_std * gamma + beta from the
  // batch norm's saved statistics and parameters (fp32), and that batch norm's weight gradients
  // (dgamma, dbeta) and the coefficients of its input gradient (dx_bn = A * dx + B * x + C) reduced
  // as the masked gradient dx is written.
  dgrad_drelu_dbn_weight,
  // The probe's only, never the model's: a bottleneck's output ReLU taken into the next block's
  // first data gradient, dx = dgrad(dy, w) + g where r > 0, else 0, with g the gradient the next
  // block's shortcut carries back and r the block's output (the ReLU's output, positive where its
  // input was); the second also reduces the block's last batch norm's weight gradients and
  // input-gradient coefficients from dx and that batch norm's input x (kBatchNormInputUid). cuDNN
  // 9.19 ranks no engine of either kind for the second (bench/RESULTS.md, 2026-12-04).
  dgrad_add_drelu,
  dgrad_add_drelu_dbn_weight,
  // Not a pass dlbench runs: y = tanh((conv(x, w) + b) * s), an epilogue only cuDNN's generic
  // runtime-fusion engines take. Whether any engine is ranked for it says whether a device (or a
  // description of one) is offered those engines at all; the probe asks it first.
  runtime_fusion_canary,
};
inline constexpr std::array<ConvFusion, 11> kConvFusions{
    ConvFusion::conv,  ConvFusion::conv_genstats, ConvFusion::scale_bias_relu_conv_genstats,
    ConvFusion::wgrad, ConvFusion::scale_bias_relu_wgrad,
    ConvFusion::dgrad, ConvFusion::dgrad_drelu,   ConvFusion::dgrad_scale_bias_drelu,
    ConvFusion::dgrad_drelu_dbn_weight, ConvFusion::dgrad_add_drelu, ConvFusion::dgrad_add_drelu_dbn_weight};
std::string_view to_string(ConvFusion fusion);
// The passes that reduce a batch norm's weight gradients and input-gradient coefficients as they
// write the masked data gradient.
inline bool reduces_batch_norm_gradients(ConvFusion fusion) {
  return fusion == ConvFusion::dgrad_drelu_dbn_weight || fusion == ConvFusion::dgrad_add_drelu_dbn_weight;
}
// The plain pass a fused one replaces (itself for a plain one).
ConvFusion baseline_of(ConvFusion fusion);

// The uids of a fused graph's tensors in memory (a variant pack's), beyond kInputUid (x or dx),
// kFilterUid (w or dw) and kOutputUid (y or dy).
inline constexpr std::int64_t kScaleUid = 4, kBiasUid = 5, kSumUid = 6, kSquareSumUid = 7, kReluInputUid = 8;
// dgrad_drelu_dbn_weight's, all fp32 a channel: the batch norm's saved mean and inverse standard
// deviation and its gamma and beta (read), its dgamma and dbeta, and its input gradient's coefficients
// A (of dx), B (of x) and C (written).
inline constexpr std::int64_t kMeanUid = 9, kInvStdUid = 10, kGammaUid = 11, kBetaUid = 12, kDgammaUid = 13,
                              kDbetaUid = 14, kCoefficientDyUid = 15, kCoefficientXUid = 16, kCoefficientBiasUid = 17;
// dgrad_add_drelu's and dgrad_add_drelu_dbn_weight's: the shortcut's gradient g (added to the data
// gradient) and the batch norm's input x (the ReLU's input being its output plus the shortcut).
inline constexpr std::int64_t kShortcutGradientUid = 18, kBatchNormInputUid = 19;

// The per-channel fp32 tensors a fused pass writes (statistics, weight gradients, coefficients): a
// plan timed on a pass's own buffers writes these to scratch, whether the engine adds into them
// or overwrites them.
inline constexpr std::array<std::int64_t, 7> kPerChannelOutputUids{
    kSumUid, kSquareSumUid, kDgammaUid, kDbetaUid, kCoefficientDyUid, kCoefficientXUid, kCoefficientBiasUid};
inline bool is_per_channel_output(std::int64_t uid) {
  return std::ranges::find(kPerChannelOutputUids, uid) != kPerChannelOutputUids.end();
}

// A tensor the graph reads or writes in memory, its size, and the size of one of its values (2 for
// the data type, 4 for fp32 statistics, parameters and coefficients).
struct FusedTensor {
  std::int64_t uid = 0;
  std::size_t bytes = 0;
  std::size_t value_bytes = 2;
};

// One pass as a finalized operation graph over channels-last tensors of `config.dtype`, every
// intermediate virtual and fp32, statistics in fp32, the per-channel scale and shift in the data
// type. `handle` may be null (a graph built without a device). Throws CudaError with cuDNN's
// reason where cuDNN refuses the graph.
struct FusedConvGraph {
  FusedConvGraph(const Conv2dConfig& config, ConvFusion fusion, cudnnHandle_t handle);
  ConvFusion fusion;
  std::vector<FusedTensor> tensors;
  std::deque<BackendDescriptor> parts;  // tensors, descriptors and operations the graph holds (never moved)
  BackendDescriptor graph;
};

// What the engines offer a graph (build_plans with dlbench's rules for half data, tensor cores
// allowed): the plans built, at most `most`, best-ranked first; what was ranked and refused for its
// numerics or could not be built (the first such one's reason kept).
struct EngineSearchResult {
  GraphSearch search;
  std::string first_unbuildable_reason;
  std::vector<BuiltPlan> built;
};

// Plans for `graph` on `handle`'s device, or, with a null handle, for the device `device`
// describes (cuda/cudnn_device.hpp), which need not be in this machine, by `rules` (build_plans;
// the numerics are always dlbench's for half data with tensor cores, whatever `rules` says).
EngineSearchResult search_engines(const FusedConvGraph& graph, cudnnHandle_t handle, const BackendDescriptor* device,
                                  PlanRules rules);
// The same for at most `most` plans, every engine in the heuristics' rank, no deadline (the probe).
inline EngineSearchResult search_engines(const FusedConvGraph& graph, cudnnHandle_t handle,
                                         const BackendDescriptor* device, int most) {
  PlanRules rules;
  rules.most = most;
  return search_engines(graph, handle, device, rules);
}

}  // namespace dlbench::worker::cuda_detail
