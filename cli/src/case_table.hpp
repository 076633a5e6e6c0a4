#pragma once

#include <ostream>
#include <vector>

#include "dlbench/core/planner.hpp"

namespace dlbench::cli {

// The planned cases as an aligned text table, one row per case, in run order.
void print_case_table(std::ostream& out, const std::vector<PlannedCase>& cases);

}  // namespace dlbench::cli
