// Both ways the CPU backend can compute a convolution's input gradient (worker/cpu/
// conv_backward_data.hpp), timed through the backend's own op: oneDNN's backward-data primitive
// and the forward convolution of the output gradient with the weights flipped, each route in
// turn (primitive, flipped, primitive, ...), the weights rewritten between calls as an update
// would leave them (the flipped route turns them on every call). Prints the median milliseconds
// of each route's backward-data call and which one the automatic rule takes.
//
//   conv_backward_data N C H W OUT KERNEL PAD DILATION fp32|bf16 [PAIRS]   (threads: OMP_NUM_THREADS)
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "alternating.hpp"
#include "cpu/cpu_backend.hpp"
#include "layers/layer.hpp"

namespace {

using namespace dlbench::worker;
using dlbench::bench::tensor_on;

struct ConvUnderTest {
  std::shared_ptr<void> dy, dx, weight;
  std::unique_ptr<Conv2dOp> op;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 10) {
    std::fprintf(stderr, "usage: %s N C H W OUT KERNEL PAD DILATION fp32|bf16 [PAIRS]\n", argv[0]);
    return 2;
  }
  long long v[8];
  for (int i = 0; i < 8; ++i) v[i] = std::atoll(argv[i + 1]);
  const std::string precision = argv[9];
  const int pairs = argc > 10 ? std::atoi(argv[10]) : 10;
  if (v[0] < 1 || v[1] < 1 || v[2] < 1 || v[3] < 1 || v[4] < 1 || v[5] < 1 || v[6] < 0 || v[7] < 1 || pairs < 1 ||
      (precision != "fp32" && precision != "bf16")) {
    std::fprintf(stderr, "N C H W OUT KERNEL DILATION PAIRS are positive, PAD at least 0; the precision fp32 or bf16\n");
    return 2;
  }
  const DType dtype = precision == "bf16" ? DType::bf16 : DType::fp32;
  Conv2dConfig c{.input = Shape(v[0], v[1], v[2], v[3]), .out_channels = v[4], .kernel = Extent2{v[5]},
                 .stride = 1, .padding = Extent2{v[6]}, .bias = false, .dtype = dtype, .dilation = v[7]};
  const Shape out = c.output();
  const ConvBackwardData routes[] = {ConvBackwardData::primitive, ConvBackwardData::flipped};
  const auto backends = dlbench::bench::backend_per_route(
      routes, dtype, [](CpuBackend& backend, ConvBackwardData route) { backend.set_conv_backward_data(route); });
  if (backends.empty()) return 2;
  std::vector<ConvUnderTest> convs;
  for (const auto& backend : backends) {
    const std::size_t unit = dtype_size(dtype);
    ConvUnderTest t;
    t.dy = backend->allocate(static_cast<std::size_t>(out.numel()) * unit);
    std::fill_n(static_cast<std::byte*>(t.dy.get()), static_cast<std::size_t>(out.numel()) * unit, std::byte{0x3c});
    t.dx = backend->allocate(static_cast<std::size_t>(c.input.numel()) * unit);
    t.weight = backend->allocate(static_cast<std::size_t>(c.weight().numel()) * sizeof(float));
    t.op = backend->make_conv2d(c);
    convs.push_back(std::move(t));
  }
  const std::vector<double> ms = dlbench::bench::alternating_median_ms(
      std::size(routes), pairs,
      [&](std::size_t r, int pair) {
        float* w = static_cast<float*>(convs[r].weight.get());
        std::fill(w, w + c.weight().numel(), 0.01f * static_cast<float>(pair + 2));  // new values, as after an update
      },
      [&](std::size_t r) {
        ConvUnderTest& t = convs[r];
        const Tensor dy = tensor_on(t.dy, out, Layout::nhwc, dtype);
        Tensor dx = tensor_on(t.dx, c.input, Layout::nhwc, dtype);
        t.op->backward_data(dy, tensor_on(t.weight, c.weight(), Layout::plain, DType::fp32), dx);
        backends[r]->synchronize();
      });
  const double primitive = ms[0], flipped = ms[1];
  CpuBackend automatic;  // DLBENCH_CPU_CONV_BACKWARD_DATA, auto where unset
  std::printf("%s n%lld c%lld %lldx%lld out %lld k%lld pad %lld dilation %lld: primitive %.2f ms, flipped %.2f ms "
              "(%.2fx); auto takes %s with %s kernels\n",
              precision.c_str(), v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7], primitive, flipped,
              primitive / flipped,
              automatic.flips_input_gradient(c) ? "flipped" : "primitive",
              backends.front()->avx512_kernels() ? "AVX-512" : "AVX2");
  return 0;
}
