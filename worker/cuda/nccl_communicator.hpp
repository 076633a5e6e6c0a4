#pragma once

#include <cuda_runtime.h>

#include <memory>

#include "communicator.hpp"

namespace dlbench::worker {

// NCCL on device buffers: one rank per GPU, the NCCL unique id broadcast over MPI, host-side
// operations (host names, the slowest rank's time) over MPI. Reductions run on the
// communicator's own stream, ordered after the work already queued on `compute_stream`.
std::unique_ptr<Communicator> make_nccl_communicator(int* argc, char*** argv, int device,
                                                     cudaStream_t compute_stream = nullptr);

// Number of usable CUDA devices; 0 (not an error) where there is no driver or no GPU.
int cuda_device_count();

}  // namespace dlbench::worker
