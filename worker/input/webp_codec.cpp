// WebP decoding as Pillow does it (webp_codec.hpp).
#include "input/webp_codec.hpp"

#include <webp/decode.h>
#include <webp/demux.h>

#include <cstring>
#include <memory>
#include <stdexcept>

#include "host_memory.hpp"
#include "input/image_region.hpp"

namespace dlbench::input {

bool is_webp(std::span<const std::uint8_t> bytes) {
  return bytes_are(bytes, 0, "RIFF") && bytes_are(bytes, 8, "WEBP") &&
         (bytes_are(bytes, 12, "VP8 ") || bytes_are(bytes, 12, "VP8L") || bytes_are(bytes, 12, "VP8X"));
}

bool WebpDecoder::header(std::span<const std::uint8_t> webp, int& width, int& height, std::string& error) const {
  if (WebPGetInfo(webp.data(), webp.size(), &width, &height) == 0) {
    error = "a WebP file libwebp cannot read the size of";
    return false;
  }
  return within_pillows_pixel_limit(width, height, "an image", error);
}

bool WebpDecoder::decode(std::span<const std::uint8_t> webp, int& width, int& height, std::string& error) {
  if (!header(webp, width, height, error)) return false;
  // Pillow's options: the animation decoder's defaults, RGBA, not premultiplied, one thread.
  WebPAnimDecoderOptions options;
  if (WebPAnimDecoderOptionsInit(&options) == 0) throw std::runtime_error("libwebp: a version other than the headers'");
  options.color_mode = MODE_RGBA;
  options.use_threads = 0;
  const WebPData data{webp.data(), webp.size()};
  // libwebp's animation decoder makes two RGBA canvases of its own for every image (8 bytes a
  // pixel), outside host_block: a large pair is checked against the memory left first, as
  // host_block checks what dlbench makes (not under its lock, which would serialise the threads'
  // decoding). The flag tells the allocation test these were checked.
  const std::size_t canvases = std::size_t{8} * static_cast<std::size_t>(width) * static_cast<std::size_t>(height);
  const bool large = canvases / 2 >= worker::huge_page_bytes;
  if (large) worker::ensure_host_memory(canvases);
  struct CheckedAllocations {
    explicit CheckedAllocations(bool on) { worker::making_checked_host_block = on; }
    ~CheckedAllocations() { worker::making_checked_host_block = false; }
    CheckedAllocations(const CheckedAllocations&) = delete;
    CheckedAllocations& operator=(const CheckedAllocations&) = delete;
  } checked(large);
  const std::unique_ptr<WebPAnimDecoder, void (*)(WebPAnimDecoder*)> decoder(WebPAnimDecoderNew(&data, &options),
                                                                              WebPAnimDecoderDelete);
  WebPAnimInfo info;
  if (!decoder || WebPAnimDecoderGetInfo(decoder.get(), &info) == 0) {
    error = "a WebP file libwebp cannot decode";
    return false;
  }
  std::uint8_t* rgba = nullptr;
  int timestamp = 0;
  if (WebPAnimDecoderGetNext(decoder.get(), &rgba, &timestamp) == 0) {
    error = "a WebP file whose first frame libwebp cannot decode";
    return false;
  }
  width = static_cast<int>(info.canvas_width);
  height = static_cast<int>(info.canvas_height);
  const std::size_t count = static_cast<std::size_t>(width) * static_cast<std::size_t>(height);
  pixels_.resize(count * 3);
  for (std::size_t i = 0; i < count; ++i) std::memcpy(&pixels_[3 * i], rgba + 4 * i, 3);  // the alpha dropped
  return true;
}

}  // namespace dlbench::input
