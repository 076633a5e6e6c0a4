// How the CPU backend hands a linear layer its weights (DLBENCH_CPU_LINEAR_WEIGHTS). Parameters
// are fp32 in their plain [out, in] layout (the optimizer's master copy), and each forward and
// backward-data call used to reorder them into the product's preferred blocked format. oneDNN
// 2.6's reorder from plain fp32 into the inner product's blocked bf16 is slow, and in fp32 the
// reorder is a copy the plain layout does not need. A layer whose product is small beside its
// weights (few rows: a classifier at a small batch, BERT's masked-token decoder in bf16) is then
// mostly those reorders, twice a step, and runs faster as matmuls on the plain weights: as they
// are in fp32, converted once a call in bf16 (the forward reads them transposed). A layer with
// many rows per weight (BERT's encoder, 128 tokens a sequence) is mostly the product, where the
// blocked kernels are faster.
#pragma once

#include <cstdint>

#include "dtype.hpp"
#include "env_choice.hpp"

namespace dlbench::worker {

enum class LinearWeights {
  automatic,  // plain where the layer has few rows for its input features (plain_weights)
  blocked,    // always reordered into the product's own format (bf16: the inner product's)
  plain,      // always matmuls on the plain weights
};

inline constexpr Choices<LinearWeights, 3> kLinearWeights{
    {{"auto", LinearWeights::automatic}, {"blocked", LinearWeights::blocked}, {"plain", LinearWeights::plain}}};

inline LinearWeights linear_weights_choice(const char* variable, const char* value) {
  return env_choice(variable, value, kLinearWeights).value_or(LinearWeights::automatic);
}

// Whether a linear layer of `rows` × `in_features` inputs runs as matmuls on its plain weights,
// where oneDNN runs AVX-512 kernels (`avx512_kernels`) or AVX2 ones. bench/linear_routes timed
// both routes, forward and backward-data (bench/RESULTS.md, 2026-12-01, 2 EPYC cores with
// AVX512_BF16, 8 to 1,024 rows of 768 to 25,088 features):
// - bf16 (AVX-512 only): plain won wherever rows × 3 <= in_features (2.7x at 8 rows of 9,216,
//   1.09x at 1,024 of 4,096; level at 96 rows of 768) and lost 7-10% at 512 and 1,024 rows of 768;
// - fp32 with AVX-512 kernels, whose blocked reorder is cheaper: plain won up to 256 rows where
//   rows × 16 <= in_features (3.0x at 8 rows of 9,216, 1.14x at 256 of 4,096), lost 6% at 512
//   rows of 9,216 and 5% at 1,024 of 768, and was within 9% either way from 96 to 512 rows of 768;
// - fp32 with AVX2 kernels (DNNL_MAX_CPU_ISA=AVX2, the same shapes): plain won or tied at every
//   one, 2.4-2.9x at 8 rows, 1.06x at 512 rows of 9,216, level (0.99-1.01x) at 1,024 rows of 768
//   and 3,072, so it takes them all.
inline bool plain_weights(std::int64_t rows, std::int64_t in_features, DType dtype, LinearWeights choice,
                          bool avx512_kernels) {
  switch (choice) {
    case LinearWeights::blocked: return false;
    case LinearWeights::plain: return true;
    case LinearWeights::automatic:
      if (dtype != DType::fp32) return rows * 3 <= in_features;
      return !avx512_kernels || (rows <= 256 && rows * 16 <= in_features);
  }
  return false;
}

}  // namespace dlbench::worker
