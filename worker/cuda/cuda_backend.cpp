// The CUDA backend itself (memory, stream, capture, the loss) and its smaller ops: batch norm,
// element-wise, pooling, resize. Convolution and the linear layer have their own files.
#include "cuda/cuda_backend.hpp"

#include <algorithm>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <optional>
#include <sstream>
#include <vector>

#include "cuda/activation_layout.hpp"
#include "cuda/batch_norm_calls.hpp"
#include "cuda/conv_algorithms.hpp"
#include "cuda/conv_graph.hpp"
#include "cuda/cuda_common.hpp"
#include "cuda/input_kernels.hpp"
#include "cuda/kernels.hpp"
#include "cuda/padded_channels.hpp"
#include "cuda/pool_route.hpp"
#include "memory_headroom.hpp"

namespace dlbench::worker {
namespace {

using namespace cuda_detail;

// ---- batch norm ---------------------------------------------------------------------------

// The plain cuDNN calls, or the *Ex calls with a workspace and a reserve space kept from forward
// to backward (cuda/batch_norm_calls.hpp says which and why).
class CudaBatchNorm final : public BatchNormOp {
 public:
  CudaBatchNorm(CudaBackend& backend, const BatchNormConfig& config)
      : backend_(backend), dtype_(config.dtype),
        epsilon_(std::max(static_cast<double>(config.epsilon), CUDNN_BN_MIN_EPSILON)),
        x_desc_(config.input, config.dtype, backend.activation_layout()), parameter_desc_(Shape(1, config.input.c(), 1, 1)),
        momentum_(config.momentum),
        // Channels-last activations take cuDNN's persistent kernels, as PyTorch's channels_last
        // batch norm does, NCHW the spatial ones unless told (cuda/batch_norm_calls.hpp); the
        // statistics and their meaning are the same.
        mode_(backend.batch_norm_mode() == BatchNormMode::persistent ? CUDNN_BATCHNORM_SPATIAL_PERSISTENT
                                                                      : CUDNN_BATCHNORM_SPATIAL),
        ex_(backend.batch_norm_route() != BatchNormCalls::plain),  // own never makes this op
        relu_(config.relu || config.add_relu), add_(config.add_relu),
        ops_(add_ ? CUDNN_BATCHNORM_OPS_BN_ADD_ACTIVATION
             : relu_ ? CUDNN_BATCHNORM_OPS_BN_ACTIVATION : CUDNN_BATCHNORM_OPS_BN) {
    if (relu_ && !ex_) throw std::invalid_argument("batch norm with a fused ReLU needs cuDNN's *Ex calls");
    if (!ex_) return;
    if (relu_) {
      DLBENCH_CUDNN_CHECK(cudnnCreateActivationDescriptor(&activation_));
      DLBENCH_CUDNN_CHECK(cudnnSetActivationDescriptor(activation_, CUDNN_ACTIVATION_RELU, CUDNN_NOT_PROPAGATE_NAN, 0.0));
    }
    const cudnnTensorDescriptor_t x = x_desc_.handle;
    const cudnnTensorDescriptor_t z = add_ ? x : nullptr;  // the residual and its gradient
    DLBENCH_CUDNN_CHECK(cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
        backend.cudnn(), mode_, ops_, x, z, x, parameter_desc_.handle, activation_, &forward_workspace_));
    DLBENCH_CUDNN_CHECK(cudnnGetBatchNormalizationBackwardExWorkspaceSize(
        backend.cudnn(), mode_, ops_, x, x, x, z, x, parameter_desc_.handle, activation_, &backward_workspace_));
    DLBENCH_CUDNN_CHECK(cudnnGetBatchNormalizationTrainingExReserveSpaceSize(backend.cudnn(), mode_, ops_, activation_, x,
                                                                             &reserve_));
  }
  ~CudaBatchNorm() override {
    if (activation_ != nullptr) cudnnDestroyActivationDescriptor(activation_);
  }
  CudaBatchNorm(const CudaBatchNorm&) = delete;
  CudaBatchNorm& operator=(const CudaBatchNorm&) = delete;

  // The fused ReLU's backward finds its mask in forward's output.
  bool backward_reads_output() const override { return relu_; }

  void forward_training_add_relu(const Tensor& x, const Tensor& z, const Tensor& gamma, const Tensor& beta, Tensor& y,
                                 BatchNormStatistics& s, void* reserve) override {
    if (!add_) BatchNormOp::forward_training_add_relu(x, z, gamma, beta, y, s, reserve);  // refuses
    require_dtype("batch norm", dtype_, {&x, &z, &y});
    forward_ex(x, &z, gamma, beta, y, s, reserve);
  }

  void backward_add_relu(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& gamma, const Tensor& beta,
                         const BatchNormStatistics& s, Tensor& dx, Tensor& dz, Tensor& dgamma, Tensor& dbeta,
                         const void* reserve) override {
    if (!add_) BatchNormOp::backward_add_relu(x, y, dy, gamma, beta, s, dx, dz, dgamma, dbeta, reserve);  // refuses
    require_dtype("batch norm", dtype_, {&dy, &dx, &dz});
    backward_ex(x, y, dy, gamma, beta, s, dx, &dz, dgamma, dbeta, reserve);
  }

  // The reserve space: planned memory from this forward to its backward.
  std::size_t workspace_bytes() const override { return reserve_; }

  // One cuDNN call: the batch's mean and inverse std kept for backward, the running statistics
  // updated with the unbiased variance (PyTorch's rule, which its cuDNN path relies on too).
  // x, y, dx and dy are the activations' dtype; scale, shift and statistics fp32.
  void forward_training(const Tensor& x, const Tensor& gamma, const Tensor& beta, Tensor& y,
                        BatchNormStatistics& s, void* reserve) override {
    require_dtype("batch norm", dtype_, {&x, &y});
    if (add_) throw std::logic_error("this batch norm was made with add_relu: forward_training_add_relu runs it");
    if (ex_) {
      forward_ex(x, nullptr, gamma, beta, y, s, reserve);
      return;
    }
    DLBENCH_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
        backend_.cudnn(), mode_, &kOne, &kZero, x_desc_.handle, x.data, x_desc_.handle, y.data,
        parameter_desc_.handle, gamma.as<float>(), beta.as<float>(), static_cast<double>(momentum_),
        s.running_mean.as<float>(), s.running_var.as<float>(), epsilon_, s.mean.as<float>(), s.spread.as<float>()));
  }

  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& gamma, const Tensor& beta,
                const BatchNormStatistics& s, Tensor& dx, Tensor& dgamma, Tensor& dbeta, const void* reserve) override {
    require_dtype("batch norm", dtype_, {&dy, &dx});
    if (add_) throw std::logic_error("this batch norm was made with add_relu: backward_add_relu runs it");
    if (ex_) {
      backward_ex(x, y, dy, gamma, beta, s, dx, nullptr, dgamma, dbeta, reserve);
      return;
    }
    DLBENCH_CUDNN_CHECK(cudnnBatchNormalizationBackward(
        backend_.cudnn(), mode_, &kOne, &kZero, &kOne, &kZero, x_desc_.handle, x.data, x_desc_.handle, dy.data,
        x_desc_.handle, dx.data, parameter_desc_.handle, gamma.as<float>(), dgamma.as<float>(), dbeta.as<float>(),
        epsilon_, s.mean.as<float>(), s.spread.as<float>()));
  }

 private:
  void* scratch(std::size_t bytes) { return bytes > 0 ? backend_.workspace(bytes) : nullptr; }

  // z: the residual added before the ReLU, or null.
  void forward_ex(const Tensor& x, const Tensor* z, const Tensor& gamma, const Tensor& beta, Tensor& y,
                  BatchNormStatistics& s, void* reserve) {
    DLBENCH_CUDNN_CHECK(cudnnBatchNormalizationForwardTrainingEx(
        backend_.cudnn(), mode_, ops_, &kOne, &kZero, x_desc_.handle, x.data, z ? x_desc_.handle : nullptr,
        z ? z->data : nullptr, x_desc_.handle, y.data, parameter_desc_.handle, gamma.as<float>(), beta.as<float>(),
        static_cast<double>(momentum_), s.running_mean.as<float>(), s.running_var.as<float>(), epsilon_,
        s.mean.as<float>(), s.spread.as<float>(), activation_, scratch(forward_workspace_), forward_workspace_, reserve,
        reserve_));
  }

  // cuDNN takes the reserve space as writable; backward only reads what forward left there. With
  // the ReLU fused it also reads y and the shift; with the residual it also writes dz.
  void backward_ex(const Tensor& x, const Tensor& y, const Tensor& dy, const Tensor& gamma, const Tensor& beta,
                   const BatchNormStatistics& s, Tensor& dx, Tensor* dz, Tensor& dgamma, Tensor& dbeta,
                   const void* reserve) {
    DLBENCH_CUDNN_CHECK(cudnnBatchNormalizationBackwardEx(
        backend_.cudnn(), mode_, ops_, &kOne, &kZero, &kOne, &kZero, x_desc_.handle, x.data,
        relu_ ? x_desc_.handle : nullptr, relu_ ? y.data : nullptr, x_desc_.handle, dy.data,
        dz ? x_desc_.handle : nullptr, dz ? dz->data : nullptr, x_desc_.handle, dx.data, parameter_desc_.handle,
        gamma.as<float>(), relu_ ? beta.as<float>() : nullptr, dgamma.as<float>(), dbeta.as<float>(), epsilon_,
        s.mean.as<float>(), s.spread.as<float>(), activation_, scratch(backward_workspace_), backward_workspace_,
        const_cast<void*>(reserve), reserve_));
  }

  CudaBackend& backend_;
  DType dtype_;
  double epsilon_;
  TensorDescriptor x_desc_, parameter_desc_;
  float momentum_;
  cudnnBatchNormMode_t mode_;
  bool ex_;
  bool relu_;  // the ReLU fused, with or without the residual add
  bool add_;
  cudnnBatchNormOps_t ops_;
  cudnnActivationDescriptor_t activation_ = nullptr;  // the fused ReLU's, or none
  std::size_t forward_workspace_ = 0, backward_workspace_ = 0, reserve_ = 0;
};

// ---- element-wise ------------------------------------------------------------------------

class CudaRelu final : public ReluOp {
 public:
  CudaRelu(CudaBackend& backend, const Shape& shape, DType dtype)
      : backend_(backend), count_(shape.numel()), dtype_(dtype) {}
  void forward(const Tensor& x, Tensor& y) override {
    require_dtype("relu", dtype_, {&x, &y});
    kernels::relu_forward(dtype_, x.data, y.data, count_, backend_.stream());
  }
  void backward(const Tensor& y, const Tensor& dy, Tensor& dx) override {
    require_dtype("relu", dtype_, {&y, &dy, &dx});
    kernels::relu_backward(dtype_, y.data, dy.data, dx.data, count_, backend_.stream());
  }

 private:
  CudaBackend& backend_;
  std::int64_t count_;
  DType dtype_;
};

// y = a + b, or max(a + b, 0) in the same pass with `relu`.
class CudaAdd final : public AddOp {
 public:
  CudaAdd(CudaBackend& backend, const Shape& shape, DType dtype, bool relu)
      : backend_(backend), count_(shape.numel()), dtype_(dtype), relu_(relu) {}
  void forward(const Tensor& a, const Tensor& b, Tensor& y) override {
    require_dtype("add", dtype_, {&a, &b, &y});
    if (relu_) {
      kernels::add_relu(dtype_, a.data, b.data, y.data, count_, backend_.stream());
    } else {
      kernels::add(dtype_, a.data, b.data, y.data, count_, backend_.stream());
    }
  }

 private:
  CudaBackend& backend_;
  std::int64_t count_;
  DType dtype_;
  bool relu_;
};

// cudnnTransformTensor between the two memory orders of one shape and dtype.
class CudaReorder final : public ReorderOp {
 public:
  CudaReorder(CudaBackend& backend, const Shape& shape, DType dtype, Layout from, Layout to)
      : backend_(backend), dtype_(dtype), from_(shape, dtype, from), to_(shape, dtype, to) {}
  void run(const Tensor& x, Tensor& y) override {
    require_dtype("reorder", dtype_, {&x, &y});
    DLBENCH_CUDNN_CHECK(cudnnTransformTensor(backend_.cudnn(), &kOne, from_.handle, x.data, &kZero, to_.handle, y.data));
  }

 private:
  CudaBackend& backend_;
  DType dtype_;
  TensorDescriptor from_, to_;
};

// A channel slice as one 2-D copy (activation_index.hpp): in NCHW a sample's slice is one run,
// in NHWC a pixel's.
class CudaChannelSlice final : public ChannelSliceOp {
 public:
  CudaChannelSlice(CudaBackend& backend, const Shape& part, std::int64_t whole_channels, std::int64_t offset,
                   DType dtype)
      : backend_(backend), dtype_(dtype),
        copy_(channel_slice_copy(part.n(), part.c(), part.h() * part.w(), whole_channels, offset,
                                 static_cast<std::int64_t>(dtype_size(dtype)),
                                 backend.activation_layout() == Layout::nhwc)) {}
  void insert(const Tensor& part, Tensor& whole) override {
    require_dtype("channel slice", dtype_, {&part, &whole});
    DLBENCH_CUDA_CHECK(cudaMemcpy2DAsync(static_cast<std::byte*>(whole.data) + copy_.offset_bytes, bytes(copy_.whole_pitch),
                                         part.data, bytes(copy_.part_pitch), bytes(copy_.row_bytes), bytes(copy_.rows),
                                         cudaMemcpyDeviceToDevice, backend_.stream()));
  }
  void extract(const Tensor& whole, Tensor& part) override {
    require_dtype("channel slice", dtype_, {&part, &whole});
    DLBENCH_CUDA_CHECK(cudaMemcpy2DAsync(part.data, bytes(copy_.part_pitch),
                                         static_cast<const std::byte*>(whole.data) + copy_.offset_bytes,
                                         bytes(copy_.whole_pitch), bytes(copy_.row_bytes), bytes(copy_.rows),
                                         cudaMemcpyDeviceToDevice, backend_.stream()));
  }

 private:
  static std::size_t bytes(std::int64_t v) { return static_cast<std::size_t>(v); }
  CudaBackend& backend_;
  DType dtype_;
  ChannelSliceCopy copy_;
};

// ---- pooling -----------------------------------------------------------------------------

class CudaPool final : public PoolOp {
 public:
  CudaPool(CudaBackend& backend, const PoolConfig& config)
      : backend_(backend), dtype_(config.dtype), x_desc_(config.input, config.dtype, backend.activation_layout()),
        y_desc_(config.output(), config.dtype, backend.activation_layout()) {
    DLBENCH_CUDNN_CHECK(cudnnCreatePoolingDescriptor(&pool_desc_));
    // Average pooling counts the padding, as torch.nn.AvgPool2d does by default.
    const cudnnPoolingMode_t mode = config.kind == PoolKind::max ? CUDNN_POOLING_MAX_DETERMINISTIC
                                                                 : CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING;
    DLBENCH_CUDNN_CHECK(cudnnSetPooling2dDescriptor(pool_desc_, mode, CUDNN_NOT_PROPAGATE_NAN, as_int(config.kernel.h),
                                                    as_int(config.kernel.w), as_int(config.padding),
                                                    as_int(config.padding), as_int(config.stride),
                                                    as_int(config.stride)));
  }
  ~CudaPool() override { cudnnDestroyPoolingDescriptor(pool_desc_); }

  // cuDNN's backward finds the arg-max by reading x and y again: the layer keeps both alive.
  std::size_t workspace_bytes() const override { return 0; }
  bool backward_reads_activations() const override { return true; }
  void forward(const Tensor& x, Tensor& y, void*) override {
    require_dtype("pooling", dtype_, {&x, &y});
    DLBENCH_CUDNN_CHECK(
        cudnnPoolingForward(backend_.cudnn(), pool_desc_, &kOne, x_desc_.handle, x.data, &kZero, y_desc_.handle, y.data));
  }
  void backward(const Tensor& x, const Tensor& y, const Tensor& dy, const void*, Tensor& dx) override {
    require_dtype("pooling", dtype_, {&x, &y, &dy, &dx});
    DLBENCH_CUDNN_CHECK(cudnnPoolingBackward(backend_.cudnn(), pool_desc_, &kOne, y_desc_.handle, y.data, y_desc_.handle,
                                             dy.data, x_desc_.handle, x.data, &kZero, x_desc_.handle, dx.data));
  }

 private:
  CudaBackend& backend_;
  DType dtype_;
  TensorDescriptor x_desc_, y_desc_;
  cudnnPoolingDescriptor_t pool_desc_ = nullptr;
};

// Max pooling through dlbench's own kernels (DLBENCH_CUDA_POOL=own, cuda/pool_route.hpp): the
// arg-max kept as one byte an output in the workspace, so backward reads neither x nor y.
class KernelMaxPool final : public PoolOp {
 public:
  KernelMaxPool(CudaBackend& backend, const PoolConfig& config)
      : backend_(backend), dtype_(config.dtype), in_(geometry_of(config.input, backend.activation_layout())),
        out_(geometry_of(config.output(), backend.activation_layout())),
        window_{as_int(config.kernel.h), as_int(config.kernel.w), as_int(config.stride), as_int(config.padding)} {}

  std::size_t workspace_bytes() const override { return static_cast<std::size_t>(out_.numel()); }
  bool backward_reads_activations() const override { return false; }
  void forward(const Tensor& x, Tensor& y, void* workspace) override {
    require_dtype("pooling", dtype_, {&x, &y});
    kernels::max_pool_forward(dtype_, x.data, y.data, static_cast<std::uint8_t*>(workspace), in_, out_, window_,
                              backend_.stream());
  }
  void backward(const Tensor&, const Tensor&, const Tensor& dy, const void* workspace, Tensor& dx) override {
    require_dtype("pooling", dtype_, {&dy, &dx});
    kernels::max_pool_backward(dtype_, dy.data, static_cast<const std::uint8_t*>(workspace), dx.data, in_, out_,
                               window_, backend_.stream());
  }

 private:
  CudaBackend& backend_;
  DType dtype_;
  ActivationGeometry in_, out_;
  kernels::MaxPoolWindow window_;
};

std::string version_string(int v) { return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10); }

}  // namespace

CudaOutOfMemory::CudaOutOfMemory(std::size_t requested_bytes, std::size_t free_bytes, std::size_t total_bytes)
    : CudaError("device memory exhausted: asked for " + std::to_string(requested_bytes) + " bytes, " +
                std::to_string(free_bytes) + " of " + std::to_string(total_bytes) + " free"),
      requested(requested_bytes), free(free_bytes), total(total_bytes) {}

bool cuda_device_usable(std::string* why) {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    if (why != nullptr) *why = std::string("no usable CUDA device: ") + cudaGetErrorString(status);
    cudaGetLastError();
    return false;
  }
  if (count == 0) {
    if (why != nullptr) *why = "no CUDA device on this machine";
    return false;
  }
  return true;
}

std::optional<std::string> CudaBackend::device_lost() const {
  // A poisoned context answers every call with its error; a healthy stream may be busy (not ready).
  cudaError_t e = cudaPeekAtLastError();
  if (!cuda_error_poisons_context(e)) e = cudaStreamQuery(stream_);
  if (!cuda_error_poisons_context(e)) return std::nullopt;
  return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e);
}

CudaBackend::CudaBackend(int device, CudaMath math, DType activations)
    : device_(device), math_(math), activations_(activations),
      layout_(cuda_activation_layout(activations, math, std::getenv("DLBENCH_CUDA_LAYOUT"))),
      batch_norm_route_(batch_norm_calls(layout_, std::getenv("DLBENCH_CUDA_BATCH_NORM"))),
      batch_norm_mode_(worker::batch_norm_mode(layout_, std::getenv("DLBENCH_CUDA_BATCH_NORM_MODE"))),
      conv_calls_api_(worker::conv_calls_api(std::getenv("DLBENCH_CUDA_CONV"))),
      conv_determinism_(worker::conv_determinism(std::getenv("DLBENCH_CUDA_ALGORITHMS"))),
      residual_gradient_(residual_gradient(layout_, std::getenv("DLBENCH_CUDA_RESIDUAL_GRAD"))),
      attention_route_(attention_route("DLBENCH_CUDA_ATTENTION", std::getenv("DLBENCH_CUDA_ATTENTION"))),
      conv_batch_norm_route_(
          conv_batch_norm_route("DLBENCH_CUDA_CONV_BATCH_NORM", std::getenv("DLBENCH_CUDA_CONV_BATCH_NORM"),
                                cuda_conv_batch_norm_default(activations))),
      conv_plans_(std::make_unique<cuda_detail::ConvPlanCache>()),
      weight_copies_(worker::weight_copies(std::getenv("DLBENCH_CUDA_WEIGHT_COPIES"))),
      padded_input_channels_(worker::padded_input_channels(std::getenv("DLBENCH_CUDA_PAD_INPUT_CHANNELS"))),
      pool_route_(worker::pool_route(layout_, std::getenv("DLBENCH_CUDA_POOL"))) {
  // Read before any CUDA resource, as the switches above are: a wrong value costs nothing to refuse.
  const std::optional<std::size_t> requested_workspace =
      requested_workspace_limit(std::getenv("DLBENCH_CUDA_WORKSPACE_MIB"));
  std::string why;
  if (!cuda_device_usable(&why)) throw CudaError(why);
  DLBENCH_CUDA_CHECK(cudaSetDevice(device_));
  DLBENCH_CUDA_CHECK(cudaGetDeviceProperties(&properties_, device_));
  DLBENCH_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  DLBENCH_CUDA_CHECK(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking));
  DLBENCH_CUDA_CHECK(cudaEventCreateWithFlags(&staged_, cudaEventDisableTiming));
  DLBENCH_CUDA_CHECK(cudaEventCreateWithFlags(&staging_free_, cudaEventDisableTiming));
  DLBENCH_CUDNN_CHECK(cudnnCreate(&cudnn_));
  DLBENCH_CUDNN_CHECK(cudnnSetStream(cudnn_, stream_));
  DLBENCH_CUBLAS_CHECK(cublas_lt_library().create(&cublas_lt_));
  // Room for the search of convolution algorithms (cuda/conv_algorithms.hpp).
  workspace_limit_ = conv_workspace_limit(properties_.totalGlobalMem, requested_workspace);
  // Here, not on first use: allocating synchronises, which a captured first step could not.
  step_ = allocate(sizeof(std::uint64_t));
}

CudaBackend::~CudaBackend() {
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  if (graph_exec_ != nullptr) cudaGraphExecDestroy(graph_exec_);
  if (graph_ != nullptr) cudaGraphDestroy(graph_);
  conv_plans_.reset();
  workspace_.reset();
  parameter_scratch_.reset();
  loss_rows_.reset();
  if (cublas_lt_ != nullptr) cublas_lt_library().destroy(cublas_lt_);
  if (cudnn_ != nullptr) cudnnDestroy(cudnn_);
  if (copy_stream_ != nullptr) cudaStreamSynchronize(copy_stream_);
  if (staged_ != nullptr) cudaEventDestroy(staged_);
  if (staging_free_ != nullptr) cudaEventDestroy(staging_free_);
  if (copy_stream_ != nullptr) cudaStreamDestroy(copy_stream_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

std::string CudaBackend::version_info() const {
  int runtime = 0, driver = 0;
  cudaRuntimeGetVersion(&runtime);
  cudaDriverGetVersion(&driver);
  const auto cudnn = static_cast<int>(cudnnGetVersion());
  std::ostringstream out;
  out << "cuda=" << version_string(runtime) << ";driver=" << version_string(driver) << ";cudnn=" << cudnn / 10000
      << "." << cudnn % 10000 / 100 << "." << cudnn % 100 << ";cublasLt=" << cublas_lt_library().get_version()
      << ";gpu=" << properties_.name << ";sm=" << properties_.major << properties_.minor;
  for (const auto& [name, value] : options()) out << ";" << name << "=" << value;
  return out.str();
}

std::map<std::string, std::string> CudaBackend::options() const {
  const auto name = [](auto& table, auto value) { return std::string(choice_name(table, value)); };
  return {{"math", math_ == CudaMath::tf32 ? "tf32" : "fp32"},
          {"activations", name(kCudaLayouts, activation_layout())},
          {"batchNorm", name(kBatchNormCalls, batch_norm_route_)},
          {"batchNormMode", name(kBatchNormModes, batch_norm_mode_)},
          {"conv", name(kConvCallsApis, conv_calls_api_)},
          {"algorithms", name(kConvDeterminisms, conv_determinism_)},
          {"residualGrad", name(kResidualGradients, residual_gradient_)},
          {"attention", name(kAttentionRoutes, attention_route_)},
          {"convBatchNorm", name(kConvBatchNormRoutes, conv_batch_norm_route_)},
          {"weightCopies", name(kWeightCopies, weight_copies_)},
          {"padInputChannels", name(kPaddedInputChannels, padded_input_channels_)},
          {"pool", name(kPoolRoutes, pool_route_)},
          {"workspaceMiB", std::to_string(workspace_limit_ >> 20)}};
}

std::optional<std::string> CudaBackend::nondeterministic_convolutions() const {
  if (conv_determinism_ == ConvDeterminism::deterministic) return std::nullopt;
  return "cuDNN may choose convolution algorithms it marks non-deterministic (DLBENCH_CUDA_ALGORITHMS=deterministic "
         "rules them out)";
}

std::shared_ptr<void> CudaBackend::allocate(std::size_t bytes) {
  void* p = nullptr;
  const std::size_t rounded = (std::max<std::size_t>(bytes, 1) + 255) / 256 * 256;
  const cudaError_t status = cudaMalloc(&p, rounded);
  if (status == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // clear it: the process goes on to report the failure
    std::size_t free = 0, total = 0;
    cudaMemGetInfo(&free, &total);
    throw CudaOutOfMemory(rounded, free, total);
  }
  DLBENCH_CUDA_CHECK(status);
  DLBENCH_CUDA_CHECK(cudaMemsetAsync(p, 0, rounded, stream_));
  DLBENCH_CUDA_CHECK(cudaStreamSynchronize(stream_));
  return std::shared_ptr<void>(p, [](void* q) { cudaFree(q); });
}

void CudaBackend::copy_from_host(void* device_dst, const void* host_src, std::size_t bytes) {
  kept_weights_.wrote(device_dst, bytes);
  DLBENCH_CUDA_CHECK(cudaMemcpyAsync(device_dst, host_src, bytes, cudaMemcpyHostToDevice, stream_));
  DLBENCH_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the host buffer may go away on return
}

void CudaBackend::bind_parameters(const std::shared_ptr<const void>& values, std::int64_t elements) {
  kept_weights_.bind(values, elements);
  kept_weight_memory_.reset();
  // fp32 keeps only its transposed filters (in NHWC); half types keep every parameter rounded.
  const bool keeps = weight_copies_ == WeightCopies::kept && (activations_ != DType::fp32 || layout_ == Layout::nhwc);
  if (keeps) kept_weight_memory_ = allocate(static_cast<std::size_t>(elements) * dtype_size(activations_));
}

const void* CudaBackend::kept_weight(const float* weight, std::int64_t elements, DType dtype,
                                     const std::optional<FilterShape>& arranged) {
  if (weight_copies_ != WeightCopies::kept) return nullptr;
  const std::optional<std::int64_t> offset = kept_weights_.offset_of(weight, elements);
  if (!offset) return nullptr;
  if (dtype == DType::fp32 && !arranged) return weight;
  if (!kept_weight_memory_ || dtype != activations_) return nullptr;
  const WeightCopyPlan plan = kept_weights_.plan(dtype, *offset, arranged);
  if (plan.refused) return nullptr;
  auto* kept = static_cast<std::byte*>(kept_weight_memory_.get());
  if (plan.flat) kernels::convert(kept_weights_.values(), dtype, kept, kept_weights_.elements(), stream_);
  void* copy = kept + static_cast<std::size_t>(*offset) * dtype_size(dtype);
  if (plan.arranged) {
    kernels::filter_from_fp32(weight, dtype, copy, true, static_cast<int>(arranged->out_channels),
                              static_cast<int>(arranged->in_channels), static_cast<int>(arranged->kh),
                              static_cast<int>(arranged->kw), stream_);
  }
  return copy;
}

std::shared_ptr<void> CudaBackend::allocate_host(std::size_t bytes) {
  {
    // Page-locked memory counts against the container's memory limit as soon as it is made.
    const HostMemoryLock lock;
    ensure_host_memory(bytes);
    void* p = nullptr;
    if (cudaHostAlloc(&p, bytes, cudaHostAllocDefault) == cudaSuccess) {
      return std::shared_ptr<void>(p, [](void* q) { cudaFreeHost(q); });
    }
  }  // the lock is released: ordinary memory takes it again
  cudaGetLastError();  // clear it: ordinary memory still works, only slower to copy from
  return Backend::allocate_host(bytes);
}

// An event never recorded is complete: the first staged copy waits for nothing.
void CudaBackend::stage_from_host(void* staging, const void* host_src, std::size_t bytes) {
  DLBENCH_CUDA_CHECK(cudaStreamWaitEvent(copy_stream_, staging_free_, 0));
  DLBENCH_CUDA_CHECK(cudaMemcpyAsync(staging, host_src, bytes, cudaMemcpyHostToDevice, copy_stream_));
  DLBENCH_CUDA_CHECK(cudaEventRecord(staged_, copy_stream_));
}

void CudaBackend::take_staged(void* device_dst, const void* staging, std::size_t bytes) {
  DLBENCH_CUDA_CHECK(cudaStreamWaitEvent(stream_, staged_, 0));
  DLBENCH_CUDA_CHECK(cudaMemcpyAsync(device_dst, staging, bytes, cudaMemcpyDeviceToDevice, stream_));
  DLBENCH_CUDA_CHECK(cudaEventRecord(staging_free_, stream_));
}

void CudaBackend::wait_staged_reads() { DLBENCH_CUDA_CHECK(cudaEventSynchronize(staged_)); }

void CudaBackend::expand_staged_images(void* staging, const void* packed, std::int64_t images, int side, DType dtype,
                                       bool channels_last) {
  // Behind the packed batch's copy on the same stream, and behind the last take_staged, which
  // stage_from_host waited for: `staging` is free to write.
  kernels::expand_packed_images(dtype, channels_last, packed, images, side, staging, copy_stream_);
  DLBENCH_CUDA_CHECK(cudaEventRecord(staged_, copy_stream_));
}

void CudaBackend::copy_to_host(void* host_dst, const void* device_src, std::size_t bytes) {
  DLBENCH_CUDA_CHECK(cudaMemcpyAsync(host_dst, device_src, bytes, cudaMemcpyDeviceToHost, stream_));
  DLBENCH_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::poison(void* device_dst, std::size_t bytes) {
  kept_weights_.wrote(device_dst, bytes);
  DLBENCH_CUDA_CHECK(cudaMemsetAsync(device_dst, 0xFF, bytes, stream_));  // queued, so a step graph captures it
}

void CudaBackend::synchronize() { DLBENCH_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

namespace {

// One event per mark, recorded on the stream and kept for the next repeat; only drain(true)
// waits, for the last one.
class CudaEventMarks final : public StepMarks {
 public:
  explicit CudaEventMarks(cudaStream_t stream) : stream_(stream) {}
  ~CudaEventMarks() override {
    for (cudaEvent_t e : events_) cudaEventDestroy(e);
  }
  CudaEventMarks(const CudaEventMarks&) = delete;
  CudaEventMarks& operator=(const CudaEventMarks&) = delete;

  void mark() override {
    if (used_ == events_.size()) {
      cudaEvent_t e = nullptr;
      DLBENCH_CUDA_CHECK(cudaEventCreate(&e));  // with timing: the default flags
      events_.push_back(e);
    }
    DLBENCH_CUDA_CHECK(cudaEventRecord(events_[used_++], stream_));
  }
  std::vector<double> drain(bool wait) override {
    std::vector<double> seconds;
    if (wait && used_ > 0) DLBENCH_CUDA_CHECK(cudaEventSynchronize(events_[used_ - 1]));
    for (std::size_t i = returned_ + 1; i < used_; ++i) {
      if (!wait) {
        const cudaError_t status = cudaEventQuery(events_[i]);  // without waiting
        if (status == cudaErrorNotReady) break;
        DLBENCH_CUDA_CHECK(status);
      }
      float ms = 0;
      DLBENCH_CUDA_CHECK(cudaEventElapsedTime(&ms, events_[i - 1], events_[i]));
      seconds.push_back(static_cast<double>(ms) / 1e3);
      returned_ = i;
    }
    if (wait) used_ = returned_ = 0;
    return seconds;
  }

 private:
  cudaStream_t stream_;
  std::vector<cudaEvent_t> events_;
  std::size_t used_ = 0;
  std::size_t returned_ = 0;  // intervals already returned end at events_[returned_]
};

}  // namespace

std::unique_ptr<StepMarks> CudaBackend::make_step_marks() { return std::make_unique<CudaEventMarks>(stream_); }

void* CudaBackend::grow(std::shared_ptr<void>& block, std::size_t& capacity, std::size_t bytes, const char* what) {
  if (bytes > capacity) {
    // Allocation and synchronisation are not allowed in a capture: the eager first step grows it.
    if (capturing_) throw CudaError(std::string("the ") + what + " would have to grow while a step is captured");
    DLBENCH_CUDA_CHECK(cudaStreamSynchronize(stream_));  // the old block may still be in use
    block.reset();
    block = allocate(bytes);
    capacity = bytes;
  }
  return block.get();
}

void* CudaBackend::workspace(std::size_t bytes) { return grow(workspace_, workspace_bytes_, bytes, "workspace"); }

void* CudaBackend::parameter_scratch(std::size_t bytes) {
  return grow(parameter_scratch_, parameter_scratch_bytes_, bytes, "parameter scratch");
}

std::optional<std::string> cuda_cannot_compute(DType dtype, const cudaDeviceProp& gpu) {
  switch (dtype) {
    case DType::fp32:
    case DType::fp16: return std::nullopt;
    case DType::bf16:
      if (gpu.major >= 8) return std::nullopt;
      return "bf16 needs a GPU of compute capability 8.0 (Ampere) or newer; " + std::string(gpu.name) + " is " +
             std::to_string(gpu.major) + "." + std::to_string(gpu.minor);
    case DType::int32: break;
  }
  return std::string(to_string(dtype)) + " is not an element type activations compute in";
}

std::string cuda_precisions(const std::string& separator) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    count = 0;
  }
  std::string list;
  for (const Precision precision : enum_values<Precision>()) {
    bool everywhere = true;
    for (int device = 0; device < count && everywhere; ++device) {
      cudaDeviceProp gpu{};
      everywhere = cudaGetDeviceProperties(&gpu, device) == cudaSuccess &&
                   !cuda_cannot_compute(activation_dtype(precision), gpu);
    }
    if (everywhere) list += (list.empty() ? "" : separator) + std::string(to_string(precision));
  }
  return list;
}

std::optional<std::string> CudaBackend::cannot_compute(DType dtype) const {
  return cuda_cannot_compute(dtype, properties_);
}

void CudaBackend::require_computable(DType dtype) const {
  if (const auto why = cannot_compute(dtype)) throw std::invalid_argument(*why);
  if (dtype != activations_) {
    throw std::invalid_argument("this cuda backend was made for " + std::string(to_string(activations_)) +
                                " activations (" + (activation_layout() == Layout::nhwc ? "NHWC" : "NCHW") + "); an op on " +
                                std::string(to_string(dtype)) + " needs a backend made for it");
  }
}

std::unique_ptr<Conv2dOp> CudaBackend::make_conv2d(const Conv2dConfig& c) {
  require_computable(c.dtype);
  return cuda_detail::make_conv(*this, c);
}
std::unique_ptr<FusedConv2dOp> CudaBackend::make_fused_conv2d(const FusedConv2dConfig& asked) {
  const std::optional<FusedConv2dConfig> routed_config = routed(conv_batch_norm_route_, asked);
  if (!routed_config) return nullptr;
  const FusedConv2dConfig& c = *routed_config;
  require_computable(c.conv.dtype);
  const auto say_once = [&](const std::string& what, const std::string& why) {
    const std::string line = "dlbench-worker: a " + c.conv.input.to_string() + " convolution to " +
                             std::to_string(c.conv.out_channels) + " channels " + what + ": " + why;
    if (said_apart_.insert(line).second) std::cerr << line + "\n";  // once each, however many blocks ask
  };
  const auto apart = [&](const std::string& why) {
    say_once("runs apart from its batch norms", why);
    return nullptr;
  };
  if (activation_layout() != Layout::nhwc || (c.conv.dtype != DType::fp16 && c.conv.dtype != DType::bf16)) {
    return nullptr;  // the engines fuse half activations in channels-last order only: no block fuses
  }
  // The shift and Σy² start C values after the scale and Σy: cuDNN wants each tensor 16-byte aligned.
  if (c.conv.bias || (c.conv.input.c() * 2) % 16 != 0 || (c.conv.out_channels * 4) % 16 != 0) {
    return apart("a bias, or channels not a multiple of 8");
  }
  try {
    std::string data_gradient_refusal;
    std::unique_ptr<FusedConv2dOp> op = cuda_detail::make_fused_conv(*this, c, data_gradient_refusal);
    if (!data_gradient_refusal.empty()) {
      say_once("takes its batch norm's gradients apart from its data gradient", data_gradient_refusal);
    }
    return op;
  } catch (const CudaOutOfMemory&) {
    throw;
  } catch (const CudaError& e) {  // cuDNN refused the graph, or no engine built a plan for it
    return apart(e.what());
  }
}
std::unique_ptr<BatchNormOp> CudaBackend::make_batch_norm(const BatchNormConfig& c) {
  require_computable(c.dtype);
  if (c.deferred) {  // the own kernels' relu tail
    if (!c.relu || c.add_relu) throw std::invalid_argument("a deferred batch norm has its ReLU and no residual");
    return cuda_detail::make_kernel_batch_norm(*this, c);
  }
  if (c.from_sums) {  // the own kernels, their statistics from the convolution's sums
    if (!c.add_relu) throw std::invalid_argument("a batch norm takes its statistics from sums with the residual only");
    return cuda_detail::make_kernel_batch_norm(*this, c);
  }
  if (c.relu && !fuses_batch_norm_relu()) {
    throw std::invalid_argument("this cuda backend does not fuse batch norm and ReLU (fuses_batch_norm_relu)");
  }
  if (c.add_relu && !fuses_batch_norm_add_relu()) {
    throw std::invalid_argument("this cuda backend does not fuse batch norm, add and ReLU (fuses_batch_norm_add_relu)");
  }
  if (batch_norm_route_ == BatchNormCalls::own) return cuda_detail::make_kernel_batch_norm(*this, c);
  return std::make_unique<CudaBatchNorm>(*this, c);
}
std::unique_ptr<ReluOp> CudaBackend::make_relu(const Shape& shape, DType dtype) {
  require_computable(dtype);
  return std::make_unique<CudaRelu>(*this, shape, dtype);
}
std::unique_ptr<PoolOp> CudaBackend::make_pool(const PoolConfig& c) {
  require_computable(c.dtype);
  if (c.kind == PoolKind::max && pool_route_ == PoolRoute::own && own_max_pool_takes(c.kernel.h, c.kernel.w)) {
    return std::make_unique<KernelMaxPool>(*this, c);
  }
  return std::make_unique<CudaPool>(*this, c);
}
std::unique_ptr<LinearOp> CudaBackend::make_linear(const LinearConfig& c) {
  require_computable(c.dtype);
  return cuda_detail::make_linear(*this, c);
}
std::unique_ptr<AddOp> CudaBackend::make_add(const Shape& shape, DType dtype) {
  require_computable(dtype);
  return std::make_unique<CudaAdd>(*this, shape, dtype, false);
}
std::unique_ptr<AddOp> CudaBackend::make_add_relu(const Shape& shape, DType dtype) {
  require_computable(dtype);
  return std::make_unique<CudaAdd>(*this, shape, dtype, true);
}
std::unique_ptr<ReorderOp> CudaBackend::make_reorder(const Shape& shape, DType dtype, Layout from, Layout to) {
  require_computable(dtype);
  return std::make_unique<CudaReorder>(*this, shape, dtype, from, to);
}

std::unique_ptr<ChannelSliceOp> CudaBackend::make_channel_slice(const Shape& part, std::int64_t whole_channels,
                                                                std::int64_t offset, DType dtype) {
  require_computable(dtype);
  if (offset < 0 || offset + part.c() > whole_channels) {
    throw std::invalid_argument("channel slice [" + std::to_string(offset) + ", " + std::to_string(offset + part.c()) +
                                ") is outside " + std::to_string(whole_channels) + " channels");
  }
  return std::make_unique<CudaChannelSlice>(*this, part, whole_channels, offset, dtype);
}

namespace {

class CudaResize final : public ResizeOp {
 public:
  CudaResize(CudaBackend& backend, const ResizeConfig& c)
      : backend_(backend), dtype_(c.dtype), in_(geometry_of(c.input, backend.activation_layout())),
        out_h_(as_int(c.output.h)), out_w_(as_int(c.output.w)) {}
  void forward(const Tensor& x, Tensor& y) override {
    require_dtype("bilinear resize", dtype_, {&x, &y});
    kernels::bilinear_resize_forward(dtype_, x.data, y.data, in_, out_h_, out_w_, backend_.stream());
  }
  void backward(const Tensor& dy, Tensor& dx) override {
    require_dtype("bilinear resize", dtype_, {&dy, &dx});
    kernels::bilinear_resize_backward(dtype_, dy.data, dx.data, in_, out_h_, out_w_, backend_.stream());
  }

 private:
  CudaBackend& backend_;
  DType dtype_;
  ActivationGeometry in_;
  int out_h_, out_w_;
};

}  // namespace

std::unique_ptr<ResizeOp> CudaBackend::make_bilinear_resize(const ResizeConfig& c) {
  require_computable(c.dtype);
  return std::make_unique<CudaResize>(*this, c);
}


// Queued, not waited for: the update reads the verdict on the device.
void CudaBackend::unscale_and_check_finite(float* grads, std::int64_t count, LossScaleState* state,
                                           const LossScalingConfig& config) {
  kernels::unscale_and_check_finite(grads, count, state, config, stream_);
}

// Counted where the values are: a layer's output is not brought to the host to be looked at.
NonFiniteCount CudaBackend::count_non_finite(const Tensor& t) {
  if (t.empty() || t.dtype == DType::int32) return {};
  if (!non_finite_counts_) non_finite_counts_ = allocate(2 * sizeof(unsigned long long));
  auto* counts = static_cast<unsigned long long*>(non_finite_counts_.get());
  DLBENCH_CUDA_CHECK(cudaMemsetAsync(counts, 0, 2 * sizeof(unsigned long long), stream_));
  kernels::count_non_finite(t.dtype, t.data, t.numel(), counts, stream_);
  unsigned long long host[2] = {0, 0};
  copy_to_host(host, counts, sizeof host);  // waits for the count
  return {static_cast<std::int64_t>(host[0]), static_cast<std::int64_t>(host[1])};
}

void CudaBackend::adaptive_avg_pool_forward(const Tensor& x, Tensor& y) {
  require_dtype("adaptive average pooling", x.dtype, {&x, &y});
  kernels::adaptive_avg_pool_forward(x.dtype, x.data, y.data, geometry_of(x.shape, activation_layout()), as_int(y.shape.h()),
                                     as_int(y.shape.w()), stream_);
}

void CudaBackend::adaptive_avg_pool_backward(const Tensor& dy, Tensor& dx) {
  require_dtype("adaptive average pooling", dy.dtype, {&dy, &dx});
  kernels::adaptive_avg_pool_backward(dy.dtype, dy.data, dx.data, geometry_of(dx.shape, activation_layout()), as_int(dy.shape.h()),
                                      as_int(dy.shape.w()), stream_);
}

void CudaBackend::begin_step(std::uint64_t step) {
  auto* counter = static_cast<std::uint64_t*>(step_.get());
  // A captured step must not freeze its number: the graph holds "one more" instead, and each
  // replay follows the step before it. Eagerly the value is set, in stream order.
  if (capturing_) {
    kernels::advance_step(counter, stream_);
  } else {
    kernels::set_step(counter, step, stream_);
  }
}

// A channels-last activation's mask is keyed on logical NCHW indices: the CPU's (NHWC) and
// fp32's (NCHW) drop the same elements.
void CudaBackend::dropout(const void* in, Tensor& y, float p, std::uint64_t layer_seed) {
  const auto* step = static_cast<const std::uint64_t*>(step_.get());
  if (y.shape.rank == 4 && y.layout == Layout::nhwc) {
    kernels::dropout_channels_last(y.dtype, in, y.data, geometry_of(y.shape, Layout::nhwc), p, layer_seed, step, stream_);
  } else {
    kernels::dropout(y.dtype, in, y.data, y.numel(), p, layer_seed, step, stream_);
  }
}

void CudaBackend::dropout_forward(const Tensor& x, Tensor& y, float p, std::uint64_t layer_seed) {
  require_dtype("dropout", x.dtype, {&x, &y});
  dropout(x.data, y, p, layer_seed);
}

void CudaBackend::dropout_backward(const Tensor& dy, Tensor& dx, float p, std::uint64_t layer_seed) {
  require_dtype("dropout", dy.dtype, {&dy, &dx});
  dropout(dy.data, dx, p, layer_seed);
}

void CudaBackend::dropout_mask(Tensor& mask, float p, std::uint64_t layer_seed) {
  require_dtype("dropout mask", DType::fp32, {&mask});
  dropout(nullptr, mask, p, layer_seed);
}

void CudaBackend::softmax_cross_entropy(const Tensor& logits, const std::int32_t* labels, Tensor& dlogits,
                                         const float* gradient_scale, LossTerm term) {
  const bool per_pixel = logits.shape.rank == 4;
  const auto rows = static_cast<std::size_t>(per_pixel ? logits.numel() / logits.shape.c() : logits.shape.n());
  if (term.adds_to_step_loss && loss_segments_.empty()) {
    throw std::invalid_argument("a loss term adds to the step's loss before any term started it");
  }
  if (!term.adds_to_step_loss) loss_segments_.clear();
  const std::size_t offset = loss_segments_.empty() ? 0 : loss_segments_.back().offset + loss_segments_.back().rows;
  if (offset + rows > loss_rows_capacity_) {  // the first step only: a captured step finds room
    if (capturing_) throw CudaError("the loss rows would have to grow while a step is captured");
    auto grown = allocate((offset + rows) * sizeof(float));
    if (offset > 0) {  // the step's earlier terms
      DLBENCH_CUDA_CHECK(cudaMemcpyAsync(grown.get(), loss_rows_.get(), offset * sizeof(float),
                                         cudaMemcpyDeviceToDevice, stream_));
      DLBENCH_CUDA_CHECK(cudaStreamSynchronize(stream_));  // before the old block is freed
    }
    loss_rows_ = std::move(grown);
    loss_rows_capacity_ = offset + rows;
  }
  if (!loss_scratch_) loss_scratch_ = allocate(sizeof(float));
  auto* loss_rows = static_cast<float*>(loss_rows_.get()) + offset;
  // Each row's weighted loss is written on the device and stays there: an eager step and a
  // graph replay alike leave the step's whole loss in loss_rows for last_loss().
  require_dtype("softmax cross-entropy", logits.dtype, {&logits, &dlogits});
  auto* valid = static_cast<int*>(loss_scratch_.get());
  DLBENCH_CUDA_CHECK(cudaMemsetAsync(valid, 0, sizeof(int), stream_));
  if (per_pixel) {
    kernels::pixel_softmax_cross_entropy(logits.dtype, logits.data, labels, dlogits.data, loss_rows, valid,
                                         geometry_of(logits.shape, activation_layout()), kIgnoreLabel, gradient_scale, term.weight,
                                         stream_);
  } else {
    kernels::softmax_cross_entropy(logits.dtype, logits.data, labels, dlogits.data, loss_rows, valid,
                                   as_int(static_cast<std::int64_t>(rows)), as_int(logits.shape.c()), gradient_scale,
                                   term.weight, stream_);
  }
  loss_segments_.push_back({offset, rows});
}

// Each segment's rows are summed on the device: one float per loss term crosses to the host,
// not a loss per pixel.
float CudaBackend::last_loss() {
  if (loss_segments_.empty()) return std::numeric_limits<float>::quiet_NaN();
  if (loss_segments_.size() > loss_sums_capacity_) {
    loss_sums_ = allocate((kernels::kSumPartials + loss_segments_.size()) * sizeof(float));
    loss_sums_capacity_ = loss_segments_.size();
  }
  // The segments' sums take turns with one scratch: the stream orders them.
  auto* partials = static_cast<float*>(loss_sums_.get());
  float* sums = partials + kernels::kSumPartials;
  const auto* rows = static_cast<const float*>(loss_rows_.get());
  for (std::size_t i = 0; i < loss_segments_.size(); ++i) {
    kernels::sum(rows + loss_segments_[i].offset, static_cast<std::int64_t>(loss_segments_[i].rows), sums + i, partials,
                 stream_);
  }
  std::vector<float> host(loss_segments_.size());
  copy_to_host(host.data(), sums, host.size() * sizeof(float));  // waits for the step
  float loss = 0.0f;
  for (std::size_t i = 0; i < host.size(); ++i) loss += host[i] / static_cast<float>(loss_segments_[i].rows);
  return loss;
}

void CudaBackend::begin_capture() {
  if (graph_exec_ != nullptr) throw CudaError("a step is already captured");
  DLBENCH_CUDA_CHECK(cudaStreamSynchronize(stream_));
  // Thread-local mode: another thread's CUDA calls (NCCL's proxy, the metrics server) are not
  // pulled into this capture.
  DLBENCH_CUDA_CHECK(cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal));
  capturing_ = true;
  kept_weights_.values_changed();  // the graph makes its own copies, at every replay
}

void CudaBackend::end_capture() {
  capturing_ = false;
  DLBENCH_CUDA_CHECK(cudaStreamEndCapture(stream_, &graph_));
  DLBENCH_CUDA_CHECK(cudaGraphInstantiate(&graph_exec_, graph_, 0));
  DLBENCH_CUDA_CHECK(cudaGraphUpload(graph_exec_, stream_));
}

void CudaBackend::replay() {
  if (graph_exec_ == nullptr) throw CudaError("replay() without a captured step");
  DLBENCH_CUDA_CHECK(cudaGraphLaunch(graph_exec_, stream_));
  kept_weights_.values_changed();  // the replayed update wrote them
}

void CudaBackend::sgd_update(float* values, const float* grads, float* momentum_buffer, std::int64_t count,
                             const SgdConfig& c, std::uint64_t update_number, const LossScaleState* loss_scale) {
  // Without a warm-up the rate is one number at every replay; with one, the kernel reads the
  // update's number where a replayed step advances it.
  const std::uint64_t* update = c.warmup_updates > 0 ? queue_update_number(update_number) : nullptr;
  kept_weights_.wrote(values, static_cast<std::size_t>(count) * sizeof(float));
  kernels::sgd(values, grads, momentum_buffer, count, c.learning_rate, c.momentum, c.weight_decay, update_number == 1,
               c.warmup_updates, update, loss_scale, stream_);
}

}  // namespace dlbench::worker