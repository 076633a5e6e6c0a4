// Which cuDNN calls the CUDA batch norm takes, the activations' memory order that decides it, and
// the backends' switches' names, checked without a GPU.
#include <cstddef>
#include <stdexcept>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "attention_route.hpp"
#include "conv_batch_norm_route.hpp"
#include "cuda/activation_layout.hpp"
#include "cuda/batch_norm_calls.hpp"
#include "cuda/conv_engines.hpp"
#include "cuda/pool_route.hpp"

namespace dlbench::worker {
namespace {

TEST(BatchNormCalls, ChannelsLastFusesTheReluAndTheResidualUnlessTold) {
  // Channels last (tf32 and the half types): the ReLU and the residual fused (tf32: 3,514 images/s
  // against 3,303 with the ReLU alone on an H200).
  EXPECT_EQ(batch_norm_calls(Layout::nhwc, nullptr), BatchNormCalls::ex_add_relu);
  EXPECT_EQ(batch_norm_calls(Layout::nhwc, ""), BatchNormCalls::ex_add_relu);
  EXPECT_EQ(batch_norm_calls(Layout::nhwc, "ex-relu"), BatchNormCalls::ex_relu);
  EXPECT_EQ(batch_norm_calls(Layout::nhwc, "ex"), BatchNormCalls::ex);
  EXPECT_EQ(batch_norm_calls(Layout::nhwc, "plain"), BatchNormCalls::plain);
  EXPECT_EQ(batch_norm_calls(Layout::nhwc, "ex-add-relu"), BatchNormCalls::ex_add_relu);
  EXPECT_TRUE(persistent_batch_norm(Layout::nhwc));
  // NCHW takes dlbench's own kernels (965.3 images/s against cuDNN's plain calls' 885.0 on an
  // H200) and the spatial mode unless told otherwise; cuDNN's calls remain an A/B.
  EXPECT_EQ(batch_norm_calls(Layout::nchw, nullptr), BatchNormCalls::own);
  EXPECT_EQ(batch_norm_calls(Layout::nchw, ""), BatchNormCalls::own);
  EXPECT_EQ(batch_norm_calls(Layout::nchw, "plain"), BatchNormCalls::plain);
  EXPECT_EQ(batch_norm_calls(Layout::nchw, "ex"), BatchNormCalls::ex);
  EXPECT_FALSE(persistent_batch_norm(Layout::nchw));
}

// cuDNN fuses a batch norm's activation only for channels-last activations: in NCHW it answered
// CUDNN_STATUS_NOT_SUPPORTED at the first forward on an H200. Refused before any step, naming what runs.
TEST(BatchNormCalls, AFusedActivationOverNchwIsRefusedUpFront) {
  for (const char* fused : {"ex-relu", "ex-add-relu"}) {
    try {
      batch_norm_calls(Layout::nchw, fused);
      FAIL() << fused << " accepted for NCHW";
    } catch (const std::invalid_argument& e) {
      EXPECT_THAT(e.what(), ::testing::HasSubstr(std::string("DLBENCH_CUDA_BATCH_NORM: \"") + fused +
                                                 "\" fuses an activation"));
      EXPECT_THAT(e.what(), ::testing::HasSubstr("use plain, ex or own, or DLBENCH_CUDA_LAYOUT=nhwc"));
    }
  }
}

// dlbench's own kernels fuse the same in either layout: over NCHW, where cuDNN fuses nothing, and
// over channels last, as the A/B against cuDNN's persistent kernels. Unset, NCHW takes them and
// channels last does not.
TEST(BatchNormCalls, OwnKernelsRunInEitherLayoutWhenAskedFor) {
  EXPECT_EQ(batch_norm_calls(Layout::nchw, "own"), BatchNormCalls::own);
  EXPECT_EQ(batch_norm_calls(Layout::nhwc, "own"), BatchNormCalls::own);
  EXPECT_EQ(batch_norm_calls(Layout::nchw, nullptr), BatchNormCalls::own);
  EXPECT_EQ(batch_norm_calls(Layout::nhwc, nullptr), BatchNormCalls::ex_add_relu);
}

// The mode follows the layout (persistent in channels last, spatial in NCHW) unless told: fp32's
// persistent batch norm in NCHW is an A/B for an H200.
TEST(BatchNormCalls, TheModeFollowsTheLayoutUnlessToldAndAWrongOneIsRefused) {
  EXPECT_EQ(batch_norm_mode(Layout::nhwc, nullptr), BatchNormMode::persistent);
  EXPECT_EQ(batch_norm_mode(Layout::nchw, nullptr), BatchNormMode::spatial);
  EXPECT_EQ(batch_norm_mode(Layout::nchw, ""), BatchNormMode::spatial);
  EXPECT_EQ(batch_norm_mode(Layout::nchw, "persistent"), BatchNormMode::persistent);
  EXPECT_EQ(batch_norm_mode(Layout::nhwc, "spatial"), BatchNormMode::spatial);
  try {
    batch_norm_mode(Layout::nchw, "PERSISTENT");
    FAIL() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("DLBENCH_CUDA_BATCH_NORM_MODE: \"PERSISTENT\" is not one of spatial, persistent"));
  }
}

TEST(BatchNormCalls, AnUnknownChoiceIsRefusedNamingTheAllowedOnes) {
  try {
    batch_norm_calls(Layout::nhwc, "fast");
    FAIL() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("DLBENCH_CUDA_BATCH_NORM: \"fast\" is not one of plain, ex, ex-relu, ex-add-relu, own"));
  }
}

TEST(CudaActivationLayout, TensorCoreMathIsChannelsLastAndFp32IsNchwUnlessTold) {
  for (const DType half : {DType::fp16, DType::bf16}) {
    EXPECT_EQ(cuda_activation_layout(half, CudaMath::fp32, nullptr), Layout::nhwc);
    EXPECT_EQ(cuda_activation_layout(half, CudaMath::fp32, ""), Layout::nhwc);
    EXPECT_EQ(cuda_activation_layout(half, CudaMath::fp32, "nhwc"), Layout::nhwc);
  }
  EXPECT_EQ(cuda_activation_layout(DType::fp32, CudaMath::tf32, nullptr), Layout::nhwc);
  EXPECT_EQ(cuda_activation_layout(DType::fp32, CudaMath::tf32, ""), Layout::nhwc);
  EXPECT_EQ(cuda_activation_layout(DType::fp32, CudaMath::tf32, "nchw"), Layout::nchw);
  EXPECT_EQ(cuda_activation_layout(DType::fp32, CudaMath::fp32, nullptr), Layout::nchw);
  EXPECT_EQ(cuda_activation_layout(DType::fp32, CudaMath::fp32, ""), Layout::nchw);
  EXPECT_EQ(cuda_activation_layout(DType::fp32, CudaMath::fp32, "nchw"), Layout::nchw);
  EXPECT_EQ(cuda_activation_layout(DType::fp32, CudaMath::fp32, "nhwc"), Layout::nhwc);
}

TEST(CudaActivationLayout, AnUnknownOrderAndNchwHalvesAreRefusedSayingWhy) {
  try {
    cuda_activation_layout(DType::fp32, CudaMath::fp32, "NHWC");
    FAIL() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("DLBENCH_CUDA_LAYOUT: \"NHWC\" is not one of nchw, nhwc"));
  }
  try {
    cuda_activation_layout(DType::bf16, CudaMath::fp32, "nchw");
    FAIL() << "accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("nchw is for fp32 and tf32 activations; bf16 activations are nhwc only"));
  }
}

}  // namespace
}  // namespace dlbench::worker

namespace dlbench::worker {
namespace {

// Each switch's names are one table: whatever a name chooses, the result names back
// (Backend::options, environment.backendOptions), for every switch.
template <typename T, std::size_t N>
void expect_names_round_trip(const char* variable, const Choices<T, N>& table) {
  for (const auto& [name, value] : table) {
    const std::string text(name);
    EXPECT_EQ(env_choice(variable, text.c_str(), table), value) << variable << "=" << text;
    EXPECT_EQ(choice_name(table, value), name) << variable;
  }
}

TEST(BackendSwitches, EveryNameAResultGivesChoosesWhatItNames) {
  expect_names_round_trip("DLBENCH_CUDA_BATCH_NORM", kBatchNormCalls);
  expect_names_round_trip("DLBENCH_CUDA_BATCH_NORM_MODE", kBatchNormModes);
  expect_names_round_trip("DLBENCH_CUDA_LAYOUT", kCudaLayouts);
  expect_names_round_trip("DLBENCH_CUDA_CONV", kConvCallsApis);
  expect_names_round_trip("DLBENCH_CUDA_ALGORITHMS", kConvDeterminisms);
  expect_names_round_trip("DLBENCH_CUDA_RESIDUAL_GRAD", kResidualGradients);
  expect_names_round_trip("DLBENCH_CUDA_ATTENTION", kAttentionRoutes);
  EXPECT_EQ(attention_route("DLBENCH_CUDA_ATTENTION", nullptr), AttentionRoute::composed);
  EXPECT_EQ(attention_route("DLBENCH_CUDA_ATTENTION", ""), AttentionRoute::composed);
  expect_names_round_trip("DLBENCH_CUDA_POOL", kPoolRoutes);
}

// DLBENCH_CUDA_POOL, unset: the own kernels over NCHW (fp32 ResNet-50 998.3 images/s against
// 965.3 through cuDNN on an H200), cuDNN over channels last (amp's 7,211.9 against 6,842.1 with
// the own); either when told; anything else refused naming the variable and its values.
TEST(BackendSwitches, MaxPoolingIsOwnInNchwAndCudnnInChannelsLastUnlessTold) {
  EXPECT_EQ(pool_route(Layout::nchw, nullptr), PoolRoute::own);
  EXPECT_EQ(pool_route(Layout::nchw, ""), PoolRoute::own);
  EXPECT_EQ(pool_route(Layout::nhwc, nullptr), PoolRoute::cudnn);
  EXPECT_EQ(pool_route(Layout::nhwc, ""), PoolRoute::cudnn);
  EXPECT_EQ(pool_route(Layout::nchw, "cudnn"), PoolRoute::cudnn);
  EXPECT_EQ(pool_route(Layout::nhwc, "own"), PoolRoute::own);
  EXPECT_THAT([] { pool_route(Layout::nchw, "mine"); }, ::testing::ThrowsMessage<std::invalid_argument>(
                                              ::testing::StrEq("DLBENCH_CUDA_POOL: \"mine\" is not one of cudnn, own")));
}

// DLBENCH_CUDA_CONV_BATCH_NORM, unset: amp (fp16) fuses the bottlenecks' forward and filter-gradient
// passes (7,546.9 images/s against 7,211.9 apart on an H200); bf16, whose fusions no engine runs
// there, and the fp32 and tf32 activations stay apart; a value set wins either way.
TEST(BackendSwitches, Fp16FusesConvolutionsWithBatchNormsForwardUnlessTold) {
  constexpr const char* kSwitch = "DLBENCH_CUDA_CONV_BATCH_NORM";
  const auto unset = [&](DType dtype) { return conv_batch_norm_route(kSwitch, nullptr, cuda_conv_batch_norm_default(dtype)); };
  EXPECT_EQ(unset(DType::fp16), ConvBatchNormRoute::fused_forward);
  EXPECT_EQ(unset(DType::bf16), ConvBatchNormRoute::separate);
  EXPECT_EQ(unset(DType::fp32), ConvBatchNormRoute::separate);
  EXPECT_EQ(conv_batch_norm_route(kSwitch, "", cuda_conv_batch_norm_default(DType::fp16)), ConvBatchNormRoute::fused_forward);
  EXPECT_EQ(conv_batch_norm_route(kSwitch, "separate", cuda_conv_batch_norm_default(DType::fp16)),
            ConvBatchNormRoute::separate);
  EXPECT_EQ(conv_batch_norm_route(kSwitch, "fused", cuda_conv_batch_norm_default(DType::bf16)), ConvBatchNormRoute::fused);
}

}  // namespace
}  // namespace dlbench::worker
