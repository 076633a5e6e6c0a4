#include "layer_profiler.hpp"

#include <algorithm>
#include <array>
#include <iomanip>
#include <map>
#include <optional>
#include <ostream>
#include <stdexcept>

#include "trainer.hpp"

namespace dlbench::worker {
namespace {

// The most time first (forward and backward together).
void sort_by_time(std::vector<LayerTime>& times) {
  std::stable_sort(times.begin(), times.end(), [](const LayerTime& a, const LayerTime& b) {
    return a.forward_seconds + a.backward_seconds > b.forward_seconds + b.backward_seconds;
  });
}

}  // namespace

LayerProfiler::LayerProfiler(Layer& network, Backend& backend) : marks_(backend.make_step_marks()) {
  for (const auto& [layer, path] : layer_paths(network)) {
    row_of_[layer] = static_cast<int>(rows_.size());
    rows_.push_back({path, layer->kind()});
  }
}

static_assert(static_cast<std::size_t>(StepPart::other) + 1 == kStepParts.size(), "a name for every StepPart");

void LayerProfiler::mark_then_owner() {
  marks_->mark();
  owners_.push_back(stack_.empty() ? Owner{-1, false, part_} : stack_.back());
}

void LayerProfiler::step_boundary() {
  if (!stack_.empty()) throw std::logic_error("LayerProfiler: a step ended inside a layer");
  part_ = StepPart::other;
  mark_then_owner();
}

void LayerProfiler::outside(StepPart part) {
  if (!stack_.empty()) throw std::logic_error("LayerProfiler: a step part began inside a layer");
  part_ = part;
  mark_then_owner();
}

void LayerProfiler::before(const Layer& layer, bool backward, const Tensor&) {
  const auto it = row_of_.find(&layer);
  if (it == row_of_.end()) throw std::logic_error("LayerProfiler: a " + layer.kind() + " outside the network");
  Row& row = rows_[static_cast<std::size_t>(it->second)];
  if (!row.ran) {
    row.ran = true;
    first_run_order_.push_back(it->second);
  }
  stack_.push_back({it->second, backward});
  mark_then_owner();
}

void LayerProfiler::after(const Layer&, bool, const Tensor&) {
  if (stack_.empty()) throw std::logic_error("LayerProfiler: after() without before()");
  stack_.pop_back();
  part_ = StepPart::other;  // between layers, until the trainer says otherwise
  mark_then_owner();
}

StepProfile LayerProfiler::finish(int steps) {
  if (steps < 1) throw std::invalid_argument("LayerProfiler: profile at least one step");
  const std::vector<double> intervals = marks_->drain(true);
  StepProfile p;
  p.steps = steps;
  std::array<std::optional<double>, kStepParts.size()> parts;  // seconds by StepPart, where it ran
  for (std::size_t i = 0; i < intervals.size() && i < owners_.size(); ++i) {
    p.step_seconds += intervals[i];
    const Owner& o = owners_[i];
    if (o.row < 0) {
      p.outside_layers_seconds += intervals[i];
      auto& part = parts[static_cast<std::size_t>(o.part)];
      part = part.value_or(0) + intervals[i];
      continue;
    }
    Row& row = rows_[static_cast<std::size_t>(o.row)];
    (o.backward ? row.backward : row.forward) += intervals[i];
  }
  const double per_step = 1.0 / steps;
  p.step_seconds *= per_step;
  p.outside_layers_seconds *= per_step;
  for (std::size_t i = 0; i < parts.size(); ++i) {
    if (parts[i]) p.outside_parts.push_back({std::string(kStepParts[i]), *parts[i] * per_step});
  }
  order_step_parts(p.outside_parts);
  std::map<std::string, LayerTime> kinds;
  for (const int r : first_run_order_) {
    const Row& row = rows_[static_cast<std::size_t>(r)];
    p.layers.push_back({row.name, row.kind, row.forward * per_step, row.backward * per_step});
    LayerTime& kind = kinds[row.kind];
    kind.kind = row.kind;
    kind.forward_seconds += row.forward * per_step;
    kind.backward_seconds += row.backward * per_step;
  }
  for (auto& [name, time] : kinds) p.kinds.push_back(time);
  sort_by_time(p.kinds);
  owners_.clear();
  return p;
}

StepProfile profile_steps(Trainer& trainer, Backend& device, int steps) {
  LayerProfiler profiler(trainer.network(), device);
  trainer.set_layer_observer(&profiler);
  profiler.step_boundary();
  for (int i = 0; i < steps; ++i) {
    trainer.step();
    profiler.step_boundary();
  }
  trainer.set_layer_observer(nullptr);
  return profiler.finish(steps);
}

void print_profile(std::ostream& out, const StepProfile& profile, std::size_t top) {
  const double step = profile.step_seconds > 0 ? profile.step_seconds : 1.0;
  const auto row = [&](const std::string& label, double forward, double backward) {
    out << "  " << std::left << std::setw(34) << label.substr(0, 34) << std::right << std::fixed << std::setprecision(3)
        << std::setw(10) << 1e3 * forward << std::setw(10) << 1e3 * backward << std::setw(10) << 1e3 * (forward + backward)
        << std::setw(7) << std::setprecision(1) << 100.0 * (forward + backward) / step << "%\n";
  };
  out << "  profile: " << std::fixed << std::setprecision(3) << 1e3 * profile.step_seconds << " ms a step over "
      << profile.steps << " steps, " << 1e3 * profile.outside_layers_seconds << " ms of it outside the layers";
  for (std::size_t i = 0; i < profile.outside_parts.size(); ++i) {
    out << (i == 0 ? ": " : ", ") << profile.outside_parts[i].part << " " << 1e3 * profile.outside_parts[i].seconds;
  }
  out << "\n";
  out << "  " << std::left << std::setw(34) << "by kind" << std::right << std::setw(10) << "fwd ms" << std::setw(10)
      << "bwd ms" << std::setw(10) << "ms" << std::setw(8) << "share" << "\n";
  for (const LayerTime& k : profile.kinds) row(k.kind, k.forward_seconds, k.backward_seconds);
  std::vector<LayerTime> layers = profile.layers;
  sort_by_time(layers);
  layers.resize(std::min(layers.size(), top));
  out << "  " << std::left << std::setw(34) << "slowest layers" << "\n";
  for (const LayerTime& l : layers) row(l.name + " " + l.kind, l.forward_seconds, l.backward_seconds);
}

}  // namespace dlbench::worker
