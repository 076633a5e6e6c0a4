// How the CUDA backend chooses convolution and matmul algorithms, checked without a GPU: the
// structs are cuDNN's own, filled as cudnnFind*AlgorithmEx fills them.
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cuda/conv_algorithms.hpp"
#include "cuda/cuda_check.hpp"

namespace dlbench::worker {
namespace {

cudnnConvolutionFwdAlgoPerf_t perf(cudnnConvolutionFwdAlgo_t algo, cudnnStatus_t status, float ms, std::size_t memory,
                                   cudnnMathType_t math, cudnnDeterminism_t determinism = CUDNN_DETERMINISTIC) {
  cudnnConvolutionFwdAlgoPerf_t p{};
  p.algo = algo;
  p.status = status;
  p.time = ms;
  p.memory = memory;
  p.mathType = math;
  p.determinism = determinism;
  return p;
}

TEST(ConvAlgorithms, FastestSkipsFailuresAndKeepsTheMeasuredMathType) {
  const cudnnConvolutionFwdAlgoPerf_t results[] = {
      perf(CUDNN_CONVOLUTION_FWD_ALGO_FFT, CUDNN_STATUS_NOT_SUPPORTED, 0.1f, 0, CUDNN_DEFAULT_MATH),
      perf(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, CUDNN_STATUS_SUCCESS, 0.2f, 4096, CUDNN_TENSOR_OP_MATH),
      perf(CUDNN_CONVOLUTION_FWD_ALGO_GEMM, CUDNN_STATUS_SUCCESS, 0.3f, 1 << 20, CUDNN_FMA_MATH)};
  const AlgorithmChoice tf32 = fastest(results, 3, true, "forward");
  EXPECT_EQ(tf32.algorithm, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM);
  EXPECT_EQ(tf32.workspace, 4096u);
  EXPECT_EQ(tf32.math, CUDNN_TENSOR_OP_MATH);  // run it with the math it was timed with
}

TEST(ConvAlgorithms, Fp32NeverTakesATensorCoreResult) {
  const cudnnConvolutionFwdAlgoPerf_t results[] = {
      perf(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, CUDNN_STATUS_SUCCESS, 0.2f, 0, CUDNN_TENSOR_OP_MATH),
      perf(CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD, CUDNN_STATUS_SUCCESS, 0.25f, 0, CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION),
      perf(CUDNN_CONVOLUTION_FWD_ALGO_GEMM, CUDNN_STATUS_SUCCESS, 0.3f, 64, CUDNN_FMA_MATH)};
  const AlgorithmChoice fp32 = fastest(results, 3, false, "forward");
  EXPECT_EQ(fp32.algorithm, CUDNN_CONVOLUTION_FWD_ALGO_GEMM);
  EXPECT_EQ(fp32.math, CUDNN_FMA_MATH);
  try {
    fastest(results, 2, false, "forward");
    FAIL() << "only tensor-core results, and fp32 accepted one";
  } catch (const CudaError& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("no forward algorithm works for this convolution without tensor cores"));
  }
}

// Tensor cores on fp32 data mean TF32; a result measured with ALLOW_CONVERSION may have rounded
// the inputs to fp16 instead (and bf16 data to fp16, whose range is smaller): only fp16 data,
// which has nothing to convert, takes one.
TEST(ConvAlgorithms, OnlyFp16DataTakesAResultThatMayConvertItsInputsToFp16) {
  const cudnnConvolutionFwdAlgoPerf_t results[] = {
      perf(CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD, CUDNN_STATUS_SUCCESS, 0.1f, 0, CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION),
      perf(CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, CUDNN_STATUS_SUCCESS, 0.2f, 0, CUDNN_TENSOR_OP_MATH)};
  EXPECT_EQ(fastest(results, 2, true, "forward").algorithm, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM);
  EXPECT_THROW(fastest(results, 1, true, "forward"), CudaError);
  EXPECT_EQ(fastest(results, 2, true, "forward", /*fp16_data=*/true).algorithm, CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD);
}

// DLBENCH_CUDA_ALGORITHMS=deterministic: the fastest result cuDNN does not mark non-deterministic
// (a backward filter algorithm adding with atomics, say); by default the fastest, its mark kept for
// the log line. Where every result is non-deterministic a deterministic run is refused, saying so.
TEST(ConvAlgorithms, ADeterministicRunSkipsWhatCuDnnMarksNonDeterministic) {
  cudnnConvolutionBwdFilterAlgoPerf_t atomics{}, ordered{};
  atomics.algo = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0;
  atomics.status = CUDNN_STATUS_SUCCESS;
  atomics.time = 0.1f;
  atomics.mathType = CUDNN_TENSOR_OP_MATH;
  atomics.determinism = CUDNN_NON_DETERMINISTIC;
  ordered = atomics;
  ordered.algo = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1;
  ordered.time = 0.2f;
  ordered.determinism = CUDNN_DETERMINISTIC;
  const cudnnConvolutionBwdFilterAlgoPerf_t results[] = {atomics, ordered};
  const AlgorithmChoice any = fastest(results, 2, true, "backward-filter");
  EXPECT_EQ(any.algorithm, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0);
  EXPECT_FALSE(any.deterministic);
  const AlgorithmChoice deterministic =
      fastest(results, 2, true, "backward-filter", false, ConvDeterminism::deterministic);
  EXPECT_EQ(deterministic.algorithm, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1);
  EXPECT_TRUE(deterministic.deterministic);
  try {
    fastest(results, 1, true, "backward-filter", false, ConvDeterminism::deterministic);
    FAIL() << "only a non-deterministic result, and a deterministic run took it";
  } catch (const CudaError& e) {
    EXPECT_THAT(e.what(),
                ::testing::HasSubstr("no deterministic backward-filter algorithm works for this convolution"));
  }
  const ConvAlgorithmKey key{{32, 64, 56, 56}, 64, 1, 1, 0, 1, DType::fp16, Layout::nhwc, true,
                             ConvPass::backward_filter};
  EXPECT_THAT(describe_choice(key, any),
              ::testing::EndsWith("ALGO_0, tensor ops, 0.0 MiB workspace, non-deterministic"));
  EXPECT_THAT(describe_choice(key, deterministic), ::testing::EndsWith("ALGO_1, tensor ops, 0.0 MiB workspace"));

  EXPECT_EQ(conv_determinism(nullptr), ConvDeterminism::any);
  EXPECT_EQ(conv_determinism(""), ConvDeterminism::any);
  EXPECT_EQ(conv_determinism("any"), ConvDeterminism::any);
  EXPECT_EQ(conv_determinism("deterministic"), ConvDeterminism::deterministic);
  try {
    conv_determinism("on");
    FAIL() << "an unknown value must be refused";
  } catch (const std::invalid_argument& e) {
    EXPECT_THAT(e.what(), ::testing::HasSubstr("DLBENCH_CUDA_ALGORITHMS: \"on\" is not one of any, deterministic"));
  }
}

TEST(ConvAlgorithms, TheCacheKeyTellsGeometryDtypeLayoutMathPassAndDeterminismApart) {
  const ConvAlgorithmKey base{{32, 64, 56, 56}, 64, 3, 1, 1, 1, DType::fp32, Layout::nchw, false, ConvPass::forward};
  std::map<ConvAlgorithmKey, int> cache{{base, 1}};
  ConvAlgorithmKey other = base;
  other.tensor_cores = true;
  EXPECT_FALSE(cache.contains(other));
  other = base;
  other.layout = Layout::nhwc;
  EXPECT_FALSE(cache.contains(other));
  other = base;
  other.pass = ConvPass::backward_filter;
  EXPECT_FALSE(cache.contains(other));
  other = base;
  other.determinism = ConvDeterminism::deterministic;  // the fastest may be one it refuses
  EXPECT_FALSE(cache.contains(other));
  other = base;
  other.input[0] = 16;
  EXPECT_FALSE(cache.contains(other));
  other = base;  // InceptionV3's 1×7 against a 7×1 with the same padding sum
  other.kernel = {1, 7};
  other.padding = {0, 3};
  ConvAlgorithmKey transposed = other;
  transposed.kernel = {7, 1};
  transposed.padding = {3, 0};
  cache[other] = 2;
  EXPECT_FALSE(cache.contains(transposed));
  other = base;
  other.dilation = 2;
  EXPECT_FALSE(cache.contains(other));
  EXPECT_TRUE(cache.contains(base));
}

TEST(ConvAlgorithms, TheSearchBorrowsAtMostHalfOfWhatIsFree) {
  constexpr std::size_t MiB = std::size_t{1} << 20, GiB = std::size_t{1} << 30;
  EXPECT_EQ(search_workspace_bytes(GiB, 70 * GiB), GiB);               // a roomy device: the limit
  EXPECT_EQ(search_workspace_bytes(GiB, 600 * MiB), 300 * MiB);        // near the memory limit: half the rest
  EXPECT_EQ(search_workspace_bytes(GiB, 3 * MiB + 12345), MiB);        // whole MiB
  EXPECT_EQ(search_workspace_bytes(GiB, MiB), 0u);                     // nothing to borrow: measure without
}

TEST(ConvAlgorithms, TheWorkspaceLimitIsAGibibyteOrAnEighthOfTheDeviceUnlessAsked) {
  constexpr std::size_t MiB = std::size_t{1} << 20, GiB = std::size_t{1} << 30;
  EXPECT_EQ(conv_workspace_limit(141 * GiB, std::nullopt), GiB);        // an H200: the gibibyte
  EXPECT_EQ(conv_workspace_limit(4 * GiB, std::nullopt), 512 * MiB);    // a small device: an eighth of it
  EXPECT_EQ(requested_workspace_limit(nullptr), std::nullopt);
  EXPECT_EQ(requested_workspace_limit(""), std::nullopt);
  EXPECT_EQ(requested_workspace_limit("16384"), 16 * GiB);
  EXPECT_EQ(conv_workspace_limit(141 * GiB, requested_workspace_limit("16384")), 16 * GiB);  // asked: taken as is
  EXPECT_EQ(requested_workspace_limit("1"), MiB);
  EXPECT_EQ(requested_workspace_limit("1048576"), kMaxWorkspaceMiB * MiB);
  for (const char* wrong : {"0", "-1", "1.5", "16G", " 64", "64 ", "1048577", "99999999999999999999999"}) {
    try {
      requested_workspace_limit(wrong);
      ADD_FAILURE() << wrong << " was taken";
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()), "DLBENCH_CUDA_WORKSPACE_MIB: \"" + std::string(wrong) +
                                           "\" is not a whole number of MiB from 1 to 1048576");
    }
  }
}

TEST(ConvAlgorithms, AlignmentIsTheLargestPowerOfTwoUpTo256) {
  alignas(256) static float block[128];
  EXPECT_EQ(alignment_of(block), 256u);
  EXPECT_EQ(alignment_of(block + 16), 64u);   // the arena's alignment
  EXPECT_EQ(alignment_of(block + 1), 4u);     // a parameter at an odd float offset
  EXPECT_EQ(alignment_of(block + 2), 8u);
  EXPECT_EQ(alignment_of(block + 64), 256u);
}

// DLBENCH_LOG_ALGORITHMS's line: the convolution and what was chosen, in cuDNN's names.
TEST(ConvAlgorithms, AChoiceIsDescribedInCudnnsNames) {
  ConvAlgorithmKey key;
  key.input = {64, 256, 56, 56};
  key.out_channels = 64;
  key.kernel = 1;
  key.stride = 1;
  key.padding = 0;
  key.dtype = DType::fp16;
  key.layout = Layout::nhwc;
  key.tensor_cores = true;
  key.pass = ConvPass::backward_filter;
  EXPECT_EQ(describe_choice(key, {CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, 4u << 20, CUDNN_TENSOR_OP_MATH}),
            "backward-filter fp16 nhwc 64x256x56x56 -> 64 1x1 stride 1 pad 0: ALGO_1, tensor ops, 4.0 MiB workspace");
  key.pass = ConvPass::forward;
  key.dtype = DType::fp32;
  key.layout = Layout::nchw;
  key.kernel = {3, 1};
  key.padding = {1, 0};
  key.dilation = 2;
  EXPECT_EQ(describe_choice(key, {CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED, 1536u << 10, CUDNN_FMA_MATH}),
            "forward fp32 nchw 64x256x56x56 -> 64 3x1 stride 1 pad 1x0 dilation 2: WINOGRAD_NONFUSED, fma, 1.5 MiB workspace");
  EXPECT_EQ(algorithm_name(ConvPass::backward_data, CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING), "FFT_TILING");
  EXPECT_EQ(algorithm_name(ConvPass::backward_filter, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING), "FFT_TILING");
  EXPECT_EQ(algorithm_name(ConvPass::forward, 42), "algorithm 42");
}

}  // namespace
}  // namespace dlbench::worker

namespace dlbench::worker {
namespace {

// The self-test stops at a fault that poisons the CUDA context (every later call fails with it),
// and goes on after an error that leaves the context usable.
TEST(CudaErrors, AKernelsFaultPoisonsTheContextAndABadCallDoesNot) {
  for (const cudaError_t fault : {cudaErrorMisalignedAddress, cudaErrorIllegalAddress, cudaErrorLaunchFailure,
                                  cudaErrorIllegalInstruction, cudaErrorAssert}) {
    EXPECT_TRUE(cuda_error_poisons_context(fault)) << cudaGetErrorName(fault);
  }
  for (const cudaError_t usable : {cudaSuccess, cudaErrorNotReady, cudaErrorInvalidValue, cudaErrorMemoryAllocation,
                                   cudaErrorNoDevice, cudaErrorInvalidConfiguration}) {
    EXPECT_FALSE(cuda_error_poisons_context(usable)) << cudaGetErrorName(usable);
  }
}

}  // namespace
}  // namespace dlbench::worker
