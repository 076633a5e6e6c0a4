// The seam between models and hardware. Layers are written once against these operations;
// `cpu` implements them with oneDNN, `cuda` (later) with cuDNN, cuBLAS and own kernels.
// Each layer creates its ops once at setup (descriptors, algorithm choice, cached
// primitives) and calls them every step with the same buffers.
#pragma once

#include <array>
#include <chrono>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "dlbench/core/enums.hpp"
#include "tensor.hpp"
#include "learning_rate_warmup.hpp"
#include "loss_scaler.hpp"

namespace dlbench::worker {

// Every op computes in its activations' dtype (`dtype`); parameters and their gradients are
// fp32 (master weights) whatever the activations are, and ops convert them as their kernels need.
// An extent along (height, width): a kernel's size or its padding. One number means both.
struct Extent2 {
  std::int64_t h = 0, w = 0;
  constexpr Extent2() = default;
  constexpr Extent2(std::int64_t both) : h(both), w(both) {}  // NOLINT: 3 reads as 3×3, as in torch
  constexpr Extent2(std::int64_t height, std::int64_t width) : h(height), w(width) {}
  auto operator<=>(const Extent2&) const = default;
};

// How many positions a window (a convolution's kernel with its dilation, a pool's) takes along one
// axis, floor mode, as torch computes it; std::invalid_argument naming `what` and the sizes where
// the window does not fit the padded input at all (C++'s division truncates toward zero, so the
// formula alone would give a 3-wide window over 2 pixels one position, where torch refuses).
inline std::int64_t window_positions(std::int64_t input, std::int64_t padding, std::int64_t window, std::int64_t stride,
                                     std::string_view what) {
  const std::int64_t room = input + 2 * padding - window;
  if (room < 0 || stride < 1) {
    throw std::invalid_argument(std::string(what) + ": a window of " + std::to_string(window) +
                                " does not fit an input of " + std::to_string(input) + " with padding " +
                                std::to_string(padding) + " on each side (stride " + std::to_string(stride) + ")");
  }
  return room / stride + 1;
}

// torch.nn.Conv2d's geometry: rectangular kernels (InceptionV3's 1×7 and 7×1) and padding, one
// stride and one dilation for both axes (DeepLab's atrous convolutions).
struct Conv2dConfig {
  Shape input;  // N, C, H, W
  std::int64_t out_channels = 0;
  Extent2 kernel{1};
  std::int64_t stride = 1;
  Extent2 padding{0};
  bool bias = false;
  DType dtype = DType::fp32;
  std::int64_t dilation = 1;

  // Throws std::invalid_argument where the kernel does not fit the padded input.
  Shape output() const {
    return {input.n(), out_channels,
            window_positions(input.h(), padding.h, dilation * (kernel.h - 1) + 1, stride, "convolution (height)"),
            window_positions(input.w(), padding.w, dilation * (kernel.w - 1) + 1, stride, "convolution (width)")};
  }
  Shape weight() const { return {out_channels, input.c(), kernel.h, kernel.w}; }
};

class Conv2dOp {
 public:
  virtual ~Conv2dOp() = default;
  virtual void forward(const Tensor& x, const Tensor& weight, const Tensor* bias, Tensor& y) = 0;
  virtual void backward_data(const Tensor& dy, const Tensor& weight, Tensor& dx) = 0;
  // dx += the input gradient, in the same pass (only where Backend::accumulates_conv_input_grad()):
  // a residual block's branch adds its gradient into the other branch's instead of a sum apart.
  virtual void backward_data_accumulate(const Tensor& dy, const Tensor& weight, Tensor& dx);
  virtual void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweight, Tensor* dbias) = 0;
};

// A convolution fused with the batch norms on either side of it (Backend::make_fused_conv2d; the
// ResNet recipe of NVIDIA's MLPerf submissions, through cuDNN's fusion engines): its input may be a
// deferred batch norm's input x, normalised and ReLU'd as it is read, relu(x · scale + shift) per
// channel, so that no normalised tensor is written; and its forward may sum its output per channel
// for the next batch norm (Σy and Σy², fp32), which then does not read y for its statistics. Its
// data gradient is the plain convolution's (Conv2dOp): the gradient of relu(x · scale + shift); or,
// with input_batch_norm_gradients where the op fuses it (cuDNN's DgradDreluBNBwdWeight), that
// gradient through the ReLU with the batch norm's weight gradients and its input gradient's
// coefficients reduced as it is written (backward_data_batch_norm), so that the batch norm's
// backward is one elementwise pass (BatchNormOp::backward_deferred_apply).
struct BatchNormStatistics;

struct FusedConv2dConfig {
  Conv2dConfig conv;  // without bias
  bool normalized_input = false;
  bool output_sums = false;
  bool input_batch_norm_gradients = false;  // with normalized_input: wanted, where the op can
};

class FusedConv2dOp {
 public:
  virtual ~FusedConv2dOp() = default;
  // scale_shift: (2, C_in) in the activations' dtype, the scales then the shifts (with
  // normalized_input, else null); sums: (2, C_out) fp32, Σy then Σy² (with output_sums, else null).
  virtual void forward(const Tensor& x, const Tensor* scale_shift, const Tensor& weight, Tensor& y, Tensor* sums) = 0;
  // The filter gradient from relu(x · scale + shift). Only with normalized_input: otherwise the
  // layer's plain convolution computes it (a backend may refuse the call).
  virtual void backward_weights(const Tensor& x, const Tensor* scale_shift, const Tensor& dy, Tensor& dweight) = 0;
  // Whether backward_data_batch_norm runs: made with input_batch_norm_gradients, and fused.
  virtual bool fuses_input_batch_norm_gradients() const { return false; }
  // The data gradient through the deferred batch norm's ReLU before the convolution, and that batch
  // norm's backward up to its last pass: g = dgrad(dy, w) where (x − mean) · inverse std · γ + β > 0
  // (x: the batch norm's input, the convolution's; statistics: the deferred batch norm's, whose
  // spread is 1/sqrt(var + ε)), written to `masked`; dgamma = Σ g · x̂ and dbeta = Σ g, overwritten;
  // coefficients ((3, C_in) fp32): a, b and c of the batch norm's input gradient a · g + b · x + c.
  virtual void backward_data_batch_norm(const Tensor& dy, const Tensor& weight, const Tensor& x,
                                        const BatchNormStatistics& statistics, const Tensor& gamma, const Tensor& beta,
                                        Tensor& masked, Tensor& dgamma, Tensor& dbeta, Tensor& coefficients);
};

struct BatchNormConfig {
  Shape input;
  float epsilon = 1e-5f;
  DType dtype = DType::fp32;  // of x, y, dx and dy; statistics, scale and shift are fp32
  // y = relu(bn(x)) in one pass, and backward through both (only where fuses_batch_norm_relu()).
  bool relu = false;
  float momentum = 0.1f;  // of the running statistics, PyTorch's
  // y = relu(bn(x) + z): a residual block's add and ReLU in the batch norm's pass, through
  // forward_training_add_relu and backward_add_relu (only where fuses_batch_norm_add_relu()).
  bool add_relu = false;
  // Deferred to the convolutions around it (FusedConv2dConfig), always with its ReLU: forward
  // takes the batch's statistics from the convolution before (its sums) and writes the scale and
  // shift the convolution after applies as it reads x; no y is written. Through forward_deferred
  // and backward_deferred.
  bool deferred = false;
  // Its statistics from the convolution before's sums (BatchNormStatistics::sums, written by a
  // FusedConv2dOp with output_sums) instead of a pass over x: a residual block's last batch norm,
  // with add_relu.
  bool from_sums = false;
};

// A batch norm's per-channel fp32 statistics, C values each.
struct BatchNormStatistics {
  Tensor mean;  // the batch's, kept for backward
  // The batch's spread, kept for backward in the backend's own form (oneDNN: the biased
  // variance; cuDNN: 1/sqrt(variance + epsilon)): only the op that wrote it reads it, so no
  // backend converts it back and forth.
  Tensor spread;
  Tensor running_mean;  // across steps: (1 − momentum) · running + momentum · the batch's mean
  Tensor running_var;   // the same with the batch's unbiased variance (PyTorch's rule)
  // (2, C) fp32, Σx then Σx², where the convolution before writes them (deferred, from_sums).
  Tensor sums;
};

class BatchNormOp {
 public:
  virtual ~BatchNormOp() = default;
  // Bytes of state that forward leaves for backward (the ReLU's mask when fused), or 0.
  virtual std::size_t workspace_bytes() const { return 0; }
  // Whether backward reads forward's output y (cuDNN's fused ReLU finds its mask there), so that
  // the layer keeps y alive until then.
  virtual bool backward_reads_output() const { return false; }
  // Normalises with the batch's statistics, keeps them for backward and updates the running
  // ones, in one pass where the library can.
  virtual void forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                                BatchNormStatistics& statistics, void* workspace) = 0;
  // y is forward's output and beta its shift: read only by an op that says so (a fused ReLU).
  virtual void backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& gamma, const Tensor& beta,
                        const BatchNormStatistics& statistics, Tensor& dx, Tensor& dgamma, Tensor& dbeta,
                        const void* workspace) = 0;
  // With BatchNormConfig::add_relu: y = relu(bn(x) + z), and backward's dz = dy where y > 0 (the
  // residual's gradient) with dx through the batch norm from the same masked gradient. Backward
  // reads y (backward_reads_output()). Ops made without add_relu refuse both.
  virtual void forward_training_add_relu(const Tensor& x, const Tensor& z, const Tensor& gamma, const Tensor& beta,
                                         Tensor& y, BatchNormStatistics& statistics, void* workspace);
  virtual void backward_add_relu(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& gamma,
                                 const Tensor& beta, const BatchNormStatistics& statistics, Tensor& dx, Tensor& dz,
                                 Tensor& dgamma, Tensor& dbeta, const void* workspace);
  // With BatchNormConfig::deferred: the batch's statistics from `sums` ((2, C) fp32: Σx, Σx² over
  // the batch's N·H·W values, FusedConv2dOp's), the running ones updated, and scale_shift ((2, C)
  // in the activations' dtype) = γ / sqrt(var + ε), β − mean · scale. Backward: dy is the gradient
  // of relu(x · scale + shift), its mask found again from x as the own kernels' ReLU tail finds it,
  // (x − mean) · scale + β (the same value to rounding); dx, dgamma and dbeta as backward's. Ops
  // made without deferred refuse both.
  virtual void forward_deferred(const Tensor& sums, const Tensor& gamma, const Tensor& beta, Tensor& scale_shift,
                                BatchNormStatistics& statistics);
  virtual void backward_deferred(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& beta,
                                 const BatchNormStatistics& statistics, Tensor& dx, Tensor& dgamma, Tensor& dbeta);
  // Deferred, where the convolution after took its gradients (FusedConv2dOp::backward_data_batch_norm):
  // dx = a · g + b · x + c per channel, g the masked gradient that convolution wrote and a, b, c its
  // coefficients ((3, C) fp32).
  virtual void backward_deferred_apply(const Tensor& x, const Tensor& masked, const Tensor& coefficients, Tensor& dx);
};

class ReluOp {
 public:
  virtual ~ReluOp() = default;
  virtual void forward(const Tensor& x, Tensor& y) = 0;  // y may be x (in place)
  // Uses the output: dx = dy where y > 0. dx may be dy.
  virtual void backward(const Tensor& y, const Tensor& dy, Tensor& dx) = 0;
};

enum class PoolKind { max, average };

struct PoolConfig {
  Shape input;
  PoolKind kind = PoolKind::max;
  Extent2 kernel{2};  // rectangular for a global pool over a non-square image
  std::int64_t stride = 2;
  std::int64_t padding = 0;
  DType dtype = DType::fp32;

  // Throws std::invalid_argument where the window does not fit the padded input.
  Shape output() const {
    return {input.n(), input.c(), window_positions(input.h(), padding, kernel.h, stride, "pooling (height)"),
            window_positions(input.w(), padding, kernel.w, stride, "pooling (width)")};
  }
};

class PoolOp {
 public:
  virtual ~PoolOp() = default;
  // Bytes of state that forward leaves for backward (the arg-max of max pooling).
  virtual std::size_t workspace_bytes() const = 0;
  // Whether backward reads the forward's x and y again (cuDNN's pooling finds the arg-max that
  // way, oneDNN's keeps it in the workspace): the layer then keeps both alive until backward.
  virtual bool backward_reads_activations() const = 0;
  virtual void forward(const Tensor& x, Tensor& y, void* workspace) = 0;
  // x and y are the forward's; an op that does not read them again must not touch them.
  virtual void backward(const Tensor& x, const Tensor& y, const Tensor& dy, const void* workspace, Tensor& dx) = 0;
};

struct LinearConfig {
  std::int64_t batch = 0;
  std::int64_t in_features = 0;
  std::int64_t out_features = 0;
  bool bias = true;
  DType dtype = DType::fp32;
};

class LinearOp {
 public:
  virtual ~LinearOp() = default;
  virtual void forward(const Tensor& x, const Tensor& weight, const Tensor* bias, Tensor& y) = 0;
  virtual void backward_data(const Tensor& dy, const Tensor& weight, Tensor& dx) = 0;
  virtual void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweight, Tensor* dbias) = 0;
};

class AddOp {
 public:
  virtual ~AddOp() = default;
  virtual void forward(const Tensor& a, const Tensor& b, Tensor& y) = 0;  // y may be a
};

// Copies a 4-D tensor from one memory order to another (same shape and dtype): NHWC activations
// flattened in PyTorch's (C, H, W) order before a linear layer, and back for the gradient.
class ReorderOp {
 public:
  virtual ~ReorderOp() = default;
  virtual void run(const Tensor& x, Tensor& y) = 0;
};

// Copies a 4-D tensor into channels [offset, offset + its channels) of a wider one with the same
// N, H and W, or that slice back out: torch.cat(branches, dim=1) forward, and the split of its
// gradient backward (InceptionV3's branches, DeepLab's decoder).
class ChannelSliceOp {
 public:
  virtual ~ChannelSliceOp() = default;
  virtual void insert(const Tensor& part, Tensor& whole) = 0;
  virtual void extract(const Tensor& whole, Tensor& part) = 0;
};

// Bilinear resizing of a 4-D tensor's H and W, as torch.nn.functional.interpolate(mode="bilinear",
// align_corners=False): output pixel i samples the input at (i + 0.5) · in/out - 0.5, clamped to
// the edges. DeepLab's decoder upsamples by it; backward spreads each output gradient over the
// four input pixels it read (in any order: sums may differ in the last bit between runs on a GPU).
struct ResizeConfig {
  Shape input;     // N, C, H, W
  Extent2 output;  // the output's H and W
  DType dtype = DType::fp32;
  Shape output_shape() const { return {input.n(), input.c(), output.h, output.w}; }
};

class ResizeOp {
 public:
  virtual ~ResizeOp() = default;
  virtual void forward(const Tensor& x, Tensor& y) = 0;
  virtual void backward(const Tensor& dy, Tensor& dx) = 0;
};

// Per-pixel labels equal to this are left out of a segmentation loss: Cityscapes' "void" (its
// train ids use 255), torch.nn.CrossEntropyLoss(ignore_index=255).
inline constexpr std::int32_t kIgnoreLabel = 255;

// One term of a step's loss: `weight` · mean cross-entropy. A network with an auxiliary
// classifier (InceptionV3) has two: the auxiliary head's (weight 0.4) during forward, then the
// main one, which adds to it.
struct LossTerm {
  float weight = 1.0f;
  bool adds_to_step_loss = false;  // false: this term starts the step's loss
};

// Transformer ops (BERT). Their tensors are row-major (Layout::plain) whatever their rank, and a
// matrix of `rows` × `features` is any tensor of that many elements.

// C[b] = alpha · op(A[b]) · op(B[b]) for each of `batch` contiguous matrices, op(X) = Xᵀ where
// asked: attention's scores (alpha · Q Kᵀ), its context (P V) and their gradients. A[b] is stored
// (m, k), or (k, m) when transposed; B[b] (k, n), or (n, k); C[b] (m, n). Accumulates in fp32.
struct BatchedMatmulConfig {
  std::int64_t batch = 1, m = 0, n = 0, k = 0;
  bool transpose_a = false, transpose_b = false;
  float alpha = 1.0f;
  DType dtype = DType::fp32;
};

class BatchedMatmulOp {
 public:
  virtual ~BatchedMatmulOp() = default;
  virtual void run(const Tensor& a, const Tensor& b, Tensor& c) = 0;
};

// Layer normalization over each row's `features` values (torch.nn.LayerNorm(features)), with an
// fp32 scale (gamma) and shift (beta) per feature.
struct LayerNormConfig {
  std::int64_t rows = 0;
  std::int64_t features = 0;
  float epsilon = 1e-12f;  // BERT's
  DType dtype = DType::fp32;  // of x, y, dx and dy
};

class LayerNormOp {
 public:
  virtual ~LayerNormOp() = default;
  // mean and variance: fp32, one per row, kept for backward.
  virtual void forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& mean,
                       Tensor& variance) = 0;
  virtual void backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& beta, const Tensor& mean,
                        const Tensor& variance, Tensor& dx, Tensor& dgamma, Tensor& dbeta) = 0;
};

// Where each row's softmax covers only its first columns: row r covers lengths[r / rows_per_length]
// of them, and the rest get probability 0 (attention over a padded sequence: no key past its real
// tokens; the lengths are the labels block's, 1 to columns).
struct RowLengths {
  const std::int32_t* lengths = nullptr;  // in the backend's memory; null: every row covers every column
  std::int64_t rows_per_length = 1;
};

// Softmax over each row's `columns` values (attention probabilities).
class SoftmaxOp {
 public:
  virtual ~SoftmaxOp() = default;
  virtual void forward(const Tensor& x, Tensor& y, RowLengths lengths) = 0;
  void forward(const Tensor& x, Tensor& y) { forward(x, y, RowLengths{}); }
  // From the output: dx = y ⊙ (dy − Σ dy ⊙ y) per row.
  virtual void backward(const Tensor& y, const Tensor& dy, Tensor& dx) = 0;
};

enum class ActivationKind {
  gelu,  // x · Φ(x) with the exact erf (BERT's and torch.nn.GELU()'s default)
  tanh,  // BERT's pooler
};

// An elementwise activation; backward reads the input.
class ActivationOp {
 public:
  virtual ~ActivationOp() = default;
  virtual void forward(const Tensor& x, Tensor& y) = 0;
  virtual void backward(const Tensor& x, const Tensor& dy, Tensor& dx) = 0;
};

// y[a][c][b][d] = x[a][b][c][d] for x of shape (A, B, C, D): attention's (batch, tokens, heads,
// head size) ↔ (batch, heads, tokens, head size).
class SwapAxesOp {
 public:
  virtual ~SwapAxesOp() = default;
  virtual void run(const Tensor& x, Tensor& y) = 0;
};

// Multi-head scaled dot-product attention as one op, dropout on the probabilities included
// (BERT's self-attention): per sequence and head,
//   context = dropout(softmax(Q Kᵀ / √head_size)) V,
// the softmax over the sequence's real tokens only where `real_tokens` (one per sequence, 1 to
// tokens, in the backend's memory) says where its padding starts: BERT's attention mask, whose
// -10000 added to a padding key's score leaves it e^-10000 = 0 in fp32. Every query row, padding
// included, attends so.
// q, k, v, context and their gradients are (sequences · tokens, heads · head_size), row-major, as
// the projections write them: a head's columns are contiguous and nothing swaps axes. Forward
// writes `statistics` (fp32, (sequences, heads, tokens)): each query row's log-sum-exp of its
// scaled scores, from which backward recomputes the probabilities instead of keeping them. The
// dropout mask is dropout_mask.hpp's over the (sequences, heads, tokens, tokens) probabilities
// with the step's key: the one the composed path (batched matmuls, softmax, dropout) applies.
struct AttentionConfig {
  std::int64_t sequences = 0, tokens = 0, heads = 0, head_size = 0;
  DType dtype = DType::fp32;
};

// The checks every AttentionOp makes: each of `rows` holds (sequences · tokens, heads · head_size)
// values in config.dtype, and `statistics` (sequences · heads · tokens) fp32 values. Throws
// std::invalid_argument naming the tensor otherwise.
void require_attention_tensors(const AttentionConfig& config, std::initializer_list<const Tensor*> rows,
                               const Tensor& statistics);

class AttentionOp {
 public:
  virtual ~AttentionOp() = default;
  // real_tokens: null when every token is real.
  virtual void forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& context, Tensor& statistics,
                       float dropout, std::uint64_t layer_seed, const std::int32_t* real_tokens) = 0;
  virtual void backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dcontext,
                        const Tensor& statistics, float dropout, std::uint64_t layer_seed, const std::int32_t* real_tokens,
                        Tensor& dq, Tensor& dk, Tensor& dv) = 0;
  void forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& context, Tensor& statistics, float dropout,
               std::uint64_t layer_seed) {
    forward(q, k, v, context, statistics, dropout, layer_seed, nullptr);
  }
  void backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dcontext, const Tensor& statistics,
                float dropout, std::uint64_t layer_seed, Tensor& dq, Tensor& dk, Tensor& dv) {
    backward(q, k, v, dcontext, statistics, dropout, layer_seed, nullptr, dq, dk, dv);
  }
};

// A contiguous range of the parameters' flat buffers and whether weight decay applies to it
// (BERT decays matrices and embeddings, not biases or LayerNorm's scale and shift).
struct ParameterRange {
  std::int64_t offset = 0;
  std::int64_t count = 0;
  bool decays = true;
  bool operator==(const ParameterRange&) const = default;
};

// torch.optim.AdamW (decoupled weight decay, bias-corrected moments), after clipping the
// gradients to a global norm as torch.nn.utils.clip_grad_norm_(max_grad_norm) does:
// g *= min(1, max_grad_norm / (‖g‖₂ + 1e-6)); max_grad_norm <= 0 turns clipping off.
struct AdamWConfig {
  float learning_rate = 1e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-6f;  // BERT's
  float weight_decay = 0.01f;
  float max_grad_norm = 1.0f;
  std::uint64_t warmup_updates = 0;  // warmed_up_rate's: the decoupled decay takes the warmed-up rate too
};

// torch.optim.SGD's hyper-parameters, and the updates its rate warms up over (warmed_up_rate).
struct SgdConfig {
  float learning_rate = 0.1f;
  float momentum = 0.9f;
  float weight_decay = 1e-4f;
  std::uint64_t warmup_updates = 0;
};

// Marks in a backend's queue of work, to time steps without waiting for each one: the host
// queues the next step while the device runs this one, and reads the times once per repeat.
class StepMarks {
 public:
  virtual ~StepMarks() = default;
  // A mark behind everything queued so far.
  virtual void mark() = 0;
  // The seconds between consecutive marks that no earlier call returned, in order. Without
  // `wait`, only those whose closing mark the device has already reached (nothing waits: live
  // metrics follow the steps as they finish); with it, all of them after the last mark, and
  // the marks start over.
  virtual std::vector<double> drain(bool wait) = 0;
};

// Marks on the host's steady clock, each taken after `wait` returns: exact for a backend whose
// work is done when its calls return (the CPU's), and right for any other at the cost of a wait
// per mark.
class HostClockMarks final : public StepMarks {
 public:
  explicit HostClockMarks(std::function<void()> wait) : wait_(std::move(wait)) {}
  void mark() override;
  std::vector<double> drain(bool wait) override;

 private:
  std::function<void()> wait_;
  std::vector<std::chrono::steady_clock::time_point> marks_;
  std::size_t returned_ = 0;  // intervals already returned
};

// A tensor's values that are not finite (Backend::count_non_finite).
struct NonFiniteCount {
  std::int64_t inf = 0, nan = 0;
  std::int64_t total() const { return inf + nan; }
};

// The infs and NaNs among `n` values in host memory.
NonFiniteCount count_non_finite(const float* values, std::int64_t n);

class Backend {
 public:
  virtual ~Backend() = default;

  virtual std::string name() const = 0;
  // Memory order this backend wants for 4-D activations.
  virtual Layout activation_layout() const = 0;
  // Library versions etc. for the result's environment, as "key=value;…".
  virtual std::string version_info() const = 0;
  // The choices this backend made that change what runs or how fast (its developer switches'
  // values, defaults included), by name: the result's environment.backendOptions.
  virtual std::map<std::string, std::string> options() const { return {}; }
  // Why this backend cannot compute with activations of `dtype` here (the missing ISA, say), or
  // nothing when it can. Ops must not be made for a dtype it cannot compute.
  virtual std::optional<std::string> cannot_compute(DType dtype) const = 0;
  // Why this backend's device can run nothing more in this process (a fault that poisons a CUDA
  // context: every later call fails with it), or nothing. The self-test stops running checks
  // then, rather than report each later one failing with the first one's error.
  virtual std::optional<std::string> device_lost() const { return std::nullopt; }

  // Device memory, zero-filled.
  virtual std::shared_ptr<void> allocate(std::size_t bytes) = 0;
  virtual void copy_from_host(void* device_dst, const void* host_src, std::size_t bytes) = 0;
  // Host memory this backend copies from fastest, for what goes to the device every step (the
  // input pipeline's batches): page-locked on a GPU, where a copy from ordinary memory goes through
  // a staging buffer at a fraction of the bus's rate. The default is ordinary memory, zeroed (so
  // faulted in now, not at the first batch's write) and advised as huge pages (host_memory.hpp).
  virtual std::shared_ptr<void> allocate_host(std::size_t bytes);
  virtual void copy_to_host(void* host_dst, const void* device_src, std::size_t bytes) = 0;
  // Input batches copied to the device while the step before them runs (Trainer::stage_batch),
  // where this backend can overlap them with its steps: stage_from_host queues host_src → staging
  // (device memory of the batch's own) behind every earlier take_staged, and returns; take_staged
  // queues staging → device_dst in the steps' own order, behind the staged copies; and
  // wait_staged_reads returns once every staged copy has read its host memory, which may then be
  // reused. A backend that does not overlap (the default: the CPU's, whose steps are done when
  // they return) is never given these calls, which then refuse.
  virtual bool overlaps_host_copies() const { return false; }
  virtual void stage_from_host(void* staging, const void* host_src, std::size_t bytes);
  virtual void take_staged(void* device_dst, const void* staging, std::size_t bytes);
  virtual void wait_staged_reads();
  // A packed batch of decoded crops (input/packed_images.hpp), staged by stage_from_host into
  // `packed` (device memory), resized, normalised and rounded into `staging` (images × 3 × side ×
  // side values of `dtype`, channels last or planar), queued behind that copy and before the next
  // take_staged; the input pipeline's batch bit for bit (DLBENCH_INPUT_RESIZE=device). Refused where
  // the backend does not overlap host copies.
  virtual void expand_staged_images(void* staging, const void* packed, std::int64_t images, int side, DType dtype,
                                    bool channels_last);
  // The parameters' flat fp32 values (ParameterStore::bind), of which a backend may keep copies in
  // the types its ops compute in (the CUDA backend's DLBENCH_CUDA_WEIGHT_COPIES=kept). It sees its
  // own calls write them; parameters_written tells it of any other writer (a broadcast).
  virtual void bind_parameters(const std::shared_ptr<const void>& /*values*/, std::int64_t /*elements*/) {}
  virtual void parameters_written() {}
  // Sets every bit of `bytes` of device memory, queued like any op: NaN in fp32, fp16 and bf16
  // alike (the memory plan's poison mode). The default copies from the host.
  virtual void poison(void* device_dst, std::size_t bytes);
  // Waits until every queued operation has finished (a no-op on the CPU).
  virtual void synchronize() = 0;
  // Marks for timing steps in this backend's queue (the CUDA backend's are events on its stream).
  virtual std::unique_ptr<StepMarks> make_step_marks() {
    return std::make_unique<HostClockMarks>([this] { synchronize(); });
  }

  virtual std::unique_ptr<Conv2dOp> make_conv2d(const Conv2dConfig& config) = 0;
  virtual std::unique_ptr<BatchNormOp> make_batch_norm(const BatchNormConfig& config) = 0;
  // Whether make_batch_norm takes relu = true; where not, layers run a ReluOp after it.
  virtual bool fuses_batch_norm_relu() const { return false; }
  // Whether make_batch_norm takes add_relu = true; where not, residual blocks add and ReLU apart.
  virtual bool fuses_batch_norm_add_relu() const { return false; }
  // A convolution fused with the batch norms around it, or null where this backend does not fuse
  // this one (its route is off, or no engine runs it); make_batch_norm then takes deferred = true
  // for the batch norm between two such convolutions.
  virtual std::unique_ptr<FusedConv2dOp> make_fused_conv2d(const FusedConv2dConfig& config) {
    (void)config;
    return nullptr;
  }
  // Whether Conv2dOp::backward_data_accumulate runs; where not, residual blocks sum their
  // branches' input gradients with an AddOp.
  virtual bool accumulates_conv_input_grad() const { return false; }
  // Why this backend's convolutions may give other bits when run again on the same inputs (an
  // algorithm that adds in the order the device schedules its work), or nothing where they give
  // the same. Every other op of a backend must give the same bits run to run (the self-test's
  // "run to run" check).
  virtual std::optional<std::string> nondeterministic_convolutions() const { return std::nullopt; }
  virtual std::unique_ptr<ReluOp> make_relu(const Shape& shape, DType dtype) = 0;
  virtual std::unique_ptr<PoolOp> make_pool(const PoolConfig& config) = 0;
  virtual std::unique_ptr<LinearOp> make_linear(const LinearConfig& config) = 0;
  virtual std::unique_ptr<AddOp> make_add(const Shape& shape, DType dtype) = 0;
  // y = max(a + b, 0): a residual block's tail. A backend that does it in one pass overrides this
  // (oneDNN: the add with a ReLU post-op); the default runs the add, then a ReLU in place.
  virtual std::unique_ptr<AddOp> make_add_relu(const Shape& shape, DType dtype);
  virtual std::unique_ptr<ReorderOp> make_reorder(const Shape& shape, DType dtype, Layout from, Layout to) = 0;
  // `part` (N, C, H, W) as channels [offset, offset + C) of an (N, whole_channels, H, W) tensor,
  // both in activation_layout().
  virtual std::unique_ptr<ChannelSliceOp> make_channel_slice(const Shape& part, std::int64_t whole_channels,
                                                             std::int64_t offset, DType dtype) = 0;
  virtual std::unique_ptr<ResizeOp> make_bilinear_resize(const ResizeConfig& config) = 0;

  // Dynamic loss scaling's check, queued like any op: grads *= 1 / state->scale, then `state`
  // (in this backend's memory) moves on by next_loss_scale: whether the step overflowed, the next
  // scale, the clean streak and the skipped count. Nothing waits for the device; the update that
  // follows, given the same state, skips itself when the step overflowed. So a captured step
  // graph replays the whole of it.
  virtual void unscale_and_check_finite(float* grads, std::int64_t count, LossScaleState* state,
                                        const LossScalingConfig& config) = 0;
  // How many of `t`'s values are inf and how many NaN (an int32 tensor holds neither). A
  // diagnosis, never in a timed step: it waits for the device. The default downloads the tensor
  // and counts on the host; a GPU backend counts where the values are.
  virtual NonFiniteCount count_non_finite(const Tensor& t);
  // Adaptive average pooling to (out_h, out_w), PyTorch's window rule.
  virtual void adaptive_avg_pool_forward(const Tensor& x, Tensor& y) = 0;
  virtual void adaptive_avg_pool_backward(const Tensor& dy, Tensor& dx) = 0;
  // The step the next forward belongs to (its dropout masks differ from other steps'). The CUDA
  // backend keeps it on the device: called while a step is captured, the graph advances it by one
  // at each replay, so replayed steps do not repeat the captured step's masks.
  virtual void begin_step(std::uint64_t step) = 0;
  // Inverted dropout: keeps with probability 1 - p and scales by 1/(1 - p). Which elements stay
  // is dropout_mask.hpp's function of (dropout_key(layer_seed, step), index), so results do not
  // depend on threads or on the backend. No mask is stored: backward, given the same p and seed
  // within the same step, hashes the indices again. dx may be dy.
  virtual void dropout_forward(const Tensor& x, Tensor& y, float p, std::uint64_t layer_seed) = 0;
  virtual void dropout_backward(const Tensor& dy, Tensor& dx, float p, std::uint64_t layer_seed) = 0;
  // The mask this step's dropout_forward(p, layer_seed) applied, as fp32 values 0 or 1/(1 - p):
  // for another framework to repeat the step (--record-step) and for tests.
  virtual void dropout_mask(Tensor& mask, float p, std::uint64_t layer_seed) = 0;
  // Mean softmax cross-entropy over the batch, computed in fp32 or wider whatever the logits'
  // dtype; writes dlogits = (softmax - onehot) / N · weight · *gradient_scale in the logits' dtype
  // (the loss scale is applied before the gradient is rounded, so small gradients survive fp16).
  // gradient_scale points into this backend's memory (a LossScaleState's scale, read when the op
  // runs, so a replayed graph uses the current one); null means 1.
  // Logits (N, classes) take one label per sample; a label below 0 (BERT's kNoPrediction) leaves
  // its row out. Logits (N, classes, H, W), in activation_layout(), take one label per pixel in
  // (N, H, W) order, and kIgnoreLabel leaves a pixel out. The mean is over the rows not left out
  // (N counts those), and the others get a zero gradient; with none left the loss is 0, where
  // PyTorch gives NaN.
  // The step's loss so far (this term's weight · loss, plus the earlier terms' when it adds to
  // them) stays with the backend until last_loss() reads it: reading it on a GPU waits for the
  // device, which a timed loop does once per repeat, not once per step.
  virtual void softmax_cross_entropy(const Tensor& logits, const std::int32_t* labels, Tensor& dlogits,
                                     const float* gradient_scale, LossTerm term) = 0;
  // The loss of the last step that ran (eager or replayed): waits for the device.
  virtual float last_loss() = 0;
  // PyTorch SGD: g += wd·w; buf = momentum·buf + g (buf = g on update call 1); w -= lr·buf, lr
  // warmed up (warmed_up_rate) by the applied update's number. `update_number` counts update calls
  // from 1, as adamw_update's, under the same capture rule. Every update takes `loss_scale`, the
  // state unscale_and_check_finite left in this backend's memory (null: no loss scaling), and
  // changes nothing when that step overflowed.
  virtual void sgd_update(float* values, const float* grads, float* momentum_buffer, std::int64_t count,
                          const SgdConfig& config, std::uint64_t update_number, const LossScaleState* loss_scale) = 0;

  // Transformer ops. Why this backend cannot train a transformer (BERT), or nothing when it can;
  // the ops below are only made, and the row and optimizer calls only made, when it can.
  virtual std::optional<std::string> cannot_run_transformers() const {
    return "the " + name() + " backend has no transformer ops yet (layer normalization, softmax, GELU, " +
           "batched matmul, embedding gather and scatter, AdamW)";
  }
  virtual std::unique_ptr<BatchedMatmulOp> make_batched_matmul(const BatchedMatmulConfig& config);
  virtual std::unique_ptr<LayerNormOp> make_layer_norm(const LayerNormConfig& config);
  virtual std::unique_ptr<SoftmaxOp> make_softmax(std::int64_t rows, std::int64_t columns, DType dtype);
  virtual std::unique_ptr<ActivationOp> make_activation(ActivationKind kind, std::int64_t count, DType dtype);
  virtual std::unique_ptr<SwapAxesOp> make_swap_axes(const Shape& x, DType dtype);
  // Fused attention where this backend has it for this shape and dtype (and its switch asks for
  // it), or null: the layer then composes attention from the ops above.
  virtual std::unique_ptr<AttentionOp> make_fused_attention(const AttentionConfig& config) {
    (void)config;
    return nullptr;
  }
  // y[i] = table[rows[i]] for i < count, or y[i] += table[rows[i]] with `accumulate`: embedding
  // lookups (an fp32 parameter table, y in the activations' dtype) and gathering rows of an
  // activation. y is (count, F) for a table of F columns.
  virtual void gather_rows(const Tensor& table, const std::int32_t* rows, std::int64_t count, Tensor& y,
                           bool accumulate);
  // table_grad[rows[i]] += dy[i] for i < count, rows repeating or not; the backward of gather_rows.
  virtual void scatter_add_rows(const Tensor& dy, const std::int32_t* rows, std::int64_t count, Tensor& table_grad);
  virtual void fill_zero(Tensor& t);
  // One AdamW step over the flat buffers (`count` values; `ranges` cover them and say which decay).
  // The gradients are left clipped, as clip_grad_norm_ leaves them.
  // `update_number` counts update calls from 1; the bias corrections use the applied ones
  // (applied_update_number: less the steps loss scaling skipped). A backend that captures
  // steps keeps the number where a replay can advance it: a captured call is one update after the
  // call before it, whatever `update_number` said at capture.
  virtual void adamw_update(float* values, float* grads, float* first_moment, float* second_moment, std::int64_t count,
                            const std::vector<ParameterRange>& ranges, const AdamWConfig& config,
                            std::uint64_t update_number, const LossScaleState* loss_scale);
  // One LAMB step (You et al., 2019, as NVIDIA's BERT pretraining runs it: apex's FusedLAMB in
  // AdamW mode), with AdamW's hyper-parameters and the same global-norm clipping: per tensor,
  // u = m̂ / (√v̂ + ε) + λ·w, and w -= lr · r · u with the trust ratio r = ‖w‖ / ‖u‖ (1 when
  // either norm is 0, and for tensors without decay). `tensors` holds one range per parameter
  // tensor: the trust ratio is a tensor's. The same capture rule as adamw_update.
  virtual void lamb_update(float* values, float* grads, float* first_moment, float* second_moment, std::int64_t count,
                           const std::vector<ParameterRange>& tensors, const AdamWConfig& config,
                           std::uint64_t update_number, const LossScaleState* loss_scale);

  // Step capture (CUDA graphs): record the work one step queues, then replay it with one launch.
  // Backends that cannot capture keep these defaults.
  virtual bool can_capture() const { return false; }
  virtual void begin_capture() {}
  virtual void end_capture() {}
  virtual void replay() {}
};

// A BenchmarkRun precision as the activations' dtype: tf32 is fp32 storage with tensor-core
// math, amp is fp16 with dynamic loss scaling, bf16 needs no loss scaling (fp32's exponent range).
DType activation_dtype(Precision precision);
// Whether the precision trains with dynamic loss scaling (amp: fp16's narrow exponent range).
constexpr bool uses_loss_scaling(Precision precision) { return precision == Precision::amp; }
// Why `backend` cannot run `precision` here (tf32 off NVIDIA tensor cores, a dtype its
// hardware lacks), or nothing when it can. The one capability check before any op is made.
std::optional<std::string> cannot_run(Precision precision, const Backend& backend);
// The precisions `backend` runs here, in the API's order, joined by `separator`.
std::string allowed_precisions(const Backend& backend, const std::string& separator);

}  // namespace dlbench::worker
