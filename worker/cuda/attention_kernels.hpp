// The CUDA fused attention kernels (attention_kernels.cu): one block a sequence's head, on tensor
// cores (fp16 or bf16 tiles, fp32 accumulation), reading Q, K, V and writing the context straight
// from and to the projections' (sequences · tokens, heads · head_size) rows. Forward writes each
// query row's log-sum-exp; backward recomputes the probabilities from it and hashes the dropout
// mask again (dropout_mask.hpp, the composed path's indices). attention_plan.hpp says which
// shapes they take and lays out their shared memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/attention_plan.hpp"
#include "dtype.hpp"

namespace dlbench::worker::kernels {

struct FusedAttentionCall {
  const FusedAttentionPlan* plan = nullptr;
  DType dtype = DType::fp16;
  int sequences = 0, heads = 0;
  float dropout = 0.0f;
  std::uint64_t layer_seed = 0;
  const std::uint64_t* step = nullptr;  // on the device, read when the kernel runs (graph replays)
  const std::int32_t* real_tokens = nullptr;  // on the device, one per sequence; null: no padding
};

// Lets the kernels for `dtype` take up to the device's shared memory a block (once per op, before
// any launch; a plan never asks for more, fused_attention_plan sees to that).
void prepare_fused_attention(DType dtype, std::size_t shared_bytes_per_block);
void fused_attention_forward(const FusedAttentionCall& call, const void* q, const void* k, const void* v,
                             void* context, float* statistics, cudaStream_t stream);
void fused_attention_backward(const FusedAttentionCall& call, const void* q, const void* k, const void* v,
                              const void* dcontext, const float* statistics, void* dq, void* dk, void* dv,
                              cudaStream_t stream);

}  // namespace dlbench::worker::kernels
