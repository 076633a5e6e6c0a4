#pragma once

#include <memory>

#include "layers/layer.hpp"

namespace dlbench::worker {

// ReLU, in place like torchvision's ReLU(inplace=True): the output overwrites the input,
// which no layer in these models reads again (backward uses the output).
class ReLU final : public Layer {
 public:
  std::string kind() const override { return "ReLU"; }

  Tensor setup(const Tensor& input, SetupContext& ctx) override {
    op_ = ctx.backend.make_relu(input.shape, input.dtype);
    const Tick t = ctx.arena.next_tick();
    ctx.arena.read(input, t);
    ctx.arena.read(input, t.mirrored());  // backward reads the output, which is the input's buffer
    dx_ = activation(input.shape, ctx.backend.activation_layout(), input.dtype);
    ctx.request_input_grad(dx_, t.mirrored());
    return input;  // in place
  }

  const Tensor& forward(const Tensor& x, StepContext&) override {
    y_ = x;
    op_->forward(x, y_);
    return y_;
  }

  const Tensor& backward(const Tensor& dy, StepContext&) override {
    op_->backward(y_, dy, dx_);
    return dx_;
  }

 private:
  std::unique_ptr<ReluOp> op_;
  Tensor y_, dx_;
};

}  // namespace dlbench::worker
