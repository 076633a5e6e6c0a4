// Data parallelism over MPI, run by ctest under mpirun with 2, 3 and 4 ranks.
#include <mpi.h>

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
