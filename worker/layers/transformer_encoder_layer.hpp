#pragma once

#include <cmath>
#include <stdexcept>
#include <vector>

#include "layers/transformer_parts.hpp"
#include "layers/bert_config.hpp"

namespace dlbench::worker {

// One post-LayerNorm transformer encoder layer as BERT's (HuggingFace's BertLayer names):
//   h = LayerNorm(x + dropout(self_attention(x) Woᵀ + bo))
//   y = LayerNorm(h + dropout(GELU(h W1ᵀ + b1) W2ᵀ + b2))
// with self_attention the multi-head scaled dot product over each sequence's real tokens (the
// step's real_tokens: keys past them, a real-data sequence's padding, get probability 0, as BERT's
// attention mask gives them; synthetic sequences have none) and dropout on the attention
// probabilities. Activations are (sequences · tokens, hidden). Attention is one op where the
// backend fuses it (Backend::make_fused_attention: it reads the heads from the projections' rows
// and keeps only each row's log-sum-exp); otherwise it is composed: the heads' matrices
// (sequences, heads, tokens, head size) made by swapping axes, batched matmuls, softmax and
// dropout, with the probabilities kept for backward.
class TransformerEncoderLayer final : public Layer {
 public:
  TransformerEncoderLayer(const BertConfig& c, std::uint64_t salt)
      : hidden_(c.hidden),
        heads_(c.heads),
        head_size_(c.hidden / c.heads),
        query_("attention.self.query", c.hidden, c.hidden, c.init_std),
        key_("attention.self.key", c.hidden, c.hidden, c.init_std),
        value_("attention.self.value", c.hidden, c.hidden, c.init_std),
        attention_output_("attention.output.dense", c.hidden, c.hidden, c.init_std),
        attention_norm_("attention.output.LayerNorm", c.hidden, c.layer_norm_epsilon),
        intermediate_("intermediate.dense", c.hidden, c.intermediate, c.init_std),
        output_("output.dense", c.intermediate, c.hidden, c.init_std),
        output_norm_("output.LayerNorm", c.hidden, c.layer_norm_epsilon),
        probabilities_dropout_("attention.self.dropout", c.dropout, salt * 3 + 1),
        attention_dropout_("attention.output.dropout", c.dropout, salt * 3 + 2),
        output_dropout_("output.dropout", c.dropout, salt * 3 + 3) {
    if (c.hidden % c.heads != 0) {
      throw std::invalid_argument("TransformerEncoderLayer: hidden " + std::to_string(c.hidden) +
                                  " is not a multiple of " + std::to_string(c.heads) + " heads");
    }
  }

  std::string kind() const override { return "TransformerEncoderLayer"; }
  void collect_parameters(std::vector<Parameter*>& out) override {
    query_.collect(out);
    key_.collect(out);
    value_.collect(out);
    attention_output_.collect(out);
    attention_norm_.collect(out);
    intermediate_.collect(out);
    output_.collect(out);
    output_norm_.collect(out);
  }
  void collect_step_state(const std::string& prefix, std::vector<DropoutMaskState>& out) override {
    probabilities_dropout_.collect(prefix, out);
    attention_dropout_.collect(prefix, out);
    output_dropout_.collect(prefix, out);
  }

  Tensor setup(const Tensor& input, SetupContext& ctx) override {
    tokens_ = ctx.tokens_per_sequence;
    if (tokens_ <= 0 || input.shape.rank != 2 || input.shape.c() != hidden_ || input.shape.n() % tokens_ != 0) {
      throw std::invalid_argument("TransformerEncoderLayer: input " + input.shape.to_string() +
                                  " is not (sequences · tokens, " + std::to_string(hidden_) + ") after an embedding layer");
    }
    rows_ = input.shape.n();
    sequences_ = rows_ / tokens_;
    const DType dtype = input.dtype;
    Backend& b = ctx.backend;
    for (Dense* d : {&query_, &key_, &value_, &attention_output_, &intermediate_, &output_}) d->setup(b, rows_, dtype);
    attention_ = b.make_fused_attention({sequences_, tokens_, heads_, head_size_, dtype});
    if (!attention_) make_composed_attention(b, dtype);
    gelu_ = b.make_activation(ActivationKind::gelu, rows_ * intermediate_.out_features(), dtype);
    add_ = b.make_add(Shape(rows_, hidden_), dtype);

    const Tick t = ctx.arena.next_tick();
    ctx.arena.read(input, t);
    ctx.arena.read(input, t.mirrored());  // the projections' weight gradients
    const auto hidden = [&] { return matrix(rows_, hidden_, dtype); };
    const Shape by_query(sequences_, heads_, tokens_, tokens_);
    const auto attention = [&] { return activation(by_query, Layout::plain, dtype); };
    for (Tensor* k : {&context_, &residual1_, &h_, &residual2_}) {
      *k = hidden();
      keep(ctx, *k, t);
    }
    if (attention_) {
      // The projections' rows are the fused op's inputs, kept for its backward with the statistics.
      for (Tensor* k : {&q_, &k_, &v_}) {
        *k = hidden();
        keep(ctx, *k, t);
      }
      statistics_ = activation(Shape(sequences_ * heads_ * tokens_), Layout::plain, DType::fp32);  // (sequences, heads, tokens)
      keep(ctx, statistics_, t);
    } else {
      for (Tensor* k : {&q_heads_, &k_heads_, &v_heads_}) {
        *k = hidden();
        keep(ctx, *k, t);
      }
      probabilities_ = attention();
      keep(ctx, probabilities_, t);
      dropped_probabilities_ = attention();
      keep(ctx, dropped_probabilities_, t);
      for (Tensor* f : {&q_, &k_, &v_, &context_heads_}) {
        *f = hidden();
        forward_only(ctx, *f, t);
      }
      scores_ = attention();
      forward_only(ctx, scores_, t);
    }
    intermediate_in_ = matrix(rows_, intermediate_.out_features(), dtype);
    keep(ctx, intermediate_in_, t);
    intermediate_out_ = matrix(rows_, intermediate_.out_features(), dtype);
    keep(ctx, intermediate_out_, t);
    for (Tensor* f : {&projected_, &dropped_}) {
      *f = hidden();
      forward_only(ctx, *f, t);
    }
    y_ = hidden();
    ctx.arena.request(y_, t);
    attention_norm_.setup(ctx, rows_, dtype, t);
    output_norm_.setup(ctx, rows_, dtype, t);
    probabilities_dropout_.setup(by_query);
    attention_dropout_.setup(y_.shape);
    output_dropout_.setup(y_.shape);

    for (Tensor* g : {&dresidual2_, &dlinear_, &dh_, &dresidual1_, &dcontext_, &dq_, &dk_, &dv_, &dx_part_}) {
      *g = hidden();
      backward_only(ctx, *g, t);
    }
    dintermediate_ = matrix(rows_, intermediate_.out_features(), dtype);
    backward_only(ctx, dintermediate_, t);
    if (!attention_) {
      for (Tensor* g : {&dcontext_heads_, &dq_heads_, &dk_heads_, &dv_heads_}) {
        *g = hidden();
        backward_only(ctx, *g, t);
      }
      for (Tensor* g : {&dprobabilities_, &dscores_}) {
        *g = attention();
        backward_only(ctx, *g, t);
      }
    }
    input_grad_ = ctx.input_grad_needed;
    dx_ = hidden();
    ctx.request_input_grad(dx_, t.mirrored());
    return y_;
  }

  const Tensor& forward(const Tensor& x, StepContext& ctx) override {
    x_ = x;
    query_.forward(x, q_);
    key_.forward(x, k_);
    value_.forward(x, v_);
    if (attention_) {
      attention_->forward(q_, k_, v_, context_, statistics_, probabilities_dropout_.p(),
                          probabilities_dropout_.next_seed(ctx), ctx.real_tokens);
    } else {
      to_heads_->run(q_, q_heads_);
      to_heads_->run(k_, k_heads_);
      to_heads_->run(v_, v_heads_);
      scores_op_->run(q_heads_, k_heads_, scores_);
      softmax_->forward(scores_, probabilities_, RowLengths{ctx.real_tokens, heads_ * tokens_});
      probabilities_dropout_.forward(probabilities_, dropped_probabilities_, ctx);
      context_op_->run(dropped_probabilities_, v_heads_, context_heads_);
      to_tokens_->run(context_heads_, context_);
    }
    attention_output_.forward(context_, projected_);
    attention_dropout_.forward(projected_, dropped_, ctx);
    add_->forward(dropped_, x, residual1_);
    attention_norm_.forward(residual1_, h_);
    intermediate_.forward(h_, intermediate_in_);
    gelu_->forward(intermediate_in_, intermediate_out_);
    output_.forward(intermediate_out_, projected_);
    output_dropout_.forward(projected_, dropped_, ctx);
    add_->forward(dropped_, h_, residual2_);
    output_norm_.forward(residual2_, y_);
    return y_;
  }

  const Tensor& backward(const Tensor& dy, StepContext& ctx) override {
    // Feed-forward block; dlinear_ holds each dense layer's output gradient in turn.
    output_norm_.backward(residual2_, dy, dresidual2_, ctx);
    output_dropout_.backward(dresidual2_, dlinear_, ctx);
    output_.backward(intermediate_out_, dlinear_, &dintermediate_, ctx);
    gelu_->backward(intermediate_in_, dintermediate_, dintermediate_);
    intermediate_.backward(h_, dintermediate_, &dh_, ctx);
    add_->forward(dh_, dresidual2_, dh_);  // h feeds the block and its residual
    // Attention block.
    attention_norm_.backward(residual1_, dh_, dresidual1_, ctx);
    attention_dropout_.backward(dresidual1_, dlinear_, ctx);
    attention_output_.backward(context_, dlinear_, &dcontext_, ctx);
    if (attention_) {
      attention_->backward(q_, k_, v_, dcontext_, statistics_, probabilities_dropout_.p(), probabilities_dropout_.seed(),
                           ctx.real_tokens, dq_, dk_, dv_);
    } else {
      to_heads_->run(dcontext_, dcontext_heads_);
      dprobabilities_op_->run(dcontext_heads_, v_heads_, dprobabilities_);
      dvalue_op_->run(dropped_probabilities_, dcontext_heads_, dv_heads_);
      probabilities_dropout_.backward(dprobabilities_, dprobabilities_, ctx);
      softmax_->backward(probabilities_, dprobabilities_, dscores_);
      dquery_op_->run(dscores_, k_heads_, dq_heads_);
      dkey_op_->run(dscores_, q_heads_, dk_heads_);
      to_tokens_->run(dq_heads_, dq_);
      to_tokens_->run(dk_heads_, dk_);
      to_tokens_->run(dv_heads_, dv_);
    }
    // x feeds the three projections and the first residual.
    query_.backward(x_, dq_, input_grad_ ? &dx_ : nullptr, ctx);
    key_.backward(x_, dk_, input_grad_ ? &dx_part_ : nullptr, ctx);
    if (input_grad_) add_->forward(dx_, dx_part_, dx_);
    value_.backward(x_, dv_, input_grad_ ? &dx_part_ : nullptr, ctx);
    if (input_grad_) {
      add_->forward(dx_, dx_part_, dx_);
      add_->forward(dx_, dresidual1_, dx_);
    }
    return dx_;
  }

  double forward_macs_per_sample() const override {
    double macs = 0.0;
    for (const Dense* d : {&query_, &key_, &value_, &attention_output_, &intermediate_, &output_}) macs += d->macs();
    // Q Kᵀ and P V: tokens² · head size per head each.
    macs += 2.0 * static_cast<double>(sequences_ * heads_ * tokens_ * tokens_ * head_size_);
    return macs / static_cast<double>(sequences_);
  }

 private:
  void make_composed_attention(Backend& b, DType dtype) {
    to_heads_ = b.make_swap_axes(Shape(sequences_, tokens_, heads_, head_size_), dtype);
    to_tokens_ = b.make_swap_axes(Shape(sequences_, heads_, tokens_, head_size_), dtype);
    const std::int64_t batch = sequences_ * heads_;
    const float scale = 1.0f / std::sqrt(static_cast<float>(head_size_));
    // scores = Q Kᵀ/√d; context = P V; and for backward: dP = dC Vᵀ, dV = Pᵀ dC, dQ = dS K/√d, dK = dSᵀ Q/√d.
    scores_op_ = b.make_batched_matmul({batch, tokens_, tokens_, head_size_, false, true, scale, dtype});
    context_op_ = b.make_batched_matmul({batch, tokens_, head_size_, tokens_, false, false, 1.0f, dtype});
    dprobabilities_op_ = b.make_batched_matmul({batch, tokens_, tokens_, head_size_, false, true, 1.0f, dtype});
    dvalue_op_ = b.make_batched_matmul({batch, tokens_, head_size_, tokens_, true, false, 1.0f, dtype});
    dquery_op_ = b.make_batched_matmul({batch, tokens_, head_size_, tokens_, false, false, scale, dtype});
    dkey_op_ = b.make_batched_matmul({batch, tokens_, head_size_, tokens_, true, false, scale, dtype});
    softmax_ = b.make_softmax(batch * tokens_, tokens_, dtype);
  }

  std::int64_t hidden_, heads_, head_size_;
  std::int64_t tokens_ = 0, rows_ = 0, sequences_ = 0;
  bool input_grad_ = true;
  Dense query_, key_, value_, attention_output_;
  LayerNorm attention_norm_;
  Dense intermediate_, output_;
  LayerNorm output_norm_;
  DropoutSite probabilities_dropout_, attention_dropout_, output_dropout_;
  std::unique_ptr<SwapAxesOp> to_heads_, to_tokens_;
  std::unique_ptr<BatchedMatmulOp> scores_op_, context_op_, dprobabilities_op_, dvalue_op_, dquery_op_, dkey_op_;
  std::unique_ptr<SoftmaxOp> softmax_;
  std::unique_ptr<AttentionOp> attention_;  // null: composed from the ops above
  std::unique_ptr<ActivationOp> gelu_;
  std::unique_ptr<AddOp> add_;
  Tensor x_;
  // Kept for backward.
  Tensor q_heads_, k_heads_, v_heads_, probabilities_, dropped_probabilities_, context_, residual1_, h_,
      intermediate_in_, intermediate_out_, residual2_, statistics_;
  // Forward only.
  Tensor q_, k_, v_, scores_, context_heads_, projected_, dropped_, y_;
  // Backward only.
  Tensor dresidual2_, dlinear_, dintermediate_, dh_, dresidual1_, dcontext_, dcontext_heads_, dprobabilities_, dscores_,
      dq_heads_, dk_heads_, dv_heads_, dq_, dk_, dv_, dx_part_, dx_;
};

}  // namespace dlbench::worker
