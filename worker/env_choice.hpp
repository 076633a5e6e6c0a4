// The value of one of the backends' developer switches (DLBENCH_CUDA_LAYOUT, _BATCH_NORM,
// _BATCH_NORM_MODE, _CONV, _CONV_BATCH_NORM, _ALGORITHMS, _RESIDUAL_GRAD, _ATTENTION, _WEIGHT_COPIES,
// _PAD_INPUT_CHANNELS, _POOL; DLBENCH_INPUT_RESIZE; DLBENCH_CPU_ATTENTION, _HALVES, _RESAMPLER, _LINEAR_WEIGHTS, _CONV_BACKWARD_DATA, _CONV_BATCH_NORM, _FP16): each is read once,
// and a wrong value is refused naming the variable and what it allows, whichever switch it is. A switch's names are
// one table (`Choices`), which also names the value a backend took in its result
// (Backend::options).
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace dlbench::worker {

template <typename T, std::size_t N>
using Choices = std::array<std::pair<std::string_view, T>, N>;

// `value` (null or empty: unset, nullopt) as the one of `allowed` it names. Throws
// std::invalid_argument for anything else: `VARIABLE: "value" is not one of a, b`.
template <typename T, std::size_t N>
std::optional<T> env_choice(const char* variable, const char* value, const Choices<T, N>& allowed) {
  const std::string_view chosen = value == nullptr ? std::string_view() : std::string_view(value);
  if (chosen.empty()) return std::nullopt;
  std::string names;
  for (const auto& [name, meaning] : allowed) {
    if (name == chosen) return meaning;
    names += (names.empty() ? "" : ", ") + std::string(name);
  }
  throw std::invalid_argument(std::string(variable) + ": \"" + std::string(chosen) + "\" is not one of " + names);
}

// The name `allowed` gives `value` (a table covers every value of its switch).
template <typename T, std::size_t N>
constexpr std::string_view choice_name(const Choices<T, N>& allowed, T value) {
  for (const auto& [name, meaning] : allowed) {
    if (meaning == value) return name;
  }
  return "?";
}

}  // namespace dlbench::worker
