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

  Shape setup(const Shape& input, SetupContext& ctx) override {
    PoolConfig config{input, kind_, kernel_, stride_, padding_};
    if (global_) {
      config.kernel = input.h();
      config.stride = 1;
    }
    op_ = ctx.backend.make_pool(config);
    const Layout layout = ctx.backend.activation_layout();
    y_ = activation(config.output(), layout);
    dx_ = activation(input, layout);
    workspace_.shape = Shape(static_cast<std::int64_t>((op_->workspace_bytes() + sizeof(float) - 1) / sizeof(float)));
    ctx.arena.request(y_);
    ctx.arena.request(dx_);
    if (workspace_.numel() > 0) ctx.arena.request(workspace_);
    return config.output();
  }

  const Tensor& forward(const Tensor& x, StepContext&) override {
    op_->forward(x, y_, workspace_.data);
    return y_;
  }
  const Tensor& backward(const Tensor& dy, StepContext&) override {
    op_->backward(dy, workspace_.data, dx_);
    return dx_;
  }

 private:
  PoolKind kind_;
  std::int64_t kernel_, stride_, padding_;
  bool global_;
  std::unique_ptr<PoolOp> op_;
  Tensor y_, dx_, workspace_;
};

// AdaptiveAvgPool2d((h, w)): the identity when the input already has that size, which is
// the case for VGG16 and AlexNet at 224×224.
class AdaptiveAvgPool2d final : public Layer {
 public:
  AdaptiveAvgPool2d(std::int64_t height, std::int64_t width) : height_(height), width_(width) {}
  std::string kind() const override { return "AdaptiveAvgPool2d"; }

  Shape setup(const Shape& input, SetupContext& ctx) override {
    identity_ = input.h() == height_ && input.w() == width_;
    const Shape out(input.n(), input.c(), height_, width_);
    if (!identity_) {
      const Layout layout = ctx.backend.activation_layout();
      y_ = activation(out, layout);
      dx_ = activation(input, layout);
      ctx.arena.request(y_);
      ctx.arena.request(dx_);
    }
    return out;
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
