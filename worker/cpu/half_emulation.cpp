#include "cpu/half_emulation.hpp"

#include <omp.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>

#include "host_memory.hpp"
#include "precision.hpp"

namespace dlbench::worker {
namespace {

// Conversions split across the backend's threads in runs of this many values:
// convert(first value, values in the run).
constexpr std::int64_t kConversionRun = 1 << 15;

template <typename Convert>
void in_runs(std::int64_t count, Convert&& convert) {
#pragma omp parallel for schedule(static)
  for (std::int64_t start = 0; start < count; start += kConversionRun) {
    convert(start, static_cast<std::size_t>(std::min(kConversionRun, count - start)));
  }
}

void widen(const std::uint16_t* from, std::int64_t count, float* out) {
  in_runs(count, [&](std::int64_t start, std::size_t run) { load_halves(from + start, run, out + start); });
}

void narrow(const float* from, std::int64_t count, std::uint16_t* out) {
  in_runs(count, [&](std::int64_t start, std::size_t run) { store_halves(from + start, run, out + start); });
}

// The tensors one call of an emulated op hands its fp32 op, each in its own scratch slot, and
// the fp16 tensors it rounds the results into when the op has run.
class HalfCall {
 public:
  explicit HalfCall(HalfScratch& scratch) : scratch_(scratch) {}
  HalfCall(const HalfCall&) = delete;
  HalfCall& operator=(const HalfCall&) = delete;

  // An fp16 activation the op reads, widened.
  Tensor in(const Tensor& t) {
    Tensor wide = slot_like(t);
    widen(static_cast<const std::uint16_t*>(t.data), t.numel(), static_cast<float*>(wide.data));
    return wide;
  }
  // Where the op writes what becomes fp16 tensor t (at finish()).
  Tensor out(Tensor& t) {
    Tensor wide = slot_like(t);
    results_.emplace_back(&t, wide);
    return wide;
  }
  // An fp16 tensor the op reads and writes: an accumulated gradient, a whole a slice goes into.
  Tensor in_out(Tensor& t) {
    Tensor wide = in(t);
    results_.emplace_back(&t, wide);
    return wide;
  }
  // An fp32 parameter as a half kernel reads it: its values rounded through fp16.
  Tensor rounded(const Tensor& t) {
    if (t.dtype != DType::fp32) throw std::logic_error("emulated fp16: a parameter " + t.shape.to_string() + " is not fp32");
    Tensor copy = t;
    copy.buffer = -1;
    copy.data = scratch_.slot(next_slot_++, t.numel());
    round_through_half(t.as<float>(), t.numel(), static_cast<float*>(copy.data));
    return copy;
  }
  // Rounds every result into its fp16 tensor.
  void finish() {
    for (auto& [half, wide] : results_) {
      narrow(static_cast<const float*>(wide.data), wide.numel(), static_cast<std::uint16_t*>(half->data));
    }
    results_.clear();
  }

 private:
  Tensor slot_like(const Tensor& t) {
    if (t.dtype != DType::fp16) {
      throw std::logic_error("emulated fp16: a " + std::string(to_string(t.dtype)) + " activation " +
                             t.shape.to_string() + " where fp16 was expected");
    }
    Tensor wide = t;
    wide.dtype = DType::fp32;
    wide.buffer = -1;
    wide.data = scratch_.slot(next_slot_++, t.numel());
    return wide;
  }

  HalfScratch& scratch_;
  std::size_t next_slot_ = 0;
  std::vector<std::pair<Tensor*, Tensor>> results_;
};

// An fp16 tensor the op says it does not read (a pool's x and y where oneDNN keeps the arg-max):
// handed on as fp32 without touching its memory, which the plan may have given to another tensor.
Tensor unread(const Tensor& t) {
  Tensor view = t;
  view.dtype = DType::fp32;
  return view;
}

// An emulated op: the fp32 op it runs, and the shapes most of its calls take.
template <typename Op>
class Emulating : public Op {
 public:
  Emulating(std::unique_ptr<Op> op, HalfScratch& scratch) : op_(std::move(op)), scratch_(scratch) {}

 protected:
  // y = compute(x), x and y fp16.
  template <typename Compute>
  void one_to_one(const Tensor& x, Tensor& y, Compute&& compute) {
    HalfCall call(scratch_);
    const Tensor wide_x = call.in(x);
    Tensor wide_y = call.out(y);
    compute(wide_x, wide_y);
    call.finish();
  }
  // y = compute(a, b), all three fp16.
  template <typename Compute>
  void two_to_one(const Tensor& a, const Tensor& b, Tensor& y, Compute&& compute) {
    HalfCall call(scratch_);
    const Tensor wide_a = call.in(a);
    const Tensor wide_b = call.in(b);
    Tensor wide_y = call.out(y);
    compute(wide_a, wide_b, wide_y);
    call.finish();
  }

  std::unique_ptr<Op> op_;
  HalfScratch& scratch_;
};

class HalfConv final : public Emulating<Conv2dOp> {
 public:
  using Emulating::Emulating;
  void forward(const Tensor& x, const Tensor& weight, const Tensor* bias, Tensor& y) override {
    HalfCall call(scratch_);
    Tensor wide_y = call.out(y);
    op_->forward(call.in(x), call.rounded(weight), bias, wide_y);  // cuDNN adds the fp32 bias
    call.finish();
  }
  void backward_data(const Tensor& dy, const Tensor& weight, Tensor& dx) override {
    HalfCall call(scratch_);
    Tensor wide_dx = call.out(dx);
    op_->backward_data(call.in(dy), call.rounded(weight), wide_dx);
    call.finish();
  }
  void backward_data_accumulate(const Tensor& dy, const Tensor& weight, Tensor& dx) override {
    HalfCall call(scratch_);
    Tensor wide_dx = call.in_out(dx);
    op_->backward_data_accumulate(call.in(dy), call.rounded(weight), wide_dx);
    call.finish();
  }
  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweight, Tensor* dbias) override {
    HalfCall call(scratch_);
    op_->backward_weights(call.in(x), call.in(dy), dweight, dbias);
    // cuDNN computes the filter gradient in the half type.
    round_through_half(dweight.as<float>(), dweight.numel(), dweight.as<float>());
  }
};

class HalfBatchNorm final : public Emulating<BatchNormOp> {
 public:
  using Emulating::Emulating;
  std::size_t workspace_bytes() const override { return op_->workspace_bytes(); }
  bool backward_reads_output() const override { return op_->backward_reads_output(); }
  void forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                        BatchNormStatistics& statistics, void* workspace) override {
    one_to_one(x, y, [&](const Tensor& wide_x, Tensor& wide_y) {
      op_->forward_training(wide_x, gamma, beta, wide_y, statistics, workspace);
    });
  }
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& gamma, const Tensor& beta,
                const BatchNormStatistics& statistics, Tensor& dx, Tensor& dgamma, Tensor& dbeta,
                const void* workspace) override {
    HalfCall call(scratch_);
    Tensor wide_dx = call.out(dx);
    op_->backward(call.in(x), output(call, y), call.in(dy), gamma, beta, statistics, wide_dx, dgamma, dbeta, workspace);
    call.finish();
  }
  void forward_training_add_relu(const Tensor& x, const Tensor& z, const Tensor& gamma, const Tensor& beta, Tensor& y,
                                 BatchNormStatistics& statistics, void* workspace) override {
    two_to_one(x, z, y, [&](const Tensor& wide_x, const Tensor& wide_z, Tensor& wide_y) {
      op_->forward_training_add_relu(wide_x, wide_z, gamma, beta, wide_y, statistics, workspace);
    });
  }
  void backward_add_relu(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& gamma, const Tensor& beta,
                         const BatchNormStatistics& statistics, Tensor& dx, Tensor& dz, Tensor& dgamma, Tensor& dbeta,
                         const void* workspace) override {
    HalfCall call(scratch_);
    Tensor wide_dx = call.out(dx);
    Tensor wide_dz = call.out(dz);
    op_->backward_add_relu(call.in(x), output(call, y), call.in(dy), gamma, beta, statistics, wide_dx, wide_dz, dgamma,
                           dbeta, workspace);
    call.finish();
  }

 private:
  Tensor output(HalfCall& call, const Tensor& y) const { return op_->backward_reads_output() ? call.in(y) : unread(y); }
};

class HalfRelu final : public Emulating<ReluOp> {
 public:
  using Emulating::Emulating;
  void forward(const Tensor& x, Tensor& y) override {
    one_to_one(x, y, [&](const Tensor& wide_x, Tensor& wide_y) { op_->forward(wide_x, wide_y); });
  }
  void backward(const Tensor& y, const Tensor& dy, Tensor& dx) override {
    two_to_one(y, dy, dx, [&](const Tensor& a, const Tensor& b, Tensor& c) { op_->backward(a, b, c); });
  }
};

class HalfPool final : public Emulating<PoolOp> {
 public:
  using Emulating::Emulating;
  std::size_t workspace_bytes() const override { return op_->workspace_bytes(); }
  bool backward_reads_activations() const override { return op_->backward_reads_activations(); }
  void forward(const Tensor& x, Tensor& y, void* workspace) override {
    one_to_one(x, y, [&](const Tensor& wide_x, Tensor& wide_y) { op_->forward(wide_x, wide_y, workspace); });
  }
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, const void* workspace, Tensor& dx) override {
    HalfCall call(scratch_);
    const bool reads = op_->backward_reads_activations();
    const Tensor wide_x = reads ? call.in(x) : unread(x);
    const Tensor wide_y = reads ? call.in(y) : unread(y);
    const Tensor wide_dy = call.in(dy);
    Tensor wide_dx = call.out(dx);
    op_->backward(wide_x, wide_y, wide_dy, workspace, wide_dx);
    call.finish();
  }
};

class HalfLinear final : public Emulating<LinearOp> {
 public:
  using Emulating::Emulating;
  void forward(const Tensor& x, const Tensor& weight, const Tensor* bias, Tensor& y) override {
    HalfCall call(scratch_);
    const Tensor wide_x = call.in(x);
    Tensor wide_y = call.out(y);
    const Tensor half_weight = call.rounded(weight);
    if (bias == nullptr) {
      op_->forward(wide_x, half_weight, nullptr, wide_y);
    } else {
      const Tensor half_bias = call.rounded(*bias);  // cuBLASLt's epilogue reads the rounded copy
      op_->forward(wide_x, half_weight, &half_bias, wide_y);
    }
    call.finish();
  }
  void backward_data(const Tensor& dy, const Tensor& weight, Tensor& dx) override {
    HalfCall call(scratch_);
    const Tensor wide_dy = call.in(dy);
    Tensor wide_dx = call.out(dx);
    op_->backward_data(wide_dy, call.rounded(weight), wide_dx);
    call.finish();
  }
  // dW and the bias gradient come out of cuBLASLt in fp32: not rounded.
  void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dweight, Tensor* dbias) override {
    HalfCall call(scratch_);
    const Tensor wide_x = call.in(x);
    op_->backward_weights(wide_x, call.in(dy), dweight, dbias);
  }
};

class HalfAdd final : public Emulating<AddOp> {
 public:
  using Emulating::Emulating;
  void forward(const Tensor& a, const Tensor& b, Tensor& y) override {
    two_to_one(a, b, y, [&](const Tensor& wide_a, const Tensor& wide_b, Tensor& wide_y) {
      op_->forward(wide_a, wide_b, wide_y);
    });
  }
};

// Reorders and axis swaps move values without computing: rounding them back is exact.
class HalfReorder final : public Emulating<ReorderOp> {
 public:
  using Emulating::Emulating;
  void run(const Tensor& x, Tensor& y) override {
    one_to_one(x, y, [&](const Tensor& wide_x, Tensor& wide_y) { op_->run(wide_x, wide_y); });
  }
};

class HalfSwapAxes final : public Emulating<SwapAxesOp> {
 public:
  using Emulating::Emulating;
  void run(const Tensor& x, Tensor& y) override {
    one_to_one(x, y, [&](const Tensor& wide_x, Tensor& wide_y) { op_->run(wide_x, wide_y); });
  }
};

class HalfChannelSlice final : public Emulating<ChannelSliceOp> {
 public:
  using Emulating::Emulating;
  // The whole's other channels stay as they are: it is read as well as written.
  void insert(const Tensor& part, Tensor& whole) override {
    HalfCall call(scratch_);
    const Tensor wide_part = call.in(part);
    Tensor wide_whole = call.in_out(whole);
    op_->insert(wide_part, wide_whole);
    call.finish();
  }
  void extract(const Tensor& whole, Tensor& part) override {
    one_to_one(whole, part, [&](const Tensor& wide_whole, Tensor& wide_part) { op_->extract(wide_whole, wide_part); });
  }
};

class HalfResize final : public Emulating<ResizeOp> {
 public:
  using Emulating::Emulating;
  void forward(const Tensor& x, Tensor& y) override {
    one_to_one(x, y, [&](const Tensor& wide_x, Tensor& wide_y) { op_->forward(wide_x, wide_y); });
  }
  void backward(const Tensor& dy, Tensor& dx) override {
    one_to_one(dy, dx, [&](const Tensor& wide_dy, Tensor& wide_dx) { op_->backward(wide_dy, wide_dx); });
  }
};

class HalfBatchedMatmul final : public Emulating<BatchedMatmulOp> {
 public:
  using Emulating::Emulating;
  void run(const Tensor& a, const Tensor& b, Tensor& c) override {
    two_to_one(a, b, c, [&](const Tensor& wide_a, const Tensor& wide_b, Tensor& wide_c) {
      op_->run(wide_a, wide_b, wide_c);
    });
  }
};

class HalfLayerNorm final : public Emulating<LayerNormOp> {
 public:
  using Emulating::Emulating;
  void forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& mean,
               Tensor& variance) override {
    one_to_one(x, y, [&](const Tensor& wide_x, Tensor& wide_y) {
      op_->forward(wide_x, gamma, beta, wide_y, mean, variance);
    });
  }
  void backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& beta, const Tensor& mean,
                const Tensor& variance, Tensor& dx, Tensor& dgamma, Tensor& dbeta) override {
    two_to_one(x, dy, dx, [&](const Tensor& wide_x, const Tensor& wide_dy, Tensor& wide_dx) {
      op_->backward(wide_x, wide_dy, gamma, beta, mean, variance, wide_dx, dgamma, dbeta);
    });
  }
};

class HalfSoftmax final : public Emulating<SoftmaxOp> {
 public:
  using Emulating::Emulating;
  void forward(const Tensor& x, Tensor& y, RowLengths lengths) override {
    one_to_one(x, y, [&](const Tensor& wide_x, Tensor& wide_y) { op_->forward(wide_x, wide_y, lengths); });
  }
  void backward(const Tensor& y, const Tensor& dy, Tensor& dx) override {
    two_to_one(y, dy, dx, [&](const Tensor& a, const Tensor& b, Tensor& c) { op_->backward(a, b, c); });
  }
};

class HalfActivation final : public Emulating<ActivationOp> {
 public:
  using Emulating::Emulating;
  void forward(const Tensor& x, Tensor& y) override {
    one_to_one(x, y, [&](const Tensor& wide_x, Tensor& wide_y) { op_->forward(wide_x, wide_y); });
  }
  void backward(const Tensor& x, const Tensor& dy, Tensor& dx) override {
    two_to_one(x, dy, dx, [&](const Tensor& a, const Tensor& b, Tensor& c) { op_->backward(a, b, c); });
  }
};

class HalfAttention final : public Emulating<AttentionOp> {
 public:
  using Emulating::Emulating;
  void forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& context, Tensor& statistics, float dropout,
               std::uint64_t layer_seed, const std::int32_t* real_tokens) override {
    HalfCall call(scratch_);
    const Tensor wide_q = call.in(q);
    const Tensor wide_k = call.in(k);
    const Tensor wide_v = call.in(v);
    Tensor wide_context = call.out(context);
    op_->forward(wide_q, wide_k, wide_v, wide_context, statistics, dropout, layer_seed, real_tokens);
    call.finish();
  }
  void backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dcontext, const Tensor& statistics,
                float dropout, std::uint64_t layer_seed, const std::int32_t* real_tokens, Tensor& dq, Tensor& dk,
                Tensor& dv) override {
    HalfCall call(scratch_);
    const Tensor wide_q = call.in(q);
    const Tensor wide_k = call.in(k);
    const Tensor wide_v = call.in(v);
    const Tensor wide_dcontext = call.in(dcontext);
    Tensor wide_dq = call.out(dq);
    Tensor wide_dk = call.out(dk);
    Tensor wide_dv = call.out(dv);
    op_->backward(wide_q, wide_k, wide_v, wide_dcontext, statistics, dropout, layer_seed, real_tokens, wide_dq, wide_dk,
                  wide_dv);
    call.finish();
  }
};

}  // namespace

float* HalfScratch::slot(std::size_t index, std::int64_t elements) {
  if (index >= slots_.size()) slots_.resize(index + 1);
  Buffer& buffer = slots_[index];
  if (elements > buffer.elements) {
    buffer.values = zeroed_large_memory(static_cast<std::size_t>(elements) * sizeof(float));
    buffer.elements = elements;
  }
  return static_cast<float*>(buffer.values.get());
}

void round_through_half(const float* from, std::int64_t count, float* out) {
  constexpr std::size_t kPiece = 2048;  // halves on the stack at a time
  in_runs(count, [&](std::int64_t start, std::size_t run) {
    std::uint16_t halves[kPiece];
    for (std::size_t done = 0; done < run; done += kPiece) {
      const std::size_t piece = std::min(kPiece, run - done);
      const auto at = static_cast<std::size_t>(start) + done;
      store_halves(from + at, piece, halves);
      load_halves(halves, piece, out + at);
    }
  });
}

std::unique_ptr<Conv2dOp> emulate_half(std::unique_ptr<Conv2dOp> op, HalfScratch& scratch) {
  return std::make_unique<HalfConv>(std::move(op), scratch);
}
std::unique_ptr<BatchNormOp> emulate_half(std::unique_ptr<BatchNormOp> op, HalfScratch& scratch) {
  return std::make_unique<HalfBatchNorm>(std::move(op), scratch);
}
std::unique_ptr<ReluOp> emulate_half(std::unique_ptr<ReluOp> op, HalfScratch& scratch) {
  return std::make_unique<HalfRelu>(std::move(op), scratch);
}
std::unique_ptr<PoolOp> emulate_half(std::unique_ptr<PoolOp> op, HalfScratch& scratch) {
  return std::make_unique<HalfPool>(std::move(op), scratch);
}
std::unique_ptr<LinearOp> emulate_half(std::unique_ptr<LinearOp> op, HalfScratch& scratch) {
  return std::make_unique<HalfLinear>(std::move(op), scratch);
}
std::unique_ptr<AddOp> emulate_half(std::unique_ptr<AddOp> op, HalfScratch& scratch) {
  return std::make_unique<HalfAdd>(std::move(op), scratch);
}
std::unique_ptr<ReorderOp> emulate_half(std::unique_ptr<ReorderOp> op, HalfScratch& scratch) {
  return std::make_unique<HalfReorder>(std::move(op), scratch);
}
std::unique_ptr<ChannelSliceOp> emulate_half(std::unique_ptr<ChannelSliceOp> op, HalfScratch& scratch) {
  return std::make_unique<HalfChannelSlice>(std::move(op), scratch);
}
std::unique_ptr<ResizeOp> emulate_half(std::unique_ptr<ResizeOp> op, HalfScratch& scratch) {
  return std::make_unique<HalfResize>(std::move(op), scratch);
}
std::unique_ptr<BatchedMatmulOp> emulate_half(std::unique_ptr<BatchedMatmulOp> op, HalfScratch& scratch) {
  return std::make_unique<HalfBatchedMatmul>(std::move(op), scratch);
}
std::unique_ptr<LayerNormOp> emulate_half(std::unique_ptr<LayerNormOp> op, HalfScratch& scratch) {
  return std::make_unique<HalfLayerNorm>(std::move(op), scratch);
}
std::unique_ptr<SoftmaxOp> emulate_half(std::unique_ptr<SoftmaxOp> op, HalfScratch& scratch) {
  return std::make_unique<HalfSoftmax>(std::move(op), scratch);
}
std::unique_ptr<ActivationOp> emulate_half(std::unique_ptr<ActivationOp> op, HalfScratch& scratch) {
  return std::make_unique<HalfActivation>(std::move(op), scratch);
}
std::unique_ptr<SwapAxesOp> emulate_half(std::unique_ptr<SwapAxesOp> op, HalfScratch& scratch) {
  return std::make_unique<HalfSwapAxes>(std::move(op), scratch);
}
std::unique_ptr<AttentionOp> emulate_half(std::unique_ptr<AttentionOp> op, HalfScratch& scratch) {
  if (op == nullptr) return nullptr;  // no fused attention here: the layer composes it
  return std::make_unique<HalfAttention>(std::move(op), scratch);
}

}  // namespace dlbench::worker
