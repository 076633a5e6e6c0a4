// Fused attention (Backend::make_fused_attention): the CPU op (DLBENCH_CPU_ATTENTION=fused), which
// runs the CUDA kernels' algorithm, against the composed ops it replaces, alone and inside BERT;
// and the CUDA kernels' shared-memory plan, which decides what they take without a GPU.
#include <cmath>
#include <cstdlib>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

#include <gtest/gtest.h>

#include "cpu/cpu_backend.hpp"
#include "cuda/attention_plan.hpp"
#include "models/bert.hpp"
#include "trainer.hpp"

namespace dlbench::worker {
namespace {

// DLBENCH_CPU_ATTENTION for the backends made while it lives.
class AttentionSwitch {
 public:
  explicit AttentionSwitch(const char* value) { setenv("DLBENCH_CPU_ATTENTION", value, 1); }
  ~AttentionSwitch() { unsetenv("DLBENCH_CPU_ATTENTION"); }
  AttentionSwitch(const AttentionSwitch&) = delete;
  AttentionSwitch& operator=(const AttentionSwitch&) = delete;
};

std::unique_ptr<CpuBackend> backend_with(const char* route) {
  const AttentionSwitch with(route);
  return std::make_unique<CpuBackend>(2);
}

struct HostTensor {
  std::vector<float> values;
  Tensor tensor;
  HostTensor(std::int64_t n, std::uint64_t seed) : values(static_cast<std::size_t>(n)) {
    std::mt19937_64 rng(seed);
    std::uniform_real_distribution<float> u(-1.0f, 1.0f);
    for (float& v : values) v = 2.0f * u(rng);  // scores of a few units: a softmax far from uniform
    tensor.data = values.data();
    tensor.shape = Shape(n);
  }
};

struct AttentionResult {
  std::vector<float> context, dq, dk, dv;
};

constexpr std::int64_t kSequences = 2, kTokens = 13, kHeads = 3, kHeadSize = 8;
constexpr std::int64_t kRows = kSequences * kTokens, kWidth = kHeads * kHeadSize;

// Attention as TransformerEncoderLayer composes it: swaps, batched matmuls, softmax and dropout.
AttentionResult composed(CpuBackend& b, HostTensor& q, HostTensor& k, HostTensor& v, HostTensor& dcontext, float p,
                         std::uint64_t seed) {
  const std::int64_t batch = kSequences * kHeads, n = kRows * kWidth, scores = batch * kTokens * kTokens;
  const float scale = 1.0f / std::sqrt(static_cast<float>(kHeadSize));
  auto to_heads = b.make_swap_axes(Shape(kSequences, kTokens, kHeads, kHeadSize), DType::fp32);
  auto to_tokens = b.make_swap_axes(Shape(kSequences, kHeads, kTokens, kHeadSize), DType::fp32);
  auto matmul = [&](std::int64_t m, std::int64_t cols, std::int64_t inner, bool ta, bool tb, float alpha) {
    return b.make_batched_matmul({batch, m, cols, inner, ta, tb, alpha, DType::fp32});
  };
  auto softmax = b.make_softmax(batch * kTokens, kTokens, DType::fp32);
  std::vector<HostTensor> t;
  t.reserve(16);
  const auto buffer = [&](std::int64_t count) -> Tensor& { return t.emplace_back(count, 0).tensor; };
  Tensor &qh = buffer(n), &kh = buffer(n), &vh = buffer(n), &s = buffer(scores), &pr = buffer(scores),
         &dropped = buffer(scores), &ch = buffer(n), &context = buffer(n), &dch = buffer(n), &dp = buffer(scores),
         &ds = buffer(scores), &dqh = buffer(n), &dkh = buffer(n), &dvh = buffer(n);
  to_heads->run(q.tensor, qh);
  to_heads->run(k.tensor, kh);
  to_heads->run(v.tensor, vh);
  matmul(kTokens, kTokens, kHeadSize, false, true, scale)->run(qh, kh, s);
  softmax->forward(s, pr);
  b.dropout_forward(pr, dropped, p, seed);
  matmul(kTokens, kHeadSize, kTokens, false, false, 1.0f)->run(dropped, vh, ch);
  to_tokens->run(ch, context);
  to_heads->run(dcontext.tensor, dch);
  matmul(kTokens, kTokens, kHeadSize, false, true, 1.0f)->run(dch, vh, dp);
  matmul(kTokens, kHeadSize, kTokens, true, false, 1.0f)->run(dropped, dch, dvh);
  b.dropout_backward(dp, dp, p, seed);
  softmax->backward(pr, dp, ds);
  matmul(kTokens, kHeadSize, kTokens, false, false, scale)->run(ds, kh, dqh);
  matmul(kTokens, kHeadSize, kTokens, true, false, scale)->run(ds, qh, dkh);
  AttentionResult r;
  for (auto [from, to] : {std::pair{&context, &r.context}, {&dqh, &r.dq}, {&dkh, &r.dk}, {&dvh, &r.dv}}) {
    HostTensor out(n, 0);
    if (from != &context) to_tokens->run(*from, out.tensor);
    const float* source = from == &context ? from->as<float>() : out.values.data();
    to->assign(source, source + n);
  }
  return r;
}

AttentionResult fused(CpuBackend& b, HostTensor& q, HostTensor& k, HostTensor& v, HostTensor& dcontext, float p,
                      std::uint64_t seed) {
  auto op = b.make_fused_attention({kSequences, kTokens, kHeads, kHeadSize, DType::fp32});
  if (!op) throw std::logic_error("DLBENCH_CPU_ATTENTION=fused made no fused op");
  HostTensor context(kRows * kWidth, 0), statistics(kSequences * kHeads * kTokens, 0), dq(kRows * kWidth, 0),
      dk(kRows * kWidth, 0), dv(kRows * kWidth, 0);
  op->forward(q.tensor, k.tensor, v.tensor, context.tensor, statistics.tensor, p, seed);
  op->backward(q.tensor, k.tensor, v.tensor, dcontext.tensor, statistics.tensor, p, seed, dq.tensor, dk.tensor,
               dv.tensor);
  return {context.values, dq.values, dk.values, dv.values};
}

void expect_close(const std::vector<float>& got, const std::vector<float>& want, const char* what, float p) {
  ASSERT_EQ(got.size(), want.size());
  double largest = 0.0, worst = 0.0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    largest = std::max(largest, std::fabs(static_cast<double>(want[i])));
    worst = std::max(worst, std::fabs(static_cast<double>(got[i]) - static_cast<double>(want[i])));
  }
  EXPECT_GT(largest, 1e-3) << what << ": a result of zeros proves nothing";
  EXPECT_LE(worst, 2e-5 * std::max(1.0, largest)) << what << " with dropout " << p << ": largest value " << largest;
}

TEST(FusedAttention, CpuOpMatchesTheComposedOpsWithAndWithoutDropout) {
  auto with_fused = backend_with("fused");
  auto with_composed = backend_with("composed");
  EXPECT_EQ(with_composed->make_fused_attention({kSequences, kTokens, kHeads, kHeadSize, DType::fp32}), nullptr);
  HostTensor q(kRows * kWidth, 1), k(kRows * kWidth, 2), v(kRows * kWidth, 3), dcontext(kRows * kWidth, 4);
  for (const float p : {0.0f, 0.25f}) {
    for (CpuBackend* b : {with_fused.get(), with_composed.get()}) b->begin_step(7);
    const AttentionResult want = composed(*with_composed, q, k, v, dcontext, p, 99);
    const AttentionResult got = fused(*with_fused, q, k, v, dcontext, p, 99);
    expect_close(got.context, want.context, "context", p);
    expect_close(got.dq, want.dq, "dQ", p);
    expect_close(got.dk, want.dk, "dK", p);
    expect_close(got.dv, want.dv, "dV", p);
  }
  // Another step hashes another mask: the fused op reads the step at each call.
  with_fused->begin_step(8);
  const AttentionResult next = fused(*with_fused, q, k, v, dcontext, 0.25f, 99);
  with_composed->begin_step(7);
  const AttentionResult before = composed(*with_composed, q, k, v, dcontext, 0.25f, 99);
  EXPECT_NE(next.context, before.context);
}

TEST(FusedAttention, TheSwitchRefusesAnythingElseNamingWhatItAllows) {
  try {
    backend_with("flash");
    FAIL() << "DLBENCH_CPU_ATTENTION=flash was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_STREQ(e.what(), "DLBENCH_CPU_ATTENTION: \"flash\" is not one of composed, fused");
  }
}

constexpr BertConfig kSmallBert{.vocabulary = 40, .hidden = 24, .layers = 2, .heads = 3, .intermediate = 32,
                                .max_positions = 16};

std::unique_ptr<Trainer> bert_trainer(CpuBackend& backend, MemoryReuse reuse, DType dtype = DType::fp32) {
  auto trainer = std::make_unique<Trainer>(backend, bert_for_pretraining(kSmallBert), PretrainingBatchLayout{3, 11},
                                           kSmallBert.vocabulary, SgdConfig{}, 5, 0, reuse, dtype);
  trainer->use_adamw({5e-3f, 0.9f, 0.999f, 1e-6f, 0.01f, 1.0f});
  return trainer;
}

// Both routes give BERT the same gradients, dropout on: the fused op's masks are the composed
// path's, and its recomputed probabilities its kept ones.
TEST(FusedAttention, BertHasTheSameGradientsFusedOrComposed) {
  auto with_fused = backend_with("fused");
  auto with_composed = backend_with("composed");
  auto fused_bert = bert_trainer(*with_fused, MemoryReuse::lifetime);
  auto composed_bert = bert_trainer(*with_composed, MemoryReuse::lifetime);
  EXPECT_NEAR(fused_bert->compute_gradients(), composed_bert->compute_gradients(), 1e-5f);
  const auto& a = fused_bert->parameters().parameters();
  const auto& b = composed_bert->parameters().parameters();
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    const float* ga = a[i]->grad.as<float>();
    const float* gb = b[i]->grad.as<float>();
    double largest = 0.0, worst = 0.0;
    for (std::int64_t j = 0; j < a[i]->grad.numel(); ++j) {
      largest = std::max(largest, std::fabs(static_cast<double>(gb[j])));
      worst = std::max(worst, std::fabs(static_cast<double>(ga[j]) - static_cast<double>(gb[j])));
    }
    EXPECT_LE(worst, 1e-5 * std::max(1.0, largest)) << a[i]->name;
  }
  float fused_loss = 0.0f, composed_loss = 0.0f;
  for (int step = 0; step < 4; ++step) {
    fused_loss = fused_bert->step_and_loss();
    composed_loss = composed_bert->step_and_loss();
  }
  EXPECT_NEAR(fused_loss, composed_loss, 1e-4f * composed_loss);
}

// The buffers the fused route keeps (the projections' rows, the statistics) are declared for as
// long as it reads them: with every buffer NaN once its declared lifetime ends, nothing changes.
TEST(FusedAttention, BertLossIsTheSameUnderThePoisonedMemoryPlan) {
  auto backend = backend_with("fused");
  auto planned = bert_trainer(*backend, MemoryReuse::lifetime);
  auto poisoned = bert_trainer(*backend, MemoryReuse::poison);
  for (int step = 0; step < 3; ++step) {
    const float want = planned->step_and_loss();
    const float got = poisoned->step_and_loss();
    ASSERT_TRUE(std::isfinite(got)) << "step " << step;
    EXPECT_FLOAT_EQ(got, want) << "step " << step;
  }
  EXPECT_GT(poisoned->arena().poisoned_count(), 0u);
}

TEST(FusedAttention, Bf16BertFollowsFp32WhereTheCpuHasIt) {
  auto backend = backend_with("fused");
  if (const auto why = backend->cannot_compute(DType::bf16)) GTEST_SKIP() << *why;
  auto fp32 = bert_trainer(*backend, MemoryReuse::lifetime);
  auto bf16 = bert_trainer(*backend, MemoryReuse::lifetime, DType::bf16);
  const float reference = fp32->loss();
  EXPECT_NEAR(bf16->loss(), reference, 0.02f * reference);
}

// The CUDA kernels' plan (attention_plan.hpp).
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
