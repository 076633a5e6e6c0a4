// Where an imagefolder case's images are resized (DLBENCH_INPUT_RESIZE): by the decoding threads
// (host), or on the device, the threads only decoding and packing each crop with its resize taps
// for a kernel beside the step before (device; input/packed_images.hpp). Unset, the device
// wherever the backend overlaps host copies with its steps (a GPU): an H200 ran amp ResNet-50 on
// JPEGs at 1.00 of synthetic's rate resizing there, 0.92 resizing in 14 threads (bench/RESULTS.md,
// 2026-12-04); the host elsewhere, where nothing else could resize.
#pragma once

#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>

#include "env_choice.hpp"
#include "memory_headroom.hpp"

namespace dlbench::worker {

enum class InputResize { host, device };

inline constexpr Choices<InputResize, 2> kInputResizes{{{"host", InputResize::host}, {"device", InputResize::device}}};

// `value`: DLBENCH_INPUT_RESIZE's (null or empty: unset). "device" on a backend that cannot resize
// (`backend` names it) is refused naming the variable; so is a value not in kInputResizes.
inline InputResize input_resize(const char* value, bool backend_resizes, std::string_view backend) {
  const auto chosen = env_choice("DLBENCH_INPUT_RESIZE", value, kInputResizes);
  if (!chosen) return backend_resizes ? InputResize::device : InputResize::host;
  if (*chosen == InputResize::device && !backend_resizes) {
    throw std::invalid_argument("DLBENCH_INPUT_RESIZE: \"device\" resizes the images on a GPU; on the " +
                                std::string(backend) + " backend the decoding threads resize them (unset it, or host)");
  }
  return *chosen;
}

// Where the images were resized, and why the threads did where the device would have.
struct ResizeRouteTaken {
  InputResize where = InputResize::host;
  std::string why_host;  // empty unless the device's ring did not fit
};

// Opens the input pipeline with `open(resize_on_device)` on the route `where`. The device's
// ring of page-locked batches is about twice the threads' (each slot holds a crop region of up to
// four times the output's pixels): where the device was only the default (`asked`: false) and its
// ring does not fit in the memory left (HostOutOfMemory), the threads resize instead, and
// `taken.why_host` says why; a route asked for fails as it is.
template <class Open>
auto open_on_resize_route(InputResize where, bool asked, Open open, ResizeRouteTaken& taken) {
  taken = {where, {}};
  if (where == InputResize::device && !asked) {
    std::optional<HostOutOfMemory> refused;
    try {
      return open(true);
    } catch (const HostOutOfMemory& e) {
      refused = e;  // the partial ring is freed as the exception leaves `open`
    }
    taken = {InputResize::host, "the device's ring of batches did not fit, " + std::string(refused->what()) +
                                    "; the decoding threads resized (DLBENCH_INPUT_RESIZE=device insists)"};
    return open(false);
  }
  return open(where == InputResize::device);
}

}  // namespace dlbench::worker
