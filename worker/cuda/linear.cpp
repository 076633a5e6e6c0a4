// Linear layers through cuBLASLt: one column-major GEMM per pass, its layouts and algorithm set
// up once and chosen again only for less aligned pointers.
#include <optional>

#include "cuda/cuda_backend.hpp"
#include "cuda/cuda_common.hpp"
#include "cuda/gemm.hpp"
#include "cuda/kernels.hpp"

namespace dlbench::worker::cuda_detail {
namespace {

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
