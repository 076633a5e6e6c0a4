#pragma once

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "layers/sequential.hpp"
#include "layers/softmax_cross_entropy.hpp"

namespace dlbench::worker {

// A side classifier that trains the layers below it: its input passes through unchanged, the
// head (a Sequential ending in logits) computes its own loss term, weight · cross-entropy, during
// forward, and backward adds the head's input gradient to the one coming from above. InceptionV3's
// AuxLogits with weight 0.4, the auxiliary loss weight of the Inception papers and of the usual
// training recipes (loss = main + 0.4 · aux).
class AuxiliaryClassifier final : public Layer {
 public:
  AuxiliaryClassifier(std::unique_ptr<Sequential> head, float loss_weight)
      : head_(std::move(head)), loss_weight_(loss_weight) {}

  std::string kind() const override { return "AuxiliaryClassifier"; }
  void for_each_child(const std::function<void(const std::string&, Layer&)>& visit) override { visit("", *head_); }

  // Ticks: h (its backward adds the head's input gradient to dy), the head's, then the loss's.
  // dy is read at h's mirror, later than the loss's: output_grad_reader says so.
  Tensor setup(const Tensor& input, SetupContext& ctx) override {
    if (!ctx.input_grad_needed) throw std::invalid_argument("AuxiliaryClassifier: cannot be the first layer");
    const std::optional<Tick> outer_reader = ctx.input_grad_reader;
    h_ = ctx.arena.next_tick();
    ctx.input_grad_reader = h_.mirrored();
    const Tensor logits = head_->setup(input, ctx);
    ctx.input_grad_reader = outer_reader;
    if (logits.shape.rank != 2) {
      throw std::invalid_argument("AuxiliaryClassifier: the head's output " + logits.shape.to_string() +
                                  " is not (batch, classes)");
    }
    loss_.setup(logits, ctx);
    add_ = ctx.backend.make_add(input.shape, input.dtype);
    dx_ = activation(input.shape, ctx.backend.activation_layout(), input.dtype);
    ctx.request_input_grad(dx_, h_.mirrored());
    return input;  // passed through: the next layer reads it
  }
  std::optional<Tick> output_grad_reader() const override { return h_.mirrored(); }
  void reset_state(Backend& backend) override { head_->reset_state(backend); }

  const Tensor& forward(const Tensor& x, StepContext& ctx) override {
    if (ctx.labels == nullptr) throw std::logic_error("AuxiliaryClassifier: the step has no labels");
    const Tensor& logits = head_->forward(x, ctx);
    loss_.forward_backward(logits, ctx.labels, ctx.backend, ctx.gradient_scale,
                           LossTerm{loss_weight_, ctx.loss_terms > 0});
    ++ctx.loss_terms;
    return x;
  }

  const Tensor& backward(const Tensor& dy, StepContext& ctx) override {
    const Tensor& dhead = head_->backward(loss_.dlogits(), ctx);
    add_->forward(dy, dhead, dx_);
    return dx_;
  }

  double forward_macs_per_sample() const override { return head_->forward_macs_per_sample(); }

 private:
  std::unique_ptr<Sequential> head_;
  float loss_weight_;
  SoftmaxCrossEntropy loss_;
  std::unique_ptr<AddOp> add_;
  Tick h_;
  Tensor dx_;
};

}  // namespace dlbench::worker
