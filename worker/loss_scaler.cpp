#include "loss_scaler.hpp"

#include <cmath>
#include <stdexcept>

namespace dlbench::worker {

void check_loss_scaling(const LossScalingConfig& config) {
  const auto require = [](bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument("loss scaling: " + what);
  };
  require(std::isfinite(config.initial_scale) && config.initial_scale > 0.0f, "initialScale must be a finite number > 0");
  require(std::isfinite(config.growth_factor) && config.growth_factor > 1.0f, "growthFactor must be a finite number > 1");
  require(config.backoff_factor > 0.0f && config.backoff_factor < 1.0f, "backoffFactor must be in (0, 1)");
  require(config.growth_interval >= 1, "growthInterval must be >= 1");
}

LossScaler::LossScaler(LossScalingConfig config) : config_(config), state_(starting_loss_scale(config)) {
  check_loss_scaling(config);
}

bool LossScaler::record_step(bool gradients_finite) {
  next_loss_scale(state_, gradients_finite, config_.growth_factor, config_.backoff_factor, config_.growth_interval);
  return gradients_finite;
}

}  // namespace dlbench::worker
