#include <limits>

#include <gtest/gtest.h>

#include "dlbench/core/yaml.hpp"

namespace dlbench {
namespace {

using nlohmann::json;

TEST(Yaml, SeveralDocumentsEmptyOnesSkipped) {
  const auto docs = parse_yaml_documents("---\na: 1\n---\n---\nb: [x, y]\n...\n");
  ASSERT_EQ(docs.size(), 2u);
  EXPECT_EQ(docs[0], (json{{"a", 1}}));
  EXPECT_EQ(docs[1], (json{{"b", {"x", "y"}}}));
}

TEST(Yaml, CoreSchemaScalars) {
  const auto doc = parse_yaml_documents(R"(
int: 42
negative: -7
hex: 0x1F
octal: 0o17
float: 0.0001
exp: 1e3
yes_is_text: yes
bool: true
null_value: ~
empty:
quoted_int: "7"
single_quoted: '0.5'
tagged: !!str 12
text: amp
big: 18446744073709551615
too_big: 99999999999999999999999
)").at(0);
  EXPECT_EQ(doc["int"], 42);
  EXPECT_TRUE(doc["int"].is_number_integer());
  EXPECT_EQ(doc["negative"], -7);
  EXPECT_EQ(doc["hex"], 31);
  EXPECT_EQ(doc["octal"], 15);
  EXPECT_TRUE(doc["float"].is_number_float());
  EXPECT_DOUBLE_EQ(doc["float"].get<double>(), 0.0001);
  EXPECT_DOUBLE_EQ(doc["exp"].get<double>(), 1000.0);
  EXPECT_EQ(doc["yes_is_text"], "yes");
  EXPECT_EQ(doc["bool"], true);
  EXPECT_TRUE(doc["null_value"].is_null());
  EXPECT_TRUE(doc["empty"].is_null());
  EXPECT_EQ(doc["quoted_int"], "7");
  EXPECT_EQ(doc["single_quoted"], "0.5");
  EXPECT_EQ(doc["tagged"], "12");
  EXPECT_EQ(doc["text"], "amp");
  EXPECT_EQ(doc["big"].get<std::uint64_t>(), std::numeric_limits<std::uint64_t>::max());
  EXPECT_EQ(doc["too_big"], "99999999999999999999999");
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
