// Trainable parameters live in three flat fp32 buffers (values, gradients, momentum), so
// that the optimizer is one pass and gradient buckets are contiguous slices for allreduce.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensor.hpp"

namespace dlbench::worker {

class Backend;

enum class ParameterInit {
  kaiming_normal_fan_out,  // convolutions (torchvision ResNet and VGG)
  linear_default,          // U(-1/sqrt(fan_in), 1/sqrt(fan_in)) (PyTorch nn.Linear)
  normal_0_01,             // VGG/AlexNet classifier weights
  truncated_normal,        // N(0, init_std²) redrawn outside [-2, 2] (torchvision InceptionV3)
  normal,                  // N(0, init_std²) (BERT's weights and embeddings: std 0.02)
  zeros,
  ones,
};

struct Parameter {
  std::string name;
  Tensor value;
  Tensor grad;
  ParameterInit init = ParameterInit::zeros;
  std::int64_t fan_in = 0;
  std::int64_t fan_out = 0;
  float init_std = 0.0f;  // truncated_normal and normal
  std::int64_t offset = 0;  // into the flat buffers, in elements
};

class ParameterStore {
 public:
  // Takes the model's parameters in order, allocates the flat buffers on `backend` and
  // points every value and grad into them.
  void bind(std::vector<Parameter*> parameters, Backend& backend);
  // Fills every value from its init rule with a generator seeded by `seed` and the
  // parameter's index: the same seed gives the same weights on every backend.
  void initialize(std::uint64_t seed, Backend& backend);

  const std::vector<Parameter*>& parameters() const { return parameters_; }
  std::int64_t count() const { return count_; }
  // AdamW's second moment (its first is the momentum buffer): a fourth buffer, once.
  void allocate_second_moment(Backend& backend);
  // Values, gradients, momentum and, with AdamW, the second moment: fp32 buffers of count() elements.
  std::size_t bytes() const {
    return (second_moment_ ? 4 : 3) * static_cast<std::size_t>(count_) * sizeof(float);
  }
  float* values() const { return values_.get(); }
  float* grads() const { return grads_.get(); }
  float* momentum() const { return momentum_.get(); }
  float* second_moment() const { return second_moment_.get(); }

 private:
  std::vector<Parameter*> parameters_;
  std::int64_t count_ = 0;
  std::shared_ptr<float> values_;
  std::shared_ptr<float> grads_;
  std::shared_ptr<float> momentum_;
  std::shared_ptr<float> second_moment_;
};

}  // namespace dlbench::worker
