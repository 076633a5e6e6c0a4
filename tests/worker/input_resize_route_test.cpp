// Where an imagefolder case's images are resized (DLBENCH_INPUT_RESIZE, input_resize_route.hpp):
// unset, on a device that can (a GPU, where an H200 kept amp ResNet-50 at synthetic's rate that
// way) and in the decoding threads elsewhere; told, as told, except "device" where nothing can
// resize, refused with the variable and what to do instead. A device route that was only the
// default gives way to the threads where its ring of batches does not fit in the memory left.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <functional>
#include <vector>

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

// A pipeline opener that records each route it was asked to open and refuses the device's ring
// the way the allocation check does, where `device_fits` is false.
struct FakeOpener {
  bool device_fits = true;
  std::vector<bool> tried;
  int operator()(bool on_device) {
    tried.push_back(on_device);
    if (on_device && !device_fits) {
      throw HostOutOfMemory(477u << 20, {231u << 20, "memory.max 4.00 GiB, working set 3.77 GiB in /pod"});
    }
    return on_device ? 2 : 1;
  }
};

TEST(InputResizeRoute, ADefaultDeviceRingThatDoesNotFitGivesWayToTheThreadsSayingWhy) {
  FakeOpener opener{false, {}};
  ResizeRouteTaken taken;
  EXPECT_EQ(open_on_resize_route(InputResize::device, false, std::ref(opener), taken), 1);
  EXPECT_EQ(opener.tried, (std::vector<bool>{true, false}));
  EXPECT_EQ(taken.where, InputResize::host);
  EXPECT_EQ(taken.why_host, "the device's ring of batches did not fit, host memory: asked for 477.0 MiB, 231.0 MiB "
                            "left (memory.max 4.00 GiB, working set 3.77 GiB in /pod); the decoding threads resized "
                            "(DLBENCH_INPUT_RESIZE=device insists)");
}

TEST(InputResizeRoute, ARingThatFitsOrARouteAskedForIsOpenedAsItIs) {
  FakeOpener fits;
  ResizeRouteTaken taken;
  EXPECT_EQ(open_on_resize_route(InputResize::device, false, std::ref(fits), taken), 2);
  EXPECT_EQ(fits.tried, std::vector<bool>{true});
  EXPECT_EQ(taken.where, InputResize::device);
  EXPECT_TRUE(taken.why_host.empty());

  // DLBENCH_INPUT_RESIZE=device: the case fails as out of memory rather than measure another route.
  FakeOpener asked{false, {}};
  EXPECT_THROW(open_on_resize_route(InputResize::device, true, std::ref(asked), taken), HostOutOfMemory);
  EXPECT_EQ(asked.tried, std::vector<bool>{true});

  // The threads' own ring is not retried on any other route.
  FakeOpener host{false, {}};
  EXPECT_EQ(open_on_resize_route(InputResize::host, false, std::ref(host), taken), 1);
  EXPECT_EQ(host.tried, std::vector<bool>{false});
  EXPECT_EQ(taken.where, InputResize::host);
  EXPECT_TRUE(taken.why_host.empty());
}

}  // namespace
}  // namespace dlbench::worker
