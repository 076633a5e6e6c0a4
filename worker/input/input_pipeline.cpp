#include "input/input_pipeline.hpp"

#include <algorithm>
#include <cstring>
#include <new>
#include <stdexcept>

#include "precision.hpp"

namespace dlbench::input {

using worker::DType;

const float* Batch::floats() const {
  if (packed_bytes != 0) throw std::logic_error("Batch::floats: this batch is packed for a device that resizes");
  if (pixel_type != DType::fp32) throw std::logic_error("Batch::floats: this batch's pixels are 16-bit");
  return static_cast<const float*>(pixels);
}
InputPipeline::InputPipeline(const SampleSource& source, InputPipelineConfig config)
    : source_(source),
      config_(config),
      sample_floats_(source.pixel_floats()),
      sample_labels_(source.label_count()),
      sample_bytes_(sample_floats_ * worker::dtype_size(config.pixel_type)),
      slots_(config.prefetch_batches + 1) {
  if (config_.batch_size < 1 || config_.threads < 1 || config_.prefetch_batches < 1) {
    throw std::invalid_argument("InputPipeline: batch size, threads and prefetch batches must be >= 1");
  }
  if (!config_.allocate_pixels) throw std::invalid_argument("InputPipeline: no allocate_pixels for the batches");
  if (config_.pixel_type == DType::int32) throw std::invalid_argument("InputPipeline: pixels are fp32, fp16 or bf16");
  // How the threads will make halves: a wrong DLBENCH_CPU_HALVES is refused here, not in a thread.
  if (config_.pixel_type == DType::fp16) worker::halves_convert_on_f16c();
  shard_size_ = epoch_shard(source_.samples(), config_.seed, 0, config_.rank, config_.world).size();
  if (shard_size_ == 0) {
    throw DataUnavailable("data.path " + source_.root() + " has " + std::to_string(source_.samples()) + " " +
                          source_.samples_are() + ", fewer than the " + std::to_string(config_.world) +
                          " ranks that each read their own share of them");
  }
  const auto images = static_cast<std::size_t>(config_.batch_size);
  if (config_.resize_on_device) {
    if (source_.packed_side() < 1) {
      throw std::invalid_argument("InputPipeline: " + source_.samples_are() + " are resized on the host only");
    }
    packed_capacity_ = packed_batch_capacity(images, source_.packed_side());
    packed_used_ = std::make_unique<std::atomic<std::uint64_t>[]>(static_cast<std::size_t>(slots_));
  }
  const std::size_t batch_bytes = config_.resize_on_device ? packed_capacity_ : sample_bytes_ * images;
  const Normalizer normalizer;  // its table goes into each packed slot once
  for (int s = 0; s < slots_; ++s) {
    pixels_.push_back(config_.allocate_pixels(batch_bytes));
    if (!pixels_.back()) throw std::bad_alloc();
    labels_.emplace_back(sample_labels_ * images);
    if (config_.resize_on_device) {
      // The normaliser's table once a slot; each batch's images then take the payload from its start.
      std::memcpy(static_cast<std::byte*>(pixels_.back().get()) + PackedBatchLayout::kNormalizer, normalizer.table(),
                  PackedBatchLayout::kTable - PackedBatchLayout::kNormalizer);
      packed_used_[static_cast<std::size_t>(s)] = PackedBatchLayout::payload(images);
    }
  }
  filled_.assign(static_cast<std::size_t>(slots_), 0);
  for (int t = 0; t < config_.threads; ++t) threads_.emplace_back([this] { run_thread(); });
}

InputPipeline::~InputPipeline() {
  {
    std::lock_guard lock(mutex_);
    stop_ = true;
  }
  producers_.notify_all();
  for (auto& t : threads_) t.join();
}

std::shared_ptr<const std::vector<std::uint32_t>> InputPipeline::shard_of_epoch(std::uint64_t epoch) {
  std::lock_guard lock(epoch_mutex_);
  for (const auto& [e, shard] : epochs_) {
    if (e == epoch) return shard;
  }
  auto shard = std::make_shared<const std::vector<std::uint32_t>>(
      epoch_shard(source_.samples(), config_.seed, epoch, config_.rank, config_.world));
  epochs_.emplace_back(epoch, shard);
  if (epochs_.size() > 3) epochs_.pop_front();  // threads straddle at most two epochs
  return shard;
}

bool InputPipeline::known_bad(std::uint32_t file) const {
  std::lock_guard lock(skipped_mutex_);
  return bad_files_.contains(file);
}

void InputPipeline::skip(std::uint32_t file, const std::string& why) {
  std::lock_guard lock(skipped_mutex_);
  if (bad_files_.insert(file).second && skipped_examples_.size() < kSkippedExamples) {
    skipped_examples_.push_back({source_.sample_path(file), why});
  }
}

long InputPipeline::skipped_count() const {
  std::lock_guard lock(skipped_mutex_);
  return static_cast<long>(bad_files_.size());
}

std::vector<SkippedFile> InputPipeline::skipped_examples() const {
  std::lock_guard lock(skipped_mutex_);
  return skipped_examples_;
}

void InputPipeline::produce(std::int64_t image, SampleScratch& scratch, std::vector<float>& staging) {
  const auto n = static_cast<std::int64_t>(shard_size_);
  const auto shard = shard_of_epoch(static_cast<std::uint64_t>(image / n));
  const std::int64_t batch = image / config_.batch_size;
  const auto slot = static_cast<std::size_t>(batch % slots_);
  const auto index = static_cast<std::size_t>(image % config_.batch_size);
  auto* const batch_start = static_cast<std::byte*>(pixels_[slot].get());
  std::int32_t* labels = labels_[slot].data() + index * sample_labels_;
  if (config_.resize_on_device) {
    const PackedSlot packed{batch_start, reinterpret_cast<PackedImage*>(batch_start + PackedBatchLayout::kTable) + index,
                            &packed_used_[slot]};
    make_from_shard(image, *shard, n, [&](std::uint32_t file, std::mt19937_64& rng, std::string& why) {
      return source_.make_packed(file, rng, scratch, packed, labels, why);
    });
    return;
  }
  void* out = batch_start + index * sample_bytes_;
  // fp32 is made in place; a 16-bit type is made in floats, then converted.
  float* made = config_.pixel_type == DType::fp32 ? static_cast<float*>(out) : staging.data();
  make_from_shard(image, *shard, n, [&](std::uint32_t file, std::mt19937_64& rng, std::string& why) {
    if (!source_.make(file, rng, scratch, made, labels, why)) return false;
    // Rounded as a float batch's encode rounds it: the same bits either way.
    if (made != out) worker::store_floats(made, sample_floats_, config_.pixel_type, out);
    return true;
  });
}

void InputPipeline::make_from_shard(std::int64_t image, const std::vector<std::uint32_t>& shard, std::int64_t n,
                                    const std::function<bool(std::uint32_t, std::mt19937_64&, std::string&)>& make) {
  const std::int64_t position = image % n;
  std::string first_error;
  for (std::int64_t attempt = 0; attempt < n; ++attempt) {
    const std::uint32_t file = shard[static_cast<std::size_t>((position + attempt) % n)];
    if (known_bad(file)) continue;
    // The sample's randomness: its place in the rank's stream and the attempt, nothing else.
    std::mt19937_64 rng(mix_bits(config_.seed) ^
                        mix_bits(static_cast<std::uint64_t>(config_.rank) << 40 ^ static_cast<std::uint64_t>(image)) ^
                        mix_bits(static_cast<std::uint64_t>(attempt) + 7));
    std::string why;
    bool made = false;
    try {
      made = make(file, rng, why);
    } catch (const worker::HostOutOfMemory& refused) {  // a buffer this file needed did not fit
      throw worker::HostOutOfMemory(refused, "to read " + source_.sample_path(file));
    }
    if (made) return;
    skip(file, why);
    if (first_error.empty()) first_error = source_.sample_path(file) + ": " + why;
  }
  throw DataUnavailable("none of the " + std::to_string(n) + " " + source_.samples_are() + " of rank " +
                        std::to_string(config_.rank) + "'s share of " + source_.root() + " can be decoded" +
                        (first_error.empty() ? std::string() : "; for example " + first_error));
}

void InputPipeline::run_thread() {
  const std::unique_ptr<SampleScratch> scratch = source_.scratch();
  // Floats for a 16-bit type to be converted from; none where the batch is packed for the device.
  std::vector<float> staging(config_.pixel_type == DType::fp32 || config_.resize_on_device ? 0 : sample_floats_);
  const int batch_size = config_.batch_size;
  for (;;) {
    std::int64_t image = 0;
    {
      std::unique_lock lock(mutex_);
      // Batch b may be written once the batch that had its slot before has been released.
      producers_.wait(lock, [&] {
        const std::int64_t released = std::max<std::int64_t>(handed_out_ - 1, 0);
        return stop_ || next_image_ / batch_size < released + slots_;
      });
      if (stop_) return;
      image = next_image_++;
    }
    try {
      produce(image, *scratch, staging);
    } catch (...) {
      std::lock_guard lock(mutex_);
      if (!error_) error_ = std::current_exception();
      stop_ = true;
      producers_.notify_all();
      consumer_.notify_all();
      return;
    }
    ++images_done_;
    std::lock_guard lock(mutex_);
    if (++filled_[static_cast<std::size_t>((image / batch_size) % slots_)] == batch_size) consumer_.notify_all();
  }
}

Batch InputPipeline::next() {
  std::unique_lock lock(mutex_);
  if (handed_out_ > 0) {  // the previous batch is free
    const auto freed = static_cast<std::size_t>((handed_out_ - 1) % slots_);
    filled_[freed] = 0;
    if (packed_used_) packed_used_[freed] = PackedBatchLayout::payload(static_cast<std::size_t>(config_.batch_size));
  }
  const std::int64_t batch = handed_out_++;
  producers_.notify_all();
  const auto slot = static_cast<std::size_t>(batch % slots_);
  consumer_.wait(lock, [&] { return error_ || filled_[slot] == config_.batch_size; });
  if (filled_[slot] != config_.batch_size) std::rethrow_exception(error_);
  if (packed_used_) {
    return {pixels_[slot].get(), config_.pixel_type, labels_[slot].data(), packed_used_[slot].load(),
            source_.packed_side()};
  }
  return {pixels_[slot].get(), config_.pixel_type, labels_[slot].data()};
}

}  // namespace dlbench::input
