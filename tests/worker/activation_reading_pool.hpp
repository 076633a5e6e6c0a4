// A max pool whose backward finds the arg-max as cuDNN's does, by reading the forward's x and y
// again, on the CPU (fp32; NHWC or NCHW); average pools stay the backend's. `declares` says
// whether it tells the layer so (PoolOp::backward_reads_activations): the CUDA pool once did not,
// and gradients placed over its x and y were read as activations. Shared by the memory-plan and
// self-test tests, which must catch that.
#pragma once

#include <algorithm>
#include <limits>
#include <memory>
#include <vector>

#include "activation_index.hpp"
#include "delegating_backend.hpp"

namespace dlbench::worker {

class ActivationReadingPool final : public PoolOp {
 public:
  ActivationReadingPool(const PoolConfig& c, bool declares) : c_(c), declares_(declares) {}
  std::size_t workspace_bytes() const override { return 0; }
  bool backward_reads_activations() const override { return declares_; }
  void forward(const Tensor& x, Tensor& y, void*) override {
    for_each_window(x, y, [&](std::int64_t out, const std::vector<std::int64_t>& window) {
      float best = -std::numeric_limits<float>::infinity();
      for (const std::int64_t in : window) best = std::max(best, x.as<float>()[in]);
      y.as<float>()[out] = best;
    });
  }
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, const void*, Tensor& dx) override {
    std::fill(dx.as<float>(), dx.as<float>() + dx.numel(), 0.0f);
    for_each_window(x, y, [&](std::int64_t out, const std::vector<std::int64_t>& window) {
      for (const std::int64_t in : window) {
        if (x.as<float>()[in] == y.as<float>()[out]) {  // the first element equal to the maximum takes the gradient
          dx.as<float>()[in] += dy.as<float>()[out];
          break;
        }
      }
    });
  }

 private:
  template <typename F>
  void for_each_window(const Tensor& x, const Tensor& y, F&& visit) const {
    const bool nhwc = x.layout == Layout::nhwc;
    const ActivationGeometry in{x.shape.n(), x.shape.c(), x.shape.h(), x.shape.w(), nhwc};
    const ActivationGeometry out{y.shape.n(), y.shape.c(), y.shape.h(), y.shape.w(), nhwc};
    std::vector<std::int64_t> window;
    for (std::int64_t n = 0; n < out.n; ++n) {
      for (std::int64_t c = 0; c < out.c; ++c) {
        for (std::int64_t oy = 0; oy < out.h; ++oy) {
          for (std::int64_t ox = 0; ox < out.w; ++ox) {
            window.clear();
            for (std::int64_t ky = 0; ky < c_.kernel.h; ++ky) {
              for (std::int64_t kx = 0; kx < c_.kernel.w; ++kx) {
                const std::int64_t iy = oy * c_.stride - c_.padding + ky, ix = ox * c_.stride - c_.padding + kx;
                if (iy >= 0 && iy < in.h && ix >= 0 && ix < in.w) window.push_back(in.offset(n, c, iy * in.w + ix));
              }
            }
            visit(out.offset(n, c, oy * out.w + ox), window);
          }
        }
      }
    }
  }
  PoolConfig c_;
  bool declares_;
};

class ActivationReadingPoolBackend final : public DelegatingBackend {
 public:
  ActivationReadingPoolBackend(Backend& inner, bool declares) : DelegatingBackend(inner), declares_(declares) {}
  std::unique_ptr<PoolOp> make_pool(const PoolConfig& c) override {
    if (c.kind != PoolKind::max) return DelegatingBackend::make_pool(c);
    return std::make_unique<ActivationReadingPool>(c, declares_);
  }

 private:
  bool declares_;
};

}  // namespace dlbench::worker
