#include "merge_patch.hpp"

namespace dlbench::operator_ {

nlohmann::json merge_patch_between(const nlohmann::json& from, const nlohmann::json& to) {
  if (!from.is_object() || !to.is_object()) return to;
  nlohmann::json patch = nlohmann::json::object();
  for (const auto& [key, old_value] : from.items()) {
    if (!to.contains(key)) patch[key] = nullptr;
  }
  for (const auto& [key, new_value] : to.items()) {
    const auto old = from.find(key);
    if (old == from.end()) {
      patch[key] = new_value;
    } else if (*old != new_value) {
      patch[key] = old->is_object() && new_value.is_object() ? merge_patch_between(*old, new_value) : new_value;
    }
  }
  return patch;
}

}  // namespace dlbench::operator_
