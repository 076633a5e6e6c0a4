#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "layers/layer.hpp"

namespace dlbench::worker {

// Layers run in order. Each child has a name, its index unless given one, as in torch.nn.Sequential,
// and its parameters' names start with it.
class Sequential final : public Layer {
 public:
  Sequential() = default;
  template <typename L, typename... Args>
  L& add(Args&&... args) {
    return add_named<L>(std::to_string(layers_.size()), std::forward<Args>(args)...);
  }
  template <typename L, typename... Args>
  L& add_named(std::string name, Args&&... args) {
    auto layer = std::make_unique<L>(std::forward<Args>(args)...);
    L& ref = *layer;
    layers_.push_back(std::move(layer));
    names_.push_back(std::move(name));
    return ref;
  }
  void append(std::unique_ptr<Layer> layer) {
    names_.push_back(std::to_string(layers_.size()));
    layers_.push_back(std::move(layer));
  }

  std::string kind() const override { return "Sequential"; }
  void for_each_child(const std::function<void(const std::string&, Layer&)>& visit) override {
    for (std::size_t i = 0; i < layers_.size(); ++i) visit(names_[i], *layers_[i]);
  }
  Tensor setup(const Tensor& input, SetupContext& ctx) override {
    Tensor out = input;
    const bool first_needs_grad = ctx.input_grad_needed;
    const std::optional<Tick> outer_reader = ctx.input_grad_reader;
    const std::optional<Tick> before = ctx.arena.last_tick();
    // Layer i's input gradient is read by the backward of the last tick taken before it in here
    // (or later, where that layer says so); if only views came before, by whoever reads this
    // Sequential's input gradient.
    // Until a layer computes something, layers see this Sequential's input (through views), and
    // its gradient is wanted only if that one's is.
    std::optional<Tick> reader = outer_reader;
    bool computed = false;
    ticks_.assign(layers_.size(), std::nullopt);
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      ctx.input_grad_needed = computed || first_needs_grad;
      ctx.input_grad_reader = reader;
      const std::optional<Tick> last_before = ctx.arena.last_tick();
      out = layers_[i]->setup(out, ctx);
      if (ctx.arena.last_tick() != last_before) {
        ticks_[i] = TickRange{last_before ? last_before->index + 1 : 0, ctx.arena.last_tick()->index};
        computed = true;
      }
      if (const std::optional<Tick> named = layers_[i]->output_grad_reader()) {
        reader = named;
      } else if (ctx.arena.last_tick() != last_before) {
        reader = ctx.arena.last_tick()->mirrored();
      }
    }
    ctx.input_grad_needed = first_needs_grad;
    ctx.input_grad_reader = outer_reader;
    output_grad_reader_ = ctx.arena.last_tick() != before ? reader : std::nullopt;
    return out;
  }
  std::optional<Tick> output_grad_reader() const override { return output_grad_reader_; }
  void reset_state(Backend& backend) override {
    for (auto& l : layers_) l->reset_state(backend);
  }
  // Each child is announced to the memory plan (StepContext::entering) before it runs: its
  // first tick in forward, the mirror of its last in backward; and to the observer, if any.
  const Tensor& forward(const Tensor& x, StepContext& ctx) override {
    const Tensor* t = &x;
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      if (ticks_[i]) ctx.entering(Tick{ticks_[i]->first, false});
      if (ctx.observer != nullptr) ctx.observer->before(*layers_[i], false, *t);
      t = &layers_[i]->forward(*t, ctx);
      if (ctx.observer != nullptr) ctx.observer->after(*layers_[i], false, *t);
    }
    return *t;
  }
  const Tensor& backward(const Tensor& dy, StepContext& ctx) override {
    const Tensor* t = &dy;
    for (std::size_t i = layers_.size(); i-- > 0;) {
      if (ticks_[i]) ctx.entering(Tick{ticks_[i]->last, true});
      if (ctx.observer != nullptr) ctx.observer->before(*layers_[i], true, *t);
      t = &layers_[i]->backward(*t, ctx);
      if (ctx.observer != nullptr) ctx.observer->after(*layers_[i], true, *t);
    }
    return *t;
  }
  double forward_macs_per_sample() const override {
    double total = 0;
    for (const auto& l : layers_) total += l->forward_macs_per_sample();
    return total;
  }
  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }

 private:
  std::vector<std::unique_ptr<Layer>> layers_;
  std::vector<std::string> names_;
  std::optional<Tick> output_grad_reader_;
  struct TickRange {
    std::int32_t first, last;
  };
  std::vector<std::optional<TickRange>> ticks_;  // each child's, none for a view
};

}  // namespace dlbench::worker
