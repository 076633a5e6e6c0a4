// YAML input as users write it: one or several documents per file, read into JSON values the
// way kubectl reads them (YAML 1.1 scalars as go-yaml v2 resolves them: `yes` and `on` are
// booleans, `0777` is octal, `1_000` is 1000, `1e999` stays a string), so that `dlbench
// validate` judges the same object the API server would be sent.
//
// Limits (hostile input ends in an error naming the file and the problem, never a crash):
// files of at most kMaxInputBytes, well-formed UTF-8, nesting at most kMaxNestingDepth deep,
// at most kMaxNodes values per document after aliases are expanded, and no alias to a node
// that contains it.
#pragma once

#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace dlbench {

inline constexpr std::size_t kMaxInputBytes = 8u << 20;  // a BenchmarkRun in etcd is below 1.5 MiB
inline constexpr std::size_t kMaxNestingDepth = 64;      // a BenchmarkRun is about 8 deep
inline constexpr std::size_t kMaxNodes = 250'000;        // per document, aliases expanded (a 1,000-result status is ~30,000)

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

// Reads the file ("-" is standard input) and parses it. Errors name the file.
std::vector<nlohmann::json> load_yaml_file(const std::string& path);

// The whole file ("-" is standard input), refusing more than max_bytes (the read stops there:
// /dev/zero is refused, not read until memory runs out). parse_yaml_documents checks the text.
std::string read_input_file(const std::string& path, std::size_t max_bytes = kMaxInputBytes);

// Block-style YAML of a JSON value, for showing documents to people.
std::string to_yaml(const nlohmann::json& value);

}  // namespace dlbench
