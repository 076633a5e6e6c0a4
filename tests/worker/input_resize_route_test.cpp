// Where an imagefolder case's images are resized (DLBENCH_INPUT_RESIZE, input_resize_route.hpp):
// unset, on a device that can (a GPU, where an H200 kept amp ResNet-50 at synthetic's rate that
// way) and in the decoding threads elsewhere; told, as told, except "device" where nothing can
// resize, refused with the variable and what to do instead.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>

#include "input_resize_route.hpp"

namespace dlbench::worker {
namespace {

TEST(InputResizeRoute, UnsetResizesOnADeviceThatCanAndInTheThreadsElsewhere) {
  EXPECT_EQ(input_resize(nullptr, true, "cuda"), InputResize::device);
  EXPECT_EQ(input_resize("", true, "cuda"), InputResize::device);
  EXPECT_EQ(input_resize(nullptr, false, "cpu"), InputResize::host);
  EXPECT_EQ(input_resize("", false, "cpu"), InputResize::host);
}

TEST(InputResizeRoute, AChoiceIsTakenWhereItCanRun) {
  EXPECT_EQ(input_resize("host", true, "cuda"), InputResize::host);
  EXPECT_EQ(input_resize("device", true, "cuda"), InputResize::device);
  EXPECT_EQ(input_resize("host", false, "cpu"), InputResize::host);
}

TEST(InputResizeRoute, DeviceWhereNothingCanResizeAndUnknownValuesAreRefusedNamingTheVariable) {
  try {
    input_resize("device", false, "cpu");
    FAIL() << "device on a backend that cannot resize";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "DLBENCH_INPUT_RESIZE: \"device\" resizes the images on a GPU; on the cpu backend "
                                     "the decoding threads resize them (unset it, or host)");
  }
  try {
    input_resize("gpu", true, "cuda");
    FAIL() << "an unknown value";
  } catch (const std::invalid_argument& e) {
    EXPECT_EQ(std::string(e.what()), "DLBENCH_INPUT_RESIZE: \"gpu\" is not one of host, device");
  }
}

}  // namespace
}  // namespace dlbench::worker
