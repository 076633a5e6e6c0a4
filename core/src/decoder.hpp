// Private to core/: the error-collecting JSON reader behind every decoder.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "dlbench/core/api_rules.hpp"
#include "dlbench/core/benchmark_run.hpp"
#include "dlbench/core/decoded.hpp"
#include "dlbench/core/names.hpp"

namespace dlbench::detail {

using nlohmann::json;

inline std::string child(const std::string& path, std::string_view key) {
  return path.empty() ? std::string(key) : path + "." + std::string(key);
}

inline std::string element(const std::string& path, std::size_t index) {
  return path + "[" + std::to_string(index) + "]";
}

inline std::string describe_type(const json& value) {
  switch (value.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "a boolean";
    case json::value_t::string: return "a string";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "an integer";
    case json::value_t::number_float: return "a number";
    case json::value_t::array: return "a list";
    case json::value_t::object: return "an object";
    default: return "an unsupported value";
  }
}

// A short rendering of a bad value for error messages.
inline std::string quote(const json& value) {
  std::string text = value.dump();
  if (text.size() > 60) text = text.substr(0, 57) + "...";
  return text;
}

inline std::string join(std::span<const std::string_view> names) {
  std::string out;
  for (const auto name : names) {
    if (!out.empty()) out += ", ";
    out += name;
  }
  return out;
}
inline std::string join(std::initializer_list<std::string_view> names) {
  return join(std::span<const std::string_view>(names.begin(), names.size()));
}

inline std::string format_number(double value) {
  json j = value;
  if (value == std::floor(value) && std::fabs(value) < 1e15) j = static_cast<std::int64_t>(value);
  return j.dump();
}

class Decoder {
 public:
  std::vector<FieldError> errors;

  void fail(const std::string& path, std::string message) { errors.push_back({path, std::move(message)}); }

  // obj[key], or nullptr when absent or null.
  static const json* find(const json& obj, std::string_view key) {
    if (!obj.is_object()) return nullptr;
    const auto it = obj.find(key);
    if (it == obj.end() || it->is_null()) return nullptr;
    return &*it;
  }

  const json* require(const json& obj, const std::string& path, std::string_view key, const std::string& hint) {
    const json* value = find(obj, key);
    if (value == nullptr) fail(child(path, key), "required" + (hint.empty() ? "" : "; " + hint));
    return value;
  }

  bool expect_object(const json& value, const std::string& path) {
    if (value.is_object()) return true;
    const bool scalar = !value.is_array() && !value.is_null();
    fail(path, "expected an object, got " + describe_type(value) + (scalar ? " (" + quote(value) + ")" : ""));
    return false;
  }

  void reject_unknown(const json& obj, const std::string& path, std::initializer_list<std::string_view> known) {
    for (const auto& [key, value] : obj.items()) {
      if (std::find(known.begin(), known.end(), key) == known.end()) {
        fail(child(path, key), "unknown field; allowed fields: " + join(known));
      }
    }
  }

  std::optional<std::int64_t> integer(const json& value, const std::string& path, IntBounds b) {
    // 4.0 is an integer to the API server's schema validation (a float with no fraction), so it
    // is one here too; 4.5 is not.
    if (value.is_number_float()) {
      const double number = value.get<double>();
      if (std::isfinite(number) && number == std::floor(number) && std::fabs(number) < 9.2e18) {
        return integer(json(static_cast<std::int64_t>(number)), path, b);
      }
    }
    if (!value.is_number_integer()) {
      fail(path, "expected an integer from " + std::to_string(b.min) + " to " + std::to_string(b.max) +
                     ", got " + describe_type(value) + " (" + quote(value) + ")");
      return std::nullopt;
    }
    // Unsigned JSON numbers above int64 are out of range anyway.
    if (value.is_number_unsigned() && value.get<std::uint64_t>() > static_cast<std::uint64_t>(b.max)) {
      fail(path, quote(value) + " is out of range; allowed: " + std::to_string(b.min) + " to " + std::to_string(b.max));
      return std::nullopt;
    }
    const auto number = value.get<std::int64_t>();
    if (number < b.min || number > b.max) {
      fail(path, std::to_string(number) + " is out of range; allowed: " + std::to_string(b.min) + " to " +
                     std::to_string(b.max));
      return std::nullopt;
    }
    return number;
  }

  void read_int(const json& obj, const std::string& path, std::string_view key, IntBounds b, int& out) {
    if (const json* value = find(obj, key)) {
      if (auto number = integer(*value, child(path, key), b)) out = static_cast<int>(*number);
    }
  }

  void read_int64(const json& obj, const std::string& path, std::string_view key, IntBounds b, std::int64_t& out) {
    if (const json* value = find(obj, key)) {
      if (auto number = integer(*value, child(path, key), b)) out = *number;
    }
  }

  // A real number within bounds whose ends may be exclusive.
  void read_number(const json& obj, const std::string& path, std::string_view key, RealBounds b, double& out) {
    const json* value = find(obj, key);
    if (value == nullptr) return;
    const std::string where = child(path, key);
    const std::string range = b.describe();
    if (!value->is_number()) {
      fail(where, "expected a number " + range + ", got " + describe_type(*value) + " (" + quote(*value) + ")");
      return;
    }
    const double number = value->get<double>();
    if (!std::isfinite(number) || !b.contains(number)) {
      fail(where, quote(*value) + " is out of range; allowed: " + range);
      return;
    }
    out = number;
  }

  // An optional real number: set where the key is present and valid, left unset where absent.
  void read_number(const json& obj, const std::string& path, std::string_view key, RealBounds b,
                   std::optional<double>& out) {
    double number = 0;
    const std::size_t errors_before = errors.size();
    read_number(obj, path, key, b, number);
    if (find(obj, key) != nullptr && errors.size() == errors_before) out = number;
  }

  // Moves the collected errors into a Decoded<T>, with the value only when there are none.
  template <typename T>
  Decoded<T> finish(T&& value) {
    Decoded<T> out;
    out.errors = std::move(errors);
    if (out.errors.empty()) out.value = std::forward<T>(value);
    return out;
  }

  // A non-negative real number (results carry these).
  std::optional<double> measurement(const json& value, const std::string& path) {
    if (!value.is_number()) {
      fail(path, "expected a number, got " + describe_type(value));
      return std::nullopt;
    }
    const double number = value.get<double>();
    if (!std::isfinite(number) || number < 0) {
      fail(path, quote(value) + " is not a finite, non-negative number");
      return std::nullopt;
    }
    return number;
  }

  std::optional<std::string> string(const json& value, const std::string& path) {
    if (!value.is_string()) {
      fail(path, "expected a string, got " + describe_type(value) + " (" + quote(value) + ")");
      return std::nullopt;
    }
    return value.get<std::string>();
  }

  void read_string(const json& obj, const std::string& path, std::string_view key, std::string& out) {
    if (const json* value = find(obj, key)) {
      if (auto text = string(*value, child(path, key))) out = *text;
    }
  }

  // A string of at most max_length bytes (the CRD's maxLength counts characters; the difference
  // only matters past ASCII, where this is stricter).
  void read_string(const json& obj, const std::string& path, std::string_view key, std::size_t max_length,
                   std::string& out) {
    const json* value = find(obj, key);
    if (value == nullptr) return;
    auto text = string(*value, child(path, key));
    if (!text) return;
    if (!within_length(*text, child(path, key), max_length)) return;
    out = *text;
  }

  bool within_length(const std::string& text, const std::string& path, std::size_t max_length) {
    if (text.size() <= max_length) return true;
    fail(path, "is " + std::to_string(text.size()) + " characters long; at most " + std::to_string(max_length) +
                   " allowed");
    return false;
  }

  // A string that must satisfy `valid` (one of names.hpp's checks), described by `what`.
  template <typename Check>
  void read_name(const json& obj, const std::string& path, std::string_view key, Check valid, const std::string& what,
                 std::string& out) {
    const json* value = find(obj, key);
    if (value == nullptr) return;
    auto text = string(*value, child(path, key));
    if (!text) return;
    if (!valid(*text)) {
      fail(child(path, key), "\"" + printable(*text) + "\" is not " + what);
      return;
    }
    out = *text;
  }

  template <typename E>
  std::optional<E> enumeration(const json& value, const std::string& path) {
    if (!value.is_string()) {
      fail(path, "expected one of " + allowed_values<E>() + ", got " + describe_type(value) + " (" + quote(value) + ")");
      return std::nullopt;
    }
    const auto parsed = enum_from_string<E>(value.get<std::string>());
    if (!parsed) fail(path, quote(value) + " is not one of " + allowed_values<E>());
    return parsed;
  }

  void read_bool(const json& obj, const std::string& path, std::string_view key, bool& out) {
    const json* value = find(obj, key);
    if (value == nullptr) return;
    if (!value->is_boolean()) {
      fail(child(path, key), "expected true or false, got " + describe_type(*value) + " (" + quote(*value) + ")");
      return;
    }
    out = value->get<bool>();
  }

  template <typename E>
  void read_enum(const json& obj, const std::string& path, std::string_view key, E& out) {
    if (const json* value = find(obj, key)) {
      if (auto parsed = enumeration<E>(*value, child(path, key))) out = *parsed;
    }
  }

  // A list with at least min_items and at most max_items entries; nullptr otherwise.
  const json* list(const json& value, const std::string& path, std::int64_t min_items, std::int64_t max_items) {
    if (!value.is_array()) {
      fail(path, "expected a list, got " + describe_type(value) + " (" + quote(value) + ")");
      return nullptr;
    }
    const auto size = static_cast<std::int64_t>(value.size());
    if (size < min_items) {
      fail(path, "must have at least " + std::to_string(min_items) + (min_items == 1 ? " entry" : " entries"));
      return nullptr;
    }
    if (size > max_items) {
      fail(path, "has " + std::to_string(size) + " entries; at most " + std::to_string(max_items) + " allowed");
      return nullptr;
    }
    return &value;
  }

  // A map of Kubernetes labels (or annotations, label_values = false): qualified-name keys,
  // label values of at most 63 characters.
  void label_map(const json& value, const std::string& path, std::size_t max_entries, bool label_values,
                 std::map<std::string, std::string>& out) {
    if (!expect_object(value, path)) return;
    if (value.size() > max_entries) {
      fail(path, "has " + std::to_string(value.size()) + " entries; at most " + std::to_string(max_entries) + " allowed");
      return;
    }
    std::size_t total = 0;
    for (const auto& [key, entry] : value.items()) {
      const std::string where = child(path, printable(key));
      if (!is_qualified_name(key)) {
        fail(where, "\"" + printable(key) + "\" is not a valid key: [prefix/]name, the prefix a DNS subdomain, the name "
                    "up to 63 letters, digits, '-', '_' or '.', beginning and ending with a letter or digit");
        continue;
      }
      auto text = string(entry, where);
      if (!text) continue;
      if (label_values && !is_label_value(*text)) {
        fail(where, "\"" + printable(*text) + "\" is not a valid label value: empty, or up to 63 letters, digits, '-', '_' "
                    "or '.', beginning and ending with a letter or digit");
        continue;
      }
      total += key.size() + text->size();
      out[key] = *text;
    }
    // Kubernetes' limit on all of an object's annotations together.
    constexpr std::size_t kAnnotationBytes = 256 * 1024;
    if (!label_values && total > kAnnotationBytes) {
      fail(path, "total size " + std::to_string(total) + " bytes; at most " + std::to_string(kAnnotationBytes) + " allowed");
    }
  }
};


std::optional<CaseSpec> decode_case(Decoder& d, const json& obj, const std::string& path, bool allow_id);
std::optional<SampleSummary> decode_summary(Decoder& d, const json& obj, const std::string& path,
                                            std::initializer_list<std::string_view> extra_fields);
// spec.optimizer (unset fields keep `out`'s values; an unset or null learning rate stays unset).
void decode_optimizer(Decoder& d, const json& obj, const std::string& path, OptimizerRequest& out);
// The optimizer a case trained with (a result document's, a status result's): every field
// required, none defaulted, each within the spec's bounds. nullopt with errors where not.
std::optional<OptimizerSpec> decode_optimizer_that_ran(Decoder& d, const json& obj, const std::string& path);
json optimizer_to_json(const OptimizerSpec& optimizer);
json optimizer_to_json(const OptimizerRequest& optimizer);  // without learningRate where unset
std::optional<Throughput> decode_throughput(Decoder& d, const json& obj, const std::string& path);
json throughput_to_json(const Throughput& throughput);
std::optional<InputReport> decode_input_report(Decoder& d, const json& obj, const std::string& path);
json input_report_to_json(const InputReport& input);
std::optional<GpuReadings> decode_gpu_readings(Decoder& d, const json& obj, const std::string& path);
std::optional<InterferenceReport> decode_interference(Decoder& d, const json& obj, const std::string& path);
json interference_to_json(const InterferenceReport& report);
std::optional<StabilityReport> decode_stability(Decoder& d, const json& obj, const std::string& path);
json stability_to_json(const StabilityReport& report);
std::optional<FlopsReport> decode_flops(Decoder& d, const json& obj, const std::string& path);
json flops_to_json(const FlopsReport& report);
std::optional<EnergyReport> decode_energy(Decoder& d, const json& obj, const std::string& path);
json energy_to_json(const EnergyReport& report);
std::optional<LossScalingReport> decode_loss_scaling(Decoder& d, const json& obj, const std::string& path);
json loss_scaling_to_json(const LossScalingReport& report);
std::optional<CommunicationReport> decode_communication(Decoder& d, const json& obj, const std::string& path);
json communication_to_json(const CommunicationReport& report);
// spec.worker's lists, and the same lists in spec.podTemplateOverrides.
void decode_tolerations(Decoder& d, const json& list, const std::string& path, std::vector<Toleration>& out);
void decode_env(Decoder& d, const json& list, const std::string& path, std::vector<EnvVar>& out);
// spec.podTemplateOverrides (pod_overrides.cpp): each entry on its own, then the rules across
// fields once the whole spec is read.
void decode_pod_template_overrides(Decoder& d, const json& list, const std::string& path,
                                   std::vector<PodTemplateOverride>& out);
void check_pod_template_overrides(Decoder& d, const BenchmarkRunSpec& spec, const std::string& path);
json pod_template_overrides_to_json(const std::vector<PodTemplateOverride>& overrides);
std::optional<NcclTransport> decode_nccl_transport(Decoder& d, const json& obj, const std::string& path);
json nccl_transport_to_json(const NcclTransport& transport);
std::optional<CaseEnvironment> decode_case_environment(Decoder& d, const json& obj, const std::string& path);
json case_environment_to_json(const CaseEnvironment& environment);

}  // namespace dlbench::detail
