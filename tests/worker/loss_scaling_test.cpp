// Dynamic loss scaling, on the CPU: the scaler's rules, the backend's check moving the state on
// by the same rules, and the trainer under it — scaling by a power of two changes no bit of a
// clean trajectory; a step whose gradients hold an inf or NaN is skipped with the weights and
// optimizer state untouched and the scale halved; clean steps grow the scale back; Adam's bias
// corrections count applied updates only.
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cpu/cpu_backend.hpp"
#include "loss_scaler.hpp"
#include "models/bert.hpp"
#include "models/small_conv_net.hpp"
#include "rank_overflow_trace.hpp"
#include "trainer.hpp"

namespace dlbench::worker {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(LossScaler, GrowsAfterTheIntervalOfCleanStepsAndBacksOffOnOverflow) {
  LossScaler scaler({1024.0f, 2.0f, 0.5f, 3});
  EXPECT_TRUE(scaler.record_step(true));
  EXPECT_TRUE(scaler.record_step(true));
  EXPECT_EQ(scaler.scale(), 1024.0f);
  EXPECT_TRUE(scaler.record_step(true));  // the third clean step in a row
  EXPECT_EQ(scaler.scale(), 2048.0f);
  EXPECT_EQ(scaler.clean_streak(), 0);
  EXPECT_TRUE(scaler.record_step(true));
  EXPECT_FALSE(scaler.record_step(false));  // overflow: skip, halve, streak restarts
  EXPECT_EQ(scaler.scale(), 1024.0f);
  EXPECT_EQ(scaler.clean_streak(), 0);
  EXPECT_EQ(scaler.skipped_steps(), 1);
  EXPECT_FALSE(scaler.record_step(false));
  EXPECT_EQ(scaler.scale(), 512.0f);
  EXPECT_EQ(scaler.skipped_steps(), 2);
  for (int i = 0; i < 3; ++i) scaler.record_step(true);
  EXPECT_EQ(scaler.scale(), 1024.0f);
}

TEST(LossScaler, NeverGrowsIntoInfinityNorBacksOffToZero) {
  LossScaler big({std::numeric_limits<float>::max(), 2.0f, 0.5f, 1});
  big.record_step(true);
  EXPECT_EQ(big.scale(), std::numeric_limits<float>::max());
  LossScaler small({std::numeric_limits<float>::min(), 2.0f, 0.5f, 1});
  small.record_step(false);
  EXPECT_GT(small.scale(), 0.0f);
}

TEST(LossScaler, RefusesOutOfRangeSettingsNamingThem) {
  using ::testing::HasSubstr;
  const auto message = [](LossScalingConfig c) {
    try {
      LossScaler s(c);
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_THAT(message({0.0f, 2.0f, 0.5f, 10}), HasSubstr("initialScale"));
  EXPECT_THAT(message({std::numeric_limits<float>::infinity(), 2.0f, 0.5f, 10}), HasSubstr("initialScale"));
  EXPECT_THAT(message({1.0f, 1.0f, 0.5f, 10}), HasSubstr("growthFactor"));
  EXPECT_THAT(message({1.0f, 2.0f, 1.0f, 10}), HasSubstr("backoffFactor"));
  EXPECT_THAT(message({1.0f, 2.0f, 0.5f, 0}), HasSubstr("growthInterval"));
}

struct TrainingRun {
  CpuBackend backend{2};
  Trainer trainer{backend, small_conv_net(8, 8), Shape(4, 3, 8, 8), 10, SgdConfig{0.05f, 0.9f, 1e-4f}, 3};

  std::vector<float> weights() const {
    const float* v = const_cast<Trainer&>(trainer).parameters().values();
    return {v, v + trainer.parameters().elements()};
  }
  std::vector<float> momentum() const {
    const float* m = const_cast<Trainer&>(trainer).parameters().momentum();
    return {m, m + trainer.parameters().elements()};
  }
};

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(LossScaling, APowerOfTwoScaleChangesNoBitOfACleanTrajectory) {
  TrainingRun plain, scaled;
  scaled.trainer.use_loss_scaling({1024.0f, 2.0f, 0.5f, 2});  // grows to 2048, 4096 on the way
  for (int i = 0; i < 5; ++i) {
    const float a = plain.trainer.step_and_loss(), b = scaled.trainer.step_and_loss();
    EXPECT_EQ(a, b) << "step " << i;
    EXPECT_FALSE(scaled.trainer.last_step_skipped());
  }
  EXPECT_EQ(scaled.trainer.loss_scale()->scale, 4096.0f);
  EXPECT_TRUE(same_bits(plain.weights(), scaled.weights()));
  EXPECT_TRUE(same_bits(plain.momentum(), scaled.momentum()));
}

// Writes `bad` into one gradient between backward and the update, on the chosen steps.
void inject(Trainer& trainer, float bad, std::vector<int> steps) {
  auto counter = std::make_shared<int>(0);
  trainer.set_before_update([&trainer, bad, steps, counter] {
    for (const int s : steps) {
      if (s == *counter) {
        const auto& parameters = trainer.parameters().parameters();
        trainer.parameters().grads()[parameters[parameters.size() / 2]->offset] = bad;
      }
    }
    ++*counter;
  });
}

TEST(LossScaling, AnInfOrNanGradientSkipsTheStepAndHalvesTheScale) {
  for (const float bad : {std::numeric_limits<float>::infinity(), std::numeric_limits<float>::quiet_NaN()}) {
    TrainingRun run;
    run.trainer.use_loss_scaling({65536.0f, 2.0f, 0.5f, 1000});
    inject(run.trainer, bad, {2});
    run.trainer.step();
    run.trainer.step();
    const auto weights = run.weights(), momentum = run.momentum();
    run.trainer.step();  // the poisoned one
    EXPECT_TRUE(run.trainer.last_step_skipped()) << bad;
    EXPECT_TRUE(same_bits(weights, run.weights())) << "weights changed by a skipped step (" << bad << ")";
    EXPECT_TRUE(same_bits(momentum, run.momentum())) << "momentum changed by a skipped step (" << bad << ")";
    EXPECT_EQ(run.trainer.loss_scale()->scale, 32768.0f);
    EXPECT_EQ(run.trainer.loss_scale()->skipped, 1);
    run.trainer.step();
    EXPECT_FALSE(run.trainer.last_step_skipped());
    EXPECT_FALSE(same_bits(weights, run.weights()));
    for (const float w : run.weights()) ASSERT_TRUE(std::isfinite(w));
  }
}

// A skipped step says why as it happens (DLBENCH_LOG_LOSS_SCALE): the loss, and the parameters whose
// gradients overflowed, nearest the loss first. A real-data amp run on an H200 skipped 42 of 400
// steps and its scale fell to 1.5e-8 with no word on where the overflows came from.
TEST(LossScaling, ASkippedStepNamesTheGradientsThatOverflowed) {
  TrainingRun run;
  run.trainer.use_loss_scaling({65536.0f, 2.0f, 0.5f, 1000});
  const auto& parameters = run.trainer.parameters().parameters();
  const Parameter& poisoned = *parameters[parameters.size() / 2];
  inject(run.trainer, std::numeric_limits<float>::infinity(), {1});
  std::ostringstream log;
  run.trainer.log_skipped_steps(&log);
  run.trainer.step();
  EXPECT_EQ(log.str(), "");  // a clean step says nothing
  run.trainer.step();
  EXPECT_THAT(log.str(), ::testing::StartsWith("dlbench-worker: step 2 skipped, loss scale now 32768: loss "));
  EXPECT_THAT(log.str(), HasSubstr("; 1 of " + std::to_string(parameters.size()) +
                                   " parameters' gradients not finite, nearest the loss first: " + poisoned.name +
                                   " (1 inf, 0 NaN of " + std::to_string(poisoned.value.numel()) + ")\n"));
  EXPECT_THAT(log.str(), Not(HasSubstr("the forward pass overflowed")));
  run.trainer.log_skipped_steps(nullptr);
  run.trainer.step();
  EXPECT_THAT(log.str(), Not(HasSubstr("step 3")));
}

// By its path in the network ("5.weight"), named as the model factory names them.
Parameter& parameter_named(Trainer& trainer, const std::string& name) {
  if (trainer.parameters().parameters().front()->name == "weight") name_parameters(trainer.network());
  for (Parameter* p : trainer.parameters().parameters()) {
    if (p->name == name) return *p;
  }
  throw std::logic_error("no parameter " + name);
}

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// The skipped step run again layer by layer names the layer whose output first held an inf or
// NaN: here the convolution whose filter holds an inf. The loss stays finite (the batch norm's
// NaNs for that channel fall to 0 at the ReLU), so the gradients alone would point at the batch
// norm and the convolution's filter, not at the forward pass. The replay changes neither the
// weights, nor the loss-scaling state, nor the step count.
TEST(LossScaling, ASkippedStepReplayedNamesTheLayerItsForwardPassOverflowedAt) {
  TrainingRun run;
  run.trainer.use_loss_scaling({65536.0f, 2.0f, 0.5f, 1000});
  std::ostringstream log;
  run.trainer.log_skipped_steps(&log);
  run.trainer.step();
  // Output channel 0's tap (row 1, column 2) of input channel 0.
  run.trainer.parameters().values()[parameter_named(run.trainer, "0.weight").offset + 5] =
      std::numeric_limits<float>::infinity();
  const auto weights = run.weights();
  run.trainer.step();
  const auto said = lines(log.str());
  ASSERT_EQ(said.size(), 2u) << log.str();
  EXPECT_THAT(said[0], ::testing::StartsWith("dlbench-worker: step 2 skipped, loss scale now 32768: loss "));
  EXPECT_THAT(said[0], Not(HasSubstr("the forward pass overflowed")));
  // 4 images x 8 x 8 outputs of channel 0, less the column whose tap falls on the padding (which
  // an implementation may skip, giving 0, or multiply, giving NaN): 224 infs, of 4 x 8 x 8 x 8.
  EXPECT_THAT(said[1], ::testing::StartsWith("  replayed at loss scale 65536: forward: first non-finite layer output: "
                                             "0 (Conv2d), 224 inf, "));
  EXPECT_THAT(said[1], HasSubstr(" NaN of 2048; loss "));
  EXPECT_THAT(said[1], Not(HasSubstr("the loss gradient holds")));
  EXPECT_THAT(said[1], HasSubstr("; backward: first non-finite input gradient: 1 (BatchNorm2d), "));
  EXPECT_TRUE(same_bits(weights, run.weights()));
  const auto state = run.trainer.loss_scale();
  EXPECT_EQ(state->scale, 32768.0f);
  EXPECT_EQ(state->skipped, 1);
  EXPECT_EQ(state->overflowed, 1);
  EXPECT_EQ(run.trainer.steps_done(), 2u);
}

// An overflow that only backward meets, and only at the scale the step ran at: the classifier's
// row for class 0 is 3e34 wide, so its input gradient is 3e34 x 65536 / 4 (batch 4), over
// FLT_MAX, where at the halved scale it would be 2.5e38 and finite. The replay runs at the step's
// scale, not the one the skip left.
TEST(LossScaling, ASkippedStepReplayedNamesTheLayerItsBackwardPassOverflowedAtTheScaleItRan) {
  TrainingRun run;
  run.trainer.use_loss_scaling({65536.0f, 2.0f, 0.5f, 1000});
  std::ostringstream log;
  run.trainer.log_skipped_steps(&log);
  const Parameter& classifier = parameter_named(run.trainer, "5.weight");
  const std::int64_t features = classifier.value.shape.dims[1];
  float* row0 = run.trainer.parameters().values() + classifier.offset;
  for (std::int64_t j = 0; j < features; ++j) row0[j] = 3e34f;
  run.trainer.step();
  const auto said = lines(log.str());
  ASSERT_EQ(said.size(), 2u) << log.str();
  EXPECT_THAT(said[0], ::testing::StartsWith("dlbench-worker: step 1 skipped, loss scale now 32768: loss "));
  EXPECT_THAT(said[0], Not(HasSubstr("the forward pass overflowed")));
  EXPECT_THAT(said[1],
              ::testing::StartsWith("  replayed at loss scale 65536: forward: every layer output finite; loss "));
  EXPECT_THAT(said[1], Not(HasSubstr("the loss gradient holds")));
  EXPECT_THAT(said[1], HasSubstr("; backward: first non-finite input gradient: 5 (Linear), "));
  EXPECT_THAT(said[1], ::testing::EndsWith(" NaN of " + std::to_string(4 * features)));
}

// The trace says what its replay found, for putting ranks' traces together: the backward pass's
// overflow above is located (and its line names it); the NaN written after backward below is not.
TEST(LossScaling, TheTraceSaysWhetherItsReplayLocatedTheOverflow) {
  TrainingRun run;
  run.trainer.use_loss_scaling({65536.0f, 2.0f, 0.5f, 1000});
  const Parameter& classifier = parameter_named(run.trainer, "5.weight");
  float* row0 = run.trainer.parameters().values() + classifier.offset;
  for (std::int64_t j = 0; j < classifier.value.shape.dims[1]; ++j) row0[j] = 3e34f;
  const Trainer::OverflowTrace trace = run.trainer.trace_first_overflow([&] { run.trainer.step(); }, 3);
  EXPECT_EQ(trace.replay, Trainer::ReplayFinding::located) << trace.said;
  EXPECT_THAT(trace.said, HasSubstr("backward: first non-finite input gradient: 5 (Linear)"));
}

// An overflow after backward (here written into a gradient by the before-update hook, where the
// ranks' reduction runs) leaves every replayed layer finite, and the log says so.
TEST(LossScaling, AnOverflowAfterBackwardLeavesTheReplayedLayersFinite) {
  TrainingRun run;
  run.trainer.use_loss_scaling({65536.0f, 2.0f, 0.5f, 1000});
  inject(run.trainer, std::numeric_limits<float>::quiet_NaN(), {0});
  std::ostringstream log;
  run.trainer.log_skipped_steps(&log, "dlbench-worker rank 3");  // as one rank of several says it
  run.trainer.step();
  const auto said = lines(log.str());
  ASSERT_EQ(said.size(), 2u) << log.str();
  EXPECT_THAT(said[0], ::testing::StartsWith("dlbench-worker rank 3: step 1 skipped, loss scale now 32768: loss "));
  EXPECT_THAT(said[1], ::testing::MatchesRegex("  replayed at loss scale 65536: forward: every layer output finite; "
                                               "loss [0-9.]+; backward: every input gradient finite"));
}

// After the repeats, a result whose loss scaling trained little traces its first overflow
// (lossScaling.overflow): steps run until one skips, and that one's two lines come back, the
// replay's no longer indented, with the log's own prefix off. Here the 3rd step's gradient holds
// a NaN: three steps run, not the ten allowed; the log set before hears the same lines.
TEST(LossScaling, TheFirstOverflowAfterTheRepeatsIsTracedAndTheStepsStopThere) {
  TrainingRun run;
  run.trainer.use_loss_scaling({65536.0f, 2.0f, 0.5f, 1000});
  inject(run.trainer, std::numeric_limits<float>::quiet_NaN(), {2});
  std::ostringstream before;
  run.trainer.log_skipped_steps(&before);
  int steps = 0;
  const Trainer::OverflowTrace trace = run.trainer.trace_first_overflow([&] { run.trainer.step(); ++steps; }, 10);
  const std::string& traced = trace.said;
  EXPECT_EQ(trace.replay, Trainer::ReplayFinding::all_finite);  // the NaN came after backward
  EXPECT_EQ(steps, 3);
  const auto said = lines(traced);
  ASSERT_EQ(said.size(), 2u) << traced;
  EXPECT_THAT(said[0], ::testing::StartsWith("untimed step 3 skipped, loss scale now 32768: loss "));
  EXPECT_THAT(said[0], HasSubstr("parameters' gradients not finite, nearest the loss first: "));
  EXPECT_THAT(said[1], ::testing::MatchesRegex("replayed at loss scale 65536: forward: every layer output finite; "
                                               "loss [0-9.]+; backward: every input gradient finite"));
  EXPECT_EQ(before.str(), "dlbench-worker: " + said[0].substr(std::string("untimed ").size()) + "\n  " + said[1] + "\n");
  run.trainer.step();  // the log set before is back in place
  EXPECT_EQ(lines(before.str()).size(), 2u);
}

// None skipped within the steps allowed: the result says so, with the scale, and the steps all ran.
TEST(LossScaling, NoOverflowAmongTheStepsAllowedIsSaidWithTheScale) {
  TrainingRun run;
  run.trainer.use_loss_scaling({65536.0f, 2.0f, 0.5f, 1000});
  int steps = 0;
  const Trainer::OverflowTrace none = run.trainer.trace_first_overflow([&] { run.trainer.step(); ++steps; }, 4);
  EXPECT_EQ(none.said, "none of 4 untimed steps after the repeats skipped; the scale stayed at 65536");
  EXPECT_EQ(none.replay, Trainer::ReplayFinding::none);
  EXPECT_EQ(steps, 4);
  TrainingRun unscaled;
  EXPECT_THROW((void)unscaled.trainer.trace_first_overflow([&] { unscaled.trainer.step(); }, 4), std::logic_error);
}

// The replay is the step again: a small BERT with dropout (whose masks depend on the step) and
// AdamW, one step skipped by a NaN written after backward. With the log on, the replay's loss is
// the skipped step's to the bit, and the steps after it are those of a run without the log.
TEST(LossScaling, TheReplayRepeatsTheSkippedStepAndChangesNothingLaterStepsRead) {
  const BertConfig config{.vocabulary = 40, .hidden = 16, .layers = 2, .heads = 2, .intermediate = 24,
                          .max_positions = 16};
  ASSERT_GT(config.dropout, 0.0f);
  CpuBackend backend(2);
  const auto make = [&] {
    auto trainer = std::make_unique<Trainer>(backend, bert_for_pretraining(config), PretrainingBatchLayout{4, 12},
                                             config.vocabulary, SgdConfig{}, 3);
    trainer->use_adamw({5e-3f, 0.9f, 0.999f, 1e-6f, 0.01f, 1.0f});
    trainer->use_loss_scaling({1024.0f, 2.0f, 0.5f, 1000});
    inject(*trainer, std::numeric_limits<float>::quiet_NaN(), {2});
    return trainer;
  };
  const auto logged = make(), plain = make();
  // The gradient buckets' hook (the ranks' allreduce) is not told of the replay's gradients.
  std::size_t logged_ready = 0, plain_ready = 0;
  logged->set_gradients_ready([&](const std::vector<Parameter*>& p) { logged_ready += p.size(); });
  plain->set_gradients_ready([&](const std::vector<Parameter*>& p) { plain_ready += p.size(); });
  std::ostringstream log;
  logged->log_skipped_steps(&log);
  for (int step = 0; step < 5; ++step) {
    const float a = logged->step_and_loss(), b = plain->step_and_loss();  // `a`: the replay's loss at step 2
    EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0) << "step " << step << ": " << a << " against " << b;
  }
  ASSERT_EQ(lines(log.str()).size(), 2u) << log.str();
  EXPECT_THAT(log.str(), HasSubstr("forward: every layer output finite; "));
  const auto weights = [](Trainer& t) {
    return std::vector<float>(t.parameters().values(), t.parameters().values() + t.parameters().elements());
  };
  EXPECT_TRUE(same_bits(weights(*logged), weights(*plain)));
  EXPECT_EQ(logged->loss_scale()->scale, plain->loss_scale()->scale);
  EXPECT_GT(plain_ready, 0u);
  EXPECT_EQ(logged_ready, plain_ready);
}

TEST(NonFiniteCount, TheBackendCountsInfsAndNansInEveryFloatType) {
  CpuBackend backend(1);
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> values{1.0f, inf, -inf, nan, 0.0f, -nan, 70000.0f, -2.5f, inf};
  for (const DType dtype : {DType::fp32, DType::bf16, DType::fp16}) {
    const std::vector<std::byte> bytes = encode(values.data(), values.size(), dtype);
    auto memory = backend.allocate(bytes.size());
    backend.copy_from_host(memory.get(), bytes.data(), bytes.size());
    const Tensor t{memory.get(), Shape(static_cast<std::int64_t>(values.size())), Layout::plain, dtype};
    const NonFiniteCount count = backend.count_non_finite(t);
    // 70000 is past fp16's largest value (65504): it rounds to inf there.
    EXPECT_EQ(count.inf, dtype == DType::fp16 ? 4 : 3) << to_string(dtype);
    EXPECT_EQ(count.nan, 2) << to_string(dtype);
  }
  std::vector<std::int32_t> ids{0, -1, 7};
  const Tensor tokens{ids.data(), Shape(3), Layout::plain, DType::int32};
  EXPECT_EQ(backend.count_non_finite(tokens).total(), 0);
  EXPECT_EQ(backend.count_non_finite(Tensor{}).total(), 0);
}

// A skipped first step leaves the momentum buffers unstarted: the first applied update starts
// them, so the trajectory is the clean one, one step late.
TEST(LossScaling, ASkippedFirstStepLeavesTheFirstUpdateToTheNext) {
  TrainingRun clean, skipped;
  skipped.trainer.use_loss_scaling({256.0f, 2.0f, 0.5f, 1000});
  inject(skipped.trainer, std::numeric_limits<float>::infinity(), {0});
  skipped.trainer.step();
  EXPECT_TRUE(skipped.trainer.last_step_skipped());
  for (int i = 0; i < 2; ++i) {
    clean.trainer.step();
    skipped.trainer.step();
  }
  EXPECT_TRUE(same_bits(clean.weights(), skipped.weights()));
  EXPECT_TRUE(same_bits(clean.momentum(), skipped.momentum()));
}

// The backend's check (the state in its memory, moved on where it lives) against the host's
// rule, over a long run of clean and overflowing steps: the same scale, streak, skips and verdict.
TEST(LossScaling, TheBackendMovesTheStateOnByTheHostsRule) {
  CpuBackend backend(2);
  const LossScalingConfig config{1024.0f, 2.0f, 0.5f, 3};
  LossScaler reference(config);
  auto memory = backend.allocate(sizeof(LossScaleState) + 64 * sizeof(float));
  auto* state = static_cast<LossScaleState*>(memory.get());
  auto* grads = reinterpret_cast<float*>(state + 1);
  *state = starting_loss_scale(config);
  std::mt19937 rng(7);
  for (int step = 0; step < 200; ++step) {
    for (int i = 0; i < 64; ++i) grads[i] = static_cast<float>(i) * reference.scale();
    const bool overflows = rng() % 4 == 0;
    if (overflows) grads[rng() % 64] = rng() % 2 ? std::numeric_limits<float>::infinity() : std::nanf("");
    backend.unscale_and_check_finite(grads, 64, state, config);
    const bool applies = reference.record_step(!overflows);
    ASSERT_EQ(state->overflowed != 0, !applies) << "step " << step;
    ASSERT_EQ(state->scale, reference.scale()) << "step " << step;
    ASSERT_EQ(state->clean_streak, reference.clean_streak()) << "step " << step;
    ASSERT_EQ(state->skipped, reference.skipped_steps()) << "step " << step;
    if (!overflows) {
      for (int i = 0; i < 64; ++i) ASSERT_EQ(grads[i], static_cast<float>(i)) << "step " << step;
    }
  }
  EXPECT_GT(reference.skipped_steps(), 20);
  EXPECT_GT(reference.scale(), 0.0f);
}

// A skipped step in the middle of AdamW or LAMB training: the run goes on as the clean one, one
// step late, bit for bit. Bias corrections counted by update calls instead of applied updates
// would correct the next update as the fourth, not the third, and leave that trajectory.
TEST(LossScaling, AdamCountsAppliedUpdatesOnlyAfterASkippedStep) {
  for (const bool lamb : {false, true}) {
    TrainingRun clean, skipped;
    const AdamWConfig adam{1e-3f, 0.9f, 0.999f, 1e-6f, 0.01f, 1.0f};
    for (TrainingRun* run : {&clean, &skipped}) {
      if (lamb) {
        run->trainer.use_lamb(adam);
      } else {
        run->trainer.use_adamw(adam);
      }
      run->trainer.use_loss_scaling({256.0f, 2.0f, 0.5f, 1000});
    }
    inject(skipped.trainer, std::numeric_limits<float>::infinity(), {2});
    for (int i = 0; i < 3; ++i) clean.trainer.step();
    for (int i = 0; i < 4; ++i) skipped.trainer.step();
    EXPECT_EQ(skipped.trainer.loss_scale()->skipped, 1) << (lamb ? "lamb" : "adamw");
    EXPECT_TRUE(same_bits(clean.weights(), skipped.weights())) << (lamb ? "lamb" : "adamw");
    EXPECT_TRUE(same_bits(clean.momentum(), skipped.momentum())) << (lamb ? "lamb" : "adamw");
  }
}

TEST(RankOverflowTrace, RanksAreListedWithRunsOfThreeOrMoreAsRanges) {
  EXPECT_EQ(rank_list({3}), "rank 3");
  EXPECT_EQ(rank_list({0, 2}), "ranks 0, 2");
  EXPECT_EQ(rank_list({0, 1}), "ranks 0, 1");
  EXPECT_EQ(rank_list({0, 1, 2, 3, 4, 6, 7}), "ranks 0-4, 6, 7");
  EXPECT_EQ(rank_list({1, 2, 3, 5, 6, 7, 8, 10}), "ranks 1-3, 5-8, 10");
}

// Every rank skips the same step (the reduced gradients decide it) but replays its own batch: the
// rank whose replay located the inf comes right after the skipped step's line, the ranks that
// found every value finite share one line, and other lines (a failed trace) follow.
TEST(RankOverflowTrace, TheRanksThatLocatedTheOverflowComeFirstAndTheRestAreGrouped) {
  using F = Trainer::ReplayFinding;
  const std::string step = "untimed step 3 skipped, loss scale now 32768: loss ";
  const std::string grads = "; 2 of 10 parameters' gradients not finite, nearest the loss first: 5.weight (1 inf, 0 NaN of 40)";
  const auto finite = [&](const char* loss) {
    return Trainer::OverflowTrace{step + loss + grads + "\nreplayed at loss scale 65536: forward: every layer output "
                                  "finite; loss " + loss + "; backward: every input gradient finite", F::all_finite};
  };
  const Trainer::OverflowTrace located{step + "inf" + grads + "\nreplayed at loss scale 65536: the batch holds 1 inf, 0 NaN "
                                       "of 768; forward: first non-finite layer output: 0 (Conv2d), 8 inf, 0 NaN of 2048; "
                                       "loss inf; backward: every input gradient finite", F::located};
  const Trainer::OverflowTrace failed{"not traced: out of memory", F::none};
  const std::string text = compose_rank_traces({finite("2.31"), finite("2.29"), located, finite("2.30"), failed});
  EXPECT_EQ(text, "rank 0: " + step + "2.31" + grads + "\n" +
                      "rank 2: replayed at loss scale 65536: the batch holds 1 inf, 0 NaN of 768; forward: first "
                      "non-finite layer output: 0 (Conv2d), 8 inf, 0 NaN of 2048; loss inf; backward: every input "
                      "gradient finite\n"
                      "ranks 0, 1, 3: every layer output and input gradient finite in their replays\n"
                      "rank 4: not traced: out of memory");
  // One rank, or every rank alike ("none of 50 untimed steps ... skipped"), as it is.
  EXPECT_EQ(compose_rank_traces({located}), located.said);
  const Trainer::OverflowTrace none{"none of 50 untimed steps after the repeats skipped; the scale stayed at 8", F::none};
  EXPECT_EQ(compose_rank_traces({none, none, none}), none.said);
  // A step graph's replay is not traced: said once for the ranks alike, never called finite.
  const Trainer::OverflowTrace graph0{step + "2.3" + grads + "\na step graph's replay: not traced layer by layer", F::none};
  const Trainer::OverflowTrace graph1{step + "2.4" + grads + "\na step graph's replay: not traced layer by layer", F::none};
  EXPECT_EQ(compose_rank_traces({graph0, graph1}),
            "rank 0: " + step + "2.3" + grads + "\nranks 0, 1: a step graph's replay: not traced layer by layer");
  EXPECT_THROW((void)compose_rank_traces({}), std::invalid_argument);
}

// One rank's trace travels with what its replay found (a rank alone: NoCommunicator's allgather).
TEST(RankOverflowTrace, ATraceIsGatheredWithWhatItsReplayFound) {
  NoCommunicator one;
  for (const auto found : {Trainer::ReplayFinding::none, Trainer::ReplayFinding::all_finite,
                           Trainer::ReplayFinding::located}) {
    const auto gathered = gather_traces(one, {"untimed step 1 skipped\nreplayed", found});
    ASSERT_EQ(gathered.size(), 1u);
    EXPECT_EQ(gathered[0].said, "untimed step 1 skipped\nreplayed");
    EXPECT_EQ(gathered[0].replay, found);
  }
  EXPECT_EQ(gather_traces(one, {"", Trainer::ReplayFinding::none})[0].said, "");
}

}  // namespace
}  // namespace dlbench::worker
