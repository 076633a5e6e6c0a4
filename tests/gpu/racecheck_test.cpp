// The race check itself (dlbench_cuda_kernels_racecheck_tests: the kernels and their tests built
// under ThreadSanitizer, each emulated thread one of its fibers; cuda_emulation.cpp). Shared memory
// that one thread writes and another reads with no barrier between them is reported, in either
// thread order, and so is a warp that trusts a shuffle to order memory; the same kernels with their
// barriers run clean, as every other kernel test in this binary must.
#include "cuda/emulation/cuda_emulation.hpp"

#include <vector>

#include <gtest/gtest.h>

#include "cuda/warp_reduce.cuh"
#include "emulated_kernel_test.hpp"

// A race ends the process at once, with ThreadSanitizer's report: a kernel test that races fails
// loudly rather than printing a warning among passes.
extern "C" const char* __tsan_default_options() { return "halt_on_error=1:exitcode=66"; }

namespace dlbench::worker {
namespace {

using cuda_emulation::ThreadOrder;
using emulated_kernel_test::in_order;

// Thread 0 writes, thread 1 reads: with the barrier between them, or without.
__global__ void publish_kernel(bool barrier, int* seen) {
  __shared__ int value;
  if (threadIdx.x == 0) value = 7;
  if (barrier) __syncthreads();
  if (threadIdx.x == 1) *seen = value;
  if (!barrier) __syncthreads();
}

int publish(ThreadOrder order, bool barrier) {
  return in_order(order, [&] {
    int seen = -1;
    cuda_emulation::launch(publish_kernel, dim3(2), dim3(32), 0, nullptr, barrier, &seen);
    return seen;
  });
}

TEST(CudaKernelsRacecheck, AReadOfSharedMemoryWithNoBarrierAfterTheWriteIsReportedInEitherOrder) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EQ(publish(ThreadOrder::ascending, true), 7);
  EXPECT_EQ(publish(ThreadOrder::descending, true), 7);
  // Ascending, the write comes first and the value read is right: only the check sees the race.
  EXPECT_DEATH(publish(ThreadOrder::ascending, false), "ThreadSanitizer: data race");
  EXPECT_DEATH(publish(ThreadOrder::descending, false), "ThreadSanitizer: data race");
}

// Each lane writes its slot, then reads its neighbour's after a shuffle or after __syncwarp: a
// shuffle exchanges registers and orders no memory.
__global__ void neighbour_kernel(bool warp_barrier, int* out) {
  __shared__ int slot[32];
  slot[threadIdx.x] = static_cast<int>(threadIdx.x) * 3;
  if (warp_barrier) {
    __syncwarp();
  } else {
    (void)__shfl_xor_sync(kernels::kFullWarp, 0, 1);
  }
  out[threadIdx.x] = slot[(threadIdx.x + 1) % 32];
}

TEST(CudaKernelsRacecheck, AShuffleOrdersNoMemoryAndSyncwarpDoes) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  std::vector<int> out(32, -1);
  cuda_emulation::launch(neighbour_kernel, dim3(1), dim3(32), 0, nullptr, true, out.data());
  for (int lane = 0; lane < 32; ++lane) EXPECT_EQ(out[static_cast<std::size_t>(lane)], (lane + 1) % 32 * 3);
  EXPECT_DEATH(cuda_emulation::launch(neighbour_kernel, dim3(1), dim3(32), 0, nullptr, false, out.data()),
               "ThreadSanitizer: data race");
}

// Blocks run one after another here, and a block's __shared__ variables are a static object the
// next block reuses: what a block leaves there is not a race with the next (on a GPU each block has
// its own), nor is the host's reading of what a launch wrote.
TEST(CudaKernelsRacecheck, BlocksReusingSharedMemoryAndTheHostReadingResultsAreNotRaces) {
  std::vector<float> x(4 * 256), sums(4, 0.0f);
  for (std::size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 4);
  for (const ThreadOrder order : {ThreadOrder::ascending, ThreadOrder::descending}) {
    in_order(order, [&] {
      cuda_emulation::launch(
          +[](const float* values, float* out) {
            const float total = kernels::block_sum(values[blockIdx.x * blockDim.x + threadIdx.x]);
            if (threadIdx.x == 0) out[blockIdx.x] = total;
          },
          dim3(4), dim3(256), 0, nullptr, x.data(), sums.data());
      return 0;
    });
    for (const float s : sums) EXPECT_EQ(s, 384.0f);  // 0 + 1 + 2 + 3, 64 times over
  }
}

}  // namespace
}  // namespace dlbench::worker
