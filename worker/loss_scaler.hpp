// Dynamic loss scaling for fp16 training (what torch.cuda.amp.GradScaler does): the loss
// gradient is multiplied by a large scale so that small gradients survive fp16; after backward
// the gradients are divided by it again and checked. A step whose gradients hold an inf or NaN
// is skipped (weights and optimizer state untouched) and the scale backs off; after
// `growth_interval` clean steps in a row the scale grows. bf16 has fp32's range and needs none.
//
// The logic is here, apart from any backend, so that it is tested on the CPU; a backend only
// provides the unscale-and-check pass over the flat gradient buffer.
#pragma once

#include <cstdint>
#include <string>

namespace dlbench::worker {

struct LossScalingConfig {
  float initial_scale = 65536.0f;  // 2^16, PyTorch's default
  float growth_factor = 2.0f;
  float backoff_factor = 0.5f;
  std::int64_t growth_interval = 2000;
};

class LossScaler {
 public:
  // Throws std::invalid_argument naming the field when a value is out of range.
  explicit LossScaler(LossScalingConfig config = {});

  float scale() const { return scale_; }
  float inverse_scale() const { return 1.0f / scale_; }
  // Records the outcome of one step's check; returns whether the step's update may be applied.
  bool record_step(bool gradients_finite);

  std::int64_t skipped_steps() const { return skipped_; }
  std::int64_t clean_streak() const { return streak_; }
  const LossScalingConfig& config() const { return config_; }

 private:
  LossScalingConfig config_;
  float scale_;
  std::int64_t streak_ = 0;
  std::int64_t skipped_ = 0;
};

}  // namespace dlbench::worker
