#pragma once

#include <memory>

#include "layers/batch_norm2d.hpp"
#include "layers/conv2d.hpp"
#include "layers/relu.hpp"
#include "layers/sequential.hpp"

namespace dlbench::worker {

// The ResNet v1.5 bottleneck: 1×1 → 3×3 (stride here, not in the 1×1 as in v1) → 1×1 with
// expansion 4, batch norm after each conv, and a projection shortcut (1×1 conv + BN) when
// the shape changes. out = relu(main(x) + shortcut(x)).
class Bottleneck final : public Layer {
 public:
  static constexpr std::int64_t kExpansion = 4;

  Bottleneck(std::int64_t in_channels, std::int64_t width, std::int64_t stride) {
    const std::int64_t out_channels = width * kExpansion;
    main_.add<Conv2d>(in_channels, width, 1);
    main_.add<BatchNorm2d>(width);
    main_.add<ReLU>();
    main_.add<Conv2d>(width, width, 3, stride, 1);
    main_.add<BatchNorm2d>(width);
    main_.add<ReLU>();
    main_.add<Conv2d>(width, out_channels, 1);
    main_.add<BatchNorm2d>(out_channels);
    if (stride != 1 || in_channels != out_channels) {
      shortcut_ = std::make_unique<Sequential>();
      shortcut_->add<Conv2d>(in_channels, out_channels, 1, stride);
      shortcut_->add<BatchNorm2d>(out_channels);
    }
  }

  std::string kind() const override { return "Bottleneck"; }
  void collect_parameters(std::vector<Parameter*>& out) override {
    main_.collect_parameters(out);
    if (shortcut_) shortcut_->collect_parameters(out);
  }

  Shape setup(const Shape& input, SetupContext& ctx) override {
    const Shape out = main_.setup(input, ctx);
    if (shortcut_) shortcut_->setup(input, ctx);
    add_ = ctx.backend.make_add(out);
    add_grad_ = ctx.backend.make_add(input);
    relu_ = ctx.backend.make_relu(out);
    const Layout layout = ctx.backend.activation_layout();
    y_ = activation(out, layout);
    dsum_ = activation(out, layout);
    dx_ = activation(input, layout);
    for (Tensor* t : {&y_, &dsum_, &dx_}) ctx.arena.request(*t);
    return out;
  }
  void reset_state(Backend& backend) override {
    main_.reset_state(backend);
    if (shortcut_) shortcut_->reset_state(backend);
  }

  const Tensor& forward(const Tensor& x, StepContext& ctx) override {
    const Tensor& main_out = main_.forward(x, ctx);
    const Tensor& short_out = shortcut_ ? shortcut_->forward(x, ctx) : x;
    add_->forward(main_out, short_out, y_);
    relu_->forward(y_, y_);
    return y_;
  }

  const Tensor& backward(const Tensor& dy, StepContext& ctx) override {
    relu_->backward(y_, dy, dsum_);
    // Both branches read dsum; their input gradients are summed.
    const Tensor& dx_main = main_.backward(dsum_, ctx);
    const Tensor& dx_short = shortcut_ ? shortcut_->backward(dsum_, ctx) : dsum_;
    add_grad_->forward(dx_main, dx_short, dx_);
    return dx_;
  }

  double forward_macs_per_sample() const override {
    return main_.forward_macs_per_sample() + (shortcut_ ? shortcut_->forward_macs_per_sample() : 0.0);
  }

 private:
  Sequential main_;
  std::unique_ptr<Sequential> shortcut_;
  std::unique_ptr<AddOp> add_, add_grad_;
  std::unique_ptr<ReluOp> relu_;
  Tensor y_, dsum_, dx_;
};

}  // namespace dlbench::worker
