// What the route benchmarks share (linear_routes, conv_backward_data): a CPU backend per route,
// tensors over the buffers they allocate, and the timing loop that runs each route's call in
// turn, pair after pair, so that the machine's drift falls on every route alike.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <memory>
#include <vector>

#include "cpu/cpu_backend.hpp"
#include "layers/layer.hpp"

namespace dlbench::bench {

// A tensor over `memory` (an op's buffer the benchmark allocated).
inline worker::Tensor tensor_on(const std::shared_ptr<void>& memory, const worker::Shape& shape, worker::Layout layout,
                                worker::DType dtype) {
  worker::Tensor t = worker::activation(shape, layout, dtype);
  t.data = memory.get();
  return t;
}

// A CPU backend per route, each given its route by `set(backend, route)`; empty, having said why,
// where this CPU cannot compute `dtype`.
template <typename Route, std::size_t N, typename Set>
std::vector<std::unique_ptr<worker::CpuBackend>> backend_per_route(const Route (&routes)[N], worker::DType dtype,
                                                                   Set&& set) {
  std::vector<std::unique_ptr<worker::CpuBackend>> backends;
  for (const Route route : routes) {
    auto backend = std::make_unique<worker::CpuBackend>();
    if (const auto why = backend->cannot_compute(dtype)) {
      std::fprintf(stderr, "%s\n", why->c_str());
      return {};
    }
    set(*backend, route);
    backends.push_back(std::move(backend));
  }
  return backends;
}

// `prepare(route, pair)` (untimed: new weights, as an update would leave them), then
// `run(route)` (timed, to the device's end), for every route, `pairs` + 1 times: the first pass
// warms up. Returns each route's median milliseconds.
template <typename Prepare, typename Run>
std::vector<double> alternating_median_ms(std::size_t routes, int pairs, Prepare&& prepare, Run&& run) {
  std::vector<std::vector<double>> ms(routes);
  for (int pair = -1; pair < pairs; ++pair) {
    for (std::size_t r = 0; r < routes; ++r) {
      prepare(r, pair);
      const auto begin = std::chrono::steady_clock::now();
      run(r);
      const double took = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
      if (pair >= 0) ms[r].push_back(took);
    }
  }
  std::vector<double> medians;
  for (auto& m : ms) {
    std::sort(m.begin(), m.end());
    medians.push_back(m[m.size() / 2]);
  }
  return medians;
}

}  // namespace dlbench::bench
