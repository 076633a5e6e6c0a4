// One check macro per GPU library: a failed call throws with the call, the library's own
// message and the file:line where dlbench made it.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

#include <stdexcept>
#include <string>

namespace dlbench::worker {

class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

[[noreturn]] inline void throw_gpu_error(const char* library, const char* call, const char* message, const char* file,
                                         int line) {
  throw CudaError(std::string(file) + ":" + std::to_string(line) + ": " + library + ": " + call + ": " + message);
}

}  // namespace dlbench::worker

#define DLBENCH_CUDA_CHECK(call)                                                                          \
  do {                                                                                                   \
    const cudaError_t dlbench_cuda_status = (call);                                                      \
    if (dlbench_cuda_status != cudaSuccess) {                                                            \
      ::dlbench::worker::throw_gpu_error("CUDA", #call, cudaGetErrorString(dlbench_cuda_status), __FILE__, __LINE__); \
    }                                                                                                    \
  } while (false)

#define DLBENCH_NCCL_CHECK(call)                                                                          \
  do {                                                                                                   \
    const ncclResult_t dlbench_nccl_status = (call);                                                     \
    if (dlbench_nccl_status != ncclSuccess) {                                                            \
      ::dlbench::worker::throw_gpu_error("NCCL", #call, ncclGetErrorString(dlbench_nccl_status), __FILE__, __LINE__); \
    }                                                                                                    \
  } while (false)

#define DLBENCH_CUDNN_CHECK(call)                                                                         \
  do {                                                                                                   \
    const cudnnStatus_t dlbench_cudnn_status = (call);                                                   \
    if (dlbench_cudnn_status != CUDNN_STATUS_SUCCESS) {                                                  \
      ::dlbench::worker::throw_gpu_error("cuDNN", #call, cudnnGetErrorString(dlbench_cudnn_status), __FILE__, __LINE__); \
    }                                                                                                    \
  } while (false)

#define DLBENCH_CUBLAS_CHECK(call)                                                                        \
  do {                                                                                                   \
    const cublasStatus_t dlbench_cublas_status = (call);                                                 \
    if (dlbench_cublas_status != CUBLAS_STATUS_SUCCESS) {                                                \
      ::dlbench::worker::throw_gpu_error("cuBLAS", #call, cublasLtGetStatusString(dlbench_cublas_status), __FILE__, __LINE__); \
    }                                                                                                    \
  } while (false)
