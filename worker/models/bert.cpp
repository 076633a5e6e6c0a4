// BERT for pretraining, assembled from its layers with HuggingFace's module names.
#include "models/bert.hpp"

#include "layers/bert_embeddings.hpp"
#include "layers/bert_pretraining_heads.hpp"
#include "layers/transformer_encoder_layer.hpp"

namespace dlbench::worker {

std::unique_ptr<Sequential> bert_for_pretraining(const BertConfig& config) {
  auto net = std::make_unique<Sequential>();
  auto& bert = net->add_named<Sequential>("bert");
  auto& embeddings = bert.add_named<BertEmbeddings>("embeddings", config);
  auto& layers = bert.add_named<Sequential>("encoder").add_named<Sequential>("layer");
  for (std::int64_t i = 0; i < config.layers; ++i) {
    layers.add<TransformerEncoderLayer>(config, static_cast<std::uint64_t>(i + 1));
  }
  // Its parameters carry their full names ("bert.pooler.…", "cls.…"): it sits at the root.
  net->add_named<BertPretrainingHeads>("", config, embeddings);
  return net;
}

}  // namespace dlbench::worker
