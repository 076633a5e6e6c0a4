// cuBLASLt through dlopen (cuda/cublas_lt_library.hpp): the table is complete, the library is
// mapped only once it is asked for, and a missing library or function is named with the loader's
// reason. Opening cuBLASLt and asking its version needs no GPU, so this runs on every CUDA build.
#include "cuda/cublas_lt_library.hpp"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>
#include <link.h>

#include <cstring>
#include <string>

#include "cuda/cuda_check.hpp"

namespace dlbench::worker {
namespace {

using ::testing::HasSubstr;

// Whether a library whose file name starts with `prefix` is mapped into this process.
bool library_is_loaded(const std::string& prefix) {
  struct Search {
    const std::string* prefix;
    bool found;
  } search{&prefix, false};
  dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t, void* data) {
        auto* s = static_cast<Search*>(data);
        const char* path = info->dlpi_name != nullptr ? info->dlpi_name : "";
        const char* slash = std::strrchr(path, '/');
        const std::string file = slash != nullptr ? slash + 1 : path;
        if (file.rfind(*s->prefix, 0) == 0) s->found = true;
        return s->found ? 1 : 0;
      },
      &search);
  return search.found;
}

TEST(CublasLtLibrary, TheSonameIsTheMajorVersionCompiledAgainst) {
  EXPECT_EQ(cublas_lt_soname(), "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR));
}

TEST(CublasLtLibrary, EveryFunctionResolvesAndTheVersionIsTheHeadersMajor) {
  const bool mapped_before = library_is_loaded("libcublasLt");
  const CublasLtLibrary& lt = cublas_lt_library();
  EXPECT_TRUE(library_is_loaded("libcublasLt"));
  for (const void* function :
       {reinterpret_cast<const void*>(lt.create), reinterpret_cast<const void*>(lt.destroy),
        reinterpret_cast<const void*>(lt.get_version), reinterpret_cast<const void*>(lt.get_status_string),
        reinterpret_cast<const void*>(lt.matmul), reinterpret_cast<const void*>(lt.matmul_desc_create),
        reinterpret_cast<const void*>(lt.matmul_desc_destroy), reinterpret_cast<const void*>(lt.matmul_desc_set_attribute),
        reinterpret_cast<const void*>(lt.matrix_layout_create), reinterpret_cast<const void*>(lt.matrix_layout_destroy),
        reinterpret_cast<const void*>(lt.matrix_layout_set_attribute),
        reinterpret_cast<const void*>(lt.matmul_preference_create),
        reinterpret_cast<const void*>(lt.matmul_preference_destroy),
        reinterpret_cast<const void*>(lt.matmul_preference_set_attribute),
        reinterpret_cast<const void*>(lt.matmul_algo_get_heuristic)}) {
    EXPECT_NE(function, nullptr);
  }
  // The library's own answers, through the table: no device needed for either.
  EXPECT_EQ(lt.get_version() / 10000, static_cast<std::size_t>(CUBLAS_VER_MAJOR));
  EXPECT_THAT(lt.get_status_string(CUBLAS_STATUS_NOT_INITIALIZED), HasSubstr("not initialized"));
  // One table for the process, loaded once.
  EXPECT_EQ(&cublas_lt_library(), &lt);
  // ctest runs each test in a process of its own: there, nothing mapped cuBLASLt before it was asked for.
  if (::testing::UnitTest::GetInstance()->test_to_run_count() == 1) {
    EXPECT_FALSE(mapped_before);
  }
}

TEST(CublasLtLibrary, AMissingLibraryIsNamedWithTheLoadersReason) {
  try {
    load_cublas_lt("libcublasLt.so.999");
    ADD_FAILURE() << "a library that does not exist loaded";
  } catch (const CudaError& e) {
    EXPECT_THAT(e.what(), HasSubstr("cuBLASLt: cannot load libcublasLt.so.999: "));
    EXPECT_THAT(e.what(), HasSubstr("No such file"));
  }
}

TEST(CublasLtLibrary, ALibraryWithoutTheFunctionsIsNamedWithTheFirstItLacks) {
  // The CUDA runtime, which every CUDA build has: a real library, but not cuBLASLt.
  const std::string runtime = "libcudart.so." + std::to_string(CUDART_VERSION / 1000);
  try {
    load_cublas_lt(runtime);
    ADD_FAILURE() << runtime << " passed for cuBLASLt";
  } catch (const CudaError& e) {
    EXPECT_THAT(e.what(), HasSubstr("cuBLASLt: " + runtime + " has no cublasLtCreate"));
  }
}

}  // namespace
}  // namespace dlbench::worker
