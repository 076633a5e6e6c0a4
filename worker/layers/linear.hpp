#pragma once

#include <memory>
#include <stdexcept>
#include <string>

#include "layers/layer.hpp"

namespace dlbench::worker {

// Linear(in, out): y = x Wᵀ + b, W stored (out, in) like torch.nn.Linear.
class Linear final : public Layer {
 public:
  Linear(std::int64_t in_features, std::int64_t out_features, ParameterInit init = ParameterInit::linear_default)
      : in_(in_features), out_(out_features) {
    weight_ = make_parameter("weight", Shape(out_, in_), init, in_, out_);
    // PyTorch's default draws the bias like the weight; VGG's recipe zeroes it.
    bias_ = make_parameter("bias", Shape(out_), init == ParameterInit::linear_default ? init : ParameterInit::zeros,
                           in_, out_);
  }

  std::string kind() const override { return "Linear"; }
  void collect_parameters(std::vector<Parameter*>& out) override {
    out.push_back(&weight_);
    out.push_back(&bias_);
  }

  Tensor setup(const Tensor& input, SetupContext& ctx) override {
    if (input.numel() != input.shape.n() * in_) {
      throw std::invalid_argument("Linear(" + std::to_string(in_) + ", " + std::to_string(out_) + "): input " +
                                  input.shape.to_string() + " does not have " + std::to_string(in_) +
                                  " features a sample");
    }
    op_ = ctx.backend.make_linear({input.shape.n(), in_, out_, true, input.dtype});
    const Tick t = ctx.arena.next_tick();
    ctx.arena.read(input, t);
    ctx.arena.read(input, t.mirrored());  // weight gradients
    y_ = activation(Shape(input.shape.n(), out_), Layout::plain, input.dtype);
    ctx.arena.request(y_, t);
    input_grad_ = ctx.input_grad_needed;
    if (input_grad_) {
      dx_ = activation(input.shape, Layout::plain, input.dtype);
      ctx.request_input_grad(dx_, t.mirrored());
    }
    return y_;
  }

  const Tensor& forward(const Tensor& x, StepContext&) override {
    x_ = &x;
    op_->forward(x, weight_.value, &bias_.value, y_);
    return y_;
  }
  const Tensor& backward(const Tensor& dy, StepContext& ctx) override {
    op_->backward_weights(*x_, dy, weight_.grad, &bias_.grad);
    ctx.notify({&weight_, &bias_});
    if (input_grad_) op_->backward_data(dy, weight_.value, dx_);
    return dx_;
  }
  double forward_macs_per_sample() const override { return static_cast<double>(in_ * out_); }
  Parameter& weight() { return weight_; }

 private:
  std::int64_t in_, out_;
  bool input_grad_ = true;
  Parameter weight_, bias_;
  std::unique_ptr<LinearOp> op_;
  const Tensor* x_ = nullptr;
  Tensor y_, dx_;
};

// Flatten(N, C, H, W) → (N, C·H·W) in PyTorch's order: features run over C, then H, then W,
// so that a linear layer's weights mean the same as torch.nn.Linear's after torch.flatten
// (weights files, golden tests). With NCHW activations, or a 1×1 image, that is a view; NHWC
// activations are reordered (forward) and the gradient reordered back (backward).
class Flatten final : public Layer {
 public:
  std::string kind() const override { return "Flatten"; }
  Tensor setup(const Tensor& input, SetupContext& ctx) override {
    input_ = input.shape;
    input_layout_ = input.layout;
    const Shape flat(input_.n(), input_.numel() / input_.n());
    const bool view = input.layout != Layout::nhwc || input_.h() * input_.w() == 1;
    if (view) {  // takes no tick
      Tensor out = input;
      out.shape = flat;
      out.layout = Layout::plain;
      return out;
    }
    to_nchw_ = ctx.backend.make_reorder(input_, input.dtype, Layout::nhwc, Layout::nchw);
    to_nhwc_ = ctx.backend.make_reorder(input_, input.dtype, Layout::nchw, Layout::nhwc);
    const Tick t = ctx.arena.next_tick();
    ctx.arena.read(input, t);
    y_ = activation(flat, Layout::plain, input.dtype);
    ctx.arena.request(y_, t);
    input_grad_ = ctx.input_grad_needed;
    if (input_grad_) {
      dx_ = activation(input_, Layout::nhwc, input.dtype);
      ctx.request_input_grad(dx_, t.mirrored());
    }
    return y_;
  }
  const Tensor& forward(const Tensor& x, StepContext&) override {
    if (!to_nchw_) {
      y_ = x;
      y_.shape = Shape(input_.n(), input_.numel() / input_.n());
      y_.layout = Layout::plain;
      return y_;
    }
    Tensor y = y_;
    y.shape = input_;
    y.layout = Layout::nchw;
    to_nchw_->run(x, y);
    return y_;
  }
  const Tensor& backward(const Tensor& dy, StepContext&) override {
    if (!to_nchw_) {
      dx_ = dy;
      dx_.shape = input_;
      dx_.layout = input_layout_;
      return dx_;
    }
    if (!input_grad_) return dx_;
    Tensor dy_nchw = dy;
    dy_nchw.shape = input_;
    dy_nchw.layout = Layout::nchw;
    to_nhwc_->run(dy_nchw, dx_);
    return dx_;
  }

 private:
  Shape input_;
  Layout input_layout_ = Layout::plain;
  bool input_grad_ = true;
  std::unique_ptr<ReorderOp> to_nchw_, to_nhwc_;
  Tensor y_, dx_;
};

// Dropout(p) in training mode (inverted: survivors are scaled by 1/(1-p)).
class Dropout final : public Layer {
 public:
  explicit Dropout(float p, std::uint64_t salt) : site_("", p, salt) {}
  std::string kind() const override { return "Dropout"; }
  Tensor setup(const Tensor& input, SetupContext& ctx) override {
    for (Tensor* t : {&y_, &dx_}) *t = activation(input.shape, ctx.backend.activation_layout(), input.dtype);
    site_.setup(y_.shape, y_.layout);
    const Tick t = ctx.arena.next_tick();
    ctx.arena.read(input, t);
    ctx.arena.request(y_, t);
    ctx.request_input_grad(dx_, t.mirrored());
    return y_;
  }
  const Tensor& forward(const Tensor& x, StepContext& ctx) override {
    site_.forward(x, y_, ctx);
    return y_;
  }
  const Tensor& backward(const Tensor& dy, StepContext& ctx) override {
    site_.backward(dy, dx_, ctx);
    return dx_;
  }
  void collect_step_state(const std::string& prefix, std::vector<DropoutMaskState>& out) override {
    site_.collect(prefix, out);
  }

 private:
  DropoutSite site_;
  Tensor y_, dx_;
};

}  // namespace dlbench::worker
