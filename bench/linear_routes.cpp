// Both ways the CPU backend can hand a linear layer its weights (worker/cpu/linear_weights.hpp),
// timed through the backend's own op: forward and backward-data of one layer shape, each route
// in turn (blocked, plain, blocked, ...), the weights rewritten between calls as an update
// would leave them. Prints the median milliseconds of a forward + backward-data pair for each
// route and which one the automatic rule takes. The weight gradient (the same matmul on both
// routes) is left out.
//
//   linear_routes ROWS IN OUT fp32|bf16 [PAIRS]      (threads: OMP_NUM_THREADS)
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "cpu/cpu_backend.hpp"
#include "layers/layer.hpp"

namespace {

using namespace dlbench::worker;

struct LinearUnderTest {
  std::shared_ptr<void> x, y, dy, dx, weight, bias;
  std::unique_ptr<LinearOp> op;
};

Tensor tensor(const std::shared_ptr<void>& memory, const Shape& shape, DType dtype) {
  Tensor t = activation(shape, Layout::plain, dtype);
  t.data = memory.get();
  return t;
}

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
  std::vector<std::unique_ptr<CpuBackend>> backends;
  std::vector<LinearUnderTest> layers;
  for (const LinearWeights route : routes) {
    auto backend = std::make_unique<CpuBackend>();
    if (const auto why = backend->cannot_compute(dtype)) {
      std::fprintf(stderr, "%s\n", why->c_str());
      return 2;
    }
    backend->set_linear_weights(route);
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
    backends.push_back(std::move(backend));
  }
  std::vector<std::vector<double>> ms(std::size(routes));
  for (int pair = -1; pair < pairs; ++pair) {  // pair -1 warms up
    for (std::size_t r = 0; r < std::size(routes); ++r) {
      LinearUnderTest& l = layers[r];
      float* w = static_cast<float*>(l.weight.get());
      std::fill(w, w + out * in, 0.01f * static_cast<float>(pair + 2));  // new values, as after an update
      const Tensor x = tensor(l.x, Shape(rows, in), dtype), dy = tensor(l.dy, Shape(rows, out), dtype);
      Tensor y = tensor(l.y, Shape(rows, out), dtype), dx = tensor(l.dx, Shape(rows, in), dtype);
      const Tensor weight = tensor(l.weight, Shape(out, in), DType::fp32), bias = tensor(l.bias, Shape(out), DType::fp32);
      const auto begin = std::chrono::steady_clock::now();
      l.op->forward(x, weight, &bias, y);
      l.op->backward_data(dy, weight, dx);
      backends[r]->synchronize();
      const double took = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
      if (pair >= 0) ms[r].push_back(took);
    }
  }
  const auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
  };
  const double blocked = median(ms[0]), plain = median(ms[1]);
  const bool avx512 = backends.front()->avx512_kernels();
  std::printf("%s rows %lld in %lld out %lld: blocked %.2f ms, plain %.2f ms (%.2fx); auto takes %s with %s kernels\n",
              precision.c_str(), static_cast<long long>(rows), static_cast<long long>(in), static_cast<long long>(out),
              blocked, plain, blocked / plain,
              plain_weights(rows, in, dtype, LinearWeights::automatic, avx512) ? "plain" : "blocked",
              avx512 ? "AVX-512" : "AVX2");
  return 0;
}
