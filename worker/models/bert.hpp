// BERT pretraining (masked LM + next-sentence prediction); its configuration and batch layout
// are in layers/bert_config.hpp.
#pragma once

#include <cstdint>
#include <memory>

#include "layers/bert_config.hpp"
#include "layers/sequential.hpp"

namespace dlbench::worker {

// BERT for pretraining with HuggingFace's BertForPreTraining parameter names ("bert.encoder.
// layer.0.attention.self.query.weight", "cls.predictions.bias"); the decoder of the masked-LM head
// is the word embedding matrix (tied), counted once.
std::unique_ptr<Sequential> bert_for_pretraining(const BertConfig& config);

}  // namespace dlbench::worker
