// A channels-last convolution whose input has fewer channels than a tensor-core kernel loads at
// once (a stem's 3 colours: 6 bytes a pixel in a half type, where those kernels read 8 or 16) can
// read it padded with zero channels instead, as NVIDIA's own ResNet-50 submissions feed their stem
// 4 channels. The padded channels meet zero filter taps, so the convolution is the same; what
// changes is which kernels cuDNN may choose. Whether that is faster on a given GPU is an A/B:
// DLBENCH_CUDA_PAD_INPUT_CHANNELS=off|4|8 (off: padded to 4, amp ResNet-50 ran 7,216.5 images/s on
// an H200 against 7,211.9, 2026-12-04). The rule and the index math
// of the padded filter live here, apart from the kernels, so that they are tested without a GPU
// (and in C++17, for the kernels' files).
#pragma once

#include <cstdint>

#include "env_choice.hpp"
#include "host_device.hpp"

namespace dlbench::worker {

inline constexpr Choices<int, 3> kPaddedInputChannels{{{"off", 0}, {"4", 4}, {"8", 8}}};

// `choice` is DLBENCH_CUDA_PAD_INPUT_CHANNELS's value (null or empty: unset, off); 0 means off.
// Throws std::invalid_argument naming the variable and its allowed values for anything else.
inline int padded_input_channels(const char* choice) {
  return env_choice("DLBENCH_CUDA_PAD_INPUT_CHANNELS", choice, kPaddedInputChannels).value_or(0);
}

// The input channels a convolution's passes read: its own `channels`, or `pad_to` where that is
// more and the activations are channels last (an NCHW plane per channel gains nothing by it).
inline std::int64_t conv_pass_input_channels(std::int64_t channels, bool channels_last, int pad_to) {
  return channels_last && pad_to > channels ? pad_to : channels;
}

// The OIHW element that OHWI element `j` of the padded copy holds, or -1 where `j` is a padding
// channel's tap (zero). The other way is activation_index.hpp's filter_offset, channels last, with
// `padded` input channels.
DLBENCH_HOST_DEVICE inline std::int64_t oihw_of_padded_ohwi(std::int64_t j, std::int64_t in_channels,
                                                            std::int64_t padded, std::int64_t kh, std::int64_t kw) {
  const std::int64_t c = j % padded, x = (j / padded) % kw, y = (j / (padded * kw)) % kh, o = j / (padded * kw * kh);
  return c < in_channels ? ((o * in_channels + c) * kh + y) * kw + x : -1;
}

}  // namespace dlbench::worker
