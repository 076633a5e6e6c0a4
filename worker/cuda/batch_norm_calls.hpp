// Which cuDNN calls a batch norm takes, apart from making them, so that the rule is tested
// without a GPU. Channels-last activations reach cuDNN's NHWC semi-persistent kernels only
// through the *Ex calls, given a workspace and a reserve space that forward leaves for backward
// (what PyTorch calls); the plain calls fall back to slower kernels: on an H200 an amp ResNet-50
// step took 670.9 ms with them and 48.1 ms with the *Ex calls. DLBENCH_CUDA_BATCH_NORM=plain keeps
// the plain calls, so that one GPU run can time both.
//
// By default channels-last batch norms fuse the ReLU that follows them and a bottleneck's add and
// ReLU into its last batch norm. Measured on an H200 (bench/RESULTS.md), ResNet-50 images/s:
// 2026-11-27, amp 6,410 (ex), 6,806 (ex_relu) and, in another call, 6,633 (ex_relu) against 7,094
// (ex_add_relu); bf16 6,093 (ex) against 6,430 (ex_relu); tf32 3,104 (ex) against 3,311 (ex_relu);
// 2026-11-28, bf16 6,447 (ex_relu) against 6,685 (ex_add_relu), and tf32 3,303 (ex_relu) against
// 3,514 (ex_add_relu), its self-test passing.
//
// NCHW: cuDNN 9.19 refuses a fused activation (CUDNN_STATUS_NOT_SUPPORTED on an H200, 2026-11-28)
// and runs the *Ex calls without one, so ex-relu and ex-add-relu are refused there up front.
// `own` takes dlbench's kernels instead (batch_norm_plan.hpp), which fuse both in either layout:
// over NCHW, where cuDNN fuses neither (the default there since 2026-12-04), and over channels
// last as the A/B against cuDNN's persistent kernels (amp's batch norms took 16.8 ms of a 40.3 ms
// ResNet-50 step on an H200; 7,264.7 images/s with the own kernels against 7,211.9 on 2026-12-04,
// within two repeats' spread of each other, so cuDNN's stay).
#pragma once

#include <optional>
#include <stdexcept>
#include <string>

#include "env_choice.hpp"
#include "dtype.hpp"
#include "tensor.hpp"

namespace dlbench::worker {

// ex_relu: the *Ex calls with a layer's ReLU fused in (CUDNN_BATCHNORM_OPS_BN_ACTIVATION), which
// saves a ReLU's read and write of the activation each way; backward then reads forward's output.
// ex_add_relu: ex_relu, and a residual block's add and ReLU fused into its last batch norm
// (CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION), whose backward also writes the shortcut's gradient.
// own: no cuDNN call; dlbench's kernels, NCHW or channels last, with ex_add_relu's fusions.
enum class BatchNormCalls { plain, ex, ex_relu, ex_add_relu, own };

inline constexpr Choices<BatchNormCalls, 5> kBatchNormCalls{{{"plain", BatchNormCalls::plain},
                                                              {"ex", BatchNormCalls::ex},
                                                              {"ex-relu", BatchNormCalls::ex_relu},
                                                              {"ex-add-relu", BatchNormCalls::ex_add_relu},
                                                              {"own", BatchNormCalls::own}}};

// Channels-last activations (tf32 and the half types; fp32 under DLBENCH_CUDA_LAYOUT=nhwc): cuDNN's
// persistent batch-norm mode, as PyTorch's channels_last batch norm takes; NCHW the spatial mode.
inline bool persistent_batch_norm(Layout layout) { return layout == Layout::nhwc; }

// cuDNN's batch-norm mode, DLBENCH_CUDA_BATCH_NORM_MODE, by default persistent_batch_norm's. An
// A/B for fp32 (NCHW), whose batch norms and ReLUs took 12.6 ms of a 73.4 ms ResNet-50 step on an
// H200 (2026-11-29) against PyTorch's 9.6: NVIDIA's memory-limited layers guide times the
// persistent kernels faster than the spatial ones over part of NCHW's range too (Caffe2 took
// them for every training batch norm). They may overflow to inf where the spatial ones do not.
enum class BatchNormMode { spatial, persistent };

inline constexpr Choices<BatchNormMode, 2> kBatchNormModes{{{"spatial", BatchNormMode::spatial},
                                                             {"persistent", BatchNormMode::persistent}}};

inline BatchNormMode batch_norm_mode(Layout layout, const char* choice) {
  if (const std::optional<BatchNormMode> chosen = env_choice("DLBENCH_CUDA_BATCH_NORM_MODE", choice, kBatchNormModes)) {
    return *chosen;
  }
  return persistent_batch_norm(layout) ? BatchNormMode::persistent : BatchNormMode::spatial;
}

// `layout` is the activations' memory order; `choice` is DLBENCH_CUDA_BATCH_NORM's value (null or empty: unset).
// Throws std::invalid_argument naming the variable and its allowed values for anything else, and
// for a fused activation over NCHW activations.
inline BatchNormCalls batch_norm_calls(Layout layout, const char* choice) {
  if (const std::optional<BatchNormCalls> chosen = env_choice("DLBENCH_CUDA_BATCH_NORM", choice, kBatchNormCalls)) {
    if (!persistent_batch_norm(layout) && (*chosen == BatchNormCalls::ex_relu || *chosen == BatchNormCalls::ex_add_relu)) {
      throw std::invalid_argument(std::string("DLBENCH_CUDA_BATCH_NORM: \"") + choice +
                                  "\" fuses an activation, which cuDNN does only for channels-last activations; these "
                                  "are NCHW (fp32): use plain, ex or own, or DLBENCH_CUDA_LAYOUT=nhwc");
    }
    return *chosen;
  }
  // Unset. NCHW (true fp32) takes dlbench's own kernels, which fuse the ReLU and the residual add
  // that cuDNN will not fuse there: on an H200 (2026-12-04, batch 64) fp32 ResNet-50 ran 965.3
  // images/s with them against 885.0 with cuDNN's plain calls (PyTorch eager 927.7).
  if (!persistent_batch_norm(layout)) return BatchNormCalls::own;
  return BatchNormCalls::ex_add_relu;
}

}  // namespace dlbench::worker
