// The CPU backend's fused attention (DLBENCH_CPU_ATTENTION=fused): the algorithm of the CUDA
// kernel, one sequence and head at a time in fp32, so that the layer's fused route, the
// recomputation from log-sum-exp and the dropout mask's indices are tested on every machine.
// Backward recomputes each probability row from the scores and the row's log-sum-exp, and takes
// softmax's Σ P·dP from the recomputed row, not from the context.
#include <omp.h>

#include <algorithm>
#include <initializer_list>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>
#include <vector>

#include "cpu/cpu_backend.hpp"
#include "cpu/onednn_memory.hpp"
#include "dropout_mask.hpp"

namespace dlbench::worker {
namespace {

void add_scaled(float* y, float a, const float* x, std::int64_t n) {
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

// out[j] = Σ_c x[c] · m_t[c · n + j] for j < n: a row times a matrix kept transposed (d × n), so
// that the inner loop runs along j over contiguous values instead of one dot product per j.
void row_times(const float* x, const float* m_t, std::int64_t n, std::int64_t d, float* out) {
  std::fill(out, out + n, 0.0f);
  for (std::int64_t c = 0; c < d; ++c) add_scaled(out, x[c], m_t + c * n, n);
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
    for (const Tensor* t : std::initializer_list<const Tensor*>{&q, &k, &v, &context}) require_rows(*t, "q, k, v and context");
    require_statistics(statistics);
    with_element_type(c_.dtype, [&]<typename T>(T*) {
      forward_typed(q.as<T>(), k.as<T>(), v.as<T>(), context.as<T>(), statistics.as<float>(), dropout, layer_seed);
    });
  }

  void backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dcontext, const Tensor& statistics,
                float dropout, std::uint64_t layer_seed, Tensor& dq, Tensor& dk, Tensor& dv) override {
    for (const Tensor* t : std::initializer_list<const Tensor*>{&q, &k, &v, &dcontext, &dq, &dk, &dv}) require_rows(*t, "q, k, v and their gradients");
    require_statistics(statistics);
    with_element_type(c_.dtype, [&]<typename T>(T*) {
      backward_typed(q.as<T>(), k.as<T>(), v.as<T>(), dcontext.as<T>(), statistics.as<float>(), dropout, layer_seed,
                     dq.as<T>(), dk.as<T>(), dv.as<T>());
    });
  }

 private:
  void require_rows(const Tensor& t, const char* what) const {
    const std::int64_t want = c_.sequences * c_.tokens * c_.heads * c_.head_size;
    if (t.numel() != want || t.dtype != c_.dtype) {
      throw std::invalid_argument(std::string("fused attention: ") + what + " must be " + std::to_string(want) + " " +
                                  std::string(to_string(c_.dtype)) + " values; one is " + std::to_string(t.numel()) +
                                  " " + std::string(to_string(t.dtype)));
    }
  }
  void require_statistics(const Tensor& t) const {
    const std::int64_t want = c_.sequences * c_.heads * c_.tokens;
    if (t.numel() != want || t.dtype != DType::fp32) {
      throw std::invalid_argument("fused attention: statistics must be " + std::to_string(want) + " fp32 values");
    }
  }

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
  float scale() const { return 1.0f / std::sqrt(static_cast<float>(c_.head_size)); }

  template <typename T>
  void forward_typed(const T* q, const T* k, const T* v, T* context, float* statistics, float dropout,
                     std::uint64_t layer_seed) const {
    const std::int64_t n = c_.tokens, d = c_.head_size, matrix = n * d;
    const DropoutKey key = dropout_key(layer_seed, *step_);
    const std::uint32_t threshold = dropout_threshold(dropout);
    const float keep_scale = 1.0f / (1.0f - dropout), alpha = scale();
#pragma omp parallel
    {
      std::vector<float> scratch(static_cast<std::size_t>(5 * matrix + n));
      float* qh = scratch.data();
      float* kh = qh + matrix;
      float* vh = kh + matrix;
      float* out = vh + matrix;
      float* k_t = out + matrix;
      float* row = k_t + matrix;
#pragma omp for schedule(static)
      for (std::int64_t sh = 0; sh < c_.sequences * c_.heads; ++sh) {
        const std::int64_t s = sh / c_.heads, h = sh % c_.heads;
        gather_head(q, s, h, qh);
        gather_head(k, s, h, kh);
        gather_head(v, s, h, vh);
        transpose(kh, n, d, k_t);
        std::fill(out, out + matrix, 0.0f);
        for (std::int64_t i = 0; i < n; ++i) {
          row_times(&qh[i * d], k_t, n, d, row);
          float top = -std::numeric_limits<float>::infinity();
          for (std::int64_t j = 0; j < n; ++j) {
            row[j] *= alpha;
            top = std::max(top, row[j]);
          }
          float sum = 0.0f;
          for (std::int64_t j = 0; j < n; ++j) sum += row[j] = std::exp(row[j] - top);
          statistics[sh * n + i] = top + std::log(sum);
          const std::uint64_t first = static_cast<std::uint64_t>((sh * n + i) * n);
          for (std::int64_t j = 0; j < n; ++j) {
            if (!dropout_keeps(key, first + static_cast<std::uint64_t>(j), threshold)) continue;
            add_scaled(&out[i * d], row[j] / sum * keep_scale, &vh[j * d], d);
          }
        }
        scatter_head(out, s, h, context);
      }
    }
  }

  template <typename T>
  void backward_typed(const T* q, const T* k, const T* v, const T* dcontext, const float* statistics, float dropout,
                      std::uint64_t layer_seed, T* dq, T* dk, T* dv) const {
    const std::int64_t n = c_.tokens, d = c_.head_size, matrix = n * d;
    const DropoutKey key = dropout_key(layer_seed, *step_);
    const std::uint32_t threshold = dropout_threshold(dropout);
    const float keep_scale = 1.0f / (1.0f - dropout), alpha = scale();
#pragma omp parallel
    {
      std::vector<float> scratch(static_cast<std::size_t>(9 * matrix + 2 * n));
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
#pragma omp for schedule(static)
      for (std::int64_t sh = 0; sh < c_.sequences * c_.heads; ++sh) {
        const std::int64_t s = sh / c_.heads, h = sh % c_.heads;
        gather_head(q, s, h, qh);
        gather_head(k, s, h, kh);
        gather_head(v, s, h, vh);
        gather_head(dcontext, s, h, doh);
        std::fill(dqh, dqh + 3 * matrix, 0.0f);  // dQ, dK and dV
        transpose(kh, n, d, k_t);
        transpose(vh, n, d, v_t);
        for (std::int64_t i = 0; i < n; ++i) {
          const float log_sum = statistics[sh * n + i];
          const std::uint64_t first = static_cast<std::uint64_t>((sh * n + i) * n);
          float softmax_dot = 0.0f;  // Σ_j P·dP over the row, dP after the mask
          row_times(&qh[i * d], k_t, n, d, p);
          row_times(&doh[i * d], v_t, n, d, dp);
          for (std::int64_t j = 0; j < n; ++j) {
            p[j] = std::exp(alpha * p[j] - log_sum);
            const float mask = dropout_keeps(key, first + static_cast<std::uint64_t>(j), threshold) ? keep_scale : 0.0f;
            dp[j] *= mask;
            if (mask != 0.0f) add_scaled(&dvh[j * d], p[j] * mask, &doh[i * d], d);
            softmax_dot += p[j] * dp[j];
          }
          for (std::int64_t j = 0; j < n; ++j) {
            const float ds = alpha * p[j] * (dp[j] - softmax_dot);
            add_scaled(&dqh[i * d], ds, &kh[j * d], d);
            add_scaled(&dkh[j * d], ds, &qh[i * d], d);
          }
        }
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
