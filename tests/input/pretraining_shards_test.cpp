// BERT's pretraining shards (NVIDIA's HDF5 format): the scan, the sequence checks, the batch
// layout the trainer reads, and the reader's shares across ranks and epochs. Shards are written
// with write_pretraining_shard, or with HDF5's own calls where a test needs a file the writer
// would never make. h5py's view of the same files is tests/golden's (golden.bert-base-shards).
#include <gtest/gtest.h>
#include <hdf5.h>

#include <array>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "input/pretraining_shards.hpp"
#include "layers/bert_config.hpp"

namespace dlbench::input {
namespace {
namespace fs = std::filesystem;
using worker::kNoPrediction;
using worker::PretrainingBatchLayout;

class ShardDir {
 public:
  ShardDir() {
    path_ = fs::temp_directory_path() / ("dlbench-shards-" + std::to_string(::getpid()) + "-" + std::to_string(counter_++));
    fs::remove_all(path_);
    fs::create_directories(path_);
  }
  ~ShardDir() { fs::remove_all(path_); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  std::string path() const { return path_.string(); }

 private:
  fs::path path_;
  static inline int counter_ = 0;
};

// Two sequences of 8 tokens with up to 3 predictions: the first padded after 6 tokens with 2
// predictions, the second unpadded with 3.
LoadedShard two_sequences() {
  LoadedShard s;
  s.rows = 2;
  s.length = 8;
  s.predictions = 3;
  s.input_ids = {101, 2000, 103, 102, 3000, 102, 0, 0, /**/ 101, 4000, 4001, 102, 103, 103, 5000, 102};
  s.input_mask = {1, 1, 1, 1, 1, 1, 0, 0, /**/ 1, 1, 1, 1, 1, 1, 1, 1};
  s.segment_ids = {0, 0, 0, 0, 1, 1, 0, 0, /**/ 0, 0, 0, 0, 1, 1, 1, 1};
  s.positions = {2, 4, 0, /**/ 1, 4, 5};
  s.masked_ids = {2500, 3001, 0, /**/ 4002, 6000, 6001};
  s.next_sentence = {1, 0};
  s.valid_rows = {0, 1};
  return s;
}

TEST(PretrainingShards, ABatchIsLaidOutAsTheTrainerReadsIt) {
  ShardDir dir;
  write_pretraining_shard(dir.file("a.hdf5"), two_sequences());
  const PretrainingShards shards = scan_pretraining_shards(dir.path());
  ASSERT_EQ(shards.shards.size(), 1u);
  EXPECT_EQ(shards.sequence_length, 8);
  EXPECT_EQ(shards.max_predictions, 3);
  EXPECT_EQ(shards.sequences, 2);
  const LoadedShard loaded = load_pretraining_shard(dir.file("a.hdf5"), 8, 3, 30522);
  EXPECT_EQ(loaded.valid_rows, (worker::HostVector<std::int64_t>{0, 1}));
  EXPECT_EQ(loaded.input_ids, two_sequences().input_ids) << "int32 ids read back as written";
  EXPECT_EQ(loaded.input_mask, two_sequences().input_mask) << "int8 masks read back as int32";
  SequenceBatch batch;
  place_sequence(loaded, 0, 1, 2, batch);  // row 0 as the batch's second sequence
  place_sequence(loaded, 1, 0, 2, batch);
  const PretrainingBatchLayout layout{2, 8, 3};
  ASSERT_EQ(batch.block.size(), static_cast<std::size_t>(layout.total()));
  EXPECT_EQ(std::vector<std::int32_t>(batch.token_ids.begin() + 8, batch.token_ids.end()),
            std::vector<std::int32_t>(loaded.input_ids.begin(), loaded.input_ids.begin() + 8));
  const auto part = [&](std::int64_t from, std::int64_t count) {
    return std::vector<std::int32_t>(batch.block.begin() + from, batch.block.begin() + from + count);
  };
  EXPECT_EQ(part(layout.next_sentence_labels(), 2), (std::vector<std::int32_t>{0, 1}));
  // Rows of the (sequences · tokens) matrix; the padded list's last slot reads its first row.
  EXPECT_EQ(part(layout.masked_rows(), 6), (std::vector<std::int32_t>{1, 4, 5, 8 + 2, 8 + 4, 8 + 0}));
  EXPECT_EQ(part(layout.masked_tokens(), 6), (std::vector<std::int32_t>{4002, 6000, 6001, 2500, 3001, kNoPrediction}));
  EXPECT_EQ(part(layout.token_types() + 8, 8), (std::vector<std::int32_t>{0, 0, 0, 0, 1, 1, 0, 0}));
  EXPECT_EQ(part(layout.real_tokens(), 2), (std::vector<std::int32_t>{8, 6}));
}

TEST(PretrainingShards, ASequenceThatBreaksTheFormatIsRefusedSayingWhy) {
  const std::map<std::string, std::function<void(LoadedShard&)>> breaks{
      {"input_ids holds 30522 at token 1, outside the vocabulary of 30522", [](LoadedShard& s) { s.input_ids[1] = 30522; }},
      {"input_ids holds -4 at token 7, outside the vocabulary of 30522", [](LoadedShard& s) { s.input_ids[7] = -4; }},
      {"input_mask is not ones then zeros (at token 7)", [](LoadedShard& s) { s.input_mask[7] = 1; }},
      {"input_mask marks no real token", [](LoadedShard& s) { std::fill_n(s.input_mask.begin(), 8, 0); }},
      {"segment_ids holds 2, not 0 or 1", [](LoadedShard& s) { s.segment_ids[3] = 2; }},
      {"next_sentence_labels holds 3, not 0 or 1", [](LoadedShard& s) { s.next_sentence[0] = 3; }},
      {"masked_lm_positions holds 6, outside the 6 real tokens", [](LoadedShard& s) { s.positions[1] = 6; }},
      {"masked_lm_positions holds -1, outside the 6 real tokens", [](LoadedShard& s) { s.positions[0] = -1; }},
      {"masked_lm_positions repeats 2", [](LoadedShard& s) { s.positions[1] = 2; }},
      {"masked_lm_ids holds 40000, outside the vocabulary of 30522", [](LoadedShard& s) { s.masked_ids[0] = 40000; }},
  };
  for (const auto& [why, spoil] : breaks) {
    LoadedShard shard = two_sequences();
    EXPECT_EQ(check_sequence(shard, 0, 30522), "");
    spoil(shard);
    EXPECT_EQ(check_sequence(shard, 0, 30522), why);
    EXPECT_EQ(check_sequence(shard, 1, 30522), "") << "the other sequence is unaffected";
  }
  // Past the list's end (its first 0) nothing is checked: NVIDIA pads positions and ids with 0.
  LoadedShard padded = two_sequences();
  padded.masked_ids[2] = 99999;
  EXPECT_EQ(check_sequence(padded, 0, 30522), "");
  // A loaded shard keeps the good sequences and counts the others, naming the first.
  ShardDir dir;
  LoadedShard bad = two_sequences();
  bad.segment_ids[9] = 7;
  write_pretraining_shard(dir.file("bad.h5"), bad);
  const LoadedShard loaded = load_pretraining_shard(dir.file("bad.h5"), 8, 3, 30522);
  EXPECT_EQ(loaded.valid_rows, (worker::HostVector<std::int64_t>{0}));
  EXPECT_EQ(loaded.rejected_count, 1);
  ASSERT_EQ(loaded.rejected.size(), 1u);
  EXPECT_EQ(loaded.rejected[0], "sequence 1: segment_ids holds 7, not 0 or 1");
}

// Writes a file with HDF5's own calls: the six datasets with the given shapes (an empty shape:
// the dataset is left out), int32 or float, chunked and never written (so a huge shape is small
// on disk).
void write_shaped(const std::string& path, const std::map<std::string, std::vector<hsize_t>>& shapes, bool floats = false) {
  const hid_t file = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  ASSERT_GE(file, 0);
  for (const auto& [name, dims] : shapes) {
    if (dims.empty()) continue;
    const hid_t space = H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr);
    const hid_t properties = H5Pcreate(H5P_DATASET_CREATE);
    std::vector<hsize_t> chunk(dims.size(), 1);
    H5Pset_chunk(properties, static_cast<int>(chunk.size()), chunk.data());
    const hid_t set = H5Dcreate2(file, name.c_str(), floats ? H5T_IEEE_F32LE : H5T_STD_I32LE, space, H5P_DEFAULT,
                                 properties, H5P_DEFAULT);
    ASSERT_GE(set, 0) << name;
    H5Dclose(set);
    H5Pclose(properties);
    H5Sclose(space);
  }
  H5Fclose(file);
}

std::map<std::string, std::vector<hsize_t>> shapes(hsize_t rows, hsize_t length, hsize_t predictions) {
  return {{"input_ids", {rows, length}},           {"input_mask", {rows, length}},
          {"segment_ids", {rows, length}},         {"masked_lm_positions", {rows, predictions}},
          {"masked_lm_ids", {rows, predictions}},  {"next_sentence_labels", {rows}}};
}

std::string scan_error(const std::string& path) {
  try {
    scan_pretraining_shards(path);
  } catch (const DataUnavailable& e) {
    return e.what();
  }
  return "(scanned)";
}

TEST(PretrainingShards, TheScanRefusesWhatIsNotTheFormatNamingTheShardAndTheDataset) {
  ShardDir dir;
  EXPECT_EQ(scan_error(dir.path()), "data.path " + dir.path() +
                                        " holds no pretraining shards (*.hdf5, *.h5 or *.hdf files, as NVIDIA's "
                                        "create_datasets_from_start.sh writes them)");
  EXPECT_EQ(scan_error(dir.file("none")), "data.path " + dir.file("none") + " does not exist on this node");
  // Each alone: why it is unusable; beside a good shard it is skipped and named.
  auto missing = shapes(4, 8, 3);
  missing["masked_lm_ids"] = {};
  auto wrong = shapes(4, 8, 3);
  wrong["segment_ids"] = {4, 9};
  const std::vector<std::pair<std::string, std::string>> cases{
      {"missing.hdf5", "no dataset masked_lm_ids"},
      {"wrong.hdf5", "segment_ids is (4, 9), not the shape input_ids (4, 8) and masked_lm_positions give it"},
      {"floats.hdf5", "input_ids does not hold integers"},
      {"huge.hdf5", "200000000 sequences take 23651 MiB loaded, over the 4096 MiB a shard may take; split it"},
      {"text.hdf5", "not an HDF5 file that can be read"}};
  write_shaped(dir.file("missing.hdf5"), missing);
  write_shaped(dir.file("wrong.hdf5"), wrong);
  write_shaped(dir.file("floats.hdf5"), shapes(4, 8, 3), true);
  write_shaped(dir.file("huge.hdf5"), shapes(200'000'000, 8, 3));
  std::ofstream(dir.file("text.hdf5")) << "not HDF5";
  EXPECT_LT(fs::file_size(dir.file("huge.hdf5")), 1u << 20) << "the huge shard is only its header";
  for (const auto& [name, why] : cases) {
    EXPECT_EQ(scan_error(dir.file(name)), "data.path " + dir.file(name) + ": no shard can be read; the first: " +
                                              dir.file(name) + ": " + why);
  }
  write_pretraining_shard(dir.file("good.hdf5"), two_sequences());
  const PretrainingShards shards = scan_pretraining_shards(dir.path());
  ASSERT_EQ(shards.shards.size(), 1u);
  EXPECT_EQ(shards.shards[0].path, dir.file("good.hdf5"));
  ASSERT_EQ(shards.unreadable.size(), cases.size());
  std::set<std::string> named;
  for (const auto& u : shards.unreadable) named.insert(u.why);
  for (const auto& [name, why] : cases) EXPECT_TRUE(named.contains(why)) << why;
  // Another sequence length beside it: refused naming both shards.
  write_shaped(dir.file("long.hdf5"), shapes(4, 16, 3));
  EXPECT_EQ(scan_error(dir.path()), "data.path " + dir.path() + ": " + dir.file("good.hdf5") +
                                        " holds sequences of 8 tokens with 3 predictions, " + dir.file("long.hdf5") +
                                        " of 16 with 3; a data set has one sequence length");
}

std::vector<std::int32_t> first_tokens(const SequenceBatch& batch, std::int64_t length) {
  std::vector<std::int32_t> out;
  for (std::size_t i = 0; i < batch.token_ids.size(); i += static_cast<std::size_t>(length)) {
    out.push_back(batch.token_ids[i + 1]);  // the first word: unique per sequence below
  }
  return out;
}

// Shards whose sequences each carry a unique first word (1000 + 100 · shard + row).
PretrainingShards numbered_shards(const ShardDir& dir, int count, int rows) {
  for (int f = 0; f < count; ++f) {
    LoadedShard shard = synthesize_pretraining_shard(rows, 16, 3, 30522, static_cast<std::uint64_t>(f));
    for (int r = 0; r < rows; ++r) shard.input_ids[static_cast<std::size_t>(r * 16 + 1)] = 1000 + 100 * f + r;
    write_pretraining_shard(dir.file("shard_" + std::to_string(f) + ".hdf5"), shard);
  }
  return scan_pretraining_shards(dir.path());
}

// An epoch is every sequence once, across the ranks, whether shards are dealt out (as many shards
// as ranks or more) or shared (fewer); the next epoch shuffles again; a rank's batches depend on
// (seed, rank, world) only.
TEST(PretrainingReader, EachEpochReadsEverySequenceOnceAcrossTheRanks) {
  for (const int count : {1, 3, 4}) {
    SCOPED_TRACE(std::to_string(count) + " shards");
    ShardDir dir;
    const PretrainingShards shards = numbered_shards(dir, count, 6);
    const int world = 2, per_batch = 3;
    const int total = count * 6;
    std::vector<std::vector<std::int32_t>> seen(world);
    for (int rank = 0; rank < world; ++rank) {
      PretrainingReader reader(shards, {per_batch, 30522, 42, rank, world});
      // Enough batches for this rank's share of two epochs.
      const int share = count >= world ? 6 * static_cast<int>((count - rank + world - 1) / world) : total / world;
      for (int b = 0; b < 2 * share / per_batch; ++b) {
        const auto words = first_tokens(reader.next(), 16);
        seen[static_cast<std::size_t>(rank)].insert(seen[static_cast<std::size_t>(rank)].end(), words.begin(), words.end());
      }
      EXPECT_EQ(reader.skipped_count(), 0);
    }
    // Each rank's first half is its share of epoch 0 (a rank's share has the same size every epoch).
    std::multiset<std::int32_t> all, first_epoch;
    for (const auto& words : seen) {
      all.insert(words.begin(), words.end());
      first_epoch.insert(words.begin(), words.begin() + static_cast<long>(words.size() / 2));
    }
    for (int f = 0; f < count; ++f) {
      for (int r = 0; r < 6; ++r) {
        EXPECT_EQ(first_epoch.count(1000 + 100 * f + r), 1u) << "shard " << f << " row " << r;
        EXPECT_EQ(all.count(1000 + 100 * f + r), 2u) << "shard " << f << " row " << r;
      }
    }
    // The next epoch is another order (and, with shards dealt out, maybe other shards).
    const auto& rank0 = seen[0];
    const std::size_t half = rank0.size() / 2;
    EXPECT_NE(std::vector<std::int32_t>(rank0.begin(), rank0.begin() + static_cast<long>(half)),
              std::vector<std::int32_t>(rank0.begin() + static_cast<long>(half), rank0.end()));
    // The same seed, rank and world: the same batches.
    PretrainingReader again(shards, {per_batch, 30522, 42, 0, world});
    EXPECT_EQ(first_tokens(again.next(), 16), std::vector<std::int32_t>(rank0.begin(), rank0.begin() + per_batch));
  }
}

TEST(PretrainingReader, BrokenShardsAndSequencesAreSkippedAndCountedOnce) {
  ShardDir dir;
  LoadedShard spoiled = synthesize_pretraining_shard(8, 16, 3, 30522, 1);
  spoiled.input_ids[16 * 2 + 3] = 31000;
  spoiled.input_ids[16 * 5 + 3] = 31000;
  write_pretraining_shard(dir.file("a.hdf5"), spoiled);
  write_pretraining_shard(dir.file("b.hdf5"), synthesize_pretraining_shard(8, 16, 3, 30522, 2));
  std::ofstream(dir.file("c.hdf5")) << "garbage";
  const PretrainingShards shards = scan_pretraining_shards(dir.path());
  PretrainingReader reader(shards, {4, 30522, 1, 0, 1});
  for (int b = 0; b < 20; ++b) reader.next();  // several epochs of 14 good sequences
  EXPECT_EQ(reader.skipped_count(), 3);        // c.hdf5 and two sequences of a.hdf5, once each
  const auto examples = reader.skipped_examples();
  ASSERT_EQ(examples.size(), 3u);
  EXPECT_EQ(examples[0].path, dir.file("c.hdf5"));
  EXPECT_EQ(examples[1].why, "sequence 2: input_ids holds 31000 at token 3, outside the vocabulary of 30522");
  // A vocabulary the shards' ids do not fit: every sequence is refused, and the reader says so.
  PretrainingReader small(shards, {4, 2000, 1, 0, 1});
  try {
    small.next();
    FAIL() << "a share without a usable sequence gave a batch";
  } catch (const DataUnavailable& e) {
    EXPECT_EQ(std::string(e.what()), "data.path " + dir.path() +
                                         ": rank 0 of 1 has no usable sequence in its share (16 sequences in 2 shards); "
                                         "the first skipped: " + dir.file("c.hdf5") + ": not an HDF5 file that can be read");
  }
}

}  // namespace
}  // namespace dlbench::input
