// A batch norm with its ReLU fused as cuDNN's CUDNN_BATCHNORM_OPS_BN_ACTIVATION fuses it, on the
// CPU (fp32): forward normalises with the backend's own unfused op and applies the ReLU in place;
// backward takes the ReLU's mask from forward's output y. `declares` says whether it tells the
// layer so (BatchNormOp::backward_reads_output): undeclared, the memory plan may give y away
// before backward, which the poison mode must catch.
#pragma once

#include <algorithm>
#include <memory>
#include <vector>

#include "delegating_backend.hpp"

namespace dlbench::worker {

class OutputReadingBatchNorm final : public BatchNormOp {
 public:
  OutputReadingBatchNorm(std::unique_ptr<BatchNormOp> unfused, bool declares)
      : unfused_(std::move(unfused)), declares_(declares) {}
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
    const float* out = y.as<float>();
    const float* grad = dy.as<float>();
    for (std::size_t i = 0; i < masked.size(); ++i) masked[i] = out[i] > 0.0f ? grad[i] : 0.0f;
    Tensor through_relu = dy;
    through_relu.data = masked.data();
    unfused_->backward(x, y, through_relu, gamma, beta, s, dx, dgamma, dbeta, workspace);
  }

 private:
  std::unique_ptr<BatchNormOp> unfused_;
  bool declares_;
};

class OutputReadingBatchNormBackend final : public DelegatingBackend {
 public:
  OutputReadingBatchNormBackend(Backend& inner, bool declares) : DelegatingBackend(inner), declares_(declares) {}
  bool fuses_batch_norm_relu() const override { return true; }
  std::unique_ptr<BatchNormOp> make_batch_norm(const BatchNormConfig& c) override {
    if (!c.relu) return DelegatingBackend::make_batch_norm(c);
    BatchNormConfig unfused = c;
    unfused.relu = false;
    return std::make_unique<OutputReadingBatchNorm>(DelegatingBackend::make_batch_norm(unfused), declares_);
  }

 private:
  bool declares_;
};

}  // namespace dlbench::worker
