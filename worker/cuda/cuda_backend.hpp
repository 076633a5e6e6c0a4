// The CUDA backend: convolution, batch norm and pooling through cuDNN 9, linear layers through
// cuBLASLt, everything else in dlbench's own kernels (worker/cuda/kernels.cu), all on one
// stream. fp32 activations are NCHW (the layout every fp32 cuDNN algorithm takes with PyTorch's
// OIHW weights; DLBENCH_CUDA_LAYOUT=nhwc makes them channels-last, for timing both), and `math`
// chooses whether cuDNN and cuBLAS may use TF32 tensor cores. fp16
// (amp) and bf16 activations are NHWC, the order cuDNN's tensor-core kernels work in, as
// PyTorch's channels_last; they compute on tensor cores with fp32 accumulation. Parameters stay
// fp32: ops round them to the activations' type as they run (a scratch copy per op call, as
// autocast casts weights) and widen their gradients back to fp32.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cudnn.h>

#include <cstddef>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "attention_route.hpp"
#include "backend.hpp"
#include "conv_batch_norm_route.hpp"
#include "cuda/activation_layout.hpp"
#include "cuda/conv_engines.hpp"
#include "cuda/batch_norm_calls.hpp"
#include "cuda/cuda_check.hpp"
#include "cuda/pool_route.hpp"
#include "cuda/weight_copies.hpp"

namespace dlbench::worker {

namespace cuda_detail {
struct ConvPlanCache;  // cuda/conv_graph.hpp
}

// tf32 computes with tensor-core math on fp32 storage; every other precision computes as it stores.
constexpr CudaMath cuda_math(Precision precision) { return precision == Precision::tf32 ? CudaMath::tf32 : CudaMath::fp32; }

// A device allocation that does not fit: reported as the case's OutOfMemory result.
class CudaOutOfMemory : public CudaError {
 public:
  CudaOutOfMemory(std::size_t requested, std::size_t free, std::size_t total);
  std::size_t requested, free, total;
};

// Whether a CUDA device can be used here; when not, `why` says what is missing.
bool cuda_device_usable(std::string* why = nullptr);

// Why a GPU with these properties cannot compute on `dtype` activations, or nothing when it can.
std::optional<std::string> cuda_cannot_compute(DType dtype, const cudaDeviceProp& gpu);

// The precisions every GPU of this machine runs, in the API's order, joined by `separator`
// (those of the build when it has no GPU).
std::string cuda_precisions(const std::string& separator);

class CudaBackend final : public Backend {
 public:
  // `activations`: the dtype the run computes in, which sets the activations' memory order.
  explicit CudaBackend(int device = 0, CudaMath math = CudaMath::fp32, DType activations = DType::fp32);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  std::string name() const override { return "cuda"; }
  // The half types NHWC; fp32 NCHW unless DLBENCH_CUDA_LAYOUT=nhwc (cuda/activation_layout.hpp).
  Layout activation_layout() const override { return layout_; }
  std::string version_info() const override;
  std::map<std::string, std::string> options() const override;
  // fp32 and fp16 on every GPU CUDA 13 runs on; bf16 from compute capability 8.0 (Ampere).
  std::optional<std::string> cannot_compute(DType dtype) const override;
  std::optional<std::string> device_lost() const override;

  std::shared_ptr<void> allocate(std::size_t bytes) override;
  void copy_from_host(void* device_dst, const void* host_src, std::size_t bytes) override;
  std::shared_ptr<void> allocate_host(std::size_t bytes) override;
  void copy_to_host(void* host_dst, const void* device_src, std::size_t bytes) override;
  // A batch's copy from the host runs on a stream of its own while the step before it computes;
  // an event orders the step after it and another the next copy after the step took the batch
  // (a real-data step used to wait for the whole previous step, then copy, on one stream).
  bool overlaps_host_copies() const override { return true; }
  void stage_from_host(void* staging, const void* host_src, std::size_t bytes) override;
  void take_staged(void* device_dst, const void* staging, std::size_t bytes) override;
  void wait_staged_reads() override;
  // On the copies' stream, after the packed batch's copy: the kernel (cuda/input_kernels.cu) runs
  // beside the step before, as the copy does.
  void expand_staged_images(void* staging, const void* packed, std::int64_t images, int side, DType dtype,
                            bool channels_last) override;
  void poison(void* device_dst, std::size_t bytes) override;
  void synchronize() override;
  // Events on the stream: each step is timed where the device ran it, the host never waits.
  std::unique_ptr<StepMarks> make_step_marks() override;
  // Sums the step's loss rows on the device and copies one float: the only wait for the loss.
  float last_loss() override;

  std::unique_ptr<Conv2dOp> make_conv2d(const Conv2dConfig& config) override;
  std::unique_ptr<BatchNormOp> make_batch_norm(const BatchNormConfig& config) override;
  // By the batch-norm route (cuda/batch_norm_calls.hpp): channels-last by default, or as
  // DLBENCH_CUDA_BATCH_NORM says.
  bool fuses_batch_norm_relu() const override {
    return batch_norm_route_ == BatchNormCalls::ex_relu || batch_norm_route_ == BatchNormCalls::ex_add_relu ||
           batch_norm_route_ == BatchNormCalls::own;
  }
  bool fuses_batch_norm_add_relu() const override {
    return batch_norm_route_ == BatchNormCalls::ex_add_relu || batch_norm_route_ == BatchNormCalls::own;
  }
  // DLBENCH_CUDA_CONV_BATCH_NORM=fused: cuda/fused_conv.cpp's op for channels-last half activations
  // where an engine runs the graph (one line on stderr says why not where none does); null
  // otherwise. Its deferred batch norms take the own kernels whatever DLBENCH_CUDA_BATCH_NORM says.
  std::unique_ptr<FusedConv2dOp> make_fused_conv2d(const FusedConv2dConfig& asked) override;
  // Which cuDNN calls this backend's batch norms take: DLBENCH_CUDA_BATCH_NORM, read once.
  BatchNormCalls batch_norm_route() const { return batch_norm_route_; }
  BatchNormMode batch_norm_mode() const { return batch_norm_mode_; }
  // Which cuDNN API this backend's convolutions take: DLBENCH_CUDA_CONV, read once
  // (cuda/conv_engines.hpp).
  ConvCallsApi conv_calls_api() const { return conv_calls_api_; }
  // DLBENCH_CUDA_ALGORITHMS, read once (cuda/conv_algorithms.hpp).
  ConvDeterminism conv_determinism() const { return conv_determinism_; }
  // DLBENCH_CUDA_RESIDUAL_GRAD, read once (cuda/conv_engines.hpp).
  bool accumulates_conv_input_grad() const override { return residual_gradient_ == ResidualGradient::accumulate; }
  // The graph API's plans this backend has chosen, one per distinct convolution pass.
  cuda_detail::ConvPlanCache& conv_plans() { return *conv_plans_; }
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
  NonFiniteCount count_non_finite(const Tensor& t) override;
  void adaptive_avg_pool_forward(const Tensor& x, Tensor& y) override;
  void adaptive_avg_pool_backward(const Tensor& dy, Tensor& dx) override;
  void begin_step(std::uint64_t step) override;
  void dropout_forward(const Tensor& x, Tensor& y, float p, std::uint64_t layer_seed) override;
  void dropout_backward(const Tensor& dy, Tensor& dx, float p, std::uint64_t layer_seed) override;
  void dropout_mask(Tensor& mask, float p, std::uint64_t layer_seed) override;
  void softmax_cross_entropy(const Tensor& logits, const std::int32_t* labels, Tensor& dlogits, const float* gradient_scale,
                             LossTerm term) override;
  void sgd_update(float* values, const float* grads, float* momentum_buffer, std::int64_t count, const SgdConfig& config,
                  std::uint64_t update_number, const LossScaleState* loss_scale) override;

  // Transformer ops (worker/cuda/transformer_ops.cpp): cuBLASLt strided-batched GEMMs and
  // dlbench's kernels (transformer_kernels.cu); AdamW runs on the device, bias corrections included.
  std::optional<std::string> cannot_run_transformers() const override { return std::nullopt; }
  std::unique_ptr<BatchedMatmulOp> make_batched_matmul(const BatchedMatmulConfig& config) override;
  std::unique_ptr<LayerNormOp> make_layer_norm(const LayerNormConfig& config) override;
  std::unique_ptr<SoftmaxOp> make_softmax(std::int64_t rows, std::int64_t columns, DType dtype) override;
  std::unique_ptr<ActivationOp> make_activation(ActivationKind kind, std::int64_t count, DType dtype) override;
  std::unique_ptr<SwapAxesOp> make_swap_axes(const Shape& x, DType dtype) override;
  // DLBENCH_CUDA_ATTENTION=fused: attention_kernels.cu's op where attention_plan.hpp takes the
  // shape on this GPU (otherwise null, saying why on stderr); composed by default: BERT-base amp
  // ran 3,134 sequences/s fused against 3,349 composed on an H200 (2026-11-28).
  std::unique_ptr<AttentionOp> make_fused_attention(const AttentionConfig& config) override;
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

  bool can_capture() const override { return true; }
  std::optional<std::string> nondeterministic_convolutions() const override;
  void begin_capture() override;
  void end_capture() override;
  void replay() override;

  CudaMath math() const { return math_; }
  DType activations() const { return activations_; }
  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  // begin_step's step number on the device (what dropout masks mix in).
  const std::uint64_t* device_step() const { return static_cast<const std::uint64_t*>(step_.get()); }
  cudnnHandle_t cudnn() const { return cudnn_; }
  cublasLtHandle_t cublas_lt() const { return cublas_lt_; }
  const cudaDeviceProp& properties() const { return properties_; }

  // Scratch memory shared by every op (they run one after another on the stream). It grows
  // only while algorithms are chosen, in the first step; later calls find it large enough.
  void* workspace(std::size_t bytes);
  // The most workspace one convolution algorithm may ask for.
  std::size_t workspace_limit() const { return workspace_limit_; }
  // Scratch for one op's parameters rounded to a half type (and a convolution's filter gradient
  // before it is widened to fp32), apart from workspace() since the two are used together. It
  // grows as workspace() does.
  void* parameter_scratch(std::size_t bytes);

  // DLBENCH_CUDA_WEIGHT_COPIES, read once (cuda/weight_copies.hpp).
  WeightCopies weight_copies() const { return weight_copies_; }
  // DLBENCH_CUDA_PAD_INPUT_CHANNELS, read once (cuda/padded_channels.hpp): 0 where off.
  int padded_input_channels() const { return padded_input_channels_; }
  void bind_parameters(const std::shared_ptr<const void>& values, std::int64_t elements) override;
  void parameters_written() override { kept_weights_.values_changed(); }
  // The weight at `weight` (`elements` fp32 values) as a pass reads it in `dtype`, transposed to
  // OHWI where `arranged` names its filter: a kept copy, made now if the values changed since, or
  // the values themselves (fp32 in its own order). Null where nothing is kept for it (per-pass
  // copies, a weight outside the bound parameters, one kept in another order): the caller copies
  // it into parameter_scratch for this pass.
  const void* kept_weight(const float* weight, std::int64_t elements, DType dtype,
                          const std::optional<FilterShape>& arranged);

 private:
  // y = in · dropout's mask for y's shape (in null: y is the mask itself), in y's memory order;
  // `in` holds y's dtype (require_dtype checked).
  void dropout(const void* in, Tensor& y, float p, std::uint64_t layer_seed);
  // Throws, saying why, unless ops can compute on `dtype` here and `dtype` is the activations'
  // (whose memory order the backend chose for them).
  void require_computable(DType dtype) const;
  // `block` with at least `bytes`, reallocated (outside a capture only) when smaller.
  void* grow(std::shared_ptr<void>& block, std::size_t& capacity, std::size_t bytes, const char* what);
  // The optimizers' ranges on the device (uploaded when they change; sorted by offset).
  struct DeviceRanges {
    const std::int64_t* offsets;
    const std::int64_t* counts;
    const std::int32_t* decays;
    int count;
  };
  DeviceRanges device_ranges(const std::vector<ParameterRange>& ranges);
  // The optimizer's update number in device memory, set to `update_number` by an eager call and
  // advanced by one by a captured call (so that each replay counts its own update).
  std::uint64_t* queue_update_number(std::uint64_t update_number);
  // Counts the update on the device, sums the gradients' squares; returns the coefficients.
  float* prepare_adam_step(const float* grads, std::int64_t count, const AdamWConfig& config, std::uint64_t update_number,
                           const LossScaleState* loss_scale);
  int device_;
  CudaMath math_;
  DType activations_ = DType::fp32;
  Layout layout_ = Layout::nchw;
  BatchNormCalls batch_norm_route_ = BatchNormCalls::plain;  // after layout_, which it depends on
  BatchNormMode batch_norm_mode_ = BatchNormMode::spatial;    // likewise
  ConvCallsApi conv_calls_api_ = ConvCallsApi::legacy;
  ConvDeterminism conv_determinism_ = ConvDeterminism::any;
  ResidualGradient residual_gradient_ = ResidualGradient::sum;
  AttentionRoute attention_route_ = AttentionRoute::composed;
  ConvBatchNormRoute conv_batch_norm_route_ = ConvBatchNormRoute::separate;
  std::set<std::string> said_apart_;  // make_fused_conv2d's stderr lines, each said once
  std::unique_ptr<cuda_detail::ConvPlanCache> conv_plans_;  // destroyed before the cuDNN handle
  cudaDeviceProp properties_{};
  cudaStream_t stream_ = nullptr;
  cudaStream_t copy_stream_ = nullptr;  // staged input copies (stage_from_host)
  cudaEvent_t staged_ = nullptr;        // recorded after the last staged copy
  cudaEvent_t staging_free_ = nullptr;  // recorded after the last take_staged
  cudnnHandle_t cudnn_ = nullptr;
  cublasLtHandle_t cublas_lt_ = nullptr;
  std::shared_ptr<void> workspace_;
  std::size_t workspace_bytes_ = 0;
  std::size_t workspace_limit_ = std::size_t{1} << 30;
  std::shared_ptr<void> parameter_scratch_;
  std::size_t parameter_scratch_bytes_ = 0;
  WeightCopies weight_copies_ = WeightCopies::per_pass;
  int padded_input_channels_ = 0;
  PoolRoute pool_route_ = PoolRoute::cudnn;  // DLBENCH_CUDA_POOL, read once (cuda/pool_route.hpp); after layout_
  KeptWeightCopies kept_weights_;
  // The kept copies, the bound values' length in the activations' type (fp32: only the filters
  // transposed for channels last are kept, the rest read in place).
  std::shared_ptr<void> kept_weight_memory_;
  // The loss of one step: one float per row on the device, summed there when read. Each loss
  // term of the step (BERT's masked LM and next sentence, InceptionV3's auxiliary classifier) has
  // its own segment of rows, since their row counts differ; the step's loss is the sum of the
  // segments' means.
  struct LossSegment {
    std::size_t offset = 0, rows = 0;
  };
  std::shared_ptr<void> loss_rows_;       // one weighted loss per sample (per pixel for segmentation)
  std::shared_ptr<void> loss_scratch_;    // the valid-pixel count of a per-pixel term
  std::shared_ptr<void> loss_sums_;       // kSumPartials of sum()'s scratch, then one sum per segment
  std::vector<LossSegment> loss_segments_;
  std::size_t loss_sums_capacity_ = 0;
  std::shared_ptr<void> step_;             // begin_step's, on the device: what dropout masks mix in
  std::shared_ptr<void> non_finite_counts_;  // count_non_finite's two counters, made at its first call
  // AdamW's and LAMB's device state: the update number (set eagerly, advanced by a replayed
  // graph), the sum of squares, the clip factor and bias corrections; and the parameter ranges,
  // sorted by offset.
  std::shared_ptr<void> adam_scalars_;
  std::shared_ptr<void> adam_ranges_;
  std::vector<ParameterRange> adam_ranges_uploaded_;
  std::shared_ptr<void> lamb_norms_;  // ‖w‖² and ‖u‖² per tensor, then their blocks' partials
  std::size_t lamb_norms_capacity_ = 0;
  std::size_t loss_rows_capacity_ = 0;
  bool capturing_ = false;
  cudaGraph_t graph_ = nullptr;
  cudaGraphExec_t graph_exec_ = nullptr;
};

}  // namespace dlbench::worker
