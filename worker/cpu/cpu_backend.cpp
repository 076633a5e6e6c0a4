// The CPU backend: every layer on oneDNN primitives, created once per layer at setup.
// Activations are NHWC (oneDNN's JIT kernels handle it directly); parameters stay in the
// canonical plain layout (OIHW, OI) and are reordered into whatever weight format the chosen
// kernel wants, so that the optimizer and the tests see PyTorch's layout.
//
// This file holds the backend itself (its engine, memory and what it can compute); the ops are
// in conv.cpp, linear.cpp, batch_norm.cpp, elementwise.cpp, training_ops.cpp,
// transformer_ops.cpp and attention.cpp, as worker/cuda/ splits its own.
#include "cpu/cpu_backend.hpp"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <optional>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <oneapi/dnnl/dnnl.hpp>

#include "cpu/dnnl_check.hpp"
#include "host_memory.hpp"

namespace dlbench::worker {
namespace {

std::string isa_name(dnnl::cpu_isa isa) {
  using dnnl::cpu_isa;
  switch (isa) {
    case cpu_isa::sse41: return "sse41";
    case cpu_isa::avx: return "avx";
    case cpu_isa::avx2: return "avx2";
    case cpu_isa::avx2_vnni: return "avx2_vnni";
    case cpu_isa::avx512_mic: return "avx512_mic";
    case cpu_isa::avx512_mic_4ops: return "avx512_mic_4ops";
    case cpu_isa::avx512_core: return "avx512_core";
    case cpu_isa::avx512_core_vnni: return "avx512_core_vnni";
    case cpu_isa::avx512_core_bf16: return "avx512_core_bf16";
    case cpu_isa::avx512_core_amx: return "avx512_core_amx";
    default: return "isa " + std::to_string(static_cast<unsigned>(isa));
  }
}

// Whether oneDNN's kernels here (the CPU's best ISA, or less under DNNL_MAX_CPU_ISA) include
// `isa`'s instructions: its value is a bit mask of every ISA it extends.
bool kernels_include(dnnl::cpu_isa isa) {
  const auto effective = static_cast<unsigned>(dnnl::get_effective_cpu_isa());
  const auto needed = static_cast<unsigned>(isa);
  return (effective & needed) == needed;
}

}  // namespace

CpuBackend::CpuBackend(int threads)
    : attention_route_(attention_route("DLBENCH_CPU_ATTENTION", std::getenv("DLBENCH_CPU_ATTENTION"))),
      conv_batch_norm_route_(
          conv_batch_norm_route("DLBENCH_CPU_CONV_BATCH_NORM", std::getenv("DLBENCH_CPU_CONV_BATCH_NORM"))),
      linear_weights_(linear_weights_choice("DLBENCH_CPU_LINEAR_WEIGHTS", std::getenv("DLBENCH_CPU_LINEAR_WEIGHTS"))),
      conv_backward_data_(
          conv_backward_data_choice("DLBENCH_CPU_CONV_BACKWARD_DATA", std::getenv("DLBENCH_CPU_CONV_BACKWARD_DATA"))),
      fp16_(cpu_fp16_choice("DLBENCH_CPU_FP16", std::getenv("DLBENCH_CPU_FP16"))),
      engine_(dnnl::engine::kind::cpu, 0),
      stream_(engine_) {
  if (threads > 0) omp_set_num_threads(threads);
}

CpuBackend::~CpuBackend() = default;

std::string CpuBackend::version_info() const {
  const dnnl_version_t* v = dnnl_version();
  return "onednn=" + std::to_string(v->major) + "." + std::to_string(v->minor) + "." + std::to_string(v->patch) +
         ";isa=" + options().at("isa") + ";attention=" + options().at("attention");
}

// The ISA oneDNN's kernels run (the CPU's best, or less under DNNL_MAX_CPU_ISA): the same CPU
// model times differently with avx2 and with avx512_core_bf16 kernels.
std::map<std::string, std::string> CpuBackend::options() const {
  return {{"attention", std::string(choice_name(kAttentionRoutes, attention_route_))},
          {"convBackwardData", std::string(choice_name(kConvBackwardData, conv_backward_data_))},
          {"convBatchNorm", std::string(choice_name(kConvBatchNormRoutes, conv_batch_norm_route_))},
          {"fp16", std::string(choice_name(kCpuFp16, fp16_))},
          {"isa", isa_name(dnnl::get_effective_cpu_isa())},
          {"linearWeights", std::string(choice_name(kLinearWeights, linear_weights_))}};
}

bool CpuBackend::avx512_kernels() const { return kernels_include(dnnl::cpu_isa::avx512_core); }

std::optional<std::string> CpuBackend::cannot_compute(DType dtype) const {
  switch (dtype) {
    case DType::fp32: return std::nullopt;
    case DType::bf16: {
      // Without AVX512_BF16 oneDNN would emulate bf16 arithmetic, slower than fp32: that is
      // not a bf16 measurement.
      if (kernels_include(dnnl::cpu_isa::avx512_core_bf16)) return std::nullopt;
      return "bf16 on the cpu backend needs oneDNN's avx512_core_bf16 ISA (the AVX512_BF16 instructions: Intel "
             "Cooper Lake, Sapphire Rapids and later, AMD Zen 4 and later), which this CPU does not have (oneDNN "
             "runs " + isa_name(dnnl::get_effective_cpu_isa()) + " here)";
    }
    case DType::int32: return "int32 holds indices; the cpu backend computes in fp32 or bf16";
    case DType::fp16:
      if (fp16_ == CpuFp16::emulated) return std::nullopt;
      return "fp16 (amp) has no training kernels for x86 CPUs in oneDNN " + std::to_string(dnnl_version()->major) + "." +
             std::to_string(dnnl_version()->minor) +
             " (DLBENCH_CPU_FP16=emulated runs amp's numerics on fp32 kernels: a diagnosis, not a measurement)";
  }
  return "unknown dtype";
}

int CpuBackend::threads() const { return omp_get_max_threads(); }

std::shared_ptr<void> CpuBackend::allocate(std::size_t bytes) { return zeroed_large_memory(bytes); }

void CpuBackend::copy_from_host(void* device_dst, const void* host_src, std::size_t bytes) {
  std::memcpy(device_dst, host_src, bytes);
}

void CpuBackend::copy_to_host(void* host_dst, const void* device_src, std::size_t bytes) {
  std::memcpy(host_dst, device_src, bytes);
}

void CpuBackend::poison(void* device_dst, std::size_t bytes) { std::memset(device_dst, 0xFF, bytes); }

void CpuBackend::synchronize() { stream_.wait(); }

}  // namespace dlbench::worker
