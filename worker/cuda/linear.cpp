// Linear layers through cuBLASLt: one column-major GEMM per pass, its layouts and algorithm set
// up once and chosen again only for less aligned pointers.
#include <cstddef>
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
// Half activations: W and the bias are read from the backend's kept copies (cuda/weight_copies.hpp)
// or rounded into its parameter scratch before the GEMMs that read them; dW (and the bias
// gradient) come out of their GEMM in fp32 directly.
class CudaLinear final : public LinearOp {
 public:
  CudaLinear(CudaBackend& backend, const LinearConfig& c)
      : backend_(backend), config_(c),
        forward_(backend, true, false, c.out_features, c.batch, c.in_features, c.in_features, c.in_features,
                 c.out_features, c.bias ? GemmEpilogue::bias : GemmEpilogue::none, 1.0f, {}, {c.dtype, c.dtype}),
        backward_data_(backend, false, false, c.in_features, c.batch, c.out_features, c.in_features, c.out_features,
                       c.in_features, GemmEpilogue::none, 1.0f, {}, {c.dtype, c.dtype}),
        backward_weights_(backend, false, true, c.in_features, c.out_features, c.batch, c.in_features, c.out_features,
                          c.in_features, GemmEpilogue::none, 1.0f, {}, {c.dtype, DType::fp32}) {
    if (c.bias) {
      backward_weights_and_bias_.emplace(backend, false, true, c.in_features, c.out_features, c.batch, c.in_features,
                                         c.out_features, c.in_features, GemmEpilogue::bias_gradient_of_b, 1.0f,
                                         GemmBatch{}, GemmTypes{c.dtype, DType::fp32});
    }
  }

  void forward(const Tensor& x, const Tensor& weight, const Tensor* bias, Tensor& y) override {
    require_dtype("linear", config_.dtype, {&x, &y});
    const Parameters p = parameters(weight, bias);
    forward_.run(p.weight, x.data, y.data, p.bias);
  }
  void backward_data(const Tensor& dy, const Tensor& weight, Tensor& dx) override {
    require_dtype("linear", config_.dtype, {&dy, &dx});
    backward_data_.run(parameters(weight, nullptr).weight, dy.data, dx.data);
  }
  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweight, Tensor* dbias) override {
    require_dtype("linear", config_.dtype, {&x, &dy});
    if (dbias != nullptr && backward_weights_and_bias_ &&
        backward_weights_and_bias_->try_run(x.data, dy.data, dweight.as<float>(), dbias->as<float>())) {
      return;
    }
    backward_weights_and_bias_.reset();  // no algorithm with the epilogue here: the plain pair from now on
    backward_weights_.run(x.data, dy.data, dweight.as<float>());
    if (dbias != nullptr) {
      const int columns = as_int(config_.out_features);
      auto* scratch = static_cast<float*>(backend_.workspace(kernels::column_sums_scratch_bytes(config_.batch, columns)));
      kernels::column_sums(config_.dtype, dy.data, dbias->as<float>(), config_.batch, columns, scratch,
                           backend_.stream());
    }
  }

 private:
  struct Parameters {
    const void* weight;
    const void* bias;
  };
  // The weight and bias in the activations' type: the fp32 parameters themselves, or rounded
  // copies (the bias 256 bytes aligned after the weight, as cuBLASLt prefers).
  Parameters parameters(const Tensor& weight, const Tensor* bias) {
    if (config_.dtype == DType::fp32) return {weight.as<float>(), bias != nullptr ? bias->as<float>() : nullptr};
    const void* kept_weight = backend_.kept_weight(weight.as<float>(), weight.numel(), config_.dtype, std::nullopt);
    const void* kept_bias =
        bias != nullptr ? backend_.kept_weight(bias->as<float>(), bias->numel(), config_.dtype, std::nullopt) : nullptr;
    if (kept_weight != nullptr && (bias == nullptr || kept_bias != nullptr)) return {kept_weight, kept_bias};
    const std::size_t element = dtype_size(config_.dtype);
    const auto weights = static_cast<std::size_t>(weight.numel());
    const std::size_t bias_offset = (weights * element + 255) / 256 * 256;
    const std::size_t bytes = bias_offset + (bias != nullptr ? static_cast<std::size_t>(bias->numel()) * element : 0);
    auto* scratch = static_cast<std::byte*>(backend_.parameter_scratch(bytes));
    kernels::convert(weight.as<float>(), config_.dtype, scratch, weight.numel(), backend_.stream());
    if (bias == nullptr) return {scratch, nullptr};
    kernels::convert(bias->as<float>(), config_.dtype, scratch + bias_offset, bias->numel(), backend_.stream());
    return {scratch, scratch + bias_offset};
  }

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
