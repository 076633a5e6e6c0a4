// Trainable parameters live in three flat fp32 buffers (values, gradients, momentum), so
// that the optimizer is one pass and gradient buckets are contiguous slices for allreduce.
// Each parameter starts on a 256-byte boundary (cudaMalloc's), the gaps zero.
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

// Where a parameter of `elements` values ends in the flat buffers, its padding included: the
// next one starts there. cuDNN's and cuBLAS's tensor-core kernels (and Hopper's bulk copies)
// load 16 bytes at a time from weights they assume aligned; packed end to end, every weight
// after InceptionV3's 10-class auxiliary bias sat 8 bytes off a 16-byte boundary, and tf32's
// step on an H200 stopped with "misaligned address".
inline constexpr std::int64_t kParameterAlignmentElements = 64;  // 256 bytes of fp32
inline constexpr std::int64_t padded_parameter_elements(std::int64_t elements) {
  return (elements + kParameterAlignmentElements - 1) / kParameterAlignmentElements * kParameterAlignmentElements;
}

class ParameterStore {
 public:
  // Takes the model's parameters in order, allocates the flat buffers on `backend` and
  // points every value and grad into them.
  void bind(std::vector<Parameter*> parameters, Backend& backend);
  // Fills every value from its init rule with a generator seeded by `seed` and the
  // parameter's index: the same seed gives the same weights on every backend.
  void initialize(std::uint64_t seed, Backend& backend) { initialize(seed, backend, {}); }
  // The values, in order over all parameters, cut into `shares` runs of about equal length: the
  // ranks of a job each draw one (`share`) and sum them. A parameter that cannot be drawn from the
  // middle (the truncated normal, whose draws per value vary) and the constant rules go whole to
  // the share their first value falls in. Every value has exactly one owner whatever the threads,
  // so that the sum over shares is the whole draw; what a share does not own is left as it is.
  struct Share {
    int share = 0;
    int shares = 1;
  };
  void initialize(std::uint64_t seed, Backend& backend, Share share);

  const std::vector<Parameter*>& parameters() const { return parameters_; }
  // The parameters' values (what a model "has"), not counting the padding between them.
  std::int64_t count() const { return count_; }
  // The flat buffers' length, padding included: what whole-buffer passes run over (optimizers,
  // the loss scale's finiteness check, the first broadcast). The padding stays zero: nothing
  // writes a gradient there, and every optimizer maps a zero value and gradient to zero.
  std::int64_t elements() const { return elements_; }
  // AdamW's second moment (its first is the momentum buffer): a fourth buffer, once.
  void allocate_second_moment(Backend& backend);
  // Values, gradients, momentum and, with AdamW, the second moment: fp32 buffers of elements().
  std::size_t bytes() const {
    return (second_moment_ ? 4 : 3) * static_cast<std::size_t>(elements_) * sizeof(float);
  }
  float* values() const { return values_.get(); }
  float* grads() const { return grads_.get(); }
  float* momentum() const { return momentum_.get(); }
  float* second_moment() const { return second_moment_.get(); }

 private:
  std::vector<Parameter*> parameters_;
  std::int64_t count_ = 0;
  std::int64_t elements_ = 0;
  std::shared_ptr<float> values_;
  std::shared_ptr<float> grads_;
  std::shared_ptr<float> momentum_;
  std::shared_ptr<float> second_moment_;
};

}  // namespace dlbench::worker
