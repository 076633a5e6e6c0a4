// The window MpiCommunicator reduces host buffers through: in-place MPI_SUM pieces on
// MPI_COMM_WORLD started with MPI_Iallreduce, each MPI error an exception naming the call.
#pragma once

#include <mpi.h>

#include <cstddef>
#include <cstdint>

#include "reduction_window.hpp"

namespace dlbench::worker {

ReductionWindow<MPI_Request> mpi_reduction_window(std::int64_t piece_elements, std::size_t in_flight);

}  // namespace dlbench::worker
