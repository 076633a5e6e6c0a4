// BERT's real pretraining data as NVIDIA's DeepLearningExamples makes it
// (create_pretraining_data.py, behind create_datasets_from_start.sh): HDF5 shards, each holding
//   input_ids, input_mask, segment_ids     (sequences, L)  token ids, 1 then 0 past the real
//                                                          tokens, sentence A (0) or B (1)
//   masked_lm_positions, masked_lm_ids     (sequences, P)  the masked positions and their original
//                                                          tokens; a shorter list ends at position 0
//   next_sentence_labels                   (sequences)     0 (is next) or 1
// with L the sequence length and P max_predictions_per_seq (20 at 128 tokens, 80 at 512).
//
// A rank reads its share shard by shard, as NVIDIA's run_pretraining.py does: every epoch
// shuffles the shards (the same order on every rank) and deals them out, or, with fewer shards than
// ranks, every rank reads every shard and takes every world-th sequence of it. A shard is loaded
// whole (the next one in the background while this one is read) and its sequences shuffled. A
// sequence is checked before it is used; one that breaks the format is skipped and counted, as a
// shard that cannot be read is.
#pragma once

#include <cstdint>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "input/image_folder.hpp"
#include "input/input_pipeline.hpp"

namespace dlbench::input {

struct PretrainingShard {
  std::string path;
  std::int64_t sequences = 0;
};

struct PretrainingShards {
  std::string root;
  std::vector<PretrainingShard> shards;  // the readable ones, in sorted path order
  std::int64_t sequence_length = 0;      // L
  std::int64_t max_predictions = 0;      // P
  std::int64_t sequences = 0;            // over every shard
  std::vector<SkippedFile> unreadable;   // shards whose datasets could not be read or are not the format
};

// A shard is loaded whole: one over this many bytes (as int32) is refused; NVIDIA's are a few
// hundred MiB at most.
inline constexpr std::int64_t kMaxShardBytes = std::int64_t{4} << 30;

// `path` is one shard or a directory of them (its *.hdf5, *.h5 and *.hdf files). Reads each
// shard's dataset shapes, not its data. Throws DataUnavailable naming the path when nothing is
// usable: no such path, no shard, no readable shard, or shards that disagree on L or P (naming two).
PretrainingShards scan_pretraining_shards(const std::string& path);

// One shard's datasets, as int32, and its sequences that passed the checks (row numbers).
struct LoadedShard {
  std::int64_t rows = 0, length = 0, predictions = 0;
  // A whole shard (NVIDIA's phase-1 shards: hundreds of MiB), made through the host memory check.
  worker::HostVector<std::int32_t> input_ids, input_mask, segment_ids, positions, masked_ids, next_sentence;
  worker::HostVector<std::int64_t> valid_rows;
  std::vector<std::string> rejected;  // "sequence R: why", the first few
  std::int64_t rejected_count = 0;
};

// Reads a whole shard and checks every sequence against the format and `vocabulary`. Throws
// DataUnavailable naming the shard when its datasets cannot be read or have other shapes than
// (L, P) say.
LoadedShard load_pretraining_shard(const std::string& path, std::int64_t length, std::int64_t predictions,
                                   std::int64_t vocabulary);

// Why a sequence breaks the format, or empty when it does not: ids within the vocabulary, the mask
// ones then zeros with at least one real token, segment ids and the next-sentence label 0 or 1, the
// masked positions (up to the first 0) distinct, within the real tokens, their ids within the
// vocabulary.
std::string check_sequence(const LoadedShard& shard, std::int64_t row, std::int64_t vocabulary);

// The batch layout the worker's trainer reads (worker/layers/bert_config.hpp's
// PretrainingBatchLayout): token ids, and one int32 block of next-sentence labels, masked rows,
// masked token ids (-1 where a slot has no prediction), token types and each sequence's real tokens.
struct SequenceBatch {
  std::vector<std::int32_t> token_ids;
  std::vector<std::int32_t> block;
};

// Writes shard row `row` as sequence `s` of a batch of `sequences`.
void place_sequence(const LoadedShard& shard, std::int64_t row, std::int64_t s, std::int64_t sequences,
                    SequenceBatch& batch);

// Writes a shard as NVIDIA's create_pretraining_data.py does (int32 ids and positions, int8 mask,
// segment ids and labels, gzip-compressed chunks). Throws std::runtime_error naming the path.
void write_pretraining_shard(const std::string& path, const LoadedShard& shard);

// A shard of `sequences` made as NVIDIA's script makes them from text, over BERT's uncased wordpiece
// ids ([CLS] 101, [SEP] 102, [MASK] 103, words from 999 below `vocabulary`): [CLS] A [SEP] B [SEP]
// filling the `length` tokens, one sequence in ten shorter (short_seq_prob 0.1) and padded with 0;
// min(predictions, max(1, round(15% of the real tokens))) masked positions (80% [MASK], 10% a random
// word, 10% kept); a random next-sentence label. From `seed`.
LoadedShard synthesize_pretraining_shard(std::int64_t sequences, std::int64_t length, std::int64_t predictions,
                                         std::int64_t vocabulary, std::uint64_t seed);

struct PretrainingReaderConfig {
  int batch_size = 32;
  std::int64_t vocabulary = 30522;
  std::uint64_t seed = 42;
  int rank = 0;
  int world = 1;
};

class PretrainingReader {
 public:
  // The shards must outlive the reader. Starts loading the rank's first shard at once.
  PretrainingReader(const PretrainingShards& shards, PretrainingReaderConfig config);
  ~PretrainingReader();
  PretrainingReader(const PretrainingReader&) = delete;
  PretrainingReader& operator=(const PretrainingReader&) = delete;

  // The next batch: valid until the next call. Waits for a shard's load when one is due. Throws
  // DataUnavailable when this rank's share of an epoch has no usable sequence.
  const SequenceBatch& next();

  // Shards and sequences skipped so far (each counted once) and the first few, with why.
  long skipped_count() const;
  std::vector<SkippedFile> skipped_examples() const;
  std::int64_t sequences_done() const { return sequences_done_; }
  // Sequences per second the background thread loads (read, decompress, check) over the shards
  // loaded so far, 0 before the first: beside the batches' assembly, what bounds the reader.
  double load_rate() const;

 private:
  struct Share {
    std::size_t shard = 0;        // index into shards.shards
    std::uint64_t epoch = 0;
  };
  Share next_share();
  void start_load(const Share& share);
  void open_next_shard();
  void skip_shard(std::size_t shard, const std::string& why);

  const PretrainingShards& shards_;
  const PretrainingReaderConfig config_;
  std::uint64_t epoch_ = 0;
  std::vector<std::uint32_t> epoch_order_;  // this rank's shards in the current epoch
  std::size_t epoch_position_ = 0;
  std::size_t empty_in_a_row_ = 0;  // shares that gave nothing since the last sequence

  std::future<std::shared_ptr<LoadedShard>> loading_;
  Share loading_share_;
  std::shared_ptr<LoadedShard> current_;
  std::vector<std::int64_t> order_;  // the current shard's rows this rank reads, shuffled
  std::size_t position_ = 0;

  SequenceBatch batch_;
  std::int64_t sequences_done_ = 0;
  mutable std::mutex load_mutex_;
  double load_seconds_ = 0;       // spent in finished loads
  std::int64_t loaded_rows_ = 0;  // sequences they read

  mutable std::mutex skipped_mutex_;
  std::set<std::size_t> counted_shards_;  // shards counted: unreadable, or their rejected sequences
  long skipped_ = 0;
  std::vector<SkippedFile> skipped_examples_;
};

}  // namespace dlbench::input
