#pragma once

#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <nlohmann/json.hpp>

#include "dlbench/core/codec.hpp"

namespace dlbench::testing {

// The smallest valid BenchmarkRun: every test mutates a copy of it.
inline nlohmann::json minimal_run() {
  return nlohmann::json::parse(R"({
    "apiVersion": "dlbench.io/v1alpha1",
    "kind": "BenchmarkRun",
    "metadata": {"name": "t"},
    "spec": {"model": "resnet50", "matrix": {"batchSizePerDevice": [64], "precision": ["fp32"]}}
  })");
}

inline std::vector<std::string> error_strings(const nlohmann::json& document) {
  std::vector<std::string> out;
  for (const auto& e : decode_benchmark_run(document).errors) out.push_back(e.to_string());
  return out;
}

inline std::string source_path(const std::string& relative) { return std::string(DLBENCH_SOURCE_DIR) + "/" + relative; }

}  // namespace dlbench::testing
