#include <limits>

#include <gtest/gtest.h>

#include "dlbench/core/yaml.hpp"

namespace dlbench {
namespace {

using nlohmann::json;

TEST(Yaml, SeveralDocumentsEmptyOnesSkipped) {
  const auto docs = parse_yaml_documents("---\na: 1\n---\n---\nb: [x, z]\n...\n");
  ASSERT_EQ(docs.size(), 2u);
  EXPECT_EQ(docs[0], (json{{"a", 1}}));
  EXPECT_EQ(docs[1], (json{{"b", {"x", "z"}}}));
}

// Scalars as kubectl reads them (go-yaml v2, YAML 1.1), so that dlbench judges the object the
// API server would be sent.
TEST(Yaml, ScalarsAsKubectlReadsThem) {
  const auto doc = parse_yaml_documents(R"(
int: 42
negative: -7
hex: 0x1F
octal_prefix: 0o17
octal_leading_zero: 0777
not_octal: 08
binary: 0b101
underscores: 1_000
float: 0.0001
exp: 1e3
yes_is_bool: yes
on_is_bool: On
n_is_bool: n
bool: true
null_value: ~
empty:
quoted_int: "7"
single_quoted: '0.5'
tagged: !!str 12
text: amp
date_stays_text: 2026-11-23
big: 18446744073709551615
too_big: 99999999999999999999999
out_of_range: 1e999
dot_float: .5
)").at(0);
  EXPECT_EQ(doc["int"], 42);
  EXPECT_TRUE(doc["int"].is_number_integer());
  EXPECT_EQ(doc["negative"], -7);
  EXPECT_EQ(doc["hex"], 31);
  EXPECT_EQ(doc["octal_prefix"], 15);
  EXPECT_EQ(doc["octal_leading_zero"], 511);
  EXPECT_DOUBLE_EQ(doc["not_octal"].get<double>(), 8.0);  // not an octal integer: go-yaml's float rule
  EXPECT_EQ(doc["binary"], 5);
  EXPECT_EQ(doc["underscores"], 1000);
  EXPECT_TRUE(doc["float"].is_number_float());
  EXPECT_DOUBLE_EQ(doc["float"].get<double>(), 0.0001);
  EXPECT_DOUBLE_EQ(doc["exp"].get<double>(), 1000.0);
  EXPECT_EQ(doc["yes_is_bool"], true);
  EXPECT_EQ(doc["on_is_bool"], true);
  EXPECT_EQ(doc["n_is_bool"], false);
  EXPECT_EQ(doc["bool"], true);
  EXPECT_TRUE(doc["null_value"].is_null());
  EXPECT_TRUE(doc["empty"].is_null());
  EXPECT_EQ(doc["quoted_int"], "7");
  EXPECT_EQ(doc["single_quoted"], "0.5");
  EXPECT_EQ(doc["tagged"], "12");
  EXPECT_EQ(doc["text"], "amp");
  EXPECT_EQ(doc["date_stays_text"], "2026-11-23");
  EXPECT_EQ(doc["big"].get<std::uint64_t>(), std::numeric_limits<std::uint64_t>::max());
  EXPECT_DOUBLE_EQ(doc["too_big"].get<double>(), 1e23);  // too big for an integer: a float
  EXPECT_EQ(doc["out_of_range"], "1e999");                // beyond double: stays text
  EXPECT_DOUBLE_EQ(doc["dot_float"].get<double>(), 0.5);
}

TEST(Yaml, MergeKeysExplicitKeysWin) {
  const auto doc = parse_yaml_documents(R"(
base: &base {a: 1, b: 2}
child:
  b: 3
  <<: *base
)").at(0);
  EXPECT_EQ(doc["child"], (json{{"a", 1}, {"b", 3}}));
}

TEST(Yaml, HostileStructuresAreRefusedWithAReason) {
  const auto refused = [](const std::string& text, const std::string& why) {
    try {
      parse_yaml_documents(text);
      ADD_FAILURE() << "accepted: " << text.substr(0, 40);
    } catch (const YamlSyntaxError& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  refused("a: &a [*a]\n", "encloses it");
  refused(std::string(200, '['), "nested deeper than 64");
  std::string bomb = "a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n";
  for (int i = 1; i < 8; ++i) {
    bomb += "a" + std::to_string(i) + ": &a" + std::to_string(i) + " [";
    for (int k = 0; k < 10; ++k) bomb += (k ? ", *a" : "*a") + std::to_string(i - 1);
    bomb += "]\n";
  }
  refused(bomb, "more than 250000 values");
  refused("name: \"\xff\"\n", "not UTF-8");
  refused(std::string("a: 1\0b: 2\n", 10), "NUL");
  refused("? [a]\n: b\n", "mapping keys must be scalars");
}

TEST(Yaml, FlowStyleAndJsonInput) {
  const auto doc = parse_yaml_documents(R"({"matrix": {"nodes": [1, 2], "precision": ["amp"]}})").at(0);
  EXPECT_EQ(doc["matrix"]["nodes"], json::array({1, 2}));
}

TEST(Yaml, SyntaxErrorNamesLine) {
  try {
    parse_yaml_documents("a: 1\nb: [1, 2\nc: 3\n");
    FAIL() << "expected a syntax error";
  } catch (const YamlSyntaxError& e) {
    EXPECT_NE(std::string(e.what()).find("line "), std::string::npos) << e.what();
  }
}

TEST(Yaml, UnreadableFile) {
  EXPECT_THROW(load_yaml_file("/nonexistent/run.yaml"), InputUnreadableError);
}

TEST(Yaml, WriterQuotesStringsThatWouldChangeType) {
  const json doc{{"id", "7"}, {"flag", "true"}, {"name", "amp"}, {"n", 3}, {"x", 0.5}, {"list", {"1", 2}}};
  EXPECT_EQ(parse_yaml_documents(to_yaml(doc)).at(0), doc);
}

}  // namespace
}  // namespace dlbench
