// The self-test's whole-step check: one small step of an image model on the device under test,
// layer by layer, each layer fed the reference's input and compared with the reference's output
// and parameter gradients, so that the first layer off is named (docs/worker.md, "The self-test").
// The reference composes what the device fuses, rounds each layer's input as a half-precision
// device's fed copy is rounded, and keeps its traces across precisions (ModelStepReferences).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "backend.hpp"
#include "models/model.hpp"
#include "self_test.hpp"

namespace dlbench::worker {

// The SGD of the self-test's trainers. Its rate warms up over the first 4 of 5 steps: a step graph
// that kept the rate it was captured with (step 2's) would leave the eager steps at step 3. A
// whole-step check's gradients do not depend on it.
inline constexpr SgdConfig kSelfTestSgd{0.01f, 0.9f, 1e-4f, 4};

// One whole step of a model, small, so that each check takes a second or a few on two CPU cores:
// ResNet-50's always (the reference model), and the model the worker trains, whose layers may
// have their own ops (DeepLabV3+'s dilated convolutions, concatenated ASPP branches, bilinear
// resizes and per-pixel loss; InceptionV3's 1×7 and 7×1 convolutions, padded average pools,
// concats within concats and auxiliary classifier).
struct ModelStep {
  Model model;
  Shape input;
  std::int64_t classes;
};

// The models whose whole step the self-test checks: ResNet-50 and each image model of `models`.
std::vector<ModelStep> model_steps(const std::vector<Model>& models);

// The reference's step traces, kept for the precisions checked after the one that made each, and
// each model's initial weights as first drawn, which every later step of that model starts from.
class ModelStepReferences {
 public:
  ModelStepReferences();
  ~ModelStepReferences();
  ModelStepReferences(const ModelStepReferences&) = delete;
  ModelStepReferences& operator=(const ModelStepReferences&) = delete;
  struct Traces;
  Traces& traces() { return *traces_; }

 private:
  std::unique_ptr<Traces> traces_;
};

// What a layer of the step may be off by: `layer`, and `arg_max` for a max pool's backward, whose
// near-ties rank as rounded.
struct ModelStepBounds {
  double layer = 0;
  double arg_max = 0;
};

// `model`'s step on `device`, computing in `dtype` (with loss scaling where `loss_scaled`), against
// `reference` in fp32: the first layer off its bound named, else the worst.
SelfTestCheck model_step_check(const ModelStep& model, Backend& device, Backend& reference, DType dtype,
                               bool loss_scaled, ModelStepBounds bounds, ModelStepReferences& references);

}  // namespace dlbench::worker
