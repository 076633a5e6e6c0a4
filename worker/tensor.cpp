#include "tensor.hpp"

namespace dlbench::worker {

std::string Shape::to_string() const {
  std::string out = "[";
  for (int i = 0; i < rank; ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(dims[static_cast<std::size_t>(i)]);
  }
  return out + "]";
}

}  // namespace dlbench::worker
