// Fused attention (Backend::make_fused_attention): the CPU op (DLBENCH_CPU_ATTENTION=fused), which
// runs the CUDA kernels' algorithm, against the composed ops it replaces, alone and inside BERT.
// The CUDA kernels' plan is tested in tests/gpu/attention_plan_test.cpp, the kernels on a GPU.
#include <cmath>
#include <functional>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "cpu/cpu_backend.hpp"
#include "cpu/vector_exp.hpp"
#include "models/bert.hpp"
#include "scoped_env.hpp"
#include "trainer.hpp"

namespace dlbench::worker {
namespace {

std::unique_ptr<CpuBackend> backend_with(const char* route) {
  const ScopedEnv with("DLBENCH_CPU_ATTENTION", route);
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
// real_tokens: each sequence's tokens before its padding (null: none).
AttentionResult composed(CpuBackend& b, HostTensor& q, HostTensor& k, HostTensor& v, HostTensor& dcontext, float p,
                         std::uint64_t seed, const std::int32_t* real_tokens = nullptr) {
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
  softmax->forward(s, pr, RowLengths{real_tokens, kHeads * kTokens});
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
                      std::uint64_t seed, const std::int32_t* real_tokens = nullptr) {
  auto op = b.make_fused_attention({kSequences, kTokens, kHeads, kHeadSize, DType::fp32});
  if (!op) throw std::logic_error("DLBENCH_CPU_ATTENTION=fused made no fused op");
  HostTensor context(kRows * kWidth, 0), statistics(kSequences * kHeads * kTokens, 0), dq(kRows * kWidth, 0),
      dk(kRows * kWidth, 0), dv(kRows * kWidth, 0);
  op->forward(q.tensor, k.tensor, v.tensor, context.tensor, statistics.tensor, p, seed, real_tokens);
  op->backward(q.tensor, k.tensor, v.tensor, dcontext.tensor, statistics.tensor, p, seed, real_tokens, dq.tensor,
               dk.tensor, dv.tensor);
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
  // The result's backend versions say which attention ran.
  EXPECT_TRUE(with_fused->version_info().ends_with(";attention=fused")) << with_fused->version_info();
  EXPECT_TRUE(with_composed->version_info().ends_with(";attention=composed")) << with_composed->version_info();
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

// A padded sequence (real data): no query attends to a key past the sequence's real tokens. The
// fused op and the composed ops (softmax over each row's first columns) agree with and without
// dropout; the padding's keys and values change no context, and their dK and dV are exactly 0.
// Measured against attention in fp64 with BERT's additive mask (-10000 on padding scores).
TEST(FusedAttention, PaddingKeysGetNoAttentionOnEitherRoute) {
  auto with_fused = backend_with("fused");
  auto with_composed = backend_with("composed");
  HostTensor q(kRows * kWidth, 1), k(kRows * kWidth, 2), v(kRows * kWidth, 3), dcontext(kRows * kWidth, 4);
  const std::vector<std::int32_t> real_tokens{kTokens, 5};  // the second sequence: 8 padding tokens
  for (const float p : {0.0f, 0.25f}) {
    for (CpuBackend* b : {with_fused.get(), with_composed.get()}) b->begin_step(3);
    const AttentionResult want = composed(*with_composed, q, k, v, dcontext, p, 7, real_tokens.data());
    const AttentionResult got = fused(*with_fused, q, k, v, dcontext, p, 7, real_tokens.data());
    expect_close(got.context, want.context, "context", p);
    expect_close(got.dq, want.dq, "dQ", p);
    expect_close(got.dk, want.dk, "dK", p);
    expect_close(got.dv, want.dv, "dV", p);
    const AttentionResult unpadded = fused(*with_fused, q, k, v, dcontext, p, 7);
    EXPECT_NE(got.context, unpadded.context) << "the padding changed nothing: the mask was not applied";
  }
  // fp64 with BERT's additive mask, no dropout: context[s, i, head] = Σ_j softmax_j(q·k/√d − 10000·[j padding]) v_j.
  with_fused->begin_step(3);
  const AttentionResult got = fused(*with_fused, q, k, v, dcontext, 0.0f, 7, real_tokens.data());
  double worst = 0.0;
  for (std::int64_t s = 0; s < kSequences; ++s) {
    for (std::int64_t h = 0; h < kHeads; ++h) {
      for (std::int64_t i = 0; i < kTokens; ++i) {
        std::vector<double> weights(kTokens);
        double top = -1e300, sum = 0.0;
        for (std::int64_t j = 0; j < kTokens; ++j) {
          double dot = 0.0;
          for (std::int64_t d = 0; d < kHeadSize; ++d) {
            dot += static_cast<double>(q.values[static_cast<std::size_t>((s * kTokens + i) * kWidth + h * kHeadSize + d)]) *
                   static_cast<double>(k.values[static_cast<std::size_t>((s * kTokens + j) * kWidth + h * kHeadSize + d)]);
          }
          weights[static_cast<std::size_t>(j)] = dot / std::sqrt(static_cast<double>(kHeadSize)) -
                                                 (j < real_tokens[static_cast<std::size_t>(s)] ? 0.0 : 10000.0);
          top = std::max(top, weights[static_cast<std::size_t>(j)]);
        }
        for (double& w : weights) sum += w = std::exp(w - top);
        for (std::int64_t d = 0; d < kHeadSize; ++d) {
          double context = 0.0;
          for (std::int64_t j = 0; j < kTokens; ++j) {
            context += weights[static_cast<std::size_t>(j)] / sum *
                       static_cast<double>(v.values[static_cast<std::size_t>((s * kTokens + j) * kWidth + h * kHeadSize + d)]);
          }
          const std::size_t at = static_cast<std::size_t>((s * kTokens + i) * kWidth + h * kHeadSize + d);
          worst = std::max(worst, std::fabs(context - static_cast<double>(got.context[at])));
        }
      }
    }
  }
  EXPECT_LT(worst, 1e-5);
  // The padding's keys and values: changing them changes no context; their gradients are 0.
  HostTensor other_k = k, other_v = v;
  other_k.tensor.data = other_k.values.data();
  other_v.tensor.data = other_v.values.data();
  for (std::int64_t t = real_tokens[1]; t < kTokens; ++t) {
    for (std::int64_t c = 0; c < kWidth; ++c) {
      other_k.values[static_cast<std::size_t>((kTokens + t) * kWidth + c)] += 3.0f;
      other_v.values[static_cast<std::size_t>((kTokens + t) * kWidth + c)] -= 5.0f;
    }
  }
  for (CpuBackend* b : {with_fused.get(), with_composed.get()}) {
    b->begin_step(3);
    const AttentionResult moved = b == with_fused.get()
                                      ? fused(*b, q, other_k, other_v, dcontext, 0.25f, 7, real_tokens.data())
                                      : composed(*b, q, other_k, other_v, dcontext, 0.25f, 7, real_tokens.data());
    b->begin_step(3);
    const AttentionResult before = b == with_fused.get() ? fused(*b, q, k, v, dcontext, 0.25f, 7, real_tokens.data())
                                                         : composed(*b, q, k, v, dcontext, 0.25f, 7, real_tokens.data());
    EXPECT_EQ(moved.context, before.context) << b->version_info();
    for (std::int64_t t = real_tokens[1]; t < kTokens; ++t) {
      for (std::int64_t c = 0; c < kWidth; ++c) {
        const auto at = static_cast<std::size_t>((kTokens + t) * kWidth + c);
        ASSERT_EQ(moved.dk[at], 0.0f) << "token " << t << " " << b->version_info();
        ASSERT_EQ(moved.dv[at], 0.0f) << "token " << t << " " << b->version_info();
      }
    }
  }
}

// The bf16 op (fp32 arithmetic on fp32 copies of the heads, where fp32 reads the rows in place)
// computes what the fp32 op computes from the same rounded inputs, each output then rounded once:
// element by element within half a unit in bf16's last place. (The op converts in software, so
// this runs on CPUs without AVX512_BF16 too; the CPU backend has no fp16.)
TEST(FusedAttention, TheBf16OpRoundsTheFp32OpsResults) {
  using T = bf16;
  const DType dtype = DType::bf16;
  const double half_ulp = std::ldexp(1.0, -8);
  auto b = backend_with("fused");
  const std::int64_t n = kRows * kWidth, rows = kSequences * kHeads * kTokens;
  std::vector<HostTensor> fp32_inputs;
  std::vector<std::vector<T>> half_inputs;
  for (std::uint64_t seed = 1; seed <= 4; ++seed) {
    HostTensor& rounded = fp32_inputs.emplace_back(n, seed);
    std::vector<T>& half = half_inputs.emplace_back();
    for (float& v : rounded.values) {
      half.push_back(from_float<T>(v));
      v = to_float(half.back());
    }
  }
  std::vector<std::vector<T>> half_outputs(4, std::vector<T>(static_cast<std::size_t>(n)));
  std::vector<float> statistics(static_cast<std::size_t>(rows));
  const auto half_tensor = [&](std::vector<T>& values) { return Tensor{values.data(), Shape(n), Layout::plain, dtype}; };
  Tensor q = half_tensor(half_inputs[0]), k = half_tensor(half_inputs[1]), v = half_tensor(half_inputs[2]),
         dcontext = half_tensor(half_inputs[3]), context = half_tensor(half_outputs[0]), dq = half_tensor(half_outputs[1]),
         dk = half_tensor(half_outputs[2]), dv = half_tensor(half_outputs[3]);
  Tensor saved{statistics.data(), Shape(rows), Layout::plain, DType::fp32};
  const float p = 0.25f;
  b->begin_step(5);
  auto op = b->make_fused_attention({kSequences, kTokens, kHeads, kHeadSize, dtype});
  ASSERT_NE(op, nullptr);
  op->forward(q, k, v, context, saved, p, 42);
  op->backward(q, k, v, dcontext, saved, p, 42, dq, dk, dv);
  const AttentionResult want = fused(*b, fp32_inputs[0], fp32_inputs[1], fp32_inputs[2], fp32_inputs[3], p, 42);
  const std::vector<const std::vector<float>*> wanted{&want.context, &want.dq, &want.dk, &want.dv};
  for (std::size_t output = 0; output < wanted.size(); ++output) {
    const std::vector<float>& expected = *wanted[output];
    double largest = 0.0;
    for (float e : expected) largest = std::max(largest, std::fabs(static_cast<double>(e)));
    ASSERT_GT(largest, 1e-3) << "output " << output << ": a result of zeros proves nothing";
    int outside = 0;
    for (std::size_t i = 0; i < expected.size(); ++i) {
      const double got = to_float(half_outputs[output][i]), e = expected[i];
      outside += std::fabs(got - e) > half_ulp * std::fabs(e) + 1e-6 * largest ? 1 : 0;
    }
    EXPECT_EQ(outside, 0) << "output " << output << " (context, dQ, dK, dV): values further than rounding from fp32's";
  }
}


// The CPU op's exponential (cpu/vector_exp.hpp) over the arguments a softmax row gives it.
TEST(FusedAttention, TheVectorExponentialStaysWithinThreeTenMillionthsOfExp) {
  double worst = 0.0, worst_at = 0.0;
  for (int i = 0; i <= 2'000'000; ++i) {
    const double x = -87.0 + 88.0 * i / 2'000'000.0;  // [-87, 1]
    const double exact = std::exp(static_cast<double>(static_cast<float>(x)));
    const double error = std::fabs(static_cast<double>(exp_of_small(static_cast<float>(x))) - exact) / exact;
    if (error > worst) {
      worst = error;
      worst_at = x;
    }
  }
  EXPECT_LT(worst, 3e-7) << "at " << worst_at;  // a few float roundings
  EXPECT_EQ(exp_of_small(0.0f), 1.0f);
  EXPECT_LT(exp_of_small(-1000.0f), 1e-37f);
  EXPECT_GE(exp_of_small(-1000.0f), 0.0f);
}

// Both backends' ops check their tensors with require_attention_tensors: a wrong size or dtype is
// refused naming the tensor, before anything is computed.
TEST(FusedAttention, TheOpRefusesTensorsOfAnotherShapeOrDtype) {
  auto backend = backend_with("fused");
  auto op = backend->make_fused_attention({kSequences, kTokens, kHeads, kHeadSize, DType::fp32});
  ASSERT_NE(op, nullptr);
  HostTensor q(kRows * kWidth, 1), k(kRows * kWidth, 2), v(kRows * kWidth, 3), context(kRows * kWidth, 0);
  HostTensor statistics(kSequences * kHeads * kTokens, 0), short_statistics(kSequences * kHeads, 0), short_v(kRows, 3);
  const auto message = [&](const std::function<void()>& call) {
    try {
      call();
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_EQ(message([&] { op->forward(q.tensor, k.tensor, v.tensor, context.tensor, short_statistics.tensor, 0, 1); }),
            "fused attention: statistics has 6 elements, expected 78");
  EXPECT_EQ(message([&] { op->forward(q.tensor, k.tensor, short_v.tensor, context.tensor, statistics.tensor, 0, 1); }),
            "fused attention: q, k, v, the context or a gradient has 26 elements, expected 624");
  Tensor bf16_q = q.tensor;
  bf16_q.dtype = DType::bf16;
  EXPECT_EQ(message([&] { op->forward(bf16_q, k.tensor, v.tensor, context.tensor, statistics.tensor, 0, 1); }),
            "fused attention: a bf16 tensor where fp32 was expected");
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
// With padded sequences (real data) as well: both routes mask the same keys.
TEST(FusedAttention, BertHasTheSameGradientsFusedOrComposed) {
  for (const bool padded : {false, true}) {
  SCOPED_TRACE(padded ? "padded" : "no padding");
  auto with_fused = backend_with("fused");
  auto with_composed = backend_with("composed");
  auto fused_bert = bert_trainer(*with_fused, MemoryReuse::lifetime);
  auto composed_bert = bert_trainer(*with_composed, MemoryReuse::lifetime);
  if (padded) {
    for (Trainer* t : {fused_bert.get(), composed_bert.get()}) t->pad_sequences(PretrainingBatchLayout{3, 11}, {11, 6, 3});
  }
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

}  // namespace
}  // namespace dlbench::worker
