// The device types that hold each DType's values, for code that takes untyped pointers: the
// kernel files' launchers (kernel_launch.cuh) and the tests that run them on the CPU.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <stdexcept>
#include <string>

#include "dtype.hpp"

namespace dlbench::worker::kernels {

template <typename T>
struct Type {
  using type = T;
};

// Calls f(Type<T>{}) with the device type that holds `dtype`'s values: how a launcher taking
// untyped pointers picks its kernel's instantiation.
template <typename F>
void with_float_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::fp32: f(Type<float>{}); return;
    case DType::fp16: f(Type<__half>{}); return;
    case DType::bf16: f(Type<__nv_bfloat16>{}); return;
    case DType::int32: break;
  }
  throw std::invalid_argument("a CUDA kernel was asked to compute on " + std::string(to_string(dtype)) + " values");
}

}  // namespace dlbench::worker::kernels
