// The CPU backend's fused attention (DLBENCH_CPU_ATTENTION=fused): the algorithm of the CUDA
// kernel, one sequence and head at a time in fp32, so that the layer's fused route, the
// recomputation from log-sum-exp and the dropout mask's indices are tested on every machine.
// Backward recomputes each probability row from the scores and the row's log-sum-exp, and takes
// softmax's Σ P·dP from the recomputed row, not from the context.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "cpu/cpu_backend.hpp"
#include "cpu/onednn_memory.hpp"
#include "cpu/vector_exp.hpp"
#include "dropout_mask.hpp"

namespace dlbench::worker {
namespace {

// A head's forward and backward are cloned for AVX-512 and AVX2 (the build targets generic
// x86-64), as the dropout loops are, with the row loops inlined into them (a call a 64-value row
// cost more than its arithmetic); the OpenMP loop over heads stays outside the clones.
#define DLBENCH_VECTOR_CLONES [[gnu::target_clones("avx512f", "avx2", "default")]]
#define DLBENCH_INLINE [[gnu::always_inline]] inline

DLBENCH_INLINE void add_scaled(float* y, float a, const float* x, std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// out[j] = Σ_c x[c] · m_t[c · n + j] for j < n: a row times a matrix kept transposed (d × n), so
// that the inner loop runs along j over contiguous values instead of one dot product per j.
DLBENCH_INLINE void row_times(const float* x, const float* m_t, std::int64_t n, std::int64_t d, float* out) {
  std::fill(out, out + n, 0.0f);
  for (std::int64_t c = 0; c < d; ++c) {
    const float a = x[c];
    const float* m = m_t + c * n;
#pragma omp simd
    for (std::int64_t j = 0; j < n; ++j) out[j] += a * m[j];
  }
}

// mask[j] = keep_scale where dropout keeps element first + j of the probabilities, 0 where not.
DLBENCH_INLINE void dropout_row(float* mask, std::int64_t n, DropoutKey key, std::uint64_t first,
                                       std::uint32_t threshold, float keep_scale) {
  const auto block = static_cast<std::uint32_t>(first >> 32);
  if (block != static_cast<std::uint32_t>((first + static_cast<std::uint64_t>(n) - 1) >> 32)) {
    for (std::int64_t j = 0; j < n; ++j) {  // the row crosses a 2^32-element block: 64-bit indices
      mask[j] = dropout_keeps(key, first + static_cast<std::uint64_t>(j), threshold) ? keep_scale : 0.0f;
    }
    return;
  }
  const auto low = static_cast<std::uint32_t>(first);
  const auto count = static_cast<std::uint32_t>(n);
#pragma omp simd
  for (std::uint32_t j = 0; j < count; ++j) mask[j] = dropout_hash(key, block, low + j) >= threshold ? keep_scale : 0.0f;
}

// row = softmax(alpha · row) in place; returns the row's log-sum-exp of alpha · row.
DLBENCH_INLINE float softmax_row(float* row, std::int64_t n, float alpha) {
  float top = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : top)
  for (std::int64_t j = 0; j < n; ++j) {
    row[j] *= alpha;
    top = std::max(top, row[j]);
  }
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (std::int64_t j = 0; j < n; ++j) {
    row[j] = exp_of_small(row[j] - top);
    sum += row[j];
  }
  const float inverse = 1.0f / sum;
#pragma omp simd
  for (std::int64_t j = 0; j < n; ++j) row[j] *= inverse;
  return top + std::log(sum);
}

// Backward's row: p = e^(alpha · p - log_sum) (the probabilities again), dp *= mask; returns
// Σ p · dp, softmax's backward term.
DLBENCH_INLINE float recompute_row(float* p, float* dp, const float* mask, std::int64_t n, float alpha,
                                         float log_sum) {
  float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
  for (std::int64_t j = 0; j < n; ++j) {
    p[j] = exp_of_small(alpha * p[j] - log_sum);
    dp[j] *= mask[j];
    dot += p[j] * dp[j];
  }
  return dot;
}

// What a head's passes are told: its size, the scores' scale and dropout's key and threshold.
struct HeadPass {
  std::int64_t n, d;  // tokens, head size
  float alpha, keep_scale;
  DropoutKey key;
  std::uint32_t threshold;
  std::uint64_t first;  // the head's first probability's index in the (sequences, heads, tokens, tokens) mask
};

// out = dropout(softmax(alpha · Q Kᵀ)) V for one head (out zeroed here); statistics[i] = row i's
// log-sum-exp. row and mask: n floats of scratch each.
DLBENCH_VECTOR_CLONES void head_forward(const HeadPass& h, const float* q, const float* k_t, const float* v, float* out,
                                        float* statistics, float* row, float* mask) {
  const std::int64_t n = h.n, d = h.d;
  std::fill(out, out + n * d, 0.0f);
  for (std::int64_t i = 0; i < n; ++i) {
    row_times(&q[i * d], k_t, n, d, row);
    statistics[i] = softmax_row(row, n, h.alpha);
    dropout_row(mask, n, h.key, h.first + static_cast<std::uint64_t>(i * n), h.threshold, h.keep_scale);
    for (std::int64_t j = 0; j < n; ++j) {
      if (mask[j] != 0.0f) add_scaled(&out[i * d], row[j] * mask[j], &v[j * d], d);
    }
  }
}

// dq, dk, dv (zeroed here) for one head from dout, the probabilities recomputed from statistics.
// p, dp and mask: n floats of scratch each.
DLBENCH_VECTOR_CLONES void head_backward(const HeadPass& h, const float* q, const float* k, const float* k_t,
                                         const float* v_t, const float* dout, const float* statistics, float* dq,
                                         float* dk, float* dv, float* p, float* dp, float* mask) {
  const std::int64_t n = h.n, d = h.d;
  std::fill(dq, dq + n * d, 0.0f);
  std::fill(dk, dk + n * d, 0.0f);
  std::fill(dv, dv + n * d, 0.0f);
  for (std::int64_t i = 0; i < n; ++i) {
    row_times(&q[i * d], k_t, n, d, p);
    row_times(&dout[i * d], v_t, n, d, dp);
    dropout_row(mask, n, h.key, h.first + static_cast<std::uint64_t>(i * n), h.threshold, h.keep_scale);
    const float softmax_dot = recompute_row(p, dp, mask, n, h.alpha, statistics[i]);  // Σ_j P·dP, dP masked
    for (std::int64_t j = 0; j < n; ++j) {
      if (mask[j] != 0.0f) add_scaled(&dv[j * d], p[j] * mask[j], &dout[i * d], d);
      const float ds = h.alpha * p[j] * (dp[j] - softmax_dot);
      add_scaled(&dq[i * d], ds, &k[j * d], d);
      add_scaled(&dk[j * d], ds, &q[i * d], d);
    }
  }
}

void transpose(const float* m, std::int64_t n, std::int64_t d, float* m_t) {
  for (std::int64_t j = 0; j < n; ++j) {
    for (std::int64_t c = 0; c < d; ++c) m_t[c * n + j] = m[j * d + c];
  }
}

class CpuFusedAttention final : public AttentionOp {
 public:
  CpuFusedAttention(const AttentionConfig& c, const std::uint64_t* step) : c_(c), step_(step) {}

  void forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& context, Tensor& statistics, float dropout,
               std::uint64_t layer_seed) override {
    require_attention_tensors(c_, {&q, &k, &v, &context}, statistics);
    with_element_type(c_.dtype, [&]<typename T>(T*) {
      forward_typed(q.as<T>(), k.as<T>(), v.as<T>(), context.as<T>(), statistics.as<float>(), dropout, layer_seed);
    });
  }

  void backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dcontext, const Tensor& statistics,
                float dropout, std::uint64_t layer_seed, Tensor& dq, Tensor& dk, Tensor& dv) override {
    require_attention_tensors(c_, {&q, &k, &v, &dcontext, &dq, &dk, &dv}, statistics);
    with_element_type(c_.dtype, [&]<typename T>(T*) {
      backward_typed(q.as<T>(), k.as<T>(), v.as<T>(), dcontext.as<T>(), statistics.as<float>(), dropout, layer_seed,
                     dq.as<T>(), dk.as<T>(), dv.as<T>());
    });
  }

 private:
  // One head's (tokens, head_size) matrix out of the rows, as floats.
  template <typename T>
  void gather_head(const T* rows, std::int64_t s, std::int64_t h, float* out) const {
    const std::int64_t width = c_.heads * c_.head_size;
    for (std::int64_t t = 0; t < c_.tokens; ++t) {
      const T* from = rows + (s * c_.tokens + t) * width + h * c_.head_size;
      for (std::int64_t d = 0; d < c_.head_size; ++d) out[t * c_.head_size + d] = to_float(from[d]);
    }
  }
  template <typename T>
  void scatter_head(const float* head, std::int64_t s, std::int64_t h, T* rows) const {
    const std::int64_t width = c_.heads * c_.head_size;
    for (std::int64_t t = 0; t < c_.tokens; ++t) {
      T* to = rows + (s * c_.tokens + t) * width + h * c_.head_size;
      for (std::int64_t d = 0; d < c_.head_size; ++d) to[d] = from_float<T>(head[t * c_.head_size + d]);
    }
  }
  // What every head's pass of one call shares; `first` is set per head.
  HeadPass head_pass(float dropout, std::uint64_t layer_seed) const {
    return {c_.tokens, c_.head_size, 1.0f / std::sqrt(static_cast<float>(c_.head_size)), 1.0f / (1.0f - dropout),
            dropout_key(layer_seed, *step_), dropout_threshold(dropout), 0};
  }

  template <typename T>
  void forward_typed(const T* q, const T* k, const T* v, T* context, float* statistics, float dropout,
                     std::uint64_t layer_seed) const {
    const std::int64_t n = c_.tokens, d = c_.head_size, matrix = n * d;
    const HeadPass call = head_pass(dropout, layer_seed);
#pragma omp parallel
    {
      std::vector<float> scratch(static_cast<std::size_t>(5 * matrix + 2 * n));
      float* qh = scratch.data();
      float* kh = qh + matrix;
      float* vh = kh + matrix;
      float* out = vh + matrix;
      float* k_t = out + matrix;
      float* row = k_t + matrix;
      float* mask = row + n;
#pragma omp for schedule(static)
      for (std::int64_t sh = 0; sh < c_.sequences * c_.heads; ++sh) {
        const std::int64_t s = sh / c_.heads, h = sh % c_.heads;
        gather_head(q, s, h, qh);
        gather_head(k, s, h, kh);
        gather_head(v, s, h, vh);
        transpose(kh, n, d, k_t);
        HeadPass pass = call;
        pass.first = static_cast<std::uint64_t>(sh * n * n);
        head_forward(pass, qh, k_t, vh, out, statistics + sh * n, row, mask);
        scatter_head(out, s, h, context);
      }
    }
  }

  template <typename T>
  void backward_typed(const T* q, const T* k, const T* v, const T* dcontext, const float* statistics, float dropout,
                      std::uint64_t layer_seed, T* dq, T* dk, T* dv) const {
    const std::int64_t n = c_.tokens, d = c_.head_size, matrix = n * d;
    const HeadPass call = head_pass(dropout, layer_seed);
#pragma omp parallel
    {
      std::vector<float> scratch(static_cast<std::size_t>(9 * matrix + 3 * n));
      float* qh = scratch.data();
      float* kh = qh + matrix;
      float* vh = kh + matrix;
      float* doh = vh + matrix;
      float* dqh = doh + matrix;
      float* dkh = dqh + matrix;
      float* dvh = dkh + matrix;
      float* k_t = dvh + matrix;
      float* v_t = k_t + matrix;
      float* p = v_t + matrix;
      float* dp = p + n;
      float* mask = dp + n;
#pragma omp for schedule(static)
      for (std::int64_t sh = 0; sh < c_.sequences * c_.heads; ++sh) {
        const std::int64_t s = sh / c_.heads, h = sh % c_.heads;
        gather_head(q, s, h, qh);
        gather_head(k, s, h, kh);
        gather_head(v, s, h, vh);
        gather_head(dcontext, s, h, doh);
        transpose(kh, n, d, k_t);
        transpose(vh, n, d, v_t);
        HeadPass pass = call;
        pass.first = static_cast<std::uint64_t>(sh * n * n);
        head_backward(pass, qh, kh, k_t, v_t, doh, statistics + sh * n, dqh, dkh, dvh, p, dp, mask);
        scatter_head(dqh, s, h, dq);
        scatter_head(dkh, s, h, dk);
        scatter_head(dvh, s, h, dv);
      }
    }
  }

  AttentionConfig c_;
  const std::uint64_t* step_;  // the backend's begin_step, read at each call
};

}  // namespace

std::unique_ptr<AttentionOp> CpuBackend::make_fused_attention(const AttentionConfig& config) {
  if (attention_route_ != AttentionRoute::fused) return nullptr;
  return std::make_unique<CpuFusedAttention>(config, &step_);
}

}  // namespace dlbench::worker
