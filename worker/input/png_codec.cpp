#include "input/png_codec.hpp"

#include <png.h>

#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>

namespace dlbench::input {
namespace {

constexpr std::uint32_t kMaxSide = 1u << 15;  // larger is not a photo worth decoding

struct ErrorText {
  char text[200] = {};
};

// libpng reports errors through a longjmp; the message is kept for the caller.
[[noreturn]] void on_error(png_structp png, png_const_charp message) {
  auto* error = static_cast<ErrorText*>(png_get_error_ptr(png));
  std::snprintf(error->text, sizeof error->text, "%s", message);
  png_longjmp(png, 1);
}
void on_warning(png_structp, png_const_charp) {}

struct Reader {
  std::span<const std::uint8_t> bytes;
  std::size_t at = 0;
};

void read_bytes(png_structp png, png_bytep out, png_size_t count) {
  auto* reader = static_cast<Reader*>(png_get_io_ptr(png));
  if (count > reader->bytes.size() - reader->at) png_error(png, "truncated file");
  std::memcpy(out, reader->bytes.data() + reader->at, count);
  reader->at += count;
}

// The part between setjmp and the last libpng call holds only trivially destructible locals, so
// the longjmp of an error skips no destructor.
bool decode_rows(png_structp png, png_infop info, PngPixels want, std::uint64_t max_pixels,
                 std::vector<std::uint8_t>& pixels, std::vector<std::uint8_t*>& rows, int& width, int& height,
                 ErrorText& error) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_user_limits(png, kMaxSide, kMaxSide);
  png_read_info(png, info);
  const png_uint_32 w = png_get_image_width(png, info), h = png_get_image_height(png, info);
  const int depth = png_get_bit_depth(png, info), colour = png_get_color_type(png, info);
  if (std::uint64_t{w} * h > max_pixels) {
    std::snprintf(error.text, sizeof error.text, "is %u x %u pixels, more than the %llu a sample may have", w, h,
                  static_cast<unsigned long long>(max_pixels));
    return false;
  }
  if (depth == 16) {
    std::snprintf(error.text, sizeof error.text, "16-bit PNG (8-bit expected)");
    return false;
  }
  if (want == PngPixels::grey8) {
    if (colour != PNG_COLOR_TYPE_GRAY || depth != 8) {
      std::snprintf(error.text, sizeof error.text, "not an 8-bit greyscale PNG (colour type %d, %d bits): a label image holds one id per pixel",
                    colour, depth);
      return false;
    }
  } else {
    // Expand palettes and sub-byte greys to 8 bits, grey to RGB; drop alpha and tRNS transparency.
    if (colour == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (colour == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (colour == PNG_COLOR_TYPE_GRAY || colour == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
    if ((colour & PNG_COLOR_MASK_ALPHA) != 0) png_set_strip_alpha(png);
    if (png_get_valid(png, info, PNG_INFO_tRNS) != 0) {
      png_set_tRNS_to_alpha(png);
      png_set_strip_alpha(png);
    }
  }
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  const std::size_t channels = want == PngPixels::grey8 ? 1 : 3;
  if (png_get_rowbytes(png, info) != w * channels) {
    std::snprintf(error.text, sizeof error.text, "unexpected row size after conversion");
    return false;
  }
  pixels.resize(static_cast<std::size_t>(w) * h * channels);
  rows.resize(h);
  for (png_uint_32 y = 0; y < h; ++y) rows[y] = pixels.data() + static_cast<std::size_t>(y) * w * channels;
  png_read_image(png, rows.data());
  png_read_end(png, nullptr);
  width = static_cast<int>(w);
  height = static_cast<int>(h);
  return true;
}

}  // namespace

bool is_png(std::span<const std::uint8_t> bytes) {
  return bytes.size() >= 8 && png_sig_cmp(bytes.data(), 0, 8) == 0;
}

bool PngDecoder::header(std::span<const std::uint8_t> png_bytes, int& width, int& height, std::string& error) const {
  // The signature, then the first chunk: its length (13), "IHDR", width and height, big-endian.
  const auto be32 = [&](std::size_t at) {
    return std::uint32_t{png_bytes[at]} << 24 | std::uint32_t{png_bytes[at + 1]} << 16 |
           std::uint32_t{png_bytes[at + 2]} << 8 | std::uint32_t{png_bytes[at + 3]};
  };
  if (!is_png(png_bytes)) {
    error = png_bytes.empty() ? "empty file" : "not a PNG file";
    return false;
  }
  if (png_bytes.size() < 24 || std::memcmp(png_bytes.data() + 12, "IHDR", 4) != 0) {
    error = "a PNG without its IHDR chunk";
    return false;
  }
  const std::uint32_t w = be32(16), h = be32(20);
  if (w < 1 || h < 1) {
    error = "no pixels";
    return false;
  }
  if (w > kMaxSide || h > kMaxSide) {  // decode's libpng refuses it too (png_set_user_limits)
    error = "is " + std::to_string(w) + " x " + std::to_string(h) + " pixels, a side longer than the " +
            std::to_string(kMaxSide) + " a sample may have";
    return false;
  }
  if (std::uint64_t{w} * h > max_pixels_) {
    error = "is " + std::to_string(w) + " x " + std::to_string(h) + " pixels, more than the " +
            std::to_string(max_pixels_) + " a sample may have";
    return false;
  }
  width = static_cast<int>(w);
  height = static_cast<int>(h);
  return true;
}

bool PngDecoder::decode(std::span<const std::uint8_t> png_bytes, PngPixels want, int& width, int& height,
                        std::string& error) {
  if (!is_png(png_bytes)) {
    error = png_bytes.empty() ? "empty file" : "not a PNG file";
    return false;
  }
  ErrorText text;
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &text, on_error, on_warning);
  if (png == nullptr) throw std::bad_alloc();
  png_infop info = png_create_info_struct(png);
  if (info == nullptr) {
    png_destroy_read_struct(&png, nullptr, nullptr);
    throw std::bad_alloc();
  }
  Reader reader{png_bytes, 0};
  png_set_read_fn(png, &reader, read_bytes);
  const bool ok = decode_rows(png, info, want, max_pixels_, pixels_, rows_, width, height, text);
  png_destroy_read_struct(&png, &info, nullptr);
  if (!ok) error = text.text[0] != '\0' ? text.text : "cannot be decoded as a PNG";
  return ok;
}

namespace {

bool write_rows(png_structp png, png_infop info, std::FILE* file, int width, int height, int channels,
                const std::uint8_t* pixels) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_init_io(png, file);
  png_set_compression_level(png, 1);
  png_set_IHDR(png, info, static_cast<png_uint_32>(width), static_cast<png_uint_32>(height), 8,
               channels == 1 ? PNG_COLOR_TYPE_GRAY : PNG_COLOR_TYPE_RGB, PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  for (int y = 0; y < height; ++y) {
    png_write_row(png, pixels + static_cast<std::size_t>(y) * static_cast<std::size_t>(width) * static_cast<std::size_t>(channels));
  }
  png_write_end(png, nullptr);
  return true;
}

}  // namespace

void write_png(const std::string& path, int width, int height, int channels, const std::uint8_t* pixels) {
  if (channels != 1 && channels != 3) throw std::invalid_argument("write_png: 1 or 3 channels");
  std::unique_ptr<std::FILE, int (*)(std::FILE*)> file(std::fopen(path.c_str(), "wb"), std::fclose);
  if (!file) throw std::runtime_error("cannot write " + path);
  ErrorText text;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &text, on_error, on_warning);
  if (png == nullptr) throw std::bad_alloc();
  png_infop info = png_create_info_struct(png);
  const bool ok = info != nullptr && write_rows(png, info, file.get(), width, height, channels, pixels);
  png_destroy_write_struct(&png, info != nullptr ? &info : nullptr);
  if (!ok) throw std::runtime_error("cannot write " + path + ": " + (text.text[0] != '\0' ? text.text : "libpng failed"));
}

}  // namespace dlbench::input
