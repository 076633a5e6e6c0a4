#pragma once

#include <memory>

#include "layers/layer.hpp"

namespace dlbench::worker {

// MaxPool2d / AvgPool2d (floor mode); GlobalAvgPool is an AvgPool2d over the whole image.
class Pool2d final : public Layer {
 public:
  Pool2d(PoolKind kind, std::int64_t kernel, std::int64_t stride, std::int64_t padding = 0, bool global = false)
      : kind_(kind), kernel_(kernel), stride_(stride), padding_(padding), global_(global) {}

  std::string kind() const override { return kind_ == PoolKind::max ? "MaxPool2d" : "AvgPool2d"; }

  Tensor setup(const Tensor& input, SetupContext& ctx) override {
    PoolConfig config{input.shape, kind_, kernel_, stride_, padding_, input.dtype};
    if (global_) {  // the whole image, square or not
      config.kernel = Extent2(input.shape.h(), input.shape.w());
      config.stride = 1;
    }
    op_ = ctx.backend.make_pool(config);
    const Layout layout = ctx.backend.activation_layout();
    const Tick t = ctx.arena.next_tick();
    ctx.arena.read(input, t);
    y_ = activation(config.output(), layout, input.dtype);
    dx_ = activation(input.shape, layout, input.dtype);
    ctx.arena.request(y_, t);
    // Backward needs the workspace (oneDNN's arg-max), or x and y again (cuDNN's), or nothing.
    if (op_->backward_reads_activations()) {
      ctx.arena.read(input, t.mirrored());
      ctx.arena.read(y_, t.mirrored());
    }
    ctx.request_input_grad(dx_, t.mirrored());
    ctx.request_saved_state(workspace_, op_->workspace_bytes(), t);
    return y_;
  }

  const Tensor& forward(const Tensor& x, StepContext&) override {
    x_ = &x;
    op_->forward(x, y_, workspace_.data);
    return y_;
  }
  const Tensor& backward(const Tensor& dy, StepContext&) override {
    op_->backward(*x_, y_, dy, workspace_.data, dx_);
    return dx_;
  }

 private:
  PoolKind kind_;
  std::int64_t kernel_, stride_, padding_;
  bool global_;
  std::unique_ptr<PoolOp> op_;
  const Tensor* x_ = nullptr;  // the last forward's input
  Tensor y_, dx_, workspace_;
};

// AdaptiveAvgPool2d((h, w)): the identity when the input already has that size, which is
// the case for VGG16 and AlexNet at 224×224.
class AdaptiveAvgPool2d final : public Layer {
 public:
  AdaptiveAvgPool2d(std::int64_t height, std::int64_t width) : height_(height), width_(width) {}
  std::string kind() const override { return "AdaptiveAvgPool2d"; }

  Tensor setup(const Tensor& input, SetupContext& ctx) override {
    identity_ = input.shape.h() == height_ && input.shape.w() == width_;
    if (identity_) return input;  // a view: takes no tick
    const Shape out(input.shape.n(), input.shape.c(), height_, width_);
    const Layout layout = ctx.backend.activation_layout();
    const Tick t = ctx.arena.next_tick();
    ctx.arena.read(input, t);
    y_ = activation(out, layout, input.dtype);
    dx_ = activation(input.shape, layout, input.dtype);
    ctx.arena.request(y_, t);
    ctx.request_input_grad(dx_, t.mirrored());
    return y_;
  }
  const Tensor& forward(const Tensor& x, StepContext& ctx) override {
    if (identity_) return x;
    ctx.backend.adaptive_avg_pool_forward(x, y_);
    return y_;
  }
  const Tensor& backward(const Tensor& dy, StepContext& ctx) override {
    if (identity_) return dy;
    ctx.backend.adaptive_avg_pool_backward(dy, dx_);
    return dx_;
  }

 private:
  std::int64_t height_, width_;
  bool identity_ = false;
  Tensor y_, dx_;
};

}  // namespace dlbench::worker
