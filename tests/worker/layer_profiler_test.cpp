// The profiler gives each interval between two marks to the innermost layer running then: a
// block's row holds its own work only, what no layer holds is outside the layers, and the parts
// add up to the step. Marks here tick one second each, so every figure is a count of intervals.
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cpu/cpu_backend.hpp"
#include "delegating_backend.hpp"
#include "layer_profiler.hpp"
#include "layers/bottleneck.hpp"
#include "layers/conv2d.hpp"
#include "layers/linear.hpp"
#include "layers/pool2d.hpp"
#include "layers/relu.hpp"
#include "trainer.hpp"

namespace dlbench::worker {
namespace {

// Every interval between two consecutive marks lasts one second.
class OneSecondMarks final : public StepMarks {
 public:
  void mark() override { ++marks_; }
  std::vector<double> drain(bool) override {
    std::vector<double> out(marks_ > 0 ? marks_ - 1 : 0, 1.0);
    marks_ = 0;
    return out;
  }

 private:
  std::size_t marks_ = 0;
};

class OneSecondMarksBackend final : public DelegatingBackend {
 public:
  using DelegatingBackend::DelegatingBackend;
  std::unique_ptr<StepMarks> make_step_marks() override { return std::make_unique<OneSecondMarks>(); }
};

const LayerTime& row(const StepProfile& p, const std::string& name) {
  for (const LayerTime& l : p.layers) {
    if (l.name == name) return l;
  }
  throw std::runtime_error("no layer " + name);
}

TEST(LayerProfiler, EachIntervalBelongsToTheInnermostLayer) {
  CpuBackend cpu(1);
  OneSecondMarksBackend backend(cpu);
  auto net = std::make_unique<Sequential>();
  net->add<Conv2d>(3, 16, 3, 1, 1);
  net->add<Bottleneck>(16, 8, 1);  // 16 -> 32 channels: a conv + BN shortcut, three conv + BN on the main branch
  net->add<Pool2d>(PoolKind::average, 0, 1, 0, true);
  net->add<Flatten>();
  net->add<Linear>(32, 10);
  Trainer trainer(backend, std::move(net), Shape(2, 3, 8, 8), 10, SgdConfig{}, 1);
  name_parameters(trainer.network());
  const StepProfile p = profile_steps(trainer, backend, 2);

  EXPECT_EQ(p.steps, 2);
  // Per step, a mark at each layer's start and end in each pass, one at the step's end, and one
  // as each part outside the layers begins (input, the forward's start, loss, update): the top
  // level's 5 layers and the bottleneck's 8 (6 on the main branch, 2 on the shortcut).
  EXPECT_DOUBLE_EQ(p.step_seconds, 2.0 * 2 * (5 + 8) + 1 + 4);
  const LayerTime& conv = row(p, "0");
  EXPECT_EQ(conv.kind, "Conv2d");
  EXPECT_DOUBLE_EQ(conv.forward_seconds, 1.0);
  EXPECT_DOUBLE_EQ(conv.backward_seconds, 1.0);
  EXPECT_DOUBLE_EQ(row(p, "1.conv2").forward_seconds, 1.0);
  EXPECT_DOUBLE_EQ(row(p, "1.downsample.0").backward_seconds, 1.0);
  // The bottleneck's own work (the add and ReLU, dx's sum) lies between its children's marks:
  // before the first, between each two and after the last, in each pass.
  const LayerTime& block = row(p, "1");
  EXPECT_EQ(block.kind, "Bottleneck");
  EXPECT_DOUBLE_EQ(block.forward_seconds, 9.0);
  EXPECT_DOUBLE_EQ(block.backward_seconds, 9.0);
  // The top level's: staging the batch, before the first layer, between each two, the loss
  // between the passes and the update after them.
  EXPECT_DOUBLE_EQ(p.outside_layers_seconds, 15);
  // By part, the most first. "other": from the step's start to the input's, from the forward's
  // start to its first layer, the 4 gaps between the top level's layers in each pass, and from
  // each pass's last layer to the part after it. No hook, no loss scaling: no such parts.
  EXPECT_THAT(p.outside_parts, ::testing::ElementsAre(StepPartTime{"other", 12}, StepPartTime{"input", 1},
                                                      StepPartTime{"loss", 1}, StepPartTime{"update", 1}));
  // Nothing is lost: the layers and what lies outside them make the step.
  double sum = p.outside_layers_seconds;
  for (const LayerTime& l : p.layers) sum += l.forward_seconds + l.backward_seconds;
  EXPECT_DOUBLE_EQ(sum, p.step_seconds);
  double by_kind = p.outside_layers_seconds;
  for (const LayerTime& k : p.kinds) by_kind += k.forward_seconds + k.backward_seconds;
  EXPECT_DOUBLE_EQ(by_kind, p.step_seconds);
  // By kind, the most first: the bottleneck's 18, five convolutions' 10 (the first, the
  // bottleneck's three and its shortcut's), then two batch norms alone and two with a fused ReLU.
  ASSERT_GE(p.kinds.size(), 4u);
  EXPECT_EQ(p.kinds[0].kind, "Bottleneck");
  EXPECT_EQ(p.kinds[1].kind, "Conv2d");
  EXPECT_DOUBLE_EQ(p.kinds[1].forward_seconds + p.kinds[1].backward_seconds, 2.0 * 5);
  EXPECT_EQ(p.kinds[2].kind, "BatchNorm2d");
  EXPECT_DOUBLE_EQ(p.kinds[2].forward_seconds + p.kinds[2].backward_seconds, 2.0 * 2);
  EXPECT_EQ(p.kinds[3].kind, "BatchNorm2d+ReLU");
  // Forward's order; a layer that is a view (Flatten) runs too.
  EXPECT_EQ(p.layers.front().name, "0");
  EXPECT_EQ(p.layers.back().name, "4");

  std::ostringstream table;
  print_profile(table, p, 3);
  EXPECT_THAT(table.str(), ::testing::HasSubstr("by kind"));
  EXPECT_THAT(table.str(), ::testing::HasSubstr("1 Bottleneck"));
  EXPECT_THAT(table.str(), ::testing::HasSubstr(
                               "outside the layers: other 12000.000, input 1000.000, loss 1000.000, update 1000.000\n"));
}

// With a hook before the update (a multi-rank case's wait for its gradient buckets) and loss
// scaling (amp's), each is a part of its own, and the parts still make the whole.
TEST(LayerProfiler, TheWaitForGradientsAndLossScalingArePartsOfTheirOwn) {
  CpuBackend cpu(1);
  OneSecondMarksBackend backend(cpu);
  auto net = std::make_unique<Sequential>();
  net->add<Flatten>();
  net->add<Linear>(3 * 4 * 4, 10);
  Trainer trainer(backend, std::move(net), Shape(2, 3, 4, 4), 10, SgdConfig{}, 1);
  name_parameters(trainer.network());
  trainer.use_loss_scaling({});
  int hooks = 0;
  trainer.set_before_update([&] { ++hooks; });
  const StepProfile p = profile_steps(trainer, backend, 3);
  EXPECT_EQ(hooks, 3);
  // 2 layers: 4 marks a pass; 6 parts (input, the forward's start, loss, the hook, loss scaling,
  // update) and the step's end.
  EXPECT_DOUBLE_EQ(p.step_seconds, 2 * 4 + 6 + 1);
  // "other": the step's start, the forward's start, the gap between the 2 layers in each pass,
  // and each pass's end.
  EXPECT_THAT(p.outside_parts,
              ::testing::ElementsAre(StepPartTime{"other", 6}, StepPartTime{"gradientReductionWait", 1},
                                     StepPartTime{"input", 1}, StepPartTime{"loss", 1},
                                     StepPartTime{"lossScaling", 1}, StepPartTime{"update", 1}));
  double parts = 0;
  for (const StepPartTime& t : p.outside_parts) parts += t.seconds;
  EXPECT_DOUBLE_EQ(parts, p.outside_layers_seconds);
}

// A part the trainer begins while a layer runs would hide that layer's time: refused.
TEST(LayerProfiler, APartBegunInsideALayerIsRefused) {
  CpuBackend cpu(1);
  Linear linear(4, 2);
  LayerProfiler profiler(linear, cpu);
  profiler.step_boundary();
  Tensor x;
  profiler.before(linear, false, x);
  EXPECT_THROW(profiler.outside(StepPart::update), std::logic_error);
}

}  // namespace
}  // namespace dlbench::worker
