#pragma once

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "layers/sequential.hpp"

namespace dlbench::worker {

// Parallel branches over one input, their outputs concatenated along channels:
// torch.cat([branch(x) for branch in branches], dim=1), as in InceptionV3's blocks. Every branch
// must produce the same N, H and W. Backward splits dy into the branches' slices and sums the
// branches' input gradients. Branches are named "" so that their layers' names sit directly in
// the block, as torchvision's do ("Mixed_5b.branch5x5_1.conv.weight").
class Concat final : public Layer {
 public:
  // A new, empty branch; fill it with layers.
  Sequential& add_branch() {
    branches_.push_back(std::make_unique<Sequential>());
    return *branches_.back();
  }

  std::string kind() const override { return "Concat"; }
  void for_each_child(const std::function<void(const std::string&, Layer&)>& visit) override {
    for (auto& b : branches_) visit("", *b);
  }

  // Ticks: head h (its backward sums the branches' input gradients), each branch's in order,
  // then tail t (the copies into the output; its backward splits dy).
  Tensor setup(const Tensor& input, SetupContext& ctx) override {
    if (branches_.size() < 2) throw std::invalid_argument("Concat: needs two branches or more");
    const std::optional<Tick> outer_reader = ctx.input_grad_reader;
    const bool outer_needs_grad = ctx.input_grad_needed;
    input_grad_ = outer_needs_grad;
    const Tick h = ctx.arena.next_tick();
    std::vector<Tensor> outs;
    std::vector<Tick> last_ticks;
    for (auto& branch : branches_) {
      ctx.input_grad_needed = outer_needs_grad;
      ctx.input_grad_reader = h.mirrored();
      const Tick before = *ctx.arena.last_tick();
      outs.push_back(branch->setup(input, ctx));
      // A branch that is all views would hand dy's slice back as its dx; no block has one.
      if (ctx.arena.last_tick() == before) throw std::invalid_argument("Concat: a branch must compute something");
      last_ticks.push_back(*ctx.arena.last_tick());
    }
    ctx.input_grad_needed = outer_needs_grad;
    ctx.input_grad_reader = outer_reader;

    const Shape& first = outs.front().shape;
    std::int64_t channels = 0;
    for (const Tensor& o : outs) {
      if (o.shape.rank != 4 || o.shape.n() != first.n() || o.shape.h() != first.h() || o.shape.w() != first.w()) {
        throw std::invalid_argument("Concat: branch outputs " + first.to_string() + " and " + o.shape.to_string() +
                                    " differ in N, H or W");
      }
      channels += o.shape.c();
    }
    const Layout layout = ctx.backend.activation_layout();
    const Tick t = ctx.arena.next_tick();
    y_ = activation(Shape(first.n(), channels, first.h(), first.w()), layout, input.dtype);
    ctx.arena.request(y_, t);
    slices_.clear();
    dparts_.assign(outs.size(), Tensor{});
    std::int64_t offset = 0;
    for (std::size_t i = 0; i < outs.size(); ++i) {
      slices_.push_back(ctx.backend.make_channel_slice(outs[i].shape, channels, offset, input.dtype));
      offset += outs[i].shape.c();
      ctx.arena.read(outs[i], t);
      // Branch i's slice of dy, written when backward splits dy and read by the branch's last layer.
      dparts_[i] = activation(outs[i].shape, layout, input.dtype);
      ctx.arena.request(dparts_[i], t.mirrored());
      ctx.arena.read(dparts_[i], last_ticks[i].mirrored());
    }
    if (input_grad_) {
      add_ = ctx.backend.make_add(input.shape, input.dtype);
      dx_ = activation(input.shape, layout, input.dtype);
      ctx.request_input_grad(dx_, h.mirrored());
    }
    return y_;
  }
  void reset_state(Backend& backend) override {
    for (auto& b : branches_) b->reset_state(backend);
  }

  // The copies run after every branch (at the tail tick): y may share memory with a buffer an
  // earlier branch is still using.
  const Tensor& forward(const Tensor& x, StepContext& ctx) override {
    outs_.clear();
    for (auto& branch : branches_) outs_.push_back(&branch->forward(x, ctx));
    for (std::size_t i = 0; i < branches_.size(); ++i) slices_[i]->insert(*outs_[i], y_);
    return y_;
  }

  // The reverse of forward's order: the last branch first.
  const Tensor& backward(const Tensor& dy, StepContext& ctx) override {
    for (std::size_t i = 0; i < branches_.size(); ++i) slices_[i]->extract(dy, dparts_[i]);
    std::vector<const Tensor*> dxs(branches_.size());
    for (std::size_t i = branches_.size(); i-- > 0;) dxs[i] = &branches_[i]->backward(dparts_[i], ctx);
    if (!input_grad_) return dx_;
    add_->forward(*dxs[0], *dxs[1], dx_);
    for (std::size_t i = 2; i < dxs.size(); ++i) add_->forward(dx_, *dxs[i], dx_);
    return dx_;
  }

  double forward_macs_per_sample() const override {
    double total = 0;
    for (const auto& b : branches_) total += b->forward_macs_per_sample();
    return total;
  }

 private:
  std::vector<std::unique_ptr<Sequential>> branches_;
  std::vector<std::unique_ptr<ChannelSliceOp>> slices_;
  std::unique_ptr<AddOp> add_;
  bool input_grad_ = true;
  Tensor y_, dx_;
  std::vector<Tensor> dparts_;
  std::vector<const Tensor*> outs_;
};

}  // namespace dlbench::worker
