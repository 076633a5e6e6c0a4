#pragma once

#include <numeric>
#include <stdexcept>
#include <vector>

#include "layers/transformer_parts.hpp"
#include "layers/bert_config.hpp"

namespace dlbench::worker {

// BERT's input layer: word + position + token type embeddings, LayerNorm, dropout. Takes the
// int32 (sequences, tokens) token ids and the token types from the batch's labels block; gives
// (sequences · tokens, hidden) activations in the compute dtype.
class BertEmbeddings final : public Layer {
 public:
  explicit BertEmbeddings(const BertConfig& c)
      : hidden_(c.hidden),
        max_positions_(c.max_positions),
        norm_("LayerNorm", c.hidden, c.layer_norm_epsilon),
        dropout_("dropout", c.dropout, 0xE3B0u) {
    const auto table = [&](const char* name, std::int64_t rows) {
      Parameter p = make_parameter(name, Shape(rows, c.hidden), ParameterInit::normal, c.hidden, rows);
      p.init_std = c.init_std;
      return p;
    };
    word_ = table("word_embeddings.weight", c.vocabulary);
    position_ = table("position_embeddings.weight", c.max_positions);
    token_type_ = table("token_type_embeddings.weight", c.token_types);
  }

  std::string kind() const override { return "BertEmbeddings"; }
  void collect_parameters(std::vector<Parameter*>& out) override {
    out.push_back(&word_);
    out.push_back(&position_);
    out.push_back(&token_type_);
    norm_.collect(out);
  }
  void collect_step_state(const std::string& prefix, std::vector<DropoutMaskState>& out) override {
    dropout_.collect(prefix, out);
  }
  // The masked-LM decoder uses the word embeddings as its weights: it writes their gradient
  // first in backward, and this layer adds the lookups' part to it.
  Parameter& word_embeddings() { return word_; }
  void tie_decoder() { decoder_writes_word_gradient_ = true; }

  Tensor setup(const Tensor& input, SetupContext& ctx) override {
    if (input.dtype != DType::int32 || input.shape.rank != 2) {
      throw std::invalid_argument("BertEmbeddings: the input must be int32 (sequences, tokens) token ids, not " +
                                  std::string(to_string(input.dtype)) + " " + input.shape.to_string());
    }
    layout_ = {input.shape.n(), input.shape.c(), ctx.max_predictions};
    if (layout_.tokens > max_positions_) {
      throw std::invalid_argument("BertEmbeddings: " + std::to_string(layout_.tokens) + " tokens per sequence; at most " +
                                  std::to_string(max_positions_) + " positions");
    }
    ctx.tokens_per_sequence = layout_.tokens;
    const std::int64_t rows = layout_.sequences * layout_.tokens;
    dtype_ = ctx.compute;
    const Tick t = ctx.arena.next_tick();
    ctx.arena.read(input, t);
    sum_ = matrix(rows, hidden_, dtype_);
    keep(ctx, sum_, t);  // the LayerNorm's input
    normed_ = matrix(rows, hidden_, dtype_);
    forward_only(ctx, normed_, t);
    y_ = matrix(rows, hidden_, dtype_);
    ctx.arena.request(y_, t);
    norm_.setup(ctx, rows, dtype_, t);
    dropout_.setup(y_.shape);
    dnormed_ = matrix(rows, hidden_, dtype_);
    backward_only(ctx, dnormed_, t);
    dsum_ = matrix(rows, hidden_, dtype_);
    backward_only(ctx, dsum_, t);
    // Position ids 0, 1, …, tokens − 1 for every sequence.
    positions_.fill(ctx.backend, rows, [&](std::int64_t i) { return i % layout_.tokens; });
    return y_;
  }

  const Tensor& forward(const Tensor& x, StepContext& ctx) override {
    if (ctx.labels == nullptr) throw std::logic_error("BertEmbeddings: the step has no labels block");
    ids_ = x.as<std::int32_t>();
    types_ = ctx.labels + layout_.token_types();
    const std::int64_t rows = layout_.sequences * layout_.tokens;
    Backend& b = ctx.backend;
    b.gather_rows(word_.value, ids_, rows, sum_, false);
    b.gather_rows(position_.value, positions_.get(), rows, sum_, true);
    b.gather_rows(token_type_.value, types_, rows, sum_, true);
    norm_.forward(sum_, normed_);
    dropout_.forward(normed_, y_, ctx);
    return y_;
  }

  const Tensor& backward(const Tensor& dy, StepContext& ctx) override {
    const std::int64_t rows = layout_.sequences * layout_.tokens;
    Backend& b = ctx.backend;
    dropout_.backward(dy, dnormed_, ctx);
    norm_.backward(sum_, dnormed_, dsum_, ctx);
    if (!decoder_writes_word_gradient_) b.fill_zero(word_.grad);
    b.scatter_add_rows(dsum_, ids_, rows, word_.grad);
    b.fill_zero(position_.grad);
    b.scatter_add_rows(dsum_, positions_.get(), rows, position_.grad);
    b.fill_zero(token_type_.grad);
    b.scatter_add_rows(dsum_, types_, rows, token_type_.grad);
    ctx.notify({&word_, &position_, &token_type_});
    return no_gradient_;  // token ids have none
  }

  double forward_macs_per_sample() const override { return 0.0; }

 private:
  std::int64_t hidden_, max_positions_;
  PretrainingBatchLayout layout_;
  DType dtype_ = DType::fp32;
  Parameter word_, position_, token_type_;
  LayerNorm norm_;
  DropoutSite dropout_;
  bool decoder_writes_word_gradient_ = false;
  ConstantRows positions_;
  const std::int32_t* ids_ = nullptr;
  const std::int32_t* types_ = nullptr;
  Tensor sum_, normed_, y_, dnormed_, dsum_, no_gradient_;
};

}  // namespace dlbench::worker
