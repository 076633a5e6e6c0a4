// Which cuDNN calls a batch norm takes, apart from making them, so that the rule is tested
// without a GPU. Channels-last activations reach cuDNN's NHWC semi-persistent kernels only
// through the *Ex calls, given a workspace and a reserve space that forward leaves for backward
// (what PyTorch calls); the plain calls fall back to slower kernels: on an H200 an amp ResNet-50
// step took 670.9 ms with them and 48.1 ms with the *Ex calls. DLBENCH_CUDA_BATCH_NORM=plain keeps
// the plain calls, so that one GPU run can time both.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>

#include "tensor.hpp"

namespace dlbench::worker {

// ex_relu: the *Ex calls with a layer's ReLU fused in (CUDNN_BATCHNORM_OPS_BN_ACTIVATION), which
// saves a ReLU's read and write of the activation each way; backward then reads forward's output.
enum class BatchNormCalls { plain, ex, ex_relu };

// Channels-last activations (the half types, and fp32 under DLBENCH_CUDA_LAYOUT=nhwc): cuDNN's
// persistent batch-norm mode, and its *Ex calls, as PyTorch's channels_last batch norm takes.
inline bool persistent_batch_norm(Layout layout) { return layout == Layout::nhwc; }

// `choice` is DLBENCH_CUDA_BATCH_NORM's value (null or empty: unset). Throws std::invalid_argument
// naming the variable and its allowed values for anything else.
inline BatchNormCalls batch_norm_calls(Layout layout, const char* choice) {
  const std::string_view chosen = choice == nullptr ? std::string_view() : std::string_view(choice);
  if (!chosen.empty() && chosen != "plain" && chosen != "ex" && chosen != "ex-relu") {
    throw std::invalid_argument("DLBENCH_CUDA_BATCH_NORM: \"" + std::string(chosen) + "\" is not one of plain, ex, ex-relu");
  }
  // The semi-persistent kernels are for channels-last tensors; NCHW keeps the plain calls.
  if (!persistent_batch_norm(layout) || chosen == "plain") return BatchNormCalls::plain;
  return chosen == "ex-relu" ? BatchNormCalls::ex_relu : BatchNormCalls::ex;
}

}  // namespace dlbench::worker
