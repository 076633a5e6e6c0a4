// Tensors are views: a data pointer, a logical shape, a memory layout and an element type.
// Memory is owned elsewhere (the activation Arena, the ParameterStore), so layers never
// allocate per step.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "layout.hpp"
#include "precision.hpp"

namespace dlbench::worker {

struct Shape {
  std::array<std::int64_t, 4> dims{0, 0, 0, 0};
  int rank = 0;

  Shape() = default;
  Shape(std::int64_t n) : dims{n, 0, 0, 0}, rank(1) {}
  Shape(std::int64_t n, std::int64_t c) : dims{n, c, 0, 0}, rank(2) {}
  Shape(std::int64_t n, std::int64_t c, std::int64_t h, std::int64_t w) : dims{n, c, h, w}, rank(4) {}

  std::int64_t operator[](int i) const { return dims[static_cast<std::size_t>(i)]; }
  std::int64_t n() const { return dims[0]; }
  std::int64_t c() const { return dims[1]; }
  std::int64_t h() const { return dims[2]; }
  std::int64_t w() const { return dims[3]; }
  std::int64_t numel() const {
    std::int64_t total = rank == 0 ? 0 : 1;
    for (int i = 0; i < rank; ++i) total *= dims[static_cast<std::size_t>(i)];
    return total;
  }
  bool operator==(const Shape&) const = default;
  std::string to_string() const;
};

struct Tensor {
  void* data = nullptr;
  Shape shape;
  Layout layout = Layout::plain;
  DType dtype = DType::fp32;
  // The arena buffer this tensor (or the tensor it is a view of) lives in; -1 if not the arena's.
  std::int32_t buffer = -1;

  std::int64_t numel() const { return shape.numel(); }
  std::size_t bytes() const { return static_cast<std::size_t>(numel()) * dtype_size(dtype); }
  bool empty() const { return data == nullptr; }
  // The elements as T; T must be what the tensor holds.
  template <typename T>
  T* as() const {
    if (dtype_of<T>::value != dtype) {
      throw std::logic_error("a " + std::string(to_string(dtype)) + " tensor " + shape.to_string() + " read as " +
                             std::string(to_string(dtype_of<T>::value)));
    }
    return static_cast<T*>(data);
  }
};

// Throws std::invalid_argument "<op>: <what> has N elements, expected M" unless t holds `count`.
void require_elements(const Tensor& t, std::int64_t count, const char* op, const char* what);

// Host-side conversions between fp32 values and a dtype's bytes (inputs, tests, reports).
std::vector<std::byte> encode(const float* values, std::size_t count, DType dtype);
std::vector<float> decode(const void* data, std::size_t count, DType dtype);
// Each value as `dtype` holds it (rounded to nearest even; past its range, infinite).
std::vector<float> rounded_to(const std::vector<float>& values, DType dtype);

}  // namespace dlbench::worker
