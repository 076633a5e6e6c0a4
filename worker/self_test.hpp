// The self-test: the backend this worker trains on, checked against the CPU backend in fp32
// (oneDNN, the reference), op by op and over a few training steps, for each precision it can
// run (the transformer's encoder layer and a few AdamW steps of a small BERT too, where the backend
// has transformer ops); then AdamW's and LAMB's updates, the loss scaler's skip on an injected inf, a replayed step graph against the eager
// step (where the backend captures), and the communicator's collectives across every rank.
// It is how the GPU tests travel: `dlbench-worker --self-test` runs it on the user's GPUs, a
// BenchmarkRun's spec.preflight before its first case.
//
// Error measure: the normwise relative error ||actual - expected|| / ||expected||. Bounds per
// precision (u: the unit roundoff of the type computed in):
//   fp32  1e-5 per layer, 1e-4 for a block: the same roundings, sums in another order.
//   tf32  5e-3 per layer (10-bit mantissa inputs of products, fp32 sums), 2e-2 for a block.
//   amp   5e-3 per layer (fp16, u = 2^-11), 5e-2 for a block; and above 2e-5, so that an op
//         that silently ran in fp32 is caught.
//   bf16  1.5e-2 per layer (u = 2^-9), 0.2 for a block (batch-norm backward subtracts nearly
//         equal terms: PyTorch's own bf16 autocast is 5% off its fp32 on a Bottleneck); and
//         above 2e-4.
// Layers that only select or scale by powers of two (ReLU, max pooling, dropout) get inputs
// exact in every type and must agree exactly. Training steps are compared on the loss; one whole
// step of ResNet-50, and of each image model the worker trains (--model), layer by layer, each
// layer fed the reference's input, against the block bound, naming the first layer off.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "backend.hpp"
#include "communicator.hpp"
#include "dlbench/core/enums.hpp"
#include "layers/layer.hpp"

namespace dlbench::worker {


// ||actual - expected|| / ||expected|| (the norm of the difference when expected is zero).
double normwise_relative_error(const std::vector<float>& actual, const std::vector<float>& expected);

// One layer's forward and backward, once, on any backend: parameters, input and output
// gradient drawn from `seed` in logical order (the same values whatever the backend, layout
// or dtype; the input and dy rounded to `dtype`). With `exact_inputs` every input holds at
// most 8 significant bits, distinct (no ties for max pooling). Results as fp32, logical order.
struct LayerOutcome {
  std::vector<float> y, dx;
  std::vector<std::vector<float>> grads;
  DType y_dtype = DType::fp32, dx_dtype = DType::fp32;
  std::vector<DType> grad_dtypes;
};
// `tokens_per_sequence`: for a layer of a sequence model, whose input is (sequences · tokens, features).
LayerOutcome run_layer_once(Backend& backend, Layer& layer, const Shape& input, DType dtype, std::uint64_t seed,
                            bool exact_inputs, std::int64_t tokens_per_sequence = 0);

enum class CheckOutcome { passed, failed, skipped };
std::string_view to_string(CheckOutcome outcome);

struct SelfTestCheck {
  std::string precision;  // fp32 | tf32 | amp | bf16, or "-" for what does not depend on it
  std::string name;
  double error = 0;  // the measure named in `detail`; 0 for pass/fail checks
  double bound = 0;  // the largest error that passes (0: must be exact, or a pass/fail check)
  double floor = 0;  // the error must exceed this (visibly computed in the half type)
  CheckOutcome outcome = CheckOutcome::passed;
  std::string detail;  // which output was worst, or why it failed or was skipped
};

struct SelfTestSubject {
  // The backend the worker trains on: the communicator works with its memory and stream.
  Backend& primary;
  // A fresh backend under test for one precision, on the primary's device (tf32 is a CUDA
  // math mode, and a captured step graph needs a backend of its own).
  std::function<std::unique_ptr<Backend>(Precision precision)> make;
  std::vector<Precision> precisions;
  // The models the worker trains: each image model's whole step is checked layer by layer, with
  // ResNet-50's (a sequence model's layers are the transformer checks').
  std::vector<Model> models = {};
  // Only the checks whose name contains one of these run; none: every check.
  std::vector<std::string> chosen_checks = {};
};

// DLBENCH_INPUT_RESIZE=device on `backend` (one that overlaps host copies): crops packed by the
// decoding threads' own code (each resize pass, both, neither; enlarging, shrinking, fractional
// boxes; mirrored or not) staged and resized there, against the host pipeline's values in fp32,
// fp16 and bf16, planar and channels last. What differs first, or nothing when every bit agrees.
// The self-test's check "input images resized on the device".
std::optional<std::string> device_resize_differs(Backend& backend);

// Runs every check; `on_check` sees each as it ends (progress for people). Never throws for a
// check's failure: an exception inside a check is that check failing, with its message.
std::vector<SelfTestCheck> run_self_test(const SelfTestSubject& subject, Backend& reference, Communicator& comm,
                                         const std::function<void(const SelfTestCheck&)>& on_check = {});

}  // namespace dlbench::worker
