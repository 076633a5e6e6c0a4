#include "injected_failure.hpp"

#include <charconv>
#include <stdexcept>
#include <string_view>

namespace dlbench::worker {

namespace {

// The whole of `text` as a decimal number of type T, or nothing (a sign, a space, a trailing
// letter or an overflow included).
template <typename T>
std::optional<T> whole_decimal(std::string_view text) {
  T value{};
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || text.front() == '-' || error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

}  // namespace

std::optional<InjectedFailure> parse_injected_failure(const char* value) {
  const std::string_view text = value == nullptr ? std::string_view() : std::string_view(value);
  if (text.empty()) return std::nullopt;
  const auto colon = text.find(':');
  const auto rank = colon == std::string_view::npos ? std::nullopt : whole_decimal<int>(text.substr(0, colon));
  const auto step = colon == std::string_view::npos ? std::nullopt : whole_decimal<std::int64_t>(text.substr(colon + 1));
  if (!rank || !step || *step < 1) {
    throw std::invalid_argument(std::string(kInjectFailureVariable) + ": \"" + std::string(text) +
                                "\" is not RANK:STEP (a rank from 0, a step from 1, e.g. 1:20)");
  }
  return InjectedFailure{*rank, *step};
}

void StepFailpoint::before_step() {
  if (step_ == 0 || ++taken_ != step_) return;
  throw std::runtime_error("a failure injected by " + std::string(kInjectFailureVariable) + " in step " +
                           std::to_string(step_));
}

}  // namespace dlbench::worker
