// Cityscapes for semantic segmentation: the layout its download unpacks to, its 19 training
// classes, and the training augmentation of torchvision's segmentation reference on PIL images:
// RandomResize (the shorter side to 0.5–2× its own) → RandomHorizontalFlip → RandomCrop with the
// image padded by 0 and the label by 255 where it is smaller than the crop → ToTensor → Normalize.
// The image is resampled by PIL's bilinear filter and the label by PIL's nearest neighbour, so a
// sample equals the reference's bit for bit.
#pragma once

#include <array>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "host_memory.hpp"
#include "input/image_transform.hpp"
#include "input/png_codec.hpp"
#include "input/sample_source.hpp"

namespace dlbench::input {

// ROOT/leftImg8bit/train/<city>/<stem>_leftImg8bit.png with its labels at
// ROOT/gtFine/train/<city>/<stem>_gtFine_labelIds.png.
struct CityscapesPair {
  std::string image;
  std::string labels;
};

struct CityscapesSet {
  std::string root;
  std::vector<std::string> cities;    // sorted
  std::vector<CityscapesPair> pairs;  // sorted by image path
  long unpaired_images = 0;           // images without their label file: not used
};

// Throws DataUnavailable naming the path and what is wrong.
CityscapesSet scan_cityscapes(const std::string& root);

constexpr int kCityscapesClasses = 19;
constexpr std::int32_t kIgnoredPixel = 255;  // the per-pixel loss skips it (worker kIgnoreLabel)

// Cityscapes' label ids (0 to 33, its labels.py) to its 19 training ids; the rest are 255.
std::int32_t cityscapes_train_id(std::uint8_t label_id);

// One sample's draws: the size RandomResize chose, the flip, and where the crop starts in the
// flipped and padded image.
struct SegmentationDraw {
  int resized_height = 0;
  int resized_width = 0;
  bool flip = false;
  int top = 0;
  int left = 0;
};

// torchvision's RandomResize(0.5 s, 2 s) with s the image's shorter side (F.resize to one int:
// the shorter side becomes it, the longer int(size · long / short)), a coin for the flip, and
// RandomCrop.get_params over the image padded to at least the crop.
SegmentationDraw draw_segmentation(int image_height, int image_width, int crop_height, int crop_width,
                                   std::mt19937_64& rng);

// PIL's Image.resize(NEAREST) along one axis: for each output position, the input one it copies,
// or -1 where PIL fills (its position steps by in/out in double and is truncated, so it can run
// past the last pixel).
std::vector<int> nearest_positions(int in_size, int out_size);

struct SegmentationScratch {
  PngDecoder image_decoder;
  PngDecoder label_decoder;
  int width = 0, height = 0;  // the pair decode_segmentation_pair decoded last
  BilinearResampler resampler;
  worker::HostBytes image_bytes, label_bytes;
  worker::HostBytes window, crop;  // RGB8
  std::vector<int> columns, rows;
};

// Decodes a pair's two PNG files into the scratch; false (and why) for either file, or for a
// label image of another size than the image.
bool decode_segmentation_pair(std::span<const std::uint8_t> image_png, std::span<const std::uint8_t> label_png,
                              SegmentationScratch& scratch, std::string& error);
// The sample from the pair decoded last and the draws: pixels crop_height × crop_width × 3 floats
// in `layout`, labels crop_height × crop_width training ids (255: ignored, padding included).
bool transform_segmentation(const SegmentationDraw& draw, int crop_height, int crop_width, PixelLayout layout,
                            const Normalizer& normalizer, SegmentationScratch& scratch, float* pixels,
                            std::int32_t* labels, std::string& error);

class CityscapesSource final : public SampleSource {
 public:
  // The set must outlive the source.
  CityscapesSource(const CityscapesSet& set, int crop_height, int crop_width, PixelLayout layout)
      : set_(set), crop_height_(crop_height), crop_width_(crop_width), layout_(layout) {}
  const std::string& root() const override { return set_.root; }
  std::size_t samples() const override { return set_.pairs.size(); }
  const std::string& sample_path(std::uint32_t sample) const override { return set_.pairs[sample].image; }
  std::string samples_are() const override { return "image and label PNG pairs"; }
  std::size_t pixel_floats() const override { return 3 * label_count(); }
  std::size_t label_count() const override {
    return static_cast<std::size_t>(crop_height_) * static_cast<std::size_t>(crop_width_);
  }
  std::unique_ptr<SampleScratch> scratch() const override;
  bool make(std::uint32_t sample, std::mt19937_64& rng, SampleScratch& scratch, float* pixels, std::int32_t* labels,
            std::string& why) const override;

 private:
  const CityscapesSet& set_;
  const int crop_height_;
  const int crop_width_;
  const PixelLayout layout_;
  Normalizer normalizer_;
};

}  // namespace dlbench::input
