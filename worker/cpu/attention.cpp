// The CPU backend's fused attention (DLBENCH_CPU_ATTENTION=fused): the algorithm of the CUDA
// kernel, one sequence and head at a time in fp32, so that the layer's fused route, the
// recomputation from log-sum-exp and the dropout mask's indices are tested on every machine.
// As the kernel keeps a head's whole score matrix in shared memory, a thread keeps it in its cache
// (n × n floats), so the products are whole-matrix GEMMs (oneDNN's sgemm) and only the row passes
// are dlbench's. Backward recomputes each probability row from the scores and the row's
// log-sum-exp, and takes softmax's Σ P·dP from the recomputed row, not from the context.
#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include <oneapi/dnnl/dnnl.h>

#include "cpu/cpu_backend.hpp"
#include "cpu/dnnl_check.hpp"
#include "cpu/onednn_memory.hpp"
#include "cpu/vector_exp.hpp"
#include "dropout_mask.hpp"
#include "real_length.hpp"

namespace dlbench::worker {
namespace {

// A head's row passes are cloned for AVX-512 and AVX2 (the build targets generic x86-64), as the
// dropout loops are, with the row loops inlined into them (a call a 64-value row cost more than
// its arithmetic); the OpenMP loop over heads stays outside the clones.
#define DLBENCH_VECTOR_CLONES [[gnu::target_clones("avx512f", "avx2", "default")]]
#define DLBENCH_INLINE [[gnu::always_inline]] inline

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

// What a head's row passes are told: its tokens, the scores' scale and dropout's key and threshold.
struct HeadPass {
  std::int64_t n;     // tokens
  std::int64_t keys;  // the sequence's real tokens: the columns a row's softmax covers (the rest are 0)
  float alpha, keep_scale;
  DropoutKey key;
  std::uint32_t threshold;
  std::uint64_t first;  // the head's first probability's index in the (sequences, heads, tokens, tokens) mask
};

// A head's matrix: its first value and the distance between its rows. fp32 heads are read and
// written in place in the projections' rows (rows = heads · head size apart); other types go
// through an fp32 copy of n contiguous rows.
struct HeadMatrix {
  float* at;
  std::int64_t rows_apart;
};

// C (m × n) = op(A) · op(B) + beta · C, row-major, through oneDNN's sgemm. Inside the parallel
// loop over heads it runs on its caller's thread. Its only failure is a bad argument, which an
// exception cannot report from inside the parallel region: the first is kept for after it.
void gemm(char trans_a, char trans_b, std::int64_t m, std::int64_t n, std::int64_t k, const HeadMatrix& a,
          const HeadMatrix& b, float beta, const HeadMatrix& c, std::atomic<int>& failure) {
  const dnnl_status_t status =
      dnnl_sgemm(trans_a, trans_b, m, n, k, 1.0f, a.at, a.rows_apart, b.at, b.rows_apart, beta, c.at, c.rows_apart);
  if (status != dnnl_success) {
    int none = dnnl_success;
    failure.compare_exchange_strong(none, static_cast<int>(status));
  }
}

// Forward's rows of one head: scores (n × n, Q Kᵀ) become dropout(softmax(alpha · scores)) in
// place; statistics[i] = row i's log-sum-exp. mask: n floats of scratch.
DLBENCH_VECTOR_CLONES void forward_rows(const HeadPass& h, float* scores, float* statistics, float* mask) {
  const std::int64_t n = h.n;
  for (std::int64_t i = 0; i < n; ++i) {
    float* row = &scores[i * n];
    statistics[i] = softmax_row(row, h.keys, h.alpha);
    for (std::int64_t j = h.keys; j < n; ++j) row[j] = 0.0f;
    dropout_row(mask, n, h.key, h.first + static_cast<std::uint64_t>(i * n), h.threshold, h.keep_scale);
#pragma omp simd
    for (std::int64_t j = 0; j < n; ++j) row[j] *= mask[j];
  }
}

// Backward's rows of one head: from the scores again (p, Q Kᵀ) and dP (dContext Vᵀ), p becomes
// the probabilities as dropout kept them (for dV) and dp becomes dS (for dQ and dK). mask: n floats.
DLBENCH_VECTOR_CLONES void backward_rows(const HeadPass& h, const float* statistics, float* p, float* dp, float* mask) {
  const std::int64_t n = h.n;
  for (std::int64_t i = 0; i < n; ++i) {
    float* p_row = &p[i * n];
    float* dp_row = &dp[i * n];
    dropout_row(mask, n, h.key, h.first + static_cast<std::uint64_t>(i * n), h.threshold, h.keep_scale);
    const float softmax_dot = recompute_row(p_row, dp_row, mask, h.keys, h.alpha, statistics[i]);  // Σ_j P·dP, dP masked
    for (std::int64_t j = h.keys; j < n; ++j) p_row[j] = 0.0f;  // padding keys: P = 0, so dS = 0
#pragma omp simd
    for (std::int64_t j = 0; j < n; ++j) {
      dp_row[j] = h.alpha * p_row[j] * (dp_row[j] - softmax_dot);
      p_row[j] *= mask[j];
    }
  }
}

class CpuFusedAttention final : public AttentionOp {
 public:
  CpuFusedAttention(const AttentionConfig& c, const std::uint64_t* step) : c_(c), step_(step) {}

  void forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& context, Tensor& statistics, float dropout,
               std::uint64_t layer_seed, const std::int32_t* real_tokens) override {
    require_attention_tensors(c_, {&q, &k, &v, &context}, statistics);
    with_element_type(c_.dtype, [&]<typename T>(T*) {
      forward_typed(q.as<T>(), k.as<T>(), v.as<T>(), context.as<T>(), statistics.as<float>(), dropout, layer_seed,
                    real_tokens);
    });
  }

  void backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dcontext, const Tensor& statistics,
                float dropout, std::uint64_t layer_seed, const std::int32_t* real_tokens, Tensor& dq, Tensor& dk,
                Tensor& dv) override {
    require_attention_tensors(c_, {&q, &k, &v, &dcontext, &dq, &dk, &dv}, statistics);
    with_element_type(c_.dtype, [&]<typename T>(T*) {
      backward_typed(q.as<T>(), k.as<T>(), v.as<T>(), dcontext.as<T>(), statistics.as<float>(), dropout, layer_seed,
                     real_tokens, dq.as<T>(), dk.as<T>(), dv.as<T>());
    });
  }

 private:
  // One head's rows within a (sequences · tokens, heads · head size) tensor: in place for fp32;
  // for other types an fp32 copy in `copy` (filled by `read` when the op reads the head).
  template <typename T>
  HeadMatrix head(T* rows, std::int64_t s, std::int64_t h, float* copy, bool read) const {
    const std::int64_t width = c_.heads * c_.head_size;
    T* first = rows + s * c_.tokens * width + h * c_.head_size;
    if constexpr (std::is_same_v<std::remove_const_t<T>, float>) {
      return {const_cast<float*>(first), width};
    } else {
      for (std::int64_t t = 0; read && t < c_.tokens; ++t) {
        for (std::int64_t d = 0; d < c_.head_size; ++d) copy[t * c_.head_size + d] = to_float(first[t * width + d]);
      }
      return {copy, c_.head_size};
    }
  }
  // Writes a head computed in an fp32 copy back into the rows (nothing to do for fp32).
  template <typename T>
  void write_back(const HeadMatrix& head, T* rows, std::int64_t s, std::int64_t h) const {
    if constexpr (!std::is_same_v<T, float>) {
      const std::int64_t width = c_.heads * c_.head_size;
      T* first = rows + s * c_.tokens * width + h * c_.head_size;
      for (std::int64_t t = 0; t < c_.tokens; ++t) {
        for (std::int64_t d = 0; d < c_.head_size; ++d) first[t * width + d] = from_float<T>(head.at[t * c_.head_size + d]);
      }
    }
  }
  // What every head's pass of one call shares; `first` is set per head.
  HeadPass head_pass(float dropout, std::uint64_t layer_seed) const {
    return {c_.tokens, c_.tokens, 1.0f / std::sqrt(static_cast<float>(c_.head_size)), 1.0f / (1.0f - dropout),
            dropout_key(layer_seed, *step_), dropout_threshold(dropout), 0};
  }

  static void throw_if_failed(const std::atomic<int>& failure, const char* pass) {
    if (failure.load() != dnnl_success) {
      throw BackendError(std::string("cpu fused attention ") + pass + ": oneDNN's sgemm failed with status " +
                         std::to_string(failure.load()));
    }
  }

  template <typename T>
  void forward_typed(const T* q, const T* k, const T* v, T* context, float* statistics, float dropout,
                     std::uint64_t layer_seed, const std::int32_t* real_tokens) const {
    const std::int64_t n = c_.tokens, d = c_.head_size, matrix = n * d;
    const HeadPass call = head_pass(dropout, layer_seed);
    constexpr bool copies = !std::is_same_v<T, float>;
    std::atomic<int> failure{dnnl_success};
#pragma omp parallel
    {
      // per thread: the scores (n × n), a mask row and, for other types than fp32, Q, K, V and
      // the context as fp32
      std::vector<float> scratch(static_cast<std::size_t>(n * n + n + (copies ? 4 * matrix : 0)));
      float* scores = scratch.data();
      float* mask = scores + n * n;
      float* copy = mask + n;
#pragma omp for schedule(static)
      for (std::int64_t sh = 0; sh < c_.sequences * c_.heads; ++sh) {
        const std::int64_t s = sh / c_.heads, h = sh % c_.heads;
        const HeadMatrix qh = head(q, s, h, copy, true), kh = head(k, s, h, copy + matrix, true),
                         vh = head(v, s, h, copy + 2 * matrix, true), out = head(context, s, h, copy + 3 * matrix, false);
        HeadPass pass = call;
        pass.first = static_cast<std::uint64_t>(sh * n * n);
        pass.keys = real_length(real_tokens, s, n);
        gemm('N', 'T', n, n, d, qh, kh, 0.0f, {scores, n}, failure);  // Q Kᵀ
        forward_rows(pass, scores, statistics + sh * n, mask);
        gemm('N', 'N', n, d, n, {scores, n}, vh, 0.0f, out, failure);  // dropout(P) V
        write_back(out, context, s, h);
      }
    }
    throw_if_failed(failure, "forward");
  }

  template <typename T>
  void backward_typed(const T* q, const T* k, const T* v, const T* dcontext, const float* statistics, float dropout,
                      std::uint64_t layer_seed, const std::int32_t* real_tokens, T* dq, T* dk, T* dv) const {
    const std::int64_t n = c_.tokens, d = c_.head_size, matrix = n * d;
    const HeadPass call = head_pass(dropout, layer_seed);
    constexpr bool copies = !std::is_same_v<T, float>;
    std::atomic<int> failure{dnnl_success};
#pragma omp parallel
    {
      // per thread: P and dP (n × n each), a mask row and, for other types than fp32, the seven
      // heads as fp32
      std::vector<float> scratch(static_cast<std::size_t>(2 * n * n + n + (copies ? 7 * matrix : 0)));
      float* p = scratch.data();
      float* dp = p + n * n;
      float* mask = dp + n * n;
      float* copy = mask + n;
#pragma omp for schedule(static)
      for (std::int64_t sh = 0; sh < c_.sequences * c_.heads; ++sh) {
        const std::int64_t s = sh / c_.heads, h = sh % c_.heads;
        const HeadMatrix qh = head(q, s, h, copy, true), kh = head(k, s, h, copy + matrix, true),
                         vh = head(v, s, h, copy + 2 * matrix, true), doh = head(dcontext, s, h, copy + 3 * matrix, true),
                         dqh = head(dq, s, h, copy + 4 * matrix, false), dkh = head(dk, s, h, copy + 5 * matrix, false),
                         dvh = head(dv, s, h, copy + 6 * matrix, false);
        HeadPass pass = call;
        pass.first = static_cast<std::uint64_t>(sh * n * n);
        pass.keys = real_length(real_tokens, s, n);
        gemm('N', 'T', n, n, d, qh, kh, 0.0f, {p, n}, failure);    // the scores again
        gemm('N', 'T', n, n, d, doh, vh, 0.0f, {dp, n}, failure);  // dP = dContext Vᵀ
        backward_rows(pass, statistics + sh * n, p, dp, mask);      // p: dropout(P), dp: dS
        gemm('T', 'N', n, d, n, {p, n}, doh, 0.0f, dvh, failure);   // dV = dropout(P)ᵀ dContext
        gemm('N', 'N', n, d, n, {dp, n}, kh, 0.0f, dqh, failure);   // dQ = dS K
        gemm('T', 'N', n, d, n, {dp, n}, qh, 0.0f, dkh, failure);   // dK = dSᵀ Q
        write_back(dqh, dq, s, h);
        write_back(dkh, dk, s, h);
        write_back(dvh, dv, s, h);
      }
    }
    throw_if_failed(failure, "backward");
  }

  AttentionConfig c_;
  const std::uint64_t* step_;  // the backend's begin_step, read at each call
};

}  // namespace

std::unique_ptr<AttentionOp> CpuBackend::make_fused_attention(const AttentionConfig& config) {
  if (attention_route_ != AttentionRoute::fused) return nullptr;
  if (emulates(config.dtype)) return emulate_half(make_fused_attention(in_fp32(config)), half_scratch_);
  return std::make_unique<CpuFusedAttention>(config, &step_);
}

}  // namespace dlbench::worker
