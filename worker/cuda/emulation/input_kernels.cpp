// cuda/input_kernels.cu built for the CPU: the kernels run as cuda_emulation.hpp says.
#include "cuda/emulation/cuda_emulation.hpp"

#include "cuda/input_kernels.cu"
