#include "self_test.hpp"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "check_verdict.hpp"
#include "input/image_transform.hpp"
#include "input/image_packing.hpp"
#include "input/packed_images.hpp"
#include "layers/batch_norm2d.hpp"
#include "layers/bottleneck.hpp"
#include "layers/conv2d.hpp"
#include "layers/linear.hpp"
#include "layers/pool2d.hpp"
#include "layers/relu.hpp"
#include "layers/transformer_encoder_layer.hpp"
#include "model_step_check.hpp"
#include "models/bert.hpp"
#include "models/model.hpp"
#include "models/small_conv_net.hpp"
#include "parameters.hpp"
#include "trainer.hpp"

namespace dlbench::worker {

double normwise_relative_error(const std::vector<float>& actual, const std::vector<float>& expected) {
  if (actual.size() != expected.size()) return std::numeric_limits<double>::infinity();
  double diff = 0, norm = 0;
  for (std::size_t i = 0; i < expected.size(); ++i) {
    const double d = static_cast<double>(actual[i]) - static_cast<double>(expected[i]);
    diff += d * d;
    norm += static_cast<double>(expected[i]) * static_cast<double>(expected[i]);
  }
  // NaN anywhere makes the error NaN, which fails every bound.
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

std::string_view to_string(CheckOutcome outcome) {
  switch (outcome) {
    case CheckOutcome::passed: return "passed";
    case CheckOutcome::failed: return "failed";
    case CheckOutcome::skipped: return "skipped";
  }
  return "failed";
}

std::string format_error(double e) {
  std::ostringstream s;
  s.precision(2);
  s << std::scientific << e;
  return s.str();
}

SelfTestCheck bounded(double error, double bound, std::string detail) {
  SelfTestCheck c;
  c.error = error;
  c.bound = bound;
  c.detail = std::move(detail);
  if (std::isnan(error) || error > bound) {
    c.outcome = CheckOutcome::failed;
    c.detail += (c.detail.empty() ? "" : ": ") + std::string("off by ") + format_error(error) + ", bound " +
                format_error(bound);
  }
  return c;
}

SelfTestCheck verdict(bool ok, std::string detail) {
  SelfTestCheck c;
  c.outcome = ok ? CheckOutcome::passed : CheckOutcome::failed;
  c.detail = std::move(detail);
  return c;
}

LayerOutcome run_layer_once(Backend& backend, Layer& layer, const Shape& input, DType dtype, std::uint64_t seed,
                            bool exact_inputs, std::int64_t tokens_per_sequence) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<Parameter*> params;
  layer.collect_parameters(params);
  ParameterStore store;
  store.bind(params, backend);
  for (Parameter* p : store.parameters()) {
    std::vector<float> values(static_cast<std::size_t>(p->value.numel()));
    for (float& v : values) v = u(rng);
    backend.copy_from_host(p->value.data, values.data(), values.size() * sizeof(float));
  }
  Arena arena;
  Tensor x = activation(input, backend.activation_layout(), dtype);
  arena.request(x);
  SetupContext setup{backend, arena, true};
  setup.tokens_per_sequence = tokens_per_sequence;
  const Tensor y_description = layer.setup(x, setup);
  Tensor dy = activation(y_description.shape, backend.activation_layout(), dtype);
  arena.request(dy);
  arena.commit(backend);
  layer.reset_state(backend);
  std::vector<float> x_host(static_cast<std::size_t>(x.numel())), dy_host(static_cast<std::size_t>(dy.numel()));
  for (float& v : x_host) v = u(rng);
  for (float& v : dy_host) v = u(rng);
  if (exact_inputs) {
    // Distinct multiples of 2^-7 in [-1, 1) (no ties for max pooling; at most 256 of them),
    // dy in multiples of 2^-6: every value has at most 8 significant bits.
    if (x_host.size() > 256) throw std::invalid_argument("exact inputs: at most 256 input values");
    std::vector<std::size_t> order(x_host.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::shuffle(order.begin(), order.end(), rng);
    for (std::size_t rank = 0; rank < order.size(); ++rank) {
      x_host[order[rank]] = (static_cast<float>(rank) - 128.0f) / 128.0f;
    }
    for (float& v : dy_host) v = std::round(v * 64.0f) / 64.0f;
  }
  upload(backend, x, x_host);
  upload(backend, dy, dy_host);

  StepContext ctx{backend, 7, 0, {}};
  LayerOutcome out;
  const Tensor& y = layer.forward(x, ctx);
  out.y = download(backend, y);
  out.y_dtype = y.dtype;
  const Tensor& dx = layer.backward(dy, ctx);
  out.dx = download(backend, dx);
  out.dx_dtype = dx.dtype;
  for (Parameter* p : store.parameters()) {
    out.grads.push_back(download(backend, p->grad));
    out.grad_dtypes.push_back(p->grad.dtype);
  }
  backend.synchronize();
  return out;
}

namespace {

struct Bounds {
  double layer = 1e-5;
  double block = 1e-4;
  double relu_block = 1e-4;  // a block whose backward goes through ReLU masks that rounding can flip
  double floor = 0;
  double training = 1e-4;  // relative difference of the loss, per step
  // Each layer of a model's whole step, fed the reference's input. In fp32 cuDNN's search may
  // take an FFT or Winograd algorithm (FMA only, as PyTorch's benchmark mode may): an H200 gave
  // InceptionV3's 5x5 AuxLogits.conv1 (3,200 products an output) 2.91e-4 where every other layer
  // of five models kept under 1e-4. A wrong index or stale memory is off by 1e-2 and more.
  double model_step = 5e-4;
};

// A bottleneck's backward in a half type is dominated by ReLU masks that rounding flips, so its
// error grows as the square root of the unit roundoff, not with it: with every value rounded at each op's
// boundary and nothing else wrong, the bottleneck check's gradients in fp64 arithmetic are off by
// up to 8.7e-2 in fp16 and 0.18 in bf16 over three draws (bench/bottleneck_half_numerics.py), and
// an H200 gave 9.1e-2 and 0.16. tf32 rounds the convolutions' operands to fp16's 10 mantissa
// bits: 7.7e-2 emulated, 4.1e-2 on an H200 in NHWC, so it shares amp's bound. A wrong block is off
// by its whole size.
Bounds bounds_for(Precision precision) {
  switch (precision) {
    case Precision::tf32: return {5e-3, 2e-2, 0.15, 0, 1e-2, 2e-2};
    case Precision::amp: return {5e-3, 5e-2, 0.15, 2e-5, 1e-2, 5e-2};
    case Precision::bf16: return {1.5e-2, 0.2, 0.3, 2e-4, 2e-2, 0.2};
    case Precision::fp32: break;
  }
  return {};
}

enum class Kind { rounding, exact, block, relu_block };

struct LayerCheck {
  std::string name;
  std::function<std::unique_ptr<Layer>()> make;
  Shape input;
  Kind kind = Kind::rounding;
  // Gradients that are zero in exact arithmetic (attention's key bias: a softmax row does not
  // change when one value is added to all of it), so any two computations give different noise.
  // They are held to that noise's size against the largest gradient instead of relative error.
  std::vector<std::size_t> zero_gradients = {};
};

std::vector<LayerCheck> layer_checks() {
  return {
      {"conv 3x3 stride 1 with bias", [] { return std::make_unique<Conv2d>(16, 32, 3, 1, 1, true); }, Shape(2, 16, 9, 9)},
      {"conv 1x1 stride 2", [] { return std::make_unique<Conv2d>(32, 16, 1, 2, 0); }, Shape(2, 32, 8, 8)},
      {"conv 7x7 stride 2 (stem)", [] { return std::make_unique<Conv2d>(3, 16, 7, 2, 3); }, Shape(2, 3, 32, 32)},
      // DeepLabV3+'s atrous convolutions and InceptionV3's factorised 7×7 (1×7, padding 0×3).
      {"conv 3x3 dilation 2",
       [] { return std::make_unique<Conv2d>(16, 16, ConvSpec{.kernel = 3, .padding = 2, .dilation = 2}); },
       Shape(2, 16, 9, 9)},
      {"conv 1x7 padding 0x3",
       [] { return std::make_unique<Conv2d>(16, 24, ConvSpec{.kernel = {1, 7}, .padding = {0, 3}}); },
       Shape(2, 16, 9, 9)},
      {"batch norm", [] { return std::make_unique<BatchNorm2d>(24); }, Shape(4, 24, 6, 6)},
      {"batch norm + relu", [] { return std::make_unique<BatchNorm2d>(24, Then::relu); }, Shape(4, 24, 6, 6)},
      {"relu", [] { return std::make_unique<ReLU>(); }, Shape(2, 8, 4, 4), Kind::exact},
      {"max pool 3x3 stride 2", [] { return std::make_unique<Pool2d>(PoolKind::max, 3, 2, 1); }, Shape(1, 8, 5, 5),
       Kind::exact},
      // AlexNet's and InceptionV3's: unpadded, a window left over at the edge.
      {"max pool 3x3 stride 2 unpadded", [] { return std::make_unique<Pool2d>(PoolKind::max, 3, 2); },
       Shape(1, 4, 8, 8), Kind::exact},
      {"average pool 2x2", [] { return std::make_unique<Pool2d>(PoolKind::average, 2, 2); }, Shape(2, 16, 8, 8)},
      // InceptionV3's pooling branches: padding counted in the average (PyTorch's default).
      {"average pool 3x3 stride 1 padded", [] { return std::make_unique<Pool2d>(PoolKind::average, 3, 1, 1); },
       Shape(2, 16, 8, 8)},
      {"adaptive average pool", [] { return std::make_unique<AdaptiveAvgPool2d>(3, 3); }, Shape(2, 16, 7, 7)},
      {"linear", [] { return std::make_unique<Linear>(64, 10); }, Shape(8, 64)},
      {"dropout p=0.5", [] { return std::make_unique<Dropout>(0.5f, 3); }, Shape(4, 64), Kind::exact},
      {"bottleneck with projection", [] { return std::make_unique<Bottleneck>(32, 16, 2); }, Shape(8, 32, 16, 16),
       Kind::relu_block},
  };
}

SelfTestCheck compare_layer(const LayerCheck& lc, const LayerOutcome& got, const LayerOutcome& want,
                            const std::string& precision, DType dtype, const Bounds& b) {
  SelfTestCheck check;
  check.precision = precision;
  check.name = lc.name;
  const bool exact = lc.kind == Kind::exact;
  check.bound = exact ? 0.0 : lc.kind == Kind::block ? b.block : lc.kind == Kind::relu_block ? b.relu_block : b.layer;
  check.floor = exact ? 0.0 : b.floor;
  std::vector<std::pair<std::string, double>> errors{{"y", normwise_relative_error(got.y, want.y)}};
  if (!want.dx.empty()) errors.emplace_back("dx", normwise_relative_error(got.dx, want.dx));
  if (got.grads.size() != want.grads.size()) {
    check.outcome = CheckOutcome::failed;
    check.detail = std::to_string(got.grads.size()) + " parameter gradients, expected " + std::to_string(want.grads.size());
    return check;
  }
  const auto l2_norm = [](const std::vector<float>& v) {
    double squares = 0;
    for (const float x : v) squares += static_cast<double>(x) * static_cast<double>(x);
    return std::sqrt(squares);
  };
  double largest_gradient = 0;
  for (const auto& g : want.grads) largest_gradient = std::max(largest_gradient, l2_norm(g));
  for (std::size_t k = 0; k < got.grads.size(); ++k) {
    const auto& zero = lc.zero_gradients;
    if (std::find(zero.begin(), zero.end(), k) != zero.end()) {
      const double noise = l2_norm(got.grads[k]);
      errors.emplace_back("gradient " + std::to_string(k) + " (zero in exact arithmetic)",
                          noise / std::max(largest_gradient, 1e-30));
      continue;
    }
    errors.emplace_back("gradient " + std::to_string(k), normwise_relative_error(got.grads[k], want.grads[k]));
  }
  const auto worst = std::max_element(errors.begin(), errors.end(), [](const auto& a, const auto& c) {
    return std::isnan(c.second) || a.second < c.second;
  });
  const auto least = std::min_element(errors.begin(), errors.end(),
                                      [](const auto& a, const auto& c) { return a.second < c.second; });
  check.error = worst->second;
  check.detail = exact ? "exact" : "worst: " + worst->first;
  const auto fail = [&](std::string why) {
    check.outcome = CheckOutcome::failed;
    check.detail = std::move(why);
  };
  if (got.y_dtype != dtype || (!got.dx.empty() && got.dx_dtype != dtype)) {
    fail("computed in " + std::string(to_string(got.y_dtype)) + ", asked for " + std::string(to_string(dtype)));
  } else if (std::any_of(got.grad_dtypes.begin(), got.grad_dtypes.end(), [](DType t) { return t != DType::fp32; })) {
    fail("parameter gradients must stay fp32 (master weights)");
  } else if (std::isnan(check.error) || (exact ? check.error != 0.0 : check.error > check.bound)) {
    // Every output's error, so that one failed run says whether the rest are near the bound too.
    std::string all;
    for (const auto& [what, error] : errors) all += (all.empty() ? "" : ", ") + what + " " + format_error(error);
    fail(worst->first + " off by " + format_error(check.error) +
         (exact ? " where the result must be exact" : ", bound " + format_error(check.bound)) + " (" + all + ")");
  } else if (check.floor > 0 && least->second <= check.floor) {
    fail(least->first + " within " + format_error(least->second) + " of fp32: not computed in " +
         std::string(to_string(dtype)) + "?");
  }
  return check;
}

std::vector<float> weights_of(Backend& backend, Trainer& trainer) {
  return download(backend, trainer.parameters().values(), trainer.parameters().elements());
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// What a training ended with: its losses, and its fp32 master weights with where each parameter
// starts in them. The run-to-run check compares both bit for bit: a sum whose order varies moves a
// weight by an ulp long before it moves a loss (5 small steps may hide it in the losses' rounding).
struct TrainingOutcome {
  std::vector<float> losses;
  std::vector<float> weights;
  std::vector<std::pair<std::string, std::int64_t>> parameters;  // name and offset, in order
};

TrainingOutcome outcome_of(Backend& backend, Trainer& trainer, std::vector<float> losses) {
  TrainingOutcome outcome{std::move(losses), weights_of(backend, trainer), {}};
  for (const Parameter* p : trainer.parameters().parameters()) outcome.parameters.emplace_back(p->name, p->offset);
  return outcome;
}

// Where `again` parted from `first` in its weights: how many values differ and the first
// parameter they lie in; nothing where the bits are the same.
std::optional<std::string> weights_parted(const TrainingOutcome& again, const TrainingOutcome& first) {
  if (again.weights.size() != first.weights.size()) {
    return std::to_string(again.weights.size()) + " weights against " + std::to_string(first.weights.size());
  }
  std::int64_t differ = 0, first_at = -1;
  for (std::size_t i = 0; i < again.weights.size(); ++i) {
    if (std::memcmp(&again.weights[i], &first.weights[i], sizeof(float)) == 0) continue;
    if (differ++ == 0) first_at = static_cast<std::int64_t>(i);
  }
  if (differ == 0) return std::nullopt;
  std::string where = "value " + std::to_string(first_at);
  for (std::size_t k = 0; k < first.parameters.size(); ++k) {
    const auto& [name, offset] = first.parameters[k];
    if (offset > first_at) break;
    where = (name.empty() ? "parameter " + std::to_string(k) : name) + ", value " + std::to_string(first_at - offset);
  }
  std::ostringstream values;
  values.precision(9);
  const auto at = static_cast<std::size_t>(first_at);
  values << again.weights[at] << " against " << first.weights[at];
  return std::to_string(differ) + " of " + std::to_string(again.weights.size()) + " weights differ, the first " + where +
         " (" + values.str() + ")";
}

constexpr int kTrainingSteps = 5;
const Shape kTrainingInput(8, 3, 16, 16);

// The small net's losses over `steps` steps and the weights they left, and with loss scaling its
// state at the end. With dropout, so that a replayed graph that repeated the captured step's masks
// would leave the eager trajectory.
struct Trajectory : TrainingOutcome {
  std::optional<LossScaleState> loss_scale;
};

Trajectory train(Backend& backend, DType dtype, bool graph, MemoryReuse reuse,
                 const std::optional<LossScalingConfig>& scaling, int steps) {
  Trainer trainer(backend, small_conv_net(16, 16, 0.2f), kTrainingInput, 10, kSelfTestSgd, 3, 0, reuse, dtype);
  if (scaling) trainer.use_loss_scaling(*scaling);
  trainer.use_step_graph(graph);
  std::vector<float> losses;
  for (int i = 0; i < steps; ++i) losses.push_back(trainer.step_and_loss());
  if (graph && !trainer.step_graph_active()) throw std::runtime_error("the step was not captured as a graph");
  return Trajectory{outcome_of(backend, trainer, std::move(losses)), trainer.loss_scale()};
}

std::vector<float> train_losses(Backend& backend, DType dtype, bool graph = false,
                                MemoryReuse reuse = MemoryReuse::lifetime) {
  return train(backend, dtype, graph, reuse, std::nullopt, kTrainingSteps).losses;
}

TrainingOutcome trained(Backend& backend, DType dtype) {
  return train(backend, dtype, false, MemoryReuse::lifetime, std::nullopt, kTrainingSteps);
}

// amp's step graph: loss scaling moves on inside the graph. Started far too high (2^24: a
// gradient of 0.004 already passes fp16's largest, 65504), the first steps overflow and are
// skipped and the scale backs off until steps apply; a replayed graph must skip, back off and
// apply as the eager steps did.
constexpr int kScaledSteps = 12;
constexpr LossScalingConfig kScaledFromTooHigh{16777216.0f, 2.0f, 0.5f, 1000};

// The largest relative difference of two loss trajectories, and at which step.
std::pair<double, int> trajectory_error(const std::vector<float>& got, const std::vector<float>& want) {
  double worst = 0;
  int at = 0;
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double e = std::fabs(static_cast<double>(got[i]) - static_cast<double>(want[i])) /
                     std::max(1e-30, std::fabs(static_cast<double>(want[i])));
    if (std::isnan(e) || e > worst) {
      worst = std::isnan(e) ? std::numeric_limits<double>::quiet_NaN() : e;
      at = static_cast<int>(i);
      if (std::isnan(e)) break;
    }
  }
  return {worst, at};
}

class Checker {
 public:
  // `device`: the backend under test's device, asked after each check whether it is lost.
  // `chosen`: parts of the names of the checks to run; none: every check.
  Checker(std::vector<SelfTestCheck>& out, const std::function<void(const SelfTestCheck&)>& on_check,
          const Backend& device, const std::vector<std::string>& chosen)
      : out_(out), on_check_(on_check), device_(device), chosen_(chosen) {}

  // Runs one check; an exception is the check failing with its message. Once a check has left
  // the device lost (a CUDA fault poisons the process's context), later checks are not run: each
  // is skipped naming the check that lost it, instead of failing with that check's error.
  void run(const std::string& precision, const std::string& name, const std::function<SelfTestCheck()>& body) {
    if (!chosen(name) || skipped_for_lost_device(precision, name)) return;
    SelfTestCheck check;
    try {
      check = body();
    } catch (const std::exception& e) {
      check.outcome = CheckOutcome::failed;
      check.detail = e.what();
    }
    check.precision = precision;
    check.name = name;
    if (const std::optional<std::string> why = device_.device_lost()) {
      lost_ = "the device was lost in \"" + (precision == "-" ? "" : precision + " ") + name + "\" (" + *why + ")";
    }
    add(std::move(check));
  }
  // Adds `name` as skipped if the device is lost; says whether it did.
  bool skipped_for_lost_device(const std::string& precision, const std::string& name) {
    if (!lost_) return false;
    add({precision, name, 0, 0, 0, CheckOutcome::skipped, "not run: " + *lost_ + "; run the self-test again"});
    return true;
  }
  void add(SelfTestCheck check) {
    out_.push_back(std::move(check));
    if (on_check_) on_check_(out_.back());
  }
  bool chosen(const std::string& name) const {
    return chosen_.empty() ||
           std::any_of(chosen_.begin(), chosen_.end(), [&](const std::string& part) { return name.find(part) != std::string::npos; });
  }

 private:
  std::vector<SelfTestCheck>& out_;
  const std::function<void(const SelfTestCheck&)>& on_check_;
  const Backend& device_;
  const std::vector<std::string>& chosen_;
  std::optional<std::string> lost_;
};





// A BERT small enough to check in a second: 2 layers, hidden 32 in 4 heads, a 64-token
// vocabulary; 4 sequences of 12 tokens.
// The self-test's BERT: the named fields, the rest BERT-base's.
constexpr BertConfig kSmallBert{.vocabulary = 64, .hidden = 32, .layers = 2, .heads = 4, .intermediate = 64, .max_positions = 16};
constexpr PretrainingBatchLayout kSmallBertBatch{4, 12};
// At its full rate from the first step (the "adamw update" check warms a rate up): AdamW turns
// another device's rounding in near-zero gradients into whole-size steps, and a warmed-up rate's
// smaller ones leave it below the loss's own rounding, where it would test nothing.
constexpr AdamWConfig kSelfTestAdamW{1e-3f, 0.9f, 0.999f, 1e-6f, 0.01f, 1.0f};

// Real data's batch (a shard's): sequences padded after these many tokens, their masked-LM slots
// past them predicting nothing. No sequence reaches positions 10 and 11.
const std::vector<std::int32_t> kPaddedRealTokens{9, 7, 3, 10};
constexpr std::int64_t kLongestRealSequence = 10;

// The largest gradient of a position embedding no sequence's real tokens reach, relative to the
// largest of those they reach. Nothing the loss reads depends on a padding row when attention
// leaves the padding out (no real token attends to it, no prediction reads it), so on any device
// and in any precision it is exactly 0 (sums of zeros are zero in any order); attention that looks
// at the padding makes it about 1e-3, where the loss at BERT's initialisation barely moves.
double padding_position_gradient(Trainer& trainer, Backend& backend) {
  trainer.compute_gradients();
  for (Parameter* p : trainer.parameters().parameters()) {
    if (!p->name.ends_with("position_embeddings.weight")) continue;  // named by path only through build_model
    const std::vector<float> grad = download(backend, p->grad);
    const auto width = static_cast<std::size_t>(p->grad.shape[1]);
    const auto boundary = static_cast<std::size_t>(kLongestRealSequence) * width;
    double real = 0, padding = 0;
    for (std::size_t i = 0; i < static_cast<std::size_t>(kSmallBertBatch.tokens) * width; ++i) {
      double& largest = i < boundary ? real : padding;
      largest = std::max(largest, std::fabs(static_cast<double>(grad[i])));
    }
    return padding / std::max(real, 1e-30);
  }
  throw std::logic_error("the self-test's BERT has no position embeddings");
}

// Where a correct device's padding gradient stands: 0, or rounding noise in the denormals.
constexpr double kPaddingGradientBound = 1e-6;

// padding_gradient: with `padded`, padding_position_gradient before the steps.
TrainingOutcome bert_training(Backend& backend, DType dtype, MemoryReuse reuse = MemoryReuse::lifetime,
                              bool padded = false, double* padding_gradient = nullptr) {
  const BertConfig config = kSmallBert;
  Trainer trainer(backend, bert_for_pretraining(config), kSmallBertBatch, config.vocabulary, SgdConfig{}, 3, 0, reuse,
                  dtype);
  trainer.use_adamw(kSelfTestAdamW);
  if (padded) {
    trainer.pad_sequences(kSmallBertBatch, kPaddedRealTokens);
    if (padding_gradient != nullptr) *padding_gradient = padding_position_gradient(trainer, backend);
  }
  std::vector<float> losses;
  for (int i = 0; i < kTrainingSteps; ++i) losses.push_back(trainer.step_and_loss());
  return outcome_of(backend, trainer, std::move(losses));
}

std::vector<float> bert_losses(Backend& backend, DType dtype, MemoryReuse reuse = MemoryReuse::lifetime,
                               bool padded = false, double* padding_gradient = nullptr) {
  return bert_training(backend, dtype, reuse, padded, padding_gradient).losses;
}

// An encoder layer whose heads a fused attention kernel takes (head size a multiple of 16), over
// a sequence length that is not a multiple of 16 (partial tiles): 2 sequences of 40 tokens, 2 heads
// of 32. On a backend that composes attention it checks the composed ops at another shape.
constexpr BertConfig kWideHeadsBert{.vocabulary = 64, .hidden = 64, .layers = 1, .heads = 2, .intermediate = 128,
                                    .max_positions = 64};
constexpr std::int64_t kWideHeadsSequences = 2, kWideHeadsTokens = 40;

// The CPU's fp32 answers, computed once for every precision.
struct TransformerReference {
  std::optional<LayerOutcome> encoder_layer;
  std::optional<LayerOutcome> wide_heads_encoder_layer;
  std::optional<std::vector<float>> bert_losses;
  std::optional<std::vector<float>> padded_bert_losses;
};

// The encoder layer (attention's batched matmuls, softmax, axis swaps, GELU, layer norms,
// dropout, residuals) against the CPU, at two shapes (the second one fused attention takes),
// then a small BERT's loss over a few AdamW steps (embedding gathers and scatters, the
// pretraining heads, tanh, clipping, AdamW). The CPU reference composes attention.
// `got`: the backend's own BERT training (the run-to-run check trains it again).
void transformer_checks(Checker& checker, Backend& backend, Backend& reference, const std::string& precision, DType dtype,
                        const Bounds& b, TransformerReference& want, std::optional<TrainingOutcome>& got) {
  if (const auto why = backend.cannot_run_transformers()) {
    checker.add({precision, "transformer checks", 0, 0, 0, CheckOutcome::skipped, *why});
    return;
  }
  // One encoder layer of `config` over `sequences` of `tokens`, against the CPU's answer (kept in
  // `cached` for the other precisions). Its gradients: query weight, query bias, key weight, key
  // bias (3, zero in exact arithmetic), ...
  const auto encoder_check = [&](const std::string& name, const BertConfig& config, std::uint64_t salt,
                                 std::int64_t sequences, std::int64_t tokens, std::uint64_t seed,
                                 std::optional<LayerOutcome>& cached) {
    const LayerCheck check{name, [&config, salt] { return std::make_unique<TransformerEncoderLayer>(config, salt); },
                           Shape(sequences * tokens, config.hidden), Kind::block, {3}};
    checker.run(precision, check.name, [&] {
      const auto run = [&](Backend& on, DType t) {
        auto layer = check.make();
        return run_layer_once(on, *layer, check.input, t, seed, false, tokens);
      };
      if (!cached) cached = run(reference, DType::fp32);
      return compare_layer(check, run(backend, dtype), *cached, precision, dtype, b);
    });
  };
  encoder_check("transformer encoder layer", kSmallBert, 1, kSmallBertBatch.sequences, kSmallBertBatch.tokens, 13,
                want.encoder_layer);
  encoder_check("transformer encoder layer, heads of 32 over 40 tokens", kWideHeadsBert, 2, kWideHeadsSequences,
                kWideHeadsTokens, 17, want.wide_heads_encoder_layer);
  checker.run(precision, "bert pretraining, " + std::to_string(kTrainingSteps) + " AdamW steps", [&] {
    if (!want.bert_losses) want.bert_losses = bert_losses(reference, DType::fp32);
    got = bert_training(backend, dtype);
    const auto [error, step] = trajectory_error(got->losses, *want.bert_losses);
    return bounded(error, b.training, "the loss, worst at step " + std::to_string(step + 1));
  });
  // Real data's padding: attention over each sequence's real tokens (the padding's gradient exactly
  // 0), empty masked-LM slots left out, and the loss as the CPU's.
  checker.run(precision, "padded bert, " + std::to_string(kTrainingSteps) + " AdamW steps", [&] {
    if (!want.padded_bert_losses) {
      want.padded_bert_losses = bert_losses(reference, DType::fp32, MemoryReuse::lifetime, true);
    }
    double padding_gradient = 0;
    const auto [error, step] = trajectory_error(
        bert_losses(backend, dtype, MemoryReuse::lifetime, true, &padding_gradient), *want.padded_bert_losses);
    if (!(padding_gradient <= kPaddingGradientBound)) {
      return bounded(padding_gradient, kPaddingGradientBound,
                     "attention looks past a sequence's real tokens: the padding's position embeddings have a "
                     "gradient (relative to the real tokens')");
    }
    return bounded(error, b.training, "the loss, worst at step " + std::to_string(step + 1));
  });
}

// Layer norm at BERT-base's width over enough rows that its dγ and dβ are summed in chunks of
// rows (the encoder layer's check is 32 wide and 48 rows: one chunk, one value a lane), in the
// device's type; the inputs are rounded to that type first, so both sides normalize the same values.
SelfTestCheck layer_norm_at_bert_width(Backend& backend, Backend& reference, DType dtype, const Bounds& b) {
  const LayerNormConfig config{256, 768, 1e-12f, dtype};
  std::mt19937_64 rng(23);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const auto draw = [&](std::int64_t n, bool round) {
    std::vector<float> v(static_cast<std::size_t>(n));
    for (float& e : v) e = u(rng);
    return round ? rounded_to(v, dtype) : v;
  };
  const std::vector<float> x = draw(config.rows * config.features, true), dy = draw(config.rows * config.features, true);
  const std::vector<float> gamma = draw(config.features, false), beta = draw(config.features, false);
  const auto run = [&](Backend& on, DType t) {
    std::vector<std::shared_ptr<void>> memory;
    const auto tensor = [&](std::int64_t n, DType type, const std::vector<float>* values) {
      Tensor made{nullptr, Shape(n), Layout::plain, type};
      memory.push_back(on.allocate(made.bytes()));
      made.data = memory.back().get();
      if (values != nullptr) upload(on, made, *values);
      return made;
    };
    const std::int64_t n = config.rows * config.features;
    Tensor in = tensor(n, t, &x), gradient = tensor(n, t, &dy), y = tensor(n, t, nullptr), dx = tensor(n, t, nullptr);
    Tensor g = tensor(config.features, DType::fp32, &gamma), bias = tensor(config.features, DType::fp32, &beta);
    Tensor mean = tensor(config.rows, DType::fp32, nullptr), variance = tensor(config.rows, DType::fp32, nullptr);
    Tensor dg = tensor(config.features, DType::fp32, nullptr), dbias = tensor(config.features, DType::fp32, nullptr);
    LayerNormConfig typed = config;
    typed.dtype = t;
    auto op = on.make_layer_norm(typed);
    op->forward(in, g, bias, y, mean, variance);
    op->backward(in, gradient, g, bias, mean, variance, dx, dg, dbias);
    std::vector<std::vector<float>> out{download(on, y), download(on, dx), download(on, dg), download(on, dbias)};
    on.synchronize();
    return out;
  };
  const auto want = run(reference, DType::fp32);
  const auto got = run(backend, dtype);
  const char* names[] = {"y", "dx", "dgamma", "dbeta"};
  double worst = 0.0;
  std::string where = names[0];
  for (std::size_t i = 0; i < want.size(); ++i) {
    const double error = normwise_relative_error(got[i], want[i]);
    if (std::isnan(error) || error > worst) {
      worst = error;
      where = names[i];
      if (std::isnan(error)) break;
    }
  }
  return bounded(worst, b.layer, "worst: " + where);
}

// The losses and weights of a second training against the first's, bit for bit: the small conv
// net's (unless the backend names convolutions that may vary) and the small BERT's (where it runs).
// `conv_net` and `bert`: the first trainings, null where their checks did not get that far (then
// trained here).
SelfTestCheck run_to_run(Backend& backend, DType dtype, std::optional<TrainingOutcome>& conv_net,
                         std::optional<TrainingOutcome>& bert) {
  std::vector<std::string> compared, left;
  const auto losses_text = [](const std::vector<float>& losses) {  // every bit a float has: 9 digits
    std::ostringstream text;
    text.precision(9);
    for (std::size_t i = 0; i < losses.size(); ++i) text << (i > 0 ? ", " : "") << losses[i];
    return text.str();
  };
  struct Training {
    const char* name;                         // as the detail names it
    std::optional<std::string> left_because;  // why it is not compared
    std::optional<TrainingOutcome>& first;
    std::function<TrainingOutcome()> train;
  };
  const Training trainings[] = {
      {"the conv net", backend.nondeterministic_convolutions(), conv_net, [&] { return trained(backend, dtype); }},
      {"bert", backend.cannot_run_transformers(), bert, [&] { return bert_training(backend, dtype); }}};
  for (const Training& training : trainings) {
    if (training.left_because) {
      left.push_back(std::string(training.name) + ": " + *training.left_because);
      continue;
    }
    if (!training.first) training.first = training.train();
    const TrainingOutcome again = training.train();
    if (!same_bits(again.losses, training.first->losses)) {
      return verdict(false, std::string(training.name) + "'s losses " + losses_text(again.losses) + " against " +
                                losses_text(training.first->losses));
    }
    if (const auto parted = weights_parted(again, *training.first)) {
      return verdict(false, std::string(training.name) + "'s losses the same bits, its weights not: " + *parted);
    }
    compared.push_back(training.name);
  }
  std::string detail;
  for (const std::string& c : compared) detail += (detail.empty() ? "" : " and ") + c;
  detail += compared.empty() ? "nothing compared" : ": the same bits";
  for (const std::string& l : left) detail += "; not compared, " + l;
  if (compared.empty()) {
    SelfTestCheck skipped = verdict(true, detail);
    skipped.outcome = CheckOutcome::skipped;
    return skipped;
  }
  return verdict(true, detail);
}

void precision_checks(Checker& checker, const SelfTestSubject& subject, Backend& reference, Precision typed,
                      std::vector<std::optional<LayerOutcome>>& reference_layers,
                      std::optional<std::vector<float>>& reference_losses, TransformerReference& reference_transformer,
                      ModelStepReferences& want_step_traces) {
  const std::string precision(to_string(typed));  // as the checks' table names it
  if (checker.skipped_for_lost_device(precision, "every check")) return;
  std::unique_ptr<Backend> backend;
  try {
    backend = subject.make(typed);
  } catch (const std::exception& e) {
    checker.add({precision, "backend", 0, 0, 0, CheckOutcome::failed, e.what()});
    return;
  }
  if (const auto why = cannot_run(typed, *backend)) {
    checker.add({precision, "every check", 0, 0, 0, CheckOutcome::skipped, *why});
    return;
  }
  const DType dtype = activation_dtype(typed);
  const Bounds b = bounds_for(typed);
  const auto layers = layer_checks();
  for (std::size_t i = 0; i < layers.size(); ++i) {
    const LayerCheck& lc = layers[i];
    checker.run(precision, lc.name, [&] {
      const bool exact = lc.kind == Kind::exact;
      if (!reference_layers[i]) {
        auto layer = lc.make();
        reference_layers[i] = run_layer_once(reference, *layer, lc.input, DType::fp32, 11, exact);
      }
      auto layer = lc.make();
      const LayerOutcome got = run_layer_once(*backend, *layer, lc.input, dtype, 11, exact);
      return compare_layer(lc, got, *reference_layers[i], precision, dtype, b);
    });
  }
  checker.run(precision, "softmax cross-entropy", [&] {
    const Shape shape(16, 1000);
    std::mt19937_64 rng(19);
    std::normal_distribution<float> normal(0.0f, 2.0f);
    std::vector<float> z(static_cast<std::size_t>(shape.numel()));
    for (float& v : z) v = normal(rng);
    std::vector<std::int32_t> labels(16);
    for (std::size_t i = 0; i < labels.size(); ++i) labels[i] = static_cast<std::int32_t>(i * 61 % 1000);
    const auto run = [&](Backend& on, DType t) {
      Tensor logits, dlogits;
      logits.shape = dlogits.shape = shape;
      logits.dtype = dlogits.dtype = t;
      auto logits_memory = on.allocate(logits.bytes()), grad_memory = on.allocate(dlogits.bytes());
      auto label_memory = on.allocate(labels.size() * sizeof(std::int32_t));
      logits.data = logits_memory.get();
      dlogits.data = grad_memory.get();
      upload(on, logits, z);
      on.copy_from_host(label_memory.get(), labels.data(), labels.size() * sizeof(std::int32_t));
      on.softmax_cross_entropy(logits, static_cast<const std::int32_t*>(label_memory.get()), dlogits, nullptr, LossTerm{});
      const float loss = on.last_loss();
      return std::make_pair(loss, download(on, dlogits));
    };
    const auto [want_loss, want_grad] = run(reference, DType::fp32);
    const auto [got_loss, got_grad] = run(*backend, dtype);
    const double loss_error = std::fabs(static_cast<double>(got_loss) - static_cast<double>(want_loss)) / std::fabs(static_cast<double>(want_loss));
    const double grad_error = normwise_relative_error(got_grad, want_grad);
    return loss_error >= grad_error || std::isnan(loss_error) ? bounded(loss_error, b.layer, "worst: loss")
                                                              : bounded(grad_error, b.layer, "worst: dlogits");
  });
  checker.run(precision, "layer norm, 256 rows of 768 (bert-base's width)", [&] {
    return layer_norm_at_bert_width(*backend, reference, dtype, b);
  });
  std::optional<TrainingOutcome> bert;  // this backend's own BERT training
  transformer_checks(checker, *backend, reference, precision, dtype, b, reference_transformer, bert);
  std::optional<TrainingOutcome> eager;  // this backend's own training, for graph replay too
  checker.run(precision, "training, " + std::to_string(kTrainingSteps) + " steps", [&] {
    if (!reference_losses) reference_losses = train_losses(reference, DType::fp32);
    eager = trained(*backend, dtype);
    const auto [error, step] = trajectory_error(eager->losses, *reference_losses);
    return bounded(error, b.training, "the loss, worst at step " + std::to_string(step + 1));
  });
  for (const ModelStep& model : model_steps(subject.models)) {
    checker.run(precision, std::string(to_string(model.model)) + " step, each layer fed the reference's input", [&] {
      return model_step_check(model, *backend, reference, dtype, uses_loss_scaling(typed),
                              {b.model_step, std::max(b.model_step, b.relu_block)}, want_step_traces);
    });
  }
  // Every op reads only what it declared to the memory plan: trained with each buffer poisoned
  // (NaN) from the end of its declared lifetime, the losses are those of unshared memory. An op
  // that reads a buffer after its declared end reads NaN here, whatever shares its memory.
  checker.run(precision, "memory plan (buffers poisoned after their last declared use)", [&] {
    const auto [conv_error, conv_step] = trajectory_error(train_losses(*backend, dtype, false, MemoryReuse::poison),
                                                          train_losses(*backend, dtype, false, MemoryReuse::none));
    std::string where = "conv net's loss, worst at step " + std::to_string(conv_step + 1);
    double error = conv_error;
    if (!backend->cannot_run_transformers()) {
      const auto [bert_error, bert_step] = trajectory_error(bert_losses(*backend, dtype, MemoryReuse::poison),
                                                            bert_losses(*backend, dtype, MemoryReuse::none));
      if (std::isnan(bert_error) || bert_error > error) {
        error = bert_error;
        where = "bert's loss, worst at step " + std::to_string(bert_step + 1);
      }
    }
    // The same kernels on the same data: only algorithms with atomics may reorder sums.
    return bounded(error, 1e-4, where + " against unshared memory");
  });
  // The same training again gives the same bits: every sum in a fixed order, whatever the device
  // schedules (a backend names the convolutions that may not; those are left uncompared).
  checker.run(precision, "run to run (trained again, the same bits)", [&] {
    return run_to_run(*backend, dtype, eager, bert);
  });
  if (backend->can_capture()) {
    checker.run(precision, "step graph replay", [&] {
      // The same kernels in the same order: only algorithms with atomics may reorder sums.
      auto graph_backend = subject.make(typed);
      if (uses_loss_scaling(typed)) {
        const Trajectory want = train(*backend, dtype, false, MemoryReuse::lifetime, kScaledFromTooHigh, kScaledSteps);
        const Trajectory got = train(*graph_backend, dtype, true, MemoryReuse::lifetime, kScaledFromTooHigh, kScaledSteps);
        const LossScaleState& eager_state = *want.loss_scale;
        const LossScaleState& graph_state = *got.loss_scale;
        if (eager_state.skipped < 1 || eager_state.skipped >= kScaledSteps) {
          return verdict(false, "the eager steps skipped " + std::to_string(eager_state.skipped) + " of " +
                                    std::to_string(kScaledSteps) + ": the check needs both skipped and applied steps");
        }
        if (graph_state.skipped != eager_state.skipped || graph_state.scale != eager_state.scale) {
          return verdict(false, "the graph skipped " + std::to_string(graph_state.skipped) + " steps and left the scale at " +
                                    std::to_string(graph_state.scale) + "; eager steps: " +
                                    std::to_string(eager_state.skipped) + " and " + std::to_string(eager_state.scale));
        }
        const auto [error, step] = trajectory_error(got.losses, want.losses);
        return bounded(error, 1e-4, "the loss against eager steps with loss scaling (" +
                                        std::to_string(eager_state.skipped) + " skipped), worst at step " +
                                        std::to_string(step + 1));
      }
      if (!eager) eager = trained(*backend, dtype);
      const auto [error, step] = trajectory_error(train_losses(*graph_backend, dtype, true), eager->losses);
      return bounded(error, 1e-4, "the loss against eager steps, worst at step " + std::to_string(step + 1));
    });
  }
}

// SGD, AdamW and LAMB updates on the primary backend against the reference.
void optimizer_checks(Checker& checker, Backend& primary, Backend& reference) {
  checker.run("-", "sgd update", [&] {
    const std::int64_t n = 100003;
    std::mt19937_64 rng(23);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> w(static_cast<std::size_t>(n)), g(w.size());
    for (float& v : w) v = normal(rng);
    for (float& v : g) v = normal(rng);
    const auto run = [&](Backend& on) {
      auto memory = on.allocate(3 * w.size() * sizeof(float));
      float* values = static_cast<float*>(memory.get());
      float* grads = values + n;
      float* momentum = grads + n;
      on.copy_from_host(values, w.data(), w.size() * sizeof(float));
      on.copy_from_host(grads, g.data(), g.size() * sizeof(float));
      // Three updates of a rate warmed up over four: 0.025, 0.05, 0.075.
      for (std::uint64_t update = 1; update <= 3; ++update) {
        on.sgd_update(values, grads, momentum, n, SgdConfig{0.1f, 0.9f, 1e-4f, 4}, update, nullptr);
      }
      return std::make_pair(download(on, values, n), download(on, momentum, n));
    };
    const auto [want_w, want_m] = run(reference);
    const auto [got_w, got_m] = run(primary);
    const double ew = normwise_relative_error(got_w, want_w), em = normwise_relative_error(got_m, want_m);
    return ew >= em ? bounded(ew, 1e-6, "worst: weights") : bounded(em, 1e-6, "worst: momentum");
  });
  // AdamW over ranges of tensors, LAMB over tensors (its trust ratio is per tensor): two updates
  // (the bias corrections of steps 1 and 2), gradients large enough to be clipped, and a range
  // without weight decay between two with it.
  for (const bool lamb : {false, true}) {
    checker.run("-", lamb ? "lamb update" : "adamw update", [&] {
      if (const auto why = primary.cannot_run_transformers()) {
        SelfTestCheck skipped;
        skipped.outcome = CheckOutcome::skipped;
        skipped.detail = *why;
        return skipped;
      }
      const std::int64_t n = 100003;
      const std::vector<ParameterRange> ranges{{0, 40000, true}, {40000, 3, false}, {40003, 60000, true}};
      std::mt19937_64 rng(29);
      std::normal_distribution<float> normal(0.0f, 1.0f);
      std::vector<float> w(static_cast<std::size_t>(n)), g(w.size());
      for (float& v : w) v = normal(rng);
      for (float& v : g) v = normal(rng);
      const AdamWConfig config{1e-3f, 0.9f, 0.999f, 1e-6f, 0.01f, 1.0f, 3};  // a third and two thirds of the rate
      const auto run = [&](Backend& on) {
        auto memory = on.allocate(4 * w.size() * sizeof(float));
        float* values = static_cast<float*>(memory.get());
        float* grads = values + n;
        float* first = grads + n;
        float* second = first + n;
        on.copy_from_host(values, w.data(), w.size() * sizeof(float));  // the moments start zero-filled
        for (std::uint64_t update = 1; update <= 2; ++update) {
          on.copy_from_host(grads, g.data(), g.size() * sizeof(float));
          if (lamb) {
            on.lamb_update(values, grads, first, second, n, ranges, config, update, nullptr);
          } else {
            on.adamw_update(values, grads, first, second, n, ranges, config, update, nullptr);
          }
        }
        return std::make_pair(download(on, values, n), download(on, second, n));
      };
      const auto [want_w, want_v] = run(reference);
      const auto [got_w, got_v] = run(primary);
      const double ew = normwise_relative_error(got_w, want_w), ev = normwise_relative_error(got_v, want_v);
      return ew >= ev ? bounded(ew, 1e-6, "worst: weights") : bounded(ev, 1e-6, "worst: second moment");
    });
  }
}

// amp's loss scaling: unscaling is exact, an inf or NaN is seen, and such a step is skipped.
void loss_scaling_checks(Checker& checker, Backend& primary) {
  checker.run("-", "unscale and overflow check", [&] {
    std::vector<float> g{1024.0f, -2048.0f, 3072.0f, 0.5f, 0.0f};
    auto memory = primary.allocate(g.size() * sizeof(float));
    auto state_memory = primary.allocate(sizeof(LossScaleState));
    float* grads = static_cast<float*>(memory.get());
    auto* state = static_cast<LossScaleState*>(state_memory.get());
    const auto n = static_cast<std::int64_t>(g.size());
    const LossScalingConfig config{1024.0f, 2.0f, 0.5f, 1000};
    // Checks g with the scale at 1024 and reads back the state the device moved on.
    const auto check = [&] {
      primary.copy_from_host(grads, g.data(), g.size() * sizeof(float));
      const LossScaleState start = starting_loss_scale(config);
      primary.copy_from_host(state, &start, sizeof start);
      primary.unscale_and_check_finite(grads, n, state, config);
      LossScaleState after;
      primary.copy_to_host(&after, state, sizeof after);
      return after;
    };
    const LossScaleState clean = check();
    const auto unscaled = download(primary, grads, n);
    const std::vector<float> expected{1.0f, -2.0f, 3.0f, 0.5f / 1024.0f, 0.0f};
    if (clean.overflowed != 0) return verdict(false, "finite gradients reported as overflowing");
    if (!same_bits(unscaled, expected)) return verdict(false, "gradients not divided exactly by the scale");
    if (clean.scale != 1024.0f || clean.clean_streak != 1 || clean.skipped != 0) {
      return verdict(false, "a clean step did not leave the scale and count one more clean step");
    }
    for (const float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
      g[2] = bad;
      const LossScaleState after = check();
      const std::string what = std::string("a gradient of ") + (std::isnan(bad) ? "NaN" : "inf");
      if (after.overflowed == 0) return verdict(false, what + " was not reported");
      if (after.scale != 512.0f || after.skipped != 1) return verdict(false, what + " did not halve the scale and count a skip");
    }
    return verdict(true, "");
  });
  checker.run("-", "loss scaling skips an overflowing step", [&] {
    Trainer trainer(primary, small_conv_net(8, 8), Shape(4, 3, 8, 8), 10, SgdConfig{0.05f, 0.9f, 1e-4f}, 3);
    trainer.use_loss_scaling({65536.0f, 2.0f, 0.5f, 1000});
    int step = 0;
    trainer.set_before_update([&] {
      if (step++ != 2) return;
      const float inf = std::numeric_limits<float>::infinity();
      const auto& parameters = trainer.parameters().parameters();
      primary.copy_from_host(trainer.parameters().grads() + parameters[parameters.size() / 2]->offset, &inf, sizeof inf);
    });
    trainer.step();
    trainer.step();
    const auto before = weights_of(primary, trainer);
    trainer.step();  // the poisoned one
    if (!trainer.last_step_skipped()) return verdict(false, "a step with an inf gradient was applied");
    if (!same_bits(before, weights_of(primary, trainer))) return verdict(false, "a skipped step changed the weights");
    if (trainer.loss_scale()->scale != 32768.0f) return verdict(false, "the scale did not back off to 32768");
    trainer.step();
    const auto after = weights_of(primary, trainer);
    if (trainer.last_step_skipped() || same_bits(before, after)) return verdict(false, "the next clean step was not applied");
    if (!std::all_of(after.begin(), after.end(), [](float v) { return std::isfinite(v); })) {
      return verdict(false, "weights not finite after the clean step");
    }
    return verdict(true, "skipped, scale halved, weights untouched");
  });
  // DLBENCH_LOG_LOSS_SCALE's replay, on this backend: an inf filter tap makes the convolution the
  // first layer whose output is not finite, whatever the loss and the gradients show.
  checker.run("-", "a skipped step replayed names the layer", [&] {
    Trainer trainer(primary, small_conv_net(8, 8), Shape(4, 3, 8, 8), 10, SgdConfig{0.05f, 0.9f, 1e-4f}, 3);
    trainer.use_loss_scaling({65536.0f, 2.0f, 0.5f, 1000});
    trainer.step();
    const float inf = std::numeric_limits<float>::infinity();
    primary.copy_from_host(trainer.parameters().values() + trainer.parameters().parameters().front()->offset + 5, &inf,
                           sizeof inf);
    const auto before = weights_of(primary, trainer);
    trainer.step();
    if (!trainer.last_step_skipped()) return verdict(false, "a step with an inf filter tap was applied");
    const std::string said = trainer.trace_skipped_step(65536.0f);
    if (said.find("forward: first non-finite layer output: 0 (Conv2d), ") == std::string::npos) {
      return verdict(false, "the replay said: " + said);
    }
    const auto state = trainer.loss_scale();
    if (state->scale != 32768.0f || state->skipped != 1 || trainer.steps_done() != 2) {
      return verdict(false, "the replay changed the loss-scaling state or the step count");
    }
    if (!same_bits(before, weights_of(primary, trainer))) return verdict(false, "the replay changed the weights");
    return verdict(true, "the convolution named");
  });
}

void precision_independent_checks(Checker& checker, Backend& primary, Backend& reference) {
  optimizer_checks(checker, primary, reference);
  loss_scaling_checks(checker, primary);
  // Where a backend resizes the input pipeline's images (a GPU's), what it makes of them.
  if (primary.overlaps_host_copies()) {
    checker.run("-", "input images resized on the device", [&] {
      const std::optional<std::string> differs = device_resize_differs(primary);
      return verdict(!differs, differs.value_or("the host pipeline's values, bit for bit"));
    });
  }
}

void communicator_checks(Checker& checker, Backend& primary, Communicator& comm) {
  const int ranks = comm.size(), rank = comm.rank();
  checker.run("-", "allreduce over " + std::to_string(ranks) + (ranks == 1 ? " rank" : " ranks") + " (" + comm.name() + ")",
              [&] {
    // Small integers: every sum is exact in fp32, whatever order the ranks' values meet in.
    const std::int64_t n = (std::int64_t{1} << 20) + 3;
    std::vector<float> host(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) host[static_cast<std::size_t>(i)] = static_cast<float>((rank + 1) * (i % 13 + 1));
    std::shared_ptr<void> memory;
    std::string unprepared;
    try {
      memory = primary.allocate(host.size() * sizeof(float));
      primary.copy_from_host(memory.get(), host.data(), host.size() * sizeof(float));
    } catch (const std::exception& e) {
      unprepared = e.what();
    }
    // A rank that could not prepare its buffer must not leave the others waiting in the sum.
    double any_unprepared = unprepared.empty() ? 0.0 : 1.0;
    comm.max(&any_unprepared, 1);
    if (any_unprepared > 0) {
      return verdict(false, unprepared.empty() ? "another rank could not prepare its buffer (see its log)"
                                               : "no buffer for the collectives: " + unprepared);
    }
    float* data = static_cast<float*>(memory.get());
    comm.start_allreduce(data, n, Reduction::sum);
    comm.complete_reductions();
    primary.synchronize();
    const auto summed = download(primary, data, n);
    const float factor = static_cast<float>(ranks * (ranks + 1) / 2);
    std::int64_t wrong = 0, first = -1;
    for (std::int64_t i = 0; i < n; ++i) {
      if (summed[static_cast<std::size_t>(i)] != factor * static_cast<float>(i % 13 + 1)) {
        if (wrong++ == 0) first = i;
      }
    }
    if (wrong > 0) {
      return verdict(false, std::to_string(wrong) + " of " + std::to_string(n) + " sums wrong, the first at " +
                                std::to_string(first));
    }
    // Broadcast from rank 0, and the element-wise maximum the slowest-rank timing uses.
    for (std::int64_t i = 0; i < n; ++i) host[static_cast<std::size_t>(i)] = rank == 0 ? static_cast<float>(i % 101) : -1.0f;
    primary.copy_from_host(data, host.data(), host.size() * sizeof(float));
    comm.broadcast(data, n, 0);
    primary.synchronize();
    const auto broadcast = download(primary, data, n);
    for (std::int64_t i = 0; i < n; ++i) {
      if (broadcast[static_cast<std::size_t>(i)] != static_cast<float>(i % 101)) {
        return verdict(false, "broadcast from rank 0: element " + std::to_string(i) + " differs");
      }
    }
    std::vector<double> highest{static_cast<double>(rank), -static_cast<double>(rank)};
    comm.max(highest.data(), 2);
    if (highest[0] != ranks - 1 || highest[1] != 0) return verdict(false, "the element-wise maximum over ranks is wrong");
    return verdict(true, "sum, broadcast and maximum exact");
  });
}

}  // namespace

std::optional<std::string> device_resize_differs(Backend& backend) {
  constexpr int kSide = 48;
  struct Crop {
    int width, height;
    double x0, y0, x1, y1;
  };
  static constexpr Crop kCrops[] = {{kSide, kSide, 0, 0, kSide, kSide}, {kSide, 130, 0, 0, kSide, 130},
                                    {200, kSide, 0, 0, 200, kSide},     {129, 97, 0.25, 0.5, 128.5, 96.75},
                                    {20, 25, 0, 0, 20, 25},             {90, 91, 3, 2, 88, 89.5}};
  constexpr auto kImages = static_cast<int>(std::size(kCrops));
  const input::Normalizer normalizer;
  input::TransformScratch scratch;
  const std::size_t capacity = input::packed_batch_capacity(kImages, kSide);
  std::vector<std::byte> packed(capacity);
  std::memcpy(packed.data(), normalizer.table(), input::PackedBatchLayout::kTable);
  std::atomic<std::uint64_t> used{input::PackedBatchLayout::payload(kImages)};
  std::mt19937 rng(21);
  const std::size_t sample = 3 * static_cast<std::size_t>(kSide) * kSide;
  std::vector<float> planar(kImages * sample), interleaved(kImages * sample);
  std::vector<std::uint8_t> resized(sample);
  for (int n = 0; n < kImages; ++n) {
    const Crop& c = kCrops[n];
    const std::size_t stride = static_cast<std::size_t>(c.width) * 3;
    std::vector<std::uint8_t> region(stride * static_cast<std::size_t>(c.height));
    for (auto& v : region) v = static_cast<std::uint8_t>(rng() % 256);
    input::DecodedCrop crop;
    crop.part = input::DecodedPart{region.data(), stride, 0, 0, c.width, c.height};
    crop.x0 = c.x0;
    crop.y0 = c.y0;
    crop.x1 = c.x1;
    crop.y1 = c.y1;
    const bool flip = n % 2 == 1;
    auto* entry = reinterpret_cast<input::PackedImage*>(packed.data() + input::PackedBatchLayout::kTable) + n;
    input::pack_decoded_crop(crop, flip, kSide, scratch, input::PackedSlot{packed.data(), entry, &used});
    input::BilinearResampler().resize(region.data(), c.width, c.height, stride, c.x0, c.y0, c.x1, c.y1, kSide, kSide,
                                      resized.data());
    const std::size_t at = static_cast<std::size_t>(n) * sample;
    normalizer.write(resized.data(), kSide, kSide, flip, input::PixelLayout::nchw, planar.data() + at);
    normalizer.write(resized.data(), kSide, kSide, flip, input::PixelLayout::nhwc, interleaved.data() + at);
  }
  const std::shared_ptr<void> on_device = backend.allocate(capacity);
  for (const DType type : {DType::fp32, DType::fp16, DType::bf16}) {
    for (const bool channels_last : {false, true}) {
      const std::vector<std::byte> want = encode((channels_last ? interleaved : planar).data(), planar.size(), type);
      const std::shared_ptr<void> out = backend.allocate(want.size());
      backend.stage_from_host(on_device.get(), packed.data(), used.load());
      backend.expand_staged_images(out.get(), on_device.get(), kImages, kSide, type, channels_last);
      backend.wait_staged_reads();
      std::vector<std::byte> got(want.size());
      backend.copy_to_host(got.data(), out.get(), got.size());
      const auto first = std::mismatch(want.begin(), want.end(), got.begin()).first;
      if (first != want.end()) {
        const auto byte = static_cast<std::size_t>(first - want.begin());
        const std::size_t value = byte / dtype_size(type);
        return std::string(to_string(type)) + (channels_last ? " channels last" : " planar") + ": value " +
               std::to_string(value) + " of image " + std::to_string(value / sample) + " differs from the host's";
      }
    }
  }
  return std::nullopt;
}

std::vector<SelfTestCheck> run_self_test(const SelfTestSubject& subject, Backend& reference, Communicator& comm,
                                         const std::function<void(const SelfTestCheck&)>& on_check) {
  std::vector<SelfTestCheck> checks;
  Checker checker(checks, on_check, subject.primary, subject.chosen_checks);
  std::vector<std::optional<LayerOutcome>> reference_layers(layer_checks().size());
  std::optional<std::vector<float>> reference_losses;
  TransformerReference reference_transformer;
  // By the device's bottlenecks: residual add unfused or fused, branch gradients summed or accumulated.
  ModelStepReferences reference_step_traces;
  for (const Precision precision : subject.precisions) {
    precision_checks(checker, subject, reference, precision, reference_layers, reference_losses, reference_transformer,
                     reference_step_traces);
  }
  precision_independent_checks(checker, subject.primary, reference);
  communicator_checks(checker, subject.primary, comm);
  return checks;
}

}  // namespace dlbench::worker
