// The element types a tensor can hold, apart from precision.hpp's conversions so that the CUDA
// kernels (compiled as C++17) can name them.
#pragma once

#include <cstddef>
#include <string_view>

namespace dlbench::worker {

// int32 holds indices, not values: token ids, labels, rows to gather. No arithmetic op takes it.
enum class DType { fp32, bf16, fp16, int32 };

constexpr std::size_t dtype_size(DType t) { return t == DType::fp32 || t == DType::int32 ? 4 : 2; }

constexpr std::string_view to_string(DType t) {
  switch (t) {
    case DType::fp32: return "fp32";
    case DType::bf16: return "bf16";
    case DType::fp16: return "fp16";
    case DType::int32: return "int32";
  }
  return "?";
}

}  // namespace dlbench::worker
