#pragma once

#include <memory>
#include <stdexcept>
#include <vector>

#include "layers/conv2d.hpp"
#include "layers/layer.hpp"

namespace dlbench::worker {

enum class Then { nothing, relu };

// BatchNorm2d in training mode: batch statistics, running statistics updated with
// PyTorch's momentum 0.1 and unbiased variance. With Then::relu it is BatchNorm2d followed by
// ReLU, in one pass where the backend fuses them (no separate read and write of the
// activation, and backward needs a bit mask instead of the output).
class BatchNorm2d final : public Layer {
 public:
  explicit BatchNorm2d(std::int64_t channels, Then then = Then::nothing, float epsilon = 1e-5f, float momentum = 0.1f)
      : channels_(channels), relu_(then == Then::relu), epsilon_(epsilon), momentum_(momentum) {
    gamma_ = make_parameter("weight", Shape(channels), ParameterInit::ones);
    beta_ = make_parameter("bias", Shape(channels), ParameterInit::zeros);
  }

  std::string kind() const override {
    return residual_grad_ != nullptr ? "BatchNorm2d+Add+ReLU" : relu_ ? "BatchNorm2d+ReLU" : "BatchNorm2d";
  }

  // A residual block's last batch norm, where the backend fuses the block's add and ReLU into it
  // (Backend::fuses_batch_norm_add_relu): y = relu(bn(x) + z). Called before each setup (null: not
  // fused); the block gives z before each forward (residual_input) and plans `dz`, where backward
  // writes z's gradient: their lifetimes are the block's, which knows who else reads them.
  void fuse_residual_add_relu(Tensor* dz) {
    if (dz != nullptr && relu_) throw std::logic_error("a batch norm with its own ReLU cannot also take a residual");
    residual_grad_ = dz;
  }
  void residual_input(const Tensor& z) { residual_ = &z; }
  // Deferred to the convolutions around it (BatchNormConfig::deferred) from the next setup on: a
  // residual block wires the convolution before to write sums() and the one after to read
  // relu(x · scale + shift) through scale_shift(). Forward then writes no y and returns x itself.
  void defer_to_convolutions(bool deferred) {
    if (deferred && (!relu_ || residual_grad_ != nullptr)) {
      throw std::logic_error("only a batch norm with its own ReLU and no residual is deferred");
    }
    deferred_ = deferred;
  }
  bool deferred() const { return deferred_; }
  // From the next setup on, forward takes the batch's statistics from sums(), which the convolution
  // before writes (BatchNormConfig::from_sums), instead of reading x for them: a residual block's
  // last batch norm, with the residual fused in.
  void take_statistics_from_convolution(bool from_sums) {
    if (from_sums && residual_grad_ == nullptr) {
      throw std::logic_error("only a batch norm with the residual fused in takes its statistics from the convolution");
    }
    from_sums_ = from_sums;
  }
  // Deferred, from the next setup on: the convolution after computes this batch norm's gradients
  // with its data gradient (FusedConv2dOp::backward_data_batch_norm), and backward applies the
  // coefficients it left (BatchNormOp::backward_deferred_apply): as_input_of_convolution() is what
  // that convolution is given.
  void take_gradients_from_convolution(bool from_convolution) {
    if (from_convolution && !deferred_) throw std::logic_error("only a deferred batch norm takes its gradients from a convolution");
    gradients_from_convolution_ = from_convolution;
  }
  bool takes_gradients_from_convolution() const { return gradients_from_convolution_; }
  BatchNormBeforeConvolution as_input_of_convolution() { return {&stats_, &gamma_, &beta_, &coefficients_}; }
  Tensor& sums() { return stats_.sums; }
  const Tensor& scale_shift() const { return scale_shift_; }
  void collect_parameters(std::vector<Parameter*>& out) override {
    out.push_back(&gamma_);
    out.push_back(&beta_);
  }

  Tensor setup(const Tensor& input, SetupContext& ctx) override {
    if (deferred_) return setup_deferred(input, ctx);
    const bool fused = relu_ && ctx.backend.fuses_batch_norm_relu();
    BatchNormConfig config{input.shape, epsilon_, input.dtype, fused, momentum_, residual_grad_ != nullptr};
    config.from_sums = from_sums_;
    op_ = ctx.backend.make_batch_norm(config);
    const Layout layout = ctx.backend.activation_layout();
    const Tick t = ctx.arena.next_tick();
    ctx.arena.read(input, t);
    if (from_sums_) ctx.arena.read(stats_.sums, t);  // the convolution before requested them at its tick
    ctx.arena.read(input, t.mirrored());
    y_ = activation(input.shape, layout, input.dtype);
    dx_ = activation(input.shape, layout, input.dtype);
    ctx.request_saved_state(workspace_, op_->workspace_bytes(), t);
    for (Tensor* s : {&stats_.mean, &stats_.spread, &stats_.running_mean, &stats_.running_var}) s->shape = Shape(channels_);
    ctx.arena.request(y_, t);
    if (op_->backward_reads_output()) ctx.arena.read(y_, t.mirrored());  // after y_ has its buffer
    if (relu_ && !fused) {
      // ReLU in place on y; its backward reads y and writes the gradient batch norm reads.
      relu_op_ = ctx.backend.make_relu(input.shape, input.dtype);
      ctx.arena.read(y_, t.mirrored());  // after y_ has its buffer
      drelu_ = activation(input.shape, layout, input.dtype);
      ctx.arena.request(drelu_, t.mirrored());
      ctx.arena.read(drelu_, t.mirrored());
    }
    for (Tensor* s : {&stats_.mean, &stats_.spread}) {
      ctx.arena.request(*s, t);
      ctx.arena.read(*s, t.mirrored());
    }
    ctx.arena.request(stats_.running_mean);  // state across steps
    ctx.arena.request(stats_.running_var);
    ctx.request_input_grad(dx_, t.mirrored());
    return y_;
  }

  void reset_state(Backend& backend) override {
    const std::vector<float> ones(static_cast<std::size_t>(channels_), 1.0f);
    backend.copy_from_host(stats_.running_var.as<float>(), ones.data(), ones.size() * sizeof(float));
  }

  const Tensor& forward(const Tensor& x, StepContext&) override {
    x_ = &x;
    if (deferred_) {
      op_->forward_deferred(stats_.sums, gamma_.value, beta_.value, scale_shift_, stats_);
      return x;
    }
    if (residual_grad_ != nullptr) {
      op_->forward_training_add_relu(x, *residual_, gamma_.value, beta_.value, y_, stats_, workspace_.data);
      return y_;
    }
    op_->forward_training(x, gamma_.value, beta_.value, y_, stats_, workspace_.data);
    if (relu_op_) relu_op_->forward(y_, y_);
    return y_;
  }

  const Tensor& backward(const Tensor& dy, StepContext& ctx) override {
    if (deferred_) {
      if (gradients_from_convolution_) {  // dy: the convolution after masked it, and left dγ, dβ and the coefficients
        op_->backward_deferred_apply(*x_, dy, coefficients_, dx_);
      } else {
        op_->backward_deferred(*x_, dy, gamma_.value, beta_.value, stats_, dx_, gamma_.grad, beta_.grad);
      }
      ctx.notify({&gamma_, &beta_});
      return dx_;
    }
    if (residual_grad_ != nullptr) {
      op_->backward_add_relu(*x_, y_, dy, gamma_.value, beta_.value, stats_, dx_, *residual_grad_, gamma_.grad,
                             beta_.grad, workspace_.data);
      ctx.notify({&gamma_, &beta_});
      return dx_;
    }
    const Tensor* grad = &dy;
    if (relu_op_) {
      relu_op_->backward(y_, dy, drelu_);
      grad = &drelu_;
    }
    op_->backward(*x_, y_, *grad, gamma_.value, beta_.value, stats_, dx_, gamma_.grad, beta_.grad, workspace_.data);
    ctx.notify({&gamma_, &beta_});
    return dx_;
  }

  const Tensor& running_mean() const { return stats_.running_mean; }
  const Tensor& running_var() const { return stats_.running_var; }

 private:
  // Deferred: forward reads the convolution before's sums (it requested them at its tick) and
  // writes scale_shift, which the convolution after reads forward and backward (it declares so);
  // backward reads x again for the ReLU's mask and x̂. No y, no mask of its own.
  Tensor setup_deferred(const Tensor& input, SetupContext& ctx) {
    BatchNormConfig config{input.shape, epsilon_, input.dtype, true, momentum_, false};
    config.deferred = true;
    op_ = ctx.backend.make_batch_norm(config);
    relu_op_.reset();
    const Tick t = ctx.arena.next_tick();
    ctx.arena.read(stats_.sums, t);
    ctx.arena.read(input, t.mirrored());
    scale_shift_ = Tensor{nullptr, Shape(2, channels_), Layout::plain, input.dtype};
    ctx.arena.request(scale_shift_, t);  // the convolution after declares its reads
    for (Tensor* s : {&stats_.mean, &stats_.spread, &stats_.running_mean, &stats_.running_var}) s->shape = Shape(channels_);
    for (Tensor* s : {&stats_.mean, &stats_.spread}) {
      ctx.arena.request(*s, t);
      ctx.arena.read(*s, t.mirrored());
    }
    ctx.arena.request(stats_.running_mean);
    ctx.arena.request(stats_.running_var);
    if (gradients_from_convolution_) {
      // Written by the convolution after, whose setup comes after this one: (3, C) floats, planned
      // for the whole step rather than between two ticks this setup cannot both see.
      coefficients_ = Tensor{nullptr, Shape(3, channels_), Layout::plain, DType::fp32};
      ctx.arena.request(coefficients_);
    }
    dx_ = activation(input.shape, ctx.backend.activation_layout(), input.dtype);
    ctx.request_input_grad(dx_, t.mirrored());
    return input;
  }

  std::int64_t channels_;
  bool relu_;
  bool deferred_ = false;
  bool from_sums_ = false;  // the statistics from the convolution before's sums
  bool gradients_from_convolution_ = false;  // deferred: dγ, dβ and the coefficients from the convolution after
  float epsilon_, momentum_;
  Parameter gamma_, beta_;
  std::unique_ptr<BatchNormOp> op_;
  std::unique_ptr<ReluOp> relu_op_;  // ReLU after batch norm where the backend does not fuse them
  const Tensor* x_ = nullptr;
  const Tensor* residual_ = nullptr;  // z, with a fused residual
  Tensor* residual_grad_ = nullptr;   // dz: the block's, set by fuse_residual_add_relu
  Tensor y_, dx_, drelu_, workspace_;
  Tensor scale_shift_;   // deferred: (2, C)
  Tensor coefficients_;  // deferred, gradients from the convolution after: (3, C) fp32
  BatchNormStatistics stats_;
};

}  // namespace dlbench::worker
