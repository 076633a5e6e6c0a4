// PNG files for the segmentation data sets (Cityscapes keeps its images and labels as PNG):
// libpng's decoder into 8-bit RGB or 8-bit grey, exactly the stored values (no gamma or colour
// conversion, as PIL reads them), and a writer for the data sets dlbench-input generates.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "host_memory.hpp"

namespace dlbench::input {

enum class PngPixels {
  rgb8,   // any 8-bit colour or grey PNG, as PIL's convert("RGB"): palette expanded, grey copied to all
          // three channels, alpha dropped
  grey8,  // 8-bit greyscale only (a label image: its values are ids, never converted)
};

// The most pixels a PNG may have (8192 × 8192): a damaged or hostile header cannot make a
// decoding thread allocate more than 192 MiB (RGB).
inline constexpr std::uint64_t kMaxPngPixels = std::uint64_t{1} << 26;

// One thread's decoder; the pixels stay valid until the next call.
class PngDecoder {
 public:
  explicit PngDecoder(std::uint64_t max_pixels = kMaxPngPixels) : max_pixels_(max_pixels) {}
  // False (and why) for a file that is not a PNG, is damaged, is 16-bit, has more than
  // max_pixels, or (grey8) is not 8-bit greyscale without alpha.
  bool decode(std::span<const std::uint8_t> png, PngPixels want, int& width, int& height, std::string& error);
  // The size its IHDR chunk gives (the decode checks the rest); false and why when it has none, or
  // a size decode would refuse.
  bool header(std::span<const std::uint8_t> png, int& width, int& height, std::string& error) const;
  const std::uint8_t* pixels() const { return pixels_.data(); }

 private:
  std::uint64_t max_pixels_;
  worker::HostBytes pixels_;
  std::vector<std::uint8_t*> rows_;
};

// Whether `bytes` start with PNG's signature.
bool is_png(std::span<const std::uint8_t> bytes);

// Writes width × height pixels of `channels` (1: grey, 3: RGB) bytes each, rows packed; zlib's
// fastest level, since generated data sets only need to be read. Throws std::runtime_error.
void write_png(const std::string& path, int width, int height, int channels, const std::uint8_t* pixels);

}  // namespace dlbench::input
