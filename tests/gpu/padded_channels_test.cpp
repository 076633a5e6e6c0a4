// The rule and index math of padding a channels-last convolution's input channels
// (cuda/padded_channels.hpp): no device needed.
#include "cuda/padded_channels.hpp"

#include "activation_index.hpp"

#include <gtest/gtest.h>

#include <set>
#include <stdexcept>
#include <vector>

namespace dlbench::worker {
namespace {

TEST(PaddedChannels, TheSwitchNamesItsValues) {
  EXPECT_EQ(padded_input_channels(nullptr), 0);
  EXPECT_EQ(padded_input_channels(""), 0);
  EXPECT_EQ(padded_input_channels("off"), 0);
  EXPECT_EQ(padded_input_channels("4"), 4);
  EXPECT_EQ(padded_input_channels("8"), 8);
  try {
    padded_input_channels("16");
    ADD_FAILURE() << "16 accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "DLBENCH_CUDA_PAD_INPUT_CHANNELS: \"16\" is not one of off, 4, 8");
  }
}

// Only a channels-last input with fewer channels than asked for is padded.
TEST(PaddedChannels, OnlyFewerChannelsChannelsLastArePadded) {
  EXPECT_EQ(conv_pass_input_channels(3, true, 4), 4);
  EXPECT_EQ(conv_pass_input_channels(3, true, 8), 8);
  EXPECT_EQ(conv_pass_input_channels(3, true, 0), 3);
  EXPECT_EQ(conv_pass_input_channels(3, false, 4), 3);
  EXPECT_EQ(conv_pass_input_channels(4, true, 4), 4);
  EXPECT_EQ(conv_pass_input_channels(64, true, 8), 64);
}

// The padded OHWI copy holds every OIHW tap once, where the unpadded OHWI order puts it but for
// the wider pixel (filter_offset with the padded channels, as the gradient's way back reads it),
// and the padding's taps map to nothing: both directions agree.
TEST(PaddedChannels, ThePaddedFilterHoldsEveryTapOnceAndZerosBeside) {
  for (const std::int64_t padded : {4, 8}) {
    constexpr std::int64_t kOut = 5, kIn = 3, kH = 7, kW = 2;
    std::set<std::int64_t> seen;
    for (std::int64_t i = 0; i < kOut * kIn * kH * kW; ++i) {
      const std::int64_t x = i % kW, y = i / kW % kH, c = i / (kW * kH) % kIn, o = i / (kW * kH * kIn);
      const std::int64_t j = filter_offset(true, padded, kH, kW, o, c, y, x);
      // The tap (o, c, y, x) sits at pixel (o, y, x) of width `padded`, channel c.
      EXPECT_EQ(j, ((o * kH + y) * kW + x) * padded + c);
      ASSERT_GE(j, 0);
      ASSERT_LT(j, kOut * padded * kH * kW);
      EXPECT_TRUE(seen.insert(j).second) << "two taps at " << j;
      EXPECT_EQ(oihw_of_padded_ohwi(j, kIn, padded, kH, kW), i);
    }
    std::int64_t padding = 0;
    for (std::int64_t j = 0; j < kOut * padded * kH * kW; ++j) {
      if (oihw_of_padded_ohwi(j, kIn, padded, kH, kW) < 0) {
        ++padding;
        EXPECT_GE(j % padded, kIn) << j;
      }
    }
    EXPECT_EQ(padding, kOut * (padded - kIn) * kH * kW);
  }
}

}  // namespace
}  // namespace dlbench::worker
