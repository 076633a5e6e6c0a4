// Data parallelism over MPI, run by ctest under mpirun with 2, 3 and 4 ranks.
#include <mpi.h>
#include <sys/resource.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "communicator.hpp"
#include "cpu/cpu_backend.hpp"
#include "gradient_buckets.hpp"
#include "layers/batch_norm2d.hpp"
#include "layers/conv2d.hpp"
#include "layers/linear.hpp"
#include "layers/pool2d.hpp"
#include "layers/relu.hpp"
#include "rank_overflow_trace.hpp"
#include "trainer.hpp"

namespace dlbench::worker {
namespace {

Communicator* world = nullptr;

std::unique_ptr<Sequential> small_net() {
  auto net = std::make_unique<Sequential>();
  net->add<Conv2d>(3, 8, 3, 1, 1);
  net->add<BatchNorm2d>(8);
  net->add<ReLU>();
  net->add<Pool2d>(PoolKind::max, 2, 2);
  net->add<Conv2d>(8, 12, 3, 1, 1, true);
  net->add<ReLU>();
  net->add<Flatten>();
  net->add<Linear>(12 * 4 * 4, 10);
  return net;
}

// A data-parallel trainer: rank-specific data, weights from rank 0, bucketed averaging.
struct DataParallel {
  CpuBackend backend{1};
  Trainer trainer;
  std::unique_ptr<GradientBuckets> buckets;

  explicit DataParallel(std::size_t bucket_bytes, bool reduce = true)
      : trainer(backend, small_net(), Shape(4, 3, 8, 8), 10, {0.05f, 0.9f, 1e-4f}, 5,
                static_cast<std::uint64_t>(world->rank())) {
    world->broadcast(trainer.parameters().values(), trainer.parameters().elements(), 0);
    if (!reduce) return;
    buckets = std::make_unique<GradientBuckets>(*world, trainer.parameters(), bucket_bytes);
    trainer.set_gradients_ready([this](const std::vector<Parameter*>& ready) { buckets->gradients_ready(ready); });
    trainer.set_before_update([this] { buckets->finish(); });
  }
  std::vector<float> values() const {
    const auto& p = const_cast<Trainer&>(trainer).parameters();
    return std::vector<float>(p.values(), p.values() + p.elements());
  }
  std::vector<float> grads() const {
    const auto& p = const_cast<Trainer&>(trainer).parameters();
    return std::vector<float>(p.grads(), p.grads() + p.elements());
  }
};

TEST(DataParallel, RanksTrainOnDifferentData) {
  DataParallel local(1 << 20, false);
  float first = local.trainer.input().as<float>()[0];
  float others_max = first, others_min = first;
  MPI_Allreduce(&first, &others_max, 1, MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(&first, &others_min, 1, MPI_FLOAT, MPI_MIN, MPI_COMM_WORLD);
  EXPECT_NE(others_max, others_min);
}

TEST(DataParallel, WeightsIdenticalOnEveryRankAfterSteps) {
  DataParallel dp(GradientBuckets::kDefaultBucketBytes);
  for (int i = 0; i < 4; ++i) dp.trainer.step();
  std::vector<float> mine = dp.values(), highest(mine.size()), lowest(mine.size());
  MPI_Allreduce(mine.data(), highest.data(), static_cast<int>(mine.size()), MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(mine.data(), lowest.data(), static_cast<int>(mine.size()), MPI_FLOAT, MPI_MIN, MPI_COMM_WORLD);
  EXPECT_EQ(std::memcmp(highest.data(), lowest.data(), mine.size() * sizeof(float)), 0);
  // And the weights moved: training happened.
  DataParallel fresh(GradientBuckets::kDefaultBucketBytes);
  EXPECT_NE(fresh.values(), mine);
}

TEST(DataParallel, AveragedGradientIsTheMeanOfTheRanksGradients) {
  DataParallel alone(1 << 20, false);
  alone.trainer.compute_gradients();
  std::vector<float> local = alone.grads(), expected(local.size());
  MPI_Allreduce(local.data(), expected.data(), static_cast<int>(local.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  for (float& g : expected) g /= static_cast<float>(world->size());

  DataParallel dp(1 << 10);  // many small buckets
  dp.trainer.compute_gradients();
  const std::vector<float> averaged = dp.grads();
  ASSERT_EQ(averaged.size(), expected.size());
  for (std::size_t i = 0; i < averaged.size(); ++i) {
    ASSERT_NEAR(averaged[i], expected[i], 1e-6f * (1.0f + std::fabs(expected[i]))) << i;
  }
  // With more than one rank the average differs from this rank's own gradient.
  if (world->size() > 1) {
    EXPECT_NE(averaged, local);
  }
}

TEST(DataParallel, BucketSizeDoesNotChangeTheResult) {
  std::vector<std::vector<float>> results;
  std::vector<std::size_t> bucket_counts;
  for (const std::size_t bytes : {std::size_t{256}, std::size_t{3000}, std::size_t{64} << 20}) {
    DataParallel dp(bytes);
    for (int i = 0; i < 3; ++i) dp.trainer.step();
    results.push_back(dp.values());
    bucket_counts.push_back(dp.buckets->buckets().size());
  }
  EXPECT_GT(bucket_counts[0], bucket_counts[1]);
  EXPECT_EQ(bucket_counts[2], 1u);
  for (std::size_t r = 1; r < results.size(); ++r) {
    for (std::size_t i = 0; i < results[0].size(); ++i) {
      ASSERT_NEAR(results[r][i], results[0][i], 1e-5f * (1.0f + std::fabs(results[0][i]))) << "bucket config " << r;
    }
  }
}

TEST(DataParallel, BucketsCoverTheGradientsExactlyLastLayerFirst) {
  DataParallel dp(3000);
  const auto& buckets = dp.buckets->buckets();
  const std::int64_t total = dp.trainer.parameters().elements();
  std::int64_t end = total;
  for (const auto& b : buckets) {  // contiguous slices from the end of the flat buffer
    EXPECT_EQ(b.offset + b.count, end);
    EXPECT_GT(b.count, 0);
    end = b.offset;
  }
  EXPECT_EQ(end, 0);
}

// Texts of any length, an empty one too, reach every rank in rank order.
TEST(DataParallel, EveryRankGathersEveryRanksText) {
  // Rank 1's empty; the others 300 characters longer a rank, past the 256 hosts() once allowed.
  const auto text_of = [](int r) {
    return r == 1 ? std::string() : std::string(static_cast<std::size_t>(300 * r + 1), static_cast<char>('a' + r));
  };
  const std::vector<std::string> all = world->allgather(text_of(world->rank()));
  ASSERT_EQ(static_cast<int>(all.size()), world->size());
  for (int r = 0; r < world->size(); ++r) {
    EXPECT_EQ(all[static_cast<std::size_t>(r)], text_of(r)) << "rank " << r << "'s text, as rank " << world->rank()
                                                            << " gathered it";
  }
  EXPECT_EQ(static_cast<int>(world->hosts().size()), world->size());
}

// Reductions larger than the communicator's window (pieces of 16 MiB, two in flight): three
// buffers of 40, 0.5 and 24 MiB, the first two summed and the last averaged, with a blocking
// collective (max) asked before they are completed (the communicator finishes them first, as MPI
// orders collectives; Open MPI itself would tell the two kinds apart by tag): each element's sum is
// exact (small integers), on every rank.
TEST(DataParallel, ReductionsPastTheWindowSumExactlyBesideAnotherCollective) {
  const int n = world->size();
  const int r = world->rank();
  std::vector<std::vector<float>> buffers = {std::vector<float>(10'000'000), std::vector<float>(131'072),
                                             std::vector<float>(6'291'456)};
  for (auto& b : buffers) {
    for (std::size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>(i % 1000) * static_cast<float>(r + 1);
  }
  world->start_allreduce(buffers[0].data(), static_cast<std::int64_t>(buffers[0].size()), Reduction::sum);
  world->progress();
  world->start_allreduce(buffers[1].data(), static_cast<std::int64_t>(buffers[1].size()), Reduction::sum);
  world->start_allreduce(buffers[2].data(), static_cast<std::int64_t>(buffers[2].size()), Reduction::average);
  double slowest = r;
  world->max(&slowest, 1);
  EXPECT_EQ(slowest, n - 1);
  world->complete_reductions();
  const float ranks_sum = static_cast<float>(n * (n + 1) / 2);
  for (std::size_t k = 0; k < 2; ++k) {
    for (std::size_t i = 0; i < buffers[k].size(); ++i) {
      ASSERT_EQ(buffers[k][i], static_cast<float>(i % 1000) * ranks_sum) << "buffer " << k << ", element " << i << ", rank " << r;
    }
  }
  for (std::size_t i = 0; i < buffers[2].size(); ++i) {  // the mean: the sum times 1/n, rounded once
    ASSERT_FLOAT_EQ(buffers[2][i], static_cast<float>(i % 1000) * ranks_sum / static_cast<float>(n)) << i << ", rank " << r;
  }
}

// The reductions' temporary buffers are reused, not faulted in again at every step: 64 MiB of
// gradient in four 16 MiB buckets, reduced over and over. Open MPI's nonblocking allreduce
// allocates a buffer as large as each reduction; with every bucket started at once glibc gave
// them back to the kernel, which faulted them in and zeroed them again: 97ef074's communicator
// cost rank 0 36,800 to 65,376 pages over these five on 2 to 4 ranks (of 16,384 a reduction at
// most), and two ranks reduced at a tenth of their speed (bench/RESULTS.md, 2026-12-06).
TEST(DataParallel, ReducingAgainFaultsInNoNewPages) {
#if defined(__SANITIZE_ADDRESS__)
  GTEST_SKIP() << "built with AddressSanitizer, whose malloc refuses glibc's settings and keeps freed memory in "
                  "quarantine";
#endif
  constexpr std::int64_t kBucket = 4 << 20;  // elements: 16 MiB
  std::vector<float> grads(4 * kBucket, 1.0f);
  const auto reduce = [&] {
    for (int b = 3; b >= 0; --b) {
      world->start_allreduce(grads.data() + b * kBucket, kBucket, Reduction::average);
      world->progress();
    }
    world->complete_reductions();
  };
  const auto minor_faults = [] {
    rusage usage{};
    getrusage(RUSAGE_SELF, &usage);
    return usage.ru_minflt;
  };
  for (int i = 0; i < 3; ++i) reduce();  // the first ones make the buffers
  const long before = minor_faults();
  for (int i = 0; i < 5; ++i) reduce();
  const long faults = minor_faults() - before;
  EXPECT_LT(faults, 1024) << "rank " << world->rank() << ": " << faults
                          << " pages faulted in over 5 reductions of 64 MiB";
  EXPECT_EQ(grads[12345], 1.0f);  // the mean of ones
  if (world->size() > 1) {
    EXPECT_EQ(world->reduction_heap(), "glibc.malloc.mmap_threshold=33554432:glibc.malloc.top_pad=67108864");
  }
}

// A GPU case's energy over a repeat: every rank's reading summed, on every rank; none anywhere
// where one rank lacks it (its GPU has no counter).
TEST(DataParallel, EveryRanksReadingIsSummedOnlyWhereEveryRankHasOne) {
  const int n = world->size();
  const double mine = 100.25 * (world->rank() + 1) + 0.1;
  EXPECT_DOUBLE_EQ(sum_where_every_rank_has(mine, *world).value_or(-1), 100.25 * n * (n + 1) / 2 + 0.1 * n);
  const std::optional<double> all_but_the_last = world->rank() == n - 1 ? std::nullopt : std::optional(mine);
  EXPECT_EQ(sum_where_every_rank_has(all_but_the_last, *world), std::nullopt) << "rank " << world->rank();
}

// amp's first overflow after the repeats, traced on every rank (lossScaling.overflow): the last
// rank's batch holds an inf, so every rank skips the step (the reduced gradients hold it), but
// only that rank's replay meets it. The text every rank puts together, rank 0's for its result,
// names that rank right after the skipped step, and the others as finite.
TEST(DataParallel, AnOverflowInOneRanksBatchIsTracedToThatRank) {
  DataParallel dp(GradientBuckets::kDefaultBucketBytes);
  dp.trainer.use_loss_scaling({65536.0f, 2.0f, 0.5f, 1000});
  const int last = world->size() - 1;
  if (world->rank() == last) {
    const float inf = std::numeric_limits<float>::infinity();
    dp.backend.copy_from_host(static_cast<float*>(dp.trainer.input().data) + 5, &inf, sizeof inf);
  }
  int steps = 0;
  const Trainer::OverflowTrace mine = dp.trainer.trace_first_overflow([&] { dp.trainer.step(); ++steps; }, 3);
  EXPECT_EQ(steps, 1) << "on rank " << world->rank() << ": " << mine.said;
  EXPECT_EQ(mine.replay, world->rank() == last ? Trainer::ReplayFinding::located : Trainer::ReplayFinding::all_finite)
      << "on rank " << world->rank() << ": " << mine.said;
  const std::string text = compose_rank_traces(gather_traces(*world, mine));
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  ASSERT_EQ(lines.size(), 3u) << text;
  EXPECT_EQ(lines[0].rfind("rank 0: untimed step 1 skipped, loss scale now 32768: loss ", 0), 0u) << text;
  EXPECT_NE(lines[0].find(" parameters' gradients not finite, nearest the loss first: "), std::string::npos) << text;
  EXPECT_EQ(lines[1].rfind("rank " + std::to_string(last) + ": replayed at loss scale 65536: the batch holds 1 inf, 0 NaN "
                           "of 768; forward: first non-finite layer output: 0 (Conv2d), ", 0),
            0u)
      << text;
  std::vector<int> others;
  for (int r = 0; r < last; ++r) others.push_back(r);
  EXPECT_EQ(lines[2], rank_list(others) + ": every layer output and input gradient finite in " +
                          (others.size() == 1 ? "its replay" : "their replays"))
      << text;
  // Every rank put the same text together.
  for (const std::string& theirs : world->allgather(text)) EXPECT_EQ(theirs, text);
}

}  // namespace
}  // namespace dlbench::worker

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  auto communicator = dlbench::worker::make_mpi_communicator(&argc, &argv);
  dlbench::worker::world = communicator.get();
  // Not a gtest: a rank that aborts ends every rank, the one waiting in a collective for it too,
  // with its exit code (the worker's way out of a failure the ranks did not agree on).
  if (argc > 1 && std::strcmp(argv[1], "--abort-from-the-last-rank") == 0) {
    if (communicator->rank() == communicator->size() - 1) communicator->abort(7);
    communicator->allgather("waiting for the last rank, which never comes");
    std::printf("FAILED: rank %d left the allgather\n", communicator->rank());
    return 1;
  }
  // Only rank 0 prints gtest's progress; failures on any rank still fail mpirun.
  if (communicator->rank() != 0) {
    auto& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS();
  int any_failed = 0;
  MPI_Allreduce(&failed, &any_failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (communicator->rank() == 0) {
    std::printf("%s: data-parallel tests on %d ranks\n", any_failed != 0 ? "FAILED" : "PASSED", communicator->size());
  }
  return any_failed;
}
