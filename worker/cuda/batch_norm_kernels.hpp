// dlbench's own batch-norm kernels over NCHW or channels-last activations, the ReLU after them and
// a residual block's add and ReLU fused in (DLBENCH_CUDA_BATCH_NORM=own; batch_norm_plan.hpp says
// how they split the work and why they exist). Activations are `dtype` (loaded as float, computed
// in float, rounded once on store); γ, β, the statistics and the gradients of γ and β are fp32.
// The statistics keep cuDNN's form (the batch's mean and 1/sqrt(var + ε)), so that every
// batch-norm route of the CUDA backend leaves the same state. `channels_last`: the activations'
// order is NHWC, otherwise NCHW (`shape` gives the logical sizes either way). Each launcher queues
// its kernels on `stream`.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "batch_norm_plan.hpp"
#include "dtype.hpp"

namespace dlbench::worker::kernels {

// What follows the normalisation in the same pass: nothing, a ReLU, or add the residual z and a ReLU.
enum class BatchNormTail { none, relu, add_relu };

// fp32 scratch both passes need for a batch norm of this type, order and shape (the chunks'
// partial sums and the per-channel coefficients of the elementwise pass), from one shared workspace.
std::size_t batch_norm_scratch_bytes(DType dtype, bool channels_last, const BatchNormShape& shape);

// The add_relu tail's mask, kept from forward for backward (batch_norm_plan.hpp's relu_mask_byte):
// a byte a unit of the passes' width with every pointer 16-byte aligned, which the launchers then
// require (a dlbench activation is). 1/16 of y's bytes where the units are packs.
std::size_t batch_norm_relu_mask_bytes(DType dtype, bool channels_last, const BatchNormShape& shape);

// Training forward: each channel's mean and inverse std over the batch into `mean` and
// `inverse_std` (kept for backward), the running statistics moved by `momentum` (PyTorch's rule,
// the unbiased variance), and y = tail(γ · (x − mean) · inverse_std + β [+ z]). z: the residual
// for add_relu, and relu_mask where y > 0 (batch_norm_relu_mask_bytes); both null otherwise.
// `sums` ((2, C) fp32, Σx then Σx², a fused convolution's): the statistics from them, with no
// pass over x (BatchNormConfig::from_sums); null: from x.
void batch_norm_forward_training(DType dtype, bool channels_last, const BatchNormShape& shape, BatchNormTail tail,
                                 const void* x, const void* z, void* y, std::uint8_t* relu_mask, const float* gamma,
                                 const float* beta, float epsilon, float momentum, float* mean, float* inverse_std,
                                 float* running_mean, float* running_var, float* scratch, cudaStream_t stream,
                                 const float* sums = nullptr);

// Backward from forward's statistics: g = dy where the tail's ReLU passed its value, dz = g with
// add_relu (the residual's gradient), dβ = Σg, dγ = Σg · x̂ and dx through the normalisation.
// dgamma and dbeta are overwritten. No tail reads y: a ReLU tail finds its mask again from x, γ, β
// and the statistics (forward's normalised value, the same bits); add_relu, whose residual is not
// in x, reads the mask forward wrote (null otherwise).
void batch_norm_backward(DType dtype, bool channels_last, const BatchNormShape& shape, BatchNormTail tail,
                         const void* x, const std::uint8_t* relu_mask, const void* dy, void* dz, void* dx,
                         const float* gamma, const float* beta, const float* mean, const float* inverse_std,
                         float* dgamma, float* dbeta, float* scratch, cudaStream_t stream);

// A deferred batch norm's forward (BatchNormConfig::deferred): each channel's mean and inverse std
// from `sums` ((2, C) fp32: Σx then Σx² over `count` values, a fused convolution's), the running
// statistics moved as batch_norm_forward_training moves them, and scale_shift ((2, C) of `dtype`:
// γ · inverse std, then β − mean · scale), which the next convolution applies as it reads x. Its
// backward is batch_norm_backward's with the relu tail, from the same statistics.
void deferred_batch_norm_forward(DType dtype, std::int64_t channels, std::int64_t count, const float* sums,
                                 const float* gamma, const float* beta, float epsilon, float momentum, float* mean,
                                 float* inverse_std, float* running_mean, float* running_var, void* scale_shift,
                                 cudaStream_t stream);

// A deferred batch norm's backward where the convolution after reduced its gradients
// (FusedConv2dOp::backward_data_batch_norm, cuDNN's DgradDreluBNBwdWeight): dx = a · g + b · x + c
// over channels-last x, g and dx of `dtype` (`count` pixels of `channels`), a, b and c fp32 a
// channel, in that order in `coefficients`; as fma(a, g, fma(b, x, c)) rounded once.
void batch_norm_apply_coefficients(DType dtype, std::int64_t channels, std::int64_t count, const void* x,
                                   const void* g, const float* coefficients, void* dx, cudaStream_t stream);

}  // namespace dlbench::worker::kernels
