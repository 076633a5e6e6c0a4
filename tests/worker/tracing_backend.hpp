// A Backend that runs another and records, call by call, which memory each call touches.
// With every buffer in its own memory (MemoryReuse::none) the trace says when each buffer is
// really used, which is what a memory plan must respect.
#pragma once

#include <memory>
#include <utility>
#include <vector>

#include "backend.hpp"

namespace dlbench::worker {

class TracingBackend final : public Backend {
 public:
  explicit TracingBackend(Backend& inner) : inner_(inner) {}

  // One entry per call, in order: the addresses it reads or writes.
  std::vector<std::vector<const void*>> calls;
  // False: layers see a backend that fuses nothing (their unfused paths run on the same kernels).
  bool allow_fusion = true;

  std::string name() const override { return inner_.name(); }
  Layout activation_layout() const override { return inner_.activation_layout(); }
  std::string version_info() const override { return inner_.version_info(); }
  std::optional<std::string> cannot_compute(DType d) const override { return inner_.cannot_compute(d); }
  std::shared_ptr<void> allocate(std::size_t bytes) override { return inner_.allocate(bytes); }
  void copy_from_host(void* dst, const void* src, std::size_t bytes) override {
    record({dst});
    inner_.copy_from_host(dst, src, bytes);
  }
  void copy_to_host(void* dst, const void* src, std::size_t bytes) override {
    record({src});
    inner_.copy_to_host(dst, src, bytes);
  }
  void poison(void* dst, std::size_t bytes) override { inner_.poison(dst, bytes); }  // not a use
  void synchronize() override { inner_.synchronize(); }

  std::unique_ptr<Conv2dOp> make_conv2d(const Conv2dConfig& c) override {
    return std::make_unique<Conv>(*this, inner_.make_conv2d(c));
  }
  std::unique_ptr<LinearOp> make_linear(const LinearConfig& c) override {
    return std::make_unique<Weighted<LinearOp>>(*this, inner_.make_linear(c));
  }
  bool fuses_batch_norm_relu() const override { return allow_fusion && inner_.fuses_batch_norm_relu(); }
  bool fuses_batch_norm_add_relu() const override { return allow_fusion && inner_.fuses_batch_norm_add_relu(); }
  bool accumulates_conv_input_grad() const override { return allow_fusion && inner_.accumulates_conv_input_grad(); }
  std::unique_ptr<BatchNormOp> make_batch_norm(const BatchNormConfig& c) override {
    return std::make_unique<BatchNorm>(*this, inner_.make_batch_norm(c));
  }
  std::unique_ptr<FusedConv2dOp> make_fused_conv2d(const FusedConv2dConfig& c) override {
    if (!allow_fusion) return nullptr;
    std::unique_ptr<FusedConv2dOp> op = inner_.make_fused_conv2d(c);
    if (!op) return nullptr;
    return std::make_unique<FusedConv>(*this, std::move(op));
  }
  std::unique_ptr<ReluOp> make_relu(const Shape& s, DType d) override {
    return std::make_unique<Relu>(*this, inner_.make_relu(s, d));
  }
  std::unique_ptr<PoolOp> make_pool(const PoolConfig& c) override { return std::make_unique<Pool>(*this, inner_.make_pool(c)); }
  std::unique_ptr<AddOp> make_add(const Shape& s, DType d) override {
    return std::make_unique<Add>(*this, inner_.make_add(s, d));
  }
  std::unique_ptr<ReorderOp> make_reorder(const Shape& s, DType d, Layout from, Layout to) override {
    return std::make_unique<Reorder>(*this, inner_.make_reorder(s, d, from, to));
  }
  std::unique_ptr<ChannelSliceOp> make_channel_slice(const Shape& part, std::int64_t whole_channels,
                                                     std::int64_t offset, DType d) override {
    return std::make_unique<ChannelSlice>(*this, inner_.make_channel_slice(part, whole_channels, offset, d));
  }
  std::unique_ptr<ResizeOp> make_bilinear_resize(const ResizeConfig& c) override {
    return std::make_unique<Resize>(*this, inner_.make_bilinear_resize(c));
  }

  void unscale_and_check_finite(float* grads, std::int64_t count, LossScaleState* state,
                                const LossScalingConfig& config) override {
    record({grads});
    inner_.unscale_and_check_finite(grads, count, state, config);
  }
  void adaptive_avg_pool_forward(const Tensor& x, Tensor& y) override {
    record({x.data, y.data});
    inner_.adaptive_avg_pool_forward(x, y);
  }
  void adaptive_avg_pool_backward(const Tensor& dy, Tensor& dx) override {
    record({dy.data, dx.data});
    inner_.adaptive_avg_pool_backward(dy, dx);
  }
  void begin_step(std::uint64_t step) override { inner_.begin_step(step); }
  void dropout_forward(const Tensor& x, Tensor& y, float p, std::uint64_t seed) override {
    record({x.data, y.data});
    inner_.dropout_forward(x, y, p, seed);
  }
  void dropout_backward(const Tensor& dy, Tensor& dx, float p, std::uint64_t seed) override {
    record({dy.data, dx.data});
    inner_.dropout_backward(dy, dx, p, seed);
  }
  void dropout_mask(Tensor& mask, float p, std::uint64_t seed) override {
    record({mask.data});
    inner_.dropout_mask(mask, p, seed);
  }
  void softmax_cross_entropy(const Tensor& logits, const std::int32_t* labels, Tensor& dlogits,
                             const float* gradient_scale, LossTerm term) override {
    record({logits.data, labels, dlogits.data});
    inner_.softmax_cross_entropy(logits, labels, dlogits, gradient_scale, term);
  }
  float last_loss() override { return inner_.last_loss(); }
  void sgd_update(float* values, const float* grads, float* momentum_buffer, std::int64_t count, const SgdConfig& config,
                  std::uint64_t update_number, const LossScaleState* loss_scale) override {
    record({values, grads, momentum_buffer});
    inner_.sgd_update(values, grads, momentum_buffer, count, config, update_number, loss_scale);
  }

 private:
  void record(std::vector<const void*> addresses) { calls.push_back(std::move(addresses)); }

  template <typename Interface>
  class Weighted : public Interface {
   public:
    Weighted(TracingBackend& t, std::unique_ptr<Interface> op) : t_(t), op_(std::move(op)) {}
    void forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) override {
      t_.record({x.data, w.data, y.data});
      op_->forward(x, w, b, y);
    }
    void backward_data(const Tensor& dy, const Tensor& w, Tensor& dx) override {
      t_.record({dy.data, w.data, dx.data});
      op_->backward_data(dy, w, dx);
    }
    void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* db) override {
      t_.record({x.data, dy.data, dw.data});
      op_->backward_weights(x, dy, dw, db);
    }

   protected:
    TracingBackend& t_;
    std::unique_ptr<Interface> op_;
  };

  // A convolution is a weighted op that may also accumulate its input gradient.
  class Conv final : public Weighted<Conv2dOp> {
   public:
    using Weighted<Conv2dOp>::Weighted;
    void backward_data_accumulate(const Tensor& dy, const Tensor& w, Tensor& dx) override {
      t_.record({dy.data, w.data, dx.data});
      op_->backward_data_accumulate(dy, w, dx);
    }
  };

  class BatchNorm final : public BatchNormOp {
   public:
    BatchNorm(TracingBackend& t, std::unique_ptr<BatchNormOp> op) : t_(t), op_(std::move(op)) {}
    std::size_t workspace_bytes() const override { return op_->workspace_bytes(); }
    void forward_training(const Tensor& x, const Tensor& g, const Tensor& b, Tensor& y, BatchNormStatistics& s,
                          void* ws) override {
      t_.record({x.data, y.data, s.mean.data, s.spread.data, s.running_mean.data, s.running_var.data, ws});
      op_->forward_training(x, g, b, y, s, ws);
    }
    bool backward_reads_output() const override { return op_->backward_reads_output(); }
    void backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& g, const Tensor& b,
                  const BatchNormStatistics& s, Tensor& dx, Tensor& dg, Tensor& db, const void* ws) override {
      if (op_->backward_reads_output()) {
        t_.record({x.data, y.data, dy.data, s.mean.data, s.spread.data, dx.data, ws});
      } else {
        t_.record({x.data, dy.data, s.mean.data, s.spread.data, dx.data, ws});
      }
      op_->backward(x, y, dy, g, b, s, dx, dg, db, ws);
    }
    void forward_training_add_relu(const Tensor& x, const Tensor& z, const Tensor& g, const Tensor& b, Tensor& y,
                                   BatchNormStatistics& s, void* ws) override {
      t_.record({x.data, z.data, y.data, s.mean.data, s.spread.data, s.running_mean.data, s.running_var.data, ws,
                 s.sums.data});
      op_->forward_training_add_relu(x, z, g, b, y, s, ws);
    }
    void backward_add_relu(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& g, const Tensor& b,
                           const BatchNormStatistics& s, Tensor& dx, Tensor& dz, Tensor& dg, Tensor& db,
                           const void* ws) override {
      t_.record({x.data, y.data, dy.data, s.mean.data, s.spread.data, dx.data, dz.data, ws});
      op_->backward_add_relu(x, y, dy, g, b, s, dx, dz, dg, db, ws);
    }

    void forward_deferred(const Tensor& sums, const Tensor& g, const Tensor& b, Tensor& scale_shift,
                          BatchNormStatistics& s) override {
      t_.record({sums.data, scale_shift.data, s.mean.data, s.spread.data, s.running_mean.data, s.running_var.data});
      op_->forward_deferred(sums, g, b, scale_shift, s);
    }
    void backward_deferred(const Tensor& x, const Tensor& dy, const Tensor& g, const Tensor& b,
                           const BatchNormStatistics& s, Tensor& dx, Tensor& dg, Tensor& db) override {
      t_.record({x.data, dy.data, s.mean.data, s.spread.data, dx.data});
      op_->backward_deferred(x, dy, g, b, s, dx, dg, db);
    }
    void backward_deferred_apply(const Tensor& x, const Tensor& masked, const Tensor& k, Tensor& dx) override {
      t_.record({x.data, masked.data, k.data, dx.data});
      op_->backward_deferred_apply(x, masked, k, dx);
    }

   private:
    TracingBackend& t_;
    std::unique_ptr<BatchNormOp> op_;
  };

  class FusedConv final : public FusedConv2dOp {
   public:
    FusedConv(TracingBackend& t, std::unique_ptr<FusedConv2dOp> op) : t_(t), op_(std::move(op)) {}
    void forward(const Tensor& x, const Tensor* scale_shift, const Tensor& w, Tensor& y, Tensor* sums) override {
      t_.record({x.data, scale_shift != nullptr ? scale_shift->data : nullptr, w.data, y.data,
                 sums != nullptr ? sums->data : nullptr});
      op_->forward(x, scale_shift, w, y, sums);
    }
    void backward_weights(const Tensor& x, const Tensor* scale_shift, const Tensor& dy, Tensor& dw) override {
      t_.record({x.data, scale_shift != nullptr ? scale_shift->data : nullptr, dy.data, dw.data});
      op_->backward_weights(x, scale_shift, dy, dw);
    }
    bool fuses_input_batch_norm_gradients() const override { return op_->fuses_input_batch_norm_gradients(); }
    void backward_data_batch_norm(const Tensor& dy, const Tensor& w, const Tensor& x, const BatchNormStatistics& s,
                                  const Tensor& g, const Tensor& b, Tensor& masked, Tensor& dg, Tensor& db,
                                  Tensor& k) override {
      t_.record({dy.data, w.data, x.data, s.mean.data, s.spread.data, masked.data, k.data});
      op_->backward_data_batch_norm(dy, w, x, s, g, b, masked, dg, db, k);
    }

   private:
    TracingBackend& t_;
    std::unique_ptr<FusedConv2dOp> op_;
  };

  class Relu final : public ReluOp {
   public:
    Relu(TracingBackend& t, std::unique_ptr<ReluOp> op) : t_(t), op_(std::move(op)) {}
    void forward(const Tensor& x, Tensor& y) override {
      t_.record({x.data, y.data});
      op_->forward(x, y);
    }
    void backward(const Tensor& y, const Tensor& dy, Tensor& dx) override {
      t_.record({y.data, dy.data, dx.data});
      op_->backward(y, dy, dx);
    }

   private:
    TracingBackend& t_;
    std::unique_ptr<ReluOp> op_;
  };

  class Pool final : public PoolOp {
   public:
    Pool(TracingBackend& t, std::unique_ptr<PoolOp> op) : t_(t), op_(std::move(op)) {}
    std::size_t workspace_bytes() const override { return op_->workspace_bytes(); }
    bool backward_reads_activations() const override { return op_->backward_reads_activations(); }
    void forward(const Tensor& x, Tensor& y, void* workspace) override {
      t_.record({x.data, y.data, workspace});
      op_->forward(x, y, workspace);
    }
    void backward(const Tensor& x, const Tensor& y, const Tensor& dy, const void* workspace, Tensor& dx) override {
      if (op_->backward_reads_activations()) {
        t_.record({x.data, y.data, dy.data, workspace, dx.data});
      } else {
        t_.record({dy.data, workspace, dx.data});
      }
      op_->backward(x, y, dy, workspace, dx);
    }

   private:
    TracingBackend& t_;
    std::unique_ptr<PoolOp> op_;
  };

  class Reorder final : public ReorderOp {
   public:
    Reorder(TracingBackend& t, std::unique_ptr<ReorderOp> op) : t_(t), op_(std::move(op)) {}
    void run(const Tensor& x, Tensor& y) override {
      t_.record({x.data, y.data});
      op_->run(x, y);
    }

   private:
    TracingBackend& t_;
    std::unique_ptr<ReorderOp> op_;
  };

  class ChannelSlice final : public ChannelSliceOp {
   public:
    ChannelSlice(TracingBackend& t, std::unique_ptr<ChannelSliceOp> op) : t_(t), op_(std::move(op)) {}
    void insert(const Tensor& part, Tensor& whole) override {
      t_.record({part.data, whole.data});
      op_->insert(part, whole);
    }
    void extract(const Tensor& whole, Tensor& part) override {
      t_.record({whole.data, part.data});
      op_->extract(whole, part);
    }

   private:
    TracingBackend& t_;
    std::unique_ptr<ChannelSliceOp> op_;
  };

  class Resize final : public ResizeOp {
   public:
    Resize(TracingBackend& t, std::unique_ptr<ResizeOp> op) : t_(t), op_(std::move(op)) {}
    void forward(const Tensor& x, Tensor& y) override {
      t_.record({x.data, y.data});
      op_->forward(x, y);
    }
    void backward(const Tensor& dy, Tensor& dx) override {
      t_.record({dy.data, dx.data});
      op_->backward(dy, dx);
    }

   private:
    TracingBackend& t_;
    std::unique_ptr<ResizeOp> op_;
  };

  class Add final : public AddOp {
   public:
    Add(TracingBackend& t, std::unique_ptr<AddOp> op) : t_(t), op_(std::move(op)) {}
    void forward(const Tensor& a, const Tensor& b, Tensor& y) override {
      t_.record({a.data, b.data, y.data});
      op_->forward(a, b, y);
    }

   private:
    TracingBackend& t_;
    std::unique_ptr<AddOp> op_;
  };

  Backend& inner_;
};

}  // namespace dlbench::worker
