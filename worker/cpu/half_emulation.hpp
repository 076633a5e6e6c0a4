// fp16 (amp) on the CPU, emulated (DLBENCH_CPU_FP16=emulated): oneDNN 2.6 has no fp16 training
// kernels for x86, so each fp16 op is the backend's fp32 op between conversions. The op's fp16
// inputs are widened (exactly), it computes in fp32, and its outputs are rounded to fp16 where the
// layer reads them, as a GPU's half kernels store them: past 65,504 is inf, a tiny value a
// subnormal or 0. What the CUDA backend rounds, this rounds too: a convolution's and a linear
// layer's weights (and the linear layer's bias) before the pass that reads them, and a
// convolution's filter gradient, which cuDNN computes in the half type (cuda/conv.cpp). Batch
// norm's and layer norm's scale and shift, the statistics and every other parameter gradient
// stay fp32, as there.
//
// So dlbench's whole amp path (the fp16 batch, the loss scale applied before dlogits is rounded,
// unscaling, the skipped steps, the overflow trace) trains on the CPU with fp16's range: a
// diagnosis of a recipe or of dlbench's amp code that needs no GPU. It is not a measurement of
// fp16 speed (every op converts its tensors both ways), and the result says so: its
// backendOptions.fp16 is "emulated".
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "backend.hpp"
#include "env_choice.hpp"

namespace dlbench::worker {

enum class CpuFp16 {
  refused,   // fp16 activations are refused, naming the switch (the default)
  emulated,  // fp16 activations run on fp32 ops between conversions (this file)
};

inline constexpr Choices<CpuFp16, 2> kCpuFp16{{{"refused", CpuFp16::refused}, {"emulated", CpuFp16::emulated}}};

inline CpuFp16 cpu_fp16_choice(const char* variable, const char* value) {
  return env_choice(variable, value, kCpuFp16).value_or(CpuFp16::refused);
}

// The fp32 copies an emulated op works on during one call, slot by slot: each only grows, so
// steps after the first allocate nothing. One per backend (its ops run one at a time).
class HalfScratch {
 public:
  float* slot(std::size_t index, std::int64_t elements);

 private:
  struct Buffer {
    std::shared_ptr<void> values;  // zeroed_large_memory's, as the backend's own tensors
    std::int64_t elements = 0;
  };
  std::vector<Buffer> slots_;
};

// A config of an op for fp16 activations as the same op's in fp32: the op an emulated one runs.
template <typename Config>
Config in_fp32(Config config) {
  config.dtype = DType::fp32;
  return config;
}

// `count` fp32 values rounded to fp16 and back into `out` (which may be `from`): what a half
// kernel would have stored.
void round_through_half(const float* from, std::int64_t count, float* out);

// An fp32 op (made by the backend for the fp16 op's config with dtype fp32) as the fp16 op.
std::unique_ptr<Conv2dOp> emulate_half(std::unique_ptr<Conv2dOp> op, HalfScratch& scratch);
std::unique_ptr<BatchNormOp> emulate_half(std::unique_ptr<BatchNormOp> op, HalfScratch& scratch);
std::unique_ptr<ReluOp> emulate_half(std::unique_ptr<ReluOp> op, HalfScratch& scratch);
std::unique_ptr<PoolOp> emulate_half(std::unique_ptr<PoolOp> op, HalfScratch& scratch);
std::unique_ptr<LinearOp> emulate_half(std::unique_ptr<LinearOp> op, HalfScratch& scratch);
std::unique_ptr<AddOp> emulate_half(std::unique_ptr<AddOp> op, HalfScratch& scratch);
std::unique_ptr<ReorderOp> emulate_half(std::unique_ptr<ReorderOp> op, HalfScratch& scratch);
std::unique_ptr<ChannelSliceOp> emulate_half(std::unique_ptr<ChannelSliceOp> op, HalfScratch& scratch);
std::unique_ptr<ResizeOp> emulate_half(std::unique_ptr<ResizeOp> op, HalfScratch& scratch);
std::unique_ptr<BatchedMatmulOp> emulate_half(std::unique_ptr<BatchedMatmulOp> op, HalfScratch& scratch);
std::unique_ptr<LayerNormOp> emulate_half(std::unique_ptr<LayerNormOp> op, HalfScratch& scratch);
std::unique_ptr<SoftmaxOp> emulate_half(std::unique_ptr<SoftmaxOp> op, HalfScratch& scratch);
std::unique_ptr<ActivationOp> emulate_half(std::unique_ptr<ActivationOp> op, HalfScratch& scratch);
std::unique_ptr<SwapAxesOp> emulate_half(std::unique_ptr<SwapAxesOp> op, HalfScratch& scratch);
std::unique_ptr<AttentionOp> emulate_half(std::unique_ptr<AttentionOp> op, HalfScratch& scratch);

}  // namespace dlbench::worker
