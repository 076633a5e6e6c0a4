// BERT's configuration and the layout of a pretraining batch on the device, which the trainer
// fills and the layers read: beside the layers, so that they need not include the model
// (models/ builds on layers/, never the other way round).
#pragma once

#include <cstdint>

namespace dlbench::worker {

struct BertConfig {
  std::int64_t vocabulary = 30522;
  std::int64_t hidden = 768;
  std::int64_t layers = 12;
  std::int64_t heads = 12;
  std::int64_t intermediate = 3072;
  std::int64_t max_positions = 512;
  std::int64_t token_types = 2;
  float dropout = 0.1f;  // hidden states and attention probabilities alike
  float init_std = 0.02f;
  float layer_norm_epsilon = 1e-12f;
};

// Masked positions per sequence: 15% of the tokens, rounded up (20 at 128 tokens, as NVIDIA's
// and Google's max_predictions_per_seq; 77 at 512, where those scripts use 80).
constexpr std::int64_t masked_positions_per_sequence(std::int64_t tokens) { return (tokens * 15 + 99) / 100; }

// A masked-LM slot without a prediction: NVIDIA's pretraining shards hold fewer masked positions
// than max_predictions_per_seq in a short sequence and pad the rest; the loss leaves such a slot out
// (torch.nn.CrossEntropyLoss(ignore_index=-1), as NVIDIA's BertPretrainingCriterion).
inline constexpr std::int32_t kNoPrediction = -1;

// A pretraining batch of `sequences` × `tokens` token ids is the network's input, int32
// (sequences, tokens). Everything else the step reads is one int32 block (the trainer's labels),
// in this order, each part contiguous:
//   next-sentence labels      sequences               0 (is next) or 1
//   masked rows               sequences · P           row of the (sequences · tokens) token matrix
//   masked token ids          sequences · P           the original tokens there: the MLM labels, or
//                                                      kNoPrediction for a padding slot
//   token type ids            sequences · tokens      0 (sentence A) or 1 (sentence B)
//   real tokens               sequences               1 to tokens: the sequence's tokens before its
//                                                      padding, the keys attention may look at
// with P = predictions(): masked_positions_per_sequence(tokens) for synthetic data, the shards'
// max_predictions_per_seq for real data. The next-sentence labels come first so that the
// trainer's cross-entropy on the network's output, (sequences, 2) logits, reads them.
struct PretrainingBatchLayout {
  std::int64_t sequences = 0;
  std::int64_t tokens = 0;
  std::int64_t max_predictions = 0;  // 0: masked_positions_per_sequence(tokens)

  std::int64_t predictions() const {
    return max_predictions > 0 ? max_predictions : masked_positions_per_sequence(tokens);
  }
  std::int64_t next_sentence_labels() const { return 0; }
  std::int64_t masked_rows() const { return sequences; }
  std::int64_t masked_tokens() const { return masked_rows() + sequences * predictions(); }
  std::int64_t token_types() const { return masked_tokens() + sequences * predictions(); }
  std::int64_t real_tokens() const { return token_types() + sequences * tokens; }
  std::int64_t total() const { return real_tokens() + sequences; }
};

}  // namespace dlbench::worker
