// The oneDNN check: its C++ API throws dnnl::error; this turns that into a BackendError that
// names the failing call and the file:line where dlbench made it.
#pragma once

#include <stdexcept>
#include <string>
#include <type_traits>

#include <oneapi/dnnl/dnnl.hpp>

namespace dlbench::worker {

class BackendError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

template <typename Call>
auto dnnl_call(Call&& call, const char* expression, const char* file, int line) -> decltype(call()) {
  try {
    return call();
  } catch (const dnnl::error& e) {
    throw BackendError(std::string(file) + ":" + std::to_string(line) + ": oneDNN error " +
                       std::to_string(static_cast<int>(e.status)) + " (" + e.what() + ") in " + expression);
  }
}

}  // namespace dlbench::worker

#define DLBENCH_DNNL_CALL(expr) ::dlbench::worker::dnnl_call([&]() { return (expr); }, #expr, __FILE__, __LINE__)
