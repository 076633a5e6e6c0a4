// Parts the transformer layers are built from. Each transformer layer takes one tick: its whole
// forward runs at t and its whole backward at t's mirror, so its buffers are of three kinds:
// kept from forward for backward (`keep`), used within forward (`forward_only`) and used within
// backward (`backward_only`); the last two share memory with other layers' of the same kind.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "layers/layer.hpp"

namespace dlbench::worker {

// (rows, features) activations in the compute dtype.
inline Tensor matrix(std::int64_t rows, std::int64_t features, DType dtype) {
  return activation(Shape(rows, features), Layout::plain, dtype);
}

inline void keep(SetupContext& ctx, Tensor& t, Tick tick) {
  ctx.arena.request(t, tick);
  ctx.arena.read(t, tick.mirrored());
}
inline void forward_only(SetupContext& ctx, Tensor& t, Tick tick) {
  ctx.arena.request(t, tick);
  ctx.arena.read(t, tick);
}
inline void backward_only(SetupContext& ctx, Tensor& t, Tick tick) {
  ctx.arena.request(t, tick.mirrored());
  ctx.arena.read(t, tick.mirrored());
}

// A constant int32 index array on the device, rows[i] = row_of(i) for i < count, filled once at
// setup: the rows an embedding or a gather reads every step (position ids, first tokens).
class ConstantRows {
 public:
  template <typename RowOf>
  void fill(Backend& backend, std::int64_t count, RowOf row_of) {
    std::vector<std::int32_t> host(static_cast<std::size_t>(count));
    for (std::size_t i = 0; i < host.size(); ++i) host[i] = static_cast<std::int32_t>(row_of(static_cast<std::int64_t>(i)));
    memory_ = backend.allocate(host.size() * sizeof(std::int32_t));
    backend.copy_from_host(memory_.get(), host.data(), host.size() * sizeof(std::int32_t));
  }
  const std::int32_t* get() const { return static_cast<const std::int32_t*>(memory_.get()); }

 private:
  std::shared_ptr<void> memory_;
};

// y = x Wᵀ + b with W (out, in) as torch.nn.Linear, BERT's initialisation N(0, std²) and zero bias.
class Dense {
 public:
  Dense(const std::string& name, std::int64_t in, std::int64_t out, float init_std) : in_(in), out_(out) {
    weight_ = make_parameter(name + ".weight", Shape(out, in), ParameterInit::normal, in, out);
    weight_.init_std = init_std;
    bias_ = make_parameter(name + ".bias", Shape(out), ParameterInit::zeros, in, out);
  }
  void collect(std::vector<Parameter*>& out) {
    out.push_back(&weight_);
    out.push_back(&bias_);
  }
  void setup(Backend& backend, std::int64_t rows, DType dtype) {
    rows_ = rows;
    op_ = backend.make_linear({rows, in_, out_, true, dtype});
  }
  void forward(const Tensor& x, Tensor& y) { op_->forward(x, weight_.value, &bias_.value, y); }
  // Weight gradients, then dx unless it is null.
  void backward(const Tensor& x, const Tensor& dy, Tensor* dx, const StepContext& ctx) {
    op_->backward_weights(x, dy, weight_.grad, &bias_.grad);
    ctx.notify({&weight_, &bias_});
    if (dx != nullptr) op_->backward_data(dy, weight_.value, *dx);
  }
  double macs() const { return static_cast<double>(rows_ * in_ * out_); }
  std::int64_t out_features() const { return out_; }

 private:
  std::int64_t in_, out_, rows_ = 0;
  Parameter weight_, bias_;
  std::unique_ptr<LinearOp> op_;
};

// torch.nn.LayerNorm(features): scale 1, shift 0 to start; keeps its input's statistics.
class LayerNorm {
 public:
  LayerNorm(const std::string& name, std::int64_t features, float epsilon) : features_(features), epsilon_(epsilon) {
    gamma_ = make_parameter(name + ".weight", Shape(features), ParameterInit::ones);
    beta_ = make_parameter(name + ".bias", Shape(features), ParameterInit::zeros);
  }
  void collect(std::vector<Parameter*>& out) {
    out.push_back(&gamma_);
    out.push_back(&beta_);
  }
  void setup(SetupContext& ctx, std::int64_t rows, DType dtype, Tick tick) {
    op_ = ctx.backend.make_layer_norm({rows, features_, epsilon_, dtype});
    mean_ = matrix(rows, 1, DType::fp32);
    mean_.shape = Shape(rows);
    variance_ = mean_;
    keep(ctx, mean_, tick);
    keep(ctx, variance_, tick);
  }
  void forward(const Tensor& x, Tensor& y) { op_->forward(x, gamma_.value, beta_.value, y, mean_, variance_); }
  void backward(const Tensor& x, const Tensor& dy, Tensor& dx, const StepContext& ctx) {
    op_->backward(x, dy, gamma_.value, beta_.value, mean_, variance_, dx, gamma_.grad, beta_.grad);
    ctx.notify({&gamma_, &beta_});
  }

 private:
  std::int64_t features_;
  float epsilon_;
  Parameter gamma_, beta_;
  std::unique_ptr<LayerNormOp> op_;
  Tensor mean_, variance_;
};

}  // namespace dlbench::worker
