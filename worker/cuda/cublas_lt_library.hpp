// cuBLASLt, loaded when a CUDA backend first needs it instead of when the program starts.
//
// Linked like the other CUDA libraries, libcublasLt's static initialisers ran at every start of a
// CUDA build's programs: about half a second of CPU (0.51-0.65 s against 0.01 s for an empty
// program linked with cuDNN, NCCL and the runtime, on a 2-core AMD EPYC VM), paid by every CPU
// case, every `--help`, every `--list-devices` on a machine without a GPU and every test process.
// dlbench calls fifteen of its functions, so the backend reaches them through this table, filled
// by dlopen the first time a CudaBackend is made. The library is never closed: its own teardown at
// exit is the one it expects.
#pragma once

#include <cublasLt.h>

#include <string>

namespace dlbench::worker {

struct CublasLtLibrary {
  decltype(&::cublasLtCreate) create = nullptr;
  decltype(&::cublasLtDestroy) destroy = nullptr;
  decltype(&::cublasLtGetVersion) get_version = nullptr;
  decltype(&::cublasLtGetStatusString) get_status_string = nullptr;
  decltype(&::cublasLtMatmul) matmul = nullptr;
  decltype(&::cublasLtMatmulDescCreate) matmul_desc_create = nullptr;
  decltype(&::cublasLtMatmulDescDestroy) matmul_desc_destroy = nullptr;
  decltype(&::cublasLtMatmulDescSetAttribute) matmul_desc_set_attribute = nullptr;
  decltype(&::cublasLtMatrixLayoutCreate) matrix_layout_create = nullptr;
  decltype(&::cublasLtMatrixLayoutDestroy) matrix_layout_destroy = nullptr;
  decltype(&::cublasLtMatrixLayoutSetAttribute) matrix_layout_set_attribute = nullptr;
  decltype(&::cublasLtMatmulPreferenceCreate) matmul_preference_create = nullptr;
  decltype(&::cublasLtMatmulPreferenceDestroy) matmul_preference_destroy = nullptr;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) matmul_preference_set_attribute = nullptr;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) matmul_algo_get_heuristic = nullptr;
};

// The soname of the cuBLASLt dlbench was compiled against (libcublasLt.so.<CUBLAS_VER_MAJOR>).
std::string cublas_lt_soname();

// Opens `soname` and resolves every function of the table; throws CudaError naming the library
// and the loader's reason (not found, or a function it lacks). Each call opens the library again
// (dlopen counts references); the backend uses cublas_lt_library() below.
CublasLtLibrary load_cublas_lt(const std::string& soname);

// The table for cublas_lt_soname(), loaded once, on the first call (thread-safe); a failure is
// thrown again to every later caller.
const CublasLtLibrary& cublas_lt_library();

}  // namespace dlbench::worker
