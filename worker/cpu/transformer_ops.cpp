// The CPU backend's transformer ops: oneDNN's matmul, layer normalization, softmax and eltwise
// primitives, plus loops for what oneDNN has no primitive for (row gather and scatter-add, AdamW).
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include <oneapi/dnnl/dnnl.hpp>

#include "cpu/cpu_backend.hpp"
#include "cpu/cpu_ops.hpp"
#include "real_length.hpp"

namespace dlbench::worker {
namespace {

using dnnl::memory;
using cpu_ops::Primitive;
using cpu_ops::reorder;
using cpu_ops::user_scratchpad;

memory::desc row_major(const memory::dims& dims, DType dtype) {
  memory::dims strides(dims.size(), 1);
  for (std::size_t i = dims.size() - 1; i > 0; --i) strides[i - 1] = strides[i] * dims[i];
  return memory::desc(dims, dnnl_type(dtype), strides);
}

class CpuBatchedMatmul final : public BatchedMatmulOp {
 public:
  CpuBatchedMatmul(CpuBackend& backend, const BatchedMatmulConfig& c) : b_(backend), c_(c) {
    const memory::data_type t = dnnl_type(c.dtype);
    // Transposes are strides: A stored (k, m) is the (m, k) matrix with strides (1, m).
    a_ = c.transpose_a ? memory::desc({c.batch, c.m, c.k}, t, {c.m * c.k, 1, c.m})
                       : memory::desc({c.batch, c.m, c.k}, t, {c.m * c.k, c.k, 1});
    b_md_ = c.transpose_b ? memory::desc({c.batch, c.k, c.n}, t, {c.n * c.k, 1, c.k})
                          : memory::desc({c.batch, c.k, c.n}, t, {c.k * c.n, c.n, 1});
    c_md_ = row_major({c.batch, c.m, c.n}, c.dtype);
    dnnl::primitive_attr attr;
    if (c.alpha != 1.0f) attr.set_output_scales(0, {c.alpha});
    matmul_ = Primitive(backend, DLBENCH_DNNL_CALL(dnnl::matmul::primitive_desc(
                                     dnnl::matmul::desc(a_, b_md_, c_md_), user_scratchpad(attr), backend.engine())));
  }
  void run(const Tensor& a, const Tensor& b, Tensor& c) override {
    require_elements(a, c_.batch * c_.m * c_.k, "batched matmul", "A");
    require_elements(b, c_.batch * c_.k * c_.n, "batched matmul", "B");
    require_elements(c, c_.batch * c_.m * c_.n, "batched matmul", "C");
    const auto& e = b_.engine();
    matmul_.execute({{DNNL_ARG_SRC, mem(a_, e, a.data)},
                     {DNNL_ARG_WEIGHTS, mem(b_md_, e, b.data)},
                     {DNNL_ARG_DST, mem(c_md_, e, c.data)}});
  }

 private:
  CpuBackend& b_;
  BatchedMatmulConfig c_;
  memory::desc a_, b_md_, c_md_;
  Primitive matmul_;
};

class CpuLayerNorm final : public LayerNormOp {
 public:
  CpuLayerNorm(CpuBackend& backend, const LayerNormConfig& c) : b_(backend) {
    data_ = row_major({c.rows, c.features}, c.dtype);
    statistics_ = row_major({c.rows}, DType::fp32);
    features_ = row_major({c.features}, DType::fp32);
    const auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
    const auto fwd_pd = DLBENCH_DNNL_CALL(dnnl::layer_normalization_forward::primitive_desc(
        dnnl::layer_normalization_forward::desc(dnnl::prop_kind::forward_training, data_, statistics_, c.epsilon, flags),
        user_scratchpad(), backend.engine()));
    const auto bwd_pd = DLBENCH_DNNL_CALL(dnnl::layer_normalization_backward::primitive_desc(
        dnnl::layer_normalization_backward::desc(dnnl::prop_kind::backward, data_, data_, statistics_, c.epsilon, flags),
        user_scratchpad(), backend.engine(), fwd_pd));
    forward_ = Primitive(backend, fwd_pd);
    backward_ = Primitive(backend, bwd_pd);
  }
  void forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& mean,
               Tensor& variance) override {
    const auto& e = b_.engine();
    forward_.execute({{DNNL_ARG_SRC, mem(data_, e, x.data)},
                      {DNNL_ARG_SCALE, mem(features_, e, gamma.as<float>())},
                      {DNNL_ARG_SHIFT, mem(features_, e, beta.as<float>())},
                      {DNNL_ARG_DST, mem(data_, e, y.data)},
                      {DNNL_ARG_MEAN, mem(statistics_, e, mean.as<float>())},
                      {DNNL_ARG_VARIANCE, mem(statistics_, e, variance.as<float>())}});
  }
  // oneDNN 2.6 refuses to run backward without the shift's memory, though it does not read it.
  void backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& beta, const Tensor& mean,
                const Tensor& variance, Tensor& dx, Tensor& dgamma, Tensor& dbeta) override {
    const auto& e = b_.engine();
    backward_.execute({{DNNL_ARG_SRC, mem(data_, e, x.data)},
                       {DNNL_ARG_DIFF_DST, mem(data_, e, dy.data)},
                       {DNNL_ARG_SCALE, mem(features_, e, gamma.as<float>())},
                       {DNNL_ARG_SHIFT, mem(features_, e, beta.as<float>())},
                       {DNNL_ARG_MEAN, mem(statistics_, e, mean.as<float>())},
                       {DNNL_ARG_VARIANCE, mem(statistics_, e, variance.as<float>())},
                       {DNNL_ARG_DIFF_SRC, mem(data_, e, dx.data)},
                       {DNNL_ARG_DIFF_SCALE, mem(features_, e, dgamma.as<float>())},
                       {DNNL_ARG_DIFF_SHIFT, mem(features_, e, dbeta.as<float>())}});
  }

 private:
  CpuBackend& b_;
  memory::desc data_, statistics_, features_;
  Primitive forward_, backward_;
};

class CpuSoftmax final : public SoftmaxOp {
 public:
  CpuSoftmax(CpuBackend& backend, std::int64_t rows, std::int64_t columns, DType dtype)
      : b_(backend), rows_(rows), columns_(columns), dtype_(dtype) {
    data_ = row_major({rows, columns}, dtype);
    const auto fwd_pd = DLBENCH_DNNL_CALL(dnnl::softmax_forward::primitive_desc(
        dnnl::softmax_forward::desc(dnnl::prop_kind::forward_training, data_, 1), user_scratchpad(), backend.engine()));
    const auto bwd_pd = DLBENCH_DNNL_CALL(dnnl::softmax_backward::primitive_desc(
        dnnl::softmax_backward::desc(data_, data_, 1), user_scratchpad(), backend.engine(), fwd_pd));
    forward_ = Primitive(backend, fwd_pd);
    backward_ = Primitive(backend, bwd_pd);
  }
  void forward(const Tensor& x, Tensor& y, RowLengths lengths) override {
    const auto& e = b_.engine();
    forward_.execute({{DNNL_ARG_SRC, mem(data_, e, x.data)}, {DNNL_ARG_DST, mem(data_, e, y.data)}});
    if (lengths.lengths != nullptr) {
      with_element_type(dtype_, [&]<typename T>(T*) { shorten_rows(x.as<T>(), y.as<T>(), lengths); });
    }
  }
  void backward(const Tensor& y, const Tensor& dy, Tensor& dx) override {
    const auto& e = b_.engine();
    backward_.execute({{DNNL_ARG_DST, mem(data_, e, y.data)},
                       {DNNL_ARG_DIFF_DST, mem(data_, e, dy.data)},
                       {DNNL_ARG_DIFF_SRC, mem(data_, e, dx.data)}});
  }

 private:
  // oneDNN's softmax covers whole rows; a row with fewer columns than that is computed again over
  // its own (in fp32, as oneDNN's), the others left as they are.
  template <typename T>
  void shorten_rows(const T* x, T* y, RowLengths lengths) const {
#pragma omp parallel for schedule(static)
    for (std::int64_t r = 0; r < rows_; ++r) {
      const std::int64_t length = real_length(lengths.lengths, r / lengths.rows_per_length, columns_);
      if (length == columns_) continue;
      const T* in = x + r * columns_;
      T* out = y + r * columns_;
      float top = -std::numeric_limits<float>::infinity();
      for (std::int64_t j = 0; j < length; ++j) top = std::max(top, to_float(in[j]));
      float sum = 0.0f;
      for (std::int64_t j = 0; j < length; ++j) sum += std::exp(to_float(in[j]) - top);
      for (std::int64_t j = 0; j < columns_; ++j) {
        out[j] = from_float<T>(j < length ? std::exp(to_float(in[j]) - top) / sum : 0.0f);
      }
    }
  }

  CpuBackend& b_;
  std::int64_t rows_, columns_;
  DType dtype_;
  memory::desc data_;
  Primitive forward_, backward_;
};

class CpuActivation final : public ActivationOp {
 public:
  CpuActivation(CpuBackend& backend, ActivationKind kind, std::int64_t count, DType dtype) : b_(backend) {
    data_ = row_major({count}, dtype);
    const auto algorithm = kind == ActivationKind::gelu ? dnnl::algorithm::eltwise_gelu_erf : dnnl::algorithm::eltwise_tanh;
    const auto fwd_pd = DLBENCH_DNNL_CALL(dnnl::eltwise_forward::primitive_desc(
        dnnl::eltwise_forward::desc(dnnl::prop_kind::forward_training, algorithm, data_, 0.0f, 0.0f),
        user_scratchpad(), backend.engine()));
    const auto bwd_pd = DLBENCH_DNNL_CALL(dnnl::eltwise_backward::primitive_desc(
        dnnl::eltwise_backward::desc(algorithm, data_, data_, 0.0f, 0.0f), user_scratchpad(), backend.engine(), fwd_pd));
    forward_ = Primitive(backend, fwd_pd);
    backward_ = Primitive(backend, bwd_pd);
  }
  void forward(const Tensor& x, Tensor& y) override {
    const auto& e = b_.engine();
    forward_.execute({{DNNL_ARG_SRC, mem(data_, e, x.data)}, {DNNL_ARG_DST, mem(data_, e, y.data)}});
  }
  void backward(const Tensor& x, const Tensor& dy, Tensor& dx) override {
    const auto& e = b_.engine();
    backward_.execute({{DNNL_ARG_SRC, mem(data_, e, x.data)},
                       {DNNL_ARG_DIFF_DST, mem(data_, e, dy.data)},
                       {DNNL_ARG_DIFF_SRC, mem(data_, e, dx.data)}});
  }

 private:
  CpuBackend& b_;
  memory::desc data_;
  Primitive forward_, backward_;
};

class CpuSwapAxes final : public SwapAxesOp {
 public:
  CpuSwapAxes(CpuBackend& backend, const Shape& x, DType dtype) : b_(backend) {
    if (x.rank != 4) throw std::invalid_argument("swap axes: " + x.to_string() + " is not 4-D");
    const std::int64_t a = x[0], b = x[1], c = x[2], d = x[3];
    // x's elements read in y's logical order (A, C, B, D): axis 1 of y steps over x's C.
    source_ = memory::desc({a, c, b, d}, dnnl_type(dtype), {b * c * d, d, c * d, 1});
    destination_ = row_major({a, c, b, d}, dtype);
    reorder_ = reorder(backend, source_, destination_);
  }
  void run(const Tensor& x, Tensor& y) override {
    reorder_.execute(mem(source_, b_.engine(), x.data), mem(destination_, b_.engine(), y.data));
  }

 private:
  CpuBackend& b_;
  memory::desc source_, destination_;
  Primitive reorder_;
};

template <typename TableT, typename RowT>
void gather_rows_typed(const Tensor& table, const std::int32_t* rows, std::int64_t count, Tensor& y, bool accumulate) {
  const std::int64_t features = table.shape[table.shape.rank - 1];
  const std::int64_t table_rows = table.numel() / features;
  const TableT* source = table.as<TableT>();
  RowT* out = y.as<RowT>();
  std::int64_t bad = -1;
#pragma omp parallel for schedule(static)
  for (std::int64_t i = 0; i < count; ++i) {
    const std::int64_t row = rows[i];
    if (row < 0 || row >= table_rows) {
#pragma omp atomic write
      bad = i;
      continue;
    }
    const TableT* from = source + row * features;
    RowT* to = out + i * features;
    if (accumulate) {
      for (std::int64_t f = 0; f < features; ++f) to[f] = from_float<RowT>(to_float(to[f]) + to_float(from[f]));
    } else {
      for (std::int64_t f = 0; f < features; ++f) to[f] = from_float<RowT>(to_float(from[f]));
    }
  }
  if (bad >= 0) {
    throw std::out_of_range("gather_rows: index " + std::to_string(bad) + " names row " + std::to_string(rows[bad]) +
                            " of a table with " + std::to_string(table_rows) + " rows");
  }
}

// Rows may repeat (a token twice in a batch): threads split the columns, not the rows, so that
// no two threads add into the same element, and each element's sum runs in index order.
template <typename GradT, typename TableT>
void scatter_add_rows_typed(const Tensor& dy, const std::int32_t* rows, std::int64_t count, Tensor& table_grad) {
  const std::int64_t features = table_grad.shape[table_grad.shape.rank - 1];
  const std::int64_t table_rows = table_grad.numel() / features;
  for (std::int64_t i = 0; i < count; ++i) {
    if (rows[i] < 0 || rows[i] >= table_rows) {
      throw std::out_of_range("scatter_add_rows: index " + std::to_string(i) + " names row " + std::to_string(rows[i]) +
                              " of a table with " + std::to_string(table_rows) + " rows");
    }
  }
  const GradT* grad = dy.as<GradT>();
  TableT* out = table_grad.as<TableT>();
  constexpr std::int64_t kBlock = 64;
  const std::int64_t blocks = (features + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static)
  for (std::int64_t block = 0; block < blocks; ++block) {
    const std::int64_t f0 = block * kBlock, f1 = std::min(features, f0 + kBlock);
    for (std::int64_t i = 0; i < count; ++i) {
      TableT* to = out + static_cast<std::int64_t>(rows[i]) * features;
      const GradT* from = grad + i * features;
      for (std::int64_t f = f0; f < f1; ++f) to[f] = from_float<TableT>(to_float(to[f]) + to_float(from[f]));
    }
  }
}

}  // namespace

std::unique_ptr<BatchedMatmulOp> CpuBackend::make_batched_matmul(const BatchedMatmulConfig& config) {
  if (emulates(config.dtype)) return emulate_half(make_batched_matmul(in_fp32(config)), half_scratch_);
  return std::make_unique<CpuBatchedMatmul>(*this, config);
}
std::unique_ptr<LayerNormOp> CpuBackend::make_layer_norm(const LayerNormConfig& config) {
  if (emulates(config.dtype)) return emulate_half(make_layer_norm(in_fp32(config)), half_scratch_);
  return std::make_unique<CpuLayerNorm>(*this, config);
}
std::unique_ptr<SoftmaxOp> CpuBackend::make_softmax(std::int64_t rows, std::int64_t columns, DType dtype) {
  if (emulates(dtype)) return emulate_half(make_softmax(rows, columns, DType::fp32), half_scratch_);
  return std::make_unique<CpuSoftmax>(*this, rows, columns, dtype);
}
std::unique_ptr<ActivationOp> CpuBackend::make_activation(ActivationKind kind, std::int64_t count, DType dtype) {
  if (emulates(dtype)) return emulate_half(make_activation(kind, count, DType::fp32), half_scratch_);
  return std::make_unique<CpuActivation>(*this, kind, count, dtype);
}
std::unique_ptr<SwapAxesOp> CpuBackend::make_swap_axes(const Shape& x, DType dtype) {
  if (emulates(dtype)) return emulate_half(make_swap_axes(x, DType::fp32), half_scratch_);
  return std::make_unique<CpuSwapAxes>(*this, x, dtype);
}

void CpuBackend::gather_rows(const Tensor& table, const std::int32_t* rows, std::int64_t count, Tensor& y,
                             bool accumulate) {
  with_element_type(table.dtype, [&]<typename TableT>(TableT*) {
    with_element_type(y.dtype, [&]<typename RowT>(RowT*) {
      gather_rows_typed<TableT, RowT>(table, rows, count, y, accumulate);
    });
  });
}

void CpuBackend::scatter_add_rows(const Tensor& dy, const std::int32_t* rows, std::int64_t count, Tensor& table_grad) {
  with_element_type(dy.dtype, [&]<typename GradT>(GradT*) {
    with_element_type(table_grad.dtype, [&]<typename TableT>(TableT*) {
      scatter_add_rows_typed<GradT, TableT>(dy, rows, count, table_grad);
    });
  });
}

void CpuBackend::fill_zero(Tensor& t) { std::memset(t.data, 0, t.bytes()); }

namespace {

// torch.nn.utils.clip_grad_norm_: one norm over every gradient; the factor is clamped to 1, so
// gradients already within the norm are left as they are. max_norm <= 0: no clipping.
void clip_to_global_norm(float* grads, std::int64_t count, float max_norm) {
  if (max_norm <= 0.0f) return;
  double squares = 0.0;
#pragma omp parallel for simd schedule(static) reduction(+ : squares)
  for (std::int64_t i = 0; i < count; ++i) squares += static_cast<double>(grads[i]) * static_cast<double>(grads[i]);
  const double factor = std::min(1.0, static_cast<double>(max_norm) / (std::sqrt(squares) + 1e-6));
  if (factor < 1.0) {
    const auto f = static_cast<float>(factor);
#pragma omp parallel for simd schedule(static)
    for (std::int64_t i = 0; i < count; ++i) grads[i] *= f;
  }
}

}  // namespace

void CpuBackend::adamw_update(float* values, float* grads, float* first_moment, float* second_moment,
                              std::int64_t count, const std::vector<ParameterRange>& ranges, const AdamWConfig& c,
                              std::uint64_t update_number, const LossScaleState* loss_scale) {
  if (update_skipped(loss_scale)) return;
  clip_to_global_norm(grads, count, c.max_grad_norm);
  const std::uint64_t applied = applied_update_number(update_number, loss_scale);
  const auto t = static_cast<double>(applied);
  const float rate = warmed_up_rate(c.learning_rate, applied, c.warmup_updates);
  const auto step_size = static_cast<float>(static_cast<double>(rate) / (1.0 - std::pow(static_cast<double>(c.beta1), t)));
  const auto root_correction = static_cast<float>(std::sqrt(1.0 - std::pow(static_cast<double>(c.beta2), t)));
  for (const ParameterRange& range : ranges) {
    const float decay = range.decays ? 1.0f - rate * c.weight_decay : 1.0f;
    float* __restrict w = values + range.offset;
    const float* __restrict g = grads + range.offset;
    float* __restrict m = first_moment + range.offset;
    float* __restrict v = second_moment + range.offset;
#pragma omp parallel for simd schedule(static)
    for (std::int64_t i = 0; i < range.count; ++i) {
      m[i] = c.beta1 * m[i] + (1.0f - c.beta1) * g[i];
      v[i] = c.beta2 * v[i] + (1.0f - c.beta2) * g[i] * g[i];
      w[i] = w[i] * decay - step_size * m[i] / (std::sqrt(v[i]) / root_correction + c.epsilon);
    }
  }
}

// Two passes per tensor: the moments and both norms, then the update (u is recomputed from the
// stored moments rather than kept: no scratch as large as the model).
void CpuBackend::lamb_update(float* values, float* grads, float* first_moment, float* second_moment, std::int64_t count,
                             const std::vector<ParameterRange>& tensors, const AdamWConfig& c,
                             std::uint64_t update_number, const LossScaleState* loss_scale) {
  if (update_skipped(loss_scale)) return;
  clip_to_global_norm(grads, count, c.max_grad_norm);
  const std::uint64_t applied = applied_update_number(update_number, loss_scale);
  const auto t = static_cast<double>(applied);
  const float rate = warmed_up_rate(c.learning_rate, applied, c.warmup_updates);
  const auto correction1 = static_cast<float>(1.0 - std::pow(static_cast<double>(c.beta1), t));
  const auto correction2 = static_cast<float>(1.0 - std::pow(static_cast<double>(c.beta2), t));
  for (const ParameterRange& tensor : tensors) {
    const float decay = tensor.decays ? c.weight_decay : 0.0f;
    float* __restrict w = values + tensor.offset;
    const float* __restrict g = grads + tensor.offset;
    float* __restrict m = first_moment + tensor.offset;
    float* __restrict v = second_moment + tensor.offset;
    const auto update = [&](std::int64_t i) {
      return (m[i] / correction1) / (std::sqrt(v[i] / correction2) + c.epsilon) + decay * w[i];
    };
    double weight_squares = 0.0, update_squares = 0.0;
#pragma omp parallel for simd schedule(static) reduction(+ : weight_squares, update_squares)
    for (std::int64_t i = 0; i < tensor.count; ++i) {
      m[i] = c.beta1 * m[i] + (1.0f - c.beta1) * g[i];
      v[i] = c.beta2 * v[i] + (1.0f - c.beta2) * g[i] * g[i];
      const float u = update(i);
      weight_squares += static_cast<double>(w[i]) * static_cast<double>(w[i]);
      update_squares += static_cast<double>(u) * static_cast<double>(u);
    }
    const double ratio = tensor.decays && weight_squares > 0.0 && update_squares > 0.0
                             ? std::sqrt(weight_squares) / std::sqrt(update_squares)
                             : 1.0;
    const auto step = static_cast<float>(static_cast<double>(rate) * ratio);
#pragma omp parallel for simd schedule(static)
    for (std::int64_t i = 0; i < tensor.count; ++i) w[i] -= step * update(i);
  }
}

}  // namespace dlbench::worker
