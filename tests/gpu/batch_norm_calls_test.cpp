// Which cuDNN calls the CUDA batch norm takes, checked without a GPU.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cuda/batch_norm_calls.hpp"

namespace dlbench::worker {
namespace {

TEST(BatchNormCalls, ChannelsLastHalfTakesTheExCallsUnlessToldPlain) {
  for (const DType half : {DType::fp16, DType::bf16}) {
    EXPECT_EQ(batch_norm_calls(Layout::nhwc, half, nullptr), BatchNormCalls::ex);
    EXPECT_EQ(batch_norm_calls(Layout::nhwc, half, ""), BatchNormCalls::ex);
    EXPECT_EQ(batch_norm_calls(Layout::nhwc, half, "ex"), BatchNormCalls::ex);
    EXPECT_EQ(batch_norm_calls(Layout::nhwc, half, "plain"), BatchNormCalls::plain);
  }
  // fp32 keeps NCHW and the plain calls, whatever is asked.
  EXPECT_EQ(batch_norm_calls(Layout::nchw, DType::fp32, nullptr), BatchNormCalls::plain);
  EXPECT_EQ(batch_norm_calls(Layout::nchw, DType::fp32, "ex"), BatchNormCalls::plain);
}

TEST(BatchNormCalls, AnUnknownChoiceIsRefusedNamingTheAllowedOnes) {
  try {
    batch_norm_calls(Layout::nhwc, DType::fp16, "fast");
    FAIL() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("DLBENCH_CUDA_BATCH_NORM: \"fast\" is not one of plain, ex"));
  }
}

}  // namespace
}  // namespace dlbench::worker
