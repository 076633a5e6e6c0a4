#pragma once

#include <memory>
#include <optional>
#include <stdexcept>
#include <string>

#include "layers/layer.hpp"

namespace dlbench::worker {

// A spatial size one layer notes during setup and a later one reads: where a decoder's resize
// goes back to (torch's F.interpolate(x, size=low_level.shape[-2:])). Setup runs in forward
// order, so the note is written before it is read.
struct SizeNote {
  std::optional<Extent2> size;
};

// Notes the size of the tensor passing through; a view that takes no tick.
class NoteSize final : public Layer {
 public:
  explicit NoteSize(std::shared_ptr<SizeNote> note) : note_(std::move(note)) {}
  std::string kind() const override { return "NoteSize"; }
  Tensor setup(const Tensor& input, SetupContext&) override {
    if (input.shape.rank != 4) throw std::invalid_argument("NoteSize: " + input.shape.to_string() + " is not 4-D");
    note_->size = Extent2(input.shape.h(), input.shape.w());
    return input;
  }
  const Tensor& forward(const Tensor& x, StepContext&) override { return x; }
  const Tensor& backward(const Tensor& dy, StepContext&) override { return dy; }

 private:
  std::shared_ptr<SizeNote> note_;
};

// F.interpolate(x, size=<the noted size>, mode="bilinear", align_corners=False); the identity
// (a view) when the input already has that size.
class BilinearResize final : public Layer {
 public:
  explicit BilinearResize(std::shared_ptr<const SizeNote> target) : target_(std::move(target)) {}
  std::string kind() const override { return "BilinearResize"; }

  Tensor setup(const Tensor& input, SetupContext& ctx) override {
    if (!target_->size) throw std::logic_error("BilinearResize: its target size was not noted before it");
    if (input.shape.rank != 4) throw std::invalid_argument("BilinearResize: " + input.shape.to_string() + " is not 4-D");
    const Extent2 out = *target_->size;
    identity_ = out == Extent2(input.shape.h(), input.shape.w());
    if (identity_) return input;
    const ResizeConfig config{input.shape, out, input.dtype};
    op_ = ctx.backend.make_bilinear_resize(config);
    const Layout layout = ctx.backend.activation_layout();
    const Tick t = ctx.arena.next_tick();
    ctx.arena.read(input, t);  // backward needs only dy
    y_ = activation(config.output_shape(), layout, input.dtype);
    ctx.arena.request(y_, t);
    input_grad_ = ctx.input_grad_needed;
    if (input_grad_) {
      dx_ = activation(input.shape, layout, input.dtype);
      ctx.request_input_grad(dx_, t.mirrored());
    }
    return y_;
  }
  const Tensor& forward(const Tensor& x, StepContext&) override {
    if (identity_) return x;
    op_->forward(x, y_);
    return y_;
  }
  const Tensor& backward(const Tensor& dy, StepContext&) override {
    if (identity_) return dy;
    if (input_grad_) op_->backward(dy, dx_);
    return dx_;
  }

 private:
  std::shared_ptr<const SizeNote> target_;
  bool identity_ = false;
  bool input_grad_ = true;
  std::unique_ptr<ResizeOp> op_;
  Tensor y_, dx_;
};

}  // namespace dlbench::worker
