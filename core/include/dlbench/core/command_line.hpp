// The five programs parse their command lines with CLI11 and say usage errors in one style,
// naming the flag: "--batch-size needs a value", "unknown option --frobnicate (see --help)".
// Values are read as text and checked by each program, so that a refusal names the allowed values
// in dlbench's words; a usage error is exit code 2 everywhere.
#pragma once

#include <CLI/CLI.hpp>

#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "dlbench/core/names.hpp"
#include "dlbench/core/usage_error.hpp"

namespace dlbench {

// --help as CLI11 lays it out, with each description wrapped to the terminal's usual width under
// its own column (CLI11 2.1 prints a long description on one line).
class WrappedHelp : public CLI::Formatter {
 public:
  static constexpr std::size_t kWidth = 100;

  std::string make_option(const CLI::Option* opt, bool is_positional) const override {
    return two_columns("  " + make_option_name(opt, is_positional) + make_option_opts(opt), make_option_desc(opt));
  }

  std::string make_subcommand(const CLI::App* sub) const override {
    return two_columns("  " + sub->get_display_name(true), sub->get_description());
  }

 private:
  std::string two_columns(const std::string& left, const std::string& description) const {
    std::string out = left;
    std::size_t column = left.size();
    if (column + 2 > column_width_) {
      out += "\n";
      column = 0;
    }
    const std::string indent(column_width_, ' ');
    out += std::string(column_width_ - column, ' ');
    column = column_width_;
    std::istringstream words(description);
    bool first = true;
    for (std::string word; words >> word; first = false) {
      // A line never starts with "|": an alternative stays between spaces (" vgg16 ").
      if (!first && column + 1 + word.size() > kWidth && word != "|") {
        out += "\n" + indent;
        column = column_width_;
      } else if (!first) {
        out += ' ';
        ++column;
      }
      out += word;
      column += word.size();
    }
    return out + "\n";
  }
};

// A program's App, with dlbench's help layout (its subcommands inherit it).
inline void use_dlbench_help(CLI::App& app, std::size_t column_width = 30) {
  auto help = std::make_shared<WrappedHelp>();
  help->column_width(column_width);
  app.formatter(help);
}

// A command-line option whose text `read` checks and stores. It runs once, after the whole line
// is parsed, with the last value given (a later --flag wins, as it always has).
template <typename Read>
CLI::Option* add_text_option(CLI::App& app, const std::string& flag, Read read, const std::string& description,
                             const std::string& value_name = "VALUE") {
  return app.add_option_function<std::string>(flag, read, description)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast)
      ->type_name(value_name);
}

// The usage error in dlbench's words for what CLI11 refused.
inline std::string usage_message(const CLI::ParseError& e) {
  const std::string what = e.what();
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&e) != nullptr) {
    // "--flag: 1 required VALUE missing"
    if (const auto colon = what.find(':'); colon != std::string::npos) return what.substr(0, colon) + " needs a value";
  }
  return what;
}

// Parses `args` (without the program's name) into `app`. Throws UsageError in dlbench's words
// (an argument that no option or positional takes is one, naming it; `bare_word_hint` is added for
// a bare word, where a program has something to say about them); --help throws CLI::CallForHelp
// for the caller to print.
inline void parse_command_line(CLI::App& app, const std::vector<std::string>& args,
                               const std::string& bare_word_hint = "") {
  app.allow_extras(true);
  for (CLI::App* sub : app.get_subcommands({})) sub->allow_extras(true);
  std::vector<std::string> reversed;  // CLI11 takes them last first
  for (auto arg = args.rbegin(); arg != args.rend(); ++arg) {
    // "--flag=" is an empty value (a chart's empty setting), never a flag that takes the next word.
    if (arg->starts_with("--") && arg->find('=') == arg->size() - 1) {
      reversed.emplace_back();
      reversed.push_back(arg->substr(0, arg->size() - 1));
      continue;
    }
    reversed.push_back(*arg);
  }
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    throw;
  } catch (const CLI::ParseError& e) {
    throw UsageError{usage_message(e)};
  }
  for (const std::string& extra : app.remaining(true)) {
    if (extra.starts_with("-") && extra.size() > 1) throw UsageError{"unknown option " + printable(extra) + " (see --help)"};
    throw UsageError{"unexpected argument \"" + printable(extra) + "\" (see --help)" + bare_word_hint};
  }
}

}  // namespace dlbench
