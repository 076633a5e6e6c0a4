// Tests' JPEGs: RGB8 pixels encoded by TurboJPEG at quality 90, written to `path` or made in memory.
#pragma once

#include <gtest/gtest.h>
#include <turbojpeg.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

namespace dlbench::input::testing {

// `subsampling` a TJSAMP_* value; fails the test where TurboJPEG refuses.
inline void write_jpeg(const std::filesystem::path& path, const std::vector<std::uint8_t>& rgb, int width, int height,
                       int subsampling = TJSAMP_420) {
  tjhandle tj = tjInitCompress();
  unsigned char* jpeg = nullptr;
  unsigned long size = 0;
  ASSERT_EQ(tjCompress2(tj, rgb.data(), width, 0, height, TJPF_RGB, &jpeg, &size, subsampling, 90, 0), 0)
      << tjGetErrorStr2(tj);
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(jpeg), static_cast<std::streamsize>(size));
  tjFree(jpeg);
  tjDestroy(tj);
}

// A JPEG of w × h smooth gradients with noise, in `subsampling` (TJSAMP_*), baseline or progressive.
inline std::vector<std::uint8_t> gradient_jpeg(int w, int h, int subsampling, bool progressive, std::mt19937& rng) {
  std::vector<std::uint8_t> pixels(static_cast<std::size_t>(w) * static_cast<std::size_t>(h) * 3);
  for (int y = 0; y < h; ++y) {
    for (int x = 0; x < w; ++x) {
      std::uint8_t* p = &pixels[(static_cast<std::size_t>(y) * static_cast<std::size_t>(w) + static_cast<std::size_t>(x)) * 3];
      p[0] = static_cast<std::uint8_t>(x * 255 / w);
      p[1] = static_cast<std::uint8_t>(y * 255 / h);
      p[2] = static_cast<std::uint8_t>(rng() % 256);
    }
  }
  tjhandle tj = tjInitCompress();
  unsigned char* jpeg = nullptr;
  unsigned long size = 0;
  EXPECT_EQ(tjCompress2(tj, pixels.data(), w, 0, h, TJPF_RGB, &jpeg, &size, subsampling, 90,
                        progressive ? TJFLAG_PROGRESSIVE : 0),
            0)
      << tjGetErrorStr2(tj);
  std::vector<std::uint8_t> bytes(jpeg, jpeg + size);
  tjFree(jpeg);
  tjDestroy(tj);
  return bytes;
}

}  // namespace dlbench::input::testing
