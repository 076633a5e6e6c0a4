// The graph-API convolution's rules and graphs, checked without a GPU: which API the variable
// picks, which engines may run, the strides that describe each memory order (against the index
// math the kernels use), and cuDNN's own acceptance of every pass's operation graph (cuDNN
// finalizes a graph without a device; its heuristics and plans need a device, or one described:
// tests/gpu/conv_fusion_test.cpp).
#include <array>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "activation_index.hpp"
#include "cuda/conv_engines.hpp"
#include "cuda/conv_graph.hpp"
#include "cuda/cuda_check.hpp"

namespace dlbench::worker {
namespace {

TEST(ConvEngines, TheVariablePicksTheApiAndNamesItsValuesWhenWrong) {
  EXPECT_EQ(conv_calls_api(nullptr), ConvCallsApi::legacy);
  EXPECT_EQ(conv_calls_api(""), ConvCallsApi::legacy);
  EXPECT_EQ(conv_calls_api("legacy"), ConvCallsApi::legacy);
  EXPECT_EQ(conv_calls_api("graph"), ConvCallsApi::graph);
  try {
    conv_calls_api("v8");
    FAIL() << "an unknown value must be refused";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("DLBENCH_CUDA_CONV: \"v8\" is not one of legacy, graph"));
  }
}

TEST(ConvEngines, TheResidualGradientVariableSaysHowBranchGradientsMeet) {
  // Unset: accumulated where activations are channels last (tf32 and the half types, timed on an
  // H200), summed apart in NCHW (fp32, not timed).
  EXPECT_EQ(residual_gradient(Layout::nhwc, nullptr), ResidualGradient::accumulate);
  EXPECT_EQ(residual_gradient(Layout::nhwc, ""), ResidualGradient::accumulate);
  EXPECT_EQ(residual_gradient(Layout::nchw, nullptr), ResidualGradient::sum);
  EXPECT_EQ(residual_gradient(Layout::nchw, ""), ResidualGradient::sum);
  for (const Layout layout : {Layout::nhwc, Layout::nchw}) {
    EXPECT_EQ(residual_gradient(layout, "sum"), ResidualGradient::sum);
    EXPECT_EQ(residual_gradient(layout, "accumulate"), ResidualGradient::accumulate);
  }
  try {
    residual_gradient(Layout::nhwc, "add");
    FAIL() << "an unknown value must be refused";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("DLBENCH_CUDA_RESIDUAL_GRAD: \"add\" is not one of sum, accumulate"));
  }
}

TEST(ConvEngines, Fp32RefusesTensorCoresAndNoRunTakesNarrowerArithmetic) {
  const std::vector<cudnnBackendNumericalNote_t> tensor_cores{CUDNN_NUMERICAL_NOTE_TENSOR_CORE};
  const std::vector<cudnnBackendNumericalNote_t> plain{CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC,
                                                       CUDNN_NUMERICAL_NOTE_WINOGRAD};
  EXPECT_FALSE(engine_admitted(tensor_cores, /*fp32_data=*/true, /*tensor_cores_allowed=*/false));  // fp32
  EXPECT_TRUE(engine_admitted(tensor_cores, true, true));                                          // tf32
  EXPECT_TRUE(engine_admitted(tensor_cores, false, true));                                         // fp16, bf16
  EXPECT_TRUE(engine_admitted(plain, true, false));
  EXPECT_TRUE(engine_admitted({}, true, false));
  // DLBENCH_CUDA_ALGORITHMS=deterministic refuses what cuDNN notes non-deterministic, nothing else.
  EXPECT_FALSE(engine_admitted(plain, true, false, ConvDeterminism::deterministic));
  EXPECT_TRUE(engine_admitted({CUDNN_NUMERICAL_NOTE_WINOGRAD}, true, false, ConvDeterminism::deterministic));
  EXPECT_TRUE(engine_admitted(tensor_cores, false, true, ConvDeterminism::deterministic));
  for (const cudnnBackendNumericalNote_t narrower :
       {CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS, CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION}) {
    for (const bool fp32_data : {true, false}) {
      EXPECT_FALSE(engine_admitted({CUDNN_NUMERICAL_NOTE_TENSOR_CORE, narrower}, fp32_data, true)) << narrower;
      EXPECT_FALSE(engine_admitted({narrower}, fp32_data, false)) << narrower;
    }
  }
}

// The graph's strides must put every element where the kernels and the filter copy put it.
TEST(ConvEngines, StridesDescribeTheBackendsOwnMemoryOrders) {
  const std::array<std::int64_t, 4> dims{2, 5, 3, 4};
  for (const bool channels_last : {false, true}) {
    const std::array<std::int64_t, 4> stride = graph_strides(dims, channels_last);
    const ActivationGeometry activation{dims[0], dims[1], dims[2], dims[3], channels_last};
    for (std::int64_t n = 0; n < dims[0]; ++n) {
      for (std::int64_t c = 0; c < dims[1]; ++c) {
        for (std::int64_t y = 0; y < dims[2]; ++y) {
          for (std::int64_t x = 0; x < dims[3]; ++x) {
            const std::int64_t at = n * stride[0] + c * stride[1] + y * stride[2] + x * stride[3];
            ASSERT_EQ(at, activation.offset(n, c, y * dims[3] + x)) << (channels_last ? "NHWC" : "NCHW");
            // A filter (K, C, R, S) has the same strides: OIHW, or cuDNN's NHWC filter (OHWI).
            ASSERT_EQ(at, filter_offset(channels_last, dims[1], dims[2], dims[3], n, c, y, x));
          }
        }
      }
    }
  }
}

TEST(ConvEngines, EveryPassLayoutAndTypeMakesAGraphCuDnnAccepts) {
  const std::vector<Conv2dConfig> convolutions{
      {Shape(2, 16, 14, 14), 32, 3, 1, 1, false},
      {Shape(2, 64, 14, 14), 128, 1, 2, 0, false},
      {Shape(2, 3, 32, 32), 16, 7, 2, 3, true},
      {Shape(2, 16, 17, 17), 24, {1, 7}, 1, {0, 3}, false},  // InceptionV3's asymmetric kernels
      {Shape(2, 16, 15, 15), 16, 3, 1, 2, false, DType::fp32, 2},  // DeepLab's atrous convolution
  };
  for (Conv2dConfig config : convolutions) {
    for (const DType dtype : {DType::fp32, DType::fp16, DType::bf16}) {
      config.dtype = dtype;
      for (const Layout layout : {Layout::nchw, Layout::nhwc}) {
        for (const ConvPass pass : {ConvPass::forward, ConvPass::backward_data, ConvPass::backward_filter,
                                    ConvPass::backward_data_accumulate}) {
          const std::string what = config.input.to_string() + " " + std::string(to_string(dtype)) +
                                   (layout == Layout::nhwc ? " nhwc" : " nchw") + " pass " +
                                   std::to_string(static_cast<int>(pass));
          EXPECT_NO_THROW(cuda_detail::ConvOperationGraph(config, cuda_detail::conv_graph_shapes(config), layout, pass,
                                                          nullptr))
              << what;
        }
      }
    }
  }
}

TEST(ConvEngines, AGraphWhoseShapesDisagreeIsRefusedWithCuDnnsReasonAndTheOperation) {
  const Conv2dConfig config{Shape(2, 16, 14, 14), 32, 3, 1, 1, false};
  cuda_detail::ConvGraphShapes shapes = cuda_detail::conv_graph_shapes(config);
  EXPECT_EQ(shapes.output, (std::array<std::int64_t, 4>{2, 32, 14, 14}));
  EXPECT_EQ(shapes.filter, (std::array<std::int64_t, 4>{32, 16, 3, 3}));
  shapes.output[2] = 13;  // a 3x3 convolution padded by 1 keeps 14 rows
  try {
    cuda_detail::ConvOperationGraph(config, shapes, Layout::nchw, ConvPass::backward_data, nullptr);
    FAIL() << "cuDNN must refuse an output of the wrong height";
  } catch (const CudaError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("conv_graph.cpp:"));
    EXPECT_THAT(e.what(), ::testing::HasSubstr("finalizing the backward-data operation: CUDNN_STATUS_"));
  }
}

TEST(ConvEngines, AGraphChoiceIsLoggedWithItsSearch) {
  ConvAlgorithmKey key;
  key.input = {64, 64, 56, 56};
  key.out_channels = 64;
  key.kernel = {3, 3};
  key.stride = 1;
  key.padding = {1, 1};
  GraphSearch search;
  search.ranked = 20;
  search.refused = 3;
  search.unbuildable = 1;
  search.timed = 8;
  EXPECT_EQ(describe_graph_choice(key, 12, false, 0, 0.1534, search),
            "forward fp32 nchw 64x64x56x56 -> 64 3x3 stride 1 pad 1: graph engine 12, fma, 0.0 MiB workspace, "
            "0.153 ms; 8 timed of 20 ranked (3 refused by numerical notes, 1 not buildable, 0 over the workspace "
            "limit, 0 failed to run)");
}

TEST(ConvEngines, TheFastestPlanTimedIsKeptATieGoingToTheBetterRankedAndAFailedOneNever) {
  EXPECT_EQ(fastest_plan({0.5f, 0.2f, 0.3f}), std::optional<std::size_t>(1));
  EXPECT_EQ(fastest_plan({0.2f, 0.2f}), std::optional<std::size_t>(0));
  EXPECT_EQ(fastest_plan({std::nullopt, 0.4f, std::nullopt, 0.1f}), std::optional<std::size_t>(3));
  EXPECT_EQ(fastest_plan({std::nullopt, std::nullopt}), std::nullopt);
  EXPECT_EQ(fastest_plan({}), std::nullopt);
  EXPECT_EQ(describe_plan_times({0.1612f, std::nullopt, 0.15f}), "0.161, failed, 0.150");
  EXPECT_EQ(describe_plan_times({}), "");
}

TEST(ConvEngines, RuntimeCompiledEnginesAreBuiltLastAndOnlyWhereNoPrecompiledOneBuildsAPlan) {
  EXPECT_EQ(build_order({true, false, true, false}, RuntimeCompilation::ranked),
            (std::vector<std::size_t>{0, 1, 2, 3}));
  EXPECT_EQ(build_order({true, false, true, false}, RuntimeCompilation::last_resort),
            (std::vector<std::size_t>{1, 3, 0, 2}));
  EXPECT_EQ(build_order({}, RuntimeCompilation::last_resort), std::vector<std::size_t>{});

  // The loop: which configurations it tries, given which of them build.
  const auto tried = [](const std::vector<RankedEngine>& engines, const std::vector<bool>& builds, int most,
                        RuntimeCompilation rule, const CompileAllowance* allowance, GraphSearch& search) {
    std::vector<std::size_t> tries;
    build_ranked(engines, most, rule, allowance, search, [] { return false; }, [&](std::size_t i) {
      tries.push_back(i);
      return static_cast<bool>(builds[i]);
    });
    return tries;
  };
  const std::vector<RankedEngine> engines{{true, true}, {true, false}, {true, true}, {true, false}};
  GraphSearch search;
  // The model's way: the two precompiled ones, and no compile once one of them built.
  EXPECT_EQ(tried(engines, {true, true, true, true}, 3, RuntimeCompilation::last_resort, nullptr, search),
            (std::vector<std::size_t>{1, 3}));
  // Where no precompiled one builds, the runtime-compiled ones in rank order.
  EXPECT_EQ(tried(engines, {true, false, true, false}, 3, RuntimeCompilation::last_resort, nullptr, search),
            (std::vector<std::size_t>{1, 3, 0, 2}));
  // The probe's way: the heuristics' rank, up to `most`.
  EXPECT_EQ(tried(engines, {true, true, true, true}, 3, RuntimeCompilation::ranked, nullptr, search),
            (std::vector<std::size_t>{0, 1, 2}));
  EXPECT_EQ(search.refused, 0);
  EXPECT_EQ(search.compile_refused, 0);

  // Numerics refuse before anything is built; a spent allowance refuses compiles, not precompiled plans.
  const std::vector<RankedEngine> refusing{{false, false}, {true, true}, {true, false}};
  CompileAllowance allowance(std::chrono::milliseconds(5));
  EXPECT_FALSE(allowance.spent());
  allowance.charge(std::chrono::milliseconds(5));
  EXPECT_TRUE(allowance.spent());
  EXPECT_EQ(allowance.used(), std::chrono::milliseconds(5));
  GraphSearch counted;
  EXPECT_EQ(tried(refusing, {false, true, true}, 3, RuntimeCompilation::ranked, &allowance, counted),
            (std::vector<std::size_t>{2}));
  EXPECT_EQ(counted.refused, 1);
  EXPECT_EQ(counted.compile_refused, 1);
  EXPECT_NE(describe_search(counted).find("1 not compiled: the allowance was spent"), std::string::npos)
      << describe_search(counted);
  EXPECT_EQ(describe_search(GraphSearch{}).find("compiled"), std::string::npos);

  // Past the deadline nothing more is built once a plan is; before one is, the search goes on.
  int calls = 0;
  GraphSearch late;
  build_ranked(std::vector<RankedEngine>(4), 3, RuntimeCompilation::ranked, nullptr, late, [] { return true; },
               [&](std::size_t i) {
                 ++calls;
                 return i == 1;
               });
  EXPECT_EQ(calls, 2);
}

}  // namespace
}  // namespace dlbench::worker
