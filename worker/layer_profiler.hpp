// `dlbench-worker --profile N`: where a training step's time goes, layer by layer. Marks are
// queued on the backend (device events on a GPU, the host clock on the CPU) before and after
// each layer a Sequential runs; each interval between two marks belongs to the innermost layer
// running then, so a block's time is its own work (a bottleneck's add and ReLU), not its
// children's. What no layer holds is outside the layers, by the part the trainer said it began
// (the loss, the update, ...; StepPart), or "other" (between layers) after a layer or a step ends.
#pragma once

#include <iosfwd>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "dlbench/core/result_document.hpp"
#include "layers/layer.hpp"

namespace dlbench::worker {

class LayerProfiler final : public LayerObserver {
 public:
  // Names every layer of `network` by its path ("layer1.0.conv1").
  LayerProfiler(Layer& network, Backend& backend);

  // A step boundary: call once before the first profiled step and after each one.
  void step_boundary();
  void before(const Layer& layer, bool backward, const Tensor& input) override;
  void after(const Layer& layer, bool backward, const Tensor& output) override;
  void outside(StepPart part) override;

  // Waits for the device and returns seconds per step over the `steps` profiled, the layers in
  // the order forward first ran them (only those that ran), their kinds by time.
  StepProfile finish(int steps);

 private:
  struct Row {
    std::string name, kind;
    double forward = 0, backward = 0;
    bool ran = false;
  };
  // The interval after a mark belongs to row `row` in one pass, or (row -1) outside every layer
  // to `part`.
  struct Owner {
    int row = -1;
    bool backward = false;
    StepPart part = StepPart::other;
  };
  void mark_then_owner();

  std::unique_ptr<StepMarks> marks_;
  std::vector<Row> rows_;
  std::unordered_map<const Layer*, int> row_of_;
  std::vector<Owner> stack_;  // the layers running now, innermost last
  StepPart part_ = StepPart::other;  // outside every layer: what the trainer said it began
  std::vector<Owner> owners_;  // one per mark taken
  std::vector<int> first_run_order_;
};

class Trainer;

// --profile: `steps` more eager steps of `trainer`, every layer timed (the caller runs them after
// the measurement, so that the marks cost the measured steps nothing). Every rank runs them: the
// steps' allreduces pair up.
StepProfile profile_steps(Trainer& trainer, Backend& device, int steps);

// The profile as a table: the step, the layers' kinds summed, then the `top` layers that took
// the most time.
void print_profile(std::ostream& out, const StepProfile& profile, std::size_t top = 15);

}  // namespace dlbench::worker
