#pragma once

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>

#include "layers/layer.hpp"

namespace dlbench::worker {

// torch.nn.Conv2d's options besides the channels; one number for a kernel or padding means both axes.
struct ConvSpec {
  Extent2 kernel{1};
  std::int64_t stride = 1;
  Extent2 padding{0};
  std::int64_t dilation = 1;
  bool bias = false;
  ParameterInit init = ParameterInit::kaiming_normal_fan_out;
  float init_std = 0.0f;  // ParameterInit::truncated_normal only
};

// The deferred batch norm before a fused convolution whose data gradient takes that batch norm's
// gradients (FusedConv2dOp::backward_data_batch_norm): what the convolution's backward reads of
// it (its statistics, γ and β) and writes for it (dγ, dβ and its input gradient's coefficients,
// which its own backward then applies).
struct BatchNormBeforeConvolution {
  const BatchNormStatistics* statistics = nullptr;
  Parameter* gamma = nullptr;
  Parameter* beta = nullptr;
  Tensor* coefficients = nullptr;  // (3, C) fp32, planned for the whole step by the batch norm
};

// Conv2d like torch.nn.Conv2d(in, out, kernel, stride, padding, dilation, bias).
class Conv2d final : public Layer {
 public:
  Conv2d(std::int64_t in_channels, std::int64_t out_channels, const ConvSpec& spec)
      : in_(in_channels), out_(out_channels), spec_(spec) {
    const std::int64_t taps = spec_.kernel.h * spec_.kernel.w;
    weight_ = make_parameter("weight", Shape(out_, in_, spec_.kernel.h, spec_.kernel.w), spec_.init, in_ * taps,
                             out_ * taps);
    weight_.init_std = spec_.init_std;
    if (spec_.bias) bias_ = make_parameter("bias", Shape(out_), ParameterInit::zeros);
  }
  Conv2d(std::int64_t in_channels, std::int64_t out_channels, std::int64_t kernel, std::int64_t stride = 1,
         std::int64_t padding = 0, bool bias = false, ParameterInit init = ParameterInit::kaiming_normal_fan_out)
      : Conv2d(in_channels, out_channels,
               ConvSpec{.kernel = kernel, .stride = stride, .padding = padding, .bias = bias, .init = init}) {}

  std::string kind() const override { return "Conv2d"; }
  void collect_parameters(std::vector<Parameter*>& out) override {
    out.push_back(&weight_);
    if (spec_.bias) out.push_back(&bias_);
  }

  // This layer's convolution of an input of `shape` and `dtype`.
  Conv2dConfig config_for(const Shape& shape, DType dtype) const {
    return {shape, out_, spec_.kernel, spec_.stride, spec_.padding, spec_.bias, dtype, spec_.dilation};
  }

  Tensor setup(const Tensor& input, SetupContext& ctx) override {
    config_ = config_for(input.shape, input.dtype);
    const Shape out = config_.output();
    if (out.h() < 1 || out.w() < 1) {
      throw std::invalid_argument("Conv2d: a " + std::to_string(spec_.kernel.h) + "x" + std::to_string(spec_.kernel.w) +
                                  " kernel does not fit a " + std::to_string(input.shape.h()) + "x" +
                                  std::to_string(input.shape.w()) + " input; use larger images");
    }
    op_ = ctx.backend.make_conv2d(config_);
    const Layout layout = ctx.backend.activation_layout();
    const Tick t = ctx.arena.next_tick();
    tick_ = t;
    ctx.arena.read(input, t);
    ctx.arena.read(input, t.mirrored());  // weight gradients
    y_ = activation(config_.output(), layout, input.dtype);
    ctx.arena.request(y_, t);
    if (input_scale_shift_ != nullptr) {  // the deferred batch norm's, written at its tick before this one
      ctx.arena.read(*input_scale_shift_, t);
      ctx.arena.read(*input_scale_shift_, t.mirrored());  // the filter gradient normalises x again
    }
    if (output_sums_ != nullptr) {
      // Written here, read by the deferred batch norm after at its own tick.
      *output_sums_ = Tensor{nullptr, Shape(2, out_), Layout::plain, DType::fp32};
      ctx.arena.request(*output_sums_, t);
    }
    if (input_batch_norm_) {  // the data gradient reads the batch norm's statistics (x is read above)
      if (accumulate_into_ != nullptr) throw std::logic_error("Conv2d: a data gradient through a batch norm does not accumulate");
      ctx.arena.read(input_batch_norm_->statistics->mean, t.mirrored());
      ctx.arena.read(input_batch_norm_->statistics->spread, t.mirrored());
    }
    input_grad_ = ctx.input_grad_needed;
    // Accumulating, the input gradient goes into a buffer its owner plans (a residual block's).
    if (input_grad_ && accumulate_into_ == nullptr) {
      dx_ = activation(input.shape, layout, input.dtype);
      ctx.request_input_grad(dx_, t.mirrored());
    }
    return y_;
  }

  const Tensor& forward(const Tensor& x, StepContext&) override {
    x_ = &x;
    if (fused_) {
      fused_->forward(x, input_scale_shift_, weight_.value, y_, output_sums_);
      return y_;
    }
    op_->forward(x, weight_.value, spec_.bias ? &bias_.value : nullptr, y_);
    return y_;
  }

  const Tensor& backward(const Tensor& dy, StepContext& ctx) override {
    if (fused_ && input_scale_shift_ != nullptr) {
      fused_->backward_weights(*x_, input_scale_shift_, dy, weight_.grad);
    } else {
      op_->backward_weights(*x_, dy, weight_.grad, spec_.bias ? &bias_.grad : nullptr);
    }
    if (spec_.bias) {
      ctx.notify({&weight_, &bias_});
    } else {
      ctx.notify({&weight_});
    }
    if (!input_grad_) return dx_;
    if (accumulate_into_ != nullptr) {
      op_->backward_data_accumulate(dy, weight_.value, *accumulate_into_);
      return *accumulate_into_;
    }
    if (input_batch_norm_) {  // dx_: the gradient through the batch norm's ReLU, for its backward
      const BatchNormBeforeConvolution& bn = *input_batch_norm_;
      fused_->backward_data_batch_norm(dy, weight_.value, *x_, *bn.statistics, bn.gamma->value, bn.beta->value, dx_,
                                       bn.gamma->grad, bn.beta->grad, *bn.coefficients);
      return dx_;
    }
    op_->backward_data(dy, weight_.value, dx_);
    return dx_;
  }

  // From the next setup on, backward adds the input gradient into `target` (another branch's
  // gradient of the same input, which the caller plans and which must be written before this
  // layer's backward) instead of writing a buffer of its own; null: its own again. Only where
  // the backend accumulates_conv_input_grad().
  void accumulate_input_grad_into(Tensor* target) { accumulate_into_ = target; }
  // From the next setup on, forward (and the filter gradient) run `fused` (Backend::make_fused_conv2d,
  // made for config_for this layer's input) where it is not null: `input_scale_shift` is the deferred
  // batch norm's before it, whose relu(x · scale + shift) it reads as its input (null: x as it is);
  // `output_sums` the deferred batch norm's after it, which forward writes (null: none). The data
  // gradient stays the plain convolution's, unless `input_batch_norm` is given (then the op must
  // fuse_input_batch_norm_gradients): it is the batch norm before, whose gradients the data
  // gradient takes (the batch norm is told so too). A residual block wires these with its batch norms.
  void fuse(std::unique_ptr<FusedConv2dOp> fused, const Tensor* input_scale_shift, Tensor* output_sums,
            std::optional<BatchNormBeforeConvolution> input_batch_norm = std::nullopt) {
    if (fused && spec_.bias) throw std::logic_error("Conv2d: a fused convolution has no bias");
    if (input_batch_norm && !(fused && input_scale_shift != nullptr && fused->fuses_input_batch_norm_gradients())) {
      throw std::logic_error("Conv2d: only a fused convolution reading a normalised input takes its batch norm's gradients");
    }
    fused_ = std::move(fused);
    input_scale_shift_ = fused_ ? input_scale_shift : nullptr;
    output_sums_ = fused_ ? output_sums : nullptr;
    input_batch_norm_ = fused_ ? input_batch_norm : std::nullopt;
  }
  bool fused() const { return fused_ != nullptr; }
  // The buffer backward writes the input gradient into when it does not accumulate.
  Tensor& input_grad_buffer() { return dx_; }
  // Its tick (after setup): forward runs at it, backward at its mirror.
  Tick tick() const { return tick_; }

  double forward_macs_per_sample() const override {
    const Shape o = config_.output();
    return static_cast<double>(o.c() * o.h() * o.w() * in_ * spec_.kernel.h * spec_.kernel.w);
  }

  Parameter& weight() { return weight_; }
  Parameter& bias() { return bias_; }

 private:
  std::int64_t in_, out_;
  ConvSpec spec_;
  bool input_grad_ = true;
  Parameter weight_, bias_;
  Conv2dConfig config_;
  std::unique_ptr<Conv2dOp> op_;
  std::unique_ptr<FusedConv2dOp> fused_;      // forward and the filter gradient, where fused
  const Tensor* input_scale_shift_ = nullptr;  // the deferred batch norm's before, if any
  Tensor* output_sums_ = nullptr;              // the deferred batch norm's after, if any
  std::optional<BatchNormBeforeConvolution> input_batch_norm_;  // whose gradients the data gradient takes
  const Tensor* x_ = nullptr;
  Tensor y_, dx_;
  Tensor* accumulate_into_ = nullptr;
  Tick tick_;
};

}  // namespace dlbench::worker
