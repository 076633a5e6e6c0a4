// What the input pipeline reads: a data set on disk and the transform that turns one of its
// samples into a training sample (pixels and labels). The pipeline owns the sharding, the threads,
// the ring of batches and the skipping of unreadable files; a source only makes one sample.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "host_memory.hpp"
#include "input/image_folder.hpp"
#include "input/image_packing.hpp"
#include "input/image_transform.hpp"

namespace dlbench::input {

// One thread's decoders and buffers, reused from sample to sample.
struct SampleScratch {
  virtual ~SampleScratch() = default;
};

class SampleSource {
 public:
  virtual ~SampleSource() = default;
  virtual const std::string& root() const = 0;
  virtual std::size_t samples() const = 0;
  // The file named when a sample is skipped.
  virtual const std::string& sample_path(std::uint32_t sample) const = 0;
  // What a sample is, for messages: "image files", "image and label PNG pairs".
  virtual std::string samples_are() const = 0;
  // Floats of pixels and int32 labels one training sample takes.
  virtual std::size_t pixel_floats() const = 0;
  virtual std::size_t label_count() const = 0;
  virtual std::unique_ptr<SampleScratch> scratch() const = 0;
  // Reads and transforms one sample with the randomness `rng` gives; false (and why) when its
  // files cannot be read or decoded.
  virtual bool make(std::uint32_t sample, std::mt19937_64& rng, SampleScratch& scratch, float* pixels,
                    std::int32_t* labels, std::string& why) const = 0;
  // For a device that resizes (packed_images.hpp): the side of the square a packed sample is
  // resized to, or 0 where this source resizes on the host only.
  virtual int packed_side() const { return 0; }
  // As make, with the same draws from `rng`, but the sample's decoded crop and taps go to `slot`
  // for the device to resize: the same values once it has.
  virtual bool make_packed(std::uint32_t sample, std::mt19937_64& rng, SampleScratch& scratch, const PackedSlot& slot,
                           std::int32_t* labels, std::string& why) const;
};

// A file's bytes; false (and why) when it cannot be read or is larger than 256 MiB. A decoding
// thread's own buffer is worker::HostBytes, whose growth is checked.
bool read_file(const std::string& path, worker::HostBytes& bytes, std::string& why);
bool read_file(const std::string& path, std::vector<std::uint8_t>& bytes, std::string& why);

// ImageNet's layout and training augmentation: one class index per sample.
class ImageFolderSource final : public SampleSource {
 public:
  // The folder must outlive the source. decoding.dct_scaling off decodes at full size: torchvision's path.
  ImageFolderSource(const ImageFolder& folder, int image_size, PixelLayout layout, JpegDecoding decoding = {})
      : folder_(folder), image_size_(image_size), layout_(layout), decoding_(decoding) {}
  const std::string& root() const override { return folder_.root; }
  std::size_t samples() const override { return folder_.files.size(); }
  const std::string& sample_path(std::uint32_t sample) const override { return folder_.files[sample].path; }
  std::string samples_are() const override { return "image files"; }
  std::size_t pixel_floats() const override {
    return 3 * static_cast<std::size_t>(image_size_) * static_cast<std::size_t>(image_size_);
  }
  std::size_t label_count() const override { return 1; }
  std::unique_ptr<SampleScratch> scratch() const override;
  bool make(std::uint32_t sample, std::mt19937_64& rng, SampleScratch& scratch, float* pixels, std::int32_t* labels,
            std::string& why) const override;
  int packed_side() const override { return image_size_; }
  bool make_packed(std::uint32_t sample, std::mt19937_64& rng, SampleScratch& scratch, const PackedSlot& slot,
                   std::int32_t* labels, std::string& why) const override;

 private:
  // The file's bytes and its crop and flip, drawn as torchvision draws them; false (and why) when
  // it cannot be read.
  bool draw(std::uint32_t sample, std::mt19937_64& rng, SampleScratch& scratch, CropBox& crop, bool& flip,
            std::string& why) const;
  const ImageFolder& folder_;
  const int image_size_;
  const PixelLayout layout_;
  const JpegDecoding decoding_;
  Normalizer normalizer_;
};

}  // namespace dlbench::input
