// The convolutions a dlbench model runs, exactly as it asks a backend for them: recorded while the
// model sets up on the CPU backend, then grouped by shape with their multiplicity. For the
// harnesses that time or probe those convolutions apart from the model (conv_throughput,
// conv_fusion_probe).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "arena.hpp"
#include "cpu/cpu_backend.hpp"
#include "delegating_backend.hpp"
#include "models/model.hpp"

namespace dlbench::bench {

// Forwards everything to the CPU backend and remembers every convolution it is asked for.
class RecordingBackend final : public worker::DelegatingBackend {
 public:
  explicit RecordingBackend(worker::CpuBackend& inner) : DelegatingBackend(inner) {}
  std::vector<worker::Conv2dConfig> convolutions;

  std::unique_ptr<worker::Conv2dOp> make_conv2d(const worker::Conv2dConfig& c) override {
    convolutions.push_back(c);
    return inner_.make_conv2d(c);
  }
};

// One distinct convolution of a model, how many times the model runs it, and whether it is the
// model's first (which computes no input gradient).
struct ModelConvolution {
  worker::Conv2dConfig config;
  int count = 0;
  bool first = false;
};

// `model`'s convolutions at `batch` images of `image` x `image`, in shape order. `cpu` runs the
// setup (the caller's, so that its threads and engine serve the caller's timing too).
inline std::vector<ModelConvolution> model_convolutions(worker::CpuBackend& cpu, const std::string& model,
                                                        std::int64_t batch, std::int64_t image) {
  using namespace worker;
  RecordingBackend recorder(cpu);
  Arena arena;
  auto net = build_model(model);
  SetupContext setup{recorder, arena, false};
  const Tensor input = activation(Shape(batch, 3, image, image), cpu.activation_layout(), DType::fp32);
  net->setup(input, setup);

  using Key = std::tuple<long, long, long, long, Extent2, long, Extent2, long, long>;
  std::map<Key, ModelConvolution> shapes;
  for (std::size_t i = 0; i < recorder.convolutions.size(); ++i) {
    const Conv2dConfig& c = recorder.convolutions[i];
    const Key key{c.input.c(), c.input.h(), c.input.w(), c.out_channels, c.kernel, c.stride, c.padding, c.dilation,
                  i == 0 ? 1L : 0L};
    auto [it, inserted] = shapes.emplace(key, ModelConvolution{c, 0, i == 0});
    ++it->second.count;
  }
  std::vector<ModelConvolution> distinct;
  for (auto& [key, convolution] : shapes) distinct.push_back(convolution);
  return distinct;
}

}  // namespace dlbench::bench
