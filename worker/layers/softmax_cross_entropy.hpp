#pragma once

#include <cstdint>

#include "layers/layer.hpp"

namespace dlbench::worker {

// The loss: mean softmax cross-entropy over the batch (over its labelled pixels for (N, classes,
// H, W) logits), and its gradient for the logits.
class SoftmaxCrossEntropy {
 public:
  // After the network's setup: the loss takes the last forward tick, and the network's last
  // layer reads dlogits first thing in backward.
  void setup(const Tensor& logits, SetupContext& ctx) {
    const std::optional<Tick> last_layer = ctx.arena.last_tick();
    const Tick t = ctx.arena.next_tick();
    ctx.arena.read(logits, t);
    dlogits_ = activation(logits.shape, ctx.backend.activation_layout(), logits.dtype);
    ctx.arena.request(dlogits_, t);
    if (last_layer) {
      ctx.arena.read(dlogits_, last_layer->mirrored());
    } else {
      ctx.arena.keep_until_step_end(dlogits_);
    }
  }
  // dlogits is multiplied by `*gradient_scale` (loss scaling, in the backend's memory; null: 1)
  // before it is rounded to its dtype.
  // The step's loss so far stays with the backend (Backend::last_loss reads it).
  void forward_backward(const Tensor& logits, const std::int32_t* labels, Backend& backend, const float* gradient_scale,
                        LossTerm term) {
    backend.softmax_cross_entropy(logits, labels, dlogits_, gradient_scale, term);
  }
  const Tensor& dlogits() const { return dlogits_; }

 private:
  Tensor dlogits_;
};

}  // namespace dlbench::worker
