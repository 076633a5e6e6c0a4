#include "command/markers.hpp"

#include <cctype>
#include <charconv>
#include <cmath>
#include <limits>
#include <optional>
#include <string>

#include "dlbench/core/api_rules.hpp"

namespace dlbench::command {
namespace {

constexpr const char* kForms =
    "expected \"@dlbench step <samples>\", \"@dlbench fact <key> <value>\", \"@dlbench loss <value>\" or "
    "\"@dlbench unsupported <why>\"";

// A loss as scripts print it: a number, or Python's and C's words for the values that are not
// finite (nan, inf, -inf, in any case, as float() accepts them).
std::optional<double> loss_value(std::string_view text) {
  std::string lower(text);
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (lower == "nan" || lower == "+nan" || lower == "-nan") return std::numeric_limits<double>::quiet_NaN();
  if (lower == "inf" || lower == "+inf" || lower == "infinity" || lower == "+infinity") {
    return std::numeric_limits<double>::infinity();
  }
  if (lower == "-inf" || lower == "-infinity") return -std::numeric_limits<double>::infinity();
  double value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (ec != std::errc() || end != text.data() + text.size() || !std::isfinite(value)) return std::nullopt;
  return value;
}

std::string_view next_word(std::string_view& rest) {
  const auto begin = rest.find_first_not_of(' ');
  if (begin == std::string_view::npos) {
    rest = {};
    return {};
  }
  rest.remove_prefix(begin);
  const auto end = rest.find(' ');
  const std::string_view word = rest.substr(0, end);
  rest.remove_prefix(end == std::string_view::npos ? rest.size() : end);
  return word;
}

Marker invalid(std::string error) {
  Marker m;
  m.kind = Marker::Kind::invalid;
  m.error = std::move(error);
  return m;
}

bool is_fact_key(std::string_view key) {
  if (key.empty() || key.size() > kMaxFactKeyLength) return false;
  if (!((key[0] >= 'a' && key[0] <= 'z') || (key[0] >= 'A' && key[0] <= 'Z'))) return false;
  for (const char c : key) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' ||
                    c == '.' || c == '-';
    if (!ok) return false;
  }
  return true;
}

}  // namespace

Marker parse_marker(std::string_view line) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  if (!line.starts_with(kMarkerPrefix)) return {};
  std::string_view rest = line.substr(kMarkerPrefix.size());
  if (!rest.empty() && rest.front() != ' ') return {};  // "@dlbenchmark…": not ours
  const std::string_view kind = next_word(rest);
  if (kind == "step") {
    const std::string_view count = next_word(rest);
    const auto samples = whole_number(count, {1, std::numeric_limits<long>::max()});
    if (!samples) {
      return invalid("step: <samples> must be a whole number >= 1 (the step's global sample count), got \"" +
                     std::string(count.substr(0, 32)) + "\"");
    }
    if (!next_word(rest).empty()) return invalid("step: takes one argument, <samples>");
    Marker m;
    m.kind = Marker::Kind::step;
    m.samples = static_cast<long>(*samples);
    return m;
  }
  if (kind == "fact") {
    const std::string_view key = next_word(rest);
    if (!is_fact_key(key)) {
      return invalid("fact: <key> must be 1-63 letters, digits, '_', '.' or '-', starting with a letter, got \"" +
                     std::string(key.substr(0, 64)) + "\"");
    }
    const auto begin = rest.find_first_not_of(' ');
    std::string_view value = begin == std::string_view::npos ? std::string_view{} : rest.substr(begin);
    while (!value.empty() && value.back() == ' ') value.remove_suffix(1);
    if (value.empty()) return invalid("fact " + std::string(key) + ": <value> is missing");
    Marker m;
    m.kind = Marker::Kind::fact;
    m.key = key;
    m.value = value.substr(0, kMaxFactValueLength);
    return m;
  }
  if (kind == "loss") {
    const std::string_view text = next_word(rest);
    const auto value = loss_value(text);
    if (!value) {
      return invalid("loss: <value> must be a number (or nan, inf, -inf), got \"" + std::string(text.substr(0, 32)) + "\"");
    }
    if (!next_word(rest).empty()) return invalid("loss: takes one argument, <value>");
    Marker m;
    m.kind = Marker::Kind::loss;
    m.loss = *value;
    return m;
  }
  if (kind == "unsupported") {
    const auto begin = rest.find_first_not_of(' ');
    std::string_view why = begin == std::string_view::npos ? std::string_view{} : rest.substr(begin);
    if (why.empty()) return invalid("unsupported: say why the case cannot run, e.g. \"@dlbench unsupported bf16 needs "
                                    "a GPU with bfloat16\"");
    Marker m;
    m.kind = Marker::Kind::unsupported;
    m.value = why.substr(0, 1024);
    return m;
  }
  return invalid("unknown marker \"" + std::string(kind.substr(0, 32)) + "\"; " + kForms);
}

}  // namespace dlbench::command
