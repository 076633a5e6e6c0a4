#include "non_finite_trace.hpp"

namespace dlbench::worker {

FirstNonFinite::FirstNonFinite(Layer& network, Backend& backend)
    : network_(&network), paths_(layer_paths(network)), backend_(backend) {}

void FirstNonFinite::after(const Layer& layer, bool backward, const Tensor& output) {
  std::optional<Finding>& found = backward ? backward_ : forward_;
  // Once found, the layers after it are not counted: they follow from it, and each count waits.
  if (found) return;
  const NonFiniteCount count = backend_.count_non_finite(output);  // none in an empty or int32 tensor
  if (count.total() == 0) return;
  found = Finding{layer_where(paths_, layer, *network_) + " (" + layer.kind() + ")", count, output.numel()};
}

std::string describe_non_finite(const NonFiniteCount& count, std::int64_t values) {
  return std::to_string(count.inf) + " inf, " + std::to_string(count.nan) + " NaN of " + std::to_string(values);
}

}  // namespace dlbench::worker
