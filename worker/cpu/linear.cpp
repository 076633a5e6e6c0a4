// The CPU backend's linear layer: matrix products and oneDNN's inner product.
#include "cpu/cpu_ops.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

namespace dlbench::worker {
namespace {

using namespace cpu_ops;

// Column sums of a row-major [rows, columns] matrix in fp32: a linear layer's bias gradient.
// Threads take blocks of columns and sum every row of them in order, so the result does not
// depend on the thread count.
template <typename T>
void column_sums(const T* dy, std::int64_t rows, std::int64_t columns, float* sums) {
  constexpr std::int64_t kBlock = 64;
  const std::int64_t blocks = (columns + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (std::int64_t block = 0; block < blocks; ++block) {
    const std::int64_t first = block * kBlock, count = std::min(kBlock, columns - first);
    float acc[kBlock] = {};
    for (std::int64_t r = 0; r < rows; ++r) {
      const T* row = dy + r * columns + first;
#pragma omp simd
      for (std::int64_t j = 0; j < count; ++j) acc[j] += to_float(row[j]);
    }
    std::copy(acc, acc + count, sums + first);
  }
}

// Which of a linear layer's products run as matmuls, and on what weights: all three on plain
// weights (linear_weights.hpp), or on weights in each product's own format in fp32; in bf16
// otherwise only the weight gradient (the inner product runs the other two).
MatmulPasses::Weights passes_of(const CpuBackend& backend, const LinearConfig& c) {
  if (plain_weights(c.batch, c.in_features, c.dtype, backend.linear_weights(), backend.avx512_kernels())) return MatmulPasses::Weights::plain;
  return c.dtype == DType::fp32 ? MatmulPasses::Weights::kernel_format : MatmulPasses::Weights::none;
}

// oneDNN's inner product forward and backward-data passes, the weights reordered from the fp32
// master copy into the kernels' format each call.
class InnerProductPasses {
 public:
  InnerProductPasses(CpuBackend& backend, const LinearConfig& c)
      : b_(backend),
        src_(md_of(Shape(c.batch, c.in_features), Layout::plain, c.dtype)),
        dst_(md_of(Shape(c.batch, c.out_features), Layout::plain, c.dtype)),
        bias_(c.bias ? md_of(Shape(c.out_features), Layout::plain) : memory::desc()) {
    const Shape weight(c.out_features, c.in_features);
    const auto fwd_pd = DLBENCH_DNNL_CALL(dnnl::inner_product_forward::primitive_desc(
        dnnl::inner_product_forward::desc(dnnl::prop_kind::forward_training, src_, any_md(weight, c.dtype), bias_,
                                          dst_),
        user_scratchpad(), backend.engine()));
    const auto bwd_data_pd = DLBENCH_DNNL_CALL(dnnl::inner_product_backward_data::primitive_desc(
        dnnl::inner_product_backward_data::desc(src_, any_md(weight, c.dtype), dst_), user_scratchpad(),
        backend.engine(), fwd_pd));
    fwd_ = Primitive(backend, fwd_pd);
    bwd_data_ = Primitive(backend, bwd_data_pd);
    fwd_weights_.emplace(backend, md_of(weight, Layout::plain), fwd_pd.weights_desc());
    bwd_data_weights_.emplace(backend, md_of(weight, Layout::plain), bwd_data_pd.weights_desc());
  }

  void forward(const void* x, const float* weight, const float* bias, void* y) {
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, mem(src_, b_.engine(), x)},
                                         {DNNL_ARG_WEIGHTS, fwd_weights_->in(weight)},
                                         {DNNL_ARG_DST, mem(dst_, b_.engine(), y)}};
    if (bias != nullptr) args[DNNL_ARG_BIAS] = mem(bias_, b_.engine(), bias);
    fwd_.execute(std::move(args));
  }
  void backward_data(const void* dy, const float* weight, void* dx) {
    bwd_data_.execute({{DNNL_ARG_DIFF_DST, mem(dst_, b_.engine(), dy)},
                       {DNNL_ARG_WEIGHTS, bwd_data_weights_->in(weight)},
                       {DNNL_ARG_DIFF_SRC, mem(src_, b_.engine(), dx)}});
  }

 private:
  CpuBackend& b_;
  memory::desc src_, dst_, bias_;
  Primitive fwd_, bwd_data_;
  std::optional<WeightFormat> fwd_weights_, bwd_data_weights_;
};

// A linear layer. Its weight gradient is always matmul's dyᵀ · x, written straight into the
// fp32 parameter layout, and its bias gradient a column sum: oneDNN 2.6's inner product writes
// the weight gradient in a blocked format that needs a reorder back (62 ms a bf16 bert-base step
// with AMX), and in fp32 its kernel ran at about half its forward's rate (1.11 s a step against
// 0.60 s, Intel Xeon, 2 cores). fp32 runs forward and backward-data as matmuls too (bert-base
// +13%). Where the layer has few rows for its weights, both read the plain weights
// (linear_weights.hpp); elsewhere bf16 runs them as the inner product, since matmuls on weights
// reordered into their own formats were slower (AlexNet bf16 4%), their backward-data reorder
// transposing.
class CpuLinear final : public LinearOp {
 public:
  CpuLinear(CpuBackend& backend, const LinearConfig& c) : CpuLinear(backend, c, passes_of(backend, c)) {}

  void forward(const Tensor& x, const Tensor& weight, const Tensor* bias, Tensor& y) override {
    require_elements(x, c_.batch * c_.in_features, "linear", "x");
    require_elements(y, c_.batch * c_.out_features, "linear", "y");
    const float* b = bias == nullptr ? nullptr : bias->as<float>();
    if (inner_product_) {
      inner_product_->forward(x.data, weight.as<float>(), b, y.data);
    } else {
      matmul_.forward(x.data, weight.as<float>(), b, y.data);
    }
  }
  void backward_data(const Tensor& dy, const Tensor& weight, Tensor& dx) override {
    if (inner_product_) {
      inner_product_->backward_data(dy.data, weight.as<float>(), dx.data);
    } else {
      matmul_.backward_data(dy.data, weight.as<float>(), dx.data);
    }
  }
  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweight, Tensor* dbias) override {
    matmul_.backward_weights(x.data, dy.data, dweight.as<float>());
    if (dbias != nullptr) {
      with_element_type(dy.dtype, [&]<typename T>(T*) {
        column_sums(dy.as<T>(), c_.batch, c_.out_features, dbias->as<float>());
      });
    }
  }

 private:
  CpuLinear(CpuBackend& backend, const LinearConfig& c, MatmulPasses::Weights passes)
      : c_(c), matmul_(backend, c.batch, c.in_features, c.out_features, c.dtype, c.bias, passes) {
    if (passes == MatmulPasses::Weights::none) inner_product_.emplace(backend, c);  // the other two passes
  }

  LinearConfig c_;
  MatmulPasses matmul_;
  std::optional<InnerProductPasses> inner_product_;
};


}  // namespace

std::unique_ptr<LinearOp> CpuBackend::make_linear(const LinearConfig& c) {
  if (emulates(c.dtype)) return emulate_half(make_linear(in_fp32(c)), half_scratch_);
  return std::make_unique<CpuLinear>(*this, c);
}

}  // namespace dlbench::worker
