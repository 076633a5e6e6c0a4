#pragma once

#include <memory>

#include "layers/layer.hpp"

namespace dlbench::worker {

// Conv2d with square kernels, like torch.nn.Conv2d(in, out, k, stride, padding, bias).
class Conv2d final : public Layer {
 public:
  Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel, std::int64_t stride = 1,
         std::int64_t padding = 0, bool bias = false, ParameterInit init = ParameterInit::kaiming_normal_fan_out)
      : in_(in_channels), out_(out_channels), kernel_(kernel), stride_(stride), padding_(padding), has_bias_(bias) {
    weight_ = make_parameter("weight", Shape(out_, in_, kernel_, kernel_), init, in_ * kernel_ * kernel_,
                             out_ * kernel_ * kernel_);
    if (has_bias_) bias_ = make_parameter("bias", Shape(out_), ParameterInit::zeros);
  }

  std::string kind() const override { return "Conv2d"; }
  void collect_parameters(std::vector<Parameter*>& out) override {
    out.push_back(&weight_);
    if (has_bias_) out.push_back(&bias_);
  }

  Tensor setup(const Tensor& input, SetupContext& ctx) override {
    config_ = {input.shape, out_, kernel_, stride_, padding_, has_bias_, input.dtype};
    op_ = ctx.backend.make_conv2d(config_);
    const Layout layout = ctx.backend.activation_layout();
    const Tick t = ctx.arena.next_tick();
    ctx.arena.read(input, t);
    ctx.arena.read(input, t.mirrored());  // weight gradients
    y_ = activation(config_.output(), layout, input.dtype);
    ctx.arena.request(y_, t);
    input_grad_ = ctx.input_grad_needed;
    if (input_grad_) {
      dx_ = activation(input.shape, layout, input.dtype);
      ctx.request_input_grad(dx_, t.mirrored());
    }
    return y_;
  }

  const Tensor& forward(const Tensor& x, StepContext&) override {
    x_ = &x;
    op_->forward(x, weight_.value, has_bias_ ? &bias_.value : nullptr, y_);
    return y_;
  }

  const Tensor& backward(const Tensor& dy, StepContext& ctx) override {
    op_->backward_weights(*x_, dy, weight_.grad, has_bias_ ? &bias_.grad : nullptr);
    if (has_bias_) {
      ctx.notify({&weight_, &bias_});
    } else {
      ctx.notify({&weight_});
    }
    if (input_grad_) op_->backward_data(dy, weight_.value, dx_);
    return dx_;
  }

  double forward_macs_per_sample() const override {
    const Shape o = config_.output();
    return static_cast<double>(o.c() * o.h() * o.w() * in_ * kernel_ * kernel_);
  }

  Parameter& weight() { return weight_; }
  Parameter& bias() { return bias_; }

 private:
  std::int64_t in_, out_, kernel_, stride_, padding_;
  bool has_bias_;
  bool input_grad_ = true;
  Parameter weight_, bias_;
  Conv2dConfig config_;
  std::unique_ptr<Conv2dOp> op_;
  const Tensor* x_ = nullptr;
  Tensor y_, dx_;
};

}  // namespace dlbench::worker
