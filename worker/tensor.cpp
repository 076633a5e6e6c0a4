#include "tensor.hpp"

#include <cstring>
#include <stdexcept>
#include <string>

namespace dlbench::worker {

std::string Shape::to_string() const {
  std::string out = "[";
  for (int i = 0; i < rank; ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(dims[static_cast<std::size_t>(i)]);
  }
  return out + "]";
}

std::vector<std::byte> encode(const float* values, std::size_t count, DType dtype) {
  std::vector<std::byte> out(count * dtype_size(dtype));
  switch (dtype) {
    case DType::int32:
      for (std::size_t i = 0; i < count; ++i) {
        const auto index = static_cast<std::int32_t>(values[i]);
        std::memcpy(&out[4 * i], &index, 4);
      }
      break;
    case DType::fp32:
    case DType::bf16:
    case DType::fp16:
      store_floats(values, count, dtype, out.data());
      break;
  }
  return out;
}

std::vector<float> decode(const void* data, std::size_t count, DType dtype) {
  std::vector<float> out(count);
  if (dtype != DType::int32) {
    load_floats(data, count, dtype, out.data());
    return out;
  }
  const auto* bytes = static_cast<const std::byte*>(data);
  for (std::size_t i = 0; i < count; ++i) {
    std::int32_t index = 0;
    std::memcpy(&index, bytes + 4 * i, 4);
    out[i] = static_cast<float>(index);
  }
  return out;
}

std::vector<float> rounded_to(const std::vector<float>& values, DType dtype) {
  return decode(encode(values.data(), values.size(), dtype).data(), values.size(), dtype);
}

void require_elements(const Tensor& t, std::int64_t count, const char* op, const char* what) {
  if (t.numel() != count) {
    throw std::invalid_argument(std::string(op) + ": " + what + " has " + std::to_string(t.numel()) +
                                " elements, expected " + std::to_string(count));
  }
}

}  // namespace dlbench::worker
