#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "layers/batch_norm2d.hpp"
#include "layers/conv2d.hpp"
#include "layers/relu.hpp"
#include "layers/sequential.hpp"

namespace dlbench::worker {

// The ResNet v1.5 bottleneck: 1×1 → 3×3 (stride here, not in the 1×1 as in v1) → 1×1 with
// expansion 4, batch norm after each conv, and a projection shortcut (1×1 conv + BN) when
// the shape changes. out = relu(main(x) + shortcut(x)).
class Bottleneck final : public Layer {
 public:
  static constexpr std::int64_t kExpansion = 4;

  // `dilation` > 1 for the 3×3 of a dilated stage (torchvision's replace_stride_with_dilation:
  // DeepLab's backbone keeps the resolution and widens the receptive field instead).
  Bottleneck(std::int64_t in_channels, std::int64_t width, std::int64_t stride, std::int64_t dilation = 1) {
    const std::int64_t out_channels = width * kExpansion;
    conv1_ = &main_.add_named<Conv2d>("conv1", in_channels, width, 1);
    bn1_ = &main_.add_named<BatchNorm2d>("bn1", width, Then::relu);
    conv2_ = &main_.add_named<Conv2d>("conv2", width, width,
                                      ConvSpec{.kernel = 3, .stride = stride, .padding = dilation, .dilation = dilation});
    bn2_ = &main_.add_named<BatchNorm2d>("bn2", width, Then::relu);
    conv3_ = &main_.add_named<Conv2d>("conv3", width, out_channels, 1);
    bn3_ = &main_.add_named<BatchNorm2d>("bn3", out_channels);
    if (stride != 1 || in_channels != out_channels) {
      shortcut_ = std::make_unique<Sequential>();
      shortcut_conv_ = &shortcut_->add<Conv2d>(in_channels, out_channels, 1, stride);
      shortcut_->add<BatchNorm2d>(out_channels);
    }
  }

  std::string kind() const override { return "Bottleneck"; }
  // torchvision's names: the main branch's layers sit in the block itself, the shortcut is
  // "downsample".
  void for_each_child(const std::function<void(const std::string&, Layer&)>& visit) override {
    visit("", main_);
    if (shortcut_) visit("downsample", *shortcut_);
  }

  // Ticks: head h (its backward sums the branches' input gradients), the shortcut's, the main
  // branch's, then tail t (add and ReLU; its backward is the ReLU's). Forward runs the
  // shortcut first so that backward, which mirrors it, runs the main branch first. Where the
  // backend fuses batch norm + add + ReLU, bn3 does the tail's work at its own tick t3 and
  // writes the shortcut's gradient dz in its backward; there is no tail tick.
  //
  // Where the backend accumulates convolution input gradients, there is no sum at h either: the
  // branch whose backward runs last adds its gradient into the other's in its first convolution's
  // backward. Without a projection that is conv1, into dsum (the identity shortcut's gradient);
  // with one, the projection's convolution, into conv1's input gradient. Either buffer is then the
  // block's input gradient.
  Tensor setup(const Tensor& input, SetupContext& ctx) override {
    fused_ = ctx.backend.fuses_batch_norm_add_relu();
    bn3_->fuse_residual_add_relu(fused_ ? &dsum_ : nullptr);
    fuse_convolutions_with_batch_norms(input, ctx);
    accumulated_ = ctx.backend.accumulates_conv_input_grad();
    conv1_->accumulate_input_grad_into(accumulated_ && !shortcut_ ? &dsum_ : nullptr);
    if (shortcut_) shortcut_conv_->accumulate_input_grad_into(accumulated_ ? &conv1_->input_grad_buffer() : nullptr);
    const std::optional<Tick> outer_reader = ctx.input_grad_reader;
    const bool outer_needs_grad = ctx.input_grad_needed;
    const Tick h = ctx.arena.next_tick();
    ctx.input_grad_needed = true;
    // Accumulated, conv1's input gradient (where it has its own) is the block's.
    ctx.input_grad_reader = accumulated_ ? outer_reader : std::optional<Tick>(h.mirrored());
    Tensor short_out = input;
    std::optional<Tick> shortcut_last;
    if (shortcut_) {
      short_out = shortcut_->setup(input, ctx);
      shortcut_last = ctx.arena.last_tick();
    }
    const Tensor main_out = main_.setup(input, ctx);
    ctx.input_grad_needed = outer_needs_grad;
    ctx.input_grad_reader = outer_reader;

    const Shape out = main_out.shape;
    const Layout layout = ctx.backend.activation_layout();
    // dsum is read by both branches' last layers; backward runs the main branch first, so the
    // last reader is the shortcut's last layer, or the sum at h when the shortcut is x. It is
    // written by the tail's ReLU backward, or fused by bn3's backward (the main branch's last tick).
    const Tick dsum_reader = shortcut_last ? shortcut_last->mirrored() : h.mirrored();
    Tick dsum_written;
    if (fused_) {
      // bn3 reads z forward; bn3's y is ours.
      const Tick t3 = *ctx.arena.last_tick();
      ctx.arena.read(short_out, t3);
      dsum_written = t3.mirrored();
    } else {
      add_relu_ = ctx.backend.make_add_relu(out, input.dtype);
      relu_ = ctx.backend.make_relu(out, input.dtype);  // its backward
      const Tick t = ctx.arena.next_tick();
      ctx.arena.read(main_out, t);
      ctx.arena.read(short_out, t);
      y_ = activation(out, layout, input.dtype);
      ctx.arena.request(y_, t);
      ctx.arena.read(y_, t.mirrored());  // the ReLU's backward reads its output
      dsum_written = t.mirrored();
    }
    dsum_ = activation(out, layout, input.dtype);
    if (!accumulated_) {
      ctx.arena.request(dsum_, dsum_written);
      ctx.arena.read(dsum_, dsum_reader);
      add_grad_ = ctx.backend.make_add(input.shape, input.dtype);
      dx_ = activation(input.shape, layout, input.dtype);
      ctx.request_input_grad(dx_, h.mirrored());
    } else if (!shortcut_) {
      // dsum: the shortcut's gradient, then conv1 adds the main branch's: the block's.
      ctx.request_input_grad(dsum_, dsum_written);
      ctx.arena.read(dsum_, conv1_->tick().mirrored());
    } else {
      // conv1's input gradient lives on to the outer reader; the projection adds into it.
      ctx.arena.request(dsum_, dsum_written);
      ctx.arena.read(dsum_, dsum_reader);
      ctx.arena.read(conv1_->input_grad_buffer(), shortcut_conv_->tick().mirrored());
    }
    return fused_ ? main_out : y_;
  }
  void reset_state(Backend& backend) override {
    main_.reset_state(backend);
    if (shortcut_) shortcut_->reset_state(backend);
  }

  const Tensor& forward(const Tensor& x, StepContext& ctx) override {
    const Tensor& short_out = shortcut_ ? shortcut_->forward(x, ctx) : x;
    if (fused_) {
      bn3_->residual_input(short_out);
      return main_.forward(x, ctx);
    }
    const Tensor& main_out = main_.forward(x, ctx);
    add_relu_->forward(main_out, short_out, y_);
    return y_;
  }

  const Tensor& backward(const Tensor& dy, StepContext& ctx) override {
    // Both branches read dsum; their input gradients are summed. The reverse of forward's order.
    // Fused, bn3 takes dy itself and writes dsum (the shortcut's gradient) as it goes.
    // Accumulated, the branch that runs last has added its gradient into the other's.
    if (!fused_) relu_->backward(y_, dy, dsum_);
    const Tensor& dx_main = main_.backward(fused_ ? dy : dsum_, ctx);
    const Tensor& dx_short = shortcut_ ? shortcut_->backward(dsum_, ctx) : dsum_;
    if (accumulated_) return shortcut_ ? dx_short : dx_main;
    add_grad_->forward(dx_main, dx_short, dx_);
    return dx_;
  }

  // Whether the main branch's convolutions run fused with bn1 and bn2 (after setup).
  bool convolutions_fused() const { return bn1_->deferred(); }
  // Whether conv2's and conv3's data gradients take bn1's and bn2's gradients.
  bool batch_norm_gradients_fused() const {
    return bn1_->takes_gradients_from_convolution() && bn2_->takes_gradients_from_convolution();
  }

  double forward_macs_per_sample() const override {
    return main_.forward_macs_per_sample() + (shortcut_ ? shortcut_->forward_macs_per_sample() : 0.0);
  }

 private:
  // Where the backend fuses each of the main branch's convolutions with the batch norms around it
  // (Backend::make_fused_conv2d), bn1 and bn2 are deferred: conv1 sums its output for bn1, conv2
  // reads relu(bn1(y1)) as it reads y1 and sums its output for bn2, conv3 reads relu(bn2(y2)); no
  // normalised tensor is written. With the residual fused into bn3 (called after
  // fuse_residual_add_relu), conv3 sums its output for bn3 too, which then reads y3 once instead of
  // twice. All three or none: a batch norm is deferred only between two fused convolutions. Where
  // conv2's and conv3's ops fuse it, their data gradients take bn1's and bn2's gradients too
  // (FusedConv2dOp::backward_data_batch_norm), and those batch norms' backward applies them.
  void fuse_convolutions_with_batch_norms(const Tensor& input, SetupContext& ctx) {
    for (Conv2d* conv : {conv1_, conv2_, conv3_}) conv->fuse(nullptr, nullptr, nullptr);
    for (BatchNorm2d* bn : {bn1_, bn2_}) {
      bn->take_gradients_from_convolution(false);
      bn->defer_to_convolutions(false);
    }
    bn3_->take_statistics_from_convolution(false);
    const Conv2dConfig c1 = conv1_->config_for(input.shape, input.dtype);
    const Conv2dConfig c2 = conv2_->config_for(c1.output(), input.dtype);
    const Conv2dConfig c3 = conv3_->config_for(c2.output(), input.dtype);
    // The convolutions that read a normalised input first: the rarest fusion (no engine offers it
    // in bf16 on an H200), so a block that cannot fuse asks nothing more, and conv1's plain
    // statistics fusion, which only runtime-compiled engines may offer, is not compiled for nothing.
    std::unique_ptr<FusedConv2dOp> f2 = ctx.backend.make_fused_conv2d({c2, true, true, true});
    if (!f2) return;
    std::unique_ptr<FusedConv2dOp> f3 = ctx.backend.make_fused_conv2d({c3, true, fused_, true});
    if (!f3) return;
    std::unique_ptr<FusedConv2dOp> f1 = ctx.backend.make_fused_conv2d({c1, false, true});
    if (!f1) return;
    for (BatchNorm2d* bn : {bn1_, bn2_}) bn->defer_to_convolutions(true);
    bn3_->take_statistics_from_convolution(fused_);
    // The batch norm before a convolution whose data gradient takes its gradients, if it does.
    const auto gradients_of = [](BatchNorm2d* bn, const FusedConv2dOp& op) -> std::optional<BatchNormBeforeConvolution> {
      bn->take_gradients_from_convolution(op.fuses_input_batch_norm_gradients());
      if (!op.fuses_input_batch_norm_gradients()) return std::nullopt;
      return bn->as_input_of_convolution();
    };
    const std::optional<BatchNormBeforeConvolution> bn1_gradients = gradients_of(bn1_, *f2);
    const std::optional<BatchNormBeforeConvolution> bn2_gradients = gradients_of(bn2_, *f3);
    conv1_->fuse(std::move(f1), nullptr, &bn1_->sums());
    conv2_->fuse(std::move(f2), &bn1_->scale_shift(), &bn2_->sums(), bn1_gradients);
    conv3_->fuse(std::move(f3), &bn2_->scale_shift(), fused_ ? &bn3_->sums() : nullptr, bn2_gradients);
  }

  Sequential main_;
  Conv2d *conv2_ = nullptr, *conv3_ = nullptr;
  BatchNorm2d *bn1_ = nullptr, *bn2_ = nullptr;
  Conv2d* conv1_ = nullptr;          // main_'s first layer
  BatchNorm2d* bn3_ = nullptr;       // main_'s last layer
  Conv2d* shortcut_conv_ = nullptr;  // the projection's convolution, if any
  bool fused_ = false;               // bn3 adds the shortcut and applies the ReLU
  bool accumulated_ = false;         // a branch's convolution adds its input gradient into the other's
  std::unique_ptr<Sequential> shortcut_;
  std::unique_ptr<AddOp> add_relu_, add_grad_;
  std::unique_ptr<ReluOp> relu_;
  Tensor y_, dsum_, dx_;
};

// How many of a set-up network's bottlenecks run their convolutions fused with their batch norms
// (a block fuses all three or none), and of those how many data gradients take the batch norms'
// gradients.
struct FusedBlocks {
  int blocks = 0, fused = 0, gradients = 0;
};
inline FusedBlocks count_fused_blocks(Layer& network) {
  FusedBlocks count;
  const std::function<void(Layer&)> visit = [&](Layer& layer) {
    if (const auto* block = dynamic_cast<const Bottleneck*>(&layer)) {
      ++count.blocks;
      count.fused += block->convolutions_fused() ? 1 : 0;
      count.gradients += block->batch_norm_gradients_fused() ? 1 : 0;
      return;
    }
    layer.for_each_child([&](const std::string&, Layer& child) { visit(child); });
  };
  visit(network);
  return count;
}

}  // namespace dlbench::worker
