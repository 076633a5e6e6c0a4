// JSON <-> C++ for the BenchmarkRun API. Decoding never stops at the first problem: it
// returns every error, each naming the field path and what is allowed there.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dlbench/core/benchmark_run.hpp"
#include "dlbench/core/decoded.hpp"

namespace dlbench {

// Fills every absent field that has a default (api_field_rules()), the way the API server
// applies the CRD's defaults, and reports each one. Explicit nulls count as absent.
std::vector<AppliedDefault> apply_defaults(nlohmann::json& benchmark_run);

// Applies defaults, decodes and validates a whole BenchmarkRun document.
Decoded<BenchmarkRun> decode_benchmark_run(const nlohmann::json& document);
Decoded<BenchmarkRunStatus> decode_status(const nlohmann::json& status);
Decoded<CaseResult> decode_case_result(const nlohmann::json& result);

// Canonical JSON: camelCase names as in the CRD; every defaulted field written out.
nlohmann::json to_json(const BenchmarkRun& run);
nlohmann::json to_json(const BenchmarkRunSpec& spec);
nlohmann::json to_json(const BenchmarkRunStatus& status);
nlohmann::json to_json(const CaseSpec& c);
nlohmann::json to_json(const OptimizerSpec& optimizer);  // {name, learningRate, momentum, weightDecay}
nlohmann::json to_json(const CaseResult& result);
nlohmann::json to_json(const SampleSummary& summary);
// spec.worker's tolerations and env are Kubernetes' own shapes: the operator puts these into pods.
nlohmann::json to_json(const Toleration& toleration);
nlohmann::json to_json(const EnvVar& variable);

}  // namespace dlbench
