// JSON merge patches (RFC 7386) computed from two documents. A merge patch leaves alone what
// it does not mention, so a field that disappears must be sent as null; without this a
// cleared status field (progress.currentCase once the run ends) would stay on the object.
#pragma once

#include <nlohmann/json.hpp>

namespace dlbench::operator_ {

// The patch that turns `from` into `to`: changed and new members as in `to`, removed
// members as null, objects compared member by member, everything else replaced whole.
// An empty object when they are equal.
nlohmann::json merge_patch_between(const nlohmann::json& from, const nlohmann::json& to);

}  // namespace dlbench::operator_
