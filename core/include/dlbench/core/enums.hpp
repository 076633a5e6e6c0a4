// The closed vocabularies of the BenchmarkRun API. Each enum has one table of spellings;
// validation messages, the CLI and the CRD agreement test all read from these tables.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace dlbench {

enum class Model { resnet50, resnet152, vgg16, alexnet, inception_v3, deeplabv3plus, bert_base };
enum class Engine { native, command };
enum class DataSource { synthetic, imagefolder, cityscapes, bertpretraining };
// Where a real-data case spent its step: waiting for input, or computing.
enum class InputVerdict { input_bound, compute_bound };
// interfered: other load wanted the case's CPUs or ran on its GPUs; throttled: a GPU slowed its
// clocks for heat, a hardware slowdown or a power brake.
enum class InterferenceVerdict { clean, interfered, throttled };
// Why a GPU held its clocks down (NVML's clocks-event reasons, grouped). power-cap is the normal
// state of a GPU at full load and is recorded, not judged.
enum class GpuThrottleReason { thermal, hw_slowdown, power_brake, power_cap };
// Whether a case's repeats agreed within methodology.stability.maxCv.
enum class StabilityVerdict { stable, unstable };
// fp32 disables TF32 so that it means what it says; amp = fp16 compute + loss scaling.
enum class Precision { fp32, tf32, amp, bf16 };
enum class Statistic { median, mean };
// adamw: torch.optim.AdamW after clipping gradients to a global norm of 1 (BERT's recipe);
// lamb: LAMB with the same clipping, as NVIDIA's BERT pretraining runs it (apex FusedLAMB).
enum class OptimizerName { sgd, adamw, lamb };
enum class Phase { Pending, Running, Succeeded, Failed };
// Complete and Failed are terminal, as a Job's and a TrainJob's: `kubectl wait
// --for=condition=Complete` (or Failed) ends when the run does. Ready stays for older clients.
enum class ConditionType { Ready, Progressing, Complete, Failed, Invalid };
enum class ConditionStatus { True, False, Unknown };
enum class CaseState { Succeeded, Failed, Skipped };
enum class TolerationOperator { Exists, Equal };
enum class TaintEffect { Any, NoSchedule, PreferNoSchedule, NoExecute };
// Who admits a multi-node case's worker pods all together (gang scheduling).
enum class GangScheduler { kueue, volcano, schedulerPlugins };
// The worker pods' Kubernetes QoS class: Guaranteed sets limits equal to requests (CPU and
// memory), which the kubelet's static CPU manager needs to give whole cores to a pod.
enum class QosClass { Burstable, Guaranteed };

// Models that train on token sequences (data.sequenceLength) instead of images (data.imageSize).
constexpr bool is_sequence_model(Model m) { return m == Model::bert_base; }
// What a model's throughput counts: sequences for a sequence model (DLPerf's BERT tables count
// sentences/s), else samples (images). Every engine reports in it; a report falls back on it.
constexpr std::string_view throughput_unit(Model m) { return is_sequence_model(m) ? "sequences/s" : "samples/s"; }
// A throughput metric's name ends in its unit (Prometheus's rule: one unit per name), so an
// image model's and a sequence model's throughputs are two families: "_samples_per_second" and
// "_sequences_per_second".
constexpr std::string_view throughput_metric_suffix(std::string_view unit) {
  return unit == "sequences/s" ? "_sequences_per_second" : "_samples_per_second";
}

template <typename E>
struct EnumSpellings;

#define DLBENCH_ENUM_SPELLINGS(E, ...)                                       \
  template <>                                                                \
  struct EnumSpellings<E> {                                                  \
    static constexpr auto values = std::to_array<std::string_view>({__VA_ARGS__}); \
  }

DLBENCH_ENUM_SPELLINGS(Model, "resnet50", "resnet152", "vgg16", "alexnet", "inception_v3", "deeplabv3plus", "bert-base");
DLBENCH_ENUM_SPELLINGS(Engine, "native", "command");
DLBENCH_ENUM_SPELLINGS(DataSource, "synthetic", "imagefolder", "cityscapes", "bertpretraining");
DLBENCH_ENUM_SPELLINGS(InputVerdict, "input-bound", "compute-bound");
DLBENCH_ENUM_SPELLINGS(InterferenceVerdict, "clean", "interfered", "throttled");
DLBENCH_ENUM_SPELLINGS(GpuThrottleReason, "thermal", "hw-slowdown", "power-brake", "power-cap");
DLBENCH_ENUM_SPELLINGS(StabilityVerdict, "stable", "unstable");
DLBENCH_ENUM_SPELLINGS(Precision, "fp32", "tf32", "amp", "bf16");
DLBENCH_ENUM_SPELLINGS(Statistic, "median", "mean");
DLBENCH_ENUM_SPELLINGS(OptimizerName, "sgd", "adamw", "lamb");
DLBENCH_ENUM_SPELLINGS(Phase, "Pending", "Running", "Succeeded", "Failed");
DLBENCH_ENUM_SPELLINGS(ConditionType, "Ready", "Progressing", "Complete", "Failed", "Invalid");
DLBENCH_ENUM_SPELLINGS(ConditionStatus, "True", "False", "Unknown");
DLBENCH_ENUM_SPELLINGS(CaseState, "Succeeded", "Failed", "Skipped");
DLBENCH_ENUM_SPELLINGS(TolerationOperator, "Exists", "Equal");
// Kubernetes spells "any effect" as the empty string.
DLBENCH_ENUM_SPELLINGS(TaintEffect, "", "NoSchedule", "PreferNoSchedule", "NoExecute");
DLBENCH_ENUM_SPELLINGS(GangScheduler, "kueue", "volcano", "schedulerPlugins");
DLBENCH_ENUM_SPELLINGS(QosClass, "Burstable", "Guaranteed");

#undef DLBENCH_ENUM_SPELLINGS

template <typename E>
constexpr std::string_view to_string(E value) {
  return EnumSpellings<E>::values[static_cast<std::size_t>(value)];
}

template <typename E>
constexpr std::optional<E> enum_from_string(std::string_view text) {
  const auto& values = EnumSpellings<E>::values;
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (values[i] == text) return static_cast<E>(i);
  }
  return std::nullopt;
}

// Every value of E, in its spelling table's order.
template <typename E>
constexpr auto enum_values() {
  std::array<E, EnumSpellings<E>::values.size()> out{};
  for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<E>(i);
  return out;
}

// "fp32, tf32, amp, bf16" — for error messages.
template <typename E>
std::string allowed_values() {
  std::string joined;
  for (const auto value : EnumSpellings<E>::values) {
    if (!joined.empty()) joined += ", ";
    joined += value.empty() ? std::string_view{"\"\""} : value;
  }
  return joined;
}

}  // namespace dlbench
