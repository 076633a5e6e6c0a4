// Functions that the CUDA kernels and the CPU code share (index math, hashes): host and device
// under nvcc, plain inline functions elsewhere.
#pragma once

#if defined(__CUDACC__)
#define DLBENCH_HOST_DEVICE __host__ __device__
#else
#define DLBENCH_HOST_DEVICE
#endif
