#include "input/cityscapes.hpp"

#include <algorithm>
#include <filesystem>
#include <system_error>

namespace dlbench::input {
namespace fs = std::filesystem;
namespace {

constexpr const char* kImageSuffix = "_leftImg8bit.png";
constexpr const char* kLabelSuffix = "_gtFine_labelIds.png";

struct CityscapesScratch final : SampleScratch {
  SegmentationScratch transform;
};

}  // namespace

std::int32_t cityscapes_train_id(std::uint8_t label_id) {
  // labels.py: road 7, sidewalk 8, building 11, wall 12, fence 13, pole 17, traffic light 19,
  // traffic sign 20, vegetation 21, terrain 22, sky 23, person 24, rider 25, car 26, truck 27,
  // bus 28, train 31, motorcycle 32, bicycle 33; every other id is ignored in training.
  static constexpr std::array<std::uint8_t, 34> kTrainIds = {
      255, 255, 255, 255, 255, 255, 255, 0,  1,  255, 255, 2,  3,  4,   255, 255, 255,
      5,   255, 6,   7,   8,   9,   10,  11, 12, 13,  14,  15, 255, 255, 16,  17,  18};
  return label_id < kTrainIds.size() ? kTrainIds[label_id] : kIgnoredPixel;
}

CityscapesSet scan_cityscapes(const std::string& root) {
  require_data_directory(root);
  std::error_code ec;
  const fs::path images = fs::path(root) / "leftImg8bit" / "train";
  const fs::path labels = fs::path(root) / "gtFine" / "train";
  for (const fs::path& needed : {images, labels}) {
    if (!fs::is_directory(needed, ec)) {
      throw DataUnavailable("data.path " + root + " has no " + fs::relative(needed, root, ec).string() +
                            " directory; expected Cityscapes' layout " + root +
                            "/leftImg8bit/train/<city>/<name>_leftImg8bit.png with " + root +
                            "/gtFine/train/<city>/<name>_gtFine_labelIds.png");
    }
  }
  CityscapesSet set;
  set.root = root;
  for (fs::directory_iterator it(images, fs::directory_options::skip_permission_denied, ec), end; !ec && it != end;
       it.increment(ec)) {
    std::error_code is_dir_error;
    if (it->is_directory(is_dir_error)) set.cities.push_back(it->path().filename().string());
  }
  if (ec) throw DataUnavailable("data.path " + images.string() + " cannot be read: " + ec.message());
  std::sort(set.cities.begin(), set.cities.end());
  for (const std::string& city : set.cities) {
    std::vector<std::string> names;
    for (fs::directory_iterator it(images / city, fs::directory_options::skip_permission_denied, ec), end;
         !ec && it != end; it.increment(ec)) {
      std::error_code file_error;
      const std::string name = it->path().filename().string();
      if (it->is_regular_file(file_error) && name.ends_with(kImageSuffix)) names.push_back(name);
    }
    if (ec) throw DataUnavailable("data.path " + (images / city).string() + " cannot be read: " + ec.message());
    std::sort(names.begin(), names.end());
    for (const std::string& name : names) {
      const std::string stem = name.substr(0, name.size() - std::char_traits<char>::length(kImageSuffix));
      const fs::path label = labels / city / (stem + kLabelSuffix);
      std::error_code label_error;
      if (fs::is_regular_file(label, label_error)) {
        set.pairs.push_back({(images / city / name).string(), label.string()});
      } else {
        ++set.unpaired_images;
      }
    }
  }
  if (set.pairs.empty()) {
    throw DataUnavailable("data.path " + root + " has " + std::to_string(set.cities.size()) + " cities under " +
                          "leftImg8bit/train but no image with its labels (<name>_leftImg8bit.png beside gtFine/train/"
                          "<city>/<name>_gtFine_labelIds.png)");
  }
  return set;
}

SegmentationDraw draw_segmentation(int image_height, int image_width, int crop_height, int crop_width,
                                   std::mt19937_64& rng) {
  const int shorter = std::min(image_height, image_width), longer = std::max(image_height, image_width);
  const int lo = std::max(1, static_cast<int>(0.5 * shorter)), hi = std::max(lo, static_cast<int>(2.0 * shorter));
  const int size = uniform_int(rng, lo, hi + 1);  // Python's randint: both ends included
  // Python's int(size * long / short): a true division in double, truncated.
  const int resized_longer = static_cast<int>(static_cast<double>(size) * longer / shorter);
  SegmentationDraw d;
  d.resized_width = image_width <= image_height ? size : resized_longer;
  d.resized_height = image_width <= image_height ? resized_longer : size;
  d.flip = (rng() >> 63) != 0;
  const int padded_height = std::max(d.resized_height, crop_height), padded_width = std::max(d.resized_width, crop_width);
  d.top = uniform_int(rng, 0, padded_height - crop_height + 1);
  d.left = uniform_int(rng, 0, padded_width - crop_width + 1);
  return d;
}

std::vector<int> nearest_positions(int in_size, int out_size) {
  // Pillow's ImagingScaleAffine: the position starts at half a step and adds the step each pixel.
  const double step = static_cast<double>(in_size) / out_size;
  std::vector<int> positions(static_cast<std::size_t>(out_size));
  double position = step * 0.5;
  for (int x = 0; x < out_size; ++x, position += step) {
    const int in = position < 0.0 ? -1 : static_cast<int>(position);
    positions[static_cast<std::size_t>(x)] = in < in_size ? in : -1;
  }
  return positions;
}

bool decode_segmentation_pair(std::span<const std::uint8_t> image_png, std::span<const std::uint8_t> label_png,
                              SegmentationScratch& scratch, std::string& error) {
  int label_width = 0, label_height = 0;
  if (!scratch.image_decoder.decode(image_png, PngPixels::rgb8, scratch.width, scratch.height, error)) return false;
  if (!scratch.label_decoder.decode(label_png, PngPixels::grey8, label_width, label_height, error)) {
    error = "its label image: " + error;
    return false;
  }
  if (label_width != scratch.width || label_height != scratch.height) {
    error = "its label image is " + std::to_string(label_width) + "x" + std::to_string(label_height) +
            " pixels and the image " + std::to_string(scratch.width) + "x" + std::to_string(scratch.height);
    return false;
  }
  return true;
}

bool transform_segmentation(const SegmentationDraw& draw, int crop_height, int crop_width, PixelLayout layout,
                            const Normalizer& normalizer, SegmentationScratch& scratch, float* pixels,
                            std::int32_t* labels, std::string& error) {
  const int width = scratch.width, height = scratch.height;
  const int resized_width = draw.resized_width, resized_height = draw.resized_height;
  if (resized_width < 1 || resized_height < 1 || draw.top < 0 || draw.left < 0 ||
      draw.top > std::max(resized_height, crop_height) - crop_height ||
      draw.left > std::max(resized_width, crop_width) - crop_width) {
    error = "crop outside the image";
    return false;
  }
  // The crop's part inside the resized image (the rest is padding): rows from draw.top, and in
  // the flipped image columns from draw.left, which are columns from `first_column` before the flip.
  const int rows = std::clamp(resized_height - draw.top, 0, crop_height);
  const int columns = std::clamp(resized_width - draw.left, 0, crop_width);
  const int first_column = draw.flip ? resized_width - draw.left - columns : draw.left;
  const auto row_bytes = static_cast<std::size_t>(crop_width) * 3;
  scratch.crop.assign(static_cast<std::size_t>(crop_height) * row_bytes, 0);  // the image pads with 0
  if (rows > 0 && columns > 0) {
    scratch.window.resize(static_cast<std::size_t>(rows) * static_cast<std::size_t>(columns) * 3);
    scratch.resampler.resize_window(scratch.image_decoder.pixels(), width, height, static_cast<std::size_t>(width) * 3,
                                    resized_width, resized_height, CropBox{draw.top, first_column, rows, columns},
                                    scratch.window.data());
    for (int r = 0; r < rows; ++r) {
      const std::uint8_t* in = scratch.window.data() + static_cast<std::size_t>(r) * static_cast<std::size_t>(columns) * 3;
      std::uint8_t* out = scratch.crop.data() + static_cast<std::size_t>(r) * row_bytes;
      for (int c = 0; c < columns; ++c) {
        const std::uint8_t* px = in + static_cast<std::size_t>(draw.flip ? columns - 1 - c : c) * 3;
        out[c * 3 + 0] = px[0];
        out[c * 3 + 1] = px[1];
        out[c * 3 + 2] = px[2];
      }
    }
  }
  scratch.columns = nearest_positions(width, resized_width);
  scratch.rows = nearest_positions(height, resized_height);
  const std::uint8_t* ids = scratch.label_decoder.pixels();
  for (int r = 0; r < crop_height; ++r) {
    std::int32_t* out = labels + static_cast<std::size_t>(r) * static_cast<std::size_t>(crop_width);
    for (int c = 0; c < crop_width; ++c) {
      if (r >= rows || c >= columns) {
        out[c] = kIgnoredPixel;  // the label pads with 255
        continue;
      }
      const int x = scratch.columns[static_cast<std::size_t>(first_column + (draw.flip ? columns - 1 - c : c))];
      const int y = scratch.rows[static_cast<std::size_t>(draw.top + r)];
      // Where PIL's nearest resize runs past the image it fills with 0, label id 0 (unlabeled).
      const std::uint8_t id = x < 0 || y < 0 ? 0 : ids[static_cast<std::size_t>(y) * static_cast<std::size_t>(width) + static_cast<std::size_t>(x)];
      out[c] = cityscapes_train_id(id);
    }
  }
  normalizer.write(scratch.crop.data(), crop_height, crop_width, false, layout, pixels);
  return true;
}

std::unique_ptr<SampleScratch> CityscapesSource::scratch() const { return std::make_unique<CityscapesScratch>(); }

bool CityscapesSource::make(std::uint32_t sample, std::mt19937_64& rng, SampleScratch& scratch, float* pixels,
                            std::int32_t* labels, std::string& why) const {
  auto& s = static_cast<CityscapesScratch&>(scratch).transform;
  const CityscapesPair& pair = set_.pairs[sample];
  if (!read_file(pair.image, s.image_bytes, why)) return false;
  if (!read_file(pair.labels, s.label_bytes, why)) {
    why = "its label file " + pair.labels + " " + why;
    return false;
  }
  if (!decode_segmentation_pair(s.image_bytes, s.label_bytes, s, why)) return false;
  const SegmentationDraw draw = draw_segmentation(s.height, s.width, crop_height_, crop_width_, rng);
  return transform_segmentation(draw, crop_height_, crop_width_, layout_, normalizer_, s, pixels, labels, why);
}

}  // namespace dlbench::input
