// What the CUDA backend's op files share: cuDNN's scaling constants, the library names of dlbench's
// element types, and the descriptor of an activation. Internal to worker/cuda.
#pragma once

#include <cudnn.h>
#include <library_types.h>

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <stdexcept>
#include <string>

#include "activation_index.hpp"
#include "backend.hpp"
#include "cuda/cuda_check.hpp"

namespace dlbench::worker {

class CudaBackend;

namespace cuda_detail {

inline constexpr float kOne = 1.0f;
inline constexpr float kZero = 0.0f;

inline int as_int(std::int64_t v) { return static_cast<int>(v); }

// Throws std::invalid_argument unless every tensor holds `expected`: an op made for one dtype
// must not read another's bytes.
inline void require_dtype(const char* op, DType expected, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    if (t->dtype != expected) {
      throw std::invalid_argument(std::string(op) + ": a " + std::string(to_string(t->dtype)) + " tensor " +
                                  t->shape.to_string() + " where " + std::string(to_string(expected)) + " was expected");
    }
  }
}

// cuDNN's and CUDA's names of an element type that computes (not int32).
inline cudnnDataType_t cudnn_type(DType t) {
  switch (t) {
    case DType::fp16: return CUDNN_DATA_HALF;
    case DType::bf16: return CUDNN_DATA_BFLOAT16;
    default: return CUDNN_DATA_FLOAT;
  }
}
inline cudaDataType_t cuda_type(DType t) {
  switch (t) {
    case DType::fp16: return CUDA_R_16F;
    case DType::bf16: return CUDA_R_16BF;
    default: return CUDA_R_32F;
  }
}

// The geometry the kernels index an activation by (kernels.hpp), from its shape and memory order.
inline ActivationGeometry geometry_of(const Shape& s, Layout layout) {
  return {s.n(), s.rank >= 2 ? s.c() : 1, s.rank >= 3 ? s.h() : 1, s.rank >= 4 ? s.w() : 1, layout == Layout::nhwc};
}

// cuDNN descriptor of a 4-D activation (or of an (N, F) matrix seen as N x F x 1 x 1) of `dtype`
// in `layout`; parameter vectors (1, C, 1, 1) are fp32 NCHW, the defaults.
struct TensorDescriptor {
  cudnnTensorDescriptor_t handle = nullptr;
  explicit TensorDescriptor(const Shape& s, DType dtype = DType::fp32, Layout layout = Layout::nchw) {
    DLBENCH_CUDNN_CHECK(cudnnCreateTensorDescriptor(&handle));
    const ActivationGeometry g = geometry_of(s, layout);
    DLBENCH_CUDNN_CHECK(cudnnSetTensor4dDescriptor(handle, g.channels_last ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW,
                                                   cudnn_type(dtype), as_int(g.n), as_int(g.c), as_int(g.h),
                                                   as_int(g.w)));
  }
  ~TensorDescriptor() { cudnnDestroyTensorDescriptor(handle); }
  TensorDescriptor(const TensorDescriptor&) = delete;
  TensorDescriptor& operator=(const TensorDescriptor&) = delete;
};

// The ops that live in their own files: convolution with its algorithm cache, the convolution
// fused with its batch norms (throws CudaError where no engine runs it), the cuBLASLt linear layer,
// and batch norm through dlbench's own kernels.
std::unique_ptr<Conv2dOp> make_conv(CudaBackend& backend, const Conv2dConfig& config);
// Throws CudaError where no engine runs the forward or filter-gradient graph. Where the data
// gradient's fusion was asked and no engine runs it, the op leaves it apart
// (fuses_input_batch_norm_gradients) and `data_gradient_refusal` says why.
std::unique_ptr<FusedConv2dOp> make_fused_conv(CudaBackend& backend, const FusedConv2dConfig& config,
                                               std::string& data_gradient_refusal);
// The fp32 filter `weight` as a pass of `config` reads it in config.dtype (OHWI where
// channels_last): the backend's kept copy, or rounded now into its parameter scratch.
void* rounded_filter(CudaBackend& backend, const Tensor& weight, const Conv2dConfig& config, bool channels_last);
std::unique_ptr<LinearOp> make_linear(CudaBackend& backend, const LinearConfig& config);
std::unique_ptr<BatchNormOp> make_kernel_batch_norm(CudaBackend& backend, const BatchNormConfig& config);

}  // namespace cuda_detail
}  // namespace dlbench::worker
