// The CUDA backend's transformer ops (BERT): attention's batched matmuls as cuBLASLt
// strided-batched GEMMs, the rest in dlbench's kernels (transformer_kernels.cu). Activations in
// the backend's dtype (fp32, with TF32 math where the backend's math says; fp16 or bf16 on tensor
// cores), computed with fp32 accumulation. Every op is checked against the CPU
// backend by the self-test (dlbench-worker --self-test) on the user's GPUs.
#include <algorithm>
#include <cstddef>
#include <iostream>
#include <mutex>
#include <set>
#include <stdexcept>
#include <string>
#include <variant>

#include "cuda/attention_kernels.hpp"
#include "cuda/cuda_backend.hpp"
#include "cuda/cuda_common.hpp"
#include "cuda/gemm.hpp"
#include "cuda/kernels.hpp"
#include "cuda/transformer_kernels.hpp"

namespace dlbench::worker {
namespace {

using cuda_detail::as_int;
using cuda_detail::Gemm;
using cuda_detail::GemmBatch;
using cuda_detail::GemmEpilogue;

// Row-major C[b] (m x n) = alpha · op(A[b]) op(B[b]). Column-major, a row-major matrix is its
// transpose, so cuBLASLt computes Cᵀ = op(B)ᵀ op(A)ᵀ: an n x m result from B's buffer first.
// A stored (m, k) is column-major k x m with leading dimension k; stored (k, m), m x k with m.
class CudaBatchedMatmul final : public BatchedMatmulOp {
 public:
  CudaBatchedMatmul(CudaBackend& backend, const BatchedMatmulConfig& c)
      : c_(c),
        gemm_(backend, c.transpose_b, c.transpose_a, c.n, c.m, c.k, c.transpose_b ? c.k : c.n,
              c.transpose_a ? c.m : c.k, c.n, GemmEpilogue::none, c.alpha,
              GemmBatch{c.batch, c.k * c.n, c.m * c.k, c.m * c.n}, cuda_detail::GemmTypes{c.dtype, c.dtype}) {}

  void run(const Tensor& a, const Tensor& b, Tensor& c) override {
    require_elements(a, c_.batch * c_.m * c_.k, "batched matmul", "A");
    require_elements(b, c_.batch * c_.k * c_.n, "batched matmul", "B");
    require_elements(c, c_.batch * c_.m * c_.n, "batched matmul", "C");
    cuda_detail::require_dtype("batched matmul", c_.dtype, {&a, &b, &c});
    gemm_.run(b.data, a.data, c.data);
  }

 private:
  BatchedMatmulConfig c_;
  Gemm gemm_;
};

class CudaLayerNorm final : public LayerNormOp {
 public:
  CudaLayerNorm(CudaBackend& backend, const LayerNormConfig& c) : backend_(backend), c_(c) {}

  void forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& mean,
               Tensor& variance) override {
    require_elements(x, c_.rows * c_.features, "layer norm", "x");
    cuda_detail::require_dtype("layer norm", c_.dtype, {&x, &y});
    kernels::layer_norm_forward(c_.dtype, x.data, gamma.as<float>(), beta.as<float>(), y.data, mean.as<float>(),
                                variance.as<float>(), c_.rows, as_int(c_.features), c_.epsilon, backend_.stream());
  }
  void backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& /*beta*/, const Tensor& mean,
                const Tensor& variance, Tensor& dx, Tensor& dgamma, Tensor& dbeta) override {
    require_elements(dy, c_.rows * c_.features, "layer norm", "dy");
    cuda_detail::require_dtype("layer norm", c_.dtype, {&x, &dy, &dx});
    const int features = as_int(c_.features);
    auto* scratch =
        static_cast<float*>(backend_.workspace(kernels::layer_norm_backward_scratch_bytes(c_.rows, features)));
    kernels::layer_norm_backward(c_.dtype, x.data, dy.data, gamma.as<float>(), mean.as<float>(), variance.as<float>(),
                                 dx.data, dgamma.as<float>(), dbeta.as<float>(), c_.rows, features, c_.epsilon,
                                 scratch, backend_.stream());
  }

 private:
  CudaBackend& backend_;
  LayerNormConfig c_;
};

class CudaSoftmax final : public SoftmaxOp {
 public:
  CudaSoftmax(CudaBackend& backend, std::int64_t rows, std::int64_t columns, DType dtype)
      : backend_(backend), rows_(rows), columns_(columns), dtype_(dtype) {}
  void forward(const Tensor& x, Tensor& y, RowLengths lengths) override {
    require_elements(x, rows_ * columns_, "softmax", "x");
    cuda_detail::require_dtype("softmax", dtype_, {&x, &y});
    kernels::softmax_forward(dtype_, x.data, y.data, rows_, as_int(columns_), lengths.lengths, lengths.rows_per_length,
                             backend_.stream());
  }
  void backward(const Tensor& y, const Tensor& dy, Tensor& dx) override {
    require_elements(dy, rows_ * columns_, "softmax", "dy");
    cuda_detail::require_dtype("softmax", dtype_, {&y, &dy, &dx});
    kernels::softmax_backward(dtype_, y.data, dy.data, dx.data, rows_, as_int(columns_), backend_.stream());
  }

 private:
  CudaBackend& backend_;
  std::int64_t rows_, columns_;
  DType dtype_;
};

// Attention in two kernels (attention_kernels.cu), on the projections' rows as they are.
class CudaFusedAttention final : public AttentionOp {
 public:
  CudaFusedAttention(CudaBackend& backend, const AttentionConfig& c, const FusedAttentionPlan& plan)
      : backend_(backend), c_(c), plan_(plan) {
    kernels::prepare_fused_attention(c.dtype, backend.properties().sharedMemPerBlockOptin);
  }
  void forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& context, Tensor& statistics, float dropout,
               std::uint64_t layer_seed, const std::int32_t* real_tokens) override {
    require_attention_tensors(c_, {&q, &k, &v, &context}, statistics);
    kernels::fused_attention_forward(call(dropout, layer_seed, real_tokens), q.data, k.data, v.data, context.data,
                                     statistics.as<float>(), backend_.stream());
  }
  void backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dcontext, const Tensor& statistics,
                float dropout, std::uint64_t layer_seed, const std::int32_t* real_tokens, Tensor& dq, Tensor& dk,
                Tensor& dv) override {
    require_attention_tensors(c_, {&q, &k, &v, &dcontext, &dq, &dk, &dv}, statistics);
    kernels::fused_attention_backward(call(dropout, layer_seed, real_tokens), q.data, k.data, v.data, dcontext.data,
                                      statistics.as<float>(), dq.data, dk.data, dv.data, backend_.stream());
  }

 private:
  kernels::FusedAttentionCall call(float dropout, std::uint64_t layer_seed, const std::int32_t* real_tokens) const {
    kernels::FusedAttentionCall call;
    call.plan = &plan_;
    call.dtype = c_.dtype;
    call.sequences = as_int(c_.sequences);
    call.heads = as_int(c_.heads);
    call.dropout = dropout;
    call.layer_seed = layer_seed;
    call.step = backend_.device_step();
    call.real_tokens = real_tokens;
    return call;
  }

  CudaBackend& backend_;
  AttentionConfig c_;
  FusedAttentionPlan plan_;
};

class CudaActivation final : public ActivationOp {
 public:
  CudaActivation(CudaBackend& backend, ActivationKind kind, std::int64_t count, DType dtype)
      : backend_(backend), kind_(kind), count_(count), dtype_(dtype) {}
  void forward(const Tensor& x, Tensor& y) override {
    require_elements(x, count_, "activation", "x");
    cuda_detail::require_dtype("activation", dtype_, {&x, &y});
    if (kind_ == ActivationKind::gelu) {
      kernels::gelu_forward(dtype_, x.data, y.data, count_, backend_.stream());
    } else {
      kernels::tanh_forward(dtype_, x.data, y.data, count_, backend_.stream());
    }
  }
  void backward(const Tensor& x, const Tensor& dy, Tensor& dx) override {
    require_elements(dy, count_, "activation", "dy");
    cuda_detail::require_dtype("activation", dtype_, {&x, &dy, &dx});
    if (kind_ == ActivationKind::gelu) {
      kernels::gelu_backward(dtype_, x.data, dy.data, dx.data, count_, backend_.stream());
    } else {
      kernels::tanh_backward(dtype_, x.data, dy.data, dx.data, count_, backend_.stream());
    }
  }

 private:
  CudaBackend& backend_;
  ActivationKind kind_;
  std::int64_t count_;
  DType dtype_;
};

class CudaSwapAxes final : public SwapAxesOp {
 public:
  CudaSwapAxes(CudaBackend& backend, const Shape& x, DType dtype) : backend_(backend), x_(x), dtype_(dtype) {
    if (x.rank != 4) throw std::invalid_argument("swap axes: " + x.to_string() + " is not a 4-D shape");
  }
  void run(const Tensor& x, Tensor& y) override {
    require_elements(x, x_.numel(), "swap axes", "x");
    cuda_detail::require_dtype("swap axes", dtype_, {&x, &y});
    kernels::swap_axes(dtype_, x.data, y.data, x_[0], x_[1], x_[2], x_[3], backend_.stream());
  }

 private:
  CudaBackend& backend_;
  Shape x_;
  DType dtype_;
};

// A table's row width and row count: its last dimension, and the rest.
std::pair<std::int64_t, std::int64_t> rows_of(const Tensor& table) {
  const std::int64_t features = table.shape[table.shape.rank - 1];
  return {features, table.numel() / features};
}

// The update number (8), 7 coefficients (28), then the sum of squares and its partials.
constexpr std::size_t kAdamSquaresOffset = 64;
constexpr std::size_t kAdamScalarBytes =
    kAdamSquaresOffset + (1 + static_cast<std::size_t>(kernels::kAdamSquaresPartials)) * sizeof(double);

kernels::AdamWScalars scalars_of(const AdamWConfig& c) {
  return {c.learning_rate, c.beta1, c.beta2, c.epsilon, c.weight_decay, c.max_grad_norm, c.warmup_updates};
}

}  // namespace

std::unique_ptr<AttentionOp> CudaBackend::make_fused_attention(const AttentionConfig& config) {
  if (attention_route_ != AttentionRoute::fused) return nullptr;
  const auto plan = fused_attention_plan({config.sequences, config.tokens, config.heads, config.head_size, config.dtype},
                                         properties_.sharedMemPerBlockOptin);
  if (const auto* why = std::get_if<std::string>(&plan)) {
    // Once per reason, not once per layer.
    static std::mutex mutex;
    static std::set<std::string> said;
    const std::lock_guard lock(mutex);
    if (said.insert(*why).second) std::cerr << "dlbench-worker: DLBENCH_CUDA_ATTENTION=fused: " + *why + "; composing it\n";
    return nullptr;
  }
  return std::make_unique<CudaFusedAttention>(*this, config, std::get<FusedAttentionPlan>(plan));
}
std::unique_ptr<BatchedMatmulOp> CudaBackend::make_batched_matmul(const BatchedMatmulConfig& config) {
  require_computable(config.dtype);
  return std::make_unique<CudaBatchedMatmul>(*this, config);
}
std::unique_ptr<LayerNormOp> CudaBackend::make_layer_norm(const LayerNormConfig& config) {
  require_computable(config.dtype);
  return std::make_unique<CudaLayerNorm>(*this, config);
}
std::unique_ptr<SoftmaxOp> CudaBackend::make_softmax(std::int64_t rows, std::int64_t columns, DType dtype) {
  require_computable(dtype);
  return std::make_unique<CudaSoftmax>(*this, rows, columns, dtype);
}
std::unique_ptr<ActivationOp> CudaBackend::make_activation(ActivationKind kind, std::int64_t count, DType dtype) {
  require_computable(dtype);
  return std::make_unique<CudaActivation>(*this, kind, count, dtype);
}
std::unique_ptr<SwapAxesOp> CudaBackend::make_swap_axes(const Shape& x, DType dtype) {
  require_computable(dtype);
  return std::make_unique<CudaSwapAxes>(*this, x, dtype);
}

void CudaBackend::gather_rows(const Tensor& table, const std::int32_t* rows, std::int64_t count, Tensor& y,
                              bool accumulate) {
  require_computable(y.dtype);
  if (table.dtype != DType::fp32) require_computable(table.dtype);  // an activation's rows
  const auto [features, table_rows] = rows_of(table);
  require_elements(y, count * features, "gather rows", "y");
  kernels::gather_rows(table.dtype, table.data, rows, count, as_int(features), table_rows, y.dtype, y.data, accumulate,
                       stream_);
}

void CudaBackend::scatter_add_rows(const Tensor& dy, const std::int32_t* rows, std::int64_t count, Tensor& table_grad) {
  require_computable(dy.dtype);
  if (table_grad.dtype != DType::fp32) require_computable(table_grad.dtype);  // an activation's gradient
  const auto [features, table_rows] = rows_of(table_grad);
  require_elements(dy, count * features, "scatter-add rows", "dy");
  void* scratch = workspace(kernels::scatter_add_rows_scratch_bytes(count, as_int(features), table_rows));
  kernels::scatter_add_rows(dy.dtype, dy.data, rows, count, as_int(features), table_rows, table_grad.dtype,
                            table_grad.data, scratch, stream_);
}

void CudaBackend::fill_zero(Tensor& t) {
  kept_weights_.wrote(t.data, t.bytes());
  DLBENCH_CUDA_CHECK(cudaMemsetAsync(t.data, 0, t.bytes(), stream_));
}

CudaBackend::DeviceRanges CudaBackend::device_ranges(const std::vector<ParameterRange>& ranges) {
  if (!adam_ranges_ || ranges != adam_ranges_uploaded_) {
    // Host copies: never inside a captured step (the trainer's first step is eager).
    if (capturing_) throw CudaError("the optimizer's parameter ranges changed while a step is captured");
    std::vector<ParameterRange> sorted = ranges;
    std::sort(sorted.begin(), sorted.end(), [](const auto& a, const auto& b) { return a.offset < b.offset; });
    const std::size_t n = sorted.size();
    std::vector<std::int64_t> offsets_and_counts(2 * n);
    std::vector<std::int32_t> decays(n);
    for (std::size_t i = 0; i < n; ++i) {
      offsets_and_counts[i] = sorted[i].offset;
      offsets_and_counts[n + i] = sorted[i].count;
      decays[i] = sorted[i].decays ? 1 : 0;
    }
    adam_ranges_ = allocate(std::max<std::size_t>(1, n * (2 * sizeof(std::int64_t) + sizeof(std::int32_t))));
    auto* device = static_cast<std::byte*>(adam_ranges_.get());
    copy_from_host(device, offsets_and_counts.data(), offsets_and_counts.size() * sizeof(std::int64_t));
    copy_from_host(device + 2 * n * sizeof(std::int64_t), decays.data(), decays.size() * sizeof(std::int32_t));
    adam_ranges_uploaded_ = ranges;
  }
  const std::size_t n = adam_ranges_uploaded_.size();
  const auto* offsets = static_cast<const std::int64_t*>(adam_ranges_.get());
  const auto* decays = reinterpret_cast<const std::int32_t*>(static_cast<const std::byte*>(adam_ranges_.get()) +
                                                             2 * n * sizeof(std::int64_t));
  return {offsets, offsets + n, decays, static_cast<int>(n)};
}

std::uint64_t* CudaBackend::queue_update_number(std::uint64_t update_number) {
  if (!adam_scalars_) adam_scalars_ = allocate(kAdamScalarBytes);
  auto* update = static_cast<std::uint64_t*>(adam_scalars_.get());
  // As begin_step's counter: a captured step holds "one more update", so each replay corrects
  // its moments (and warms its rate up) for its own update number.
  if (capturing_) {
    kernels::advance_step(update, stream_);
  } else {
    kernels::set_step(update, update_number, stream_);
  }
  return update;
}

float* CudaBackend::prepare_adam_step(const float* grads, std::int64_t count, const AdamWConfig& c,
                                      std::uint64_t update_number, const LossScaleState* loss_scale) {
  std::uint64_t* update = queue_update_number(update_number);
  auto* scalars = static_cast<std::byte*>(adam_scalars_.get());
  auto* coefficients = reinterpret_cast<float*>(scalars + 8);
  auto* squares = reinterpret_cast<double*>(scalars + kAdamSquaresOffset);
  kernels::adam_prepare(grads, count, squares, update, loss_scale, scalars_of(c), coefficients, stream_);
  return coefficients;
}

void CudaBackend::adamw_update(float* values, float* grads, float* first_moment, float* second_moment,
                               std::int64_t count, const std::vector<ParameterRange>& ranges, const AdamWConfig& c,
                               std::uint64_t update_number, const LossScaleState* loss_scale) {
  kept_weights_.wrote(values, static_cast<std::size_t>(count) * sizeof(float));
  const DeviceRanges r = device_ranges(ranges);
  const float* coefficients = prepare_adam_step(grads, count, c, update_number, loss_scale);
  kernels::adamw_apply(values, grads, first_moment, second_moment, count, r.offsets, r.counts, r.decays, r.count,
                       scalars_of(c), coefficients, stream_);
}

void CudaBackend::lamb_update(float* values, float* grads, float* first_moment, float* second_moment,
                              std::int64_t count, const std::vector<ParameterRange>& tensors, const AdamWConfig& c,
                              std::uint64_t update_number, const LossScaleState* loss_scale) {
  kept_weights_.wrote(values, static_cast<std::size_t>(count) * sizeof(float));
  const DeviceRanges r = device_ranges(tensors);
  if (static_cast<std::size_t>(r.count) > lamb_norms_capacity_) {
    if (capturing_) throw CudaError("LAMB's per-tensor norms would have to grow while a step is captured");
    lamb_norms_ = allocate(kernels::lamb_norms_doubles(r.count) * sizeof(double));
    lamb_norms_capacity_ = static_cast<std::size_t>(r.count);
  }
  auto* norms = static_cast<double*>(lamb_norms_.get());
  const float* coefficients = prepare_adam_step(grads, count, c, update_number, loss_scale);
  kernels::lamb_moments(values, grads, first_moment, second_moment, r.offsets, r.counts, r.decays, r.count,
                        scalars_of(c), coefficients, norms, stream_);
  kernels::lamb_apply(values, first_moment, second_moment, r.offsets, r.counts, r.decays, r.count, scalars_of(c),
                      coefficients, norms, stream_);
}

}  // namespace dlbench::worker
