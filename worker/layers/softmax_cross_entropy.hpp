#pragma once

#include <cstdint>

#include "layers/layer.hpp"

namespace dlbench::worker {

// The loss: mean softmax cross-entropy over the batch, and its gradient for the logits.
class SoftmaxCrossEntropy {
 public:
  void setup(const Shape& logits, SetupContext& ctx) {
    dlogits_ = activation(logits, Layout::plain);
    ctx.arena.request(dlogits_);
  }
  float forward_backward(const Tensor& logits, const std::int32_t* labels, Backend& backend) {
    return backend.softmax_cross_entropy(logits, labels, dlogits_);
  }
  const Tensor& dlogits() const { return dlogits_; }

 private:
  Tensor dlogits_;
};

}  // namespace dlbench::worker
