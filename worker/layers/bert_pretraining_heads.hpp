#pragma once

#include <stdexcept>
#include <vector>

#include "layers/bert_embeddings.hpp"
#include "layers/transformer_parts.hpp"
#include "layers/bert_config.hpp"

namespace dlbench::worker {

// BERT's two pretraining heads on the encoder's output (HuggingFace's names):
//   masked LM: the masked positions' hidden states → dense, GELU, LayerNorm ("cls.predictions.
//     transform") → logits over the vocabulary with the word embeddings as weights (tied) plus a
//     bias ("cls.predictions.bias"); its cross-entropy is the step's first loss term, computed here;
//   next sentence: the first token's state → pooler (dense, tanh: "bert.pooler.dense") → two
//     logits ("cls.seq_relationship"), the layer's output, whose loss the trainer adds.
// Only the masked positions reach the vocabulary projection, as in Google's and NVIDIA's
// scripts (the largest matrix product of the step otherwise). A slot without a prediction (real
// data's padding slots: label kNoPrediction) still runs through the head, on its sequence's first
// row, and is left out of the loss, so every batch has the same shapes.
class BertPretrainingHeads final : public Layer {
 public:
  BertPretrainingHeads(const BertConfig& c, BertEmbeddings& embeddings)
      : hidden_(c.hidden),
        vocabulary_(c.vocabulary),
        embeddings_(embeddings),
        transform_("cls.predictions.transform.dense", c.hidden, c.hidden, c.init_std),
        transform_norm_("cls.predictions.transform.LayerNorm", c.hidden, c.layer_norm_epsilon),
        pooler_("bert.pooler.dense", c.hidden, c.hidden, c.init_std),
        next_sentence_("cls.seq_relationship", c.hidden, 2, c.init_std) {
    decoder_bias_ = make_parameter("cls.predictions.bias", Shape(c.vocabulary), ParameterInit::zeros);
    embeddings_.tie_decoder();
  }

  std::string kind() const override { return "BertPretrainingHeads"; }
  // The tied decoder weight is the embedding layer's parameter: not listed again.
  void collect_parameters(std::vector<Parameter*>& out) override {
    pooler_.collect(out);
    transform_.collect(out);
    transform_norm_.collect(out);
    out.push_back(&decoder_bias_);
    next_sentence_.collect(out);
  }

  Tensor setup(const Tensor& input, SetupContext& ctx) override {
    layout_ = {ctx.tokens_per_sequence > 0 ? input.shape.n() / ctx.tokens_per_sequence : 0, ctx.tokens_per_sequence,
               ctx.max_predictions};
    if (layout_.tokens <= 0 || input.shape.rank != 2 || input.shape.c() != hidden_) {
      throw std::invalid_argument("BertPretrainingHeads: input " + input.shape.to_string() +
                                  " is not (sequences · tokens, " + std::to_string(hidden_) + ") after an embedding layer");
    }
    const DType dtype = input.dtype;
    const std::int64_t n = layout_.sequences, masked = n * layout_.predictions();
    Backend& b = ctx.backend;
    transform_.setup(b, masked, dtype);
    pooler_.setup(b, n, dtype);
    next_sentence_.setup(b, n, dtype);
    decoder_ = b.make_linear({masked, hidden_, vocabulary_, true, dtype});
    gelu_ = b.make_activation(ActivationKind::gelu, masked * hidden_, dtype);
    tanh_ = b.make_activation(ActivationKind::tanh, n * hidden_, dtype);

    const Tick t = ctx.arena.next_tick();
    ctx.arena.read(input, t);
    for (Tensor* k : {&masked_states_, &transformed_, &activated_, &normed_}) {
      *k = matrix(masked, hidden_, dtype);
      keep(ctx, *k, t);
    }
    for (Tensor* k : {&first_states_, &pooler_in_, &pooled_}) {
      *k = matrix(n, hidden_, dtype);
      keep(ctx, *k, t);
    }
    transform_norm_.setup(ctx, masked, dtype, t);
    lm_logits_ = matrix(masked, vocabulary_, dtype);
    forward_only(ctx, lm_logits_, t);
    dlm_logits_ = matrix(masked, vocabulary_, dtype);
    keep(ctx, dlm_logits_, t);  // written with the loss in forward
    y_ = matrix(n, 2, dtype);
    ctx.arena.request(y_, t);
    for (Tensor* g : {&dnormed_, &dactivated_, &dtransformed_, &dmasked_states_}) {
      *g = matrix(masked, hidden_, dtype);
      backward_only(ctx, *g, t);
    }
    for (Tensor* g : {&dpooled_, &dpooler_in_, &dfirst_states_}) {
      *g = matrix(n, hidden_, dtype);
      backward_only(ctx, *g, t);
    }
    dx_ = matrix(input.shape.n(), hidden_, dtype);
    ctx.request_input_grad(dx_, t.mirrored());
    // Rows of each sequence's first token ([CLS]): 0, tokens, 2 · tokens, …
    first_rows_.fill(b, n, [&](std::int64_t i) { return i * layout_.tokens; });
    return y_;
  }

  const Tensor& forward(const Tensor& x, StepContext& ctx) override {
    if (ctx.labels == nullptr) throw std::logic_error("BertPretrainingHeads: the step has no labels block");
    Backend& b = ctx.backend;
    const std::int64_t n = layout_.sequences, masked = n * layout_.predictions();
    masked_rows_ = ctx.labels + layout_.masked_rows();
    b.gather_rows(x, masked_rows_, masked, masked_states_, false);
    transform_.forward(masked_states_, transformed_);
    gelu_->forward(transformed_, activated_);
    transform_norm_.forward(activated_, normed_);
    decoder_->forward(normed_, embeddings_.word_embeddings().value, &decoder_bias_.value, lm_logits_);
    b.softmax_cross_entropy(lm_logits_, ctx.labels + layout_.masked_tokens(), dlm_logits_, ctx.gradient_scale,
                            LossTerm{1.0f, ctx.loss_terms > 0});
    ++ctx.loss_terms;

    b.gather_rows(x, first_rows_.get(), n, first_states_, false);
    pooler_.forward(first_states_, pooler_in_);
    tanh_->forward(pooler_in_, pooled_);
    next_sentence_.forward(pooled_, y_);
    return y_;
  }

  const Tensor& backward(const Tensor& dy, StepContext& ctx) override {
    Backend& b = ctx.backend;
    const std::int64_t n = layout_.sequences, masked = n * layout_.predictions();
    next_sentence_.backward(pooled_, dy, &dpooled_, ctx);
    tanh_->backward(pooler_in_, dpooled_, dpooler_in_);
    pooler_.backward(first_states_, dpooler_in_, &dfirst_states_, ctx);
    // The decoder writes the word embeddings' gradient; the embedding layer adds to it later.
    Parameter& word = embeddings_.word_embeddings();
    decoder_->backward_weights(normed_, dlm_logits_, word.grad, &decoder_bias_.grad);
    ctx.notify({&decoder_bias_});
    decoder_->backward_data(dlm_logits_, word.value, dnormed_);
    transform_norm_.backward(activated_, dnormed_, dactivated_, ctx);
    gelu_->backward(transformed_, dactivated_, dtransformed_);
    transform_.backward(masked_states_, dtransformed_, &dmasked_states_, ctx);
    b.fill_zero(dx_);
    b.scatter_add_rows(dmasked_states_, masked_rows_, masked, dx_);
    b.scatter_add_rows(dfirst_states_, first_rows_.get(), n, dx_);
    return dx_;
  }

  double forward_macs_per_sample() const override {
    const double masked = static_cast<double>(layout_.predictions());
    const double h = static_cast<double>(hidden_);
    // Per sequence: the transform and the decoder at its masked positions, the pooler and the
    // next-sentence classifier at its first token.
    return masked * (h * h + h * static_cast<double>(vocabulary_)) + h * h + h * 2.0;
  }

 private:
  std::int64_t hidden_, vocabulary_;
  BertEmbeddings& embeddings_;
  PretrainingBatchLayout layout_;
  Dense transform_;
  LayerNorm transform_norm_;
  Dense pooler_, next_sentence_;
  Parameter decoder_bias_;
  std::unique_ptr<LinearOp> decoder_;
  std::unique_ptr<ActivationOp> gelu_, tanh_;
  ConstantRows first_rows_;
  const std::int32_t* masked_rows_ = nullptr;
  Tensor masked_states_, transformed_, activated_, normed_, first_states_, pooler_in_, pooled_;
  Tensor lm_logits_, dlm_logits_, y_;
  Tensor dnormed_, dactivated_, dtransformed_, dmasked_states_, dpooled_, dpooler_in_, dfirst_states_, dx_;
};

}  // namespace dlbench::worker
