// The command engine's protocol: the lines a wrapped training script prints so that dlbench can
// time it. Framework-neutral text, one marker per line, on stdout or stderr:
//
//   @dlbench step <samples>       one training step finished (after the script's own device
//                                 synchronisation); <samples> is the step's global sample count
//   @dlbench fact <key> <value>   something about the environment: framework, frameworkVersion,
//                                 gpuModel, … (<value> is the rest of the line); `model`, the
//                                 network it trained in spec.model's spelling, `parameters`, its
//                                 trainable parameter count, `precision`, `imageSize` and
//                                 `sequenceLength` are judged: another network, precision or
//                                 input than the case's fails it (CaseMismatch)
//   @dlbench unsupported <why>    this case cannot run here (a precision the device lacks, …):
//                                 the case is Failed with reason Unsupported and never retried
//   @dlbench loss <value>         the training loss after the last step marker (a number, or
//                                 nan, inf, -inf): the last one in each repeat is the loss after
//                                 that repeat, and one that is not finite fails the case
//                                 (LossNotFinite), as dlbench-worker's does
//
// dlbench timestamps a step marker when it arrives; nothing in a marker is a time.
#pragma once

#include <string>
#include <string_view>

namespace dlbench::command {

inline constexpr std::string_view kMarkerPrefix = "@dlbench";
inline constexpr std::size_t kMaxFactKeyLength = 63;
inline constexpr std::size_t kMaxFactValueLength = 256;

struct Marker {
  enum class Kind { none, step, fact, unsupported, loss, invalid };
  Kind kind = Kind::none;
  long samples = 0;          // step
  double loss = 0;           // loss
  std::string key, value;    // fact; unsupported: value is the reason
  std::string error;         // invalid: what is wrong, naming the allowed forms
};

// `line` without its newline; a trailing '\r' is ignored. Lines that do not start with
// "@dlbench" are ordinary output (Kind::none).
Marker parse_marker(std::string_view line);

}  // namespace dlbench::command
