// The methodology queues the measured steps and reads the time once per repeat: nothing waits for
// the device between steps, step times come from the marks, and the loss is not read per step.
#include <cmath>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cpu/cpu_backend.hpp"
#include "dlbench/core/statistics.hpp"
#include "delegating_backend.hpp"
#include "methodology.hpp"
#include "models/small_conv_net.hpp"
#include "trainer.hpp"

namespace dlbench::worker {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;

// Marks whose intervals are given, on a device that is always behind (nothing is done until
// waited for): each mark is remembered with the number of steps queued before it, so the test
// sees where the methodology put them.
class ScriptedMarks final : public StepMarks {
 public:
  ScriptedMarks(const int& steps, std::vector<std::vector<double>> script) : steps_(steps), script_(std::move(script)) {}
  void mark() override {
    marked_at.push_back(steps_);
    ++pending_;
  }
  std::vector<double> drain(bool wait) override {
    if (!wait) return {};
    if (next_ >= script_.size()) throw std::runtime_error("more reads than scripted");
    std::vector<double> out = script_[next_++];
    out.resize(pending_ > 0 ? pending_ - 1 : 0, 0.0);  // one fewer than the marks, as a real one
    pending_ = 0;
    ++reads;
    return out;
  }
  std::vector<int> marked_at;
  int reads = 0;

 private:
  const int& steps_;
  std::vector<std::vector<double>> script_;
  std::size_t next_ = 0;
  std::size_t pending_ = 0;
};

TEST(Methodology, QueuesMeasuredStepsAndTimesThemFromTheMarks) {
  int steps = 0, synchronizations = 0;
  ScriptedMarks marks(steps, {{0.5, 0.25}, {0.1, 0.2, 0.3}, {9, 9}, {0.4, 0.4, 0.2}});
  std::vector<std::string> reported;
  Workload workload;
  workload.step = [&] { ++steps; };
  workload.synchronize = [&] { ++synchronizations; };
  workload.marks = &marks;
  workload.on_step = [&](int repeat, bool measured, double s) {
    reported.push_back(std::to_string(repeat) + (measured ? "m" : "w") + std::to_string(s).substr(0, 4));
  };
  const Methodology methodology{2, 3, 2, Statistic::median, {}};
  const auto repeats = run_methodology(workload, methodology, 64);
  ASSERT_EQ(repeats.size(), 2u);
  EXPECT_EQ(steps, 10);
  // One wait per repeat before the measured steps; the marks' read is the other.
  EXPECT_EQ(synchronizations, 2);
  EXPECT_EQ(marks.reads, 4);  // the waiting reads: one per phase
  // A mark before the first step of each phase and after every step.
  EXPECT_THAT(marks.marked_at, ElementsAre(0, 1, 2, 2, 3, 4, 5, 5, 6, 7, 7, 8, 9, 10));
  EXPECT_THAT(repeats[0].step_seconds, ElementsAre(0.1, 0.2, 0.3));
  EXPECT_DOUBLE_EQ(repeats[0].measured_seconds, 0.6);
  EXPECT_DOUBLE_EQ(repeats[0].throughput, 64 * 3 / 0.6);
  EXPECT_DOUBLE_EQ(repeats[1].throughput, 64 * 3 / 1.0);
  EXPECT_THAT(reported, ElementsAreArray({"0w0.50", "0w0.25", "0m0.10", "0m0.20", "0m0.30", "1w9.00", "1w9.00",
                                          "1m0.40", "1m0.40", "1m0.20"}));
}

TEST(Methodology, WithoutObserversWarmUpIsNotMarked) {
  int steps = 0, synchronizations = 0;
  ScriptedMarks marks(steps, {{0.5, 0.5}});
  Workload workload{[&] { ++steps; }, [&] { ++synchronizations; }, {}, {}, &marks};
  const auto repeats = run_methodology(workload, Methodology{5, 2, 1, Statistic::median, {}}, 8);
  EXPECT_EQ(synchronizations, 1);
  EXPECT_THAT(marks.marked_at, ElementsAre(5, 6, 7));
  EXPECT_DOUBLE_EQ(repeats.at(0).throughput, 8 * 2 / 1.0);
}

// The slowest rank's times replace this rank's before throughput is computed.
TEST(Methodology, SlowestRankSpeaksForTheJob) {
  int steps = 0;
  ScriptedMarks marks(steps, {{0.1, 0.1}});
  Workload workload{[&] { ++steps; }, [] {}, [](std::vector<double>& s) {
                      for (double& v : s) v *= 2;
                    },
                    {}, &marks};
  const auto repeats = run_methodology(workload, Methodology{0, 2, 1, Statistic::median, {}}, 4);
  EXPECT_THAT(repeats.at(0).step_seconds, ElementsAre(0.2, 0.2));
  EXPECT_DOUBLE_EQ(repeats.at(0).throughput, 4 * 2 / 0.4);
}

// The energy counter is read after the warm-up's synchronisation and after the measured steps'
// wait, so a repeat's energy is its measured steps' alone: the warm-up's draw is left out.
TEST(Methodology, EnergyCoversTheMeasuredStepsOnly) {
  int steps = 0;
  double counter = 1000.0;  // joules; each step draws 10, with nothing queued (a host-clock device)
  std::vector<int> read_at;
  Workload workload;
  workload.step = [&] {
    ++steps;
    counter += 10.0;
  };
  workload.synchronize = [] {};
  workload.energy_joules = [&]() -> std::optional<double> {
    read_at.push_back(steps);
    return counter;
  };
  const auto repeats = run_methodology(workload, Methodology{3, 2, 2, Statistic::median, {}}, 4);
  ASSERT_EQ(repeats.size(), 2u);
  EXPECT_THAT(read_at, ElementsAre(3, 5, 8, 10));
  EXPECT_EQ(repeats[0].energy_joules, std::optional<double>(20.0));
  EXPECT_EQ(repeats[1].energy_joules, std::optional<double>(20.0));
}

// No counter, or one that went backwards (the driver reloaded): no energy for that repeat.
TEST(Methodology, NoEnergyWithoutACounterOrFromOneThatWentBack) {
  Workload workload;
  workload.step = [] {};
  workload.synchronize = [] {};
  EXPECT_EQ(run_methodology(workload, Methodology{0, 1, 1, Statistic::median, {}}, 1).at(0).energy_joules, std::nullopt);
  std::vector<std::optional<double>> readings{50.0, 80.0, 90.0, 5.0, 7.0, std::nullopt};
  std::size_t next = 0;
  workload.energy_joules = [&] { return readings.at(next++); };
  const auto repeats = run_methodology(workload, Methodology{0, 1, 3, Statistic::median, {}}, 1);
  ASSERT_EQ(repeats.size(), 3u);
  EXPECT_EQ(repeats[0].energy_joules, std::optional<double>(30.0));
  EXPECT_EQ(repeats[1].energy_joules, std::nullopt);
  EXPECT_EQ(repeats[2].energy_joules, std::nullopt);
}

// Marks that lose one are a bug, not a number.
TEST(Methodology, RefusesMarksThatDoNotMatchTheSteps) {
  class Lossy final : public StepMarks {
   public:
    void mark() override {}
    std::vector<double> drain(bool wait) override { return wait ? std::vector<double>{0.1} : std::vector<double>{}; }
  } lossy;
  Workload workload{[] {}, [] {}, {}, {}, &lossy};
  EXPECT_THROW(run_methodology(workload, Methodology{0, 3, 1, Statistic::median, {}}, 1), std::logic_error);
}

// Past methodology.repeats, another whole repeat (warm-up and measured steps) runs while the
// stability rule asks for one; each is reported like the others.
TEST(Methodology, MeasuresAgainWhileAsked) {
  int steps = 0;
  // 2 repeats of 1 measured step, then up to 3 more: 1 s, 2 s (spread), 2 s, 2 s (agree: stop).
  ScriptedMarks marks(steps, {{0}, {1.0}, {0}, {2.0}, {0}, {2.0}, {0}, {2.0}, {0}, {9.0}});
  Workload workload{[&] { ++steps; }, [] {}, {}, [](int, bool, double) {}, &marks};
  const Methodology m{1, 1, 2, Statistic::median, StabilitySpec{0.01, 3, false}};
  std::vector<double> measured;
  const auto repeats = run_methodology(
      workload, m, 4,
      [&](int, const RepeatMeasurement& r) {
        measured.push_back(r.throughput);
        return AfterRepeat::go_on;
      },
      [&] { return measure_again(measured, m.repeats, m.stability, *m.stability.max_cv); });
  EXPECT_THAT(measured, ElementsAre(4.0, 2.0, 2.0));
  EXPECT_EQ(repeats.size(), 3u);
  EXPECT_EQ(steps, 6);  // every repeat warms up again
  const StabilityReport report = judge_stability(measured, m.repeats, *m.stability.max_cv);
  EXPECT_EQ(report.verdict, StabilityVerdict::stable);
  EXPECT_THAT(report.discarded, ElementsAre(4.0));
}

// A caller that says stop after a repeat ends the repeats there, extra ones included: the
// repeats run so far are returned, and no step runs after them.
TEST(Methodology, StopsWhereTheCallerSaysStop) {
  int steps = 0;
  Workload workload{[&] { ++steps; }, [] {}, {}, {}};
  int seen = 0;
  const auto repeats = run_methodology(
      workload, Methodology{2, 3, 5, Statistic::median, StabilitySpec{0.01, 3, false}}, 1,
      [&](int r, const RepeatMeasurement&) {
        ++seen;
        return r == 1 ? AfterRepeat::stop : AfterRepeat::go_on;
      },
      [] { return true; });
  EXPECT_EQ(seen, 2);
  EXPECT_EQ(repeats.size(), 2u);
  EXPECT_EQ(steps, 2 * (2 + 3));
}

// Without device marks the host clock is read after a wait, once per mark.
TEST(Methodology, HostClockWaitsBeforeEachMark) {
  int synchronizations = 0;
  Workload workload{[] {}, [&] { ++synchronizations; }, {}, {}};
  const auto repeats = run_methodology(workload, Methodology{1, 4, 1, Statistic::median, {}}, 2);
  EXPECT_EQ(synchronizations, 1 + 5);  // before the measured steps, then at each of the 5 marks
  ASSERT_EQ(repeats.at(0).step_seconds.size(), 4u);
  for (const double s : repeats.at(0).step_seconds) EXPECT_GE(s, 0.0);
}

// Live metrics follow the steps as they finish: a step the device has done is reported before
// the next one is queued, not at the end of a repeat that may be long.
TEST(Methodology, FinishedStepsAreReportedWhileTheRepeatRuns) {
  std::string events;
  HostClockMarks marks([] {});  // a device that is always done: every mark is reached at once
  Workload workload{[&] { events += 's'; }, [] {}, {}, [&](int, bool measured, double) { events += measured ? 'm' : 'w'; },
                    &marks};
  run_methodology(workload, Methodology{2, 3, 1, Statistic::median, {}}, 1);
  EXPECT_EQ(events, "swswsmsmsm");
}

// Counts the loss reads: a step must queue work, not read the loss back.
class LossReadCounter final : public DelegatingBackend {
 public:
  using DelegatingBackend::DelegatingBackend;
  float last_loss() override {
    ++reads;
    return inner_.last_loss();
  }
  int reads = 0;
};

TEST(Methodology, TrainingStepsReadTheLossOnlyWhenAsked) {
  CpuBackend cpu(1);
  LossReadCounter backend(cpu);
  Trainer trainer(backend, small_conv_net(8, 8), Shape(4, 3, 8, 8), 10, {0.05f, 0.9f, 0.0f}, 1);
  const std::unique_ptr<StepMarks> marks = backend.make_step_marks();
  Workload workload{[&] { trainer.step(); }, [&] { backend.synchronize(); }, {}, {}, marks.get()};
  int repeats_seen = 0;
  const auto repeats = run_methodology(workload, Methodology{2, 3, 2, Statistic::median, {}}, 4,
                                       [&](int, const RepeatMeasurement&) {
                                         ++repeats_seen;
                                         EXPECT_TRUE(std::isfinite(trainer.last_loss()));
                                         return AfterRepeat::go_on;
                                       });
  EXPECT_EQ(trainer.steps_done(), 10u);
  EXPECT_EQ(backend.reads, repeats_seen);  // once per repeat, by the caller
  EXPECT_EQ(repeats_seen, 2);
}

}  // namespace
}  // namespace dlbench::worker
