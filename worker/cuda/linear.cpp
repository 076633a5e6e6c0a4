// Linear layers through cuBLASLt: one column-major GEMM per pass, its layouts and algorithm set
// up once and chosen again only for less aligned pointers.
#include <algorithm>
#include <array>
#include <optional>
#include <string>

#include "cuda/conv_algorithms.hpp"  // alignment_of
#include "cuda/cuda_backend.hpp"
#include "cuda/cuda_common.hpp"
#include "cuda/kernels.hpp"

namespace dlbench::worker::cuda_detail {
namespace {

// What a GEMM does to its result on the way out.
enum class GemmEpilogue {
  none,
  bias,                // C += bias, one value per row of C
  bias_gradient_of_b,  // also writes the vector of op(B)'s sums over k, one per column of C (BGRADB)
};

// One column-major GEMM C(m x n) = op(A) op(B), its layouts and its algorithm, set up once.
class Gemm {
 public:
  Gemm(CudaBackend& backend, bool transpose_a, bool transpose_b, std::int64_t m, std::int64_t n, std::int64_t k,
       std::int64_t lda, std::int64_t ldb, std::int64_t ldc, GemmEpilogue epilogue)
      : backend_(backend) {
    const cublasComputeType_t compute =
        backend.math() == CudaMath::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
    DLBENCH_CUBLAS_CHECK(cublasLtMatmulDescCreate(&desc_, compute, CUDA_R_32F));
    const cublasOperation_t op_a = transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_b = transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    DLBENCH_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a));
    DLBENCH_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b));
    if (epilogue != GemmEpilogue::none) {
      const cublasLtEpilogue_t value =
          epilogue == GemmEpilogue::bias ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_BGRADB;
      DLBENCH_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_EPILOGUE, &value, sizeof value));
    }
    const auto u = [](std::int64_t v) { return static_cast<std::uint64_t>(v); };
    DLBENCH_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&a_, CUDA_R_32F, transpose_a ? u(k) : u(m), transpose_a ? u(m) : u(k), lda));
    DLBENCH_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&b_, CUDA_R_32F, transpose_b ? u(n) : u(k), transpose_b ? u(k) : u(n), ldb));
    DLBENCH_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&c_, CUDA_R_32F, u(m), u(n), ldc));
    shape_ = std::to_string(m) + "x" + std::to_string(n) + "x" + std::to_string(k);
  }
  ~Gemm() {
    cublasLtMatrixLayoutDestroy(c_);
    cublasLtMatrixLayoutDestroy(b_);
    cublasLtMatrixLayoutDestroy(a_);
    cublasLtMatmulDescDestroy(desc_);
  }
  Gemm(const Gemm&) = delete;
  Gemm& operator=(const Gemm&) = delete;

  // `vector` is the bias to add, or where the bias gradient goes, as the epilogue says.
  void run(const float* a, const float* b, float* c, const float* vector = nullptr) {
    if (!try_run(a, b, c, vector)) {
      throw CudaError("cuBLASLt: no algorithm for a " + shape_ + " matmul at these alignments");
    }
  }

  // False, with nothing queued, when cuBLASLt has no algorithm for this GEMM and its epilogue
  // at these pointers' alignments.
  bool try_run(const float* a, const float* b, float* c, const float* vector) {
    const float* bias = vector;
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
          cublasLtMatmulDescSetAttribute(desc_, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof bias));
    }
    DLBENCH_CUBLAS_CHECK(cublasLtMatmul(backend_.cublas_lt(), desc_, &kOne, a, a_, b, b_, &kZero, c, c_, c, c_,
                                        &algorithm_, backend_.workspace(workspace_), workspace_, backend_.stream()));
    return true;
  }

 private:
  bool choose(const std::array<std::uint32_t, 4>& alignments) {
    cublasLtMatmulPreference_t preference = nullptr;
    DLBENCH_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&preference));
    const std::size_t limit = kWorkspaceLimit;
    cublasStatus_t status =
        cublasLtMatmulPreferenceSetAttribute(preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &limit, sizeof limit);
    const cublasLtMatmulPreferenceAttributes_t attributes[] = {
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
        CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES};
    const std::uint32_t output_alignment = std::min(alignments[2], alignments[3]);  // C, D and the bias
    const std::uint32_t values[] = {alignments[0], alignments[1], output_alignment, output_alignment};
    for (int i = 0; i < 4 && status == CUBLAS_STATUS_SUCCESS; ++i) {
      status = cublasLtMatmulPreferenceSetAttribute(preference, attributes[i], &values[i], sizeof values[i]);
    }
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    if (status == CUBLAS_STATUS_SUCCESS) {
      status = cublasLtMatmulAlgoGetHeuristic(backend_.cublas_lt(), desc_, a_, b_, c_, c_, preference, 1, &result, &found);
    }
    cublasLtMatmulPreferenceDestroy(preference);
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
  cublasLtMatmulDesc_t desc_ = nullptr;
  cublasLtMatrixLayout_t a_ = nullptr, b_ = nullptr, c_ = nullptr;
  cublasLtMatmulAlgo_t algorithm_{};
  std::string shape_;  // m x n x k, for messages
  std::array<std::uint32_t, 4> alignments_{};  // what the algorithm was chosen for
  bool chosen_ = false;
  std::size_t workspace_ = 0;
};

// Row-major x (N x in), W (out x in) as PyTorch keeps it, y (N x out). Column-major, each
// row-major matrix is its transpose, so: y^T = W x^T, dx^T = W^T dy^T, dW^T = x^T dy. The bias
// gradient (dy's sums over the batch, the k of dW's GEMM) comes out of that GEMM's BGRADB
// epilogue; where cuBLASLt has no algorithm for it, a plain GEMM and a column-sum kernel.
class CudaLinear final : public LinearOp {
 public:
  CudaLinear(CudaBackend& backend, const LinearConfig& c)
      : backend_(backend), config_(c),
        forward_(backend, true, false, c.out_features, c.batch, c.in_features, c.in_features, c.in_features,
                 c.out_features, c.bias ? GemmEpilogue::bias : GemmEpilogue::none),
        backward_data_(backend, false, false, c.in_features, c.batch, c.out_features, c.in_features, c.out_features,
                       c.in_features, GemmEpilogue::none),
        backward_weights_(backend, false, true, c.in_features, c.out_features, c.batch, c.in_features, c.out_features,
                          c.in_features, GemmEpilogue::none) {
    if (c.bias) {
      backward_weights_and_bias_.emplace(backend, false, true, c.in_features, c.out_features, c.batch, c.in_features,
                                         c.out_features, c.in_features, GemmEpilogue::bias_gradient_of_b);
    }
  }

  void forward(const Tensor& x, const Tensor& weight, const Tensor* bias, Tensor& y) override {
    forward_.run(weight.as<float>(), x.as<float>(), y.as<float>(), bias != nullptr ? bias->as<float>() : nullptr);
  }
  void backward_data(const Tensor& dy, const Tensor& weight, Tensor& dx) override {
    backward_data_.run(weight.as<float>(), dy.as<float>(), dx.as<float>());
  }
  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweight, Tensor* dbias) override {
    if (dbias != nullptr && backward_weights_and_bias_ &&
        backward_weights_and_bias_->try_run(x.as<float>(), dy.as<float>(), dweight.as<float>(), dbias->as<float>())) {
      return;
    }
    backward_weights_and_bias_.reset();  // no algorithm with the epilogue here: the plain pair from now on
    backward_weights_.run(x.as<float>(), dy.as<float>(), dweight.as<float>());
    if (dbias != nullptr) {
      kernels::column_sums(dy.as<float>(), dbias->as<float>(), as_int(config_.batch), as_int(config_.out_features), backend_.stream());
    }
  }

 private:
  CudaBackend& backend_;
  LinearConfig config_;
  Gemm forward_, backward_data_, backward_weights_;
  std::optional<Gemm> backward_weights_and_bias_;  // dW with the bias gradient in its epilogue
};

}  // namespace

std::unique_ptr<LinearOp> make_linear(CudaBackend& backend, const LinearConfig& config) {
  return std::make_unique<CudaLinear>(backend, config);
}

}  // namespace dlbench::worker::cuda_detail
