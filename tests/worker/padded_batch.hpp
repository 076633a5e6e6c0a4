// A synthetic pretraining batch made into one as real data has it: each sequence padded after its
// first real_tokens[s] tokens ([PAD] ids 0, token type 0), and its masked-LM slots at padding
// positions turned into slots without a prediction (kNoPrediction, reading the sequence's first
// row), as NVIDIA's shards pad them.
#pragma once

#include <cstdint>
#include <vector>

#include "layers/bert_config.hpp"
#include "trainer.hpp"

namespace dlbench::worker {

inline void pad_pretraining_batch(const PretrainingBatchLayout& layout, const std::vector<std::int32_t>& real_tokens,
                                  std::vector<std::int32_t>& tokens, std::vector<std::int32_t>& labels,
                                  std::int32_t padding_id = 0) {
  const std::int64_t length = layout.tokens, p = layout.predictions();
  for (std::int64_t s = 0; s < layout.sequences; ++s) {
    const std::int32_t real = real_tokens[static_cast<std::size_t>(s)];
    labels[static_cast<std::size_t>(layout.real_tokens() + s)] = real;
    for (std::int64_t j = real; j < length; ++j) {
      tokens[static_cast<std::size_t>(s * length + j)] = padding_id;
      labels[static_cast<std::size_t>(layout.token_types() + s * length + j)] = 0;
    }
    for (std::int64_t k = 0; k < p; ++k) {
      auto& row = labels[static_cast<std::size_t>(layout.masked_rows() + s * p + k)];
      if (row - s * length >= real) {
        row = static_cast<std::int32_t>(s * length);
        labels[static_cast<std::size_t>(layout.masked_tokens() + s * p + k)] = kNoPrediction;
      }
    }
  }
}

// The trainer's current (synthetic) batch, padded so, loaded for its next step.
inline void pad_trainer_batch(Trainer& trainer, const PretrainingBatchLayout& layout,
                              const std::vector<std::int32_t>& real_tokens, std::int32_t padding_id = 0) {
  std::vector<std::int32_t> tokens, labels;
  trainer.copy_sequences_to_host(tokens, labels);
  pad_pretraining_batch(layout, real_tokens, tokens, labels, padding_id);
  trainer.load_sequences(tokens.data(), labels.data());
}

}  // namespace dlbench::worker
