#include "cuda/cublas_lt_library.hpp"

#include <dlfcn.h>

#include <cstring>
#include <exception>
#include <mutex>

#include "cuda/cuda_check.hpp"

namespace dlbench::worker {

std::string cublas_lt_soname() { return "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR); }

namespace {

template <typename Function>
void resolve(void* library, const std::string& soname, const char* name, Function& function) {
  dlerror();
  void* symbol = dlsym(library, name);
  if (symbol == nullptr) {
    const char* why = dlerror();
    throw CudaError("cuBLASLt: " + soname + " has no " + name + (why != nullptr ? std::string(": ") + why : ""));
  }
  // POSIX guarantees that a dlsym result converts to a function pointer.
  static_assert(sizeof(Function) == sizeof(void*));
  std::memcpy(&function, &symbol, sizeof function);
}

}  // namespace

CublasLtLibrary load_cublas_lt(const std::string& soname) {
  void* library = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) {
    const char* why = dlerror();
    throw CudaError("cuBLASLt: cannot load " + soname + ": " + (why != nullptr ? why : "dlopen failed"));
  }
  CublasLtLibrary lt;
  resolve(library, soname, "cublasLtCreate", lt.create);
  resolve(library, soname, "cublasLtDestroy", lt.destroy);
  resolve(library, soname, "cublasLtGetVersion", lt.get_version);
  resolve(library, soname, "cublasLtGetStatusString", lt.get_status_string);
  resolve(library, soname, "cublasLtMatmul", lt.matmul);
  resolve(library, soname, "cublasLtMatmulDescCreate", lt.matmul_desc_create);
  resolve(library, soname, "cublasLtMatmulDescDestroy", lt.matmul_desc_destroy);
  resolve(library, soname, "cublasLtMatmulDescSetAttribute", lt.matmul_desc_set_attribute);
  resolve(library, soname, "cublasLtMatrixLayoutCreate", lt.matrix_layout_create);
  resolve(library, soname, "cublasLtMatrixLayoutDestroy", lt.matrix_layout_destroy);
  resolve(library, soname, "cublasLtMatrixLayoutSetAttribute", lt.matrix_layout_set_attribute);
  resolve(library, soname, "cublasLtMatmulPreferenceCreate", lt.matmul_preference_create);
  resolve(library, soname, "cublasLtMatmulPreferenceDestroy", lt.matmul_preference_destroy);
  resolve(library, soname, "cublasLtMatmulPreferenceSetAttribute", lt.matmul_preference_set_attribute);
  resolve(library, soname, "cublasLtMatmulAlgoGetHeuristic", lt.matmul_algo_get_heuristic);
  return lt;
}

const CublasLtLibrary& cublas_lt_library() {
  static std::once_flag once;
  static CublasLtLibrary library;
  static std::exception_ptr failure;
  std::call_once(once, [] {
    try {
      library = load_cublas_lt(cublas_lt_soname());
    } catch (...) {
      failure = std::current_exception();
    }
  });
  if (failure) std::rethrow_exception(failure);
  return library;
}

}  // namespace dlbench::worker
