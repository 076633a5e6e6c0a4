#include "cuda/attention_kernels.hpp"

#include <mma.h>

#include <cstdint>
#include <initializer_list>
#include <stdexcept>
#include <string>

#include "cuda/cuda_check.hpp"
#include "cuda/kernel_launch.cuh"
#include "cuda/warp_reduce.cuh"
#include "dropout_mask.hpp"
#include "real_length.hpp"

namespace dlbench::worker::kernels {
namespace {

namespace wmma = nvcuda::wmma;
using Accumulator = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

constexpr int kBlockThreads = kAttentionWarps * 32;
constexpr int kScoresPerLane = kAttentionMaxTokens / 32;

// What both kernels are told; the plan's numbers as ints (the plan bounds them).
struct AttentionArgs {
  const void* q;
  const void* k;
  const void* v;
  const void* dcontext;
  void* context;
  void* dq;
  void* dk;
  void* dv;
  float* statistics;             // forward writes it
  const float* saved_statistics;  // backward reads it
  const std::int32_t* real_tokens;  // per sequence, the keys a row attends to; null: all of them
  int heads, tokens, padded_tokens, head_size, half_stride, score_stride;
  unsigned half_matrix_bytes, score_matrix_bytes;
  float scale, keep_scale;
  std::uint32_t threshold;
  std::uint64_t layer_seed;
  const std::uint64_t* step;
};

// The keys sequence `sequence`'s rows attend to: its real tokens, within 1 to tokens.
__device__ int real_keys(const AttentionArgs& a, int sequence) {
  return static_cast<int>(real_length(a.real_tokens, sequence, a.tokens));
}

// One head's (tokens, head_size) matrix from the rows into shared memory (rows of half_stride),
// 16 bytes a thread at a time; the padding rows are zeros.
template <typename T>
__device__ void load_head(const T* rows, T* tile, const AttentionArgs& a, int sequence, int head) {
  const int chunks = a.head_size / 8;
  const std::int64_t width = static_cast<std::int64_t>(a.heads) * a.head_size;
  for (int i = static_cast<int>(threadIdx.x); i < a.padded_tokens * chunks; i += kBlockThreads) {
    const int token = i / chunks, chunk = i % chunks;
    uint4 value = make_uint4(0, 0, 0, 0);
    if (token < a.tokens) {
      value = *reinterpret_cast<const uint4*>(rows + (static_cast<std::int64_t>(sequence) * a.tokens + token) * width +
                                              head * a.head_size + chunk * 8);
    }
    *reinterpret_cast<uint4*>(tile + token * a.half_stride + chunk * 8) = value;
  }
}

// acc = A · B over `steps` 16-wide slices of the inner dimension; each slice moves A's pointer by
// a_step elements and B's by b_step (row-major A: 16; column-major A: 16 · lda; and so on).
template <typename T, typename LayoutA, typename LayoutB>
__device__ void tile_product(Accumulator& acc, const T* a, int lda, int a_step, const T* b, int ldb, int b_step,
                             int steps) {
  wmma::fragment<wmma::matrix_a, 16, 16, 16, T, LayoutA> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, T, LayoutB> fb;
  wmma::fill_fragment(acc, 0.0f);
  for (int s = 0; s < steps; ++s) {
    wmma::load_matrix_sync(fa, a + s * a_step, static_cast<unsigned>(lda));
    wmma::load_matrix_sync(fb, b + s * b_step, static_cast<unsigned>(ldb));
    wmma::mma_sync(acc, fa, fb, acc);
  }
}

// Writes a 16 × 16 result tile (token tile `m`, head-column tile `n`), times `factor`, into the
// rows through the warp's staging tile: two lanes a token, 8 values (16 bytes) each.
template <typename T>
__device__ void write_tile(const Accumulator& acc, float* staging, T* rows, const AttentionArgs& a, int sequence,
                           int head, int m, int n, float factor) {
  wmma::store_matrix_sync(staging, acc, 16, wmma::mem_row_major);
  __syncwarp();
  const int lane = static_cast<int>(threadIdx.x % 32);
  const int r = lane / 2, c0 = (lane % 2) * 8;
  const int token = m * 16 + r;
  if (token < a.tokens) {
    union {
      uint4 pack;
      T values[8];
    } out;
#pragma unroll
    for (int c = 0; c < 8; ++c) out.values[c] = store<T>(staging[r * 16 + c0 + c] * factor);
    const std::int64_t width = static_cast<std::int64_t>(a.heads) * a.head_size;
    *reinterpret_cast<uint4*>(rows + (static_cast<std::int64_t>(sequence) * a.tokens + token) * width +
                              head * a.head_size + n * 16 + c0) = out.pack;
  }
  __syncwarp();
}

// One block an SM is what BERT's 128 tokens leave room for (128 KiB of shared memory); told so,
// ptxas gives the kernel 52 registers a thread, where aiming at more blocks it held 48 and spilled
// on sm_90 (a spill fails the build: cmake/Warnings.cmake).
template <typename T>
__global__ void __launch_bounds__(kBlockThreads, 1) attention_forward_kernel(AttentionArgs a) {
  DLBENCH_DYNAMIC_SHARED(shared);
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  T* q = reinterpret_cast<T*>(shared);
  T* k = reinterpret_cast<T*>(shared + a.half_matrix_bytes);
  T* v = reinterpret_cast<T*>(shared + 2 * a.half_matrix_bytes);
  float* scores = reinterpret_cast<float*>(shared + 3 * a.half_matrix_bytes);
  float* staging = reinterpret_cast<float*>(shared + 3 * a.half_matrix_bytes + a.score_matrix_bytes) + warp * 256;
  const int head_index = static_cast<int>(blockIdx.x);  // sequence · heads + head
  const int sequence = head_index / a.heads, head = head_index % a.heads;
  const int keys = real_keys(a, sequence);
  load_head(static_cast<const T*>(a.q), q, a, sequence, head);
  load_head(static_cast<const T*>(a.k), k, a, sequence, head);
  load_head(static_cast<const T*>(a.v), v, a, sequence, head);
  __syncthreads();

  // Scores Q Kᵀ in fp32 (unscaled).
  const int tiles = a.padded_tokens / 16, head_tiles = a.head_size / 16;
  for (int t = warp; t < tiles * tiles; t += kAttentionWarps) {
    const int m = t / tiles, n = t % tiles;
    Accumulator acc;
    tile_product<T, wmma::row_major, wmma::col_major>(acc, q + m * 16 * a.half_stride, a.half_stride, 16,
                                                      k + n * 16 * a.half_stride, a.half_stride, 16, head_tiles);
    wmma::store_matrix_sync(scores + m * 16 * a.score_stride + n * 16, acc, static_cast<unsigned>(a.score_stride),
                            wmma::mem_row_major);
  }
  __syncthreads();

  // A warp a row: softmax, the row's log-sum-exp, dropout; the dropped probabilities overwrite
  // the row's scores as T (each lane reads its values before any lane writes).
  T* probabilities = reinterpret_cast<T*>(scores);
  const int probability_stride = 2 * a.score_stride;
  const DropoutKey key = dropout_key(a.layer_seed, *a.step);
  for (int row = warp; row < a.padded_tokens; row += kAttentionWarps) {
    const bool real_row = row < a.tokens;
    float x[kScoresPerLane];
    float top = -INFINITY;
#pragma unroll
    for (int c = 0; c < kScoresPerLane; ++c) {
      const int j = lane + 32 * c;
      x[c] = real_row && j < keys ? scores[row * a.score_stride + j] * a.scale : -INFINITY;
      top = fmaxf(top, x[c]);
    }
    top = warp_max(top);
    float sum = 0.0f;
#pragma unroll
    for (int c = 0; c < kScoresPerLane; ++c) {
      x[c] = x[c] == -INFINITY ? 0.0f : __expf(x[c] - top);
      sum += x[c];
    }
    sum = warp_sum(sum);
    if (real_row && lane == 0) a.statistics[static_cast<std::int64_t>(head_index) * a.tokens + row] = top + logf(sum);
    const float inverse = real_row ? 1.0f / sum : 0.0f;
    const std::uint64_t first = (static_cast<std::uint64_t>(head_index) * a.tokens + row) * a.tokens;
    __syncwarp();
#pragma unroll
    for (int c = 0; c < kScoresPerLane; ++c) {
      const int j = lane + 32 * c;
      if (j >= a.padded_tokens) continue;
      const bool kept = j >= a.tokens || !real_row || dropout_keeps(key, first + static_cast<std::uint64_t>(j), a.threshold);
      probabilities[row * probability_stride + j] = store<T>(kept ? x[c] * inverse * a.keep_scale : 0.0f);
    }
  }
  __syncthreads();

  // context = P V.
  for (int t = warp; t < tiles * head_tiles; t += kAttentionWarps) {
    const int m = t / head_tiles, n = t % head_tiles;
    Accumulator acc;
    tile_product<T, wmma::row_major, wmma::row_major>(acc, probabilities + m * 16 * probability_stride,
                                                      probability_stride, 16, v + n * 16, a.half_stride,
                                                      16 * a.half_stride, tiles);
    write_tile(acc, staging, static_cast<T*>(a.context), a, sequence, head, m, n, 1.0f);
  }
}

template <typename T>
__global__ void __launch_bounds__(kBlockThreads) attention_backward_kernel(AttentionArgs a) {
  DLBENCH_DYNAMIC_SHARED(shared);
  const int warp = static_cast<int>(threadIdx.x / 32), lane = static_cast<int>(threadIdx.x % 32);
  T* q = reinterpret_cast<T*>(shared);
  T* k = reinterpret_cast<T*>(shared + a.half_matrix_bytes);
  T* v = reinterpret_cast<T*>(shared + 2 * a.half_matrix_bytes);
  T* dout = reinterpret_cast<T*>(shared + 3 * a.half_matrix_bytes);
  float* scores = reinterpret_cast<float*>(shared + 4 * a.half_matrix_bytes);
  float* dprobabilities = reinterpret_cast<float*>(shared + 4 * a.half_matrix_bytes + a.score_matrix_bytes);
  float* staging =
      reinterpret_cast<float*>(shared + 4 * a.half_matrix_bytes + 2 * a.score_matrix_bytes) + warp * 256;
  const int head_index = static_cast<int>(blockIdx.x);
  const int sequence = head_index / a.heads, head = head_index % a.heads;
  const int keys = real_keys(a, sequence);
  load_head(static_cast<const T*>(a.q), q, a, sequence, head);
  load_head(static_cast<const T*>(a.k), k, a, sequence, head);
  load_head(static_cast<const T*>(a.v), v, a, sequence, head);
  load_head(static_cast<const T*>(a.dcontext), dout, a, sequence, head);
  __syncthreads();

  // Scores Q Kᵀ and dP = dContext Vᵀ (before the mask), both fp32.
  const int tiles = a.padded_tokens / 16, head_tiles = a.head_size / 16;
  for (int t = warp; t < 2 * tiles * tiles; t += kAttentionWarps) {
    const bool second = t >= tiles * tiles;
    const int u = second ? t - tiles * tiles : t;
    const int m = u / tiles, n = u % tiles;
    const T* left = second ? dout : q;
    const T* right = second ? v : k;
    float* out = second ? dprobabilities : scores;
    Accumulator acc;
    tile_product<T, wmma::row_major, wmma::col_major>(acc, left + m * 16 * a.half_stride, a.half_stride, 16,
                                                      right + n * 16 * a.half_stride, a.half_stride, 16, head_tiles);
    wmma::store_matrix_sync(out + m * 16 * a.score_stride + n * 16, acc, static_cast<unsigned>(a.score_stride),
                            wmma::mem_row_major);
  }
  __syncthreads();

  // A warp a row: P again from the log-sum-exp, the mask hashed again, then the dropped
  // probabilities over the scores and dS = P (dP·mask - Σ P dP·mask) over dP, both as T.
  T* dropped = reinterpret_cast<T*>(scores);
  T* dscores = reinterpret_cast<T*>(dprobabilities);
  const int probability_stride = 2 * a.score_stride;
  const DropoutKey key = dropout_key(a.layer_seed, *a.step);
  for (int row = warp; row < a.padded_tokens; row += kAttentionWarps) {
    const bool real_row = row < a.tokens;
    const float log_sum =
        real_row ? a.saved_statistics[static_cast<std::int64_t>(head_index) * a.tokens + row] : 0.0f;
    const std::uint64_t first = (static_cast<std::uint64_t>(head_index) * a.tokens + row) * a.tokens;
    float p[kScoresPerLane], dp[kScoresPerLane], mask[kScoresPerLane];
    float dot = 0.0f;
#pragma unroll
    for (int c = 0; c < kScoresPerLane; ++c) {
      const int j = lane + 32 * c;
      const bool valid = real_row && j < keys;
      p[c] = valid ? __expf(scores[row * a.score_stride + j] * a.scale - log_sum) : 0.0f;
      mask[c] = valid && dropout_keeps(key, first + static_cast<std::uint64_t>(j), a.threshold) ? a.keep_scale : 0.0f;
      dp[c] = valid ? dprobabilities[row * a.score_stride + j] * mask[c] : 0.0f;
      dot += p[c] * dp[c];
    }
    dot = warp_sum(dot);
    __syncwarp();
#pragma unroll
    for (int c = 0; c < kScoresPerLane; ++c) {
      const int j = lane + 32 * c;
      if (j >= a.padded_tokens) continue;
      dropped[row * probability_stride + j] = store<T>(p[c] * mask[c]);
      dscores[row * probability_stride + j] = store<T>(p[c] * (dp[c] - dot));
    }
  }
  __syncthreads();

  // dV = P_droppedᵀ dContext, dQ = dS K · scale, dK = dSᵀ Q · scale.
  const int per_output = tiles * head_tiles;
  for (int t = warp; t < 3 * per_output; t += kAttentionWarps) {
    const int which = t / per_output, u = t % per_output;
    const int m = u / head_tiles, n = u % head_tiles;
    Accumulator acc;
    if (which == 0) {
      tile_product<T, wmma::col_major, wmma::row_major>(acc, dropped + m * 16, probability_stride,
                                                        16 * probability_stride, dout + n * 16, a.half_stride,
                                                        16 * a.half_stride, tiles);
      write_tile(acc, staging, static_cast<T*>(a.dv), a, sequence, head, m, n, 1.0f);
    } else if (which == 1) {
      tile_product<T, wmma::row_major, wmma::row_major>(acc, dscores + m * 16 * probability_stride, probability_stride,
                                                        16, k + n * 16, a.half_stride, 16 * a.half_stride, tiles);
      write_tile(acc, staging, static_cast<T*>(a.dq), a, sequence, head, m, n, a.scale);
    } else {
      tile_product<T, wmma::col_major, wmma::row_major>(acc, dscores + m * 16, probability_stride,
                                                        16 * probability_stride, q + n * 16, a.half_stride,
                                                        16 * a.half_stride, tiles);
      write_tile(acc, staging, static_cast<T*>(a.dk), a, sequence, head, m, n, a.scale);
    }
  }
}

// f(Type<T>{}) for the 2-byte types the kernels tile.
template <typename F>
void with_half_type(DType dtype, F&& f) {
  switch (dtype) {
    case DType::fp16: f(Type<__half>{}); return;
    case DType::bf16: f(Type<__nv_bfloat16>{}); return;
    default: break;
  }
  throw std::invalid_argument("fused attention runs fp16 and bf16, not " + std::string(to_string(dtype)));
}

AttentionArgs arguments(const FusedAttentionCall& call) {
  const FusedAttentionPlan& p = *call.plan;
  AttentionArgs a{};
  a.heads = call.heads;
  a.tokens = p.tokens;
  a.padded_tokens = p.padded_tokens;
  a.head_size = p.head_size;
  a.half_stride = p.half_stride;
  a.score_stride = p.score_stride;
  a.half_matrix_bytes = static_cast<unsigned>(p.half_matrix_bytes);
  a.score_matrix_bytes = static_cast<unsigned>(p.score_matrix_bytes);
  a.scale = 1.0f / sqrtf(static_cast<float>(p.head_size));
  a.keep_scale = 1.0f / (1.0f - call.dropout);
  a.threshold = dropout_threshold(call.dropout);
  a.layer_seed = call.layer_seed;
  a.step = call.step;
  a.real_tokens = call.real_tokens;
  return a;
}

// Every pointer the kernels move 16 bytes at a time through: the rows' base (their row and head
// offsets are multiples of 16 bytes, since head_size is a multiple of 16).
void require_16_byte_aligned(std::initializer_list<const void*> pointers) {
  for (const void* p : pointers) {
    if (reinterpret_cast<std::uintptr_t>(p) % 16 != 0) {
      throw std::invalid_argument("fused attention: a tensor's address is not a multiple of 16 bytes");
    }
  }
}

}  // namespace

// The limit is the device's, not one plan's: ops of other shapes share the kernels, and a limit
// lowered for a smaller plan would refuse a larger one's launch.
void prepare_fused_attention(DType dtype, std::size_t shared_bytes_per_block) {
  with_half_type(dtype, [&](auto t) {
    using T = typename decltype(t)::type;
    const int limit = static_cast<int>(shared_bytes_per_block);
    DLBENCH_CUDA_CHECK(
        cudaFuncSetAttribute(attention_forward_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, limit));
    DLBENCH_CUDA_CHECK(
        cudaFuncSetAttribute(attention_backward_kernel<T>, cudaFuncAttributeMaxDynamicSharedMemorySize, limit));
  });
}

void fused_attention_forward(const FusedAttentionCall& call, const void* q, const void* k, const void* v,
                             void* context, float* statistics, cudaStream_t stream) {
  if (call.sequences * call.heads <= 0) return;
  require_16_byte_aligned({q, k, v, context});
  AttentionArgs a = arguments(call);
  a.q = q;
  a.k = k;
  a.v = v;
  a.context = context;
  a.statistics = statistics;
  with_half_type(call.dtype, [&](auto t) {
    using T = typename decltype(t)::type;
    DLBENCH_LAUNCH_GRID_SHARED((attention_forward_kernel<T>), static_cast<unsigned>(call.sequences * call.heads),
                               kBlockThreads, call.plan->forward_bytes, stream, a);
  });
}

void fused_attention_backward(const FusedAttentionCall& call, const void* q, const void* k, const void* v,
                              const void* dcontext, const float* statistics, void* dq, void* dk, void* dv,
                              cudaStream_t stream) {
  if (call.sequences * call.heads <= 0) return;
  require_16_byte_aligned({q, k, v, dcontext, dq, dk, dv});
  AttentionArgs a = arguments(call);
  a.q = q;
  a.k = k;
  a.v = v;
  a.dcontext = dcontext;
  a.dq = dq;
  a.dk = dk;
  a.dv = dv;
  a.saved_statistics = statistics;
  with_half_type(call.dtype, [&](auto t) {
    using T = typename decltype(t)::type;
    DLBENCH_LAUNCH_GRID_SHARED((attention_backward_kernel<T>), static_cast<unsigned>(call.sequences * call.heads),
                               kBlockThreads, call.plan->backward_bytes, stream, a);
  });
}

}  // namespace dlbench::worker::kernels
