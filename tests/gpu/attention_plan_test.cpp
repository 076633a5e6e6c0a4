// The CUDA fused attention kernels' shared-memory plan (worker/cuda/attention_plan.hpp): which
// shapes they take on which GPU, and that every tile they address is where tensor-core loads and
// stores can reach it. No GPU needed.
#include <cstddef>
#include <stdexcept>
#include <string>
#include <variant>

#include <gtest/gtest.h>

#include "cuda/attention_plan.hpp"

namespace dlbench::worker {
namespace {

constexpr std::size_t kHopperBytes = 232448;  // 227 KiB a block (H100, H200)
constexpr std::size_t kAmpereBytes = 166912;  // 163 KiB (A100)

FusedAttentionPlan plan_or_fail(const AttentionShape& shape, std::size_t bytes) {
  const auto plan = fused_attention_plan(shape, bytes);
  if (const auto* why = std::get_if<std::string>(&plan)) throw std::runtime_error(*why);
  return std::get<FusedAttentionPlan>(plan);
}

std::string refusal(const AttentionShape& shape, std::size_t bytes) {
  const auto plan = fused_attention_plan(shape, bytes);
  const auto* why = std::get_if<std::string>(&plan);
  return why == nullptr ? "(taken)" : *why;
}

TEST(FusedAttentionPlan, BertBaseFitsAHopperBlockAndAnAmpereOneComposes) {
  const AttentionShape bert{64, 128, 12, 64, DType::fp16};
  const FusedAttentionPlan p = plan_or_fail(bert, kHopperBytes);
  EXPECT_EQ(p.padded_tokens, 128);
  EXPECT_EQ(p.half_matrix_bytes, 128u * 72 * 2);
  EXPECT_EQ(p.score_matrix_bytes, 128u * 132 * 4);
  EXPECT_EQ(p.forward_bytes, 3 * p.half_matrix_bytes + p.score_matrix_bytes + 8192);
  EXPECT_EQ(p.backward_bytes, 4 * p.half_matrix_bytes + 2 * p.score_matrix_bytes + 8192);
  EXPECT_LE(p.backward_bytes, kHopperBytes);
  EXPECT_EQ(refusal(bert, kAmpereBytes),
            "fused attention's backward needs 217088 bytes of shared memory a block for 128 tokens of 64; this GPU "
            "offers 166912");
  // Shorter sequences fit an A100 too.
  EXPECT_NO_THROW(plan_or_fail({64, 64, 12, 64, DType::bf16}, kAmpereBytes));
}

TEST(FusedAttentionPlan, RefusesWhatTheKernelsCannotTakeSayingWhy) {
  EXPECT_EQ(refusal({2, 16, 2, 64, DType::fp32}, kHopperBytes),
            "fused attention runs fp16 and bf16 (tensor-core tiles), not fp32");
  EXPECT_EQ(refusal({2, 16, 2, 40, DType::fp16}, kHopperBytes),
            "fused attention needs a head size that is a multiple of 16, not 40");
  EXPECT_EQ(refusal({2, 129, 2, 64, DType::fp16}, kHopperBytes),
            "fused attention takes 1 to 128 tokens a sequence, not 129");
  EXPECT_EQ(refusal({2, 0, 2, 64, DType::fp16}, kHopperBytes),
            "fused attention takes 1 to 128 tokens a sequence, not 0");
  EXPECT_EQ(refusal({2, 16, 0, 64, DType::fp16}, kHopperBytes),
            "fused attention needs 1 to 2^31 - 1 sequences × heads, not 2 × 0");
  EXPECT_EQ(refusal({2, 128, 2, 256, DType::fp16}, kHopperBytes).rfind("fused attention's backward needs ", 0), 0u);
}

// What the tensor-core loads and stores ask of every tile the kernels address: a first element on
// 32 bytes, and a row stride that is a multiple of 8 two-byte or 4 four-byte elements; and the
// two-byte probabilities a row overwrites stay inside that row's fp32 scores.
TEST(FusedAttentionPlan, EveryTileStartsWhereTensorCoreLoadsCanRead) {
  for (const std::int64_t tokens : {1, 13, 16, 40, 100, 128}) {
    for (const std::int64_t head_size : {16, 32, 64, 128}) {
      const auto plan = fused_attention_plan({4, tokens, 2, head_size, DType::bf16}, kHopperBytes);
      if (std::holds_alternative<std::string>(plan)) {
        EXPECT_EQ(head_size, 128) << tokens << " tokens of " << head_size << ": " << std::get<std::string>(plan);
        continue;
      }
      const FusedAttentionPlan p = std::get<FusedAttentionPlan>(plan);
      EXPECT_EQ(p.padded_tokens % 16, 0);
      EXPECT_GE(p.padded_tokens, tokens);
      EXPECT_LT(p.padded_tokens - tokens, 16);
      EXPECT_EQ(p.half_stride % 8, 0);
      EXPECT_EQ(p.score_stride % 4, 0);
      EXPECT_EQ((2 * p.score_stride) % 8, 0);
      for (std::size_t offset : {p.matrix_offset(1), p.matrix_offset(2), p.matrix_offset(3), p.forward_scores_offset(),
                                 p.forward_staging_offset(), p.backward_scores_offset(),
                                 p.backward_dprobabilities_offset(), p.backward_staging_offset()}) {
        EXPECT_EQ(offset % 128, 0u) << tokens << " tokens of " << head_size;
      }
      // A 16-row tile's first row, in every matrix, at 32-byte multiples.
      EXPECT_EQ((16u * static_cast<std::size_t>(p.half_stride) * 2) % 32, 0u);
      EXPECT_EQ((16u * static_cast<std::size_t>(p.score_stride) * 4) % 32, 0u);
      EXPECT_GE(p.half_matrix_bytes, static_cast<std::size_t>(p.padded_tokens * p.half_stride * 2));
      EXPECT_GE(p.score_matrix_bytes, static_cast<std::size_t>(p.padded_tokens * p.score_stride * 4));
      EXPECT_LE(static_cast<std::size_t>(p.padded_tokens) * 2, static_cast<std::size_t>(p.score_stride) * 4)
          << "a row's two-byte probabilities overrun its fp32 scores";
      EXPECT_EQ(p.backward_staging_offset() + p.staging_bytes, p.backward_bytes);
    }
  }
}

}  // namespace
}  // namespace dlbench::worker
