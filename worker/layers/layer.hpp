// A layer's life: construct (parameter shapes), setup (backend ops and buffers for one
// input shape), then forward/backward every step with no allocation.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "arena.hpp"
#include "backend.hpp"
#include "parameters.hpp"

namespace dlbench::worker {

// Setup is a symbolic forward pass: each layer takes the input's description (shape, layout
// and arena buffer), creates its ops, requests its buffers with their lifetimes (Arena) and
// returns its output's description.
//
// Lifetimes follow one rule: a layer that takes tick t does its forward work at t and its
// backward work at t.mirrored(). It declares what it reads then (its input, saved state), and
// the buffers it writes. The gradient of its input is read by whoever runs next in backward:
// `input_grad_reader`, which the enclosing layer sets. A layer whose backward returns dy itself
// as dx (a view, like Flatten) takes no tick, so that dy lives until its real reader.
struct SetupContext {
  Backend& backend;
  Arena& arena;
  // False for the first layer: nothing upstream wants dx, so it is neither stored nor computed.
  bool input_grad_needed = true;
  // When the gradient of this layer's input is last read; none: kept to the step's end.
  std::optional<Tick> input_grad_reader = std::nullopt;
  // The activations' dtype, for a network whose input is not an activation (token ids).
  DType compute = DType::fp32;
  // Tokens per sequence, for the layers of a sequence model after its embedding layer, whose
  // activations are (sequences · tokens, features) matrices.
  std::int64_t tokens_per_sequence = 0;
  // A pretraining batch's masked-LM slots per sequence (PretrainingBatchLayout::max_predictions):
  // 0 takes masked_positions_per_sequence(tokens).
  std::int64_t max_predictions = 0;

  // Room for `bytes` of state an op's forward (at tick t) leaves for its backward (its mirror):
  // a max pool's arg-max, a fused ReLU's mask. Nothing is requested when the op needs none.
  void request_saved_state(Tensor& state, std::size_t bytes, Tick t) {
    state.shape = Shape(static_cast<std::int64_t>((bytes + sizeof(float) - 1) / sizeof(float)));
    if (state.numel() == 0) return;
    arena.request(state, t);
    arena.read(state, t.mirrored());
  }

  // A buffer this layer's input gradient goes into, written at `written`.
  void request_input_grad(Tensor& dx, Tick written) {
    arena.request(dx, written);
    if (input_grad_reader) {
      arena.read(dx, *input_grad_reader);
    } else {
      arena.keep_until_step_end(dx);
    }
  }
};

class Layer;

// The parts of a step that no layer holds, in kStepParts' order (the result document's names).
enum class StepPart { input, loss, gradient_reduction_wait, loss_scaling, update, other };

// Told before and after each layer that a Sequential runs, forward and backward: the profiler
// (--profile) times layers this way, the self-test compares them. `input` is what the layer is
// about to read (x, or dy), `output` what it returned (y, or dx). An observer may overwrite the
// input's values before the layer runs (the self-test feeds every layer the reference's).
class LayerObserver {
 public:
  virtual ~LayerObserver() = default;
  virtual void before(const Layer& layer, bool backward, const Tensor& input) = 0;
  virtual void after(const Layer& layer, bool backward, const Tensor& output) = 0;
  // The trainer begins `part`, outside every layer (a profiler times it; others need not listen).
  virtual void outside(StepPart) {}
};

struct StepContext {
  Backend& backend;
  std::uint64_t seed = 0;  // dropout masks: seed, step and layer
  std::uint64_t step = 0;
  // Called as soon as a layer has written its parameters' gradients, so that gradient
  // buckets can be reduced while the rest of backward runs.
  std::function<void(const std::vector<Parameter*>&)> gradients_ready;
  // For layers with a loss term of their own (an auxiliary classifier): the batch's labels on
  // the device, the loss scale (in the backend's memory; null: 1), and how many terms this
  // step's forward has computed so far.
  // A sequence model's labels block holds its other per-batch data too (PretrainingBatchLayout).
  const std::int32_t* labels = nullptr;
  // A sequence model's real tokens per sequence (the labels block's part; null: every token is
  // real): attention looks at no key past them.
  const std::int32_t* real_tokens = nullptr;
  const float* gradient_scale = nullptr;
  int loss_terms = 0;
  // The step's memory plan, told as the step reaches each tick (Arena::entering: the poison mode
  // fills buffers whose declared lifetime has ended); null when nobody listens.
  Arena* plan = nullptr;
  LayerObserver* observer = nullptr;

  void entering(Tick next) const {
    if (plan != nullptr) plan->entering(next, backend);
  }

  void notify(std::initializer_list<Parameter*> params) const {
    if (gradients_ready) gradients_ready(std::vector<Parameter*>(params));
  }
};

// A dropout mask a step applied: the backend writes it again on request (Backend::dropout_mask
// with this p and seed, before the next step begins), since no pass stores it.
struct DropoutMaskState {
  std::string name;  // by path: "classifier.2.mask"
  Shape shape;
  Layout layout = Layout::plain;
  float p = 0.0f;
  std::uint64_t layer_seed = 0;
};

// Inverted dropout at one place of a layer (or as a layer of its own). The backend hashes its
// mask again in backward; the site remembers the seed its last forward used, for the backward
// and for another framework to repeat the step.
class DropoutSite {
 public:
  // `name`: the site's module path within its layer ("attention.self.dropout"), or "" for a
  // Dropout layer itself; its mask is recorded as "<layer path><name>.mask".
  DropoutSite(std::string name, float p, std::uint64_t salt) : name_(std::move(name)), p_(p), salt_(salt) {}
  void setup(const Shape& shape, Layout layout = Layout::plain) {
    shape_ = shape;
    layout_ = layout;
  }
  void forward(const Tensor& x, Tensor& y, StepContext& ctx) { ctx.backend.dropout_forward(x, y, p_, next_seed(ctx)); }
  // The seed this step's forward masks with, for an op that applies the mask itself (fused
  // attention): call once per forward. The step's part is the backend's (begin_step), so that a
  // replayed graph advances it.
  std::uint64_t next_seed(const StepContext& ctx) {
    layer_seed_ = (ctx.seed * 0x100000001B3ull) ^ salt_;
    return layer_seed_;
  }
  std::uint64_t seed() const { return layer_seed_; }
  float p() const { return p_; }
  void backward(const Tensor& dy, Tensor& dx, StepContext& ctx) { ctx.backend.dropout_backward(dy, dx, p_, layer_seed_); }
  void collect(const std::string& prefix, std::vector<DropoutMaskState>& out) const {
    out.push_back({prefix + (name_.empty() ? "" : name_ + ".") + "mask", shape_, layout_, p_, layer_seed_});
  }

 private:
  std::string name_;
  float p_;
  std::uint64_t salt_;
  std::uint64_t layer_seed_ = 0;  // the last forward's
  Shape shape_;
  Layout layout_ = Layout::plain;
};

class Layer {
 public:
  virtual ~Layer() = default;
  virtual std::string kind() const = 0;
  // Its parameters in order; a composite's are its children's (for_each_child), leaves override.
  virtual void collect_parameters(std::vector<Parameter*>& out) {
    for_each_child([&](const std::string&, Layer& child) { child.collect_parameters(out); });
  }
  // A composite calls `visit` with each child and its name, torchvision's module name ("layer1",
  // "0", "conv1"), or "" for a child whose modules sit directly in this one (the bottleneck's main
  // branch). Parameter names are these paths (name_parameters).
  virtual void for_each_child(const std::function<void(const std::string&, Layer&)>& visit) { (void)visit; }
  // State a step leaves that another framework needs to repeat the step: dropout masks.
  virtual void collect_step_state(const std::string& prefix, std::vector<DropoutMaskState>& out) {
    (void)prefix;
    (void)out;
  }
  // Creates ops and requests buffers with their lifetimes; returns the output's description.
  virtual Tensor setup(const Tensor& input, SetupContext& ctx) = 0;
  // After setup: when this layer's backward last reads its output's gradient, if that is not
  // the mirror of the last tick it took (the rule a Sequential assumes). A layer that passes its
  // input through and adds a side branch's gradient at its first tick says so here.
  virtual std::optional<Tick> output_grad_reader() const { return std::nullopt; }
  // After the arena is committed: state that must start at a value (running variance = 1).
  virtual void reset_state(Backend& backend) { (void)backend; }
  virtual const Tensor& forward(const Tensor& x, StepContext& ctx) = 0;
  // Writes the parameters' gradients and returns dx (empty if the input needs no gradient).
  virtual const Tensor& backward(const Tensor& dy, StepContext& ctx) = 0;
  // Multiply–accumulates of one forward pass for one sample (valid after setup).
  virtual double forward_macs_per_sample() const { return 0.0; }
};

// Calls `leaf(layer, prefix)` for every layer without children, prefix being its path ("layer1.0.").
inline void for_each_leaf(Layer& layer, const std::string& prefix, const std::function<void(Layer&, const std::string&)>& leaf) {
  bool composite = false;
  layer.for_each_child([&](const std::string& name, Layer& child) {
    composite = true;
    for_each_leaf(child, name.empty() ? prefix : prefix + name + ".", leaf);
  });
  if (!composite) leaf(layer, prefix);
}

// Gives each parameter of `network` its path, torchvision's state_dict name
// ("layer1.0.conv1.weight"), so that weights files name the same tensors in both. Once per network.
inline void name_parameters(Layer& network) {
  for_each_leaf(network, "", [](Layer& leaf, const std::string& prefix) {
    std::vector<Parameter*> own;
    leaf.collect_parameters(own);
    for (Parameter* p : own) p->name = prefix + p->name;
  });
}

// Every layer of `network`, composites too, by its path ("layer1.0.conv1"; the network itself is
// ""). A child named "" (a bottleneck's main branch) sits at its parent's path.
inline std::unordered_map<const Layer*, std::string> layer_paths(Layer& network) {
  std::unordered_map<const Layer*, std::string> out;
  const std::function<void(Layer&, const std::string&)> visit = [&](Layer& layer, const std::string& path) {
    out[&layer] = path;
    layer.for_each_child([&](const std::string& child, Layer& sub) {
      visit(sub, child.empty() ? path : path.empty() ? child : path + "." + child);
    });
  };
  visit(network, "");
  return out;
}

// How an observer names `layer` of `network`, given layer_paths(network): its path; an unnamed
// layer sits at its parent's path, and at the network's own path it is at the top level.
inline std::string layer_where(const std::unordered_map<const Layer*, std::string>& paths, const Layer& layer,
                               const Layer& network) {
  const std::string& path = paths.at(&layer);
  return !path.empty() ? path : &layer == &network ? "the network" : "top level";
}

// The step state of every layer of `network`, named by path ("classifier.2.mask").
inline std::vector<DropoutMaskState> step_state(Layer& network) {
  std::vector<DropoutMaskState> out;
  for_each_leaf(network, "", [&](Layer& leaf, const std::string& prefix) { leaf.collect_step_state(prefix, out); });
  return out;
}

// An activation or activation gradient: the compute dtype flows from the network's input
// through every layer's output.
inline Tensor activation(const Shape& shape, Layout layout, DType dtype) {
  Tensor t;
  t.shape = shape;
  t.layout = shape.rank == 4 ? layout : Layout::plain;
  t.dtype = dtype;
  return t;
}

inline Parameter make_parameter(std::string name, const Shape& shape, ParameterInit init, std::int64_t fan_in = 0,
                                std::int64_t fan_out = 0) {
  Parameter p;
  p.name = std::move(name);
  p.value.shape = shape;
  p.grad.shape = shape;
  p.init = init;
  p.fan_in = fan_in;
  p.fan_out = fan_out;
  return p;
}

}  // namespace dlbench::worker
