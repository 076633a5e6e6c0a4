// Which way a backend runs attention: composed from its ops (swaps, batched matmuls, softmax,
// dropout) or as one fused op. Read from a backend's switch (DLBENCH_CPU_ATTENTION,
// DLBENCH_CUDA_ATTENTION); composed unless it says fused, until a benchmark has shown the fused
// op faster on that backend.
#pragma once

#include "env_choice.hpp"

namespace dlbench::worker {

enum class AttentionRoute { composed, fused };

inline constexpr Choices<AttentionRoute, 2> kAttentionRoutes{
    {{"composed", AttentionRoute::composed}, {"fused", AttentionRoute::fused}}};

inline AttentionRoute attention_route(const char* variable, const char* value) {
  return env_choice(variable, value, kAttentionRoutes).value_or(AttentionRoute::composed);
}

}  // namespace dlbench::worker
