// A batch norm with its ReLU fused as cuDNN's CUDNN_BATCHNORM_OPS_BN_ACTIVATION fuses it, on the
// CPU (fp32): forward normalises with the backend's own unfused op and applies the ReLU in place;
// backward takes the ReLU's mask from forward's output y. `declares` says whether it tells the
// layer so (BatchNormOp::backward_reads_output): undeclared, the memory plan may give y away
// before backward, which the poison mode must catch. With `fuses_residual` the backend also fuses
// a residual block's add and ReLU into its last batch norm, as CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION
// does: y = relu(bn(x) + z), and backward writes z's gradient too.
#pragma once

#include <algorithm>
#include <memory>
#include <vector>

#include "delegating_backend.hpp"

namespace dlbench::worker {

class OutputReadingBatchNorm final : public BatchNormOp {
 public:
  OutputReadingBatchNorm(std::unique_ptr<BatchNormOp> unfused, bool declares, int* residual_forwards = nullptr)
      : unfused_(std::move(unfused)), declares_(declares), residual_forwards_(residual_forwards) {}
  std::size_t workspace_bytes() const override { return unfused_->workspace_bytes(); }
  bool backward_reads_output() const override { return declares_; }
  void forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, BatchNormStatistics& s,
                        void* workspace) override {
    unfused_->forward_training(x, gamma, beta, y, s, workspace);
    float* v = y.as<float>();
    std::transform(v, v + y.numel(), v, [](float a) { return std::max(a, 0.0f); });
  }
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& gamma, const Tensor& beta,
                const BatchNormStatistics& s, Tensor& dx, Tensor& dgamma, Tensor& dbeta, const void* workspace) override {
    std::vector<float> masked(static_cast<std::size_t>(dy.numel()));
    Tensor through_relu = dy;
    through_relu.data = masked.data();
    mask(y, dy, through_relu);
    unfused_->backward(x, y, through_relu, gamma, beta, s, dx, dgamma, dbeta, workspace);
  }
  // The residual (an add of two fp32 values, then the ReLU: the bits of the CPU's add + ReLU op).
  void forward_training_add_relu(const Tensor& x, const Tensor& z, const Tensor& gamma, const Tensor& beta, Tensor& y,
                                 BatchNormStatistics& s, void* workspace) override {
    unfused_->forward_training(x, gamma, beta, y, s, workspace);
    float* v = y.as<float>();
    const float* add = z.as<float>();
    for (std::int64_t i = 0; i < y.numel(); ++i) v[i] = std::max(v[i] + add[i], 0.0f);
    if (residual_forwards_ != nullptr) ++*residual_forwards_;
  }
  void backward_add_relu(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& gamma, const Tensor& beta,
                         const BatchNormStatistics& s, Tensor& dx, Tensor& dz, Tensor& dgamma, Tensor& dbeta,
                         const void* workspace) override {
    mask(y, dy, dz);  // the residual's gradient is the masked one, which the batch norm takes too
    unfused_->backward(x, y, dz, gamma, beta, s, dx, dgamma, dbeta, workspace);
  }

 private:
  static void mask(const Tensor& y, const Tensor& dy, Tensor& out) {
    const float* kept = y.as<float>();
    const float* grad = dy.as<float>();
    float* masked = out.as<float>();
    for (std::int64_t i = 0; i < dy.numel(); ++i) masked[i] = kept[i] > 0.0f ? grad[i] : 0.0f;
  }

  std::unique_ptr<BatchNormOp> unfused_;
  bool declares_;
  int* residual_forwards_;
};

class OutputReadingBatchNormBackend final : public DelegatingBackend {
 public:
  OutputReadingBatchNormBackend(Backend& inner, bool declares, bool fuses_residual = false)
      : DelegatingBackend(inner), declares_(declares), fuses_residual_(fuses_residual) {}
  bool fuses_batch_norm_relu() const override { return true; }
  bool fuses_batch_norm_add_relu() const override { return fuses_residual_; }
  std::unique_ptr<BatchNormOp> make_batch_norm(const BatchNormConfig& c) override {
    if (!c.relu && !c.add_relu) return DelegatingBackend::make_batch_norm(c);
    BatchNormConfig unfused = c;
    unfused.relu = false;
    unfused.add_relu = false;
    return std::make_unique<OutputReadingBatchNorm>(DelegatingBackend::make_batch_norm(unfused), declares_,
                                                    &residual_forwards);
  }
  int residual_forwards = 0;  // forward passes that added a residual

 private:
  bool declares_;
  bool fuses_residual_;
};

}  // namespace dlbench::worker
