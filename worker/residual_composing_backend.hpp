// A backend that does what a device fuses in a residual block by composing its inner backend's own
// unfused ops, so that the same layers run on the CPU (tests) and in the self-test's reference:
// - BatchNormConfig::add_relu (cuDNN's CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION): batch norm, then add
//   + ReLU in place; backward the ReLU's (dz) and then batch norm's from dz;
// - Conv2dOp::backward_data_accumulate (a convolution's backward data with beta = 1): the input
//   gradient into scratch memory of the op's own, then added into dx;
// - FusedConv2dOp and BatchNormConfig::deferred (cuDNN's fusion engines): cpu/conv_batch_norm.hpp's
//   composition on the host.
// Each is the same function as the block's own add, in the layers of a device that fuses it.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <utility>

#include "cpu/conv_batch_norm.hpp"
#include "delegating_backend.hpp"

namespace dlbench::worker {

class ComposedBatchNormAddRelu final : public BatchNormOp {
 public:
  ComposedBatchNormAddRelu(std::unique_ptr<BatchNormOp> batch_norm, std::unique_ptr<AddOp> add_relu,
                           std::unique_ptr<ReluOp> relu)
      : batch_norm_(std::move(batch_norm)), add_relu_(std::move(add_relu)), relu_(std::move(relu)) {}
  std::size_t workspace_bytes() const override { return batch_norm_->workspace_bytes(); }
  bool backward_reads_output() const override { return true; }  // the ReLU's mask
  void forward_training(const Tensor&, const Tensor&, const Tensor&, Tensor&, BatchNormStatistics&, void*) override {
    throw std::logic_error("this batch norm was made with add_relu: forward_training_add_relu runs it");
  }
  void backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const BatchNormStatistics&,
                Tensor&, Tensor&, Tensor&, const void*) override {
    throw std::logic_error("this batch norm was made with add_relu: backward_add_relu runs it");
  }
  void forward_training_add_relu(const Tensor& x, const Tensor& z, const Tensor& gamma, const Tensor& beta, Tensor& y,
                                 BatchNormStatistics& s, void* workspace) override {
    batch_norm_->forward_training(x, gamma, beta, y, s, workspace);
    add_relu_->forward(y, z, y);
  }
  void backward_add_relu(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& gamma, const Tensor& beta,
                         const BatchNormStatistics& s, Tensor& dx, Tensor& dz, Tensor& dgamma, Tensor& dbeta,
                         const void* workspace) override {
    relu_->backward(y, dy, dz);
    batch_norm_->backward(x, y, dz, gamma, beta, s, dx, dgamma, dbeta, workspace);
  }

 private:
  std::unique_ptr<BatchNormOp> batch_norm_;
  std::unique_ptr<AddOp> add_relu_;
  std::unique_ptr<ReluOp> relu_;
};

// `ops`'s batch norm for `c`, composed where c asks for add_relu.
inline std::unique_ptr<BatchNormOp> make_composed_batch_norm(Backend& ops, const BatchNormConfig& c) {
  if (!c.add_relu || c.from_sums) return ops.make_batch_norm(c);  // the host's from_sums op adds and ReLUs
  BatchNormConfig unfused = c;
  unfused.add_relu = false;
  return std::make_unique<ComposedBatchNormAddRelu>(ops.make_batch_norm(unfused), ops.make_add_relu(c.input, c.dtype),
                                                    ops.make_relu(c.input, c.dtype));
}

class ComposedConvAccumulate final : public Conv2dOp {
 public:
  ComposedConvAccumulate(Backend& ops, const Conv2dConfig& c)
      : conv_(ops.make_conv2d(c)), add_(ops.make_add(c.input, c.dtype)),
        scratch_memory_(ops.allocate(static_cast<std::size_t>(c.input.numel()) * dtype_size(c.dtype))) {}
  void forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) override { conv_->forward(x, w, b, y); }
  void backward_data(const Tensor& dy, const Tensor& w, Tensor& dx) override { conv_->backward_data(dy, w, dx); }
  void backward_data_accumulate(const Tensor& dy, const Tensor& w, Tensor& dx) override {
    Tensor scratch{scratch_memory_.get(), dx.shape, dx.layout, dx.dtype};
    conv_->backward_data(dy, w, scratch);
    add_->forward(dx, scratch, dx);
  }
  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* db) override {
    conv_->backward_weights(x, dy, dw, db);
  }

 private:
  std::unique_ptr<Conv2dOp> conv_;
  std::unique_ptr<AddOp> add_;
  std::shared_ptr<void> scratch_memory_;
};

class ResidualComposingBackend final : public DelegatingBackend {
 public:
  // fuses_convolution: which of a bottleneck's convolutions to fuse with the batch norms around them
  // (FusedConv2dOp, composed on the host by cpu/conv_batch_norm.hpp: `inner` keeps its memory there),
  // and how (the config it composes for one asked, or none), as a device would (every_convolution(),
  // or what the device says of each); empty: none.
  using ConvolutionFusion = std::function<std::optional<FusedConv2dConfig>(const FusedConv2dConfig&)>;
  explicit ResidualComposingBackend(Backend& inner, bool batch_norm_add_relu = true, bool accumulate_conv_grads = false,
                                    ConvolutionFusion fuses_convolution = {})
      : DelegatingBackend(inner), batch_norm_add_relu_(batch_norm_add_relu), accumulate_conv_grads_(accumulate_conv_grads),
        fuses_convolution_(std::move(fuses_convolution)) {}
  // Every convolution, with every fusion asked of it (its batch norm's gradients included), or
  // with the forward and filter-gradient fusions only.
  static ConvolutionFusion every_convolution() {
    return [](const FusedConv2dConfig& c) { return std::optional<FusedConv2dConfig>(c); };
  }
  static ConvolutionFusion every_convolution_forward() {
    return [](FusedConv2dConfig c) {
      c.input_batch_norm_gradients = false;
      return std::optional<FusedConv2dConfig>(c);
    };
  }
  std::unique_ptr<FusedConv2dOp> make_fused_conv2d(const FusedConv2dConfig& c) override {
    if (!fuses_convolution_) return nullptr;
    const std::optional<FusedConv2dConfig> made = fuses_convolution_(c);
    if (!made) return nullptr;
    return make_host_fused_conv2d(inner_, *made);
  }
  bool fuses_batch_norm_add_relu() const override { return batch_norm_add_relu_; }
  bool accumulates_conv_input_grad() const override { return accumulate_conv_grads_; }
  std::unique_ptr<BatchNormOp> make_batch_norm(const BatchNormConfig& c) override {
    return make_composed_batch_norm(inner_, c);
  }
  std::unique_ptr<Conv2dOp> make_conv2d(const Conv2dConfig& c) override {
    if (!accumulate_conv_grads_) return inner_.make_conv2d(c);
    return std::make_unique<ComposedConvAccumulate>(inner_, c);
  }

 private:
  bool batch_norm_add_relu_, accumulate_conv_grads_;
  ConvolutionFusion fuses_convolution_;
};

}  // namespace dlbench::worker
