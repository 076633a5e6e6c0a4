// Dynamic loss scaling for fp16 training (what torch.cuda.amp.GradScaler does): the loss
// gradient is multiplied by a large scale so that small gradients survive fp16; after backward
// the gradients are divided by it again and checked. A step whose gradients hold an inf or NaN
// is skipped (weights and optimizer state untouched) and the scale backs off; after
// `growth_interval` clean steps in a row the scale grows. bf16 has fp32's range and needs none.
//
// The rule (next_loss_scale) is written once, for the host and the device: the trainer keeps a
// LossScaleState in the backend's memory and the backend applies the rule there, so that a step
// needs no decision from the host and a captured step graph scales, checks, skips and backs off
// by itself at every replay. LossScaler is the same rule on the host, the reference in tests.
#pragma once

#include <cfloat>
#include <cstdint>
#include <string>

#include "host_device.hpp"

namespace dlbench::worker {

struct LossScalingConfig {
  float initial_scale = 65536.0f;  // 2^16, PyTorch's default
  float growth_factor = 2.0f;
  float backoff_factor = 0.5f;
  std::int64_t growth_interval = 2000;
};

// Throws std::invalid_argument naming the field when a value is out of range.
void check_loss_scaling(const LossScalingConfig& config);

// Loss scaling's state as the backend keeps it (plain data: the same bytes on the host and a GPU).
struct LossScaleState {
  float scale = LossScalingConfig{}.initial_scale;  // what the next step's loss gradient is multiplied by
  std::int32_t overflowed = 0;  // the last checked step's gradients held an inf or NaN: its update is skipped
  std::int64_t clean_streak = 0;
  std::int64_t skipped = 0;     // steps skipped so far, the last one included
};

// The state a run starts from.
inline LossScaleState starting_loss_scale(const LossScalingConfig& config) {
  LossScaleState state;
  state.scale = config.initial_scale;
  return state;
}

// What a loss gradient is multiplied by: the scale a backend holds (null: no loss scaling).
DLBENCH_HOST_DEVICE inline float scale_or_one(const float* gradient_scale) {
  return gradient_scale != nullptr ? *gradient_scale : 1.0f;
}

// Whether an update given this state changes nothing: the step it follows overflowed (null: no
// loss scaling, every update applies).
DLBENCH_HOST_DEVICE inline bool update_skipped(const LossScaleState* s) { return s != nullptr && s->overflowed != 0; }

// The state after a step was checked (`gradients_finite`): GradScaler's update rule. Backs off
// without falling to zero (the smallest normal float still scales) and never grows into inf.
DLBENCH_HOST_DEVICE inline void next_loss_scale(LossScaleState& s, bool gradients_finite, float growth_factor,
                                                float backoff_factor, std::int64_t growth_interval) {
  s.overflowed = gradients_finite ? 0 : 1;
  if (!gradients_finite) {
    const float backed_off = s.scale * backoff_factor;
    s.scale = backed_off < FLT_MIN ? FLT_MIN : backed_off;
    s.clean_streak = 0;
    ++s.skipped;
    return;
  }
  if (++s.clean_streak >= growth_interval) {
    const float grown = s.scale * growth_factor;
    if (grown <= FLT_MAX) s.scale = grown;  // plain comparisons: the same code on both sides
    s.clean_streak = 0;
  }
}

// Adam's bias corrections count applied updates: the `queued`-th update call, after `skipped`
// skipped steps (this one among them or not), is update number queued − skipped.
DLBENCH_HOST_DEVICE inline std::uint64_t applied_update_number(std::uint64_t queued, const LossScaleState* s) {
  return s == nullptr ? queued : queued - static_cast<std::uint64_t>(s->skipped);
}

class LossScaler {
 public:
  // Throws std::invalid_argument naming the field when a value is out of range.
  explicit LossScaler(LossScalingConfig config = {});

  float scale() const { return state_.scale; }
  // Records the outcome of one step's check; returns whether the step's update may be applied.
  bool record_step(bool gradients_finite);

  std::int64_t skipped_steps() const { return state_.skipped; }
  std::int64_t clean_streak() const { return state_.clean_streak; }
  const LossScaleState& state() const { return state_; }
  const LossScalingConfig& config() const { return config_; }

 private:
  LossScalingConfig config_;
  LossScaleState state_;
};

}  // namespace dlbench::worker
