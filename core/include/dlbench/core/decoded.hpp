// What a decoder returns: the value, or every error with its field path, and the defaults it
// applied. Shared by the BenchmarkRun codec, the result documents and the decoder they use.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dlbench {

struct FieldError {
  std::string path;     // "spec.matrix.precision[1]"
  std::string message;  // "\"fp8\" is not one of fp32, tf32, amp, bf16"
  std::string to_string() const { return path.empty() ? message : path + ": " + message; }
  bool operator==(const FieldError&) const = default;
};

struct AppliedDefault {
  std::string path;  // "spec.methodology.repeats"
  nlohmann::json value;
};

template <typename T>
struct Decoded {
  std::optional<T> value;  // present exactly when errors is empty
  std::vector<FieldError> errors;
  std::vector<AppliedDefault> defaults;  // what apply_defaults filled in, in order
  bool ok() const { return errors.empty(); }
};

}  // namespace dlbench
