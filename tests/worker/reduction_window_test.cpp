// The bounded window of host reductions (reduction_window.hpp), with requests that end when the
// test says so: pieces cut as asked, never more in flight than the window holds, started in the
// order added whatever order they end in, and every element reduced once.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <vector>

#include "reduction_window.hpp"

namespace dlbench::worker {
namespace {

// A library whose reductions end only when the test ends them (or a wait does); ending one
// doubles its data, the sum over two ranks that hold the same values.
struct FakeLibrary {
  struct Started {
    float* data;
    std::int64_t count;
    bool ended = false;
  };
  std::vector<Started> started;
  std::size_t most_running = 0;
  std::size_t waits = 0;

  void end(std::size_t id) {
    Started& s = started[id];
    for (std::int64_t i = 0; i < s.count; ++i) s.data[i] *= 2.0f;
    s.ended = true;
  }
  std::size_t running() const {
    std::size_t n = 0;
    for (const Started& s : started) n += s.ended ? 0 : 1;
    return n;
  }
  ReductionWindow<std::size_t> window(std::int64_t piece, std::size_t in_flight) {
    return ReductionWindow<std::size_t>(
        piece, in_flight,
        [this](float* data, std::int64_t count) {
          started.push_back({data, count});
          most_running = std::max(most_running, running());
          return started.size() - 1;
        },
        [this](std::size_t& id) { return started[id].ended; },
        [this](std::size_t& id) {
          ++waits;
          end(id);
        });
  }
};

TEST(ReductionWindow, PiecesAreCutAsAskedAndStartInOrderWithinTheWindow) {
  FakeLibrary library;
  auto window = library.window(4, 2);
  std::vector<float> a(10), b(3);
  window.add(a.data(), 10);  // 4 + 4 + 2
  window.add(b.data(), 3);   // 3
  ASSERT_EQ(library.started.size(), 2u) << "only what the window holds starts";
  EXPECT_EQ(window.running(), 2u);
  EXPECT_EQ(window.waiting(), 2u);
  window.complete();
  ASSERT_EQ(library.started.size(), 4u);
  const std::vector<std::pair<float*, std::int64_t>> expected = {
      {a.data(), 4}, {a.data() + 4, 4}, {a.data() + 8, 2}, {b.data(), 3}};
  for (std::size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(library.started[i].data, expected[i].first) << i;
    EXPECT_EQ(library.started[i].count, expected[i].second) << i;
    EXPECT_TRUE(library.started[i].ended) << i;
  }
  EXPECT_EQ(library.most_running, 2u);
  EXPECT_EQ(window.running(), 0u);
  EXPECT_EQ(window.waiting(), 0u);
}

// A later piece that ends first frees its place as well as an earlier one would.
TEST(ReductionWindow, ProgressStartsWaitingPiecesWhereverOneEnded) {
  FakeLibrary library;
  auto window = library.window(1, 2);
  std::vector<float> data(5);
  window.add(data.data(), 5);
  ASSERT_EQ(library.started.size(), 2u);
  window.progress();  // nothing ended: nothing more starts
  EXPECT_EQ(library.started.size(), 2u);
  library.started[1].ended = true;
  window.progress();
  ASSERT_EQ(library.started.size(), 3u);
  EXPECT_EQ(library.started[2].data, data.data() + 2) << "the next in the order added";
  EXPECT_EQ(window.running(), 2u);
  library.started[0].ended = true;
  library.started[2].ended = true;
  window.progress();
  EXPECT_EQ(library.started.size(), 5u);
  EXPECT_EQ(library.waits, 0u) << "progress never waits";
  window.complete();
  EXPECT_EQ(library.waits, 2u);
  EXPECT_LE(library.most_running, 2u);
}

// BERT-base's gradient as the worker adds it, an element for each MiB: sixteen buckets of 25,
// pieces of 16, two in flight; every element in exactly one piece.
TEST(ReductionWindow, EveryElementIsInExactlyOnePiece) {
  FakeLibrary library;
  constexpr std::int64_t kPiece = 16;
  auto window = library.window(kPiece, 2);
  constexpr std::int64_t kBucket = 25;
  std::vector<float> grads(16 * kBucket);
  for (int b = 15; b >= 0; --b) {  // last layer first, as backward makes them
    window.add(grads.data() + b * kBucket, kBucket);
    window.progress();
  }
  window.complete();
  std::vector<int> covered(grads.size(), 0);
  for (const auto& s : library.started) {
    EXPECT_LE(s.count, kPiece);
    for (std::int64_t i = 0; i < s.count; ++i) ++covered[static_cast<std::size_t>(s.data - grads.data() + i)];
  }
  EXPECT_EQ(std::count(covered.begin(), covered.end(), 1), static_cast<std::ptrdiff_t>(covered.size()));
  EXPECT_EQ(library.started.size(), 32u);  // 16 + 9 a bucket
  EXPECT_EQ(library.most_running, 2u);
}

// The mean's scale falls on each piece once, when it ends (in progress or in complete), never
// on a piece still running or on a reduction added without one.
TEST(ReductionWindow, APieceIsScaledOnceWhenItEndsAndNotBefore) {
  FakeLibrary library;
  auto window = library.window(2, 2);
  std::vector<float> mean = {1, 2, 3, 4, 5}, sum = {6, 7};
  window.add(mean.data(), 5, 0.5f);  // pieces [0, 2) [2, 4) [4, 5)
  window.add(sum.data(), 2);
  ASSERT_EQ(library.started.size(), 2u);
  library.end(1);
  EXPECT_EQ(mean[2], 6.0f) << "ended, not yet seen by the window";
  window.progress();
  EXPECT_EQ(mean[2], 3.0f) << "scaled by the progress that saw it end";
  EXPECT_EQ(mean[3], 4.0f);
  EXPECT_EQ(mean[0], 1.0f) << "still running: untouched";
  window.progress();  // nothing more ended: nothing scaled again
  EXPECT_EQ(mean[2], 3.0f);
  window.complete();
  EXPECT_EQ(mean, (std::vector<float>{1, 2, 3, 4, 5})) << "every piece scaled exactly once";
  EXPECT_EQ(sum, (std::vector<float>{12, 14})) << "a sum is left as the library reduced it";
}

TEST(ReductionWindow, NothingAddedIsNothingStarted) {
  FakeLibrary library;
  auto window = library.window(8, 2);
  window.add(nullptr, 0);
  window.progress();
  window.complete();
  EXPECT_TRUE(library.started.empty());
}

// A communicator destroyed mid-step waits for what it started and starts nothing more.
TEST(ReductionWindow, AbandonWaitsForTheRunningAndDropsTheWaiting) {
  FakeLibrary library;
  auto window = library.window(2, 1);
  std::vector<float> data(6);
  window.add(data.data(), 6);
  window.abandon();
  EXPECT_EQ(library.started.size(), 1u);
  EXPECT_TRUE(library.started[0].ended);
  EXPECT_EQ(window.running(), 0u);
  EXPECT_EQ(window.waiting(), 0u);
}

TEST(ReductionWindow, AWindowThatHoldsNothingIsRefused) {
  FakeLibrary library;
  EXPECT_THROW(library.window(0, 2), std::invalid_argument);
  EXPECT_THROW(library.window(4, 0), std::invalid_argument);
}

}  // namespace
}  // namespace dlbench::worker
