#include "input/sample_source.hpp"

#include <fstream>
#include <stdexcept>

namespace dlbench::input {
namespace {

constexpr std::size_t kMaxFileBytes = std::size_t{256} << 20;  // larger is not a photo worth decoding

struct ImageFolderScratch final : SampleScratch {
  TransformScratch transform;
  worker::HostBytes bytes;
};

template <class Bytes>
bool read_file_into(const std::string& path, Bytes& bytes, std::string& why) {
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) {
    why = "cannot be opened";
    return false;
  }
  const std::streamoff size = in.tellg();
  if (size < 0 || static_cast<std::size_t>(size) > kMaxFileBytes) {
    why = size < 0 ? "cannot be read" : "is larger than 256 MiB";
    return false;
  }
  bytes.resize(static_cast<std::size_t>(size));
  in.seekg(0);
  if (!in.read(reinterpret_cast<char*>(bytes.data()), size)) {
    why = "cannot be read";
    return false;
  }
  return true;
}

}  // namespace

bool read_file(const std::string& path, worker::HostBytes& bytes, std::string& why) {
  return read_file_into(path, bytes, why);
}
bool read_file(const std::string& path, std::vector<std::uint8_t>& bytes, std::string& why) {
  return read_file_into(path, bytes, why);
}

std::unique_ptr<SampleScratch> ImageFolderSource::scratch() const { return std::make_unique<ImageFolderScratch>(); }

bool SampleSource::make_packed(std::uint32_t, std::mt19937_64&, SampleScratch&, const PackedSlot&, std::int32_t*,
                               std::string&) const {
  throw std::logic_error(samples_are() + " are resized on the host only");
}

bool ImageFolderSource::draw(std::uint32_t sample, std::mt19937_64& rng, SampleScratch& scratch, CropBox& crop,
                             bool& flip, std::string& why) const {
  auto& s = static_cast<ImageFolderScratch&>(scratch);
  int width = 0, height = 0;
  if (!read_file(folder_.files[sample].path, s.bytes, why) || !image_header(s.bytes, s.transform, width, height, why)) {
    return false;
  }
  crop = random_resized_crop(height, width, rng);
  flip = (rng() >> 63) != 0;
  return true;
}

bool ImageFolderSource::make(std::uint32_t sample, std::mt19937_64& rng, SampleScratch& scratch, float* pixels,
                             std::int32_t* labels, std::string& why) const {
  auto& s = static_cast<ImageFolderScratch&>(scratch);
  CropBox crop;
  bool flip = false;
  if (!draw(sample, rng, scratch, crop, flip, why) ||
      !transform_jpeg(s.bytes, crop, flip, image_size_, decoding_, layout_, normalizer_, s.transform, pixels, why)) {
    return false;
  }
  labels[0] = folder_.files[sample].label;
  return true;
}

bool ImageFolderSource::make_packed(std::uint32_t sample, std::mt19937_64& rng, SampleScratch& scratch,
                                    const PackedSlot& slot, std::int32_t* labels, std::string& why) const {
  auto& s = static_cast<ImageFolderScratch&>(scratch);
  CropBox crop;
  bool flip = false;
  DecodedCrop decoded;
  if (!draw(sample, rng, scratch, crop, flip, why) ||
      !decode_crop(s.bytes, crop, image_size_, decoding_, s.transform, decoded, why)) {
    return false;
  }
  pack_decoded_crop(decoded, flip, image_size_, s.transform, slot);
  labels[0] = folder_.files[sample].label;
  return true;
}

}  // namespace dlbench::input
