#include <iostream>
#include <optional>

#include "dlbench/core/version.hpp"
#include "input/pretraining_shards.hpp"
#include "models/bert.hpp"
#include "program/case_setup.hpp"
#include "program/commands.hpp"
#include "weights_file.hpp"

namespace dlbench::worker {

int record_step(const Options& o, Backend* backend, const std::string& backend_error) {
  try {
    if (backend == nullptr) throw BackendUnavailable(backend_error);
    if (const auto why = unsupported_precision(o, backend)) throw Unsupported(*why);
    // BERT's pretraining shards: the step trains on the reader's first batch (rank 0 of 1).
    std::optional<input::PretrainingShards> shards;
    if (o.data == "bertpretraining") shards = open_pretraining_shards(o);
    const std::int64_t max_predictions = shards ? shards->max_predictions : 0;
    // Every buffer its own memory, so that the step's dropout masks are still there after it.
    const std::unique_ptr<Trainer> owner = make_trainer(o, *backend, 0, true, max_predictions);
    Trainer& trainer = *owner;
    if (shards) {
      input::PretrainingReader reader(*shards, pretraining_reader_config(o));
      const input::SequenceBatch& batch = reader.next();
      trainer.load_sequences(batch.token_ids.data(), batch.block.data());
    }
    WeightsFile record;
    record.metadata = {{"format", "dlbench.step/v1"},
                       {"model", std::string(to_string(o.model))},
                       {"backend", o.backend},
                       {"precision", std::string(to_string(o.precision))},
                       {"batch_size", std::to_string(o.batch_size)},
                       {"seed", std::to_string(o.seed)},
                       {"optimizer", std::string(to_string(o.optimizer))},
                       {"learning_rate", std::to_string(o.learning_rate)},
                       {"momentum", std::to_string(o.momentum)},
                       {"weight_decay", std::to_string(o.weight_decay)},
                       {"learning_rate_warmup_steps", std::to_string(o.learning_rate_warmup_steps)},
                       {"init_from", o.init_from},
                       {"data", o.data},
                       {"data_path", o.data_path},
                       {"dlbench_version", std::string(version())}};
    const auto ints = [](const std::vector<std::int32_t>& from, std::int64_t offset, std::int64_t count) {
      const auto begin = from.begin() + offset;
      return std::vector<std::int64_t>(begin, begin + count);
    };
    if (trainer.input().dtype == DType::int32) {
      // A pretraining batch: token ids, token types, the masked positions (within each sequence)
      // with their original tokens (-1: the slot predicts nothing), the next-sentence labels and
      // each sequence's real tokens (the rest is padding, which attention leaves out).
      record.metadata["sequence_length"] = std::to_string(o.sequence_length);
      std::vector<std::int32_t> tokens, block;
      trainer.copy_sequences_to_host(tokens, block);
      const PretrainingBatchLayout layout{o.batch_size, o.sequence_length, max_predictions};
      const std::int64_t n = layout.sequences, length = layout.tokens, p = layout.predictions();
      std::vector<std::int64_t> positions = ints(block, layout.masked_rows(), n * p);
      for (std::size_t i = 0; i < positions.size(); ++i) positions[i] -= static_cast<std::int64_t>(i) / p * length;
      record.tensors.push_back(NamedTensor::of_ints("input", {n, length}, ints(tokens, 0, n * length).data()));
      record.tensors.push_back(NamedTensor::of_ints("token_type_ids", {n, length}, ints(block, layout.token_types(), n * length).data()));
      record.tensors.push_back(NamedTensor::of_ints("masked_positions", {n, p}, positions.data()));
      record.tensors.push_back(NamedTensor::of_ints("masked_tokens", {n, p}, ints(block, layout.masked_tokens(), n * p).data()));
      record.tensors.push_back(NamedTensor::of_ints("labels", {n}, ints(block, layout.next_sentence_labels(), n).data()));
      record.tensors.push_back(NamedTensor::of_ints("real_tokens", {n}, ints(block, layout.real_tokens(), n).data()));
    } else {
      record.metadata["image_size"] = image_size_text(o);
      std::vector<float> pixels;
      std::vector<std::int32_t> labels32;
      trainer.copy_batch_to_host(pixels, labels32);
      const std::vector<std::int64_t> labels(labels32.begin(), labels32.end());
      record.tensors.push_back(NamedTensor::of_floats("input", dims_of(trainer.input().shape), pixels.data()));
      // One label per sample, or per pixel: (N, H, W) for a segmentation model.
      const std::vector<std::int64_t> label_dims =
          labels.size() == static_cast<std::size_t>(o.batch_size)
              ? std::vector<std::int64_t>{o.batch_size}
              : std::vector<std::int64_t>{o.batch_size, o.image_height, o.image_width};
      record.tensors.push_back(NamedTensor::of_ints("labels", label_dims, labels.data()));
    }
    for (auto& t : parameter_tensors(trainer.parameters(), *backend, "initial.")) record.tensors.push_back(std::move(t));
    const float loss = trainer.step_and_loss();
    backend->synchronize();
    record.tensors.push_back(NamedTensor::of_floats("loss", {}, &loss));
    for (const DropoutMaskState& state : step_state(trainer.network())) {
      Tensor mask = activation(state.shape, state.layout, DType::fp32);
      const std::shared_ptr<void> storage = backend->allocate(mask.bytes());
      mask.data = storage.get();
      backend->dropout_mask(mask, state.p, state.layer_seed);
      record.tensors.push_back(NamedTensor::of_floats("state." + state.name, dims_of(mask.shape), download(*backend, mask).data()));
    }
    for (auto& t : parameter_tensors(trainer.parameters(), *backend, "grad.", true)) record.tensors.push_back(std::move(t));
    for (auto& t : parameter_tensors(trainer.parameters(), *backend, "updated.")) record.tensors.push_back(std::move(t));
    write_weights_file(o.record_step, record);
    std::cerr << "dlbench-worker: recorded one " << to_string(o.model) << " step (loss " << loss << ", "
              << trainer.parameters().parameters().size() << " parameters) to " << o.record_step << "\n";
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "dlbench-worker: --record-step: " << e.what() << "\n";
    return kExitFailed;
  }
}

}  // namespace dlbench::worker
