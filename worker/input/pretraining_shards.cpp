#include "input/pretraining_shards.hpp"

#include <hdf5.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <random>
#include <stdexcept>
#include <utility>

#include "layers/bert_config.hpp"

namespace dlbench::input {
namespace {

namespace fs = std::filesystem;
using worker::PretrainingBatchLayout;

constexpr std::array<const char*, 6> kDatasets{"input_ids",           "input_mask",    "segment_ids",
                                               "masked_lm_positions", "masked_lm_ids", "next_sentence_labels"};

// An HDF5 identifier closed with its own call when it goes out of scope.
class Handle {
 public:
  Handle(hid_t id, herr_t (*close)(hid_t)) : id_(id), close_(close) {}
  ~Handle() {
    if (id_ >= 0) close_(id_);
  }
  Handle(Handle&& other) noexcept : id_(std::exchange(other.id_, -1)), close_(other.close_) {}
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;
  Handle& operator=(Handle&&) = delete;
  hid_t get() const { return id_; }
  bool ok() const { return id_ >= 0; }

 private:
  hid_t id_;
  herr_t (*close_)(hid_t);
};

// HDF5 prints its error stack to stderr by default; dlbench reports the failure itself. A
// thread-safe HDF5 (Debian's) keeps that setting per thread: each thread that opens a shard says so.
void silence_hdf5() {
  thread_local bool silenced = false;
  if (!silenced) H5Eset_auto2(H5E_DEFAULT, nullptr, nullptr);
  silenced = true;
}

struct DatasetShape {
  std::vector<std::int64_t> dims;
  bool integers = false;
};

// The dataset's dimensions and whether it holds integers; throws DataUnavailable naming it.
DatasetShape shape_of(hid_t file, const char* name, const std::string& path) {
  if (H5Lexists(file, name, H5P_DEFAULT) <= 0) throw DataUnavailable(path + ": no dataset " + name);
  const Handle set(H5Dopen2(file, name, H5P_DEFAULT), H5Dclose);
  if (!set.ok()) throw DataUnavailable(path + ": " + name + " is not a dataset");
  const Handle space(H5Dget_space(set.get()), H5Sclose);
  const Handle type(H5Dget_type(set.get()), H5Tclose);
  const int rank = space.ok() ? H5Sget_simple_extent_ndims(space.get()) : -1;
  if (rank < 1 || rank > 2) throw DataUnavailable(path + ": " + name + " has " + std::to_string(rank) + " dimensions");
  std::array<hsize_t, 2> dims{};
  H5Sget_simple_extent_dims(space.get(), dims.data(), nullptr);
  DatasetShape shape;
  for (int i = 0; i < rank; ++i) shape.dims.push_back(static_cast<std::int64_t>(dims[static_cast<std::size_t>(i)]));
  shape.integers = type.ok() && H5Tget_class(type.get()) == H5T_INTEGER;
  return shape;
}

struct ShardShape {
  std::int64_t rows = 0, length = 0, predictions = 0;
};

// Checks that the six datasets are integers of (N, L), (N, L), (N, L), (N, P), (N, P), (N).
ShardShape read_shard_shape(hid_t file, const std::string& path) {
  std::array<DatasetShape, kDatasets.size()> shapes;
  for (std::size_t i = 0; i < kDatasets.size(); ++i) {
    shapes[i] = shape_of(file, kDatasets[i], path);
    if (!shapes[i].integers) throw DataUnavailable(path + ": " + kDatasets[i] + " does not hold integers");
  }
  const std::int64_t rows = shapes[0].dims[0];
  if (shapes[0].dims.size() != 2) throw DataUnavailable(path + ": input_ids is not (sequences, tokens)");
  const std::int64_t length = shapes[0].dims[1];
  if (shapes[3].dims.size() != 2) throw DataUnavailable(path + ": masked_lm_positions is not (sequences, predictions)");
  const std::int64_t predictions = shapes[3].dims[1];
  const std::array<std::vector<std::int64_t>, kDatasets.size()> wanted{
      std::vector<std::int64_t>{rows, length}, {rows, length}, {rows, length}, {rows, predictions}, {rows, predictions},
      {rows}};
  for (std::size_t i = 1; i < kDatasets.size(); ++i) {
    if (shapes[i].dims != wanted[i]) {
      std::string dims;
      for (const std::int64_t d : shapes[i].dims) dims += (dims.empty() ? "" : ", ") + std::to_string(d);
      throw DataUnavailable(path + ": " + kDatasets[i] + " is (" + dims + "), not the shape input_ids (" +
                            std::to_string(rows) + ", " + std::to_string(length) + ") and masked_lm_positions give it");
    }
  }
  if (rows < 1 || length < 1 || predictions < 1) throw DataUnavailable(path + ": the datasets are empty");
  return {rows, length, predictions};
}

// A shard's datasets as int32, loaded whole; refused over kMaxShardBytes before anything is read.
void require_loadable(const ShardShape& shape, const std::string& path) {
  const std::int64_t bytes = shape.rows * (3 * shape.length + 2 * shape.predictions + 1) * 4;
  if (bytes > kMaxShardBytes) {
    throw DataUnavailable(path + ": " + std::to_string(shape.rows) + " sequences take " + std::to_string(bytes >> 20) +
                          " MiB loaded, over the 4096 MiB a shard may take; split it");
  }
}

Handle open_shard(const std::string& path) {
  silence_hdf5();
  Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!file.ok()) throw DataUnavailable(path + ": not an HDF5 file that can be read");
  return file;
}

void read_ints(hid_t file, const char* name, worker::HostVector<std::int32_t>& out, std::size_t count, const std::string& path) {
  out.assign(count, 0);
  const Handle set(H5Dopen2(file, name, H5P_DEFAULT), H5Dclose);
  // HDF5 converts any stored integer type to int32 (clamping what does not fit, which the
  // sequence checks then refuse).
  if (!set.ok() || H5Dread(set.get(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, out.data()) < 0) {
    throw DataUnavailable(path + ": " + name + " could not be read (a damaged or truncated file?)");
  }
}

// A shard's failure as a skipped entry says it: its message without the path in front.
std::string why_of(const std::string& path, const std::string& message) {
  return message.starts_with(path + ": ") ? message.substr(path.size() + 2) : message;
}

bool is_shard_name(const fs::path& p) {
  const std::string extension = p.extension().string();
  return extension == ".hdf5" || extension == ".h5" || extension == ".hdf";
}

}  // namespace

PretrainingShards scan_pretraining_shards(const std::string& path) {
  PretrainingShards result;
  result.root = path;
  std::error_code error;
  std::vector<std::string> candidates;
  if (fs::is_regular_file(path, error)) {
    candidates.push_back(path);
  } else {
    require_data_directory(path);
    for (const auto& entry : fs::directory_iterator(path, error)) {
      if (entry.is_regular_file(error) && is_shard_name(entry.path())) candidates.push_back(entry.path().string());
    }
    if (error) throw DataUnavailable("data.path " + path + " cannot be listed: " + error.message());
    std::sort(candidates.begin(), candidates.end());
    if (candidates.empty()) {
      throw DataUnavailable("data.path " + path + " holds no pretraining shards (*.hdf5, *.h5 or *.hdf files, "
                            "as NVIDIA's create_datasets_from_start.sh writes them)");
    }
  }
  for (const std::string& candidate : candidates) {
    ShardShape shape;
    try {
      const Handle file = open_shard(candidate);
      shape = read_shard_shape(file.get(), candidate);
      require_loadable(shape, candidate);
    } catch (const DataUnavailable& e) {
      result.unreadable.push_back({candidate, why_of(candidate, e.what())});
      continue;
    }
    if (result.shards.empty()) {
      result.sequence_length = shape.length;
      result.max_predictions = shape.predictions;
    } else if (shape.length != result.sequence_length || shape.predictions != result.max_predictions) {
      throw DataUnavailable("data.path " + path + ": " + result.shards.front().path + " holds sequences of " +
                            std::to_string(result.sequence_length) + " tokens with " +
                            std::to_string(result.max_predictions) + " predictions, " + candidate + " of " +
                            std::to_string(shape.length) + " with " + std::to_string(shape.predictions) +
                            "; a data set has one sequence length");
    }
    result.shards.push_back({candidate, shape.rows});
    result.sequences += shape.rows;
  }
  if (result.shards.empty()) {
    throw DataUnavailable("data.path " + path + ": no shard can be read; the first: " + result.unreadable.front().path +
                          ": " + result.unreadable.front().why);
  }
  return result;
}

LoadedShard load_pretraining_shard(const std::string& path, std::int64_t length, std::int64_t predictions,
                                   std::int64_t vocabulary) {
  const Handle file = open_shard(path);
  const ShardShape shape = read_shard_shape(file.get(), path);
  if (shape.length != length || shape.predictions != predictions) {
    throw DataUnavailable(path + ": now holds sequences of " + std::to_string(shape.length) + " tokens with " +
                          std::to_string(shape.predictions) + " predictions, not " + std::to_string(length) +
                          " with " + std::to_string(predictions));
  }
  require_loadable(shape, path);
  LoadedShard shard;
  shard.rows = shape.rows;
  shard.length = length;
  shard.predictions = predictions;
  const auto n = static_cast<std::size_t>(shape.rows);
  read_ints(file.get(), "input_ids", shard.input_ids, n * static_cast<std::size_t>(length), path);
  read_ints(file.get(), "input_mask", shard.input_mask, n * static_cast<std::size_t>(length), path);
  read_ints(file.get(), "segment_ids", shard.segment_ids, n * static_cast<std::size_t>(length), path);
  read_ints(file.get(), "masked_lm_positions", shard.positions, n * static_cast<std::size_t>(predictions), path);
  read_ints(file.get(), "masked_lm_ids", shard.masked_ids, n * static_cast<std::size_t>(predictions), path);
  read_ints(file.get(), "next_sentence_labels", shard.next_sentence, n, path);
  for (std::int64_t row = 0; row < shard.rows; ++row) {
    std::string why = check_sequence(shard, row, vocabulary);
    if (why.empty()) {
      shard.valid_rows.push_back(row);
      continue;
    }
    ++shard.rejected_count;
    if (shard.rejected.size() < InputPipeline::kSkippedExamples) shard.rejected.push_back("sequence " + std::to_string(row) + ": " + why);
  }
  return shard;
}

std::string check_sequence(const LoadedShard& shard, std::int64_t row, std::int64_t vocabulary) {
  const std::int64_t length = shard.length, p = shard.predictions;
  const std::int32_t* ids = &shard.input_ids[static_cast<std::size_t>(row * length)];
  const std::int32_t* mask = &shard.input_mask[static_cast<std::size_t>(row * length)];
  const std::int32_t* types = &shard.segment_ids[static_cast<std::size_t>(row * length)];
  const std::int32_t* positions = &shard.positions[static_cast<std::size_t>(row * p)];
  const std::int32_t* masked = &shard.masked_ids[static_cast<std::size_t>(row * p)];
  const auto in_vocabulary = [&](std::int32_t id) { return id >= 0 && id < vocabulary; };
  std::int64_t real = 0;
  while (real < length && mask[real] == 1) ++real;
  if (real == 0) return "input_mask marks no real token";
  for (std::int64_t j = real; j < length; ++j) {
    if (mask[j] != 0) return "input_mask is not ones then zeros (at token " + std::to_string(j) + ")";
  }
  for (std::int64_t j = 0; j < length; ++j) {
    if (!in_vocabulary(ids[j])) {
      return "input_ids holds " + std::to_string(ids[j]) + " at token " + std::to_string(j) + ", outside the vocabulary of " +
             std::to_string(vocabulary);
    }
    if (types[j] != 0 && types[j] != 1) return "segment_ids holds " + std::to_string(types[j]) + ", not 0 or 1";
  }
  const std::int32_t next = shard.next_sentence[static_cast<std::size_t>(row)];
  if (next != 0 && next != 1) return "next_sentence_labels holds " + std::to_string(next) + ", not 0 or 1";
  std::vector<bool> seen(static_cast<std::size_t>(length), false);
  for (std::int64_t k = 0; k < p && positions[k] != 0; ++k) {
    if (positions[k] < 0 || positions[k] >= real) {
      return "masked_lm_positions holds " + std::to_string(positions[k]) + ", outside the " + std::to_string(real) +
             " real tokens";
    }
    if (seen[static_cast<std::size_t>(positions[k])]) return "masked_lm_positions repeats " + std::to_string(positions[k]);
    seen[static_cast<std::size_t>(positions[k])] = true;
    if (!in_vocabulary(masked[k])) {
      return "masked_lm_ids holds " + std::to_string(masked[k]) + ", outside the vocabulary of " + std::to_string(vocabulary);
    }
  }
  return {};
}

void place_sequence(const LoadedShard& shard, std::int64_t row, std::int64_t s, std::int64_t sequences,
                    SequenceBatch& batch) {
  const PretrainingBatchLayout layout{sequences, shard.length, shard.predictions};
  const std::int64_t length = shard.length, p = shard.predictions;
  batch.token_ids.resize(static_cast<std::size_t>(sequences * length));
  batch.block.resize(static_cast<std::size_t>(layout.total()));
  const auto at = [&](std::int64_t i) -> std::int32_t& { return batch.block[static_cast<std::size_t>(i)]; };
  const auto from = static_cast<std::size_t>(row * length);
  std::copy_n(&shard.input_ids[from], length, &batch.token_ids[static_cast<std::size_t>(s * length)]);
  std::copy_n(&shard.segment_ids[from], length, &at(layout.token_types() + s * length));
  std::int64_t real = 0;
  while (real < length && shard.input_mask[from + static_cast<std::size_t>(real)] == 1) ++real;
  at(layout.real_tokens() + s) = static_cast<std::int32_t>(real);
  at(layout.next_sentence_labels() + s) = shard.next_sentence[static_cast<std::size_t>(row)];
  // NVIDIA's loader: the predictions are the positions before the first 0; the other slots
  // predict nothing (they read the sequence's first row, and the loss leaves them out).
  bool ended = false;
  for (std::int64_t k = 0; k < p; ++k) {
    const auto slot = static_cast<std::size_t>(row * p + k);
    ended = ended || shard.positions[slot] == 0;
    at(layout.masked_rows() + s * p + k) = static_cast<std::int32_t>(s * length + (ended ? 0 : shard.positions[slot]));
    at(layout.masked_tokens() + s * p + k) = ended ? worker::kNoPrediction : shard.masked_ids[slot];
  }
}

void write_pretraining_shard(const std::string& path, const LoadedShard& shard) {
  silence_hdf5();
  const Handle file(H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), H5Fclose);
  if (!file.ok()) throw std::runtime_error("cannot create " + path);
  const auto write = [&](const char* name, const worker::HostVector<std::int32_t>& values, std::int64_t columns, hid_t stored) {
    std::array<hsize_t, 2> dims{static_cast<hsize_t>(shard.rows), static_cast<hsize_t>(columns)};
    const int rank = columns > 0 ? 2 : 1;
    const Handle space(H5Screate_simple(rank, dims.data(), nullptr), H5Sclose);
    const Handle properties(H5Pcreate(H5P_DATASET_CREATE), H5Pclose);
    std::array<hsize_t, 2> chunk{std::min<hsize_t>(dims[0], 1024), dims[1]};
    H5Pset_chunk(properties.get(), rank, chunk.data());
    H5Pset_deflate(properties.get(), 4);
    const Handle set(H5Dcreate2(file.get(), name, stored, space.get(), H5P_DEFAULT, properties.get(), H5P_DEFAULT),
                     H5Dclose);
    if (!set.ok() || H5Dwrite(set.get(), H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, values.data()) < 0) {
      throw std::runtime_error("cannot write " + std::string(name) + " to " + path);
    }
  };
  write("input_ids", shard.input_ids, shard.length, H5T_STD_I32LE);
  write("input_mask", shard.input_mask, shard.length, H5T_STD_I8LE);
  write("segment_ids", shard.segment_ids, shard.length, H5T_STD_I8LE);
  write("masked_lm_positions", shard.positions, shard.predictions, H5T_STD_I32LE);
  write("masked_lm_ids", shard.masked_ids, shard.predictions, H5T_STD_I32LE);
  write("next_sentence_labels", shard.next_sentence, 0, H5T_STD_I8LE);
}

LoadedShard synthesize_pretraining_shard(std::int64_t sequences, std::int64_t length, std::int64_t predictions,
                                         std::int64_t vocabulary, std::uint64_t seed) {
  constexpr std::int32_t kCls = 101, kSep = 102, kMask = 103, kFirstWord = 999;
  if (length < 5 || predictions < 1 || vocabulary <= kFirstWord) {
    throw std::invalid_argument("a pretraining shard needs 5 or more tokens, a prediction and a vocabulary over 999 ids");
  }
  LoadedShard shard;
  shard.rows = sequences;
  shard.length = length;
  shard.predictions = predictions;
  const auto n = static_cast<std::size_t>(sequences);
  shard.input_ids.assign(n * static_cast<std::size_t>(length), 0);
  shard.input_mask.assign(shard.input_ids.size(), 0);
  shard.segment_ids.assign(shard.input_ids.size(), 0);
  shard.positions.assign(n * static_cast<std::size_t>(predictions), 0);
  shard.masked_ids.assign(shard.positions.size(), 0);
  shard.next_sentence.assign(n, 0);
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int32_t> word(kFirstWord, static_cast<std::int32_t>(vocabulary - 1));
  std::uniform_real_distribution<double> chance(0.0, 1.0);
  for (std::int64_t s = 0; s < sequences; ++s) {
    const std::int64_t real = chance(rng) < 0.1 ? std::uniform_int_distribution<std::int64_t>(5, length)(rng) : length;
    const std::int64_t a = std::uniform_int_distribution<std::int64_t>(1, real - 4)(rng);  // sentence A's words
    std::int32_t* ids = &shard.input_ids[static_cast<std::size_t>(s * length)];
    for (std::int64_t i = 0; i < real; ++i) {
      ids[i] = i == 0 ? kCls : (i == a + 1 || i == real - 1) ? kSep : word(rng);
      shard.input_mask[static_cast<std::size_t>(s * length + i)] = 1;
      shard.segment_ids[static_cast<std::size_t>(s * length + i)] = i <= a + 1 ? 0 : 1;
    }
    shard.next_sentence[static_cast<std::size_t>(s)] = static_cast<std::int32_t>(rng() & 1u);
    std::vector<std::int64_t> candidates;
    for (std::int64_t i = 1; i < real - 1; ++i) {
      if (i != a + 1) candidates.push_back(i);
    }
    std::shuffle(candidates.begin(), candidates.end(), rng);
    const auto wanted = static_cast<std::int64_t>(std::llround(static_cast<double>(real) * 0.15));
    const std::int64_t masked =
        std::min({predictions, std::max<std::int64_t>(1, wanted), static_cast<std::int64_t>(candidates.size())});
    std::sort(candidates.begin(), candidates.begin() + masked);
    for (std::int64_t k = 0; k < masked; ++k) {
      const std::int64_t position = candidates[static_cast<std::size_t>(k)];
      shard.positions[static_cast<std::size_t>(s * predictions + k)] = static_cast<std::int32_t>(position);
      shard.masked_ids[static_cast<std::size_t>(s * predictions + k)] = ids[position];
      const double draw = chance(rng);
      if (draw < 0.8) {
        ids[position] = kMask;
      } else if (draw < 0.9) {
        ids[position] = word(rng);
      }
    }
  }
  shard.valid_rows.resize(n);
  for (std::size_t i = 0; i < n; ++i) shard.valid_rows[i] = static_cast<std::int64_t>(i);
  return shard;
}

PretrainingReader::PretrainingReader(const PretrainingShards& shards, PretrainingReaderConfig config)
    : shards_(shards), config_(config) {
  if (config_.batch_size < 1 || config_.world < 1 || config_.rank < 0 || config_.rank >= config_.world) {
    throw std::invalid_argument("PretrainingReader: batch size and world must be >= 1, rank within the world");
  }
  for (const auto& unreadable : shards_.unreadable) {  // refused by the scan: never read again
    ++skipped_;
    if (skipped_examples_.size() < InputPipeline::kSkippedExamples) skipped_examples_.push_back(unreadable);
  }
  start_load(next_share());
}

PretrainingReader::~PretrainingReader() {
  if (loading_.valid()) loading_.wait();
}

PretrainingReader::Share PretrainingReader::next_share() {
  const std::size_t count = shards_.shards.size();
  const bool dealt = count >= static_cast<std::size_t>(config_.world);
  if (epoch_position_ >= epoch_order_.size()) {
    if (!epoch_order_.empty()) ++epoch_;
    // With fewer shards than ranks every rank reads every shard (and every world-th sequence).
    epoch_order_ = epoch_shard(count, config_.seed, epoch_, dealt ? config_.rank : 0, dealt ? config_.world : 1);
    epoch_position_ = 0;
  }
  return {epoch_order_[epoch_position_++], epoch_};
}

void PretrainingReader::start_load(const Share& share) {
  loading_share_ = share;
  const PretrainingShard& shard = shards_.shards[share.shard];
  const std::int64_t length = shards_.sequence_length, predictions = shards_.max_predictions;
  const std::int64_t vocabulary = config_.vocabulary;
  loading_ = std::async(std::launch::async, [this, path = shard.path, length, predictions, vocabulary] {
    const auto begin = std::chrono::steady_clock::now();
    std::shared_ptr<LoadedShard> loaded;
    try {
      loaded = std::make_shared<LoadedShard>(load_pretraining_shard(path, length, predictions, vocabulary));
    } catch (const worker::HostOutOfMemory& refused) {
      throw worker::HostOutOfMemory(refused, "to read " + path);
    }
    const std::lock_guard lock(load_mutex_);
    load_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - begin).count();
    loaded_rows_ += loaded->rows;
    return loaded;
  });
}

void PretrainingReader::open_next_shard() {
  const Share share = loading_share_;
  const std::string& path = shards_.shards[share.shard].path;
  std::shared_ptr<LoadedShard> loaded;
  try {
    loaded = loading_.get();
  } catch (const DataUnavailable& e) {
    skip_shard(share.shard, why_of(path, e.what()));
  }
  start_load(next_share());  // the next shard loads while this one is read
  current_ = loaded;
  order_.clear();
  position_ = 0;
  if (loaded) {
    {
      std::lock_guard lock(skipped_mutex_);
      if (counted_shards_.insert(share.shard).second) {
        skipped_ += static_cast<long>(loaded->rejected_count);
        for (const std::string& why : loaded->rejected) {
          if (skipped_examples_.size() < InputPipeline::kSkippedExamples) skipped_examples_.push_back({path, why});
        }
      }
    }
    // The same shuffle on every rank; with fewer shards than ranks each takes every world-th.
    worker::HostVector<std::int64_t> rows = loaded->valid_rows;
    std::mt19937_64 rng(mix_bits(config_.seed ^ mix_bits(share.epoch * 0x9E3779B97F4A7C15ull + share.shard)));
    std::shuffle(rows.begin(), rows.end(), rng);
    const bool dealt = shards_.shards.size() >= static_cast<std::size_t>(config_.world);
    for (std::size_t i = 0; i < rows.size(); ++i) {
      if (dealt || i % static_cast<std::size_t>(config_.world) == static_cast<std::size_t>(config_.rank)) {
        order_.push_back(rows[i]);
      }
    }
  }
  if (order_.empty()) {
    // Every shard of an epoch's share tried without a sequence: nothing will ever come.
    if (++empty_in_a_row_ > shards_.shards.size()) {
      const auto skipped = skipped_examples();
      throw DataUnavailable("data.path " + shards_.root + ": rank " + std::to_string(config_.rank) + " of " +
                            std::to_string(config_.world) + " has no usable sequence in its share (" +
                            std::to_string(shards_.sequences) + " sequences in " +
                            std::to_string(shards_.shards.size()) + " shards)" +
                            (skipped.empty() ? "" : "; the first skipped: " + skipped.front().path + ": " +
                                                        skipped.front().why));
    }
  } else {
    empty_in_a_row_ = 0;
  }
}

const SequenceBatch& PretrainingReader::next() {
  const auto sequences = static_cast<std::int64_t>(config_.batch_size);
  for (std::int64_t s = 0; s < sequences; ++s) {
    while (!current_ || position_ >= order_.size()) open_next_shard();
    place_sequence(*current_, order_[position_++], s, sequences, batch_);
  }
  sequences_done_ += sequences;
  return batch_;
}

void PretrainingReader::skip_shard(std::size_t shard, const std::string& why) {
  std::lock_guard lock(skipped_mutex_);
  if (!counted_shards_.insert(shard).second) return;  // once, not once per epoch
  ++skipped_;
  if (skipped_examples_.size() < InputPipeline::kSkippedExamples) {
    skipped_examples_.push_back({shards_.shards[shard].path, why});
  }
}

double PretrainingReader::load_rate() const {
  const std::lock_guard lock(load_mutex_);
  return load_seconds_ > 0 ? static_cast<double>(loaded_rows_) / load_seconds_ : 0.0;
}

long PretrainingReader::skipped_count() const {
  std::lock_guard lock(skipped_mutex_);
  return skipped_;
}

std::vector<SkippedFile> PretrainingReader::skipped_examples() const {
  std::lock_guard lock(skipped_mutex_);
  return skipped_examples_;
}

}  // namespace dlbench::input
