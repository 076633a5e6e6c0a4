// This build's version: the project's and, as semver build metadata, the revision it was built from
// ("0.1.0+g1a2b3c4d5e6f", ".dirty" where a tracked file differed from that commit, "+unknown" where
// the build could not tell). Defined in a source the build writes (cmake/Version.cmake); link
// dlbench::version.
#pragma once

#include <string_view>

namespace dlbench {

std::string_view version();

}  // namespace dlbench
