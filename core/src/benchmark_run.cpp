#include "dlbench/core/benchmark_run.hpp"

#include <string>

namespace dlbench {

std::string case_id(const CaseSpec& c) {
  return std::to_string(c.nodes) + "x" + std::to_string(c.gpus_per_node) + "-bs" +
         std::to_string(c.batch_size_per_device) + "-" + std::string(to_string(c.precision));
}

}  // namespace dlbench
