// Where a step's values first stopped being finite, layer by layer: told every layer's output
// (forward) and input gradient (backward) as a step runs, it counts each one's infs and NaNs on
// the backend until it finds the first that holds any, in each direction. A skipped amp step is
// replayed under it (DLBENCH_LOG_LOSS_SCALE) to name the layer an overflow started at; the
// parameters' gradients alone cannot say, since once one layer's output is inf every layer after
// it is too.
#pragma once

#include <optional>
#include <string>
#include <unordered_map>

#include "layers/layer.hpp"

namespace dlbench::worker {

class FirstNonFinite final : public LayerObserver {
 public:
  struct Finding {
    std::string where;  // "layer4.2.bn3 (BatchNorm2d)"
    NonFiniteCount count;
    std::int64_t values = 0;
  };

  FirstNonFinite(Layer& network, Backend& backend);

  void before(const Layer&, bool, const Tensor&) override {}
  void after(const Layer& layer, bool backward, const Tensor& output) override;

  const std::optional<Finding>& forward() const { return forward_; }
  const std::optional<Finding>& backward() const { return backward_; }

 private:
  const Layer* network_;
  std::unordered_map<const Layer*, std::string> paths_;
  Backend& backend_;
  std::optional<Finding> forward_, backward_;
};

// "12 inf, 0 NaN of 802816"
std::string describe_non_finite(const NonFiniteCount& count, std::int64_t values);

}  // namespace dlbench::worker
