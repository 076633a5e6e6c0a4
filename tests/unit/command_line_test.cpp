// The command-line conventions every program shares (core/command_line.hpp), on CLI11.
#include "dlbench/core/command_line.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sstream>

namespace dlbench {
namespace {

using ::testing::HasSubstr;

struct Parsed {
  std::optional<std::string> error;
  std::string model = "unset", output = "unset";
  bool quiet = false;
};

Parsed parse(const std::vector<std::string>& args, const std::string& bare_word_hint = "") {
  Parsed p;
  CLI::App app{"test", "test"};
  use_dlbench_help(app);
  add_text_option(app, "--model", [&p](const std::string& v) { p.model = v; }, "the model", "NAME");
  add_text_option(app, "--output", [&p](const std::string& v) { p.output = v; }, "the file", "FILE");
  app.add_flag("--quiet", p.quiet, "less");
  try {
    parse_command_line(app, args, bare_word_hint);
  } catch (const UsageError& e) {
    p.error = e.message;
  }
  return p;
}

TEST(CommandLine, ValuesWithOrWithoutEqualsAndTheLastOneWins) {
  const Parsed p = parse({"--model", "vgg16", "--output=a.json", "--model=alexnet", "--quiet"});
  EXPECT_FALSE(p.error.has_value()) << *p.error;
  EXPECT_EQ(p.model, "alexnet");
  EXPECT_EQ(p.output, "a.json");
  EXPECT_TRUE(p.quiet);
}

// A chart renders an empty setting as "--flag=": an empty value, not a flag eating the next word.
TEST(CommandLine, AnEmptyValueAfterEqualsIsEmpty) {
  const Parsed p = parse({"--output=", "--model", "vgg16"});
  EXPECT_FALSE(p.error.has_value()) << *p.error;
  EXPECT_EQ(p.output, "");
  EXPECT_EQ(p.model, "vgg16");
}

TEST(CommandLine, NegativeNumbersAreValues) {
  const Parsed p = parse({"--model", "-3"});
  EXPECT_FALSE(p.error.has_value()) << *p.error;
  EXPECT_EQ(p.model, "-3");
}

TEST(CommandLine, UsageErrorsNameTheFlagOrTheWord) {
  EXPECT_EQ(parse({"--model"}).error, "--model needs a value");
  EXPECT_EQ(parse({"--frobnicate", "1"}).error, "unknown option --frobnicate (see --help)");
  EXPECT_EQ(parse({"stray"}).error, "unexpected argument \"stray\" (see --help)");
  EXPECT_EQ(parse({"stray"}, "; the command goes after --").error,
            "unexpected argument \"stray\" (see --help); the command goes after --");
  EXPECT_EQ(parse({"--frobnicate"}, "; the command goes after --").error, "unknown option --frobnicate (see --help)");
  // Control bytes in what the user typed are quoted, never written to the terminal raw.
  EXPECT_THAT(*parse({"--\x1b[31m"}).error, HasSubstr("\\x1b"));
}

TEST(CommandLine, OneOfNamesTheFlagAndTheAllowedValues) {
  EXPECT_EQ(one_of("--data", "imagefolder", {"synthetic", "imagefolder"}), "imagefolder");
  try {
    one_of("--data", "tfrecord", {"synthetic", "imagefolder"});
    FAIL() << "tfrecord was accepted";
  } catch (const UsageError& e) {
    EXPECT_EQ(e.message, "--data: \"tfrecord\" is not one of synthetic, imagefolder");
  }
  EXPECT_EQ(one_of<int>("--n", "two", {{"one", 1}, {"two", 2}}), 2);
  EXPECT_THROW(one_of<int>("--n", "three", {{"one", 1}, {"two", 2}}), UsageError);
}

TEST(CommandLine, ABoundedNumberSaysWhetherItIsNoNumberOrOutOfRange) {
  EXPECT_EQ(parse_bounded("--repeats", "7", 1, 1000), 7);
  EXPECT_EQ(parse_bounded("--port", "0", 0, 65535), 0);
  EXPECT_EQ(parse_bounded("--offset", "-3", -5, 5), -3);
  const auto refusal = [](const std::string& text) -> std::string {
    try {
      parse_bounded("--repeats", text, 1, 1000);
    } catch (const UsageError& e) {
      return e.message;
    }
    return "accepted";
  };
  for (const std::string bad : {"", "x", "1.5", " 3", "3 ", "+3", "0x10", "3s"}) {
    EXPECT_EQ(refusal(bad), "--repeats: \"" + bad + "\" is not a number") << bad;
  }
  for (const std::string far : {"0", "-1", "1001", "99999999999999999999999"}) {
    EXPECT_EQ(refusal(far), "--repeats: " + far + " is out of range; allowed: 1 to 1000") << far;
  }
  // What the user typed is quoted printably, never written raw.
  EXPECT_THAT(refusal("\x1b[31m"), HasSubstr("\\x1b"));
}

TEST(CommandLine, HelpIsThrownForTheCallerAndWrappedUnderItsColumn) {
  CLI::App app{"test", "test"};
  use_dlbench_help(app);
  add_text_option(app, "--model", [](const std::string&) {},
                  "resnet50 | resnet152 | vgg16 | alexnet | inception_v3 | deeplabv3plus | bert-base (and a long tail "
                  "of words so that the description wraps more than once under its column)",
                  "NAME");
  EXPECT_THROW(parse_command_line(app, {"--help"}), CLI::CallForHelp);
  std::istringstream help(app.help());
  int description_lines = 0;
  for (std::string line; std::getline(help, line);) {
    EXPECT_LE(line.size(), WrappedHelp::kWidth + 2) << line;  // a "|" may overhang by two
    if (line.size() > 30 && line.find("--model") == std::string::npos && line.starts_with(std::string(30, ' '))) {
      ++description_lines;
      EXPECT_NE(line[30], '|') << "a line starts with an alternative's bar: " << line;
    }
  }
  EXPECT_GE(description_lines, 1);
}

}  // namespace
}  // namespace dlbench
