// Batch norm through dlbench's own kernels (cuda/batch_norm_kernels.hpp), over NCHW or
// channels-last activations: DLBENCH_CUDA_BATCH_NORM=own, which fuses the ReLU after a batch norm
// and a residual block's add and ReLU into it, as cuDNN's *Ex calls do only for channels-last
// activations (cuda/batch_norm_calls.hpp).
#include <cmath>
#include <cstdint>
#include <memory>
#include <stdexcept>

#include "cuda/batch_norm_kernels.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/cuda_common.hpp"

namespace dlbench::worker::cuda_detail {
namespace {

class KernelBatchNorm final : public BatchNormOp {
 public:
  KernelBatchNorm(CudaBackend& backend, const BatchNormConfig& config)
      : backend_(backend), dtype_(config.dtype), channels_last_(backend.activation_layout() == Layout::nhwc),
        shape_(batch_norm_shape(config.input)), epsilon_(config.epsilon), momentum_(config.momentum),
        deferred_(config.deferred), from_sums_(config.from_sums),
        tail_(config.add_relu ? kernels::BatchNormTail::add_relu
              : config.relu   ? kernels::BatchNormTail::relu
                              : kernels::BatchNormTail::none),
        scratch_bytes_(kernels::batch_norm_scratch_bytes(dtype_, channels_last_, shape_)),
        mask_bytes_(tail_ == kernels::BatchNormTail::add_relu
                        ? kernels::batch_norm_relu_mask_bytes(dtype_, channels_last_, shape_)
                        : 0) {}

  // No tail reads y in backward: a ReLU tail finds its mask again from x, and the residual's add
  // and ReLU keep theirs in the workspace (batch_norm_relu_mask_bytes), which the layer keeps from
  // forward to backward. So the memory plan may give y away once the next layer's backward has read it.
  std::size_t workspace_bytes() const override { return mask_bytes_; }

  // Deferred (BatchNormConfig::deferred): the statistics from the convolution's sums, and backward
  // through the relu tail, its mask found again from x, γ, β and the statistics.
  void forward_deferred(const Tensor& sums, const Tensor& gamma, const Tensor& beta, Tensor& scale_shift,
                        BatchNormStatistics& s) override {
    if (!deferred_) BatchNormOp::forward_deferred(sums, gamma, beta, scale_shift, s);
    require_elements(sums, 2 * shape_.channels, "deferred batch norm", "sums");
    require_elements(scale_shift, 2 * shape_.channels, "deferred batch norm", "scale_shift");
    require_dtype("deferred batch norm", dtype_, {&scale_shift});
    kernels::deferred_batch_norm_forward(dtype_, shape_.channels, shape_.per_channel(), sums.as<float>(),
                                         gamma.as<float>(), beta.as<float>(), epsilon_, momentum_, s.mean.as<float>(),
                                         s.spread.as<float>(), s.running_mean.as<float>(), s.running_var.as<float>(),
                                         scale_shift.data, backend_.stream());
  }
  void backward_deferred(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& beta,
                         const BatchNormStatistics& s, Tensor& dx, Tensor& dgamma, Tensor& dbeta) override {
    if (!deferred_) BatchNormOp::backward_deferred(x, dy, gamma, beta, s, dx, dgamma, dbeta);
    require_dtype("deferred batch norm", dtype_, {&x, &dy, &dx});
    backward_pass(x, nullptr, dy, nullptr, gamma, beta, s, dx, dgamma, dbeta);
  }
  // The convolution after took the gradients (its data gradient fused with them): one pass.
  void backward_deferred_apply(const Tensor& x, const Tensor& masked, const Tensor& coefficients, Tensor& dx) override {
    if (!deferred_) BatchNormOp::backward_deferred_apply(x, masked, coefficients, dx);
    if (!channels_last_) throw std::logic_error("a deferred batch norm's coefficients apply over channels-last activations");
    require_dtype("deferred batch norm", dtype_, {&x, &masked, &dx});
    require_elements(coefficients, 3 * shape_.channels, "deferred batch norm", "coefficients");
    kernels::batch_norm_apply_coefficients(dtype_, shape_.channels, shape_.per_channel(), x.data, masked.data,
                                           coefficients.as<float>(), dx.data, backend_.stream());
  }

  void forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, BatchNormStatistics& s,
                        void*) override {
    if (deferred_) throw std::logic_error("this batch norm was made deferred: forward_deferred runs it");
    if (tail_ == kernels::BatchNormTail::add_relu) {
      throw std::logic_error("this batch norm was made with add_relu: forward_training_add_relu runs it");
    }
    require_dtype("batch norm", dtype_, {&x, &y});
    forward(x, nullptr, gamma, beta, y, s);
  }

  void backward(const Tensor& x, const Tensor&, const Tensor& dy, const Tensor& gamma, const Tensor& beta,
                const BatchNormStatistics& s, Tensor& dx, Tensor& dgamma, Tensor& dbeta, const void*) override {
    if (tail_ == kernels::BatchNormTail::add_relu) {
      throw std::logic_error("this batch norm was made with add_relu: backward_add_relu runs it");
    }
    if (deferred_) throw std::logic_error("this batch norm was made deferred: backward_deferred runs it");
    require_dtype("batch norm", dtype_, {&x, &dy, &dx});
    backward_pass(x, nullptr, dy, nullptr, gamma, beta, s, dx, dgamma, dbeta);
  }

  void forward_training_add_relu(const Tensor& x, const Tensor& z, const Tensor& gamma, const Tensor& beta, Tensor& y,
                                 BatchNormStatistics& s, void* workspace) override {
    if (tail_ != kernels::BatchNormTail::add_relu) BatchNormOp::forward_training_add_relu(x, z, gamma, beta, y, s, workspace);
    require_dtype("batch norm", dtype_, {&x, &z, &y});
    require_workspace(workspace);
    forward(x, &z, gamma, beta, y, s, workspace);
  }

  // y is not read: the mask forward left in the workspace is.
  void backward_add_relu(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& gamma, const Tensor& beta,
                         const BatchNormStatistics& s, Tensor& dx, Tensor& dz, Tensor& dgamma, Tensor& dbeta,
                         const void* workspace) override {
    if (tail_ != kernels::BatchNormTail::add_relu) {
      BatchNormOp::backward_add_relu(x, y, dy, gamma, beta, s, dx, dz, dgamma, dbeta, workspace);
    }
    require_dtype("batch norm", dtype_, {&x, &dy, &dx, &dz});
    backward_pass(x, require_workspace(workspace), dy, &dz, gamma, beta, s, dx, dgamma, dbeta);
  }

 private:
  static BatchNormShape batch_norm_shape(const Shape& s) {  // the same sizes in either layout
    const ActivationGeometry g = geometry_of(s, Layout::nchw);
    return {g.n, g.c, g.pixels()};
  }
  float* scratch() { return static_cast<float*>(backend_.workspace(scratch_bytes_)); }
  // The layer's workspace (workspace_bytes()) holds the add_relu tail's mask.
  static const void* require_workspace(const void* workspace) {
    if (workspace == nullptr) {
      throw std::invalid_argument("batch norm: the add-and-ReLU tail's mask needs the workspace");
    }
    return workspace;
  }

  // z and relu_mask: the add_relu tail's, null otherwise.
  void forward(const Tensor& x, const Tensor* z, const Tensor& gamma, const Tensor& beta, Tensor& y,
               BatchNormStatistics& s, void* relu_mask = nullptr) {
    kernels::batch_norm_forward_training(dtype_, channels_last_, shape_, tail_, x.data,
                                         z != nullptr ? z->data : nullptr, y.data,
                                         static_cast<std::uint8_t*>(relu_mask), gamma.as<float>(), beta.as<float>(),
                                         epsilon_, momentum_, s.mean.as<float>(), s.spread.as<float>(),
                                         s.running_mean.as<float>(), s.running_var.as<float>(), scratch(),
                                         backend_.stream(), from_sums_ ? sums_of(s) : nullptr);
  }
  const float* sums_of(const BatchNormStatistics& s) const {
    require_elements(s.sums, 2 * shape_.channels, "batch norm from sums", "sums");
    return s.sums.as<float>();
  }

  // relu_mask and dz: the add_relu tail's, null otherwise.
  void backward_pass(const Tensor& x, const void* relu_mask, const Tensor& dy, Tensor* dz, const Tensor& gamma,
                     const Tensor& beta, const BatchNormStatistics& s, Tensor& dx, Tensor& dgamma, Tensor& dbeta) {
    kernels::batch_norm_backward(dtype_, channels_last_, shape_, tail_, x.data,
                                 static_cast<const std::uint8_t*>(relu_mask), dy.data,
                                 dz != nullptr ? dz->data : nullptr, dx.data, gamma.as<float>(), beta.as<float>(),
                                 s.mean.as<float>(), s.spread.as<float>(), dgamma.as<float>(), dbeta.as<float>(),
                                 scratch(), backend_.stream());
  }

  CudaBackend& backend_;
  DType dtype_;
  bool channels_last_;
  BatchNormShape shape_;
  float epsilon_, momentum_;
  bool deferred_;   // BatchNormConfig::deferred: the relu tail, through forward_deferred and backward_deferred
  bool from_sums_;  // BatchNormConfig::from_sums: forward's statistics from the convolution's sums
  kernels::BatchNormTail tail_;
  std::size_t scratch_bytes_;
  std::size_t mask_bytes_;  // the workspace: the add_relu tail's mask, none for the other tails
};

}  // namespace

std::unique_ptr<BatchNormOp> make_kernel_batch_norm(CudaBackend& backend, const BatchNormConfig& config) {
  return std::make_unique<KernelBatchNorm>(backend, config);
}

}  // namespace dlbench::worker::cuda_detail
