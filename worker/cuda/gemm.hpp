// One cuBLASLt GEMM, its layouts and algorithm set up once: the linear layers' and the
// transformer's batched matmuls. Internal to worker/cuda.
#pragma once

#include <cublasLt.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>

#include "cuda/conv_algorithms.hpp"  // alignment_of
#include "cuda/cuda_backend.hpp"
#include "cuda/cuda_common.hpp"

namespace dlbench::worker::cuda_detail {

// What a GEMM does to its result on the way out.
enum class GemmEpilogue {
  none,
  bias,                // C += bias, one value per row of C
  bias_gradient_of_b,  // also writes the vector of op(B)'s sums over k, one per column of C (BGRADB)
};

// The element types of A and B (the same) and of C and D. Products accumulate in fp32 whatever
// they are; fp32 inputs use TF32 tensor cores only where the backend's math allows.
struct GemmTypes {
  DType inputs = DType::fp32;
  DType output = DType::fp32;
};

// `count` GEMMs of the same shape, each operand's matrices `stride` elements apart (strided
// batched; count 1 is a plain GEMM).
struct GemmBatch {
  std::int64_t count = 1;
  std::int64_t stride_a = 0, stride_b = 0, stride_c = 0;
};

// Column-major C(m x n) = alpha · op(A) op(B), for each matrix of the batch.
class Gemm {
 public:
  Gemm(CudaBackend& backend, bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k,
       std::int64_t lda, std::int64_t ldb, std::int64_t ldc, GemmEpilogue epilogue, float alpha = 1.0f,
       const GemmBatch& batch = {}, const GemmTypes& types = {})
      : backend_(backend), lt_(cublas_lt_library()), alpha_(alpha) {
    const cublasComputeType_t compute = types.inputs == DType::fp32 && backend.math() == CudaMath::tf32
                                            ? CUBLAS_COMPUTE_32F_FAST_TF32
                                            : CUBLAS_COMPUTE_32F;
    DLBENCH_CUBLAS_CHECK(lt_.matmul_desc_create(&desc_, compute, CUDA_R_32F));
    const cublasOperation_t op_a = transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_b = transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    DLBENCH_CUBLAS_CHECK(lt_.matmul_desc_set_attribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
    DLBENCH_CUBLAS_CHECK(lt_.matmul_desc_set_attribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
    if (epilogue != GemmEpilogue::none) {
      const cublasLtEpilogue_t value =
          epilogue == GemmEpilogue::bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_BGRADB;
      DLBENCH_CUBLAS_CHECK(lt_.matmul_desc_set_attribute(desc_, CUBLASLT_MATMUL_DESC_EPILOGUE, &value, sizeof value));
    }
    const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
    const cudaDataType_t in = cuda_type(types.inputs), out = cuda_type(types.output);
    DLBENCH_CUBLAS_CHECK(lt_.matrix_layout_create(&a_, in, transpose_a ? u(k) : u(m), transpose_a ? u(m) : u(k), lda));
    DLBENCH_CUBLAS_CHECK(lt_.matrix_layout_create(&b_, in, transpose_b ? u(n) : u(k), transpose_b ? u(k) : u(n), ldb));
    DLBENCH_CUBLAS_CHECK(lt_.matrix_layout_create(&c_, out, u(m), u(n), ldc));
    if (batch.count > 1) {
      const auto count = static_cast<std::int32_t>(batch.count);
      const std::array<std::pair<cublasLtMatrixLayout_t, std::int64_t>, 3> strided{
          {{a_, batch.stride_a}, {b_, batch.stride_b}, {c_, batch.stride_c}}};
      for (const auto& [layout, stride] : strided) {
        DLBENCH_CUBLAS_CHECK(
            lt_.matrix_layout_set_attribute(layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count, sizeof count));
        DLBENCH_CUBLAS_CHECK(lt_.matrix_layout_set_attribute(layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                             &stride, sizeof stride));
      }
    }
    shape_ = (batch.count > 1 ? std::to_string(batch.count) + " x " : std::string()) + std::to_string(m) + "x" +
             std::to_string(n) + "x" + std::to_string(k);
  }
  ~Gemm() {
    lt_.matrix_layout_destroy(c_);
    lt_.matrix_layout_destroy(b_);
    lt_.matrix_layout_destroy(a_);
    lt_.matmul_desc_destroy(desc_);
  }
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // `vector` is the bias to add, or where the bias gradient goes, as the epilogue says; it has
  // C's element type.
  void run(const void* a, const void* b, void* c, const void* vector = nullptr) {
    if (!try_run(a, b, c, vector)) {
      throw CudaError("cuBLASLt: no algorithm for a " + shape_ + " matmul at these alignments");
    }
  }

  // False, with nothing queued, when cuBLASLt has no algorithm for this GEMM and its epilogue
  // at these pointers' alignments.
  bool try_run(const void* a, const void* b, void* c, const void* vector) {
    const void* bias = vector;
    // cuBLASLt assumes 256-byte aligned pointers unless told; parameters sit at float offsets
    // in the flat buffer and activations at the arena's 64 bytes. The algorithm is chosen for
    // the pointers' real alignment, again if a pointer turns out less aligned.
    const std::array<std::uint32_t, 4> alignments{alignment_of(a), alignment_of(b), alignment_of(c),
                                                  bias != nullptr ? alignment_of(bias) : 256u};
    bool less_aligned = !chosen_;
    for (std::size_t i = 0; i < alignments.size(); ++i) less_aligned |= alignments[i] < alignments_[i];
    if (less_aligned && !choose(alignments)) return false;
    if (bias != nullptr) {
      DLBENCH_CUBLAS_CHECK(
          lt_.matmul_desc_set_attribute(desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    }
    DLBENCH_CUBLAS_CHECK(lt_.matmul(backend_.cublas_lt(), desc_, &alpha_, a, a_, b, b_, &kZero, c, c_, c, c_,
                                    &algorithm_, backend_.workspace(workspace_), workspace_, backend_.stream()));
    return true;
  }

 private:
  bool choose(const std::array<std::uint32_t, 4>& alignments) {
    cublasLtMatmulPreference_t preference = nullptr;
    DLBENCH_CUBLAS_CHECK(lt_.matmul_preference_create(&preference));
    const std::size_t limit = kWorkspaceLimit;
    cublasStatus_t status =
        lt_.matmul_preference_set_attribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &limit, sizeof limit);
    const cublasLtMatmulPreferenceAttributes_t attributes[] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    const std::uint32_t output_alignment = std::min(alignments[2], alignments[3]);  // C, D and the bias
    const std::uint32_t values[] = {alignments[0], alignments[1], output_alignment, output_alignment};
    for (int i = 0; i < 4 && status == CUBLAS_STATUS_SUCCESS; ++i) {
      status = lt_.matmul_preference_set_attribute(preference, attributes[i], &values[i], sizeof values[i]);
    }
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    if (status == CUBLAS_STATUS_SUCCESS) {
      status =
          lt_.matmul_algo_get_heuristic(backend_.cublas_lt(), desc_, a_, b_, c_, c_, preference, 1, &result, &found);
    }
    lt_.matmul_preference_destroy(preference);
    if (status == CUBLAS_STATUS_NOT_SUPPORTED) return false;  // how some versions say "none"
    DLBENCH_CUBLAS_CHECK(status);
    if (found == 0) return false;
    algorithm_ = result.algo;
    workspace_ = result.workspaceSize;
    alignments_ = alignments;
    chosen_ = true;
    return true;
  }

  static constexpr std::size_t kWorkspaceLimit = std::size_t{32} << 20;
  CudaBackend& backend_;
  // cuBLASLt's functions, opened once per process (cuda/cublas_lt_library.hpp).
  const CublasLtLibrary& lt_;
  float alpha_ = 1.0f;
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, c_ = nullptr;
  cublasLtMatmulAlgo_t algorithm_{};
  std::string shape_;  // [batch x] m x n x k, for messages
  std::array<std::uint32_t, 4> alignments_{};  // what the algorithm was chosen for
  bool chosen_ = false;
  std::size_t workspace_ = 0;
};

}  // namespace dlbench::worker::cuda_detail
