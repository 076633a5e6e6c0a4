// The NCCL communicator on a real GPU. Skips, saying why, where there is none.
#include <cuda_runtime.h>

#include <vector>

#include <gtest/gtest.h>

#include "cuda/cuda_check.hpp"
#include "cuda/nccl_communicator.hpp"

namespace dlbench::worker {
namespace {

TEST(NcclCommunicator, SumsAndBroadcastsDeviceBuffers) {
  if (cuda_device_count() == 0) GTEST_SKIP() << "no CUDA device on this machine: the NCCL test needs a GPU";
  int argc = 0;
  char** argv = nullptr;
  auto comm = make_nccl_communicator(&argc, &argv, 0);
  EXPECT_EQ(comm->name(), "nccl");
  constexpr std::int64_t n = (1 << 20) + 3;  // not a multiple of anything NCCL likes
  std::vector<float> host(n);
  for (std::int64_t i = 0; i < n; ++i) host[static_cast<std::size_t>(i)] = static_cast<float>(i % 1000) * 0.5f;
  float* device = nullptr;
  DLBENCH_CUDA_CHECK(cudaMalloc(&device, n * sizeof(float)));
  DLBENCH_CUDA_CHECK(cudaMemcpy(device, host.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  DLBENCH_CUDA_CHECK(cudaDeviceSynchronize());
  comm->start_allreduce(device, n / 2, Reduction::sum);
  comm->start_allreduce(device + n / 2, n - n / 2, Reduction::average);
  comm->complete_reductions();  // orders the default stream (the compute stream here) after them
  std::vector<float> summed(n);
  DLBENCH_CUDA_CHECK(cudaMemcpy(summed.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (std::int64_t i = 0; i < n; ++i) {
    const float factor = i < n / 2 ? static_cast<float>(comm->size()) : 1.0f;  // the sum, then the mean
    ASSERT_FLOAT_EQ(summed[static_cast<std::size_t>(i)], host[static_cast<std::size_t>(i)] * factor);
  }
  comm->broadcast(device, n, 0);
  DLBENCH_CUDA_CHECK(cudaFree(device));
}

TEST(NcclCommunicator, CheckMacroNamesFileAndLine) {
  try {
    DLBENCH_CUDA_CHECK(cudaErrorInvalidValue);
    FAIL();
  } catch (const CudaError& e) {
    EXPECT_NE(std::string(e.what()).find("nccl_communicator_test.cpp:"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("CUDA: cudaErrorInvalidValue"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace dlbench::worker
