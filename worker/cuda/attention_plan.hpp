// The shared-memory plan of the CUDA fused attention kernels (attention_kernels.cu), apart from
// them so that which shapes the kernels take, and where each matrix lies, is tested without a GPU.
//
// One block of kAttentionWarps warps takes one sequence's head whole: its tokens padded to a
// multiple of 16 (tensor-core tiles of 16 × 16 × 16), at most 128 so that a score row is 4 values
// a lane. Forward holds Q, K and V (2-byte values, rows of head_size + 8 so that consecutive rows
// start on other banks) and the fp32 scores; the probabilities overwrite the scores row by row as
// 2-byte values. Backward holds Q, K, V and dContext, the scores and dP in fp32, overwritten by the
// dropped probabilities and dS. Every block also has a 16 × 16 fp32 tile a warp, through which
// its results are scaled, rounded and written. An H100 or H200 (227 KiB a block) takes BERT's
// 128 tokens of 64; an A100 (163 KiB) takes its forward but not its backward, and composes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>

#include "dtype.hpp"

namespace dlbench::worker {

inline constexpr int kAttentionWarps = 8;
inline constexpr int kAttentionMaxTokens = 128;

struct FusedAttentionPlan {
  int tokens = 0, padded_tokens = 0, head_size = 0;
  int half_stride = 0;   // elements between rows of Q, K, V and dContext
  int score_stride = 0;  // fp32 elements between score rows; 2 · score_stride 2-byte ones once overwritten
  std::size_t half_matrix_bytes = 0, score_matrix_bytes = 0, staging_bytes = 0;
  std::size_t forward_bytes = 0, backward_bytes = 0;
  // Byte offsets: Q, K, V, dContext (backward), then the scores, dP (backward) and the tiles.
  std::size_t matrix_offset(int index) const { return static_cast<std::size_t>(index) * half_matrix_bytes; }
  std::size_t forward_scores_offset() const { return 3 * half_matrix_bytes; }
  std::size_t forward_staging_offset() const { return forward_scores_offset() + score_matrix_bytes; }
  std::size_t backward_scores_offset() const { return 4 * half_matrix_bytes; }
  std::size_t backward_dprobabilities_offset() const { return backward_scores_offset() + score_matrix_bytes; }
  std::size_t backward_staging_offset() const { return backward_dprobabilities_offset() + score_matrix_bytes; }
};

inline std::size_t round_up_bytes(std::size_t bytes, std::size_t to) { return (bytes + to - 1) / to * to; }

// What a plan is for: Backend::AttentionConfig's numbers (this header is compiled by nvcc too).
struct AttentionShape {
  std::int64_t sequences = 0, tokens = 0, heads = 0, head_size = 0;
  DType dtype = DType::fp32;
};

// The plan for `c` in at most `shared_bytes_per_block` (the device's opt-in limit), or why the
// fused kernels cannot take it (the layer then composes attention).
inline std::variant<FusedAttentionPlan, std::string> fused_attention_plan(const AttentionShape& c,
                                                                          std::size_t shared_bytes_per_block) {
  if (c.dtype != DType::fp16 && c.dtype != DType::bf16) {
    return "fused attention runs fp16 and bf16 (tensor-core tiles), not " + std::string(to_string(c.dtype));
  }
  if (c.head_size <= 0 || c.head_size % 16 != 0) {
    return "fused attention needs a head size that is a multiple of 16, not " + std::to_string(c.head_size);
  }
  if (c.tokens <= 0 || c.tokens > kAttentionMaxTokens) {
    return "fused attention takes 1 to " + std::to_string(kAttentionMaxTokens) + " tokens a sequence, not " +
           std::to_string(c.tokens);
  }
  if (c.sequences <= 0 || c.heads <= 0 || c.sequences * c.heads > 0x7fffffff) {
    return "fused attention needs 1 to 2^31 - 1 sequences × heads, not " + std::to_string(c.sequences) + " × " +
           std::to_string(c.heads);
  }
  FusedAttentionPlan p;
  p.tokens = static_cast<int>(c.tokens);
  p.padded_tokens = (p.tokens + 15) / 16 * 16;
  p.head_size = static_cast<int>(c.head_size);
  p.half_stride = p.head_size + 8;
  p.score_stride = p.padded_tokens + 4;
  // 128-byte boundaries between matrices: every tile's first row then starts on 32 bytes, which
  // the tensor-core loads ask for.
  p.half_matrix_bytes = round_up_bytes(static_cast<std::size_t>(p.padded_tokens) * static_cast<std::size_t>(p.half_stride) * 2, 128);
  p.score_matrix_bytes = round_up_bytes(static_cast<std::size_t>(p.padded_tokens) * static_cast<std::size_t>(p.score_stride) * 4, 128);
  p.staging_bytes = static_cast<std::size_t>(kAttentionWarps) * 16 * 16 * 4;
  p.forward_bytes = p.forward_staging_offset() + p.staging_bytes;
  p.backward_bytes = p.backward_staging_offset() + p.staging_bytes;
  if (p.backward_bytes > shared_bytes_per_block) {
    return "fused attention's backward needs " + std::to_string(p.backward_bytes) + " bytes of shared memory a block for " +
           std::to_string(c.tokens) + " tokens of " + std::to_string(c.head_size) + "; this GPU offers " +
           std::to_string(shared_bytes_per_block);
  }
  return p;
}

}  // namespace dlbench::worker
