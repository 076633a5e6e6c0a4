// What the CPU backend's files share: tensors as oneDNN memory, and loops written once for
// every activation type.
#pragma once

#include <stdexcept>

#include <oneapi/dnnl/dnnl.hpp>

#include "tensor.hpp"

namespace dlbench::worker {

inline dnnl::memory::dims dims_of(const Shape& s) {
  dnnl::memory::dims d;
  for (int i = 0; i < s.rank; ++i) d.push_back(s[i]);
  return d;
}

inline dnnl::memory::data_type dnnl_type(DType t) {
  switch (t) {
    case DType::fp32: return dnnl::memory::data_type::f32;
    case DType::bf16: return dnnl::memory::data_type::bf16;
    case DType::fp16: return dnnl::memory::data_type::f16;
    case DType::int32: return dnnl::memory::data_type::s32;
  }
  throw std::invalid_argument("cpu backend: unknown dtype");
}

// A oneDNN memory over data someone else owns (oneDNN's API takes it non-const).
inline dnnl::memory mem(const dnnl::memory::desc& md, const dnnl::engine& engine, const void* data) {
  return dnnl::memory(md, engine, const_cast<void*>(data));
}

// Calls `body` with a null pointer of the element type `dtype` names (the loops are written
// once for every activation type; they compute in fp32).
template <typename Body>
void with_element_type(DType dtype, Body&& body) {
  switch (dtype) {
    case DType::fp32: body(static_cast<float*>(nullptr)); return;
    case DType::bf16: body(static_cast<bf16*>(nullptr)); return;
    case DType::fp16: body(static_cast<fp16*>(nullptr)); return;
    case DType::int32: break;
  }
  throw std::invalid_argument("cpu backend: an int32 tensor holds indices, not values to compute with");
}

}  // namespace dlbench::worker
