// A convolution fused with the batch norms around it (FusedConv2dOp), the batch norm deferred
// between two of them (BatchNormConfig::deferred) and the one taking its statistics from the
// convolution's sums (BatchNormConfig::from_sums), composed on the host from a backend's own
// convolution and loops over channels-last memory: the CPU backend's route
// (DLBENCH_CPU_CONV_BATCH_NORM=fused) and the self-test's reference for a device that fuses them.
// The normalised input relu(x · scale + shift) is written to scratch memory of the op's own and
// rounded to the activations' dtype, as a device's kernel feeds its convolution; sums are fp64 on
// the host, so that the reference's statistics carry no order of their own.
#pragma once

#include <memory>

#include "backend.hpp"

namespace dlbench::worker {

// `ops` must keep its memory on the host (the CPU backend) and its activations channels-last.
std::unique_ptr<FusedConv2dOp> make_host_fused_conv2d(Backend& ops, const FusedConv2dConfig& config);
// A batch norm whose statistics come from the convolution before's sums, over host memory in any
// activation dtype: deferred (config.deferred, with its ReLU), or with the residual's add and ReLU
// (config.from_sums with add_relu).
std::unique_ptr<BatchNormOp> make_host_batch_norm_from_sums(const BatchNormConfig& config);

}  // namespace dlbench::worker
