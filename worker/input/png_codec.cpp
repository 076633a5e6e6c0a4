#include "input/png_codec.hpp"

#include <png.h>

#include <cctype>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string_view>

#include "input/image_region.hpp"

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
  std::uint64_t rows_made = 0;   // rows (of every interlace pass) libpng has decoded and transformed
  std::uint64_t rows_total = 0;  // how many the image has
  bool ran_out = false;          // asked for bytes past the end of the file
  bool bytewise_at_the_end = false;  // the image data's last PNG_IDAT_READ_SIZE bytes read one at a time
};

// Counts each row as libpng hands it over, after which only copying it into the caller's row
// remains (no input is read between the two).
void count_row(png_structp png, png_row_infop, png_bytep) { ++static_cast<Reader*>(png_get_io_ptr(png))->rows_made; }

// The rows libpng decodes for a width × height image: each row of each Adam7 pass that has pixels.
std::uint64_t rows_to_decode(png_uint_32 width, png_uint_32 height, bool interlaced) {
  if (!interlaced) return height;
  // Adam7's passes: the first row and column each starts at, and its steps down and across.
  constexpr std::uint64_t kFirstRow[7] = {0, 0, 4, 0, 2, 0, 1}, kRowStep[7] = {8, 8, 8, 4, 4, 2, 2};
  constexpr std::uint64_t kFirstColumn[7] = {0, 4, 0, 2, 0, 1, 0}, kColumnStep[7] = {8, 8, 4, 4, 2, 2, 1};
  const auto count = [](std::uint64_t size, std::uint64_t first, std::uint64_t step) {
    return size > first ? (size - first + step - 1) / step : 0;
  };
  std::uint64_t rows = 0;
  for (int pass = 0; pass < 7; ++pass) {
    if (count(width, kFirstColumn[pass], kColumnStep[pass]) > 0) rows += count(height, kFirstRow[pass], kRowStep[pass]);
  }
  return rows;
}

void read_bytes(png_structp png, png_bytep out, png_size_t count) {
  auto* reader = static_cast<Reader*>(png_get_io_ptr(png));
  if (count > reader->bytes.size() - reader->at) {
    reader->ran_out = true;
    png_error(png, "truncated file");
  }
  std::memcpy(out, reader->bytes.data() + reader->at, count);
  reader->at += count;
  // For a read struct this sets how much image data libpng reads at a time, from its next read on.
  if (reader->bytewise_at_the_end && reader->bytes.size() - reader->at < PNG_IDAT_READ_SIZE) {
    png_set_compression_buffer_size(png, 1);
  }
}

// The part between setjmp and the last libpng call holds only trivially destructible locals, so
// the longjmp of an error skips no destructor. An error once every row is made is past the image:
// libpng reads on to the end of the compressed stream (its checksum, the chunk headers around it),
// which Pillow's decoder never reads once it holds every row; the image stands, as there.
bool decode_rows(png_structp png, png_infop info, PngPixels want, std::uint64_t max_pixels,
                 worker::HostBytes& pixels, std::vector<std::uint8_t*>& rows, int& width, int& height,
                 ErrorText& error) {
  const Reader& reader = *static_cast<Reader*>(png_get_io_ptr(png));
  if (setjmp(png_jmpbuf(png))) {
    if (reader.rows_total == 0 || reader.rows_made < reader.rows_total) return false;
    error.text[0] = '\0';
    return true;
  }
  png_set_user_limits(png, kMaxSide, kMaxSide);
  // Checksums as Pillow checks them: every chunk before the image data (an ancillary one too,
  // which libpng would drop with a warning), none of the image data's own.
  png_set_crc_action(png, PNG_CRC_DEFAULT, PNG_CRC_ERROR_QUIT);
  png_read_info(png, info);
  png_set_crc_action(png, PNG_CRC_QUIET_USE, PNG_CRC_QUIET_USE);
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
  png_set_read_user_transform_fn(png, count_row);
  png_read_update_info(png, info);
  const std::size_t channels = want == PngPixels::grey8 ? 1 : 3;
  if (png_get_rowbytes(png, info) != w * channels) {
    std::snprintf(error.text, sizeof error.text, "unexpected row size after conversion");
    return false;
  }
  pixels.resize(static_cast<std::size_t>(w) * h * channels);
  rows.resize(h);
  for (png_uint_32 y = 0; y < h; ++y) rows[y] = pixels.data() + static_cast<std::size_t>(y) * w * channels;
  width = static_cast<int>(w);
  height = static_cast<int>(h);
  static_cast<Reader*>(png_get_io_ptr(png))->rows_total =
      rows_to_decode(w, h, png_get_interlace_type(png, info) == PNG_INTERLACE_ADAM7);
  // Nothing after the rows is read (no png_read_end), for the same reason: damage past them (a cut
  // or garbled IEND, say) does not refuse the image.
  png_read_image(png, rows.data());
  return true;
}

// The big-endian 32-bit number at `at`: a chunk's length, a header's width and height.
std::uint32_t big_endian_32(std::span<const std::uint8_t> bytes, std::size_t at) {
  return std::uint32_t{bytes[at]} << 24 | std::uint32_t{bytes[at + 1]} << 16 | std::uint32_t{bytes[at + 2]} << 8 |
         std::uint32_t{bytes[at + 3]};
}

// What Pillow reads after the rows (PngImageFile.load_end): from the end of the image data's chunks,
// chunk after chunk, each one's data whole, until IEND, the file's end, or a header that is not one
// (whose type is not four letters, digits or underscores). A chunk there whose length runs past the
// end of the file fails Pillow's read ("Truncated File Read"), and with it the image.
bool chunks_after_the_rows_pillow_reads(std::span<const std::uint8_t> png, std::string& error) {
  const auto be32 = [&](std::size_t at) { return std::uint64_t{big_endian_32(png, at)}; };
  const auto type_is = [&](std::size_t at, std::string_view type) { return bytes_are(png, at + 4, type); };
  // The chunks by their lengths, to the end of the first run of IDAT chunks.
  std::size_t at = 8;
  bool in_image_data = false;
  while (at + 8 <= png.size()) {
    const bool image_data = type_is(at, "IDAT");
    if (in_image_data && !image_data) break;
    in_image_data = image_data;
    at += 12 + be32(at);
  }
  for (; at + 8 <= png.size(); at += 12 + be32(at)) {
    for (std::size_t i = 4; i < 8; ++i) {
      const unsigned char c = png[at + i];
      if (std::isalnum(c) == 0 && c != '_') return true;
    }
    if (type_is(at, "IEND")) return true;
    if (at + 8 + be32(at) > png.size()) {
      error = "a chunk after the image data runs past the end of the file, which Pillow reads and refuses (Truncated File "
              "Read)";
      return false;
    }
  }
  return true;
}

}  // namespace

bool is_png(std::span<const std::uint8_t> bytes) {
  return bytes.size() >= 8 && png_sig_cmp(bytes.data(), 0, 8) == 0;
}

bool PngDecoder::header(std::span<const std::uint8_t> png_bytes, int& width, int& height, std::string& error) const {
  // The signature, then the first chunk: its length (13), "IHDR", width and height, big-endian.
  if (!is_png(png_bytes)) {
    error = png_bytes.empty() ? "empty file" : "not a PNG file";
    return false;
  }
  if (png_bytes.size() < 24 || !bytes_are(png_bytes, 12, "IHDR")) {
    error = "a PNG without its IHDR chunk";
    return false;
  }
  const std::uint32_t w = big_endian_32(png_bytes, 16), h = big_endian_32(png_bytes, 20);
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
  // libpng reads image data 8 KiB at a time (PNG_IDAT_READ_SIZE) before inflating any, so a file
  // cut in its last 8 KiB fails before the rows there are made; Pillow inflates what there is and
  // keeps the image if every row is in it (a cut zlib checksum, an IDAT claiming more bytes than
  // the file has). A file that ran out is read again with its last 8 KiB a byte at a time, which
  // makes every row that is there, at about the cost of the first read.
  const auto attempt = [&](bool bytewise_at_the_end, bool& ran_out) {
    ErrorText text;
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &text, on_error, on_warning);
    if (png == nullptr) throw std::bad_alloc();
    png_infop info = png_create_info_struct(png);
    if (info == nullptr) {
      png_destroy_read_struct(&png, nullptr, nullptr);
      throw std::bad_alloc();
    }
    Reader reader{png_bytes, 0};
    reader.bytewise_at_the_end = bytewise_at_the_end;
    png_set_read_fn(png, &reader, read_bytes);
    bool ok = false;
    try {
      ok = decode_rows(png, info, want, max_pixels_, pixels_, rows_, width, height, text);
    } catch (...) {  // the pixels' memory refused (HostOutOfMemory): libpng's structs go with it
      png_destroy_read_struct(&png, &info, nullptr);
      throw;
    }
    png_destroy_read_struct(&png, &info, nullptr);
    ran_out = reader.ran_out;
    if (!ok) error = text.text[0] != '\0' ? text.text : "cannot be decoded as a PNG";
    return ok;
  };
  bool ran_out = false;
  if (!attempt(false, ran_out) && !(ran_out && attempt(true, ran_out))) return false;
  error.clear();
  return chunks_after_the_rows_pillow_reads(png_bytes, error);
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
