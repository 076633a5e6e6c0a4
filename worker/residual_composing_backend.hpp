// A backend that takes BatchNormConfig::add_relu by composing its inner backend's own unfused ops:
// batch norm, then add + ReLU in place; backward the ReLU's (dz) and then batch norm's from dz.
// The same function as a residual block's own add and ReLU, in the same layers as a device that
// fuses them (cuDNN's CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION), so that the self-test's reference can
// run the device's layers one for one.
#pragma once

#include <memory>
#include <utility>

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
  if (!c.add_relu) return ops.make_batch_norm(c);
  BatchNormConfig unfused = c;
  unfused.add_relu = false;
  return std::make_unique<ComposedBatchNormAddRelu>(ops.make_batch_norm(unfused), ops.make_add_relu(c.input, c.dtype),
                                                    ops.make_relu(c.input, c.dtype));
}

class ResidualComposingBackend final : public DelegatingBackend {
 public:
  explicit ResidualComposingBackend(Backend& inner) : DelegatingBackend(inner) {}
  bool fuses_batch_norm_add_relu() const override { return true; }
  std::unique_ptr<BatchNormOp> make_batch_norm(const BatchNormConfig& c) override {
    return make_composed_batch_norm(inner_, c);
  }
};

}  // namespace dlbench::worker
