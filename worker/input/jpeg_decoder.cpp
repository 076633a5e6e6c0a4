// Decoding a JPEG whole or in part as PIL does, refusing what it must not decode (jpeg_decoder.hpp).
#include "input/jpeg_decoder.hpp"

#include <algorithm>
#include <csetjmp>
#include <cstdio>  // before jpeglib.h, which uses FILE
#include <stdexcept>

#include <jerror.h>
#include <jpeglib.h>
#include <turbojpeg.h>

namespace dlbench::input {

// libjpeg's decompressor with an error manager that jumps back instead of exiting, and remembers
// a truncated file: one that ends before every row is decoded (a warning to libjpeg, which pads it
// with grey; PIL refuses it, "image file is truncated"). Its other warnings (extraneous bytes, say)
// decode on, as PIL's do. A file that ends after the last row, in what libjpeg reads after it (the
// markers up to EOI), PIL accepts: its decoder stops once it holds every row, and so does this.
struct JpegDecoder::Libjpeg {
  struct Errors {
    jpeg_error_mgr manager;  // first: libjpeg hands back a pointer to it
    std::jmp_buf jump;
    bool truncated = false;
    char truncation[JMSG_LENGTH_MAX];  // what libjpeg said of it
    bool too_many_scans = false;
    bool rows_read = false;  // every row decoded: the end of the file no longer truncates the image
  };
  jpeg_decompress_struct cinfo{};
  Errors errors{};
  jpeg_progress_mgr progress{};  // called as libjpeg reads each part of the file: the scan limit

  Libjpeg() {
    jpeg_std_error(&errors.manager);
    // The scan limit, checked as TurboJPEG checks it; the error manager's jump leaves the file.
    progress.progress_monitor = [](j_common_ptr c) {
      if (reinterpret_cast<j_decompress_ptr>(c)->progressive_mode &&
          reinterpret_cast<j_decompress_ptr>(c)->input_scan_number > kMaxJpegScans) {
        auto* mine = reinterpret_cast<Errors*>(c->err);
        mine->too_many_scans = true;
        std::longjmp(mine->jump, 1);
      }
    };
    errors.manager.error_exit = [](j_common_ptr c) { std::longjmp(reinterpret_cast<Errors*>(c->err)->jump, 1); };
    errors.manager.emit_message = [](j_common_ptr c, int level) {
      auto* mine = reinterpret_cast<Errors*>(c->err);
      if (level >= 0 || c->err->msg_code != JWRN_JPEG_EOF || mine->rows_read) return;
      mine->truncated = true;
      (*c->err->format_message)(c, mine->truncation);
    };
    create();
  }
  ~Libjpeg() { jpeg_destroy_decompress(&cinfo); }

  // A decompressor that knows nothing of the last image. libjpeg keeps a stream's quantisation
  // and Huffman tables from image to image (for abbreviated streams, whose images carry no tables),
  // so a damaged file without its own was decoded with the previous file's, and whether it
  // decoded depended on which file its thread had read before. Pillow makes a decompressor per
  // image; so does this, for the few microseconds it costs.
  void fresh() {
    jpeg_destroy_decompress(&cinfo);
    cinfo = jpeg_decompress_struct{};
    create();
  }

 private:
  void create() {
    cinfo.err = &errors.manager;
    jpeg_create_decompress(&cinfo);
    cinfo.progress = &progress;  // after: jpeg_create_decompress zeroes all but `err`
  }

 public:
  Libjpeg(const Libjpeg&) = delete;
  Libjpeg& operator=(const Libjpeg&) = delete;

  std::string message() {
    char text[JMSG_LENGTH_MAX] = {};
    (*cinfo.err->format_message)(reinterpret_cast<j_common_ptr>(&cinfo), text);
    return text;
  }
};

namespace {

// A CMYK (or YCCK) JPEG's pixels as Pillow makes them for torchvision's loader, in place: libjpeg's
// CMYK values, read as Adobe's inverted ones ("CMYK;I", Pillow's assumption for every 4-channel
// JPEG), then Pillow's cmyk2rgb: each channel nk − nk·c/255 (its MULDIV255 rounding), nk = 255 − k.
// Inverted twice, that is k − k·(255 − raw)/255 with nk = raw k. `count` pixels from 4 bytes each
// to 3: pixel i's output ends before pixel i + 1's input starts, and each is read before written.
void cmyk_to_rgb_in_place(std::uint8_t* pixels, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) {
    const std::uint8_t* in = pixels + 4 * i;
    const int nk = in[3];
    const int c[3] = {255 - in[0], 255 - in[1], 255 - in[2]};
    std::uint8_t* out = pixels + 3 * i;
    for (int ch = 0; ch < 3; ++ch) {
      const int product = c[ch] * nk + 128;
      out[ch] = static_cast<std::uint8_t>(nk - (((product >> 8) + product) >> 8));  // in [0, nk]: no clip
    }
  }
}

bool is_cmyk(J_COLOR_SPACE space) { return space == JCS_CMYK || space == JCS_YCCK; }

// The frame header's size and colour space, through libjpeg (as decode_rows, a longjmp lands here).
// TurboJPEG's tjDecompressHeader3 also names the subsampling, and refuses a file whose sampling
// factors are none of its TJSAMP_* (Pillow writes a CMYK JPEG so); libjpeg and Pillow decode those.
bool read_header(jpeg_decompress_struct& cinfo, std::jmp_buf& jump, const std::uint8_t* data, std::size_t size,
                 int& width, int& height, bool& cmyk) {
  if (setjmp(jump) != 0) {
    jpeg_abort_decompress(&cinfo);
    return false;
  }
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  width = static_cast<int>(cinfo.image_width);
  height = static_cast<int>(cinfo.image_height);
  cmyk = is_cmyk(cinfo.jpeg_color_space);
  jpeg_abort_decompress(&cinfo);
  return true;
}

// The segments before the first scan that Pillow's own reader parses, checked as it parses them:
// a JFIF (APP0) or Adobe (APP14) segment too short for the version Pillow reads from its bytes 5
// and 6 fails its opening of the file ("cannot identify image file"), where libjpeg reads on.
bool segments_pillow_reads(std::span<const std::uint8_t> jpeg, std::string& error) {
  for (std::size_t at = 2; at + 4 <= jpeg.size();) {
    const std::uint8_t marker = jpeg[at + 1];
    if (jpeg[at] != 0xFF || marker == 0xFF || marker == 0x00) {  // junk and fill bytes: skipped, as Pillow does
      ++at;
      continue;
    }
    if (marker == 0xDA || marker == 0xD9) break;  // the first scan, or the end
    if (marker == 0x01 || (marker >= 0xD0 && marker <= 0xD8)) {  // markers without a segment
      at += 2;
      continue;
    }
    // The length counts itself; one under 2 reads no data, as Pillow's reader reads none.
    const std::size_t length = std::max<std::size_t>(static_cast<std::size_t>(jpeg[at + 2]) << 8 | jpeg[at + 3], 2);
    const std::span<const std::uint8_t> data = jpeg.subspan(at + 4, std::min(length - 2, jpeg.size() - at - 4));
    const char* segment = marker == 0xE0 && bytes_are(data, 0, "JFIF")    ? "JFIF (APP0)"
                          : marker == 0xEE && bytes_are(data, 0, "Adobe") ? "Adobe (APP14)"
                                                                          : nullptr;
    if (segment != nullptr && data.size() < 7) {
      error = std::string("its ") + segment + " segment holds " + std::to_string(data.size()) +
              " bytes, too few for Pillow to read its version: Pillow cannot identify the file";
      return false;
    }
    at += 2 + length;
  }
  return true;
}

// What a file past the scan limit is refused with: TurboJPEG's words for its own limit.
std::string too_many_scans_error() {
  return "Progressive JPEG image has more than " + std::to_string(kMaxJpegScans) + " scans";
}

// Columns of margin around a part, in output pixels: fancy upsampling reads one chroma sample
// (two pixels) either side, which a window's edge would otherwise replicate.
constexpr int kPartMargin = 16;

// The libjpeg calls of JpegDecoder::decode_part, apart: a longjmp from libjpeg lands in this
// frame, which holds nothing with a destructor. Rows [top, top + height) of the columns around
// [left, left + width) go to `pixels`, sized once the window is known.
bool decode_rows(jpeg_decompress_struct& cinfo, std::jmp_buf& jump, bool& rows_read, const std::uint8_t* data,
                 std::size_t size, int scale_num, int scale_denom, const CropBox& part, worker::HostBytes& pixels,
                 JDIMENSION& window_left, JDIMENSION& window_width) {
  if (setjmp(jump) != 0) {
    jpeg_abort_decompress(&cinfo);
    return false;
  }
  jpeg_mem_src(&cinfo, data, static_cast<unsigned long>(size));
  jpeg_read_header(&cinfo, TRUE);
  // TurboJPEG's choices for TJPF_RGB with TJFLAG_ACCURATEDCT: RGB out, the accurate integer IDCT,
  // fancy upsampling (libjpeg's default).
  // A CMYK file comes out as CMYK (libjpeg converts no CMYK to RGB) and each row becomes RGB here.
  const bool cmyk = is_cmyk(cinfo.jpeg_color_space);
  cinfo.out_color_space = cmyk ? JCS_CMYK : JCS_RGB;
  cinfo.dct_method = JDCT_ISLOW;
  cinfo.scale_num = static_cast<unsigned>(scale_num);
  cinfo.scale_denom = static_cast<unsigned>(scale_denom);
  jpeg_start_decompress(&cinfo);
  const auto first = static_cast<JDIMENSION>(part.left), end = static_cast<JDIMENSION>(part.left + part.width);
  window_left = first > kPartMargin ? first - kPartMargin : 0;
  window_width = std::min<JDIMENSION>(cinfo.output_width, end + kPartMargin) - window_left;
  if (window_width < cinfo.output_width) jpeg_crop_scanline(&cinfo, &window_left, &window_width);  // to whole iMCUs
  // The part's rows, and one more row's room: where the image's last row goes (below). A CMYK row
  // is read where its RGB row goes, into the next one's room, and converted there: one row more.
  const std::size_t row_bytes = static_cast<std::size_t>(window_width) * 3;
  pixels.resize(row_bytes * static_cast<std::size_t>(part.height + 1) + (cmyk ? window_width : 0));
  std::uint8_t* const rows = pixels.data();
  if (part.top > 0) jpeg_skip_scanlines(&cinfo, static_cast<JDIMENSION>(part.top));
  for (int r = 0; r < part.height; ++r) {
    JSAMPROW row = rows + static_cast<std::size_t>(r) * row_bytes;
    jpeg_read_scanlines(&cinfo, &row, 1);
    if (cmyk) cmyk_to_rgb_in_place(row, window_width);
  }
  // Skipping to the very end would stop reading the file there (libjpeg-turbo's shortcut), and a
  // truncated file would pass: skip all but the last row, which still reads the rows' data
  // without their inverse DCT, then decode the last row.
  if (cinfo.output_height - cinfo.output_scanline > 1) {
    jpeg_skip_scanlines(&cinfo, cinfo.output_height - cinfo.output_scanline - 1);
  }
  if (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW last = rows + static_cast<std::size_t>(part.height) * row_bytes;
    jpeg_read_scanlines(&cinfo, &last, 1);
  }
  rows_read = true;
  jpeg_finish_decompress(&cinfo);
  return true;
}

}  // namespace

JpegDecoder::JpegDecoder() : libjpeg_(std::make_unique<Libjpeg>()) {}

JpegDecoder::~JpegDecoder() = default;

bool JpegDecoder::decode_part(std::span<const std::uint8_t> jpeg, int scale_num, int scale_denom, const CropBox& part,
                              DecodedPart& out, std::string& error) {
  if (!header(jpeg, full_width_, full_height_, error)) return false;
  const ScaleFactor scale{scale_num, scale_denom};
  const int width = scaled_size(full_width_, scale), height = scaled_size(full_height_, scale);
  if (part.left < 0 || part.top < 0 || part.width < 1 || part.height < 1 || part.left + part.width > width ||
      part.top + part.height > height) {
    error = "a part outside the image";
    return false;
  }
  libjpeg_->errors.truncated = false;
  libjpeg_->errors.too_many_scans = false;
  libjpeg_->errors.rows_read = false;
  JDIMENSION window_left = 0, window_width = 0;
  bool decoded = false;
  try {
    decoded = decode_rows(libjpeg_->cinfo, libjpeg_->errors.jump, libjpeg_->errors.rows_read, jpeg.data(), jpeg.size(),
                          scale_num, scale_denom, part, pixels_, window_left, window_width);
  } catch (...) {  // the pixels' memory: the decompressor is left ready for the next image
    jpeg_abort_decompress(&libjpeg_->cinfo);
    throw;
  }
  if (!decoded) {
    error = libjpeg_->errors.too_many_scans ? too_many_scans_error() : libjpeg_->message();
    return false;
  }
  if (libjpeg_->errors.truncated) {
    error = libjpeg_->errors.truncation;  // "Premature end of JPEG file", as TurboJPEG says it
    return false;
  }
  out.stride = static_cast<std::size_t>(window_width) * 3;
  out.first = pixels_.data() + static_cast<std::size_t>(part.left - static_cast<int>(window_left)) * 3;
  out.left = part.left;
  out.top = part.top;
  out.width = part.width;
  out.height = part.height;
  return true;
}

bool JpegDecoder::header(std::span<const std::uint8_t> jpeg, int& width, int& height, std::string& error) {
  if (jpeg.empty()) {
    error = "empty file";
    return false;
  }
  // Pillow knows a JPEG by its first three bytes, SOI and the 0xFF of the next marker; libjpeg
  // skips junk before that marker with a warning, and would decode what Pillow cannot open.
  if (jpeg.size() < 3 || jpeg[0] != 0xFF || jpeg[1] != 0xD8 || jpeg[2] != 0xFF) {
    error = "Not a JPEG file: it does not start with 0xff 0xd8 0xff, as Pillow requires";
    return false;
  }
  if (!segments_pillow_reads(jpeg, error)) return false;
  libjpeg_->fresh();
  if (!read_header(libjpeg_->cinfo, libjpeg_->errors.jump, jpeg.data(), jpeg.size(), width, height, cmyk_)) {
    error = libjpeg_->message();
    return false;
  }
  if (width < 1 || height < 1) {
    error = "no pixels";
    return false;
  }
  return within_pillows_pixel_limit(width, height, "a JPEG", error);
}

bool JpegDecoder::decode(std::span<const std::uint8_t> jpeg, int scale_num, int scale_denom, int& width, int& height,
                         std::string& error) {
  // The whole image as one part, through the same libjpeg calls: TurboJPEG 2.1's tjDecompress2
  // reports an error that follows a warning as a warning (tjGetErrorCode), so a file PIL refuses
  // as broken decoded there, its rows from the error on left as they were.
  if (!header(jpeg, full_width_, full_height_, error)) return false;
  const ScaleFactor scale{scale_num, scale_denom};
  width = scaled_size(full_width_, scale);
  height = scaled_size(full_height_, scale);
  DecodedPart whole;
  return decode_part(jpeg, scale_num, scale_denom, CropBox{0, 0, height, width}, whole, error);
}

int scaled_size(int size, ScaleFactor scale) { return TJSCALED(size, (tjscalingfactor{scale.num, scale.denom})); }

ScaleFactor dct_scale_for(const CropBox& crop, int out_size) {
  int count = 0;
  const tjscalingfactor* factors = tjGetScalingFactors(&count);
  ScaleFactor best;
  double best_value = 1.0;
  for (int i = 0; factors != nullptr && i < count; ++i) {
    // Only 1/2, 1/4 and 1/8: libjpeg-turbo has SIMD inverse DCTs for those sizes; its 7/8, 3/4,
    // 5/8 and 3/8 ones are scalar and slower than a full-size decode (measured: bench/RESULTS.md).
    if (factors[i].num != 1) continue;
    const double value = static_cast<double>(factors[i].num) / factors[i].denom;
    if (value >= best_value) continue;
    // The crop, scaled, still covers the output in both directions (so the resampler only shrinks).
    if (crop.width * value >= out_size && crop.height * value >= out_size) {
      best = {factors[i].num, factors[i].denom};
      best_value = value;
    }
  }
  return best;
}

}  // namespace dlbench::input
