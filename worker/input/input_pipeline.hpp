// The worker's real-data input: decoding threads fill a ring of prefetch batches while the
// training step runs; the step takes the next batch, waiting only when the pipeline is behind.
// What each image becomes depends on (seed, rank, its position in the rank's stream) only, so a
// batch is the same whatever the thread count or scheduling.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "dtype.hpp"
#include "host_memory.hpp"
#include "input/image_folder.hpp"
#include "input/sample_source.hpp"

namespace dlbench::input {

struct InputPipelineConfig {
  int batch_size = 32;
  int threads = 4;
  int prefetch_batches = 2;
  std::uint64_t seed = 42;
  int rank = 0;
  int world = 1;
  // What a batch's pixels are handed out as: the model's input type (fp32, fp16 or bf16), so that
  // the decoding threads convert, not the step (fp16 for 256 images at 224: 86 ms a batch on one
  // EPYC core; on an H200 the real-data amp step, converting and copying, took 163 ms against 35).
  worker::DType pixel_type = worker::DType::fp32;
  // Host memory for one batch's pixels, `bytes` long: page-locked where a GPU copies from it (a
  // backend's allocate_host). The default: ordinary memory, faulted in as the pipeline starts, as
  // page-locked memory is, so that no batch's first write waits on the kernel (host_memory.hpp).
  std::function<std::shared_ptr<void>(std::size_t bytes)> allocate_pixels = worker::zeroed_large_memory;
  // Batches packed for a device that resizes (packed_images.hpp: each image's decoded crop and taps),
  // where the source packs (SampleSource::packed_side); the threads then only decode.
  bool resize_on_device = false;
};

struct Batch {
  const void* pixels = nullptr;  // batch samples of the source's pixel_floats() values of pixel_type, in its layout
  worker::DType pixel_type = worker::DType::fp32;
  const std::int32_t* labels = nullptr;  // batch samples of its label_count(): class indices, or one per pixel
  // Where the batch is packed for a device that resizes: `pixels` is the packed batch, its first
  // packed_bytes bytes used, each image resized to packed_side × packed_side in pixel_type. 0: not packed.
  std::size_t packed_bytes = 0;
  int packed_side = 0;
  // The pixels as floats; throws unless pixel_type is fp32.
  const float* floats() const;
};

// A file that could not be read or decoded; its slot took the next file of the shard instead.
struct SkippedFile {
  std::string path;
  std::string why;
};

class InputPipeline {
 public:
  // The source must outlive the pipeline. Starts the threads at once: prefetching begins now.
  InputPipeline(const SampleSource& source, InputPipelineConfig config);
  ~InputPipeline();
  InputPipeline(const InputPipeline&) = delete;
  InputPipeline& operator=(const InputPipeline&) = delete;

  // Waits for the next batch and hands it out; the previous batch goes back to the threads. The
  // batch stays valid until the next call. Rethrows what stopped the pipeline (every file of the
  // shard unreadable, say).
  Batch next();

  std::size_t shard_size() const { return shard_size_; }
  // The most bytes a packed batch may use (0 where batches are not packed): a device's staging size.
  std::size_t packed_capacity() const { return packed_capacity_; }
  long images_done() const { return images_done_.load(); }
  // Distinct files skipped so far and the first few of them.
  long skipped_count() const;
  std::vector<SkippedFile> skipped_examples() const;

  static constexpr std::size_t kSkippedExamples = 5;

 private:
  void run_thread();
  void produce(std::int64_t image, SampleScratch& scratch, std::vector<float>& staging);
  // Makes stream position `image` with `make`, from the file at its place in the shard or, where
  // that file cannot be read or decoded, the next one that can (each skipped and counted).
  void make_from_shard(std::int64_t image, const std::vector<std::uint32_t>& shard, std::int64_t n,
                       const std::function<bool(std::uint32_t, std::mt19937_64&, std::string&)>& make);
  std::shared_ptr<const std::vector<std::uint32_t>> shard_of_epoch(std::uint64_t epoch);
  void skip(std::uint32_t file, const std::string& why);
  bool known_bad(std::uint32_t file) const;

  const SampleSource& source_;
  const InputPipelineConfig config_;
  const std::size_t sample_floats_;
  const std::size_t sample_labels_;
  const std::size_t sample_bytes_;  // one sample's pixels in pixel_type
  const int slots_;
  std::size_t packed_capacity_ = 0;
  std::unique_ptr<std::atomic<std::uint64_t>[]> packed_used_;  // per slot: its batch's payload taken so far
  std::size_t shard_size_ = 0;
  std::vector<std::shared_ptr<void>> pixels_;      // per slot
  std::vector<worker::HostVector<std::int32_t>> labels_;  // per slot

  std::mutex mutex_;
  std::condition_variable producers_;  // an image to claim, or stop
  std::condition_variable consumer_;   // a batch complete, or an error
  std::int64_t next_image_ = 0;        // the rank's stream position the next thread claims
  std::int64_t handed_out_ = 0;        // batches given to next(); the one before the last is free again
  std::vector<int> filled_;            // images finished per slot
  bool stop_ = false;
  std::exception_ptr error_;

  std::mutex epoch_mutex_;
  std::deque<std::pair<std::uint64_t, std::shared_ptr<const std::vector<std::uint32_t>>>> epochs_;  // the latest few

  mutable std::mutex skipped_mutex_;
  std::set<std::uint32_t> bad_files_;
  std::vector<SkippedFile> skipped_examples_;

  std::atomic<long> images_done_{0};
  std::vector<std::thread> threads_;
};

}  // namespace dlbench::input
