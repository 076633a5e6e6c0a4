#include "dlbench/core/planner.hpp"

#include <algorithm>
#include <set>
#include <tuple>
#include <utility>

namespace dlbench {
namespace {

auto order_key(const PlannedCase& c) {
  return std::make_tuple(!c.baseline, c.spec.devices(), c.spec.nodes, c.spec.batch_size_per_device,
                         static_cast<int>(c.spec.precision));
}

// The distinct precisions of a plan, in the API's order.
std::vector<Precision> precisions_of(const std::vector<PlannedCase>& plan) {
  std::set<Precision> seen;
  for (const PlannedCase& p : plan) seen.insert(p.spec.precision);
  return {seen.begin(), seen.end()};
}

}  // namespace

std::vector<PlannedCase> plan_cases(const BenchmarkRunSpec& spec) {
  std::vector<CaseSpec> requested = spec.cases;
  if (spec.matrix) {
    const Matrix& m = *spec.matrix;
    for (const int nodes : m.nodes) {
      for (const int gpus : m.gpus_per_node) {
        for (const int batch : m.batch_size_per_device) {
          for (const Precision precision : m.precision) requested.push_back({nodes, gpus, batch, precision});
        }
      }
    }
  }

  std::vector<PlannedCase> planned;
  std::set<std::string> ids;
  std::set<std::pair<int, Precision>> baselines_present;
  for (const CaseSpec& c : requested) {
    std::string id = case_id(c);
    if (!ids.insert(id).second) continue;  // validation reports duplicates; the plan stays well-formed
    if (c.is_single_device()) baselines_present.emplace(c.batch_size_per_device, c.precision);
    planned.push_back({c, std::move(id), c.is_single_device(), false});
  }
  std::set<std::pair<int, Precision>> needed;
  for (const PlannedCase& c : planned) needed.emplace(c.spec.batch_size_per_device, c.spec.precision);
  for (const auto& [batch, precision] : needed) {
    if (baselines_present.contains({batch, precision})) continue;
    const CaseSpec baseline{1, 1, batch, precision};
    planned.push_back({baseline, case_id(baseline), true, true});
  }
  std::stable_sort(planned.begin(), planned.end(),
                   [](const PlannedCase& a, const PlannedCase& b) { return order_key(a) < order_key(b); });
  return planned;
}

std::optional<PlannedCase> plan_preflight(const BenchmarkRunSpec& spec) {
  if (!spec.preflight || !spec.preflight->self_test) return std::nullopt;
  const auto plan = plan_cases(spec);
  if (plan.empty()) return std::nullopt;
  const auto precisions = precisions_of(plan);
  CaseSpec c = plan.front().spec;
  for (const PlannedCase& p : plan) {
    c.nodes = std::max(c.nodes, p.spec.nodes);
    c.gpus_per_node = std::max(c.gpus_per_node, p.spec.gpus_per_node);
    c.batch_size_per_device = std::min(c.batch_size_per_device, p.spec.batch_size_per_device);
  }
  c.precision = precisions.front();
  c.preflight = true;
  return PlannedCase{c, case_id(c), false, false};
}

std::vector<Precision> planned_precisions(const BenchmarkRunSpec& spec) { return precisions_of(plan_cases(spec)); }

}  // namespace dlbench
