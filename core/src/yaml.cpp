#include "dlbench/core/yaml.hpp"

#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>
#include <fstream>
#include <iostream>
#include <iterator>
#include <limits>
#include <regex>
#include <sstream>

#include <yaml-cpp/yaml.h>

namespace dlbench {
namespace {

using nlohmann::json;

// Plain (unquoted) scalars resolved by the YAML 1.2 core schema.
json resolve_plain_scalar(const std::string& text) {
  static const std::regex null_pattern("^(~|null|Null|NULL|)$");
  static const std::regex true_pattern("^(true|True|TRUE)$");
  static const std::regex false_pattern("^(false|False|FALSE)$");
  static const std::regex int_pattern("^[-+]?[0-9]+$");
  static const std::regex octal_pattern("^0o[0-7]+$");
  static const std::regex hex_pattern("^0x[0-9a-fA-F]+$");
  static const std::regex float_pattern("^[-+]?(\\.[0-9]+|[0-9]+(\\.[0-9]*)?)([eE][-+]?[0-9]+)?$");
  static const std::regex inf_pattern("^[-+]?\\.(inf|Inf|INF)$");
  static const std::regex nan_pattern("^\\.(nan|NaN|NAN)$");

  if (std::regex_match(text, null_pattern)) return nullptr;
  if (std::regex_match(text, true_pattern)) return true;
  if (std::regex_match(text, false_pattern)) return false;
  const auto parse_integer = [&](std::string_view digits, int base) -> json {
    const bool negative = !digits.empty() && digits.front() == '-';
    if (!digits.empty() && (digits.front() == '-' || digits.front() == '+')) digits.remove_prefix(1);
    std::uint64_t magnitude = 0;
    const auto [end, error] = std::from_chars(digits.data(), digits.data() + digits.size(), magnitude, base);
    if (error != std::errc{} || end != digits.data() + digits.size()) return text;  // too large: keep the text
    if (!negative) {
      if (magnitude <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max())) {
        return static_cast<std::int64_t>(magnitude);
      }
      return magnitude;
    }
    if (magnitude <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()) + 1) {
      return static_cast<std::int64_t>(0 - magnitude);
    }
    return text;
  };
  if (std::regex_match(text, int_pattern)) return parse_integer(text, 10);
  if (std::regex_match(text, octal_pattern)) return parse_integer(std::string_view(text).substr(2), 8);
  if (std::regex_match(text, hex_pattern)) return parse_integer(std::string_view(text).substr(2), 16);
  if (std::regex_match(text, float_pattern)) return std::stod(text);
  if (std::regex_match(text, inf_pattern)) {
    return text.front() == '-' ? -std::numeric_limits<double>::infinity() : std::numeric_limits<double>::infinity();
  }
  if (std::regex_match(text, nan_pattern)) return std::numeric_limits<double>::quiet_NaN();
  return text;
}

json to_json_value(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined: return nullptr;
    case YAML::NodeType::Scalar: {
      const std::string& tag = node.Tag();
      // "!" marks a quoted or block scalar; "?" a plain one; explicit tags are honoured.
      if (tag == "!" || tag == "tag:yaml.org,2002:str") return node.Scalar();
      return resolve_plain_scalar(node.Scalar());
    }
    case YAML::NodeType::Sequence: {
      json out = json::array();
      for (const auto& item : node) out.push_back(to_json_value(item));
      return out;
    }
    case YAML::NodeType::Map: {
      json out = json::object();
      for (const auto& entry : node) {
        const YAML::Node& key = entry.first;
        if (!key.IsScalar()) {
          throw YamlSyntaxError("line " + std::to_string(key.Mark().line + 1) + ": mapping keys must be plain strings");
        }
        out[key.Scalar()] = to_json_value(entry.second);
      }
      return out;
    }
  }
  return nullptr;
}

void emit(YAML::Emitter& out, const json& value) {
  switch (value.type()) {
    case json::value_t::object:
      out << YAML::BeginMap;
      for (const auto& [key, item] : value.items()) {
        out << YAML::Key << key << YAML::Value;
        emit(out, item);
      }
      out << YAML::EndMap;
      break;
    case json::value_t::array:
      out << YAML::BeginSeq;
      for (const auto& item : value) emit(out, item);
      out << YAML::EndSeq;
      break;
    case json::value_t::string: {
      const auto& text = value.get_ref<const std::string&>();
      // Quote strings that would read back as another type.
      if (!resolve_plain_scalar(text).is_string()) {
        out << YAML::DoubleQuoted << text;
      } else {
        out << text;
      }
      break;
    }
    case json::value_t::null: out << YAML::Null; break;
    default: out << value.dump(); break;
  }
}

}  // namespace

std::vector<json> parse_yaml_documents(std::string_view text) {
  std::vector<YAML::Node> nodes;
  try {
    nodes = YAML::LoadAll(std::string(text));
  } catch (const YAML::Exception& e) {
    throw YamlSyntaxError("line " + std::to_string(e.mark.line + 1) + ", column " + std::to_string(e.mark.column + 1) +
                          ": " + e.msg);
  }
  std::vector<json> documents;
  for (const auto& node : nodes) {
    if (node.IsNull() || !node.IsDefined()) continue;  // "---" with nothing after it
    documents.push_back(to_json_value(node));
  }
  return documents;
}

std::vector<json> load_yaml_file(const std::string& path) {
  std::string text;
  if (path == "-") {
    text.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
  } else {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw InputUnreadableError("cannot open " + path + ": " + std::strerror(errno));
    std::ostringstream buffer;
    buffer << in.rdbuf();
    if (in.bad()) throw InputUnreadableError("cannot read " + path);
    text = buffer.str();
  }
  return parse_yaml_documents(text);
}

std::string to_yaml(const json& value) {
  YAML::Emitter out;
  emit(out, value);
  return std::string(out.c_str()) + "\n";
}

}  // namespace dlbench
