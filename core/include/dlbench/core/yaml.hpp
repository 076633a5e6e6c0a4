// YAML input as users write it: one or several documents per file, read into JSON values
// with the YAML 1.2 core schema (so `yes` stays a string and `"7"` stays a string).
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace dlbench {

// The text could not be read as YAML at all; what() names the line and column.
class YamlSyntaxError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The file could not be opened or read.
class InputUnreadableError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Every non-empty document of a YAML (or JSON) stream, in order.
std::vector<nlohmann::json> parse_yaml_documents(std::string_view text);

// Reads the file ("-" is standard input) and parses it.
std::vector<nlohmann::json> load_yaml_file(const std::string& path);

// Block-style YAML of a JSON value, for showing documents to people.
std::string to_yaml(const nlohmann::json& value);

}  // namespace dlbench
