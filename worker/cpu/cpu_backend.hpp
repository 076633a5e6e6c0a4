#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include "attention_route.hpp"
#include "backend.hpp"
#include "conv_batch_norm_route.hpp"
#include "cpu/conv_backward_data.hpp"
#include "cpu/half_emulation.hpp"
#include "cpu/linear_weights.hpp"

namespace dlbench::worker {

class CpuBackend final : public Backend {
 public:
  // threads <= 0 keeps OpenMP's default (OMP_NUM_THREADS or every core).
  explicit CpuBackend(int threads = 0);
  ~CpuBackend() override;

  std::string name() const override { return "cpu"; }
  Layout activation_layout() const override { return Layout::nhwc; }
  std::string version_info() const override;
  std::map<std::string, std::string> options() const override;
  // fp32 everywhere; bf16 where oneDNN finds AVX512_BF16 (or AMX); fp16 only emulated
  // (DLBENCH_CPU_FP16=emulated, cpu/half_emulation.hpp): oneDNN 2.6 has no fp16 training kernels
  // for x86.
  std::optional<std::string> cannot_compute(DType dtype) const override;
  int threads() const;

  std::shared_ptr<void> allocate(std::size_t bytes) override;
  void copy_from_host(void* device_dst, const void* host_src, std::size_t bytes) override;
  void copy_to_host(void* host_dst, const void* device_src, std::size_t bytes) override;
  void poison(void* device_dst, std::size_t bytes) override;
  void synchronize() override;

  std::unique_ptr<Conv2dOp> make_conv2d(const Conv2dConfig& config) override;
  std::unique_ptr<BatchNormOp> make_batch_norm(const BatchNormConfig& config) override;
  bool fuses_batch_norm_relu() const override { return true; }
  // DLBENCH_CPU_CONV_BATCH_NORM=fused (or set_conv_batch_norm_route): cpu/conv_batch_norm.cpp's
  // composition of the fused passes a device runs; null (apart) otherwise.
  std::unique_ptr<FusedConv2dOp> make_fused_conv2d(const FusedConv2dConfig& config) override;
  void set_conv_batch_norm_route(ConvBatchNormRoute route) { conv_batch_norm_route_ = route; }
  std::unique_ptr<ReluOp> make_relu(const Shape& shape, DType dtype) override;
  std::unique_ptr<PoolOp> make_pool(const PoolConfig& config) override;
  std::unique_ptr<LinearOp> make_linear(const LinearConfig& config) override;
  std::unique_ptr<AddOp> make_add(const Shape& shape, DType dtype) override;
  std::unique_ptr<AddOp> make_add_relu(const Shape& shape, DType dtype) override;
  std::unique_ptr<ReorderOp> make_reorder(const Shape& shape, DType dtype, Layout from, Layout to) override;
  std::unique_ptr<ChannelSliceOp> make_channel_slice(const Shape& part, std::int64_t whole_channels,
                                                     std::int64_t offset, DType dtype) override;
  std::unique_ptr<ResizeOp> make_bilinear_resize(const ResizeConfig& config) override;

  void unscale_and_check_finite(float* grads, std::int64_t count, LossScaleState* state,
                                const LossScalingConfig& config) override;
  void adaptive_avg_pool_forward(const Tensor& x, Tensor& y) override;
  void adaptive_avg_pool_backward(const Tensor& dy, Tensor& dx) override;
  void begin_step(std::uint64_t step) override { step_ = step; }
  void dropout_forward(const Tensor& x, Tensor& y, float p, std::uint64_t layer_seed) override;
  void dropout_backward(const Tensor& dy, Tensor& dx, float p, std::uint64_t layer_seed) override;
  void dropout_mask(Tensor& mask, float p, std::uint64_t layer_seed) override;
  void softmax_cross_entropy(const Tensor& logits, const std::int32_t* labels, Tensor& dlogits,
                             const float* gradient_scale, LossTerm term) override;
  float last_loss() override { return static_cast<float>(step_loss_); }
  void sgd_update(float* values, const float* grads, float* momentum_buffer, std::int64_t count, const SgdConfig& config,
                  std::uint64_t update_number, const LossScaleState* loss_scale) override;

  std::optional<std::string> cannot_run_transformers() const override { return std::nullopt; }
  std::unique_ptr<BatchedMatmulOp> make_batched_matmul(const BatchedMatmulConfig& config) override;
  std::unique_ptr<LayerNormOp> make_layer_norm(const LayerNormConfig& config) override;
  std::unique_ptr<SoftmaxOp> make_softmax(std::int64_t rows, std::int64_t columns, DType dtype) override;
  std::unique_ptr<ActivationOp> make_activation(ActivationKind kind, std::int64_t count, DType dtype) override;
  std::unique_ptr<SwapAxesOp> make_swap_axes(const Shape& x, DType dtype) override;
  // DLBENCH_CPU_ATTENTION=fused (or set_attention_route): worker/cpu/attention.cpp's op;
  // composed otherwise.
  std::unique_ptr<AttentionOp> make_fused_attention(const AttentionConfig& config) override;
  void set_attention_route(AttentionRoute route) { attention_route_ = route; }
  // DLBENCH_CPU_LINEAR_WEIGHTS (linear_weights.hpp); a layer reads it when it is made.
  LinearWeights linear_weights() const { return linear_weights_; }
  void set_linear_weights(LinearWeights route) { linear_weights_ = route; }
  // DLBENCH_CPU_CONV_BACKWARD_DATA (conv_backward_data.hpp); a convolution reads it when it is made.
  ConvBackwardData conv_backward_data() const { return conv_backward_data_; }
  void set_conv_backward_data(ConvBackwardData route) { conv_backward_data_ = route; }
  // Whether make_conv2d(c)'s input gradient is the flipped forward convolution on this route.
  bool flips_input_gradient(const Conv2dConfig& c);
  // Whether oneDNN runs AVX-512 kernels here (the CPU's best, or less under DNNL_MAX_CPU_ISA):
  // the routes' crossings differ with the kernels' width.
  bool avx512_kernels() const;
  // DLBENCH_CPU_FP16 (half_emulation.hpp); ops read it when they are made.
  void set_fp16(CpuFp16 fp16) { fp16_ = fp16; }
  void gather_rows(const Tensor& table, const std::int32_t* rows, std::int64_t count, Tensor& y,
                   bool accumulate) override;
  void scatter_add_rows(const Tensor& dy, const std::int32_t* rows, std::int64_t count, Tensor& table_grad) override;
  void fill_zero(Tensor& t) override;
  void adamw_update(float* values, float* grads, float* first_moment, float* second_moment, std::int64_t count,
                    const std::vector<ParameterRange>& ranges, const AdamWConfig& config,
                    std::uint64_t update_number, const LossScaleState* loss_scale) override;
  void lamb_update(float* values, float* grads, float* first_moment, float* second_moment, std::int64_t count,
                    const std::vector<ParameterRange>& tensors, const AdamWConfig& config,
                    std::uint64_t update_number, const LossScaleState* loss_scale) override;

  const dnnl::engine& engine() const { return engine_; }
  dnnl::stream& stream() { return stream_; }

  // One buffer for weights (or their gradients) in a kernel's format during one call: ops
  // reserve their size at setup and fetch the pointer each call (it moves while it grows).
  void reserve_weight_scratch(std::size_t bytes) { weight_scratch_.reserve(*this, bytes); }
  void* weight_scratch() const { return weight_scratch_.data(); }
  // Weights an op rearranges itself before a kernel's reorder (a flipped convolution's), in fp32.
  void reserve_weight_staging(std::size_t bytes) { weight_staging_.reserve(*this, bytes); }
  void* weight_staging() const { return weight_staging_.data(); }
  // The same for activations an op rearranges during one call (a strided 1×1 convolution's
  // sampled pixels and their gradient).
  void reserve_activation_scratch(std::size_t bytes) { activation_scratch_.reserve(*this, bytes); }
  void* activation_scratch() const { return activation_scratch_.data(); }
  // oneDNN's scratchpad, the memory a primitive needs only while it runs (per-thread partial
  // sums, a reorder's staging): one buffer for every primitive (they run one at a time), made
  // here in oneDNN's "user" scratchpad mode (cpu_ops::Primitive) so that the host memory check
  // counts it before it is made, as it counts every other large buffer. oneDNN's own mode
  // allocates it inside a primitive's first call, unchecked, and it grows with the threads:
  // ResNet-50's gemm-based convolutions on AVX2 kernels take 36 MiB a thread (docs/worker.md).
  void reserve_primitive_scratchpad(std::size_t bytes) { primitive_scratchpad_.reserve(*this, bytes); }
  void* primitive_scratchpad() const { return primitive_scratchpad_.data(); }
  std::size_t primitive_scratchpad_bytes() const { return primitive_scratchpad_.bytes(); }

 private:
  double step_loss_ = 0.0;  // the weighted sum of this step's loss terms so far
  std::uint64_t step_ = 0;  // begin_step's
  AttentionRoute attention_route_;
  ConvBatchNormRoute conv_batch_norm_route_;
  LinearWeights linear_weights_;
  ConvBackwardData conv_backward_data_;
  CpuFp16 fp16_;
  HalfScratch half_scratch_;  // the emulated fp16 ops' fp32 copies
  // Whether an op for `dtype` activations is an fp32 op between conversions.
  bool emulates(DType dtype) const { return dtype == DType::fp16 && fp16_ == CpuFp16::emulated; }
  // A buffer that only grows, to the largest size reserved.
  class Scratch {
   public:
    void reserve(CpuBackend& backend, std::size_t bytes) {
      if (bytes > bytes_) {
        buffer_ = backend.allocate(bytes);
        bytes_ = bytes;
      }
    }
    void* data() const { return buffer_.get(); }
    std::size_t bytes() const { return bytes_; }

   private:
    std::shared_ptr<void> buffer_;
    std::size_t bytes_ = 0;
  };
  Scratch weight_scratch_, weight_staging_, activation_scratch_, primitive_scratchpad_;
  dnnl::engine engine_;
  dnnl::stream stream_;
};

}  // namespace dlbench::worker
