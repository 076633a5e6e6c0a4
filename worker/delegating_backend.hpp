// A Backend that forwards every call to another: the base for wrappers that watch a backend
// (which convolutions a model asks for) or change one thing about it (planted faults in tests).
#pragma once

#include "backend.hpp"

namespace dlbench::worker {

class DelegatingBackend : public Backend {
 public:
  explicit DelegatingBackend(Backend& inner) : inner_(inner) {}

  std::string name() const override { return inner_.name(); }
  Layout activation_layout() const override { return inner_.activation_layout(); }
  std::string version_info() const override { return inner_.version_info(); }
  std::optional<std::string> cannot_compute(DType d) const override { return inner_.cannot_compute(d); }
  std::optional<std::string> device_lost() const override { return inner_.device_lost(); }
  std::shared_ptr<void> allocate(std::size_t bytes) override { return inner_.allocate(bytes); }
  void copy_from_host(void* d, const void* s, std::size_t n) override { inner_.copy_from_host(d, s, n); }
  std::shared_ptr<void> allocate_host(std::size_t bytes) override { return inner_.allocate_host(bytes); }
  void copy_to_host(void* d, const void* s, std::size_t n) override { inner_.copy_to_host(d, s, n); }
  bool overlaps_host_copies() const override { return inner_.overlaps_host_copies(); }
  void stage_from_host(void* d, const void* s, std::size_t n) override { inner_.stage_from_host(d, s, n); }
  void take_staged(void* d, const void* s, std::size_t n) override { inner_.take_staged(d, s, n); }
  void wait_staged_reads() override { inner_.wait_staged_reads(); }
  void expand_staged_images(void* d, const void* p, std::int64_t images, int side, DType dtype, bool last) override {
    inner_.expand_staged_images(d, p, images, side, dtype, last);
  }
  void poison(void* d, std::size_t n) override { inner_.poison(d, n); }
  void bind_parameters(const std::shared_ptr<const void>& values, std::int64_t elements) override {
    inner_.bind_parameters(values, elements);
  }
  void parameters_written() override { inner_.parameters_written(); }
  void synchronize() override { inner_.synchronize(); }
  std::unique_ptr<StepMarks> make_step_marks() override { return inner_.make_step_marks(); }
  std::unique_ptr<Conv2dOp> make_conv2d(const Conv2dConfig& c) override { return inner_.make_conv2d(c); }
  std::unique_ptr<BatchNormOp> make_batch_norm(const BatchNormConfig& c) override { return inner_.make_batch_norm(c); }
  bool fuses_batch_norm_relu() const override { return inner_.fuses_batch_norm_relu(); }
  bool fuses_batch_norm_add_relu() const override { return inner_.fuses_batch_norm_add_relu(); }
  std::unique_ptr<FusedConv2dOp> make_fused_conv2d(const FusedConv2dConfig& c) override {
    return inner_.make_fused_conv2d(c);
  }
  bool accumulates_conv_input_grad() const override { return inner_.accumulates_conv_input_grad(); }
  std::unique_ptr<ReluOp> make_relu(const Shape& s, DType d) override { return inner_.make_relu(s, d); }
  std::unique_ptr<PoolOp> make_pool(const PoolConfig& c) override { return inner_.make_pool(c); }
  std::unique_ptr<LinearOp> make_linear(const LinearConfig& c) override { return inner_.make_linear(c); }
  std::unique_ptr<AddOp> make_add(const Shape& s, DType d) override { return inner_.make_add(s, d); }
  std::unique_ptr<AddOp> make_add_relu(const Shape& s, DType d) override { return inner_.make_add_relu(s, d); }
  std::unique_ptr<ReorderOp> make_reorder(const Shape& s, DType d, Layout from, Layout to) override {
    return inner_.make_reorder(s, d, from, to);
  }
  std::unique_ptr<ChannelSliceOp> make_channel_slice(const Shape& part, std::int64_t whole_channels,
                                                     std::int64_t offset, DType d) override {
    return inner_.make_channel_slice(part, whole_channels, offset, d);
  }
  std::unique_ptr<ResizeOp> make_bilinear_resize(const ResizeConfig& c) override { return inner_.make_bilinear_resize(c); }
  void unscale_and_check_finite(float* g, std::int64_t n, LossScaleState* s, const LossScalingConfig& c) override {
    inner_.unscale_and_check_finite(g, n, s, c);
  }
  NonFiniteCount count_non_finite(const Tensor& t) override { return inner_.count_non_finite(t); }
  void adaptive_avg_pool_forward(const Tensor& x, Tensor& y) override { inner_.adaptive_avg_pool_forward(x, y); }
  void adaptive_avg_pool_backward(const Tensor& dy, Tensor& dx) override { inner_.adaptive_avg_pool_backward(dy, dx); }
  void begin_step(std::uint64_t step) override { inner_.begin_step(step); }
  void dropout_forward(const Tensor& x, Tensor& y, float p, std::uint64_t s) override { inner_.dropout_forward(x, y, p, s); }
  void dropout_backward(const Tensor& dy, Tensor& dx, float p, std::uint64_t s) override {
    inner_.dropout_backward(dy, dx, p, s);
  }
  void dropout_mask(Tensor& mask, float p, std::uint64_t s) override { inner_.dropout_mask(mask, p, s); }
  void softmax_cross_entropy(const Tensor& l, const std::int32_t* y, Tensor& d, const float* scale, LossTerm term) override {
    inner_.softmax_cross_entropy(l, y, d, scale, term);
  }
  void sgd_update(float* v, const float* g, float* b, std::int64_t n, const SgdConfig& c, std::uint64_t t,
                  const LossScaleState* s) override {
    inner_.sgd_update(v, g, b, n, c, t, s);
  }
  std::optional<std::string> cannot_run_transformers() const override { return inner_.cannot_run_transformers(); }
  std::unique_ptr<BatchedMatmulOp> make_batched_matmul(const BatchedMatmulConfig& c) override {
    return inner_.make_batched_matmul(c);
  }
  std::unique_ptr<LayerNormOp> make_layer_norm(const LayerNormConfig& c) override { return inner_.make_layer_norm(c); }
  std::unique_ptr<SoftmaxOp> make_softmax(std::int64_t r, std::int64_t c, DType d) override {
    return inner_.make_softmax(r, c, d);
  }
  std::unique_ptr<ActivationOp> make_activation(ActivationKind k, std::int64_t n, DType d) override {
    return inner_.make_activation(k, n, d);
  }
  std::unique_ptr<SwapAxesOp> make_swap_axes(const Shape& s, DType d) override { return inner_.make_swap_axes(s, d); }
  std::map<std::string, std::string> options() const override { return inner_.options(); }
  std::unique_ptr<AttentionOp> make_fused_attention(const AttentionConfig& c) override {
    return inner_.make_fused_attention(c);
  }
  void gather_rows(const Tensor& t, const std::int32_t* r, std::int64_t n, Tensor& y, bool a) override {
    inner_.gather_rows(t, r, n, y, a);
  }
  void scatter_add_rows(const Tensor& dy, const std::int32_t* r, std::int64_t n, Tensor& g) override {
    inner_.scatter_add_rows(dy, r, n, g);
  }
  void fill_zero(Tensor& t) override { inner_.fill_zero(t); }
  void adamw_update(float* v, float* g, float* m1, float* m2, std::int64_t n, const std::vector<ParameterRange>& r,
                    const AdamWConfig& c, std::uint64_t t, const LossScaleState* s) override {
    inner_.adamw_update(v, g, m1, m2, n, r, c, t, s);
  }
  void lamb_update(float* v, float* g, float* m1, float* m2, std::int64_t n, const std::vector<ParameterRange>& r,
                    const AdamWConfig& c, std::uint64_t t, const LossScaleState* s) override {
    inner_.lamb_update(v, g, m1, m2, n, r, c, t, s);
  }
  bool can_capture() const override { return inner_.can_capture(); }
  std::optional<std::string> nondeterministic_convolutions() const override {
    return inner_.nondeterministic_convolutions();
  }
  void begin_capture() override { inner_.begin_capture(); }
  void end_capture() override { inner_.end_capture(); }
  void replay() override { inner_.replay(); }
  float last_loss() override { return inner_.last_loss(); }

 protected:
  Backend& inner_;
};

}  // namespace dlbench::worker
