// One check macro per GPU library: a failed call throws with the call, the library's own
// message and the file:line where dlbench made it.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>
#include <nccl.h>

#include "cuda/cublas_lt_library.hpp"

#include <stdexcept>
#include <string>

namespace dlbench::worker {

class CudaError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Whether a CUDA error poisons the context: a kernel's fault (a misaligned or illegal address, a
// trap, an assert), after which every later call in the process fails with the same error. The
// others (a bad argument, out of memory, not ready) leave the context usable.
inline bool cuda_error_poisons_context(cudaError_t e) {
  switch (e) {
    case cudaErrorIllegalAddress:
    case cudaErrorMisalignedAddress:
    case cudaErrorLaunchFailure:
    case cudaErrorHardwareStackError:
    case cudaErrorIllegalInstruction:
    case cudaErrorInvalidAddressSpace:
    case cudaErrorInvalidPc:
    case cudaErrorAssert:
    case cudaErrorLaunchTimeout:
    case cudaErrorECCUncorrectable:
      return true;
    default:
      return false;
  }
}

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
      ::dlbench::worker::throw_gpu_error("cuBLAS", #call, ::dlbench::worker::cublas_lt_library().get_status_string(dlbench_cublas_status), __FILE__, __LINE__); \
    }                                                                                                    \
  } while (false)
