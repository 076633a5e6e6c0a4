#pragma once

#include <ostream>
#include <vector>

#include "dlbench/core/planner.hpp"

namespace dlbench::cli {

// The planned cases of `spec` as an aligned text table, one row per case, in run order, with the
// learning rate each trains at (the model's recipe at its global batch where the spec sets none).
void print_case_table(std::ostream& out, const BenchmarkRunSpec& spec, const std::vector<PlannedCase>& cases);

}  // namespace dlbench::cli
