// The fused convolution graphs and the described GPU, checked without a GPU: cuDNN (9.8 and later)
// builds heuristics and execution plans for a device described by JSON, so which engines an H200
// has for a graph is asked here, on any machine; only running them needs the device.
#include <dlfcn.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cuda/conv_fusion.hpp"
#include "cuda/conv_fusion_reference.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/cudnn_device.hpp"

namespace dlbench::worker {
namespace {

using cuda_detail::ConvFusion;
using cuda_detail::FusedConvGraph;

std::vector<std::int64_t> uids_of(const FusedConvGraph& graph) {
  std::vector<std::int64_t> uids;
  for (const auto& tensor : graph.tensors) uids.push_back(tensor.uid);
  std::sort(uids.begin(), uids.end());
  return uids;
}

std::size_t bytes_of(const FusedConvGraph& graph, std::int64_t uid) {
  for (const auto& tensor : graph.tensors) {
    if (tensor.uid == uid) return tensor.bytes;
  }
  return 0;
}

TEST(CudnnDevice, ADescribedH200IsADeviceCuDnnAcceptsAndAnUnknownNameIsRefusedNamingTheKnown) {
  const auto& h200 = cuda_detail::described_gpu("h200");
  EXPECT_EQ(h200.compute_capability, 900);
  EXPECT_EQ(h200.multiprocessors, 132);
  EXPECT_NO_THROW(cuda_detail::device_properties_from_json(cuda_detail::cudnn_device_json(h200)));
  try {
    cuda_detail::described_gpu("a100");
    FAIL() << "an undescribed GPU must be refused";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("'a100'"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("h200"));
  }
}

TEST(CudnnDevice, ADescriptionMissingAMemberIsRefusedNamingItAndAWrongTypeWithCuDnnsReason) {
  nlohmann::json json = nlohmann::json::parse(cuda_detail::cudnn_device_json(cuda_detail::described_gpu("h200")));
  nlohmann::json without = json;
  without.erase("multiProcessorCount");
  try {
    cuda_detail::device_properties_from_json(without.dump());
    FAIL() << "a description without its SM count must be refused";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("\"multiProcessorCount\""));
  }
  EXPECT_THROW(cuda_detail::device_properties_from_json("[1, 2]"), std::invalid_argument);
  json["isTccDriver"] = false;  // cuDNN reads an integer
  try {
    cuda_detail::device_properties_from_json(json.dump());
    FAIL() << "cuDNN must refuse a boolean where it reads an integer";
  } catch (const CudaError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("cudnn_device.cpp:"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("CUDNN_STATUS_BAD_PARAM"));
  }
}

TEST(ConvFusion, EveryPassMakesAGraphCuDnnAcceptsWithTheTensorsItNamesInMemory) {
  const std::vector<Conv2dConfig> convolutions{
      {Shape(8, 64, 56, 56), 64, 3, 1, 1, false},     // a bottleneck's 3x3
      {Shape(8, 256, 56, 56), 512, 1, 2, 0, false},   // a downsampling shortcut
      {Shape(8, 64, 28, 28), 256, 1, 1, 0, false},    // a bottleneck's last 1x1
  };
  for (Conv2dConfig config : convolutions) {
    for (const DType dtype : {DType::fp16, DType::bf16}) {
      config.dtype = dtype;
      for (const ConvFusion fusion : cuda_detail::kConvFusions) {
        const std::string what = config.input.to_string() + " " + std::string(to_string(dtype)) + " " +
                                 std::string(cuda_detail::to_string(fusion));
        try {
          const FusedConvGraph graph(config, fusion, nullptr);
          const std::size_t outputs = static_cast<std::size_t>(config.output().numel());
          const std::size_t channels = static_cast<std::size_t>(config.out_channels);
          EXPECT_EQ(bytes_of(graph, cuda_detail::kOutputUid), outputs * 2) << what;
          EXPECT_EQ(bytes_of(graph, cuda_detail::kInputUid), static_cast<std::size_t>(config.input.numel()) * 2)
              << what;
          switch (fusion) {
            case ConvFusion::conv:
            case ConvFusion::wgrad:
            case ConvFusion::dgrad: EXPECT_THAT(uids_of(graph), ::testing::ElementsAre(1, 2, 3)) << what; break;
            case ConvFusion::conv_genstats:
              EXPECT_THAT(uids_of(graph), ::testing::ElementsAre(1, 2, 3, 6, 7)) << what;
              EXPECT_EQ(bytes_of(graph, cuda_detail::kSumUid), channels * 4) << what;
              EXPECT_EQ(bytes_of(graph, cuda_detail::kSquareSumUid), channels * 4) << what;
              break;
            case ConvFusion::scale_bias_relu_conv_genstats:
              EXPECT_THAT(uids_of(graph), ::testing::ElementsAre(1, 2, 3, 4, 5, 6, 7)) << what;
              EXPECT_EQ(bytes_of(graph, cuda_detail::kScaleUid), static_cast<std::size_t>(config.input.c()) * 2)
                  << what;
              break;
            case ConvFusion::scale_bias_relu_wgrad:
              EXPECT_THAT(uids_of(graph), ::testing::ElementsAre(1, 2, 3, 4, 5)) << what;
              break;
            case ConvFusion::dgrad_drelu: EXPECT_THAT(uids_of(graph), ::testing::ElementsAre(1, 2, 3, 8)) << what; break;
            case ConvFusion::dgrad_scale_bias_drelu:
              EXPECT_THAT(uids_of(graph), ::testing::ElementsAre(1, 2, 3, 4, 5, 8)) << what;
              break;
            case ConvFusion::runtime_fusion_canary: ADD_FAILURE() << "the canary is no pass dlbench runs"; break;
            case ConvFusion::dgrad_add_drelu:
              EXPECT_THAT(uids_of(graph), ::testing::ElementsAre(1, 2, 3, 8, 18)) << what;
              EXPECT_EQ(bytes_of(graph, cuda_detail::kShortcutGradientUid),
                        static_cast<std::size_t>(config.input.numel()) * 2)
                  << what;
              break;
            case ConvFusion::dgrad_add_drelu_dbn_weight:
              // No β: the ReLU's input is the block's output, read, not recomputed from the batch norm.
              EXPECT_THAT(uids_of(graph), ::testing::ElementsAre(1, 2, 3, 8, 9, 10, 11, 13, 14, 15, 16, 17, 18, 19))
                  << what;
              EXPECT_EQ(bytes_of(graph, cuda_detail::kBatchNormInputUid),
                        static_cast<std::size_t>(config.input.numel()) * 2)
                  << what;
              EXPECT_EQ(bytes_of(graph, cuda_detail::kDgammaUid), static_cast<std::size_t>(config.input.c()) * 4) << what;
              break;
            case ConvFusion::dgrad_drelu_dbn_weight: {
              EXPECT_THAT(uids_of(graph), ::testing::ElementsAre(1, 2, 3, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17)) << what;
              // The batch norm's x is the convolution's input; its statistics, parameters,
              // gradients and coefficients are fp32 a channel of it.
              EXPECT_EQ(bytes_of(graph, cuda_detail::kReluInputUid), static_cast<std::size_t>(config.input.numel()) * 2)
                  << what;
              for (std::int64_t uid = cuda_detail::kMeanUid; uid <= cuda_detail::kCoefficientBiasUid; ++uid) {
                EXPECT_EQ(bytes_of(graph, uid), static_cast<std::size_t>(config.input.c()) * 4) << what << " uid " << uid;
              }
              break;
            }
          }
          // What a timed run sends to scratch: every fp32 value a channel the pass writes (the
          // statistics, dγ, dβ, the coefficients), never one it reads (mean, inverse std, γ, β).
          std::vector<std::int64_t> written;
          for (const cuda_detail::FusedTensor& t : graph.tensors) {
            if (cuda_detail::is_per_channel_output(t.uid)) written.push_back(t.uid);
          }
          if (fusion == ConvFusion::conv_genstats || fusion == ConvFusion::scale_bias_relu_conv_genstats) {
            EXPECT_THAT(written, ::testing::UnorderedElementsAre(6, 7)) << what;
          } else if (cuda_detail::reduces_batch_norm_gradients(fusion)) {
            EXPECT_THAT(written, ::testing::UnorderedElementsAre(13, 14, 15, 16, 17)) << what;
          } else {
            EXPECT_THAT(written, ::testing::IsEmpty()) << what;
          }
        } catch (const CudaError& e) {
          ADD_FAILURE() << what << ": " << e.what();
        }
      }
    }
  }
}

TEST(ConvFusion, TheRuntimeFusionCanaryIsAConvolutionWithAnEpilogueAndNoPassDlbenchRuns) {
  Conv2dConfig config{Shape(8, 64, 28, 28), 128, 3, 1, 1, false};
  config.dtype = DType::fp16;
  const FusedConvGraph graph(config, ConvFusion::runtime_fusion_canary, nullptr);
  EXPECT_THAT(uids_of(graph), ::testing::ElementsAre(1, 2, 3, 4, 5));  // x, w, y, the scale, the bias
  EXPECT_EQ(bytes_of(graph, cuda_detail::kBiasUid), 128u * 2);
  EXPECT_EQ(bytes_of(graph, cuda_detail::kOutputUid), static_cast<std::size_t>(config.output().numel()) * 2);
  EXPECT_EQ(cuda_detail::baseline_of(ConvFusion::runtime_fusion_canary), ConvFusion::conv);
  EXPECT_EQ(std::ranges::find(cuda_detail::kConvFusions, ConvFusion::runtime_fusion_canary),
            cuda_detail::kConvFusions.end());
}

TEST(ConvFusion, EachFusedPassNamesThePlainPassItReplaces) {
  EXPECT_EQ(cuda_detail::baseline_of(ConvFusion::scale_bias_relu_conv_genstats), ConvFusion::conv);
  EXPECT_EQ(cuda_detail::baseline_of(ConvFusion::conv_genstats), ConvFusion::conv);
  EXPECT_EQ(cuda_detail::baseline_of(ConvFusion::scale_bias_relu_wgrad), ConvFusion::wgrad);
  EXPECT_EQ(cuda_detail::baseline_of(ConvFusion::dgrad_drelu), ConvFusion::dgrad);
  EXPECT_EQ(cuda_detail::baseline_of(ConvFusion::dgrad_scale_bias_drelu), ConvFusion::dgrad);
  EXPECT_EQ(cuda_detail::baseline_of(ConvFusion::dgrad_drelu_dbn_weight), ConvFusion::dgrad);
  EXPECT_EQ(cuda_detail::baseline_of(ConvFusion::dgrad_add_drelu), ConvFusion::dgrad);
  EXPECT_EQ(cuda_detail::baseline_of(ConvFusion::dgrad_add_drelu_dbn_weight), ConvFusion::dgrad);
  for (const ConvFusion fusion : cuda_detail::kConvFusions) {
    EXPECT_EQ(cuda_detail::baseline_of(cuda_detail::baseline_of(fusion)), cuda_detail::baseline_of(fusion));
  }
}

// cuDNN's heuristics open NVRTC for its runtime-compiled engines and close it after each query,
// which reloaded the library every time (the probe's first run took 101.5 s, 2.4 s with it kept):
// after a query it must still be loaded, held by the search itself.
TEST(ConvFusion, NvrtcStaysLoadedAfterAHeuristicsQuery) {
  const std::string soname = cuda_detail::nvrtc_soname();
  void* opened = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (opened == nullptr) GTEST_SKIP() << "needs " << soname << " (the CUDA toolkit's NVRTC), not on this machine";
  dlclose(opened);
  const auto device =
      cuda_detail::device_properties_from_json(cuda_detail::cudnn_device_json(cuda_detail::described_gpu("h200")));
  Conv2dConfig config{Shape(8, 64, 16, 16), 64, 3, 1, 1, false};
  config.dtype = DType::fp16;
  const FusedConvGraph graph(config, ConvFusion::dgrad_drelu, nullptr);
  cuda_detail::ranked_configs(graph.graph, CUDNN_HEUR_MODE_A, &device);
  void* still = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
  EXPECT_NE(still, nullptr) << soname << " was closed after the heuristics query";
  if (still != nullptr) dlclose(still);
  EXPECT_TRUE(cuda_detail::keep_nvrtc_loaded());
}

// What cuDNN 9.19 answered for a described H200 on 2026-12-03 (bench/RESULTS.md): plans for the
// plain passes, for the forward and filter-gradient passes fused with batch norm, and for the data
// gradient fused with the batch norm's ReLU backward and weight gradients (DgradDreluBNBwdWeight),
// built here without the device. Should a later cuDNN answer otherwise, this says so before a GPU
// is lent.
TEST(ConvFusion, ForADescribedH200TheEnginesBuildThePlainAndTheBatchNormFusedPasses) {
  const auto device =
      cuda_detail::device_properties_from_json(cuda_detail::cudnn_device_json(cuda_detail::described_gpu("h200")));
  Conv2dConfig config{Shape(8, 64, 56, 56), 64, 3, 1, 1, false};
  config.dtype = DType::fp16;
  for (const ConvFusion fusion : {ConvFusion::conv, ConvFusion::wgrad, ConvFusion::dgrad, ConvFusion::conv_genstats,
                                  ConvFusion::scale_bias_relu_conv_genstats, ConvFusion::scale_bias_relu_wgrad,
                                  ConvFusion::dgrad_drelu_dbn_weight}) {
    const FusedConvGraph graph(config, fusion, nullptr);
    const cuda_detail::EngineSearchResult search = cuda_detail::search_engines(graph, nullptr, &device, 2);
    EXPECT_GT(search.search.ranked, 0) << cuda_detail::to_string(fusion);
    ASSERT_FALSE(search.built.empty()) << cuda_detail::to_string(fusion) << ": " << search.first_unbuildable_reason;
    EXPECT_LE(search.built.size(), 2u);
    EXPECT_GE(search.built.front().engine, 0);
  }
  // The stem's 3 input channels: no fused engine, where the plain pass has one.
  Conv2dConfig stem{Shape(8, 3, 64, 64), 64, 7, 2, 3, false};
  stem.dtype = DType::fp16;
  EXPECT_TRUE(cuda_detail::search_engines(FusedConvGraph(stem, ConvFusion::conv_genstats, nullptr), nullptr, &device, 1)
                  .built.empty());
  EXPECT_FALSE(
      cuda_detail::search_engines(FusedConvGraph(stem, ConvFusion::conv, nullptr), nullptr, &device, 1).built.empty());
  // The data gradient with the ReLU's backward alone is no pattern a precompiled engine takes: only
  // the whole DgradDreluBNBwdWeight is (runtime-fusion engines take it where a driver loads them).
  // Where no CUDA driver loads, cuDNN offers no runtime-fusion engine at all: an epilogue only those
  // run ranks none, so what this machine refuses a GPU may still build (bench.ConvFusionProbe
  // shows them ranked with the toolkit's stub driver).
  EXPECT_TRUE(cuda_detail::search_engines(FusedConvGraph(config, ConvFusion::dgrad_drelu, nullptr), nullptr, &device, 1)
                  .built.empty());
  if (void* driver = dlopen("libcuda.so.1", RTLD_LAZY | RTLD_LOCAL); driver == nullptr) {
    const cuda_detail::EngineSearchResult canary = cuda_detail::search_engines(
        FusedConvGraph(config, ConvFusion::runtime_fusion_canary, nullptr), nullptr, &device, 1);
    EXPECT_EQ(canary.search.ranked, 0);
  } else {
    dlclose(driver);
  }
  // The shortcut's form (the block's last batch norm reduced from the next block's data gradient
  // plus the shortcut's, masked by the block's output) is ranked by no engine of either kind: cuDNN
  // 9.19 has no such pattern (2026-12-04, with the stub driver: 0 of 53 ResNet-50 convolutions).
  EXPECT_EQ(cuda_detail::search_engines(FusedConvGraph(config, ConvFusion::dgrad_add_drelu_dbn_weight, nullptr),
                                        nullptr, &device, 1)
                .search.ranked,
            0);
  // bf16 gets no DgradDreluBNBwdWeight, from either kind of engine.
  config.dtype = DType::bf16;
  EXPECT_TRUE(cuda_detail::search_engines(FusedConvGraph(config, ConvFusion::dgrad_drelu_dbn_weight, nullptr), nullptr,
                                          &device, 1)
                  .built.empty());
}

std::vector<std::uint16_t> halves(DType dtype, const std::vector<float>& values) {
  std::vector<std::uint16_t> bits;
  for (const float v : values) bits.push_back(cuda_detail::half_bits(dtype, v));
  return bits;
}

TEST(ConvFusionReference, TheNormalisedInputIsReluOfScaleAndShiftPerChannelRoundedToTheType) {
  for (const DType dtype : {DType::fp16, DType::bf16}) {
    // Two pixels of two channels: channel 0 scaled by 2 and shifted by -1, channel 1 by 1 and 0.5.
    const auto x = halves(dtype, {1.0f, -1.0f, 0.5f, 2.0f});
    const auto out = cuda_detail::scale_bias_relu(dtype, x, halves(dtype, {2.0f, 1.0f}), halves(dtype, {-1.0f, 0.5f}));
    EXPECT_EQ(out, halves(dtype, {1.0f, 0.0f, 0.0f, 2.5f})) << to_string(dtype);
    // Rounded to the type, as a kernel storing it would: 0.3 * 1 + 0 is 0.3's nearest value.
    EXPECT_EQ(cuda_detail::scale_bias_relu(dtype, halves(dtype, {0.3f}), halves(dtype, {1.0f}), halves(dtype, {0.0f})),
              halves(dtype, {0.3f}));
  }
  EXPECT_THROW(cuda_detail::scale_bias_relu(DType::fp16, std::vector<std::uint16_t>(3), std::vector<std::uint16_t>(2),
                                            std::vector<std::uint16_t>(2)),
               std::invalid_argument);
}

TEST(ConvFusionReference, TheReluBackwardKeepsTheGradientWhereItsInputWasPositive) {
  const DType dtype = DType::fp16;
  auto dx = halves(dtype, {5.0f, 6.0f, 7.0f, 8.0f});
  cuda_detail::relu_backward(dtype, dx, halves(dtype, {1.0f, -1.0f, 0.0f, 0.25f}));
  EXPECT_EQ(dx, halves(dtype, {5.0f, 0.0f, 0.0f, 8.0f}));
  // Recomputed from the batch norm's input: channel 0 as x * 2 - 1, channel 1 as x * 1 + 0.5.
  dx = halves(dtype, {5.0f, 6.0f, 7.0f, 8.0f});
  const auto scale = halves(dtype, {2.0f, 1.0f}), bias = halves(dtype, {-1.0f, 0.5f});
  cuda_detail::relu_backward(dtype, dx, halves(dtype, {1.0f, -1.0f, 0.5f, -0.25f}), &scale, &bias);
  EXPECT_EQ(dx, halves(dtype, {5.0f, 0.0f, 0.0f, 8.0f}));
}

TEST(ConvFusionReference, TheShortcutsGradientIsAddedInFp32AndRoundedToTheType) {
  for (const DType dtype : {DType::fp16, DType::bf16}) {
    auto dx = halves(dtype, {1.0f, -2.0f, 0.5f, 3.0f});
    cuda_detail::add_into(dtype, dx, halves(dtype, {0.25f, 2.0f, -1.0f, 1.0f / 3.0f}));
    // 3 + 1/3 in fp32, then rounded once: not the fp32 sum, not exact in either type.
    EXPECT_EQ(dx, halves(dtype, {1.25f, 0.0f, -0.5f, 3.0f + 1.0f / 3.0f})) << to_string(dtype);
    EXPECT_NE(cuda_detail::half_value(dtype, dx[3]), 3.0f + 1.0f / 3.0f);
  }
  std::vector<std::uint16_t> dx(3);
  EXPECT_THROW(cuda_detail::add_into(DType::fp16, dx, std::vector<std::uint16_t>(2)), std::invalid_argument);
}

TEST(ConvFusionReference, ChannelSumsAndTheErrorsAFusedPassIsHeldTo) {
  const DType dtype = DType::bf16;
  const auto y = halves(dtype, {1.0f, -2.0f, 3.0f, 4.0f});
  const cuda_detail::ChannelSums sums = cuda_detail::channel_sums(dtype, y, 2);
  EXPECT_EQ(sums.sum, (std::vector<double>{4.0, 2.0}));
  EXPECT_EQ(sums.square_sum, (std::vector<double>{10.0, 20.0}));
  EXPECT_EQ(sums.absolute_sum, (std::vector<double>{4.0, 6.0}));
  EXPECT_EQ(cuda_detail::statistics_error({4.0f, 2.0f}, {10.0f, 20.0f}, sums), 0.0);
  EXPECT_DOUBLE_EQ(cuda_detail::statistics_error({4.0f, 2.5f}, {10.0f, 20.0f}, sums), 0.5 / 6);  // 0.5 of Σ|y| 6
  EXPECT_DOUBLE_EQ(cuda_detail::statistics_error({4.0f, 2.0f}, {11.0f, 20.0f}, sums), 0.1);  // 1 of Σy² 10
  EXPECT_EQ(cuda_detail::statistics_error({NAN, 2.0f}, {10.0f, 20.0f}, sums), INFINITY);

  EXPECT_EQ(cuda_detail::relative_max_error(dtype, y, y), 0.0);
  EXPECT_DOUBLE_EQ(cuda_detail::relative_max_error(dtype, halves(dtype, {1.0f, -2.0f, 3.5f, 4.0f}), y), 0.125);
  EXPECT_EQ(cuda_detail::relative_max_error(dtype, halves(dtype, {1.0f, NAN, 3.0f, 4.0f}), y), INFINITY);
  EXPECT_THROW(cuda_detail::relative_max_error(dtype, y, halves(dtype, {1.0f})), std::invalid_argument);
  EXPECT_THROW(cuda_detail::channel_sums(dtype, y, 3), std::invalid_argument);
}

TEST(ConvFusionReference, ABatchNormsParametersAreItsInputsStatisticsAndItsReluMaskIsRecomputedFromThem) {
  const DType dtype = DType::fp16;
  // Two channels over three pixels: channel 0 holds 1, 2, 3 (mean 2, variance 2/3), channel 1 holds 4 each.
  const auto x = halves(dtype, {1.0f, 4.0f, 2.0f, 4.0f, 3.0f, 4.0f});
  const cuda_detail::BatchNormParameters p = cuda_detail::batch_norm_parameters(dtype, x, 2, 5);
  EXPECT_FLOAT_EQ(p.mean[0], 2.0f);
  EXPECT_FLOAT_EQ(p.mean[1], 4.0f);
  EXPECT_NEAR(p.inv_std[0], 1 / std::sqrt(2.0 / 3 + 1e-5), 1e-6);
  EXPECT_NEAR(p.inv_std[1], 1 / std::sqrt(1e-5), 1e-2);
  for (std::size_t c = 0; c < 2; ++c) {
    EXPECT_GE(p.gamma[c], 0.5f);
    EXPECT_LE(p.gamma[c], 1.5f);
    EXPECT_GE(p.beta[c], -0.5f);
    EXPECT_LE(p.beta[c], 0.5f);
  }
  EXPECT_EQ(cuda_detail::batch_norm_parameters(dtype, x, 2, 5).gamma, p.gamma);
  // The ReLU's input is ((x - mean) * inv_std) * gamma + beta: with gamma 1 and beta 0 the mask
  // keeps channel 0's values above its mean; with beta -0.1 not even the one at it.
  cuda_detail::BatchNormParameters unit{{2.0f}, {1.0f}, {1.0f}, {0.0f}};
  auto dx = halves(dtype, {5.0f, 6.0f, 7.0f});
  cuda_detail::relu_backward(dtype, dx, halves(dtype, {1.0f, 2.0f, 3.0f}), unit);
  EXPECT_EQ(dx, halves(dtype, {0.0f, 0.0f, 7.0f}));
  unit.beta = {0.5f};
  dx = halves(dtype, {5.0f, 6.0f, 7.0f});
  cuda_detail::relu_backward(dtype, dx, halves(dtype, {1.0f, 2.0f, 3.0f}), unit);
  EXPECT_EQ(dx, halves(dtype, {0.0f, 6.0f, 7.0f}));
  EXPECT_THROW(cuda_detail::relu_backward(dtype, dx, halves(dtype, {1.0f}), unit), std::invalid_argument);
}

// The batch norm's gradients as dgrad_drelu_dbn_weight's check computes them, against the
// derivative of Σ dy · bn(x) by central differences, bn's mean and variance taken from x itself (in
// double throughout): dx = a dy + b x + c a channel, dgamma, dbeta.
TEST(ConvFusionReference, TheBatchNormsGradientsAndInputGradientCoefficientsAreTheDerivativeOfItsOutput) {
  const DType dtype = DType::fp16;
  const std::size_t channels = 3, pixels = 40;
  const auto x = cuda_detail::random_half_values(dtype, channels * pixels, 11);
  const auto dy = cuda_detail::random_half_values(dtype, channels * pixels, 12);
  const cuda_detail::BatchNormParameters p = cuda_detail::batch_norm_parameters(dtype, x, channels, 13);
  std::vector<double> values(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) values[i] = cuda_detail::half_value(dtype, x[i]);
  // Σ dy · (gamma (x - mean(x)) / sqrt(var(x) + 1e-5) + beta), over channel c.
  const auto loss = [&](const std::vector<double>& v, std::size_t c, double gamma, double beta) {
    double mean = 0, square = 0;
    for (std::size_t i = c; i < v.size(); i += channels) mean += v[i];
    mean /= pixels;
    for (std::size_t i = c; i < v.size(); i += channels) square += (v[i] - mean) * (v[i] - mean);
    const double inv_std = 1 / std::sqrt(square / pixels + 1e-5);
    double sum = 0;
    for (std::size_t i = c; i < v.size(); i += channels) {
      sum += double{cuda_detail::half_value(dtype, dy[i])} * (gamma * (v[i] - mean) * inv_std + beta);
    }
    return sum;
  };
  const cuda_detail::BatchNormGradients g = cuda_detail::batch_norm_gradients(dtype, x, dy, p);
  constexpr double h = 1e-5;
  for (std::size_t c = 0; c < channels; ++c) {
    const double gamma = p.gamma[c], beta = p.beta[c];
    EXPECT_NEAR(g.dgamma[c], (loss(values, c, gamma + h, beta) - loss(values, c, gamma - h, beta)) / (2 * h), 1e-4);
    EXPECT_NEAR(g.dbeta[c], (loss(values, c, gamma, beta + h) - loss(values, c, gamma, beta - h)) / (2 * h), 1e-4);
    for (std::size_t i = c; i < x.size(); i += channels * 7) {
      std::vector<double> up = values, down = values;
      up[i] += h;
      down[i] -= h;
      const double numeric = (loss(up, c, gamma, beta) - loss(down, c, gamma, beta)) / (2 * h);
      const double from_coefficients =
          g.a[c] * double{cuda_detail::half_value(dtype, dy[i])} + g.b[c] * values[i] + g.c[c];
      EXPECT_NEAR(from_coefficients, numeric, 1e-4 * std::max(1.0, std::abs(numeric))) << "channel " << c << " value " << i;
    }
  }
}

TEST(ConvFusionReference, ABatchNormsGradientsErrorIsNoneForTheHostsOwnAndNamesAWrongCoefficient) {
  const DType dtype = DType::bf16;
  const std::size_t channels = 4;
  const auto x = cuda_detail::random_half_values(dtype, channels * 64, 21);
  const auto dy = cuda_detail::random_half_values(dtype, channels * 64, 22);
  const cuda_detail::BatchNormParameters p = cuda_detail::batch_norm_parameters(dtype, x, channels, 23);
  const cuda_detail::BatchNormGradients g = cuda_detail::batch_norm_gradients(dtype, x, dy, p);
  const auto floats = [](const std::vector<double>& v) { return std::vector<float>(v.begin(), v.end()); };
  std::vector<float> dgamma = floats(g.dgamma), dbeta = floats(g.dbeta), a = floats(g.a), b = floats(g.b), c = floats(g.c);
  const auto error = [&] { return cuda_detail::batch_norm_gradients_error(dtype, dgamma, dbeta, a, b, c, x, dy, p); };
  EXPECT_LT(error(), 1e-6);
  b[2] *= 1.5f;  // x's coefficient: the input gradient moves with it
  EXPECT_GT(error(), 1e-3);
  b = floats(g.b);
  dbeta[1] += 0.5f;
  EXPECT_GT(error(), 1e-3);
  dbeta = floats(g.dbeta);
  c[0] = NAN;
  EXPECT_EQ(error(), INFINITY);
  c = floats(g.c);
  EXPECT_THROW(cuda_detail::batch_norm_gradients_error(dtype, {1.0f}, dbeta, a, b, c, x, dy, p), std::invalid_argument);
}

TEST(ConvFusionReference, ASecondRunWithoutZeroingTellsWhetherAPassOverwritesOrAddsIntoItsSums) {
  const std::vector<float> once{3.0f, -1.5f, 0.25f, 1000.0f};
  EXPECT_EQ(cuda_detail::repeated_run_effect(once, once), "overwritten");
  std::vector<float> twice = once;
  for (float& v : twice) v *= 2;
  EXPECT_EQ(cuda_detail::repeated_run_effect(once, twice), "added");
  // Rounding within the bound of the largest value still tells them apart ...
  twice[2] += 0.5f;
  EXPECT_EQ(cuda_detail::repeated_run_effect(once, twice), "added");
  std::vector<float> rerun = once;
  rerun[0] += 0.5f;
  EXPECT_EQ(cuda_detail::repeated_run_effect(once, rerun), "overwritten");
  // ... anything else (coefficients reduced from sums that were added into, a NaN) is neither.
  rerun[0] = 3.0f * 1.5f;
  rerun[3] = 1000.0f * 1.5f;
  EXPECT_EQ(cuda_detail::repeated_run_effect(once, rerun), "other");
  rerun = once;
  rerun[1] = NAN;
  EXPECT_EQ(cuda_detail::repeated_run_effect(once, rerun), "other");
  // All zeros after one run: a second that writes zeros again overwrote; one that wrote else, not.
  const std::vector<float> zeros(4, 0.0f);
  EXPECT_EQ(cuda_detail::repeated_run_effect(zeros, zeros), "overwritten");
  EXPECT_EQ(cuda_detail::repeated_run_effect(zeros, once), "other");
  EXPECT_THROW(cuda_detail::repeated_run_effect(once, std::vector<float>(3)), std::invalid_argument);
}

TEST(ConvFusionReference, RandomValuesAreSeededWithBothSignsAndMagnitudesFromAHalfToOne) {
  for (const DType dtype : {DType::fp16, DType::bf16}) {
    const auto values = cuda_detail::random_half_values(dtype, 1000, 7);
    EXPECT_EQ(values, cuda_detail::random_half_values(dtype, 1000, 7));
    EXPECT_NE(values, cuda_detail::random_half_values(dtype, 1000, 8));
    int negative = 0;
    for (const std::uint16_t bits : values) {
      const float v = cuda_detail::half_value(dtype, bits);
      EXPECT_GE(std::abs(v), 0.5f);
      EXPECT_LE(std::abs(v), 1.0f);
      negative += v < 0;
    }
    EXPECT_GT(negative, 400);
    EXPECT_LT(negative, 600);
  }
}

TEST(ConvFusion, ASearchTakesAHandleOrADescribedDeviceNotBothNorNeither) {
  Conv2dConfig config{Shape(2, 16, 14, 14), 32, 3, 1, 1, false};
  config.dtype = DType::fp16;
  const FusedConvGraph graph(config, ConvFusion::conv, nullptr);
  EXPECT_THROW(cuda_detail::search_engines(graph, nullptr, nullptr, 1), std::invalid_argument);
}

}  // namespace
}  // namespace dlbench::worker
