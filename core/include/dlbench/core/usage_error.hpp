// A usage error, the same in the five programs: a message naming the flag and what is allowed,
// said on stderr, exit code 2. Apart from command_line.hpp so that code which throws it need not
// see CLI11.
#pragma once

#include <charconv>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <system_error>
#include <utility>

#include "dlbench/core/names.hpp"

namespace dlbench {

inline constexpr int kExitUsageError = 2;

// A command line that cannot run, in dlbench's words: each program says it on stderr and exits
// kExitUsageError.
struct UsageError {
  std::string message;
};

// A value that is none of the allowed ones: the usage error names the flag and what is allowed.
[[noreturn]] inline void refuse_choice(const std::string& flag, const std::string& text, const std::string& allowed) {
  throw UsageError{flag + ": \"" + printable(text) + "\" is not one of " + allowed};
}

// `text` if it is one of `allowed`, else a usage error naming the flag and the allowed values.
inline std::string one_of(const std::string& flag, const std::string& text, std::initializer_list<const char*> allowed) {
  std::string listed;
  for (const char* a : allowed) {
    if (text == a) return text;
    listed += (listed.empty() ? "" : ", ") + std::string(a);
  }
  refuse_choice(flag, text, listed);
}

// The value of the name `text` is, else a usage error naming the flag and the allowed names.
template <typename T>
T one_of(const std::string& flag, const std::string& text, std::span<const std::pair<const char*, T>> allowed) {
  std::string listed;
  for (const auto& [name, value] : allowed) {
    if (text == name) return value;
    listed += (listed.empty() ? "" : ", ") + std::string(name);
  }
  refuse_choice(flag, text, listed);
}
template <typename T>
T one_of(const std::string& flag, const std::string& text, std::initializer_list<std::pair<const char*, T>> allowed) {
  return one_of(flag, text, std::span<const std::pair<const char*, T>>(allowed.begin(), allowed.size()));
}

// A flag's whole number within [low, high] (no sign but '-', no spaces, no fraction), else a usage
// error naming the flag: "is not a number" or "is out of range; allowed: LOW to HIGH", the API
// validation's words. The one reading of numeric flags in the five programs.
inline std::int64_t parse_bounded(const std::string& flag, const std::string& text, std::int64_t low, std::int64_t high) {
  std::int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [stopped, error] = std::from_chars(text.data(), end, value);
  const bool too_many_digits = error == std::errc::result_out_of_range;
  if (text.empty() || (error != std::errc{} && !too_many_digits) || stopped != end) {
    throw UsageError{flag + ": \"" + printable(text) + "\" is not a number"};
  }
  if (too_many_digits || value < low || value > high) {
    throw UsageError{flag + ": " + printable(text) + " is out of range; allowed: " + std::to_string(low) + " to " + std::to_string(high)};
  }
  return value;
}

}  // namespace dlbench
