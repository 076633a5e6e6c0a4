// Choosing cuDNN convolution algorithms, apart from running them, so that the rules are tested
// without a GPU: what the process-wide cache is keyed on, which measured result wins, and how
// much memory the measurement may borrow.
#pragma once

#include <cudnn.h>

#include <algorithm>
#include <array>
#include <charconv>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <system_error>

#include "backend.hpp"
#include "env_choice.hpp"
#include "tensor.hpp"
#include "cuda/cuda_check.hpp"

namespace dlbench::worker {

// backward_data_accumulate: backward data adding into dx (beta = 1), a residual block's branch
// gradients meeting in the convolution (Conv2dOp::backward_data_accumulate).
enum class ConvPass { forward, backward_data, backward_filter, backward_data_accumulate };
inline constexpr std::size_t kConvPasses = 4;

// DLBENCH_CUDA_ALGORITHMS: which of cuDNN's convolution algorithms (legacy calls) and engines
// (graph API) a run may choose. any: the fastest measured (the default, as PyTorch's
// cudnn.benchmark); deterministic: only those cuDNN does not mark non-deterministic (some
// backward algorithms add with atomics), so that a run repeated gives the same bits, as
// torch.backends.cudnn.deterministic asks.
enum class ConvDeterminism { any, deterministic };
inline constexpr Choices<ConvDeterminism, 2> kConvDeterminisms{
    {{"any", ConvDeterminism::any}, {"deterministic", ConvDeterminism::deterministic}}};

inline ConvDeterminism conv_determinism(const char* choice) {
  return env_choice("DLBENCH_CUDA_ALGORITHMS", choice, kConvDeterminisms).value_or(ConvDeterminism::any);
}

// Everything that changes which algorithm is fastest (or allowed): the shapes, the data type and
// memory order of the tensors, the math the run allows (FMA only, or tensor cores), the pass and
// whether only deterministic algorithms may run.
struct ConvAlgorithmKey {
  std::array<std::int64_t, 4> input{};
  std::int64_t out_channels = 0;
  Extent2 kernel;
  std::int64_t stride = 0;
  Extent2 padding;
  std::int64_t dilation = 1;
  DType dtype = DType::fp32;
  Layout layout = Layout::nchw;
  bool tensor_cores = false;
  ConvPass pass = ConvPass::forward;
  ConvDeterminism determinism = ConvDeterminism::any;
  auto operator<=>(const ConvAlgorithmKey&) const = default;
};

inline ConvAlgorithmKey conv_algorithm_key(const Conv2dConfig& c, Layout layout, bool tensor_cores, ConvPass pass,
                                           ConvDeterminism determinism) {
  return {c.input.dims, c.out_channels, c.kernel, c.stride, c.padding, c.dilation, c.dtype, layout, tensor_cores,
          pass, determinism};
}

// Whether DLBENCH_LOG_ALGORITHMS asks for one line per choice (set, not empty, not 0).
inline bool log_algorithms() {
  const char* log = std::getenv("DLBENCH_LOG_ALGORITHMS");
  return log != nullptr && *log != '\0' && *log != '0';
}

struct AlgorithmChoice {
  int algorithm = 0;
  std::size_t workspace = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;  // what the algorithm was measured with: run it so
  bool deterministic = true;                  // as cuDNN marks it
  bool operator==(const AlgorithmChoice&) const = default;
};

inline bool uses_tensor_cores(cudnnMathType_t math) {
  return math == CUDNN_TENSOR_OP_MATH || math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

// The fastest measured result (cuDNN sorts them by time) that succeeded; unless the data is fp16
// already, not one that may convert its inputs to fp16 (TENSOR_OP_MATH_ALLOW_CONVERSION: fp32 data
// so computed is not TF32, and bf16 data loses range; the graph API's engines are held to the
// same, cuda/conv_engines.hpp); where the run forbids tensor cores (fp32 means fp32), not one
// that uses them; where it asks for deterministic algorithms, not one cuDNN marks otherwise.
template <typename Perf>
AlgorithmChoice fastest(const Perf* results, int count, bool tensor_cores_allowed, const char* what,
                        bool fp16_data = false, ConvDeterminism determinism = ConvDeterminism::any) {
  const bool deterministic_only = determinism == ConvDeterminism::deterministic;
  for (int i = 0; i < count; ++i) {
    if (results[i].status != CUDNN_STATUS_SUCCESS) continue;
    if (!fp16_data && results[i].mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) continue;
    if (!tensor_cores_allowed && uses_tensor_cores(results[i].mathType)) continue;
    const bool deterministic = results[i].determinism == CUDNN_DETERMINISTIC;
    if (deterministic_only && !deterministic) continue;
    return {static_cast<int>(results[i].algo), results[i].memory, results[i].mathType, deterministic};
  }
  throw CudaError(std::string("cuDNN: no ") + (deterministic_only ? "deterministic " : "") + what +
                  " algorithm works for this convolution" + (tensor_cores_allowed ? "" : " without tensor cores"));
}

// cuDNN's name for a pass's algorithm, without its prefix ("IMPLICIT_PRECOMP_GEMM", "ALGO_1").
inline std::string algorithm_name(ConvPass pass, int algorithm) {
  static constexpr std::array<const char*, 8> forward{"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT",
                                                      "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
  static constexpr std::array<const char*, 6> data{"ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
  static constexpr std::array<const char*, 7> filter{"ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD",
                                                     "WINOGRAD_NONFUSED", "FFT_TILING"};
  const auto pick = [&](const auto& names) -> std::string {
    const auto i = static_cast<std::size_t>(algorithm);
    return algorithm >= 0 && i < names.size() ? names[i] : "algorithm " + std::to_string(algorithm);
  };
  switch (pass) {
    case ConvPass::forward: return pick(forward);
    case ConvPass::backward_data:
    case ConvPass::backward_data_accumulate: return pick(data);
    case ConvPass::backward_filter: return pick(filter);
  }
  return "algorithm " + std::to_string(algorithm);
}

// The convolution a pass belongs to, as the logs name it: "backward-filter fp16 nhwc 64x256x56x56
// -> 64 1x1 stride 1 pad 0".
inline std::string describe_convolution(const ConvAlgorithmKey& key) {
  static constexpr std::array<const char*, kConvPasses> passes{"forward", "backward-data", "backward-filter",
                                                               "backward-data-accumulate"};
  std::string out = std::string(passes[static_cast<std::size_t>(key.pass)]) + " " + std::string(to_string(key.dtype)) +
                    (key.layout == Layout::nhwc ? " nhwc " : " nchw ");
  for (std::size_t i = 0; i < key.input.size(); ++i) out += (i > 0 ? "x" : "") + std::to_string(key.input[i]);
  out += " -> " + std::to_string(key.out_channels) + " " + std::to_string(key.kernel.h) + "x" +
         std::to_string(key.kernel.w) + " stride " + std::to_string(key.stride) + " pad " + std::to_string(key.padding.h);
  if (key.padding.w != key.padding.h) out += "x" + std::to_string(key.padding.w);
  if (key.dilation != 1) out += " dilation " + std::to_string(key.dilation);
  return out;
}

// Bytes as the logs give them: "4.0 MiB".
inline std::string mebibytes(std::size_t bytes) {
  const std::size_t tenths_of_mib = (bytes * 10 + (std::size_t{1} << 19)) >> 20;
  return std::to_string(tenths_of_mib / 10) + "." + std::to_string(tenths_of_mib % 10) + " MiB";
}

// One line for DLBENCH_LOG_ALGORITHMS: the convolution, then what the search chose for it:
// "backward-filter fp16 nhwc 64x256x56x56 -> 64 1x1 stride 1 pad 0: ALGO_1, tensor ops, 4.0 MiB workspace".
inline std::string describe_choice(const ConvAlgorithmKey& key, const AlgorithmChoice& choice) {
  return describe_convolution(key) + ": " + algorithm_name(key.pass, choice.algorithm) +
         (uses_tensor_cores(choice.math) ? ", tensor ops, " : ", fma, ") + mebibytes(choice.workspace) + " workspace" +
         (choice.deterministic ? "" : ", non-deterministic");
}

inline constexpr std::size_t kMaxWorkspaceMiB = std::size_t{1} << 20;

// DLBENCH_CUDA_WORKSPACE_MIB's value (`choice`; null or empty: unset, nullopt) in bytes: a whole
// number of MiB from 1 to kMaxWorkspaceMiB. Throws std::invalid_argument naming the variable and
// its range for anything else.
inline std::optional<std::size_t> requested_workspace_limit(const char* choice) {
  const std::string_view chosen = choice == nullptr ? std::string_view() : std::string_view(choice);
  if (chosen.empty()) return std::nullopt;
  std::size_t mib = 0;
  const auto [end, error] = std::from_chars(chosen.data(), chosen.data() + chosen.size(), mib);
  if (error != std::errc() || end != chosen.data() + chosen.size() || mib < 1 || mib > kMaxWorkspaceMiB) {
    throw std::invalid_argument("DLBENCH_CUDA_WORKSPACE_MIB: \"" + std::string(chosen) +
                                "\" is not a whole number of MiB from 1 to " + std::to_string(kMaxWorkspaceMiB));
  }
  return mib << 20;
}

// The most a convolution algorithm search may borrow (and a chosen algorithm use): 1 GiB or an
// eighth of the device, whichever is less; or what DLBENCH_CUDA_WORKSPACE_MIB requested, so that
// one device call can time a larger search against the default. PyTorch's cudnn.benchmark lets its
// search take what its allocator has free, where fp32's FFT and Winograd algorithms, hungry for
// workspace, may fit when they do not fit ours.
inline std::size_t conv_workspace_limit(std::size_t device_bytes, std::optional<std::size_t> requested) {
  return requested.value_or(std::min<std::size_t>(std::size_t{1} << 30, device_bytes / 8));
}

// Memory the algorithm search may borrow, returned right after: at most `limit`, at most half
// of what is free (so that a search near the memory limit measures fewer algorithms instead of
// failing as OutOfMemory), in whole MiB.
inline std::size_t search_workspace_bytes(std::size_t limit, std::size_t free_bytes) {
  constexpr std::size_t kMiB = std::size_t{1} << 20;
  const std::size_t bytes = std::min(limit, free_bytes / 2);
  return bytes / kMiB * kMiB;
}

// The largest power of two (up to 256) that divides `address`: what cuBLASLt may assume about
// a pointer's alignment (it assumes 256 unless told).
inline std::uint32_t alignment_of(const void* address) {
  const auto value = reinterpret_cast<std::uintptr_t>(address);
  std::uint32_t alignment = 256;
  while (alignment > 1 && value % alignment != 0) alignment /= 2;
  return alignment;
}

}  // namespace dlbench::worker
