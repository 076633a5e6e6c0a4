#include "loss_scaler.hpp"

#include <cmath>
#include <limits>
#include <stdexcept>

namespace dlbench::worker {

LossScaler::LossScaler(LossScalingConfig config) : config_(config), scale_(config.initial_scale) {
  const auto require = [](bool ok, const std::string& what) {
    if (!ok) throw std::invalid_argument("loss scaling: " + what);
  };
  require(std::isfinite(config.initial_scale) && config.initial_scale > 0.0f, "initialScale must be a finite number > 0");
  require(std::isfinite(config.growth_factor) && config.growth_factor > 1.0f, "growthFactor must be a finite number > 1");
  require(config.backoff_factor > 0.0f && config.backoff_factor < 1.0f, "backoffFactor must be in (0, 1)");
  require(config.growth_interval >= 1, "growthInterval must be >= 1");
}

bool LossScaler::record_step(bool gradients_finite) {
  if (!gradients_finite) {
    // Backs off without falling to zero: the smallest normal float still scales.
    scale_ = std::fmax(scale_ * config_.backoff_factor, std::numeric_limits<float>::min());
    streak_ = 0;
    ++skipped_;
    return false;
  }
  if (++streak_ >= config_.growth_interval) {
    const float grown = scale_ * config_.growth_factor;
    if (std::isfinite(grown)) scale_ = grown;  // never grows into inf
    streak_ = 0;
  }
  return true;
}

}  // namespace dlbench::worker
