// What the CUDA backend's op files share: cuDNN's scaling constants and the NCHW descriptor of
// an activation. Internal to worker/cuda.
#pragma once

#include <cudnn.h>

#include <cstdint>
#include <memory>

#include "backend.hpp"
#include "cuda/cuda_check.hpp"

namespace dlbench::worker {

class CudaBackend;

namespace cuda_detail {

inline constexpr float kOne = 1.0f;
inline constexpr float kZero = 0.0f;

inline int as_int(std::int64_t v) { return static_cast<int>(v); }


// NCHW float descriptor of a 4-D activation (or of an (N, F) matrix seen as N x F x 1 x 1).
struct TensorDescriptor {
  cudnnTensorDescriptor_t handle = nullptr;
  explicit TensorDescriptor(const Shape& s) {
    DLBENCH_CUDNN_CHECK(cudnnCreateTensorDescriptor(&handle));
    const int h = s.rank >= 3 ? as_int(s.h()) : 1, w = s.rank >= 4 ? as_int(s.w()) : 1;
    DLBENCH_CUDNN_CHECK(cudnnSetTensor4dDescriptor(handle, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, as_int(s.n()),
                                                   as_int(s.rank >= 2 ? s.c() : 1), h, w));
  }
  ~TensorDescriptor() { cudnnDestroyTensorDescriptor(handle); }
  TensorDescriptor(const TensorDescriptor&) = delete;
  TensorDescriptor& operator=(const TensorDescriptor&) = delete;
};

// The ops that live in their own files: convolution with its algorithm cache, and the
// cuBLASLt linear layer.
std::unique_ptr<Conv2dOp> make_conv(CudaBackend& backend, const Conv2dConfig& config);
std::unique_ptr<LinearOp> make_linear(CudaBackend& backend, const LinearConfig& config);

}  // namespace cuda_detail
}  // namespace dlbench::worker
