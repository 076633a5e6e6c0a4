// Tests' JPEG files: RGB8 pixels encoded by TurboJPEG at quality 90 and written to `path`.
#pragma once

#include <gtest/gtest.h>
#include <turbojpeg.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
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

}  // namespace dlbench::input::testing
