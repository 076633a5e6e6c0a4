// How the CPU backend computes a convolution's input gradient (DLBENCH_CPU_CONV_BACKWARD_DATA).
// At stride 1 the input gradient is itself a forward convolution: of the output gradient, with
// the weights' input and output channels swapped and each kernel turned half a turn, padded by
// dilation·(k−1) − padding (worker/cpu/conv.cpp). oneDNN 2.6 runs forward convolutions on its
// brgemm kernels (brgconv) where the CPU has AVX-512, and the backward-data pass on its older
// direct kernels, or as an im2col product (gemm) for dilations such as DeepLabV3+'s 12 and 18,
// so the two routes run different kernels for the same arithmetic.
#pragma once

#include <string>

#include "backend.hpp"
#include "env_choice.hpp"

namespace dlbench::worker {

enum class ConvBackwardData {
  automatic,  // the route flips_backward_data picks from the kernels oneDNN would run
  primitive,  // always oneDNN's backward-data primitive
  flipped,    // the flipped forward convolution wherever it applies
};

inline constexpr Choices<ConvBackwardData, 3> kConvBackwardData{{{"auto", ConvBackwardData::automatic},
                                                                 {"primitive", ConvBackwardData::primitive},
                                                                 {"flipped", ConvBackwardData::flipped}}};

inline ConvBackwardData conv_backward_data_choice(const char* variable, const char* value) {
  return env_choice(variable, value, kConvBackwardData).value_or(ConvBackwardData::automatic);
}

// Whether convolution `c`'s input gradient can be the flipped forward convolution: at stride 1,
// with a kernel wider than 1×1 (those are matrix products), where the flipped padding is not
// negative (a convolution padded past its dilated kernel has none).
inline bool flippable(const Conv2dConfig& c) {
  return c.stride == 1 && (c.kernel.h > 1 || c.kernel.w > 1) && c.dilation * (c.kernel.h - 1) >= c.padding.h &&
         c.dilation * (c.kernel.w - 1) >= c.padding.w;
}

// oneDNN's names (impl_info_str) for what each route would run: the backward-data primitive and
// the flipped forward convolution.
struct BackwardDataKernels {
  std::string primitive, flipped;
};

// Whether `c`'s input gradient runs as the flipped forward convolution. The automatic rule, from
// bench/conv_backward_data (24 layer shapes of the seven models, each route's median of 5) and
// whole models layer by layer (--profile, the routes alternating), on 2 EPYC cores
// (bench/RESULTS.md, 2026-12-01):
// - where the primitive is an im2col product (gemm: DeepLabV3+'s rates 12 and 18 on its 16×32
//   map, in fp32, in bf16 at 18, and with AVX2 kernels), flipped was 2.3–7.4× faster;
// - where only the flipped one would be (AVX2 at rate 6), it was 0.78×: the primitive;
// - fp32 on brgemm kernels (AVX-512): flipped 1.04–2.31× faster at every shape, and VGG16's
//   step 1.06× faster;
// - bf16 (brgconv against jit_bf16): 0.82–1.29×, level at most shapes: the primitive;
// - fp32 on AVX2's direct kernels both ways: 0.86–1.62× alone, and VGG16's step 0.97× (its
//   224×224 layer 0.87×): the primitive.
inline bool flips_backward_data(const Conv2dConfig& c, ConvBackwardData choice, const BackwardDataKernels& kernels) {
  if (!flippable(c) || choice == ConvBackwardData::primitive) return false;
  if (choice == ConvBackwardData::flipped) return true;
  const auto runs = [](const std::string& name, const char* kind) { return name.find(kind) != std::string::npos; };
  if (runs(kernels.primitive, "gemm")) return true;
  return c.dtype == DType::fp32 && runs(kernels.flipped, "brg");
}

}  // namespace dlbench::worker
