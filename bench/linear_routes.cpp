// Both ways the CPU backend can hand a linear layer its weights (worker/cpu/linear_weights.hpp),
// timed through the backend's own op: forward and backward-data of one layer shape, each route
// in turn (blocked, plain, blocked, ...), the weights rewritten between calls as an update
// would leave them. Prints the median milliseconds of a forward + backward-data pair for each
// route and which one the automatic rule takes. The weight gradient (the same matmul on both
// routes) is left out.
//
//   linear_routes ROWS IN OUT fp32|bf16 [PAIRS]      (threads: OMP_NUM_THREADS)
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

struct LinearUnderTest {
  std::shared_ptr<void> x, y, dy, dx, weight, bias;
  std::unique_ptr<LinearOp> op;
};

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5) {
    std::fprintf(stderr, "usage: %s ROWS IN OUT fp32|bf16 [PAIRS]\n", argv[0]);
    return 2;
  }
  const std::int64_t rows = std::atoll(argv[1]), in = std::atoll(argv[2]), out = std::atoll(argv[3]);
  const std::string precision = argv[4];
  const int pairs = argc > 5 ? std::atoi(argv[5]) : 10;
  if (rows < 1 || in < 1 || out < 1 || pairs < 1 || (precision != "fp32" && precision != "bf16")) {
    std::fprintf(stderr, "ROWS, IN, OUT and PAIRS are positive; the precision fp32 or bf16\n");
    return 2;
  }
  const DType dtype = precision == "bf16" ? DType::bf16 : DType::fp32;
  const LinearWeights routes[] = {LinearWeights::blocked, LinearWeights::plain};
  const auto backends = dlbench::bench::backend_per_route(
      routes, dtype, [](CpuBackend& backend, LinearWeights route) { backend.set_linear_weights(route); });
  if (backends.empty()) return 2;
  std::vector<LinearUnderTest> layers;
  for (const auto& backend : backends) {
    const std::size_t unit = dtype_size(dtype);
    LinearUnderTest l;
    l.x = backend->allocate(static_cast<std::size_t>(rows * in) * unit);
    l.dx = backend->allocate(static_cast<std::size_t>(rows * in) * unit);
    l.y = backend->allocate(static_cast<std::size_t>(rows * out) * unit);
    l.dy = backend->allocate(static_cast<std::size_t>(rows * out) * unit);
    l.weight = backend->allocate(static_cast<std::size_t>(out * in) * sizeof(float));
    l.bias = backend->allocate(static_cast<std::size_t>(out) * sizeof(float));
    l.op = backend->make_linear({rows, in, out, true, dtype});
    layers.push_back(std::move(l));
  }
  const std::vector<double> ms = dlbench::bench::alternating_median_ms(
      std::size(routes), pairs,
      [&](std::size_t r, int pair) {
        float* w = static_cast<float*>(layers[r].weight.get());
        std::fill(w, w + out * in, 0.01f * static_cast<float>(pair + 2));  // new values, as after an update
      },
      [&](std::size_t r) {
        LinearUnderTest& l = layers[r];
        const auto plain = [&](const std::shared_ptr<void>& memory, const Shape& shape, DType type) {
          return tensor_on(memory, shape, Layout::plain, type);
        };
        const Tensor x = plain(l.x, Shape(rows, in), dtype), dy = plain(l.dy, Shape(rows, out), dtype);
        Tensor y = plain(l.y, Shape(rows, out), dtype), dx = plain(l.dx, Shape(rows, in), dtype);
        const Tensor weight = plain(l.weight, Shape(out, in), DType::fp32), bias = plain(l.bias, Shape(out), DType::fp32);
        l.op->forward(x, weight, &bias, y);
        l.op->backward_data(dy, weight, dx);
        backends[r]->synchronize();
      });
  const double blocked = ms[0], plain = ms[1];
  const bool avx512 = backends.front()->avx512_kernels();
  std::printf("%s rows %lld in %lld out %lld: blocked %.2f ms, plain %.2f ms (%.2fx); auto takes %s with %s kernels\n",
              precision.c_str(), static_cast<long long>(rows), static_cast<long long>(in), static_cast<long long>(out),
              blocked, plain, blocked / plain,
              plain_weights(rows, in, dtype, LinearWeights::automatic, avx512) ? "plain" : "blocked",
              avx512 ? "AVX-512" : "AVX2");
  return 0;
}
