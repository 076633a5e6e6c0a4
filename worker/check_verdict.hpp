// How a self-test check writes its outcome: an error against its bound, or a plain pass or fail
// with what was seen. Shared by the self-test's files.
#pragma once

#include <string>

#include "self_test.hpp"

namespace dlbench::worker {

// An error as the checks' table prints it: two digits, scientific.
std::string format_error(double e);
// Passed while `error` is at most `bound` (NaN fails); a failure's detail says by how much.
SelfTestCheck bounded(double error, double bound, std::string detail);
SelfTestCheck verdict(bool ok, std::string detail);

}  // namespace dlbench::worker
