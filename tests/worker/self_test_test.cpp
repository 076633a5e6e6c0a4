// The self-test harness on the CPU: it passes a backend that computes right, and it catches
// one that does not — a convolution a little off, an overflow check that sees nothing, a
// communicator that does not sum — naming the check, while the other checks still pass.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "cpu/cpu_backend.hpp"
#include "activation_reading_pool.hpp"
#include "delegating_backend.hpp"
#include "residual_composing_backend.hpp"
#include "self_test.hpp"

namespace dlbench::worker {
namespace {

using ::testing::HasSubstr;

struct OwnCpuBackend {
  CpuBackend cpu{2};
};

// The CPU backend with chosen faults.
class FaultyBackend final : private OwnCpuBackend, public DelegatingBackend {
 public:
  FaultyBackend() : DelegatingBackend(cpu) {}
  bool conv_off = false;        // convolution outputs 0.1% too large
  bool dilated_conv_off = false;     // ... only the dilated ones (DeepLabV3+'s)
  bool factorised_conv_off = false;  // ... only those with a 1×n or n×1 kernel (InceptionV3's)
  bool blind_overflow = false;  // unscale_and_check_finite never sees an inf or NaN
  bool blind_count = false;     // count_non_finite never sees one either (a count kernel that reads nothing)
  bool layer_norm_off = false;  // layer normalization outputs 0.1% too large
  bool frozen_adamw_step = false;  // AdamW corrects every update as the first (a frozen graph's)
  bool rounding_noise = false;  // linear and batched-matmul outputs off by up to one ulp (another GPU's sums)
  int conv_noise_ulps = 0;  // convolutions' outputs and gradients off by up to this many ulps (other sums)
  bool undeclared_pool_reads = false;  // max pools read x and y in backward without saying so (the CUDA pool's bug)
  bool pool_gradient_lost = false;     // max pools' backward writes zeros (a wrong index is off as much)
  bool fp16_emulated = false;          // amp runs, fp16 emulated (DLBENCH_CPU_FP16=emulated)
  bool fuses_residual = false;  // bottlenecks add and ReLU inside their last batch norm (cuDNN's BN_ADD_ACTIVATION)
  bool accumulates = false;     // bottlenecks add a branch's input gradient into the other's in a conv's backward
  // Bottlenecks' convolutions fused with the batch norms between them (the host's composition,
  // cpu/conv_batch_norm.hpp), every one but those with stride 2 (a device whose engines do not run
  // some), and those fused ones' outputs 0.1% too large.
  bool fuses_conv_batch_norm = false;
  bool fused_conv_off = false;
  bool fused_gradients_off = false;  // ... or its batch norm's dβ, taken in the data gradient, 1% too large
  bool fused_forward_only = false;   // fused-forward: no data gradient takes its batch norm's gradients
  // Only the first backend made fuses; the later ones' route is fused all the same, but no engine
  // runs a fused graph (as an H200 fuses every block in amp and none in bf16).
  bool fuses_in_first_backend_only = false;
  bool engines_refuse = false;
  // Filter gradients (embedding gradients) off by up to an ulp that changes from call to call, as
  // sums added in the order a GPU schedules them do: a second training gives other bits.
  bool conv_varies = false;
  bool scatter_varies = false;
  bool declares_varying_convs = false;  // nondeterministic_convolutions says why
  // The fifth SGD update (the self-test's trainings' last, after their last loss) leaves weights
  // an ulp off that change from call to call: only the weights can tell a second training apart.
  bool last_update_varies = false;
  std::shared_ptr<std::uint64_t> calls = std::make_shared<std::uint64_t>(0);  // the varying noise's seeds
  bool fused_attention = false;  // attention as the CPU's fused op (DLBENCH_CPU_ATTENTION=fused)
  bool attention_off = false;    // ... whose dK comes out 1% too large
  bool attends_to_padding = false;  // attention's softmax (either route) over every token, padding included
  double relu_ties = -1;         // step-sized ReLUs zero their smallest positive outputs: this fraction (0: one)
  // Making a layer norm faults the device for the rest of the process (a CUDA kernel's misaligned
  // address poisons its context): shared with the backends made from this one.
  bool layer_norm_loses_device = false;
  std::shared_ptr<std::optional<std::string>> lost = std::make_shared<std::optional<std::string>>();

  std::optional<std::string> device_lost() const override { return *lost; }

  std::string name() const override { return "faulty"; }
  bool fuses_batch_norm_add_relu() const override { return fuses_residual; }
  // A ReLU that ties runs apart from its batch norm (make_relu), as on a device that does not fuse it.
  bool fuses_batch_norm_relu() const override { return relu_ties < 0 && inner_.fuses_batch_norm_relu(); }
  bool accumulates_conv_input_grad() const override { return accumulates; }
  std::map<std::string, std::string> options() const override {
    auto options = inner_.options();
    options["convBatchNorm"] = !fuses_conv_batch_norm ? "separate" : fused_forward_only ? "fused-forward" : "fused";
    return options;
  }
  std::unique_ptr<FusedConv2dOp> make_fused_conv2d(const FusedConv2dConfig& asked) override {
    if (!fuses_conv_batch_norm || asked.conv.stride != 1 || engines_refuse) return nullptr;
    FusedConv2dConfig c = asked;
    c.input_batch_norm_gradients = c.input_batch_norm_gradients && !fused_forward_only;
    auto op = make_host_fused_conv2d(inner_, c);
    if (!fused_conv_off && !fused_gradients_off) return op;
    return std::make_unique<OffFusedConv>(std::move(op), fused_conv_off, fused_gradients_off);
  }
  std::optional<std::string> nondeterministic_convolutions() const override {
    if (!declares_varying_convs) return std::nullopt;
    return "its filter gradients are summed in the order the device schedules";
  }
  void scatter_add_rows(const Tensor& dy, const std::int32_t* rows, std::int64_t n, Tensor& table_grad) override {
    inner_.scatter_add_rows(dy, rows, n, table_grad);
    if (scatter_varies) add_varying_noise(table_grad, (*calls)++);
  }
  std::unique_ptr<BatchNormOp> make_batch_norm(const BatchNormConfig& c) override {
    return make_composed_batch_norm(inner_, c);
  }
  std::unique_ptr<PoolOp> make_pool(const PoolConfig& c) override {
    if (undeclared_pool_reads && c.kind == PoolKind::max) return std::make_unique<ActivationReadingPool>(c, false);
    if (pool_gradient_lost && c.kind == PoolKind::max) return std::make_unique<LostGradientPool>(inner_, inner_.make_pool(c));
    return inner_.make_pool(c);
  }
  void emulate_fp16() { cpu.set_fp16(CpuFp16::emulated); }
  std::unique_ptr<Conv2dOp> make_conv2d(const Conv2dConfig& c) override {
    std::unique_ptr<Conv2dOp> op;
    if (accumulates) {
      op = std::make_unique<ComposedConvAccumulate>(inner_, c);
    } else {
      op = inner_.make_conv2d(c);
    }
    if (conv_noise_ulps > 0) op = std::make_unique<NoisyConv>(std::move(op), conv_noise_ulps);
    if (conv_varies) op = std::make_unique<VaryingConv>(std::move(op), calls);
    const bool off = conv_off || (dilated_conv_off && c.dilation > 1) || (factorised_conv_off && c.kernel.h != c.kernel.w);
    if (!off) return op;
    return std::make_unique<OffConv>(std::move(op));
  }
  std::unique_ptr<LinearOp> make_linear(const LinearConfig& c) override {
    auto op = inner_.make_linear(c);
    if (!rounding_noise) return op;
    return std::make_unique<NoisyLinear>(std::move(op));
  }
  std::unique_ptr<BatchedMatmulOp> make_batched_matmul(const BatchedMatmulConfig& c) override {
    auto op = inner_.make_batched_matmul(c);
    if (!rounding_noise) return op;
    return std::make_unique<NoisyMatmul>(std::move(op));
  }
  std::unique_ptr<AttentionOp> make_fused_attention(const AttentionConfig& c) override {
    cpu.set_attention_route(fused_attention ? AttentionRoute::fused : AttentionRoute::composed);
    auto op = inner_.make_fused_attention(c);
    if (!op || (!attention_off && !attends_to_padding)) return op;
    return std::make_unique<OffAttention>(std::move(op), attention_off);
  }
  std::unique_ptr<SoftmaxOp> make_softmax(std::int64_t rows, std::int64_t columns, DType dtype) override {
    auto op = inner_.make_softmax(rows, columns, dtype);
    if (!attends_to_padding) return op;
    return std::make_unique<WholeRowSoftmax>(std::move(op));
  }
  std::unique_ptr<ReluOp> make_relu(const Shape& shape, DType dtype) override {
    auto op = inner_.make_relu(shape, dtype);
    if (relu_ties < 0) return op;
    return std::make_unique<TieFlippingRelu>(std::move(op), relu_ties);
  }
  std::unique_ptr<LayerNormOp> make_layer_norm(const LayerNormConfig& c) override {
    if (layer_norm_loses_device) {
      *lost = "cudaErrorMisalignedAddress: misaligned address";
      throw std::runtime_error("cuda_backend.cpp:389: CUDA: cudaMemcpyAsync(...): misaligned address");
    }
    auto op = inner_.make_layer_norm(c);
    if (!layer_norm_off) return op;
    return std::make_unique<OffLayerNorm>(std::move(op));
  }
  void sgd_update(float* values, const float* grads, float* momentum_buffer, std::int64_t count,
                  const SgdConfig& config, std::uint64_t update_number, const LossScaleState* loss_scale) override {
    inner_.sgd_update(values, grads, momentum_buffer, count, config, update_number, loss_scale);
    if (last_update_varies && update_number == 5) add_varying_noise(values, count, (*calls)++);
  }
  void adamw_update(float* values, float* grads, float* first, float* second, std::int64_t count,
                    const std::vector<ParameterRange>& ranges, const AdamWConfig& config,
                    std::uint64_t update_number, const LossScaleState* loss_scale) override {
    inner_.adamw_update(values, grads, first, second, count, ranges, config, frozen_adamw_step ? 1 : update_number,
                        loss_scale);
  }
  // The state is in host memory here: a blind check moves it on as if every gradient were finite.
  NonFiniteCount count_non_finite(const Tensor& t) override {
    return blind_count ? NonFiniteCount{} : inner_.count_non_finite(t);
  }
  void unscale_and_check_finite(float* g, std::int64_t n, LossScaleState* state, const LossScalingConfig& c) override {
    LossScaleState before = *state;
    inner_.unscale_and_check_finite(g, n, state, c);
    if (blind_overflow) {
      next_loss_scale(before, true, c.growth_factor, c.backoff_factor, c.growth_interval);
      *state = before;
    }
  }

 private:
  // dK 1% too large (`off`), or the padding attended to (`off` false: real_tokens dropped).
  class OffAttention final : public AttentionOp {
   public:
    OffAttention(std::unique_ptr<AttentionOp> op, bool off) : op_(std::move(op)), off_(off) {}
    void forward(const Tensor& q, const Tensor& k, const Tensor& v, Tensor& context, Tensor& statistics, float p,
                 std::uint64_t seed, const std::int32_t* real_tokens) override {
      op_->forward(q, k, v, context, statistics, p, seed, off_ ? real_tokens : nullptr);
    }
    void backward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& dcontext, const Tensor& statistics,
                  float p, std::uint64_t seed, const std::int32_t* real_tokens, Tensor& dq, Tensor& dk,
                  Tensor& dv) override {
      op_->backward(q, k, v, dcontext, statistics, p, seed, off_ ? real_tokens : nullptr, dq, dk, dv);
      if (!off_ || dk.dtype != DType::fp32) return;
      for (std::int64_t i = 0; i < dk.numel(); ++i) dk.as<float>()[i] *= 1.01f;
    }

   private:
    std::unique_ptr<AttentionOp> op_;
    bool off_;
  };
  class WholeRowSoftmax final : public SoftmaxOp {
   public:
    explicit WholeRowSoftmax(std::unique_ptr<SoftmaxOp> op) : op_(std::move(op)) {}
    void forward(const Tensor& x, Tensor& y, RowLengths) override { op_->forward(x, y, RowLengths{}); }
    void backward(const Tensor& y, const Tensor& dy, Tensor& dx) override { op_->backward(y, dy, dx); }

   private:
    std::unique_ptr<SoftmaxOp> op_;
  };
  class OffFusedConv final : public FusedConv2dOp {
   public:
    OffFusedConv(std::unique_ptr<FusedConv2dOp> op, bool output_off, bool gradients_off)
        : op_(std::move(op)), output_off_(output_off), gradients_off_(gradients_off) {}
    void forward(const Tensor& x, const Tensor* ss, const Tensor& w, Tensor& y, Tensor* sums) override {
      op_->forward(x, ss, w, y, sums);
      if (!output_off_ || y.dtype != DType::fp32) return;
      for (std::int64_t i = 0; i < y.numel(); ++i) y.as<float>()[i] *= 1.001f;
    }
    void backward_weights(const Tensor& x, const Tensor* ss, const Tensor& dy, Tensor& dw) override {
      op_->backward_weights(x, ss, dy, dw);
    }
    bool fuses_input_batch_norm_gradients() const override { return op_->fuses_input_batch_norm_gradients(); }
    void backward_data_batch_norm(const Tensor& dy, const Tensor& w, const Tensor& x, const BatchNormStatistics& s,
                                  const Tensor& g, const Tensor& b, Tensor& masked, Tensor& dg, Tensor& db,
                                  Tensor& k) override {
      op_->backward_data_batch_norm(dy, w, x, s, g, b, masked, dg, db, k);
      if (!gradients_off_) return;
      for (std::int64_t i = 0; i < db.numel(); ++i) db.as<float>()[i] *= 1.01f;
    }

   private:
    std::unique_ptr<FusedConv2dOp> op_;
    bool output_off_, gradients_off_;
  };
  class LostGradientPool final : public PoolOp {
   public:
    LostGradientPool(Backend& backend, std::unique_ptr<PoolOp> op) : backend_(backend), op_(std::move(op)) {}
    std::size_t workspace_bytes() const override { return op_->workspace_bytes(); }
    bool backward_reads_activations() const override { return op_->backward_reads_activations(); }
    void forward(const Tensor& x, Tensor& y, void* workspace) override { op_->forward(x, y, workspace); }
    void backward(const Tensor&, const Tensor&, const Tensor&, const void*, Tensor& dx) override { backend_.fill_zero(dx); }

   private:
    Backend& backend_;
    std::unique_ptr<PoolOp> op_;
  };
  class OffConv final : public Conv2dOp {
   public:
    explicit OffConv(std::unique_ptr<Conv2dOp> op) : op_(std::move(op)) {}
    void forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) override {
      op_->forward(x, w, b, y);
      if (y.dtype != DType::fp32) return;
      for (std::int64_t i = 0; i < y.numel(); ++i) y.as<float>()[i] *= 1.001f;
    }
    void backward_data(const Tensor& dy, const Tensor& w, Tensor& dx) override { op_->backward_data(dy, w, dx); }
    void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* db) override {
      op_->backward_weights(x, dy, dw, db);
    }

   private:
    std::unique_ptr<Conv2dOp> op_;
  };
  // Each value moved by -ulps to +ulps ulps, by a fixed pattern of its index.
  static void add_rounding_noise(Tensor& y, int ulps = 1) {
    if (y.dtype != DType::fp32) return;
    float* v = y.as<float>();
    for (std::int64_t i = 0; i < y.numel(); ++i) {
      const auto step = static_cast<int>((static_cast<std::uint64_t>(i) * 2654435761u >> 7) %
                                         static_cast<std::uint64_t>(2 * ulps + 1)) - ulps;
      for (int k = 0; k < std::abs(step); ++k) v[i] = std::nextafter(v[i], step > 0 ? INFINITY : -INFINITY);
    }
  }
  // Every value off by -1, 0 or 1 ulp, drawn anew for each seed.
  static void add_varying_noise(Tensor& t, std::uint64_t seed) {
    if (t.dtype == DType::fp32) add_varying_noise(t.as<float>(), t.numel(), seed);
  }
  static void add_varying_noise(float* v, std::int64_t n, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    for (std::int64_t i = 0; i < n; ++i) {
      const std::uint64_t draw = rng() % 3;
      if (draw != 1) v[i] = std::nextafter(v[i], draw == 0 ? -INFINITY : INFINITY);
    }
  }
  // A convolution whose filter gradient is summed in another order each call.
  class VaryingConv final : public Conv2dOp {
   public:
    VaryingConv(std::unique_ptr<Conv2dOp> op, std::shared_ptr<std::uint64_t> calls)
        : op_(std::move(op)), calls_(std::move(calls)) {}
    void forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) override { op_->forward(x, w, b, y); }
    void backward_data(const Tensor& dy, const Tensor& w, Tensor& dx) override { op_->backward_data(dy, w, dx); }
    void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* db) override {
      op_->backward_weights(x, dy, dw, db);
      add_varying_noise(dw, (*calls_)++);
    }

   private:
    std::unique_ptr<Conv2dOp> op_;
    std::shared_ptr<std::uint64_t> calls_;
  };
  // A convolution whose sums come out in another order: every output off by up to `ulps`.
  class NoisyConv final : public Conv2dOp {
   public:
    NoisyConv(std::unique_ptr<Conv2dOp> op, int ulps) : op_(std::move(op)), ulps_(ulps) {}
    void forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) override {
      op_->forward(x, w, b, y);
      add_rounding_noise(y, ulps_);
    }
    void backward_data(const Tensor& dy, const Tensor& w, Tensor& dx) override {
      op_->backward_data(dy, w, dx);
      add_rounding_noise(dx, ulps_);
    }
    void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* db) override {
      op_->backward_weights(x, dy, dw, db);
      add_rounding_noise(dw, ulps_);
      if (db != nullptr) add_rounding_noise(*db, ulps_);
    }

   private:
    std::unique_ptr<Conv2dOp> op_;
    int ulps_;
  };
  class NoisyLinear final : public LinearOp {
   public:
    explicit NoisyLinear(std::unique_ptr<LinearOp> op) : op_(std::move(op)) {}
    void forward(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y) override {
      op_->forward(x, w, b, y);
      add_rounding_noise(y);
    }
    void backward_data(const Tensor& dy, const Tensor& w, Tensor& dx) override {
      op_->backward_data(dy, w, dx);
      add_rounding_noise(dx);
    }
    void backward_weights(const Tensor& x, const Tensor& dy, Tensor& dw, Tensor* db) override {
      op_->backward_weights(x, dy, dw, db);
      add_rounding_noise(dw);
    }

   private:
    std::unique_ptr<LinearOp> op_;
  };
  class NoisyMatmul final : public BatchedMatmulOp {
   public:
    explicit NoisyMatmul(std::unique_ptr<BatchedMatmulOp> op) : op_(std::move(op)) {}
    void run(const Tensor& a, const Tensor& b, Tensor& c) override {
      op_->run(a, b, c);
      add_rounding_noise(c);
    }

   private:
    std::unique_ptr<BatchedMatmulOp> op_;
  };
  // A ReLU over a map of at most 4×4 pixels and more than 10,000 elements (DeepLabV3+'s ASPP
  // branches at 64×64 images, not a layer check's) that zeroes the `fraction` smallest positive
  // outputs (0: one), as a device whose pre-activations came out a rounding below zero there
  // would, and masks backward by its own output, as every ReLU does.
  class TieFlippingRelu final : public ReluOp {
   public:
    TieFlippingRelu(std::unique_ptr<ReluOp> op, double fraction) : op_(std::move(op)), fraction_(fraction) {}
    void forward(const Tensor& x, Tensor& y) override {
      op_->forward(x, y);
      if (y.dtype != DType::fp32 || y.numel() <= 10'000 || y.shape.h() > 4) return;
      float* v = y.as<float>();
      std::vector<std::int64_t> positive;
      for (std::int64_t i = 0; i < y.numel(); ++i) {
        if (v[i] > 0.0f) positive.push_back(i);
      }
      const auto count = std::max<std::size_t>(1, static_cast<std::size_t>(fraction_ * static_cast<double>(y.numel())));
      if (positive.size() < count) return;
      std::nth_element(positive.begin(), positive.begin() + static_cast<std::ptrdiff_t>(count - 1), positive.end(),
                       [&](std::int64_t a, std::int64_t b) { return v[a] < v[b]; });
      for (std::size_t k = 0; k < count; ++k) v[positive[k]] = 0.0f;
    }
    void backward(const Tensor& y, const Tensor& dy, Tensor& dx) override { op_->backward(y, dy, dx); }

   private:
    std::unique_ptr<ReluOp> op_;
    double fraction_;
  };
  class OffLayerNorm final : public LayerNormOp {
   public:
    explicit OffLayerNorm(std::unique_ptr<LayerNormOp> op) : op_(std::move(op)) {}
    void forward(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y, Tensor& mean,
                 Tensor& variance) override {
      op_->forward(x, gamma, beta, y, mean, variance);
      if (y.dtype != DType::fp32) return;
      for (std::int64_t i = 0; i < y.numel(); ++i) y.as<float>()[i] *= 1.001f;
    }
    void backward(const Tensor& x, const Tensor& dy, const Tensor& gamma, const Tensor& beta, const Tensor& mean,
                  const Tensor& variance, Tensor& dx, Tensor& dgamma, Tensor& dbeta) override {
      op_->backward(x, dy, gamma, beta, mean, variance, dx, dgamma, dbeta);
    }

   private:
    std::unique_ptr<LayerNormOp> op_;
  };
};

// Two ranks as seen from rank 0: the other rank holds twice rank 0's values (what (rank + 1)
// patterns give), and `broken` drops its contribution.
class TwoRanks final : public Communicator {
 public:
  bool broken = false;
  std::string name() const override { return "fake"; }
  int rank() const override { return 0; }
  int size() const override { return 2; }
  std::vector<std::string> allgather(const std::string& mine) override { return {mine, "b"}; }
  void broadcast(float*, std::int64_t, int) override {}
  void start_allreduce(float* data, std::int64_t count, Reduction) override {
    if (!broken) std::transform(data, data + count, data, [](float v) { return 3.0f * v; });
  }
  void progress() override {}
  void complete_reductions() override {}
  void max(double* data, std::int64_t count) override {
    // The other rank's values: rank 1, and -1 for the negated one.
    if (count == 2) data[0] = std::max(data[0], 1.0);
  }
};

std::vector<SelfTestCheck> run_on(FaultyBackend& subject_backend, Communicator& comm,
                                  std::vector<Precision> precisions = {Precision::fp32},
                                  std::vector<Model> models = {}, std::vector<std::string> chosen = {}) {
  CpuBackend reference(2);
  int made = 0;
  SelfTestSubject subject{subject_backend, [&](Precision) -> std::unique_ptr<Backend> {
                            auto b = std::make_unique<FaultyBackend>();
                            const bool first = made++ == 0;
                            b->conv_off = subject_backend.conv_off;
                            b->dilated_conv_off = subject_backend.dilated_conv_off;
                            b->factorised_conv_off = subject_backend.factorised_conv_off;
                            b->blind_overflow = subject_backend.blind_overflow;
                            b->blind_count = subject_backend.blind_count;
                            b->layer_norm_off = subject_backend.layer_norm_off;
                            b->frozen_adamw_step = subject_backend.frozen_adamw_step;
                            b->rounding_noise = subject_backend.rounding_noise;
                            b->undeclared_pool_reads = subject_backend.undeclared_pool_reads;
                            b->pool_gradient_lost = subject_backend.pool_gradient_lost;
                            if (subject_backend.fp16_emulated) b->emulate_fp16();
                            b->conv_noise_ulps = subject_backend.conv_noise_ulps;
                            b->fuses_residual = subject_backend.fuses_residual;
                            b->accumulates = subject_backend.accumulates;
                            b->fuses_conv_batch_norm = subject_backend.fuses_conv_batch_norm;
                            b->engines_refuse = subject_backend.fuses_in_first_backend_only && !first;
                            b->fused_conv_off = subject_backend.fused_conv_off;
                            b->fused_gradients_off = subject_backend.fused_gradients_off;
                            b->fused_forward_only = subject_backend.fused_forward_only;
                            b->conv_varies = subject_backend.conv_varies;
                            b->scatter_varies = subject_backend.scatter_varies;
                            b->declares_varying_convs = subject_backend.declares_varying_convs;
                            b->last_update_varies = subject_backend.last_update_varies;
                            b->calls = subject_backend.calls;
                            b->fused_attention = subject_backend.fused_attention;
                            b->attention_off = subject_backend.attention_off;
                            b->attends_to_padding = subject_backend.attends_to_padding;
                            b->layer_norm_loses_device = subject_backend.layer_norm_loses_device;
                            b->relu_ties = subject_backend.relu_ties;
                            b->lost = subject_backend.lost;
                            return b;
                          },
                          std::move(precisions), std::move(models), std::move(chosen)};
  return run_self_test(subject, reference, comm);
}

std::vector<std::string> failed_names(const std::vector<SelfTestCheck>& checks) {
  std::vector<std::string> names;
  for (const auto& c : checks) {
    if (c.outcome == CheckOutcome::failed) names.push_back(c.precision + " " + c.name);
  }
  return names;
}

TEST(SelfTest, ACorrectBackendPassesEveryCheck) {
  FaultyBackend backend;
  NoCommunicator one;
  const auto checks = run_on(backend, one);
  EXPECT_THAT(failed_names(checks), ::testing::IsEmpty());
  // 16 layers, the loss, layer norm at BERT-base's width, the encoder layer at two shapes, BERT on whole and on
  // padded sequences, training, the
  // whole ResNet-50 step, the memory plan, run to run; SGD, AdamW, LAMB, unscaling, loss scaling; the
  // communicator.
  EXPECT_EQ(checks.size(), 33u);
  for (const auto& c : checks) EXPECT_LE(c.error, c.bound == 0 ? 0.0 : c.bound) << c.name;
}

// A fault that loses the device (on a GPU, a kernel's misaligned address poisons the process's CUDA
// context) fails its own check; every later one is then skipped naming it, in this precision and
// the next and among the precision-independent checks, instead of failing with its error (an
// H200's self-test once reported 13 failures for one such fault).
TEST(SelfTest, AfterTheDeviceIsLostTheRestIsSkippedNamingTheCheckThatLostIt) {
  FaultyBackend backend;
  backend.layer_norm_loses_device = true;
  NoCommunicator one;
  const auto checks = run_on(backend, one, {Precision::fp32, Precision::fp32});
  const std::string lost_in = "layer norm, 256 rows of 768 (bert-base's width)";
  EXPECT_THAT(failed_names(checks), ::testing::ElementsAre("fp32 " + lost_in));
  const auto at = std::find_if(checks.begin(), checks.end(), [&](const SelfTestCheck& c) { return c.name == lost_in; });
  ASSERT_NE(at, checks.end());
  EXPECT_THAT(at->detail, HasSubstr("misaligned address"));
  for (auto c = checks.begin(); c != at; ++c) EXPECT_EQ(c->outcome, CheckOutcome::passed) << c->name;
  ASSERT_GT(checks.end() - at, 3) << "the premise: checks come after the lost one";
  for (auto c = at + 1; c != checks.end(); ++c) {
    EXPECT_EQ(c->outcome, CheckOutcome::skipped) << c->precision << " " << c->name;
    EXPECT_THAT(c->detail, HasSubstr("not run: the device was lost in \"fp32 " + lost_in +
                                     "\" (cudaErrorMisalignedAddress: misaligned address)"));
  }
  // The second precision's checks are one line, and the precision-independent ones each their own.
  EXPECT_TRUE(std::any_of(at + 1, checks.end(), [](const SelfTestCheck& c) { return c.name == "every check"; }));
  EXPECT_TRUE(std::any_of(at + 1, checks.end(), [](const SelfTestCheck& c) { return c.name == "sgd update"; }));
}

// A device whose attention is one fused op passes; one whose fused op's dK is 1% off fails the two
// encoder-layer checks, which name it, and BERT's training check.
TEST(SelfTest, FusedAttentionPassesAndAFusedOpOffFailsTheEncoderLayerChecks) {
  NoCommunicator one;
  FaultyBackend fused;
  fused.fused_attention = true;
  EXPECT_THAT(failed_names(run_on(fused, one)), ::testing::IsEmpty());
  FaultyBackend off;
  off.fused_attention = true;
  off.attention_off = true;
  const auto checks = run_on(off, one);
  EXPECT_THAT(failed_names(checks), ::testing::IsSupersetOf({"fp32 transformer encoder layer",
                                                             "fp32 transformer encoder layer, heads of 32 over 40 tokens"}));
  for (const auto& c : checks) {
    if (c.name.starts_with("transformer encoder layer")) {
      EXPECT_THAT(c.detail, HasSubstr("gradient")) << c.name;
    }
    if (c.name == "linear" || c.name.starts_with("layer norm")) {
      EXPECT_EQ(c.outcome, CheckOutcome::passed) << c.name;
    }
  }
}

// A device whose attention looks past a sequence's real tokens (real data's padding) passes every
// check on whole sequences and fails the padded BERT's, on either attention route.
TEST(SelfTest, AttentionThatLooksAtThePaddingFailsThePaddedBertCheck) {
  NoCommunicator one;
  for (const bool fused : {false, true}) {
    FaultyBackend backend;
    backend.fused_attention = fused;
    backend.attends_to_padding = true;
    EXPECT_THAT(failed_names(run_on(backend, one)), ::testing::ElementsAre("fp32 padded bert, 5 AdamW steps"))
        << (fused ? "fused" : "composed");
  }
}

// A device that fuses each bottleneck's add and ReLU into its last batch norm runs other layers
// than the CPU's: the whole-step check's reference runs the same ones, composed from its own ops.
TEST(SelfTest, ADeviceThatFusesTheResidualIntoBatchNormPassesEveryCheck) {
  FaultyBackend backend;
  backend.fuses_residual = true;
  NoCommunicator one;
  const auto checks = run_on(backend, one);
  EXPECT_THAT(failed_names(checks), ::testing::IsEmpty());
  EXPECT_EQ(checks.size(), 33u);
}

// A device whose bottlenecks add one branch's input gradient into the other's in a convolution's
// backward (with the residual add fused too, as amp would run): the reference composes the same.
TEST(SelfTest, ADeviceThatAccumulatesBranchGradientsInAConvolutionPassesEveryCheck) {
  for (const bool fused : {false, true}) {
    FaultyBackend backend;
    backend.fuses_residual = fused;
    backend.accumulates = true;
    NoCommunicator one;
    const auto checks = run_on(backend, one);
    EXPECT_THAT(failed_names(checks), ::testing::IsEmpty()) << (fused ? "residual fused" : "residual apart");
    EXPECT_EQ(checks.size(), 33u);
  }
}

// A device that fuses bottlenecks' convolutions with the batch norms between them runs other layers
// than the CPU's (bn1 and bn2 deferred, no normalised tensor): the reference composes the same for
// each block the device says it fuses (here not the strided ones), alone and as amp runs on a GPU
// (the residual fused, the branch gradients accumulated), with the data gradients taking bn1's and
// bn2's gradients (fused) and without (fused-forward). A fused convolution 0.1% off fails the whole
// step naming the first block's first convolution; a batch norm's dβ 1% off in the data gradient
// that took it names that batch norm's gradients.
TEST(SelfTest, ADeviceThatFusesConvolutionsWithBatchNormsPassesAndAFusedOneOffIsNamed) {
  NoCommunicator one;
  for (const bool as_amp_runs : {false, true}) {
    for (const bool forward_only : {false, true}) {
      FaultyBackend backend;
      backend.fuses_conv_batch_norm = true;
      backend.fuses_residual = as_amp_runs;
      backend.accumulates = as_amp_runs;
      backend.fused_forward_only = forward_only;
      const auto checks = run_on(backend, one);
      EXPECT_THAT(failed_names(checks), ::testing::IsEmpty())
          << (as_amp_runs ? "as amp runs" : "alone") << (forward_only ? ", forward only" : "");
      EXPECT_EQ(checks.size(), 33u);
    }
  }
  FaultyBackend gradients_off;
  gradients_off.fuses_conv_batch_norm = true;
  gradients_off.fused_gradients_off = true;
  const auto gradient_checks = run_on(gradients_off, one);
  EXPECT_THAT(failed_names(gradient_checks),
              ::testing::Contains("fp32 resnet50 step, each layer fed the reference's input"));
  for (const auto& c : gradient_checks) {
    if (c.name.starts_with("resnet50 step")) {
      EXPECT_THAT(c.detail, ::testing::StartsWith("first off: gradients of layer1.0.bn1:")) << c.detail;
    }
  }
  FaultyBackend off;
  off.fuses_conv_batch_norm = true;
  off.fused_conv_off = true;
  const auto checks = run_on(off, one);
  EXPECT_THAT(failed_names(checks), ::testing::Contains("fp32 resnet50 step, each layer fed the reference's input"));
  for (const auto& c : checks) {
    if (c.name.starts_with("resnet50 step")) {
      EXPECT_THAT(c.detail, ::testing::StartsWith("first off: layer1.0.conv1 (Conv2d) forward")) << c.detail;
    }
  }
}

// A device fuses in one precision and not in the next (an H200: every block in amp, none in
// bf16). The next precision's step is compared with a reference composed as that precision's
// device answers, not with the first's: reused, bf16's "fused" self-test failed on an H200 with
// layer1.0.bn1 off by 0.96 though every op was right.
TEST(SelfTest, AReferenceStepIsComposedAsEachPrecisionsDeviceFuses) {
  NoCommunicator one;
  FaultyBackend backend;
  backend.fuses_conv_batch_norm = true;
  backend.fuses_in_first_backend_only = true;
  const auto checks = run_on(backend, one, {Precision::fp32, Precision::fp32});
  EXPECT_THAT(failed_names(checks), ::testing::IsEmpty());
  int steps = 0;
  for (const auto& c : checks) steps += c.name.starts_with("resnet50 step") && c.outcome == CheckOutcome::passed;
  EXPECT_EQ(steps, 2);
}

// A correct GPU rounds differently: one-ulp noise in every matmul's result (what another
// summation order gives) must pass every check, BERT's AdamW steps included (AdamW divides by
// the gradient's own size, so noise in near-zero gradients becomes whole-size updates).
TEST(SelfTest, RoundingNoiseOfAnotherSummationOrderPasses) {
  FaultyBackend backend;
  backend.rounding_noise = true;
  NoCommunicator one;
  const auto checks = run_on(backend, one);
  EXPECT_THAT(failed_names(checks), ::testing::IsEmpty());
  for (const auto& c : checks) {
    if (c.name == "transformer encoder layer" || c.name.starts_with("bert pretraining") || c.name == "linear") {
      EXPECT_GT(c.error, 0.0) << c.name << ": the noise did not reach it";
      EXPECT_LT(c.error, 0.1 * c.bound) << c.name << ": " << c.detail;
    }
  }
}

// Sums whose order changes from call to call, as atomics on a GPU: a second training gives other
// bits and the run-to-run check names whose losses or, where the losses kept their bits (1 ulp in a
// filter gradient reached them on an AVX-512 CPU and not with AVX2 kernels), whose weights; a
// backend that names its convolutions as non-deterministic has the conv net left out, the check
// passing on BERT and saying what it left.
TEST(SelfTest, ATrainingThatVariesRunToRunFailsTheRunToRunCheck) {
  const std::string check = "run to run (trained again, the same bits)";
  NoCommunicator one;
  const auto run_to_run = [&](const std::vector<SelfTestCheck>& checks) {
    for (const auto& c : checks) {
      if (c.name == check) return c;
    }
    ADD_FAILURE() << "no run-to-run check";
    return SelfTestCheck{};
  };
  {
    FaultyBackend backend;
    backend.conv_varies = true;
    const auto checks = run_on(backend, one);
    EXPECT_THAT(failed_names(checks), ::testing::ElementsAre("fp32 " + check));
    EXPECT_THAT(run_to_run(checks).detail, ::testing::StartsWith("the conv net's losses "));
  }
  {
    FaultyBackend backend;
    backend.conv_varies = true;
    backend.declares_varying_convs = true;
    const auto checks = run_on(backend, one);
    EXPECT_THAT(failed_names(checks), ::testing::IsEmpty());
    EXPECT_EQ(run_to_run(checks).detail,
              "bert: the same bits; not compared, the conv net: its filter gradients are summed in the order the "
              "device schedules");
  }
  {
    FaultyBackend backend;
    backend.scatter_varies = true;
    const auto checks = run_on(backend, one);
    EXPECT_THAT(failed_names(checks), ::testing::ElementsAre("fp32 " + check));
    EXPECT_THAT(run_to_run(checks).detail, ::testing::StartsWith("bert's losses "));
  }
  {
    FaultyBackend backend;
    backend.last_update_varies = true;
    const auto checks = run_on(backend, one);
    EXPECT_THAT(failed_names(checks), ::testing::ElementsAre("fp32 " + check));
    EXPECT_THAT(run_to_run(checks).detail,
                ::testing::MatchesRegex("the conv net's losses the same bits, its weights not: [0-9]+ of 10880 weights "
                                        "differ, the first weight, value [0-9]+ \\(.* against .*\\)"));
  }
}

// The CUDA pool's bug, planted: every op alone passes (the pooling check runs without memory
// reuse), training drifts from the second step, and the poisoned memory plan names the cause.
TEST(SelfTest, AnOpReadingPastItsDeclaredLifetimeFailsTheMemoryPlanCheck) {
  FaultyBackend backend;
  backend.undeclared_pool_reads = true;
  NoCommunicator one;
  const auto checks = run_on(backend, one);
  EXPECT_THAT(failed_names(checks),
              ::testing::UnorderedElementsAre("fp32 training, 5 steps",
                                              "fp32 resnet50 step, each layer fed the reference's input",
                                              "fp32 memory plan (buffers poisoned after their last declared use)"));
  // The whole step names the layer: the max pool's backward, fed the reference's dy.
  for (const auto& c : checks) {
    if (c.name.starts_with("resnet50 step")) {
      EXPECT_THAT(c.detail, ::testing::StartsWith("first off: maxpool (MaxPool2d) backward"));
    }
  }
}

// In a half type a max pool ranks each window's values rounded: near-ties in fp32 rank otherwise and
// its gradient goes elsewhere (on an H200 every half-precision model step's worst layer: VGG16's
// last max pool 5.74e-2 in amp, over the step's 5e-2). fp16 emulated rounds as a GPU does: the
// step passes, its max pools held to the bound of ReLU masks that rounding flips and said apart;
// a max pool whose backward loses the gradient still fails, named.
TEST(SelfTest, AHalfMaxPoolsNearTiesPassButALostGradientFails) {
  NoCommunicator one;
  FaultyBackend emulated;
  emulated.fp16_emulated = true;
  emulated.emulate_fp16();
  const auto checks = run_on(emulated, one, {Precision::amp}, {Model::vgg16});
  EXPECT_THAT(failed_names(checks), ::testing::IsEmpty());
  int steps = 0;
  for (const auto& c : checks) {
    if (!c.name.ends_with("step, each layer fed the reference's input")) continue;
    ++steps;
    EXPECT_THAT(c.detail, HasSubstr("max pools' backward at most")) << c.name;
    EXPECT_THAT(c.detail, HasSubstr("bound 1.50e-01: near-ties rank as rounded")) << c.name;
  }
  EXPECT_EQ(steps, 2);  // ResNet-50's and VGG16's
  FaultyBackend lost;
  lost.fp16_emulated = true;
  lost.emulate_fp16();
  lost.pool_gradient_lost = true;
  const auto lost_checks = run_on(lost, one, {Precision::amp});
  EXPECT_THAT(failed_names(lost_checks), ::testing::Contains("amp resnet50 step, each layer fed the reference's input"));
  for (const auto& c : lost_checks) {
    if (c.name.starts_with("resnet50 step")) {
      EXPECT_THAT(c.detail, ::testing::StartsWith("first off: maxpool (MaxPool2d) backward")) << c.detail;
    }
  }
}

// The reference's step rounds each layer's input as the device's fed copy is rounded, so that both
// compute from the same values: InceptionV3's auxiliary batch norm normalises 3 values a channel (a
// 1x1 map), and from the fp32 values the reference kept, fp16's rounding of its input alone put its
// input gradient 5.21e-2 off (on an H200 and with fp16 emulated alike), over amp's 5e-2; from the
// rounded values, 4.5e-4. DeepLabV3+'s ASPP pooling branch, a batch norm over a 1x1 map too:
// 4.40e-2 before, 3.9e-4 now.
TEST(SelfTest, AHalfStepIsJudgedFromTheRoundedInputsItWasFed) {
  NoCommunicator one;
  FaultyBackend emulated;
  emulated.fp16_emulated = true;
  emulated.emulate_fp16();
  const auto checks = run_on(emulated, one, {Precision::amp}, {Model::inception_v3, Model::deeplabv3plus},
                             {"inception_v3 step", "deeplabv3plus step"});
  ASSERT_EQ(checks.size(), 2u);
  for (const SelfTestCheck& c : checks) {
    EXPECT_EQ(c.outcome, CheckOutcome::passed) << c.name << ": " << c.detail;
    EXPECT_LT(c.error, c.bound / 5) << c.name << ": " << c.detail;
  }
}

// Each layer of the whole step is fed the reference's input, so rounding does not compound: 64
// ulps of noise in every convolution's outputs and gradients stay over 100 times inside fp32's bound.
TEST(SelfTest, TheWholeStepCheckTakesAnotherSummationOrderInItsStride) {
  FaultyBackend backend;
  backend.conv_noise_ulps = 64;
  NoCommunicator one;
  const auto checks = run_on(backend, one);
  bool ran = false;
  for (const auto& c : checks) {
    if (!c.name.starts_with("resnet50 step")) continue;
    ran = true;
    EXPECT_EQ(c.outcome, CheckOutcome::passed) << c.detail;
    EXPECT_GT(c.error, 0.0) << "the noise did not reach it";
    EXPECT_LT(c.error, c.bound / 10) << c.detail;
  }
  EXPECT_TRUE(ran);
}

// The worker's own model's whole step runs beside ResNet-50's and names its first layer off:
// dilated convolutions off by 0.1% fail DeepLabV3+'s step (its backbone's last stage dilates)
// and the atrous convolution's own check, while ResNet-50's step, which has none, passes.
TEST(SelfTest, TheWorkersModelsStepNamesItsFirstLayerOff) {
  NoCommunicator one;
  FaultyBackend correct;
  EXPECT_THAT(failed_names(run_on(correct, one, {Precision::fp32}, {Model::deeplabv3plus})), ::testing::IsEmpty());
  FaultyBackend backend;
  backend.dilated_conv_off = true;
  const auto checks = run_on(backend, one, {Precision::fp32}, {Model::deeplabv3plus, Model::bert_base});
  EXPECT_THAT(failed_names(checks),
              ::testing::UnorderedElementsAre("fp32 conv 3x3 dilation 2",
                                              "fp32 deeplabv3plus step, each layer fed the reference's input"));
  EXPECT_EQ(checks.size(), 34u);  // bert-base adds none: its layers are the transformer checks'
  for (const auto& c : checks) {
    if (c.name.starts_with("deeplabv3plus step")) {
      EXPECT_THAT(c.detail, ::testing::StartsWith("first off: backbone.layer4.1.conv2 (Conv2d) forward")) << c.detail;
      EXPECT_NEAR(c.error, 1e-3, 2e-4) << c.detail;
    }
  }
}

// A whole step where the device's ReLU and the reference's disagree on one element (an input within
// rounding of zero) passes: each layer's backward reads the reference's forward output, as the next
// layer's fed input makes it. A branch's last layer has no next one, and InceptionV3's
// Mixed_6e.branch_pool.bn on an H200 failed the step so, its input gradient 2.5e-3 off; DeepLabV3+'s
// ASPP branches end the same way. ReLUs that zero 2% of their outputs fail the step's forward.
TEST(SelfTest, AReluTieIsEitherSidesButAWrongReluFailsTheWholeStep) {
  NoCommunicator one;
  FaultyBackend ties;
  ties.relu_ties = 0;
  EXPECT_THAT(failed_names(run_on(ties, one, {Precision::fp32}, {Model::deeplabv3plus})), ::testing::IsEmpty());
  FaultyBackend wrong;
  wrong.relu_ties = 0.02;
  EXPECT_THAT(failed_names(run_on(wrong, one, {Precision::fp32}, {Model::deeplabv3plus})),
              ::testing::Contains("fp32 deeplabv3plus step, each layer fed the reference's input"));
}

// InceptionV3's step (299×299 images, its auxiliary classifier on): 1×7 and 7×1 convolutions off
// fail it at the first block that has them, and the factorised convolution's own check.
TEST(SelfTest, InceptionsStepNamesItsFirstFactorisedConvolution) {
  NoCommunicator one;
  FaultyBackend backend;
  backend.factorised_conv_off = true;
  const auto checks = run_on(backend, one, {Precision::fp32}, {Model::inception_v3});
  EXPECT_THAT(failed_names(checks),
              ::testing::UnorderedElementsAre("fp32 conv 1x7 padding 0x3",
                                              "fp32 inception_v3 step, each layer fed the reference's input"));
  for (const auto& c : checks) {
    if (c.name.starts_with("inception_v3 step")) {
      EXPECT_THAT(c.detail, ::testing::StartsWith("first off: Mixed_6b.branch7x7_2.conv (Conv2d) forward")) << c.detail;
    }
  }
}

TEST(SelfTest, AConvolutionOffByATenthOfAPercentFailsTheConvolutionChecks) {
  FaultyBackend backend;
  backend.conv_off = true;
  NoCommunicator one;
  const auto checks = run_on(backend, one);
  EXPECT_THAT(failed_names(checks),
              ::testing::IsSupersetOf({"fp32 conv 3x3 stride 1 with bias", "fp32 conv 1x1 stride 2",
                                       "fp32 conv 7x7 stride 2 (stem)"}));
  for (const auto& c : checks) {
    if (c.name.starts_with("conv")) {
      EXPECT_NEAR(c.error, 1e-3, 2e-4) << c.name;
      EXPECT_THAT(c.detail, HasSubstr("y off by")) << c.name;
    }
    if (c.name == "relu" || c.name == "linear" || c.name == "sgd update") {
      EXPECT_EQ(c.outcome, CheckOutcome::passed) << c.name;
    }
  }
}

TEST(SelfTest, AnOverflowCheckThatSeesNothingFailsTheLossScalingChecks) {
  FaultyBackend backend;
  backend.blind_overflow = true;
  NoCommunicator one;
  const auto checks = run_on(backend, one);
  EXPECT_THAT(failed_names(checks), ::testing::UnorderedElementsAre("- unscale and overflow check",
                                                                   "- loss scaling skips an overflowing step",
                                                                   "- a skipped step replayed names the layer"));
  for (const auto& c : checks) {
    if (c.name == "loss scaling skips an overflowing step") {
      EXPECT_THAT(c.detail, HasSubstr("was applied"));
    }
  }
}

// The check of DLBENCH_INPUT_RESIZE=device, given a device whose resize writes the wrong values (here
// zeros, after copies that complete at once), says which type, layout, value and image differ first;
// a backend that does not overlap host copies (the CPU's) resizes nothing and is not asked.
TEST(SelfTest, ADeviceResizeThatWritesOtherValuesFailsTheResizeCheckNamingTheFirst) {
  class ZeroResize final : public DelegatingBackend {
   public:
    explicit ZeroResize(Backend& inner) : DelegatingBackend(inner) {}
    bool overlaps_host_copies() const override { return true; }
    void stage_from_host(void* staging, const void* host, std::size_t bytes) override {
      std::memcpy(staging, host, bytes);
    }
    void take_staged(void* device, const void* staging, std::size_t bytes) override { std::memcpy(device, staging, bytes); }
    void wait_staged_reads() override {}
    void expand_staged_images(void* staging, const void*, std::int64_t images, int side, DType dtype, bool) override {
      std::memset(staging, 0, static_cast<std::size_t>(images * 3 * side * side) * dtype_size(dtype));
    }
  };
  CpuBackend cpu(1);
  ZeroResize zeros(cpu);
  EXPECT_EQ(device_resize_differs(zeros), std::optional<std::string>("fp32 planar: value 0 of image 0 differs from the host's"));
  EXPECT_THROW((void)device_resize_differs(cpu), std::logic_error);
}

// A count of infs and NaNs that sees none (DLBENCH_LOG_LOSS_SCALE's replay on the device) fails
// the replay's check alone, saying what the replay said.
TEST(SelfTest, ANonFiniteCountThatSeesNothingFailsTheReplayCheck) {
  FaultyBackend backend;
  backend.blind_count = true;
  NoCommunicator one;
  const auto checks = run_on(backend, one);
  EXPECT_THAT(failed_names(checks), ::testing::ElementsAre("- a skipped step replayed names the layer"));
  for (const auto& c : checks) {
    if (c.name == "a skipped step replayed names the layer") {
      EXPECT_THAT(c.detail, HasSubstr("forward: every layer output finite"));
    }
  }
}

// The transformer checks catch a layer normalization a little off (while the rest passes) and
// an AdamW whose bias correction stays at the first update, as a frozen captured step's would.
TEST(SelfTest, ALayerNormOffOrAFrozenAdamWStepFailsTheTransformerChecks) {
  NoCommunicator one;
  FaultyBackend off_norm;
  off_norm.layer_norm_off = true;
  const auto norm_checks = run_on(off_norm, one);
  // A small BERT's logits are near zero at initialization: the loss barely notices a 0.1% scale,
  // the layer norm's and the encoder layer's outputs do.
  EXPECT_THAT(failed_names(norm_checks),
              ::testing::ElementsAre("fp32 layer norm, 256 rows of 768 (bert-base's width)",
                                     "fp32 transformer encoder layer",
                                     "fp32 transformer encoder layer, heads of 32 over 40 tokens"));
  FaultyBackend frozen;
  frozen.frozen_adamw_step = true;
  const auto adamw_checks = run_on(frozen, one);
  EXPECT_THAT(failed_names(adamw_checks), ::testing::UnorderedElementsAre("- adamw update",
                                                                         "fp32 bert pretraining, 5 AdamW steps",
                                                                         "fp32 padded bert, 5 AdamW steps"));
  for (const auto& c : adamw_checks) {
    if (c.name == "adamw update") {
      EXPECT_THAT(c.detail, HasSubstr("off by"));
    }
  }
}

TEST(SelfTest, AnAllreduceThatDropsARankFails) {
  FaultyBackend backend;
  TwoRanks good, broken;
  broken.broken = true;
  EXPECT_THAT(failed_names(run_on(backend, good)), ::testing::IsEmpty());
  const auto checks = run_on(backend, broken);
  EXPECT_THAT(failed_names(checks), ::testing::ElementsAre("- allreduce over 2 ranks (fake)"));
  EXPECT_THAT(checks.back().detail, HasSubstr("sums wrong, the first at 0"));
}

TEST(SelfTest, APrecisionTheBackendCannotRunIsSkippedSayingWhy) {
  FaultyBackend backend;
  NoCommunicator one;
  const auto checks = run_on(backend, one, {Precision::tf32, Precision::amp});
  ASSERT_GE(checks.size(), 2u);
  EXPECT_EQ(checks[0].outcome, CheckOutcome::skipped);
  EXPECT_THAT(checks[0].detail, HasSubstr("tensor cores"));
  EXPECT_EQ(checks[1].outcome, CheckOutcome::skipped);
  EXPECT_THAT(checks[1].detail, HasSubstr("fp16"));
  EXPECT_THAT(failed_names(checks), ::testing::IsEmpty());
}

// bf16 where the CPU has it: the half-precision path against fp32, with its floors (a layer
// that silently computed fp32 would fail them).
TEST(SelfTest, Bf16PassesWithinItsBoundsAndAboveItsFloors) {
  FaultyBackend backend;
  if (const auto why = backend.cannot_compute(DType::bf16)) GTEST_SKIP() << *why;
  NoCommunicator one;
  // With the models whose steps have batch norms over few values (DeepLabV3+'s ASPP pooling,
  // InceptionV3's auxiliary head): ill-conditioned there, they must still fit bf16's bound.
  const auto checks = run_on(backend, one, {Precision::bf16}, {Model::deeplabv3plus, Model::inception_v3});
  EXPECT_THAT(failed_names(checks), ::testing::IsEmpty());
  int floored = 0;
  for (const auto& c : checks) {
    if (c.floor > 0) {
      ++floored;
      EXPECT_GT(c.error, c.floor) << c.name;
    }
  }
  EXPECT_EQ(floored, 14);  // every layer but the four exact ones, and the encoder layer at both shapes
}

}  // namespace
}  // namespace dlbench::worker
